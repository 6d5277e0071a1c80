"""Benchmark construction (§4) on small catalogs built in the test and real SGD conversations.

The catalog here is shaped like Amazon Reviews 2023 metadata as the catalog loader maps it (the
``details`` dict becomes ``attributes``: Color, Material, Item Form, Scent, Skin Type, ...; the
``store`` is the brand and the shop), because the real 2023 metadata files are not available
offline. Every generated task is checked against the rule judge and against brute-force counts.
"""

from __future__ import annotations

import itertools
import json
import random
import re
from pathlib import Path

import pytest

from shopping_companion.benchmark.synth import (
    SynthConfig,
    SynthError,
    build_benchmark,
    load_benchmark,
    synthesize,
    write_benchmark,
)
from shopping_companion.benchmark.synthesis.catalog_view import (
    CatalogView,
    product_features,
    product_type,
    with_article,
)
from shopping_companion.benchmark.synthesis.common import count_tokens, run_search
from shopping_companion.benchmark.synthesis.conflicts import ConflictDetector, WantedFeature
from shopping_companion.benchmark.synthesis.haystack import HaystackPool, session_tokens
from shopping_companion.benchmark.synthesis.verify import (
    CatalogMatcher,
    count_bundles,
    gold_accepted,
    leaked_values,
    unstated_features,
)
from shopping_companion.benchmark import templates as T
from shopping_companion.catalog.loader import make_shop_id
from shopping_companion.judges.rule import bundle_cost, is_relevant, normalize_tokens, product_satisfies
from shopping_companion.types import Product, Session, Turn

DETAIL_VALUES = {
    "Color": ["Black", "White", "Sage Green", "Navy Blue", "Terracotta", "Charcoal"],
    "Material": ["Ceramic", "Stainless Steel", "Bamboo", "Borosilicate Glass", "Stoneware"],
    "Item Form": ["Cream", "Gel", "Lotion", "Balm"],
    "Scent": ["Lavender", "Unscented", "Citrus", "Sandalwood"],
    "Skin Type": ["Dry", "Oily", "Sensitive", "Combination"],
    "Style": ["Modern", "Rustic", "Minimalist", "Farmhouse"],
    "Finish Type": ["Matte", "Glossy", "Satin"],
    "Size": ["12 Ounces", "16 Ounces", "Large", "Small"],
}
KITCHEN = ["Color", "Material", "Style", "Finish Type", "Size"]
BEAUTY = ["Item Form", "Scent", "Skin Type", "Color"]
STORES = {
    # store: [(category path, detail keys, price range)]
    "Acme Home": [
        (["Home & Kitchen", "Kitchen & Dining", "Coffee Mugs"], KITCHEN, (8, 30)),
        (["Home & Kitchen", "Kitchen & Dining", "Cutting Boards"], KITCHEN, (15, 60)),
        (["Home & Kitchen", "Kitchen & Dining", "Tea Kettles"], KITCHEN, (20, 80)),
    ],
    "Glow Lab": [
        (["Beauty & Personal Care", "Skin Care", "Face", "Face Moisturizers"], BEAUTY, (10, 45)),
        (["Beauty & Personal Care", "Hair Care", "Shampoos"], BEAUTY, (6, 25)),
    ],
    "Solo Ceramics": [(["Home & Kitchen", "Kitchen & Dining", "Coffee Mugs"], KITCHEN, (12, 40))],
}


def amazon_products(per_type: int = 14, seed: int = 3) -> list[Product]:
    rng = random.Random(seed)
    out = []
    n = 0
    for store, types in STORES.items():
        for path, keys, (lo, hi) in types:
            for _ in range(per_type):
                n += 1
                details = {k: rng.choice(DETAIL_VALUES[k]) for k in keys}
                details["Brand"] = store
                details["Product Dimensions"] = "4 x 4 x 5 inches"  # logistics detail: never a preference
                title = f"{store} {details[keys[0]]} {path[-1][:-1]} {n}"
                out.append(
                    Product(
                        product_id=f"amazon2023:B0{n:07d}",
                        title=title,
                        source="amazon2023_test",
                        shop="Amazon.com",
                        shop_id=make_shop_id("Amazon.com", None, store),
                        brand=store,
                        price=float(rng.randint(lo, hi)) + rng.choice([0.0, 0.49, 0.99]),
                        currency="USD",
                        category_path=path,
                        description=f"A {details.get('Style', 'nice').lower()} item.",
                        attributes=details,
                    )
                )
    return out


