"""Personalisation benchmark data: loaders on the real review files, metadata in the documented
format, item records, downloads from a local hub server, user selection and leakage control."""

from __future__ import annotations

import gzip
import hashlib
import json
import sys
from collections import Counter
from pathlib import Path

import pytest

from shopping_companion.errors import ConfigError
from shopping_companion.personalization.data import (
    Review,
    build_items,
    category_from_review_path,
    fetch_category_files,
    iter_reviews_2023,
    load_meta_2023,
    load_multicategory_histories,
    load_user_histories_2023,
    ReviewLoadReport,
)
from shopping_companion.personalization.selection import (
    LeakageError,
    SelectionConfig,
    assert_no_leak,
    select_cases,
    visible_corpus,
)

_REPO = str(Path(__file__).resolve().parents[2])
if _REPO not in sys.path:
    sys.path.insert(0, _REPO)
from tests.hub_server import HubServer  # noqa: E402


@pytest.fixture(scope="module")
def sub_boxes(data_dir):
    rep = ReviewLoadReport("x")
    revs = list(iter_reviews_2023(data_dir / "reviews" / "amazon2023_Subscription_Boxes.jsonl.gz", report=rep))
    return revs, rep


def test_official_review_file_loads_every_record(sub_boxes):
    revs, rep = sub_boxes
    assert rep.n_records == 16216
    assert rep.n_loaded + sum(rep.bad.values()) == 16216
    assert rep.n_loaded >= 16000  # the release has a few exact duplicates (same user, item, time)
    assert set(rep.bad) <= {"duplicate_review"}
    assert len({r.user_id for r in revs}) == 15237
    assert len({r.parent_asin for r in revs}) == 641
    first = revs[0]
    assert first.category == "Subscription_Boxes" and first.parent_asin == "B09WC47S3V" and first.rating == 1.0
    assert first.title == "USELESS" and first.timestamp == 1602133857705 and first.verified_purchase is True
    assert all(1 <= r.rating <= 5 for r in revs)


def test_category_from_file_names():
    assert category_from_review_path("x/amazon2023_Subscription_Boxes.jsonl.gz") == "Subscription_Boxes"
    assert category_from_review_path("All_Beauty.jsonl") == "All_Beauty"
    assert category_from_review_path("meta_All_Beauty.jsonl") is None


def test_bad_review_records_are_counted_not_dropped_silently(tmp_path):
    p = tmp_path / "Tiny.jsonl"
    good = {
        "rating": 5.0,
        "title": "Nice",
        "text": "Works<br />well",
        "images": [],
        "asin": "A1",
        "parent_asin": "P1",
        "user_id": "U1",
        "timestamp": 5,
        "helpful_vote": 0,
        "verified_purchase": True,
    }
    lines = [
        json.dumps(good),
        "{not json",
        json.dumps({**good, "rating": 7}),
        json.dumps({**good, "user_id": ""}),
        json.dumps(good),
        "",
        json.dumps([1]),
    ]
    p.write_text("\n".join(lines) + "\n")
    rep = ReviewLoadReport(str(p))
    out = list(iter_reviews_2023(p, report=rep))
    assert len(out) == 1 and out[0].text == "Works well"
    assert rep.bad == {
        "invalid_json": 1,
        "invalid_rating": 1,
        "missing_user_id": 1,
        "duplicate_review": 1,
        "empty_line": 1,
        "not_an_object": 1,
    }
    with pytest.raises(ConfigError, match="category"):
        list(iter_reviews_2023(tmp_path / "weird-name.txt"))


def test_user_history_files_load(data_dir):
    revs, rep = load_user_histories_2023(data_dir / "reviews" / "amazon2023_Beauty_user_histories.jsonl.gz", "Beauty")
    assert len({r.user_id for r in revs}) == 675
    assert len(revs) + rep.bad.get("duplicate_review", 0) == 4060
    assert len({r.parent_asin for r in revs}) <= 3208
    multi, mrep = load_multicategory_histories(
        data_dir / "reviews" / "amazon2023_multicategory_user_histories.jsonl.gz"
    )
    assert len({(r.user_id, r.category) for r in multi}) == 691  # 691 lines, 354 distinct users
    assert len({r.category for r in multi}) == 24
    assert len(multi) + sum(mrep.bad.values()) == 691 * 5
    assert all(r.product and r.product.get("title") for r in multi[:50])
    only = load_multicategory_histories(
        data_dir / "reviews" / "amazon2023_multicategory_user_histories.jsonl.gz", ["Video_Games"]
    )[0]
    assert {r.category for r in only} == {"Video_Games"} and len({r.user_id for r in only}) == 30


