"""Catalog loader, Lucene index and ProductSearch, on the real catalog (offline, CPU).

The full-catalog index is built once per test session (~10 s on 2 cores) into a temporary
directory (shared with tests/conftest.py's ``catalog_index_dir`` when that fixture exists); small
indexes for corruption/staleness tests are built from records the tests write.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import random
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from shopping_companion.catalog.index import (
    MANIFEST_NAME,
    build_index,
    contents_text,
    open_or_build,
    read_manifest,
    verify_index,
    write_manifest,
)
from shopping_companion.catalog.jvm import JVMError, detach_thread, ensure_jvm
from shopping_companion.catalog.loader import catalog_hash, load_products, make_shop_id, products_hash, slugify
from shopping_companion.catalog.search import ProductSearch
from shopping_companion.errors import ProductIndexError, ToolInputError
from shopping_companion.paths import DataDirError, resolve_data_dir
from shopping_companion.types import Product

pytestmark = pytest.mark.slow

# Counts per source from the data README (bigbasket: 27,555 lines, one of them has a NaN title).
EXPECTED_BY_SOURCE = {
    "myntra_styles": 44441,
    "bigbasket": 27554,
    "myntra_catalog": 12491,
    "amazon2018_minionerec": 7145,
    "bestbuy_algolia": 3291,
    "ikea_sa": 2962,
    "adidas_us": 845,
}


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def catalog_path() -> Path:
    try:
        p = resolve_data_dir() / "catalog" / "products.jsonl.gz"
    except DataDirError as e:  # pragma: no cover - depends on the checkout
        pytest.skip(f"real catalog not available: {e}")
    if not p.is_file():  # pragma: no cover
        pytest.skip(f"real catalog not available at {p}")
    return p


@pytest.fixture(scope="session")
def loaded(catalog_path):
    """``load_products(catalog_path)`` through the catalog cache: the same ``(products, report)``
    (``load_catalog`` parses with ``load_products`` on a miss; its round trip is
    tests/catalog/test_catalog_cache.py's), shared with every other test of the process instead of
    a second full parse of the 98,730 lines."""
    from shopping_companion.catalog.cache import load_catalog

    return load_catalog(catalog_path)


@pytest.fixture(scope="session")
def products(loaded) -> list[Product]:
    return loaded[0]


@pytest.fixture(scope="session")
def by_id(products) -> dict[str, Product]:
    return {p.product_id: p for p in products}


@pytest.fixture(scope="session")
def full_index(request, catalog_path, tmp_path_factory) -> Path:
    """The full catalog's index: the session-wide one of tests/conftest.py when it provides one
    (so the suite builds it once), else built here."""
    try:
        return request.getfixturevalue("catalog_index_dir")
    except pytest.FixtureLookupError:
        d = tmp_path_factory.mktemp("catalog_index") / "products"
        open_or_build(catalog_path, d, threads=2)
        return d


@pytest.fixture(scope="session")
def searcher(full_index):
    s = ProductSearch(full_index)
    yield s
    s.close()


@pytest.fixture(scope="session")
def analyze(full_index):
    """Tokens of a text under the index's analyzer (Anserini's default English analyzer)."""
    ensure_jvm()
    from jnius import autoclass

    analyzer = autoclass("io.anserini.analysis.DefaultEnglishAnalyzer").newDefaultInstance()
    utils = autoclass("io.anserini.analysis.AnalyzerUtils")

    def run(text: str) -> set[str]:
        return set(utils.analyze(analyzer, text).toArray())

    return run


def _record(uid: str, title="A product", **kw) -> dict:
    rec = {
        "uid": uid,
        "source": uid.split(":")[0],
        "shop": "Test Shop (US)",
        "id": uid.split(":")[1],
        "title": title,
        "brand": "Acme",
        "seller": None,
        "price": 10.0,
        "list_price": None,
        "currency": "USD",
        "category_path": ["Home", "Kitchen"],
        "description": "plain description",
        "features": [],
        "attributes": {},
        "rating": None,
        "rating_count": None,
        "url": None,
        "image": None,
    }
    rec.update(kw)
    return rec


def _write_catalog(path: Path, records: list, raw_lines: tuple[str, ...] = ()) -> Path:
    lines = [json.dumps(r) for r in records] + list(raw_lines)
    data = ("\n".join(lines) + "\n").encode()
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(data))
    else:
        path.write_bytes(data)
    return path


def _small_catalog(path: Path, n: int = 60) -> Path:
    words = ["kettle", "toaster", "blender", "mixer", "grinder", "juicer"]
    recs = [
        _record(
            f"test:{i}", title=f"Steel {words[i % len(words)]} model {i}", price=float(5 + i), brand=f"Brand{i % 4}"
        )
        for i in range(n)
    ]
    return _write_catalog(path, recs)


# --------------------------------------------------------------------------- loader


def test_loader_counts_per_source(loaded):
    products, report = loaded
    assert report.by_source == EXPECTED_BY_SOURCE
    assert report.n_loaded == len(products) == sum(EXPECTED_BY_SOURCE.values()) == 98729
    assert report.n_lines == 98730
    assert report.bad == {"missing_title": 1}
    assert report.examples[0][1] == "missing_title" and "bigbasket:14364" in report.examples[0][2]
    assert report.n_lines == report.n_loaded + report.n_bad
    assert len({p.product_id for p in products}) == len(products)


def test_loader_shop_id_rules(products, by_id):
    assert by_id["myntra_styles:10000"].shop_id == "myntra-india/mayazen"  # seller known
    nike = [p for p in products if p.source == "myntra_styles" and p.brand == "Nike" and p.seller is None]
    assert nike and all(p.shop_id == "myntra-india/brand-nike" for p in nike)
    assert by_id["adidas_us:GY2630"].shop_id == "adidas-com-us/adidas-united-states"
    assert by_id["bigbasket:13778"].shop_id == "bigbasket-india/brand-hart-beat"
    no_brand = [p for p in products if p.brand is None and p.seller is None]
    assert no_brand and all(p.shop_id == slugify(p.shop) for p in no_brand)
    for p in products:
        assert p.shop_id == make_shop_id(p.shop, p.seller, p.brand)
        assert p.shop_id.startswith(slugify(p.shop))
        assert p.shop_id == p.shop_id.lower() and " " not in p.shop_id
    # stable and readable for non-ASCII and symbol-laden names
    assert make_shop_id("Best Buy (US)", None, "Insignia™") == "best-buy-us/brand-insignia"
    assert slugify("POÄNG") == "poang"
    assert slugify("日本") == slugify("日本") and slugify("日本").startswith("x")


def test_loader_attributes_and_options(by_id, products):
    skirt = by_id["myntra_styles:10000"]
    assert skirt.options == {"size": ["2YRS", "4YRS", "6YRS", "8YRS"]}
    assert "sizes" not in skirt.attributes and "colour1" not in skirt.attributes  # colour1 was "NA"
    assert skirt.attributes["base_colour"] == "White" and skirt.attributes["season"] == "Summer"
    chair = by_id["ikea_sa:19289341"]
    assert chair.attributes["depth_cm"] == "84" and chair.attributes["sellable_online"] == "Yes"
    assert chair.attributes["designer"] == "Tom Dixon"
    assert "sku" not in by_id["bestbuy_algolia:5506627"].attributes
    assert sum(1 for p in products if "size" in p.options) == 44440
    for p in products:
        for k, v in p.attributes.items():
            assert isinstance(v, str) and v and v.upper() != "NA", (p.product_id, k, v)
        for _name, vals in p.options.items():
            assert vals and all(isinstance(x, str) and x and "," not in x for x in vals)
            assert len(vals) == len(set(vals))
    multi = by_id["myntra_styles:36486"].options["size"]
    assert multi[:3] == ["UK4", "UK5", "UK6"] and len(multi) == 8


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz"])
def test_loader_counts_bad_records(tmp_path, suffix):
    good = [_record("t:1"), _record("t:2", price=0.0), _record("t:3", list_price=-5.0)]
    bad_recs = [
        _record("t:4", title=None),
        _record("t:5", title="   "),
        _record("t:6", price=-1.0),
        _record("t:7", price="cheap"),
        _record("t:1", title="duplicate of t:1"),
        {k: v for k, v in _record("t:8").items() if k != "uid"},
        [1, 2, 3],
    ]
    raw_lines = ("{not json", "", '{"uid": "t:9", "title": ')
    path = _write_catalog(tmp_path / f"bad{suffix}", good + bad_recs, raw_lines=raw_lines)
    products, report = load_products(path)
    assert [p.product_id for p in products] == ["t:1", "t:2", "t:3"]
    assert products[2].list_price is None and report.fixed == {"negative_list_price": 1}
    assert report.bad == {
        "missing_title": 2,
        "negative_price": 1,
        "invalid_price": 1,
        "duplicate_uid": 1,
        "missing_uid": 1,
        "not_an_object": 1,
        "invalid_json": 2,
        "empty_line": 1,
    }
    assert report.n_lines == 13 == report.n_loaded + report.n_bad
    assert {e[0] for e in report.examples} == set(range(4, 14))
    assert "negative_price=1" in report.summary()


def test_loader_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_products(tmp_path / "nope.jsonl.gz")


def test_catalog_hash_tracks_content(tmp_path, catalog_path):
    a = _small_catalog(tmp_path / "a.jsonl.gz", 5)
    h1 = catalog_hash(a)
    assert h1 == catalog_hash(a) and h1.startswith("sha256:")
    _small_catalog(a, 6)
    assert catalog_hash(a) != h1
    assert catalog_hash(catalog_path) == catalog_hash(catalog_path)


# --------------------------------------------------------------------------- index + search


def test_full_index_manifest(full_index, catalog_path):
    m = verify_index(full_index)
    assert m.n_docs == 98729
    assert m.catalog_hash == catalog_hash(catalog_path)
    assert (m.bm25_k1, m.bm25_b) == (0.9, 0.4)
    assert "DefaultEnglishAnalyzer" in m.analyzer
    assert m.n_with_price == 98729 - 7145  # the Amazon 2018 records have no price
    assert any(f.startswith("segments_") for f in m.files) and m.size_bytes > 10_000_000
    assert m.build_seconds > 0


def test_full_index_round_trips_products(searcher, products):
    rng = random.Random(3)
    for p in rng.sample(products, 2000):
        assert searcher.get(p.product_id) == p


def test_threaded_build_equals_single_thread_build(tmp_path, products):
    rng = random.Random(5)
    subset = rng.sample(products, 3000)
    build_index(subset, tmp_path / "one", threads=1)
    build_index(subset, tmp_path / "two", threads=2)
    with ProductSearch(tmp_path / "one") as one, ProductSearch(tmp_path / "two") as two:
        for p in subset[:300]:
            assert two.get(p.product_id) == p
        for q, kw in [("black shoes", {}), ("cotton", {"max_price": 800}), ("bag", {"shop_id": subset[0].shop_id})]:
            assert one.search(q, top_k=50, **kw) == two.search(q, top_k=50, **kw)


def test_len_and_get(searcher, by_id):
    assert len(searcher) == 98729
    assert searcher.get("ikea_sa:19289341") == by_id["ikea_sa:19289341"]
    assert searcher.get("nope:1") is None
    with pytest.raises(ToolInputError) as e:
        searcher.get(123)  # type: ignore[arg-type]
    assert e.value.field == "product_id"


KNOWN = {
    "ikea_sa:19289341": "delaktig platform armchair",
    "adidas_us:GY2630": "zx 2k boost shoes",
    "amazon2018_minionerec:Industrial_and_Scientific:3572": "inland abs 3d printer filament 1kg spool",
    "bestbuy_algolia:5506627": "case-mate naked tough case iphone 7",
    "bigbasket:13778": "hart beat lychee candy",
    "myntra_styles:36486": "spinn newport black shoes",
    "myntra_catalog:10160921": "indian terrain brown biker jacket",
}


@pytest.mark.parametrize("product_id,query", sorted(KNOWN.items()))
def test_known_product_in_top5(searcher, product_id, query):
    hits = searcher.search(query, top_k=5)
    assert product_id in [h["product_id"] for h in hits]


def test_hit_shape_and_order(searcher, by_id):
    hits = searcher.search("nike running shoes", top_k=50)
    assert len(hits) == 50
    scores = [h["score"] for h in hits]
    assert scores == sorted(scores, reverse=True) and scores[-1] > 0
    for h in hits:
        assert tuple(h) == ("product_id", "title", "price", "currency", "category", "shop", "shop_id", "brand", "score")
        p = by_id[h["product_id"]]
        assert (h["title"], h["price"], h["currency"], h["shop"], h["shop_id"], h["brand"]) == (
            p.title,
            p.price,
            p.currency,
            p.shop,
            p.shop_id,
            p.brand,
        )
        assert h["category"] == p.category


def test_sampled_titles_are_found(searcher, products):
    """Searching a product's own title finds it in the top 10 for most products (near-duplicate
    titles such as colour variants make some ranks ambiguous)."""
    rng = random.Random(7)
    sample = rng.sample(products, 100)
    found = sum(p.product_id in [h["product_id"] for h in searcher.search(p.title, top_k=10)] for p in sample)
    assert found >= 85


def test_unfiltered_search_matches_bare_anserini(searcher, full_index):
    from pyserini.pyclass import autoclass

    bare = autoclass("io.anserini.search.SimpleSearcher")(str(full_index))
    try:
        for q in ["women red dress", "steel water bottle", "office chair", "usb c charger cable", "black", "nike"]:
            ours = searcher.search(q, top_k=50)
            theirs = bare.search(q, 50)
            assert [h["product_id"] for h in ours] == [h.docid for h in theirs]
            # Anserini rounds scores to 1e-4 and lowers ties by 1e-6 per duplicate
            assert all(abs(a["score"] - b.score) < 2e-4 for a, b in zip(ours, theirs))
    finally:
        bare.close()


def _brute_force(products, analyze, query, shop_id=None, lo=None, hi=None) -> set[str]:
    """Product ids that satisfy the filters and share at least one analysed token with the query."""
    q_tokens = analyze(query)
    out = set()
    for p in products:
        if shop_id is not None and p.shop_id != shop_id:
            continue
        if (lo is not None or hi is not None) and p.price is None:
            continue
        if lo is not None and p.price < lo:
            continue
        if hi is not None and p.price > hi:
            continue
        if q_tokens & analyze(contents_text(p)):
            out.add(p.product_id)
    return out


FILTER_CASES = [
    # (query, shop_id, min_price, max_price): each matches 1..49 products
    ("sports shoes men", "myntra-india/puma-sports-india-pvt-ltd", None, None),
    ("watch", "myntra-india/brand-ice-watch", None, None),
    ("black dress", None, 1234.0, 1240.0),
    ("wallet", None, 1000, 1100),
    ("cotton shirt", None, 399.5, 401.0),
    ("bag", "myntra-india/brand-puma", 0, 600),
    ("backpack", "myntra-india/brand-puma", None, 1200),
]


@pytest.mark.parametrize("query,shop_id,lo,hi", FILTER_CASES)
def test_selective_filters_equal_brute_force(searcher, products, analyze, query, shop_id, lo, hi):
    expected = _brute_force(products, analyze, query, shop_id, lo, hi)
    assert 0 < len(expected) < 50, "test case must be selective"
    hits = searcher.search(query, shop_id=shop_id, min_price=lo, max_price=hi, top_k=50)
    assert {h["product_id"] for h in hits} == expected
    # filtering after an unfiltered search would have lost matches
    unfiltered = {h["product_id"] for h in searcher.search(query, top_k=50)}
    assert not expected <= unfiltered


def test_broad_filters_hold_for_every_hit(searcher, by_id):
    for kwargs in (
        {"shop_id": "myntra-india/brand-nike"},
        {"min_price": 1000, "max_price": 3000},
        {"min_price": 25.5},
        {"max_price": 99.99},
        {"shop_id": "myntra-india/brand-adidas", "min_price": 1500, "max_price": 4000},
    ):
        hits = searcher.search("shoes", top_k=50, **kwargs)
        assert len(hits) == 50, kwargs
        for h in hits:
            p = by_id[h["product_id"]]
            if "shop_id" in kwargs:
                assert p.shop_id == kwargs["shop_id"]
            if "min_price" in kwargs:
                assert p.price is not None and p.price >= kwargs["min_price"]
            if "max_price" in kwargs:
                assert p.price is not None and p.price <= kwargs["max_price"]


def test_price_bounds_are_inclusive_to_the_cent(searcher):
    p = searcher.get("bestbuy_algolia:5506627")
    assert p is not None and p.price == 39.99
    same = searcher.search(p.title, min_price=39.99, max_price=39.99, top_k=50)
    assert p.product_id in {h["product_id"] for h in same}
    assert all(h["price"] == 39.99 for h in same)
    assert p.product_id not in {h["product_id"] for h in searcher.search(p.title, min_price=39.991, top_k=50)}
    assert p.product_id not in {h["product_id"] for h in searcher.search(p.title, max_price=39.98, top_k=50)}


def test_unknown_shop_is_no_hits_not_error(searcher):
    assert searcher.search("shoes", shop_id="no-such-shop/anywhere") == []
    assert len(searcher.search("shoes", shop_id="  ", top_k=3)) == 3  # blank = no filter


@pytest.mark.parametrize(
    "query",
    [
        "title:(shoes AND",
        "shoes*",
        "shoe~2",
        '"red dress',
        "back\\slash shoes",
        "shoes OR",
        "((( shirt",
        '+-&&||!(){}[]^"~*?:\\/ shirt',
        "shoes AND NOT",
        "price:[10 TO 20] watch",
    ],
)
def test_lucene_syntax_is_plain_text(searcher, query):
    hits = searcher.search(query, top_k=5)
    assert len(hits) == 5


@pytest.mark.parametrize("query", ["*", "\\", "???", "the of and"])
def test_query_without_searchable_words_returns_nothing(searcher, query):
    assert searcher.search(query) == []


BAD_SEARCH_ARGS = [
    ({"query": ""}, "query"),
    ({"query": "   \n"}, "query"),
    ({"query": "x" * 2001}, "query"),
    ({"query": None}, "query"),
    ({"query": 42}, "query"),
    ({"query": "shoes", "top_k": 0}, "top_k"),
    ({"query": "shoes", "top_k": 51}, "top_k"),
    ({"query": "shoes", "top_k": "10"}, "top_k"),
    ({"query": "shoes", "top_k": 2.5}, "top_k"),
    ({"query": "shoes", "top_k": True}, "top_k"),
    ({"query": "shoes", "top_k": None}, "top_k"),
    ({"query": "shoes", "min_price": -1}, "min_price"),
    ({"query": "shoes", "min_price": "cheap"}, "min_price"),
    ({"query": "shoes", "min_price": "100"}, "min_price"),
    ({"query": "shoes", "min_price": math.nan}, "min_price"),
    ({"query": "shoes", "min_price": True}, "min_price"),
    ({"query": "shoes", "max_price": -0.01}, "max_price"),
    ({"query": "shoes", "max_price": math.inf}, "max_price"),
    ({"query": "shoes", "max_price": [100]}, "max_price"),
    ({"query": "shoes", "min_price": 50, "max_price": 10}, "min_price"),
    ({"query": "shoes", "shop_id": 123}, "shop_id"),
    ({"query": "shoes", "shop_id": ["myntra-india/brand-nike"]}, "shop_id"),
    ({"query": "red \ud800 shoes"}, "query"),  # a lone surrogate (JSON escapes carry one) is no text
    ({"query": "shoes", "shop_id": "nike\udc00"}, "shop_id"),
]


@pytest.mark.parametrize("kwargs,field", BAD_SEARCH_ARGS)
def test_bad_search_arguments_name_the_field(searcher, kwargs, field):
    with pytest.raises(ToolInputError) as e:
        searcher.search(**kwargs)
    assert e.value.field == field
    assert str(e.value).startswith(f"{field}: ")


def test_valid_edge_arguments(searcher):
    assert len(searcher.search("x" * 1990 + " shoes", top_k=1)) == 1
    # up to 2,000 distinct terms (CJK text is one term per character) stay a valid query
    assert searcher.search("".join(chr(0x4E00 + i) for i in range(2000))) == []
    many = " ".join(f"w{i}" for i in range(700))[:1990] + " shoes"
    assert len(searcher.search(many, top_k=3)) == 3
    assert len(searcher.search("shoes", top_k=50.0)) == 50
    assert len(searcher.search("shoes", min_price=0, max_price=0, top_k=50)) <= 50
    assert searcher.search("shoes", min_price=1e30) == []
    # bounds whose cents overflow a float (v * 100 = inf) are still bounds, not a crash
    assert searcher.search("shoes", min_price=1e307) == [] and searcher.search("shoes", min_price=1.7e308) == []
    assert searcher.search("shoes", max_price=1.7e308, top_k=5) == searcher.search("shoes", top_k=5)


def test_view_returns_full_records(searcher, by_id):
    ids = ["myntra_styles:10000", "ikea_sa:19289341", "nope:1", "myntra_styles:10000", "bestbuy_algolia:5506627"]
    found, unknown = searcher.view(ids)
    assert [p.product_id for p in found] == ["myntra_styles:10000", "ikea_sa:19289341", "bestbuy_algolia:5506627"]
    assert unknown == ["nope:1"]
    for p in found:
        assert p == by_id[p.product_id]  # every field, incl. description, attributes, options
    assert found[0].options == {"size": ["2YRS", "4YRS", "6YRS", "8YRS"]}
    assert found[0].description and found[1].attributes["designer"] == "Tom Dixon"
    assert searcher.view(["nope:2"]) == ([], ["nope:2"])


@pytest.mark.parametrize(
    "ids", [[], "myntra_styles:10000", ["x"] * 21, [1], None, [""], ("ok", None), {"a": 1}, ["ok", "x\ud83d"]]
)
def test_bad_view_arguments(searcher, ids):
    with pytest.raises(ToolInputError) as e:
        searcher.view(ids)
    assert e.value.field == "product_ids"


def test_a_lone_surrogate_is_refused_naming_where_and_a_pair_is_text(searcher):
    with pytest.raises(
        ToolInputError, match=r"query: holds an unpaired surrogate code point \(U\+D800 at character 4\)"
    ):
        searcher.search("red \ud800 shoes")
    with pytest.raises(ToolInputError, match=r"product_ids: item 1 holds an unpaired surrogate"):
        searcher.view(["ok", "x\ud83d"])
    with pytest.raises(ToolInputError, match="product_id: holds an unpaired surrogate"):
        searcher.get("x\udfff")
    assert isinstance(searcher.search("red shoes \U0001f45f"), list)  # a real emoji (a valid pair) is fine


def test_concurrent_searches_match_sequential(searcher):
    queries = ["red dress", "steel bottle", "leather wallet", "running shoes", "basmati rice", "office chair"] * 5
    expected = [searcher.search(q, top_k=20, min_price=100 if i % 2 else None) for i, q in enumerate(queries)]
    results: dict[int, list] = {}

    def worker(offset: int) -> None:
        try:
            for i in range(offset, len(queries), 2):
                results[i] = searcher.search(queries[i], top_k=20, min_price=100 if i % 2 else None)
        finally:
            detach_thread()

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [results[i] for i in range(len(queries))] == expected


# --------------------------------------------------------------------------- lifecycle


def test_stale_index_is_rebuilt_and_fresh_one_reused(tmp_path):
    cat = _small_catalog(tmp_path / "cat.jsonl.gz", 40)
    idx = tmp_path / "idx"
    m1 = open_or_build(cat, idx)
    assert m1.n_docs == 40
    m2 = open_or_build(cat, idx)
    assert m2 == m1  # reused: same manifest, no rebuild
    _small_catalog(cat, 45)  # catalog changed
    m3 = open_or_build(cat, idx)
    assert m3.n_docs == 45 and m3.catalog_hash == catalog_hash(cat) != m1.catalog_hash
    with ProductSearch(idx) as s:
        assert len(s) == 45 and s.get("test:44") is not None
    # a manifest from an older format version is stale too
    old = read_manifest(idx).model_copy(update={"format_version": 0})
    write_manifest(idx, old)
    m4 = open_or_build(cat, idx)
    assert m4.format_version != 0 and m4.built_at >= m3.built_at
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".idx.") and p.is_dir()]  # no temp dirs left


def test_corrupted_index_raises_index_error(tmp_path):
    cat = _small_catalog(tmp_path / "cat.jsonl.gz", 30)
    idx = tmp_path / "idx"
    m = open_or_build(cat, idx)
    # 1. a missing segments file
    seg = next(f for f in m.files if f.startswith("segments_"))
    broken = tmp_path / "broken1"
    shutil.copytree(idx, broken)
    (broken / seg).unlink()
    for call in (lambda: ProductSearch(broken), lambda: open_or_build(cat, broken), lambda: verify_index(broken)):
        with pytest.raises(ProductIndexError, match="corrupted"):
            call()
    # 2. a truncated data file (same name, different size)
    broken2 = tmp_path / "broken2"
    shutil.copytree(idx, broken2)
    biggest = max(m.files, key=m.files.get)
    data = (broken2 / biggest).read_bytes()
    (broken2 / biggest).write_bytes(data[: len(data) // 2])
    with pytest.raises(ProductIndexError, match="corrupted"):
        ProductSearch(broken2)
    # 3. a data file damaged without changing its size: Lucene itself refuses it
    broken3 = tmp_path / "broken3"
    shutil.copytree(idx, broken3)
    si = next(f for f in m.files if f.endswith(".si"))
    (broken3 / si).write_bytes(b"\0" * m.files[si])
    with pytest.raises(ProductIndexError, match="corrupted"):
        ProductSearch(broken3)
    # 4. an unreadable manifest, a foreign directory, a missing directory
    broken4 = tmp_path / "broken4"
    shutil.copytree(idx, broken4)
    (broken4 / MANIFEST_NAME).write_text("{oops")
    with pytest.raises(ProductIndexError, match="unreadable"):
        open_or_build(cat, broken4)
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(ProductIndexError, match="no manifest.json"):
        open_or_build(cat, foreign)
    assert (foreign / "notes.txt").read_text() == "mine"  # nothing deleted
    with pytest.raises(ProductIndexError, match="no product index"):
        ProductSearch(tmp_path / "missing")
    # rebuild=True repairs a corrupted index
    assert open_or_build(cat, broken, rebuild=True).n_docs == 30
    with ProductSearch(broken) as s:
        assert len(s) == 30


def test_build_index_rejects_bad_input(tmp_path, products):
    with pytest.raises(ValueError, match="zero products"):
        build_index([], tmp_path / "empty")
    with pytest.raises(ValueError, match="duplicate"):
        build_index([products[0], products[0]], tmp_path / "dup")
    m = build_index(products[:10], tmp_path / "ten", threads=1)
    assert m.n_docs == 10 and m.catalog_hash == products_hash(products[:10])


def test_closed_searcher_raises(tmp_path):
    cat = _small_catalog(tmp_path / "cat.jsonl.gz", 12)
    open_or_build(cat, tmp_path / "idx")
    s = ProductSearch(tmp_path / "idx")
    assert s.search("kettle", top_k=3)
    s.close()
    s.close()
    with pytest.raises(ProductIndexError, match="closed"):
        s.search("kettle")


# --------------------------------------------------------------------------- JVM setup


def test_ensure_jvm_idempotent_and_strict_about_heap():
    ensure_jvm()
    ensure_jvm()
    from jnius import autoclass

    heap = autoclass("java.lang.Runtime").getRuntime().maxMemory()
    other = "64m" if heap > 200 * 2**20 else "8g"
    with pytest.raises(JVMError, match="max heap"):
        ensure_jvm(other)
    with pytest.raises(JVMError):
        ensure_jvm("lots")


def _run_python(code: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "OPENAI_API_KEY")}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)


def test_fresh_process_undoes_pyserini_vector_option_and_avoids_torch(full_index):
    code = f"""
import sys, os, jnius_config
from pyserini.setup import configure_classpath
import pyserini
configure_classpath(os.path.join(os.path.dirname(pyserini.__file__), 'resources', 'jars'))
assert '--add-modules=jdk.incubator.vector' in jnius_config.get_options()
from shopping_companion.catalog.search import ProductSearch
s = ProductSearch({str(full_index)!r})
assert s.search('red dress', top_k=3)
opts = jnius_config.get_options()
assert '--add-modules=jdk.incubator.vector' not in opts and '-Xmx4g' in opts, opts
assert 'torch' not in sys.modules and 'OPENAI_API_KEY' not in os.environ
print('ok')
"""
    r = _run_python(code)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "ok"
    assert "MemorySegmentIndexInput" not in r.stderr