def lookup_for(products):
    by_id = {p.product_id: p for p in products}
    return by_id


@pytest.fixture(scope="module")
def products():
    return amazon_products()


@pytest.fixture(scope="module")
def pool(sgd_sessions):
    return sgd_sessions[:600]


def small_config(**kw) -> SynthConfig:
    base = dict(
        n_tasks=10,
        addon_share=0.5,
        seed=11,
        sessions_per_user=8,
        max_session_tokens=400,
        test_fraction=0.2,
        alternatives_cap=10_000,
    )
    base.update(kw)
    return SynthConfig(**base)


def toy_searcher(products):
    """A bag-of-words ranker over the test catalog with the shop filter (for the searchable check)."""
    docs = {
        p.product_id: set(normalize_tokens(" ".join([p.title, *p.attributes.values(), *p.category_path])))
        for p in products
    }
    shop = {p.product_id: p.shop_id for p in products}

    def search(query, top_k, shop_id=None):
        q = set(normalize_tokens(query))
        ranked = sorted(docs, key=lambda pid: (-len(q & docs[pid]), pid))
        return [pid for pid in ranked if shop_id is None or shop[pid] == shop_id][:top_k]

    return search


# --------------------------------------------------------------------------- catalog view


def test_product_types_derive_from_amazon_categories(products):
    by_cat = {tuple(p.category_path): product_type(p) for p in products}
    assert by_cat[("Home & Kitchen", "Kitchen & Dining", "Coffee Mugs")] == "coffee mug"
    assert by_cat[("Beauty & Personal Care", "Skin Care", "Face", "Face Moisturizers")] == "face moisturizer"
    assert by_cat[("Beauty & Personal Care", "Hair Care", "Shampoos")] == "shampoo"
    p = products[0]
    assert product_type(p.model_copy(update={"category_path": ["Electronics", "Headphones"]})) == "pair of headphones"
    assert product_type(p.model_copy(update={"category_path": ["Women", "Shoes"]})) == "pair of women's shoes"
    assert product_type(p.model_copy(update={"category_path": ["Sofas & armchairs"]})) == "sofa"
    # a category that names only an audience: the type comes from the title ("... Coffee Mug 1")
    assert product_type(p.model_copy(update={"category_path": ["Women"]})) == "mug"
    assert product_type(p.model_copy(update={"category_path": ["Women"], "title": "Acme Home Thing 1"})) is None
    assert with_article("unisex cap") == "a unisex cap" and with_article("umbrella") == "an umbrella"


def test_features_come_from_details_and_skip_logistics(products):
    feats = product_features(products[0])
    labels = {f.label for f in feats}
    assert {"colour", "material", "style", "finish type", "brand"} <= labels
    assert "product dimensions" not in labels
    for f in feats:  # every gold label ties back to the product's attribute under the judge
        pref = __import__("shopping_companion.types", fromlist=["Preference"]).Preference(
            attribute=f.label, value=f.value
        )
        assert product_satisfies(products[0], pref), f
    view = CatalogView(products)
    assert view.report["eligible"] == len(products)
    assert {g.shop_id for g in view.addon_groups} == {"amazon-com/brand-acme-home", "amazon-com/brand-glow-lab"}


# --------------------------------------------------------------------------- whole builds


@pytest.fixture(scope="module")
def built(products, pool):
    return synthesize(products, pool, small_config(), searcher=toy_searcher(products))


