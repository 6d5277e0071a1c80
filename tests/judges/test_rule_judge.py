"""The rule judge on hand-built catalog records, tasks and trajectories."""

from __future__ import annotations

import pytest

from shopping_companion.judges.base import accuracy, success
from shopping_companion.judges.rule import (
    RuleJudge,
    bundle_cost,
    is_relevant,
    key_matches,
    match_identified,
    normalize_tokens,
    product_satisfies,
    value_matches,
)
from shopping_companion.rewards import stage1_reward, stage2_reward
from shopping_companion.types import (
    Preference,
    Product,
    ProductSlot,
    SessionRef,
    Step,
    Task,
    ToolCall,
    ToolResult,
    Trajectory,
    Voucher,
)

SHIRTS = ["Apparel", "Topwear", "Shirts"]


def P(pid, title, *, cat=SHIRTS, shop="S1", price=1000.0, attrs=None, options=None, desc=None, brand="Roadster"):
    return Product(
        product_id=pid,
        title=title,
        source="test",
        shop="Test Shop",
        shop_id=shop,
        brand=brand,
        price=price,
        currency="INR",
        category_path=list(cat),
        description=desc,
        attributes=attrs or {},
        options=options or {},
    )


CATALOG = {
    p.product_id: p
    for p in [
        P(
            "m:1",
            "Roadster Men Navy Blue Checked Casual Shirt",
            attrs={"base_colour": "Navy Blue", "Fabric": "Cotton", "colour1": "NA"},
            options={"size": ["S", "M", "L"]},
        ),
        P(
            "m:2",
            "HRX Men Navy Slim Shirt",
            attrs={"primary_color": "Navy", "Material": "100% Cotton"},
            options={"Sizes": ["M", "XL"]},
            brand="HRX",
        ),
        P(
            "m:3",
            "Roadster Men Black Shirt",
            attrs={"base_colour": "Black", "Fabric": "Cotton"},
            options={"size": ["M"]},
            desc="Pairs well with navy chinos",
        ),
        P(
            "m:4",
            "Navy Cotton Skirt",
            cat=["Apparel", "Bottomwear", "Skirts"],
            attrs={"base_colour": "Navy", "Fabric": "Cotton"},
            options={"size": ["M"]},
        ),
        # add-on bundle, shop S1
        P("b:shirt", "Peter England Men Navy Formal Shirt", price=1000, attrs={"base_colour": "Navy"}),
        P(
            "b:jeans",
            "Levis Men Slim Fit Jeans",
            cat=["Apparel", "Bottomwear", "Jeans"],
            price=1200,
            attrs={"Fit": "Slim Fit", "base_colour": "Blue"},
        ),
        P(
            "b:jeans_reg",
            "Levis Men Regular Fit Jeans",
            cat=["Apparel", "Bottomwear", "Jeans"],
            price=1100,
            attrs={"Fit": "Regular Fit"},
        ),
        P(
            "b:belt",
            "Woodland Men Brown Leather Belt",
            cat=["Accessories", "Belts"],
            price=500,
            attrs={"Material": "Genuine Leather"},
        ),
        P(
            "b:belt_dear",
            "Hidesign Men Brown Leather Belt",
            cat=["Accessories", "Belts"],
            price=700,
            attrs={"Material": "Leather"},
        ),
        P(
            "b:belt_s2",
            "Woodland Men Leather Belt",
            cat=["Accessories", "Belts"],
            shop="S2",
            price=500,
            attrs={"Material": "Leather"},
        ),
        P("c:shirt", "Navy Shirt", shop="S2", price=900, attrs={"base_colour": "Navy"}),
        P("c:jeans", "Slim Jeans", cat=["Apparel", "Bottomwear", "Jeans"], shop="S2", price=900, attrs={"Fit": "Slim"}),
        P("c:belt", "Leather Belt", cat=["Accessories", "Belts"], shop="S2", price=400, attrs={"Material": "Leather"}),
        P(
            "x:noprice",
            "Leather Belt",
            cat=["Accessories", "Belts"],
            shop="S1",
            price=None,
            attrs={"Material": "Leather"},
        ),
    ]
}


def lookup(ids):
    return {i: CATALOG[i] for i in ids if i in CATALOG}


JUDGE = RuleJudge(lookup)

SINGLE_PREFS = [
    Preference(attribute="colour", value="navy"),
    Preference(attribute="size", value="M"),
    Preference(attribute="fabric", value="cotton"),
]


def single_task(prefs=SINGLE_PREFS):
    return Task(
        task_id="s1",
        task_type="single",
        instruction="I need a casual shirt",
        user_id="u",
        history=[SessionRef(session_id="h1", date="2024-01-01")],
        needle_session_ids=["h1"],
        preferences=list(prefs),
        slots=[ProductSlot(product_type="shirt", category_path=SHIRTS, reference_product_id="m:1")],
    )