META = [
    {
        "main_category": "All Beauty",
        "title": "Lavender Body Oil",
        "average_rating": 4.4,
        "rating_number": 12,
        "features": ["Cold pressed", "Glass bottle"],
        "description": ["Relaxing lavender oil."],
        "price": "$12.50",
        "images": [
            {"large": "https://img/1.jpg", "thumb": "t", "hi_res": None, "variant": "MAIN"},
            {"large": "https://img/2.jpg", "variant": "PT01"},
        ],
        "videos": [],
        "store": "Calm Co",
        "categories": ["Beauty", "Oils"],
        "details": {"Size": "4 oz"},
        "parent_asin": "P1",
        "bought_together": None,
    },
    {
        "main_category": "All Beauty",
        "title": "Unreviewed Soap",
        "price": None,
        "images": [],
        "store": None,
        "categories": [],
        "details": {},
        "parent_asin": "P9",
        "features": [],
        "description": [],
    },
]


def test_meta_loader_reads_the_documented_format(tmp_path):
    p = tmp_path / "meta_All_Beauty.jsonl.gz"
    with gzip.open(p, "wt") as fh:
        for m in META:
            fh.write(json.dumps(m) + "\n")
        fh.write("{broken\n")
    items, rep = load_meta_2023(p)
    assert set(items) == {"P1", "P9"} and rep.bad.get("invalid_json") == 1
    it = items["P1"]
    assert it.title == "Lavender Body Oil" and it.brand == "Calm Co" and it.price == 12.5
    assert it.categories == ["Beauty", "Oils"] and it.features == ["Cold pressed", "Glass bottle"]
    assert it.image_urls == ["https://img/1.jpg", "https://img/2.jpg"] and it.title_source == "metadata"
    assert it.category == "All_Beauty" and it.average_rating == 4.4
    only, _ = load_meta_2023(p, asins={"P9"})
    assert set(only) == {"P9"}


def _rv(uid, asin, rating, ts, text="some words here", title="t", cat="C", product=None, helpful=0):
    return Review(
        review_id=f"{uid}:{asin}:{ts}",
        user_id=uid,
        parent_asin=asin,
        category=cat,
        rating=rating,
        title=title,
        text=text,
        timestamp=ts,
        product=product,
        helpful_vote=helpful,
    )


def test_item_records_prefer_metadata_then_history_then_reviews():
    from shopping_companion.personalization.data import ItemRecord

    meta = {"P1": ItemRecord(asin="P1", category="C", title="Meta Title", title_source="metadata")}
    revs = [
        _rv("u1", "P1", 5, 1),
        _rv("u1", "P2", 4, 2, product={"title": "History Title", "brand": "B", "price": "$3.00"}),
        _rv("u2", "P3", 5, 3, title="Secret target title", helpful=9),
        _rv("u3", "P3", 4, 4, title="Visible title"),
    ]
    items = build_items("C", revs, meta, hidden={"u2:P3:3"})
    assert items["P1"].title == "Meta Title"
    assert items["P2"].title == "History Title" and items["P2"].title_source == "history" and items["P2"].price == 3.0
    assert items["P3"].title_source == "reviews" and "P3" in items["P3"].title
    assert "Visible title" in items["P3"].description and "Secret" not in items["P3"].description


def test_download_review_and_meta_files_from_a_local_hub(tmp_path, monkeypatch):
    rev = (
        json.dumps(
            {
                "rating": 4.0,
                "title": "ok",
                "text": "fine",
                "images": [],
                "asin": "A",
                "parent_asin": "P1",
                "user_id": "U",
                "timestamp": 1,
                "helpful_vote": 0,
                "verified_purchase": True,
            }
        )
        + "\n"
    ).encode()
    meta = (json.dumps(META[0]) + "\n").encode()
    with HubServer() as hub:
        hub.files["raw/review_categories/Tiny_Cat.jsonl"] = rev
        hub.files["raw/meta_categories/meta_Tiny_Cat.jsonl"] = meta
        hub.etags["raw/review_categories/Tiny_Cat.jsonl"] = hashlib.sha256(rev).hexdigest()
        files = fetch_category_files("Tiny_Cat", cache=tmp_path / "c", endpoint=hub.endpoint, progress=False)
        again = fetch_category_files("Tiny_Cat", cache=tmp_path / "c", endpoint=hub.endpoint, progress=False)
        assert hub.count("raw/review_categories/Tiny_Cat.jsonl") == 1  # second call reused the verified copy
    assert files == again
    revs = list(iter_reviews_2023(files["reviews"]))
    assert [r.parent_asin for r in revs] == ["P1"] and revs[0].category == "Tiny_Cat"
    items, _ = load_meta_2023(files["meta"])
    assert items["P1"].category == "Tiny_Cat"