def test_amazon_catalog_gives_valid_single_and_addon_tasks(built, products):
    by_id = lookup_for(products)
    types = [t.task_type for t in built.tasks]
    assert types.count("single") == 5 and types.count("addon") == 5
    assert sorted(t.split for t in built.tasks).count("test") == 2  # 20% of each type
    generic_used = False
    for t in built.tasks:
        v = t.verification
        assert v is not None and v.resolvable and v.conflict_free and v.gold_accepted and v.searchable
        # the rule judge accepts the reference product(s) when recommended
        ok, reasons = gold_accepted(t, by_id)
        assert ok, (t.task_id, reasons)
        needles = [built.sessions[s] for s in t.needle_session_ids]
        assert not unstated_features(t.preferences, needles)
        assert not leaked_values(t.preferences, t.instruction)
        assert set(t.needle_session_ids) <= {r.session_id for r in t.history}
        dates = [r.date for r in t.history]
        assert dates == sorted(dates) and len(set(dates)) == len(dates)
        text = " ".join(x.content for n in needles for x in n.turns)
        generic_used |= any(lbl in text for lbl in ("item form", "skin type", "finish type"))
        for p in t.preferences:
            if p.attribute == "size" and "ounces" in p.value.lower():  # not a size one wears
                assert f"size {p.value.lower()}" not in text.lower()
        if t.task_type == "addon":
            refs = [by_id[i] for i in t.reference_product_ids]
            assert 2 <= len(refs) <= 4 and len({p.shop_id for p in refs}) == 1
            assert len({tuple(p.category_path) for p in refs}) == len(refs)
            total, discount, same = bundle_cost(refs, t)
            assert same and discount == t.voucher.discount and t.voucher.shop_id == refs[0].shop_id
            assert total - min(p.price for p in refs) < t.voucher.min_spend <= total  # every product needed
            assert total - discount <= t.budget < total  # feasible only with the voucher
            assert t.budget - (total - discount) <= 0.03 * total + 1e-6
            assert "$" in t.instruction and t.voucher.shop_id in t.instruction
            for s, slot in enumerate(t.slots):  # product types are named in slot order
                assert slot.product_type in t.instruction
                assert any(p.slot == s for p in t.preferences)
            pos = [t.instruction.index(s.product_type) for s in t.slots]
            assert pos == sorted(pos)
        else:
            assert 1 <= len(t.preferences) <= 3 and t.voucher is None and t.budget is None
    assert generic_used  # attributes without a dedicated phrasing bank are phrased generically


def test_alternative_counts_match_brute_force(built, products):
    for t in built.tasks:
        if t.task_type == "single":
            slot = t.slots[0]
            brute = sum(
                1
                for p in products
                if p.product_id != slot.reference_product_id
                and is_relevant(p, slot)
                and all(product_satisfies(p, g) for g in t.preferences)
            )
        else:
            cands = []
            for s, slot in enumerate(t.slots):
                prefs = [g for g in t.preferences if g.slot == s]
                cands.append(
                    [
                        p
                        for p in products
                        if p.shop_id == t.voucher.shop_id
                        and is_relevant(p, slot)
                        and all(product_satisfies(p, g) for g in prefs)
                    ]
                )
            brute = -1  # the reference bundle itself is not an alternative
            for combo in itertools.product(*cands):
                total, discount, _ = bundle_cost(list(combo), t)
                brute += total - discount <= t.budget + 1e-6
        assert t.n_alternatives == brute == t.verification.n_alternatives, t.task_id
        assert not t.verification.alternatives_capped


def test_count_bundles_equals_enumeration():
    rng = random.Random(5)
    for _ in range(200):
        lists = [[round(rng.uniform(1, 50), 2) for _ in range(rng.randint(0, 6))] for _ in range(rng.randint(2, 4))]
        m, d = rng.uniform(20, 120), rng.uniform(1, 15)
        b = rng.uniform(10, 120)
        brute = 0
        for combo in itertools.product(*lists):
            tot = sum(combo)
            brute += (tot - d if tot >= m else tot) <= b + 1e-6
        n, capped = count_bundles(lists, m, d, b, cap=10**9)
        assert n == brute and not capped
    assert count_bundles([[1.0] * 10, [1.0] * 10], 5, 1, 100, cap=7) == (7, True)