def addon_task(budget=2500.0, voucher=Voucher(shop_id="S1", min_spend=2000, discount=300)):  # noqa: B008 - immutable
    return Task(
        task_id="a1",
        task_type="addon",
        instruction="shirt, jeans and a belt from one shop",
        user_id="u",
        history=[SessionRef(session_id="h1", date="2024-01-01")],
        needle_session_ids=["h1"],
        preferences=[
            Preference(slot=0, attribute="colour", value="navy"),
            Preference(slot=1, attribute="fit", value="slim"),
            Preference(slot=2, attribute="material", value="leather"),
        ],
        slots=[
            ProductSlot(product_type="shirt", category_path=SHIRTS, reference_product_id="b:shirt"),
            ProductSlot(
                product_type="jeans", category_path=["Apparel", "Bottomwear", "Jeans"], reference_product_id="b:jeans"
            ),
            ProductSlot(product_type="belt", category_path=["Accessories", "Belts"], reference_product_id="b:belt"),
        ],
        voucher=voucher,
        budget=budget,
        currency="INR",
    )


def stage1(identified=None, answer=None):
    return Trajectory(
        task_id="t",
        stage=1,
        identified_preferences=identified,
        final_answer=answer,
        steps=[Step(assistant_text="...")],
        termination="answered",
    )


def stage2(rec, returned=None, answer=None):
    returned = list(rec) if returned is None else returned
    step = Step(
        assistant_text="...",
        tool_calls=[ToolCall(name="product_search", arguments={"query": "q"}, call_id="c0")],
        tool_results=[ToolResult(call_id="c0", name="product_search", content="...", returned_ids=returned)],
    )
    return Trajectory(
        task_id="t",
        stage=2,
        recommended_ids=list(rec),
        final_answer=answer,
        steps=[step, Step(assistant_text="<answer>..</answer>")],
        termination="answered",
    )


# --------------------------------------------------------------------------- normalisation helpers


def test_normalisation_and_value_matching():
    assert normalize_tokens("Men's GRAY T-Shirts") == ("men", "grey", "t", "shirt")
    assert value_matches("grey", "Gray")
    assert value_matches("navy", "Navy Blue")
    assert not value_matches("navy blue", "Navy")
    assert value_matches("cotton", "100% Cotton")
    assert value_matches("dresses", "Dress")
    assert not value_matches("", "anything")
    assert key_matches("colour", "base_colour") and key_matches("color", "primary_color")
    assert key_matches("size", "Sizes") and key_matches("fabric", "Material")
    assert not key_matches("colour", "Fabric")


def test_product_satisfies_rules():
    m1, m3 = CATALOG["m:1"], CATALOG["m:3"]
    assert product_satisfies(m1, Preference(attribute="color", value="Navy"))  # key match, base_colour
    assert product_satisfies(m1, Preference(attribute="size", value="M"))  # option values
    # key-matched attribute is authoritative: description "navy chinos" does not make it navy
    assert not product_satisfies(m3, Preference(attribute="colour", value="navy"))
    # no matching key -> phrase in text fields
    assert product_satisfies(m1, Preference(attribute="pattern", value="checked"))
    assert not product_satisfies(m1, Preference(attribute="pattern", value="striped"))
    # brand pseudo-attribute and avoid polarity
    assert product_satisfies(m1, Preference(attribute="brand", value="roadster"))
    assert product_satisfies(m1, Preference(attribute="brand", value="HRX", polarity="avoid"))
    assert not product_satisfies(m1, Preference(attribute="brand", value="Roadster", polarity="avoid"))


def test_relevance():
    slot = ProductSlot(product_type="shirt", category_path=SHIRTS, reference_product_id="m:1")
    assert is_relevant(CATALOG["m:2"], slot)
    assert not is_relevant(CATALOG["m:4"], slot)
    # no category on the product: product_type tokens in the title
    bare = CATALOG["m:2"].model_copy(update={"category_path": []})
    assert is_relevant(bare, slot)


# --------------------------------------------------------------------------- stage 1


def test_stage1_all_matched_with_other_attribute_names():
    ident = [
        Preference(attribute="color", value="Navy Blue"),
        Preference(attribute="sizes", value="m"),
        Preference(attribute="material", value="100% cotton"),
    ]
    v = JUDGE.judge(single_task(), stage1(ident))
    assert (v.judge, v.stage, v.F, v.N, v.b) == ("rule", 1, 3, 1, 0)
    assert (v.q1, v.m1, v.c1, v.success) == (1, 3, None, True)
    assert v.matched == ["colour=navy", "size=M", "fabric=cotton"]
    assert accuracy(v) == 1.0
    assert stage1_reward(v) == pytest.approx(1.0)  # (1+3)/(1+3)