def test_selection_on_real_reviews_follows_the_paper(sub_boxes):
    revs, _ = sub_boxes
    cfg = SelectionConfig()
    cases = select_cases(revs, "Subscription_Boxes", cfg)
    assert len(cases) == 10
    counts = Counter(r.user_id for r in revs)
    top100 = {u for u, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:100]}
    for c in cases:
        assert c.user_id in top100 and counts[c.user_id] >= 2
        assert c.target_review.rating >= 4 and c.target_review.user_id == c.user_id
        assert all(r.parent_asin != c.target_asin for r in c.visible_reviews)
        assert all(r.timestamp <= c.target_review.timestamp for r in c.visible_reviews)
        assert len(c.visible_reviews) >= 1
        # latest positively rated review is the target
        pos = [r for r in revs if r.user_id == c.user_id and r.rating >= 4]
        assert c.target_review.timestamp == max(r.timestamp for r in pos)
    assert [c.case_id for c in select_cases(revs, "Subscription_Boxes", cfg)] == [c.case_id for c in cases]
    other = select_cases(revs, "Subscription_Boxes", SelectionConfig(seed=1))
    assert [c.case_id for c in other] != [c.case_id for c in cases]
    vis = visible_corpus(revs, cases)
    hidden = {(c.user_id, c.target_asin) for c in cases}
    assert not any((r.user_id, r.parent_asin) in hidden for r in vis)
    assert len(vis) == len(revs) - sum(1 for r in revs if (r.user_id, r.parent_asin) in hidden)


def test_selection_skips_users_without_a_positive_item_and_keeps_fewer_when_few_qualify():
    revs = [
        _rv("a", "P1", 2, 1),
        _rv("a", "P2", 3, 2),  # no positive review: skipped
        _rv("b", "P0", 3, 0),
        _rv("b", "P1", 5, 1),
        _rv("b", "P2", 1, 2),  # target P1
        _rv("c", "P3", 5, 1),  # one review: not eligible
        _rv("d", "P4", 5, 1),
        _rv("d", "P5", 2, 2),
    ]  # nothing written before the target
    cases = select_cases(revs, "C", SelectionConfig(users_per_category=10))
    assert [c.user_id for c in cases] == ["b"]
    # pre-purchase: only what b wrote before buying the target is visible
    assert cases[0].target_asin == "P1" and [r.parent_asin for r in cases[0].visible_reviews] == ["P0"]
    every = select_cases(revs, "C", SelectionConfig(users_per_category=10, before_target_only=False))
    assert [(c.user_id, [r.parent_asin for r in c.visible_reviews]) for c in every] == [
        ("b", ["P0", "P2"]),
        ("d", ["P5"]),
    ]
    with pytest.raises(ConfigError, match="category"):
        select_cases(revs, "Nope")
    with pytest.raises(ValueError):
        SelectionConfig(min_reviews=1)


def test_assert_no_leak_detects_hidden_review_text():
    long = "the pink velvet case arrived with a cracked hinge and I still loved the color a lot"
    revs = [_rv("b", "P1", 5, 1, text=long), _rv("b", "P2", 1, 0)]
    case = select_cases(revs, "C")[0]
    assert_no_leak(case, ["nothing to see", "velvet case"])
    with pytest.raises(LeakageError):
        assert_no_leak(case, ["prefix " + " ".join(long.split()[2:14]) + " suffix"])


def test_repair_torn_tail_cuts_only_a_partial_last_line(tmp_path):
    from shopping_companion.personalization.runner import read_dialogues, repair_torn_tail

    p = tmp_path / "d.jsonl"
    assert repair_torn_tail(p) == 0  # missing file
    good = '{"case_id": "a", "variant": "full", "memory": "full"}\n'
    p.write_text(good * 2)
    assert repair_torn_tail(p) == 0 and p.read_text() == good * 2
    p.write_text(good + '{"case_id": "b", "vari')
    assert repair_torn_tail(p) == len('{"case_id": "b", "vari')
    assert p.read_text() == good
    with open(p, "a") as f:  # the next append starts on its own line
        f.write(good.replace('"a"', '"b"'))
    assert {d["case_id"] for d in read_dialogues(p)} == {"a", "b"}
    p.write_text('{"torn without any newline')
    assert repair_torn_tail(p) > 0 and p.read_text() == ""