def test_template_needles_are_varied(built):
    openers = {built.sessions[t.needle_session_ids[0]].turns[0].content for t in built.tasks}
    instructions = {re.sub(r"\d", "", t.instruction.split(".")[0]) for t in built.tasks}
    assert len(openers) >= 4 and len(instructions) >= 6


def test_search_query_uses_shop_filter(products):
    calls = []

    def searcher(query, top_k, shop_id=None):
        calls.append(shop_id)
        return []

    run_search(searcher, "mug", 5, shop_id="amazon-com/brand-acme-home")
    run_search(lambda q, k: calls.append("two-arg") or [], "mug", 5, shop_id="x")
    assert calls == ["amazon-com/brand-acme-home", "two-arg"]


# --------------------------------------------------------------------------- determinism and resume


def _files(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir()) if p.is_file() and p.name != "build_log.json"}


def test_same_seed_same_bytes_and_resume_after_interrupt(products, pool, tmp_path):
    cfg = small_config(n_tasks=8)
    a = build_benchmark(tmp_path / "a", products, pool, cfg)
    files_a = _files(tmp_path / "a")
    assert {"tasks.jsonl", "sessions.jsonl", "manifest.json", "stats.md", "stats.json", "history.png"} <= set(files_a)
    assert not (tmp_path / "a" / ".partial").exists()

    class Stop(Exception):
        pass

    def stop_after_3(done, total, rec):
        if done == 3:
            raise Stop

    with pytest.raises(Stop):
        build_benchmark(tmp_path / "b", products, pool, cfg, progress=stop_after_3)
    assert not (tmp_path / "b" / "manifest.json").exists()  # incomplete: not loadable
    with pytest.raises(FileNotFoundError, match="manifest"):
        load_benchmark(tmp_path / "b")
    assert len(list((tmp_path / "b" / ".partial" / "parts").glob("*.json"))) == 3
    seen = []
    build_benchmark(tmp_path / "b", products, pool, cfg, progress=lambda d, n, r: seen.append(d))
    assert _files(tmp_path / "b") == files_a  # byte-identical to the uninterrupted build
    log = json.loads((tmp_path / "b" / "build_log.json").read_text())
    assert log["timings"]["reused_parts"] == 3

    # in-memory synthesis writes the same files; another seed gives other tasks
    write_benchmark(synthesize(products, pool, cfg), tmp_path / "c")
    assert _files(tmp_path / "c") == files_a
    build_benchmark(tmp_path / "d", products, pool, cfg.model_copy(update={"seed": 12}))
    assert _files(tmp_path / "d")["tasks.jsonl"] != files_a["tasks.jsonl"]
    loaded = load_benchmark(tmp_path / "a")
    assert [t.task_id for t in loaded.tasks] == [t.task_id for t in a.tasks]
    assert loaded.manifest["counts"]["tasks"] == 8 and loaded.manifest["files"]["tasks.jsonl"]


def test_builds_over_one_catalog_list_share_its_view_and_matcher(products, pool, tmp_path):
    from shopping_companion.benchmark.synthesis.build import Synthesizer
    from shopping_companion.benchmark.synthesis.reuse import view_and_matcher

    cfg = small_config(n_tasks=4)
    settings = (cfg.min_attributes, cfg.allow_unpriced)
    catalog = list(products)  # a list no build has seen yet
    write_benchmark(synthesize(catalog, pool, cfg), tmp_path / "first")  # builds its view and matcher
    kept = view_and_matcher(catalog, *settings)
    assert view_and_matcher(catalog, *settings) is kept
    again = Synthesizer(catalog, pool, cfg)
    assert again.view is kept.view and again.matcher is kept.matcher
    # the second build starts from the kept view and the matcher's filled caches: same bytes
    write_benchmark(synthesize(catalog, pool, cfg), tmp_path / "second")
    assert _files(tmp_path / "second") == _files(tmp_path / "first")
    # another list object, or other settings: a view of its own
    other = view_and_matcher(list(products), *settings)
    assert other.view is not kept.view and other.matcher is not kept.matcher
    assert view_and_matcher(catalog, cfg.min_attributes + 1, cfg.allow_unpriced).view is not kept.view


