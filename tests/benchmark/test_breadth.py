"""Benchmark breadth: source quotas, departments, numeric limits, product types from titles, the
source/department/provenance statistics and the difficulty calibration."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from shopping_companion.benchmark.calibrate import succ_by_source, task_source
from shopping_companion.benchmark.synthesis.breadth import department, numeric_limit, source_quotas
from shopping_companion.benchmark.synthesis.catalog_view import CatalogView, numeric_features, product_type
from shopping_companion.benchmark.synthesis.stats import BM25TurnScorer, topic_queries
from shopping_companion.judges.matching import default_reader, parse_constraint, parse_quantities
from shopping_companion.types import EpisodeResult, Preference, Product, ProductSlot, Session, Task, Turn


def _p(pid: str, title: str, source: str = "ikea_sa", **kw) -> Product:
    kw.setdefault("shop", "IKEA Saudi Arabia")
    kw.setdefault("shop_id", "ikea-saudi-arabia/ikea")
    return Product(product_id=f"{source}:{pid}", title=title, source=source, **kw)


# ---------------------------------------------------------------- quotas


def test_source_quotas_sum_and_cap() -> None:
    q = source_quotas({"a": 44000, "b": 20000, "c": 3000, "d": 800, "e": 0}, 1000)
    assert sum(q.values()) == 1000
    assert q["e"] == 0
    assert max(q.values()) <= 350
    assert q["a"] >= q["b"] >= q["c"] >= q["d"] > 0  # sqrt weights keep the order


def test_source_quotas_infeasible_cap_is_even() -> None:
    q = source_quotas({"a": 44000, "b": 3000}, 40, max_share=0.35)
    assert q == {"a": 20, "b": 20}


def test_source_quotas_balances() -> None:
    assert source_quotas({"a": 9, "b": 1}, 10, balance="uniform", max_share=1) == {"a": 5, "b": 5}
    assert source_quotas({"a": 9, "b": 1}, 10, balance="proportional", max_share=1) == {"a": 9, "b": 1}
    with pytest.raises(ValueError, match="source_balance"):
        source_quotas({"a": 1}, 1, balance="log")
    with pytest.raises(ValueError, match="max_source_share"):
        source_quotas({"a": 1}, 1, max_share=0)


# ---------------------------------------------------------------- departments


@pytest.mark.parametrize(
    ("path", "source", "title", "dept"),
    [
        (["Apparel", "Topwear", "Tshirts"], "myntra_styles", "Nike Men Tee", "Apparel"),
        (["Men", "Clothing"], "adidas_us", "Split Hoodie", "Apparel"),
        (["Women", "Shoes"], "adidas_us", "Postmove Shoes", "Footwear"),
        (["Running"], "adidas_us", "Ultraboost", "Sports & Outdoors"),
        (["Women"], "myntra_catalog", "Geox Women Grey Solid Leather Ballerinas", "Footwear"),
        (["Women"], "myntra_catalog", "GIORDANO Red Solid Shoulder Bag", "Accessories & Jewellery"),
        (["Men"], "myntra_catalog", "SUITLTD Grey Waistcoat", "Apparel"),
        (["Snacks & Branded Foods", "Biscuits & Cookies"], "bigbasket", "Milk Cookies", "Grocery & Gourmet Food"),
        (["Chairs"], "ikea_sa", "TÄRENDÖ Table and 4 chairs", "Furniture & Home"),
        (["Office Products"], "amazon2018_minionerec", "Planner", "Office Products"),
        (["Something Odd"], "x", "thing", "Other"),
    ],
)
def test_department(path, source, title, dept) -> None:
    assert department(_p("1", title, source=source, category_path=path)) == dept


# ---------------------------------------------------------------- numeric limits


def test_numeric_limit_directions() -> None:
    assert numeric_limit("146", "cm", "max") == ("at most 150 cm", "146 cm")
    assert numeric_limit("64 GB", None, "min") == ("at least 64 GB", "64 GB")
    assert numeric_limit("4.7", "in", "min") == ("at least 4.5 in", "4.7 in")
    assert numeric_limit("0", "cm", "max") is None
    assert numeric_limit("12", None, "max") is None  # no unit known
    assert numeric_limit("large", "cm", "max") is None


def test_numeric_limits_are_read_by_the_matcher() -> None:
    for value, unit, direction in (("146", "cm", "max"), ("1000", "ml", "min"), ("64 GB", None, "min")):
        limit, quantity = numeric_limit(value, unit, direction)
        c = parse_constraint(limit)
        assert c is not None and c.op in ("<=", ">=")
        (q,) = parse_quantities(quantity)
        assert c.admits(q)


def test_numeric_features_from_real_fields() -> None:
    p = _p(
        "1", "KIVIK 3-seat sofa, 228x95x83 cm", price=1000.0, category_path=["Sofas & armchairs"],
        attributes={"width_cm": "228", "depth_cm": "95", "height_cm": "83"},
    )  # fmt: skip
    feats = {f.label: f for f in numeric_features(p)}
    assert set(feats) == {"width", "depth", "height"}
    w = feats["width"]
    assert (w.kind, w.value, w.quantity, w.provenance) == ("numeric", "at most 230 cm", "228 cm", "attribute")
    assert default_reader().check(p, Preference(attribute="width", value=w.value)).satisfied


def test_numeric_features_skip_implausible_lengths() -> None:
    p = _p(
        "2", "TÄRENDÖ / GUNDE Table and 4 chairs, 110 cm", price=245.0, category_path=["Chairs"],
        attributes={"width_cm": "67", "depth_cm": "1", "height_cm": "74"},
    )  # fmt: skip
    assert "depth" not in {f.label for f in numeric_features(p)}  # a table 1 cm deep is a data error
    q = _p(
        "3", "TROFAST Storage combination, 46x30x145 cm", price=250.0, category_path=["Children's furniture"],
        attributes={"width_cm": "46", "depth_cm": "3O", "height_cm": "99"},
    )  # fmt: skip
    labels = {f.label for f in numeric_features(q)}
    assert "width" in labels and "height" not in labels  # 99 cm is not one of the title's dimensions


# ---------------------------------------------------------------- product types, house brands


def test_product_type_from_title_when_category_names_an_audience() -> None:
    p = _p(
        "10029195", "Geox Women Grey Solid Leather Ballerinas", source="myntra_catalog", shop="Myntra (India)",
        shop_id="myntra-india/brand-geox", brand="Geox", category_path=["Women"], attributes={"gender": "Women"},
    )  # fmt: skip
    name = product_type(p)
    assert name == "pair of women's flats"  # the product-type vocabulary files ballerinas under flats


def test_product_type_department_category_is_not_a_type() -> None:
    p = _p(
        "x", "Waterman Expert Fountain Pen with Medium nib", source="amazon2018_minionerec", shop="Amazon.com",
        shop_id="amazon/waterman", category_path=["Office Products"],
    )  # fmt: skip
    assert product_type(p) == "pen"


def test_house_brand_is_not_a_feature() -> None:
    p = _p(
        "4", "MALM Bed frame, white, 160x200 cm", brand="IKEA", price=900.0, category_path=["Beds"],
        attributes={"colour": "White", "width_cm": "160"},
    )  # fmt: skip
    assert "brand" not in {f.label for f in CatalogView([p], min_attributes=1).features(p)}


def test_unpriced_products_are_single_only() -> None:
    ps = [
        _p(str(i), f"KIVIK {i}-seat sofa", price=None, category_path=["Sofas & armchairs"],
           attributes={"colour": "Grey", "width_cm": str(180 + i)})
        for i in range(3)
    ] + [
        _p("9", "MALM Bed frame", price=900.0, category_path=["Beds"], attributes={"colour": "White", "width_cm": "160"})
    ]  # fmt: skip
    v = CatalogView(ps, min_attributes=1)
    assert v.report["eligible_unpriced"] == 3 and len(v.eligible) == 4
    assert all(p.price for g in v.addon_groups for ps_ in g.types.values() for p in ps_)
    v2 = CatalogView(ps, min_attributes=1, allow_unpriced=False)
    assert v2.report["no_price"] == 3 and len(v2.eligible) == 1


# ---------------------------------------------------------------- statistics


def _task(tid: str, refs: list[str], ttype: str = "single", prefs=None) -> Task:
    return Task(
        task_id=tid,
        task_type=ttype,
        split="test",
        instruction="I need a sofa.",
        user_id="u",
        history=[],
        needle_session_ids=[],
        preferences=prefs or [],
        slots=[ProductSlot(product_type="3-seat sofa", reference_product_id=r) for r in refs],
    )


def test_topic_queries_name_type_and_attributes_not_values() -> None:
    t = _task(
        "t", ["ikea_sa:1"],
        prefs=[Preference(attribute="colour", value="Navy Blue"), Preference(attribute="width", value="at most 150 cm")],
    )  # fmt: skip
    (q,) = topic_queries(t)
    assert q == "3-seat sofa colour width preference"
    assert "navy" not in q.lower() and "150" not in q


def test_bm25_top_turns_ranks_and_skips_zero_scores() -> None:
    hist = [
        Session(session_id="a", turns=[Turn(role="user", content="the weather is nice")]),
        Session(session_id="b", turns=[Turn(role="user", content="my sofa sofa is grey")]),
        Session(session_id="c", turns=[Turn(role="user", content="a sofa for the flat")]),
    ]
    s = BM25TurnScorer()
    assert s.top_turns("sofa", hist, 10) == ["b", "c"]
    assert s.top_session("sofa", hist) == "b"
    assert s.top_turns("zebra", hist, 10) == []


def _ep(tid: str, ttype: str, succ: bool, error: str | None = None) -> EpisodeResult:
    return EpisodeResult(
        task_id=tid, task_type=ttype, mode="two_stage", policy="reference", stages=[], acc=1.0, succ=succ,
        wall_s=0.1, error=error,
    )  # fmt: skip


def test_succ_by_source() -> None:
    tasks = [
        _task("a", ["ikea_sa:1"]),
        _task("b", ["ikea_sa:2", "ikea_sa:3"], "addon"),
        _task("c", ["bigbasket:9"]),
        _task("d", [""]),
    ]
    assert [task_source(t) for t in tasks] == ["ikea_sa", "ikea_sa", "bigbasket", "(open)"]
    eps = [_ep("a", "single", True), _ep("b", "addon", False), _ep("c", "single", True), _ep("c", "single", False)]
    eps.append(_ep("a", "single", False, error="boom"))
    cal = succ_by_source(tasks, eps)
    assert cal["episodes"] == 4 and cal["errored"] == 1
    by = cal["by_source"]
    assert list(by) == ["bigbasket", "ikea_sa", "all"]
    assert by["ikea_sa"]["single"] == {"n": 1, "succ": 1.0} and by["ikea_sa"]["addon"] == {"n": 1, "succ": 0.0}
    assert by["bigbasket"]["all"] == {"n": 2, "succ": 0.5}
    assert by["all"]["all"] == {"n": 4, "succ": 0.5}


# ---------------------------------------------------------------- a build over the real catalog


@pytest.fixture(scope="module")
def breadth_build(catalog_products, sgd_sessions, product_search):
    from shopping_companion.benchmark.synth import SynthConfig, synthesize

    def searcher(q, k, shop_id=None):
        return [h["product_id"] for h in product_search.search(q, top_k=k, shop_id=shop_id)]

    cfg = SynthConfig(n_tasks=24, seed=3, sessions_per_user=12, minilm_tasks=0)
    return synthesize(catalog_products, sgd_sessions, cfg, searcher=searcher)


def test_build_spreads_over_sources(breadth_build) -> None:
    out = breadth_build
    srcs = Counter(task_source(t) for t in out.tasks)
    assert len(srcs) >= 2
    assert max(srcs.values()) / len(out.tasks) <= 0.5
    st = out.stats
    assert st["sources"]["sources_used"] == len(srcs)
    assert abs(st["sources"]["max_share"] - max(srcs.values()) / len(out.tasks)) < 1e-3
    assert sum(n for _, n in st["departments"]["reference"]) == sum(len(t.reference_product_ids) for t in out.tasks)
    prov = st["provenance"]
    assert prov["wanted_preferences"] == sum(len(t.preferences) for t in out.tasks)
    assert abs(sum(v["share"] for v in prov["by_provenance"].values()) - 1) < 0.01


def test_build_preferences_hold_for_the_reference(breadth_build, catalog_products) -> None:
    reader = default_reader()
    by_id = {p.product_id: p for p in catalog_products}
    checked = 0
    for t in breadth_build.tasks:
        assert t.verification is not None and t.verification.gold_accepted
        for pref in t.preferences:
            ref = by_id[t.slots[pref.slot].reference_product_id]
            assert reader.check(ref, pref).satisfied, (t.task_id, pref)
            checked += 1
    assert checked == sum(len(t.preferences) for t in breadth_build.tasks) > 0


def test_stats_md_has_breadth_tables(breadth_build, tmp_path) -> None:
    from shopping_companion.benchmark.synthesis.build import write_benchmark

    write_benchmark(breadth_build, tmp_path)
    md = (tmp_path / "stats.md").read_text()
    for heading in ("## Sources", "## Departments", "## Attribute provenance", "## Difficulty calibration"):
        assert heading in md
    assert "topic top-10" in md and "bare top-10" in md
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["stats_summary"]["sources_used"] >= 2


def test_calibrate_refuses_missing_or_foreign_results(breadth_build, tmp_path) -> None:
    from shopping_companion.benchmark.calibrate import calibrate_benchmark
    from shopping_companion.benchmark.synthesis.build import write_benchmark
    from shopping_companion.errors import DataError

    write_benchmark(breadth_build, tmp_path / "b")
    with pytest.raises(DataError, match="does not exist"):
        calibrate_benchmark(tmp_path / "b", tmp_path / "nope.jsonl")
    with pytest.raises(DataError, match="no finished episode"):
        calibrate_benchmark(tmp_path / "b", tmp_path / "b" / "tasks.jsonl")  # not a results file
    other = tmp_path / "other.jsonl"
    other.write_text(_ep("someone-else", "single", True).model_dump_json() + "\n")
    with pytest.raises(DataError, match="another benchmark"):
        calibrate_benchmark(tmp_path / "b", other)
    t = breadth_build.tasks[0]
    ok = tmp_path / "ok.jsonl"
    ok.write_text(_ep(t.task_id, t.task_type, True).model_dump_json() + "\n")
    cal = calibrate_benchmark(tmp_path / "b", ok)
    assert cal["by_source"]["all"]["all"] == {"n": 1, "succ": 1.0}
    from shopping_companion.benchmark.synth import load_benchmark

    load_benchmark(tmp_path / "b")  # the manifest's hashes were refreshed
    assert "Reference policy" in (tmp_path / "b" / "stats.md").read_text()


def test_spoken_values_keep_model_names() -> None:
    from shopping_companion.benchmark.synthesis.catalog_view import Feature
    from shopping_companion.benchmark.synthesis.generators import _spoken_value

    assert _spoken_value(Feature("compatible model", "compatible model", "Apple® iPhone® 6")) == "Apple iPhone 6"
    assert _spoken_value(Feature("carrier", "carrier", "AT&T")) == "AT&T"
    assert _spoken_value(Feature("colour", "colour", "Navy Blue")) == "navy blue"


def test_ikea_parts_are_not_reference_products() -> None:
    for title in ("MÖLLARP Handle, 106 mm", "ENERYDA Cup handle, 89 mm", "STUBBARP Leg, 10 cm"):
        p = _p("9", title, price=20.0, category_path=["Bookcases & shelving units"])
        assert product_type(p) is None, title
    assert product_type(_p("8", "MALM Chest of 6 drawers", category_path=["Chests of drawers & drawer units"])) == (
        "chest of drawers"
    )