def test_stage1_partial():
    ident = [Preference(attribute="colour", value="black"), Preference(attribute="size", value="M")]
    v = JUDGE.judge(single_task(), stage1(ident))
    # black is a wrong value on an attribute the user has a preference about: spurious, so q1 = 0
    assert (v.q1, v.m1, v.h1, v.success) == (0, 1, 1, False)
    assert v.matched == ["size=M"]
    assert any("missing: colour=navy" in r for r in v.reasons)
    assert accuracy(v) == pytest.approx(1 / 3)
    assert stage1_reward(v) == pytest.approx(0.0)  # (q1 0 + max(0, m1 1 - h1 1)) / (1 + 3)


def test_stage1_nothing_identified_and_polarity():
    v = JUDGE.judge(single_task(), stage1([]))
    assert (v.q1, v.m1) == (0, 0) and stage1_reward(v) == 0.0
    v = JUDGE.judge(single_task(), stage1([Preference(attribute="colour", value="navy", polarity="avoid")]))
    assert v.m1 == 0


def test_stage1_parses_final_answer_when_not_filled():
    ans = '{"preferences": [{"attribute": "colour", "value": "navy"}, {"attribute": "size", "value": "M"}]}'
    v = JUDGE.judge(single_task(), stage1(None, ans))
    assert (v.q1, v.m1) == (1, 2)
    v = JUDGE.judge(single_task(), stage1(None, "I think the user likes navy"))
    assert (v.q1, v.m1) == (0, 0) and any("not parsable" in r for r in v.reasons)


def test_stage1_addon_c1_and_one_to_one_matching():
    task = addon_task()
    ident = [
        Preference(slot=0, attribute="colour", value="navy"),
        Preference(slot=2, attribute="belt material", value="leather"),
        Preference(slot=2, attribute="brand", value="Woodland"),
    ]
    v = JUDGE.judge(task, stage1(ident))
    assert (v.b, v.q1, v.m1, v.c1, v.success) == (1, 1, 2, 2, False)
    assert stage1_reward(v) == pytest.approx((1 + 2 + 2) / (1 + 3 + 3))
    # two gold preferences with the same value are not both matched by one identified preference
    gold = [
        Preference(slot=0, attribute="colour", value="black"),
        Preference(slot=1, attribute="colour", value="black"),
    ]
    assert match_identified(gold, [Preference(attribute="colour", value="black")]).count(None) == 1
    assert match_identified(
        gold,
        [Preference(slot=1, attribute="colour", value="black"), Preference(slot=0, attribute="colour", value="black")],
    ) == [1, 0]


# --------------------------------------------------------------------------- stage 2, single product


def test_stage2_reference_matched():
    v = JUDGE.judge(single_task(), stage2(["m:1"], returned=["m:3", "m:1"]))
    assert (v.p2, v.q2, v.m2, v.n2, v.u2, v.success) == (1, 1, 3, None, None, True)
    assert success(v) is True
    assert stage2_reward(v) == pytest.approx(1.0)


def test_stage2_valid_alternative_accepted():
    v = JUDGE.judge(single_task(), stage2(["m:2"]))
    assert (v.p2, v.q2, v.m2, v.success) == (1, 1, 3, True)


def test_stage2_partial_match():
    v = JUDGE.judge(single_task(), stage2(["m:3"]))
    assert (v.p2, v.q2, v.m2, v.success) == (1, 1, 2, False)
    assert v.matched == ["size=M", "fabric=cotton"]
    assert any("lacks colour=navy" in r for r in v.reasons)
    assert stage2_reward(v) == pytest.approx(4 / 5)  # (1+1+2)/(2+3)


def test_stage2_fabricated_id():
    # m:1 exists but was never returned by a product tool in this trajectory
    v = JUDGE.judge(single_task(), stage2(["m:1"], returned=["m:3"]))
    assert v.p2 == 0 and v.q2 == 1 and v.m2 == 3 and not v.success
    assert any("fabricated" in r for r in v.reasons)
    # an id absent from the catalog
    v = JUDGE.judge(single_task(), stage2(["m:999"]))
    assert (v.p2, v.q2, v.m2, v.success) == (0, 0, 0, False)
    assert any("not in the catalog" in r for r in v.reasons)


def test_stage2_wrong_count_uses_first_product():
    v = JUDGE.judge(single_task(), stage2(["m:3", "m:1"]))
    assert v.p2 == 0 and v.m2 == 2 and not v.success
    assert any("expected 1 product(s), got 2" in r for r in v.reasons)
    v = JUDGE.judge(single_task(), stage2([]))
    assert (v.p2, v.q2, v.m2, v.success) == (0, 0, 0, False)


def test_stage2_wrong_category():
    v = JUDGE.judge(single_task(), stage2(["m:4"]))
    assert (v.p2, v.q2, v.m2, v.success) == (1, 0, 3, False)
    assert stage2_reward(v) == pytest.approx(4 / 5)