def test_partial_build_from_other_settings_is_refused(products, pool, tmp_path):
    cfg = small_config(n_tasks=4)

    def stop(done, total, rec):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        build_benchmark(tmp_path / "x", products, pool, cfg, progress=stop)
    with pytest.raises(SynthError, match="--fresh"):
        build_benchmark(tmp_path / "x", products, pool, cfg.model_copy(update={"seed": 99}))
    out = build_benchmark(tmp_path / "x", products, pool, cfg.model_copy(update={"seed": 99}), fresh=True)
    assert len(out.tasks) == 4 and (tmp_path / "x" / "manifest.json").is_file()


# --------------------------------------------------------------------------- bad inputs


def test_empty_pool_is_a_clear_error(products):
    with pytest.raises(SynthError, match="conversation pool is empty"):
        synthesize(products, [], small_config())


def test_too_small_pool_names_the_counts(products, pool):
    with pytest.raises(SynthError, match=r"usable sessions .*one user needs 8"):
        synthesize(products, pool[:5], small_config())


def test_attribute_poor_catalog_is_a_clear_error(products, pool):
    poor = [p.model_copy(update={"attributes": {"Color": p.attributes["Color"]}}) for p in products]
    with pytest.raises(SynthError, match=r"no product can be a reference product.*fewer than 2 phrasable attributes"):
        synthesize(poor, pool, small_config())


def test_too_few_products_per_shop_for_addon(products, pool, tmp_path):
    # every store sells one product type only: no add-on deal is possible
    one_type = [p for p in products if p.category_path[-1] == "Coffee Mugs"]
    with pytest.raises(
        SynthError, match=r"add-on deals need a shop offering at least 2 product types.*allow_shortfall"
    ):
        build_benchmark(tmp_path / "bad", one_type, pool, small_config())
    assert not (tmp_path / "bad" / "manifest.json").exists()
    out = build_benchmark(tmp_path / "ok", one_type, pool, small_config(allow_shortfall=True))
    assert {t.task_type for t in out.tasks} == {"single"} and len(out.tasks) == 5
    v = out.manifest["verification"]
    assert v["dropped_by_type"] == {"addon": 5} and "add-on deals need a shop" in v["shortfall"]["addon"]
    assert load_benchmark(tmp_path / "ok").manifest["counts"]["requested"] == 10


# --------------------------------------------------------------------------- haystack and conflicts


def test_haystack_meets_session_and_token_targets(sgd_sessions):
    from shopping_companion.memory.loaders import load_sharegpt

    sg, _ = load_sharegpt(limit=3000)
    pool = HaystackPool(
        list(sgd_sessions[:1500]) + sg, seed=1, max_session_tokens=6000, pool_size=2000, sharegpt_share=0.8, needed=40
    )
    assert len(pool) == 2000 and len(pool.long) == 1600
    rng = random.Random(0)
    for target in (40_000, 60_000):
        chosen = pool.select(rng, 40, target, fixed_tokens=500, tolerance=0.01)
        assert len(chosen) == 40 and len({c.session.session_id for c in chosen}) == 40
        total = sum(c.tokens for c in chosen) + 500
        assert abs(total - target) <= 0.01 * target
        assert sum(not c.long for c in chosen) == 8  # 20% SGD
        assert all(c.tokens == session_tokens(c.session) for c in chosen)
    assert count_tokens("I'd like 2 mugs, please!") == 9


def _session(sid, *user_turns):
    turns = []
    for u in user_turns:
        turns += [Turn(role="user", content=u), Turn(role="assistant", content="Okay.")]
    return Session(session_id=sid, turns=turns, source="sgd")