def test_stage2_ids_from_answer_markers():
    traj = stage2([], returned=["m:2"], answer="My pick: @REC::m:2@")
    v = JUDGE.judge(single_task(), traj)
    assert v.success


def test_lookup_failure_is_a_failed_verdict():
    def broken(ids):
        raise ConnectionError("index down")

    v = RuleJudge(broken).judge(single_task(), stage2(["m:1"]))
    assert v.failed and "index down" in v.reasons[0]
    with pytest.raises(ValueError):
        stage2_reward(v)
    with pytest.raises(ValueError):
        success(v)


def test_stage_argument_must_agree():
    with pytest.raises(ValueError):
        JUDGE.judge(single_task(), stage2(["m:1"]), stage=1)


# --------------------------------------------------------------------------- stage 2, add-on


def test_addon_all_good_in_any_order_with_voucher():
    # 1000 + 1200 + 500 = 2700 >= 2000 -> -300 = 2400 <= 2500
    v = JUDGE.judge(addon_task(), stage2(["b:belt", "b:shirt", "b:jeans"]))
    assert (v.p2, v.q2, v.m2, v.n2, v.u2, v.success) == (1, 1, 3, 3, 1, True)
    assert any("= 2400" in r for r in v.reasons)
    assert stage2_reward(v) == pytest.approx(1.0)


def test_addon_over_budget():
    # 1000 + 1200 + 700 = 2900 - 300 = 2600 > 2500
    v = JUDGE.judge(addon_task(), stage2(["b:shirt", "b:jeans", "b:belt_dear"]))
    assert (v.p2, v.q2, v.m2, v.n2, v.u2, v.success) == (1, 1, 3, 3, 0, False)
    assert any("2600 exceeds budget 2500" in r for r in v.reasons)
    assert stage2_reward(v) == pytest.approx(8 / 9)  # (1+1+3+3+0)/(2+3+4)


def test_addon_min_spend_not_reached_means_no_discount():
    # 2700 < 3000 -> no discount; 2700 > 2500
    task = addon_task(voucher=Voucher(shop_id="S1", min_spend=3000, discount=300))
    v = JUDGE.judge(task, stage2(["b:shirt", "b:jeans", "b:belt"]))
    assert v.u2 == 0 and not v.success
    total, discount, same = bundle_cost([CATALOG[i] for i in ("b:shirt", "b:jeans", "b:belt")], task)
    assert (total, discount, same) == (2700.0, 0.0, True)


def test_addon_different_shops():
    v = JUDGE.judge(addon_task(), stage2(["b:shirt", "b:jeans", "b:belt_s2"]))
    assert v.u2 == 0 and v.n2 == 3 and not v.success
    assert any("different shops" in r for r in v.reasons)


def test_addon_other_single_shop_within_budget_without_voucher():
    # all in S2 (voucher is for S1, so no discount): 900 + 900 + 400 = 2200 <= 2500
    v = JUDGE.judge(addon_task(), stage2(["c:shirt", "c:jeans", "c:belt"]))
    assert (v.p2, v.q2, v.m2, v.n2, v.u2, v.success) == (1, 1, 3, 3, 1, True)


def test_addon_one_slot_unsatisfied():
    # regular-fit jeans: slot 1 fails its preference; 1000 + 1100 + 500 = 2600 - 300 = 2300
    v = JUDGE.judge(addon_task(), stage2(["b:shirt", "b:jeans_reg", "b:belt"]))
    assert (v.p2, v.q2, v.m2, v.n2, v.u2, v.success) == (1, 1, 2, 2, 1, False)
    assert stage2_reward(v) == pytest.approx(7 / 9)  # (1+1+2+2+1)/(2+3+4)


def test_addon_missing_product_and_unknown_price():
    v = JUDGE.judge(addon_task(), stage2(["b:shirt", "b:jeans"]))
    assert v.p2 == 0 and v.u2 == 0 and v.n2 == 2 and v.m2 == 2 and v.q2 == 1
    v = JUDGE.judge(addon_task(), stage2(["b:shirt", "b:jeans", "x:noprice"]))
    assert v.u2 == 0 and any("no price" in r for r in v.reasons)


def test_addon_wrong_category_in_bundle():
    # two shirts and a belt: one slot (jeans) gets a shirt
    v = JUDGE.judge(addon_task(), stage2(["b:shirt", "m:1", "b:belt"]))
    assert v.q2 == 0 and v.n2 == 2 and not v.success


def test_accuracy_edge_cases():
    v = JUDGE.judge(single_task(prefs=[]), stage1([]))
    assert v.F == 0 and accuracy(v) == 1.0 and v.success
    with pytest.raises(ValueError):
        accuracy(JUDGE.judge(single_task(), stage2(["m:1"])))