def test_conflict_detector_finds_contradictions_only():
    vocab = {
        "colour": {normalize_tokens(v) for v in ("Navy Blue", "Black", "Blue", "Red", "White")},
        "fabric": {normalize_tokens(v) for v in ("Cotton", "Polyester", "Linen")},
    }
    det = ConflictDetector(vocab)
    shirt = frozenset(normalize_tokens("shirts tees"))
    jeans = frozenset(normalize_tokens("jeans denims"))
    feats = [
        WantedFeature(0, "colour", "Navy Blue", shirt, jeans, "Puma", ("S", "M", "L")),
        WantedFeature(0, "fabric", "Cotton", shirt, jeans, "Puma"),
    ]
    brands = [(0, "Puma")]
    cases = {
        "I always wear black, it's my thing.": "other_value",
        "Honestly I can't stand navy blue on me.": "aversion",
        "I never buy anything from Puma after last year.": "brand_aversion",
        "My size is XL these days.": "size",
        "I only buy polyester shirts now.": "other_value",
    }
    for text, kind in cases.items():
        found = det.find(_session("s-" + kind + text[:5], text), feats, brands)
        assert [c.kind for c in found] == [kind], (text, found)
    fine = [
        "I love navy blue, always have.",  # agrees
        "I always wear black jeans to work.",  # about another requested product
        "The sky was blue and we loved the beach.",  # no shopping context
        "When I have a choice I go for navy blue; other shades never look right.",  # negation elsewhere
        "Can you book a table for two at 7 pm?",  # no preference cue
        "I like blue, especially navy blue.",  # compatible values
        "I wear size M.",  # offered size
    ]
    for text in fine:
        assert det.find(_session("f-" + text[:8], text), feats, brands) == [], text
    # assistant turns are never statements of the user
    s = Session(
        session_id="a1", turns=[Turn(role="user", content="hi"), Turn(role="assistant", content="I always wear black.")]
    )
    assert det.find(s, feats, brands) == []


def test_token_sets_are_supersets_of_judge_tokens(catalog_products):
    matcher = CatalogMatcher(catalog_products)
    rng = random.Random(2)
    for i in rng.sample(range(len(matcher.products)), 1500):
        p = matcher.products[i]
        true = set()
        for f in (
            p.title,
            p.brand,
            p.description,
            *p.features,
            *p.attributes.values(),
            *p.category_path,
            *[o for v in p.options.values() for o in v],
        ):
            true.update(normalize_tokens(f))
        assert true <= matcher.token_set(i), p.product_id
    odd = Product(product_id="x:1", title="Insignia™ Café naïve STRAPS", source="x", shop="x", shop_id="x")
    m = CatalogMatcher([odd])
    assert set(normalize_tokens(odd.title)) <= m.token_set(0)


def test_phrasing_banks_fill_every_placeholder():
    for label, bank in T.PREFERENCE_BANK.items():
        for s in bank:
            assert "{v}" in s and set(re.findall(r"{(\w+)}", s)) == {"v"}, (label, s)
    for s in T.GENERIC_BANK:
        assert set(re.findall(r"{(\w+)}", s)) == {"v", "label"}
    for s in T.SCOPE_TEMPLATES:
        assert set(re.findall(r"{(\w+)}", s)) == {"item", "s"}
    for s in T.SINGLE_INSTRUCTIONS:
        assert set(re.findall(r"{(\w+)}", s)) == {"item"}


def test_load_benchmark_names_what_a_foreign_directory_lacks(tmp_path):
    from shopping_companion.benchmark.synth import load_benchmark

    with pytest.raises(FileNotFoundError, match="no manifest.json"):
        load_benchmark(tmp_path)
    (tmp_path / "manifest.json").write_text("{}")  # e.g. a `shopcomp personalize build` dataset
    with pytest.raises(FileNotFoundError, match="no tasks.jsonl, so this is not a Shopping Companion benchmark"):
        load_benchmark(tmp_path)


def test_part_store_reads_a_missing_or_torn_part_as_none(tmp_path):
    """PartStore.get reads through runs.read_json: a missing or torn part is rebuilt, not a crash."""
    from shopping_companion.benchmark.synthesis.directory import PartStore

    store = PartStore(tmp_path / "out", "fp")
    try:
        assert store.get(0) is None
        store.put(0, {"task": {"id": "t0"}})
        assert store.get(0) == {"task": {"id": "t0"}}
        store._path(1).write_text('{"task": {"id"', encoding="utf-8")  # torn by a crash mid-write
        assert store.get(1) is None
    finally:
        store.close()
