"""The rule judge on real catalog products: valid alternatives and add-on deals (count, per-product
features, same shop, budget after voucher)."""

from __future__ import annotations

from collections import defaultdict

import pytest

from shopping_companion.judges.llm import _stage2_prompt
from shopping_companion.judges.rule import RuleJudge, bundle_cost, product_satisfies
from shopping_companion.rewards import rule_product_matcher, stage2_reward
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

SHOP = "myntra-india/brand-puma"


@pytest.fixture(scope="module")
def catalog(catalog_products) -> dict[str, Product]:
    return {p.product_id: p for p in catalog_products}


@pytest.fixture(scope="module")
def judge(catalog) -> RuleJudge:
    return RuleJudge(lambda ids: {i: catalog[i] for i in ids if i in catalog})


def _slot(p: Product) -> ProductSlot:
    return ProductSlot(product_type=p.category, category_path=list(p.category_path), reference_product_id=p.product_id)


def _traj(rec: list[str], returned: list[str] | None = None) -> Trajectory:
    returned = list(rec) if returned is None else returned
    step = Step(
        assistant_text="..",
        tool_calls=[ToolCall(name="product_view", arguments={}, call_id="c")],
        tool_results=[ToolResult(call_id="c", name="product_view", content="..", returned_ids=returned)],
    )
    return Trajectory(
        task_id="t",
        stage=2,
        recommended_ids=rec,
        final_answer=" ".join(f"@REC::{r}@" for r in rec),
        steps=[step, Step(assistant_text="<answer>..</answer>")],
        termination="answered",
    )


def _prefs(p: Product, slot: int) -> list[Preference]:
    out = [Preference(slot=slot, attribute="colour", value=p.attributes["base_colour"])]
    if p.attributes.get("usage"):
        out.append(Preference(slot=slot, attribute="usage", value=p.attributes["usage"]))
    return out


# --------------------------------------------------------------------------- single: alternatives


def test_valid_alternative_counts_not_only_the_reference(catalog, judge):
    by_key: dict[tuple, list[Product]] = defaultdict(list)
    for p in sorted(catalog.values(), key=lambda p: p.product_id):
        if p.source == "myntra_styles" and p.attributes.get("base_colour") and p.attributes.get("usage"):
            by_key[(tuple(p.category_path), p.attributes["base_colour"], p.attributes["usage"])].append(p)
    key = next(k for k, v in by_key.items() if len(v) >= 2 and k[1] == "Black" and k[0][-1] == "Tshirts")
    ref, alt = by_key[key][:2]
    other = next(
        p
        for p in sorted(catalog.values(), key=lambda p: p.product_id)
        if p.category_path == list(key[0])
        and p.attributes.get("base_colour") == "White"
        and p.attributes.get("usage") == key[2]
    )
    task = Task(
        task_id="real1",
        instruction="a t-shirt",
        user_id="u",
        history=[SessionRef(session_id="h", date="2024-01-01")],
        needle_session_ids=["h"],
        preferences=_prefs(ref, 0),
        slots=[_slot(ref)],
    )

    v_ref = judge.judge(task, _traj([ref.product_id]))
    v_alt = judge.judge(task, _traj([alt.product_id]))
    v_other = judge.judge(task, _traj([other.product_id]))
    assert alt.product_id != ref.product_id
    assert (v_ref.p2, v_ref.q2, v_ref.m2, v_ref.success) == (1, 1, 2, True)
    assert (v_alt.p2, v_alt.q2, v_alt.m2, v_alt.success) == (1, 1, 2, True)  # an alternative is as good
    assert stage2_reward(v_alt) == stage2_reward(v_ref) == 1.0
    assert v_other.m2 == 1 and not v_other.success and any("lacks colour=Black" in r for r in v_other.reasons)
    # the tool-wise semantic matcher uses the same notion of a valid alternative
    assert rule_product_matcher(task, [ref, alt, other]) == [True, True, False]
    # a single-product task recommending two products fails product validity (multi-SKU)
    v_two = judge.judge(task, _traj([ref.product_id, alt.product_id]))
    assert v_two.p2 == 0 and not v_two.success and "expected 1 product(s), got 2" in v_two.reasons


# --------------------------------------------------------------------------- add-on deals


@pytest.fixture(scope="module")
def bundle(catalog):
    """Three priced products of one real shop from three different categories, each with a colour,
    plus, per slot, a same-category product with the same colour and usage from another shop."""
    shop = sorted(
        (
            p
            for p in catalog.values()
            if p.shop_id == SHOP and p.price and p.attributes.get("base_colour") and p.attributes.get("usage")
        ),
        key=lambda p: p.product_id,
    )
    by_cat: dict[str, list[Product]] = defaultdict(list)
    for p in shop:
        by_cat[p.category].append(p)
    elsewhere: dict[tuple, list[Product]] = defaultdict(list)
    for p in sorted(catalog.values(), key=lambda p: p.product_id):
        if p.shop_id != SHOP and p.price and p.attributes.get("base_colour"):
            elsewhere[(tuple(p.category_path), p.attributes["base_colour"], p.attributes.get("usage"))].append(p)
    picked, alts = [], []
    for cat in sorted(by_cat, key=lambda c: (-len(by_cat[c]), c)):
        for p in by_cat[cat]:
            alt = elsewhere.get((tuple(p.category_path), p.attributes["base_colour"], p.attributes["usage"]))
            if alt:
                picked.append(p)
                alts.append(alt[0])
                break
        if len(picked) == 3:
            break
    assert len(picked) == 3 and len({p.category for p in picked}) == 3
    return picked, alts


def _addon(products: list[Product], *, budget, voucher) -> Task:
    return Task(
        task_id="real-addon",
        task_type="addon",
        instruction="three items from one shop",
        user_id="u",
        history=[SessionRef(session_id="h", date="2024-01-01")],
        needle_session_ids=["h"],
        preferences=[g for s, p in enumerate(products) for g in _prefs(p, s)],
        slots=[_slot(p) for p in products],
        voucher=voucher,
        budget=budget,
        currency="INR",
    )


def test_addon_real_bundle_budget_after_voucher(judge, bundle):
    products, _ = bundle
    ids = [p.product_id for p in products]
    total = sum(p.price for p in products)
    assert all(product_satisfies(p, g) for s, p in enumerate(products) for g in _prefs(p, s))
    voucher = Voucher(shop_id=SHOP, min_spend=total, discount=200)

    exact = _addon(products, budget=total - 200, voucher=voucher)  # affordable only with the discount
    v = judge.judge(exact, _traj(list(reversed(ids))))  # any order: products are assigned to slots
    assert (v.p2, v.q2, v.m2, v.n2, v.u2, v.success) == (1, 1, 6, 3, 1, True)
    assert stage2_reward(v) == 1.0
    assert bundle_cost(products, exact) == (total, 200.0, True)

    tight = _addon(products, budget=total - 201, voucher=voucher)
    v = judge.judge(tight, _traj(ids))
    assert v.u2 == 0 and v.n2 == 3 and not v.success and any("exceeds budget" in r for r in v.reasons)

    no_discount = _addon(products, budget=total - 200, voucher=Voucher(shop_id=SHOP, min_spend=total + 1, discount=200))
    v = judge.judge(no_discount, _traj(ids))
    assert v.u2 == 0 and not v.success  # the minimum spend is not reached: no discount

    other_shop_voucher = _addon(products, budget=total, voucher=Voucher(shop_id="elsewhere", min_spend=0, discount=500))
    v = judge.judge(other_shop_voucher, _traj(ids))
    assert v.u2 == 1 and v.success  # within budget without any discount


def test_addon_real_bundle_count_same_shop_and_alternatives(judge, bundle):
    products, alts = bundle
    ids = [p.product_id for p in products]
    total = sum(p.price for p in products)
    task = _addon(products, budget=total * 3, voucher=Voucher(shop_id=SHOP, min_spend=0, discount=0))

    v = judge.judge(task, _traj(ids[:2]))  # a product missing
    assert (v.p2, v.n2, v.u2, v.success) == (0, 2, 0, False) and v.m2 == 4

    mixed = [ids[0], alts[1].product_id, ids[2]]  # satisfies everything, but from two shops
    assert alts[1].shop_id != SHOP
    v = judge.judge(task, _traj(mixed))
    assert (v.p2, v.q2, v.m2, v.n2, v.u2, v.success) == (1, 1, 6, 3, 0, False)
    assert any("different shops" in r for r in v.reasons)

    v = judge.judge(task, _traj([ids[0], ids[1], ids[1]]))  # a duplicate is not a third product
    assert v.p2 == 0 and not v.success

    v = judge.judge(task, _traj(ids, returned=ids[:2]))  # never viewed: fabricated for the judge
    assert v.p2 == 0 and any("never returned" in r for r in v.reasons)

    wrong_kind = [ids[0], alts[0].product_id, ids[2]]  # two products of kind 0, none of kind 1
    v = judge.judge(task, _traj(wrong_kind))
    assert v.p2 == 1 and v.q2 == 0 and v.n2 == 2 and not v.success

    # an all-alternative bundle from one other shop is judged on its own records
    alt_shop_bundle = list(alts)
    v = judge.judge(task, _traj([a.product_id for a in alt_shop_bundle]))
    assert v.q2 == 1 and v.m2 == 6 and v.n2 == 3
    assert v.u2 == (1 if len({a.shop_id for a in alt_shop_bundle}) == 1 else 0)


def test_llm_stage2_prompt_from_real_records(catalog, bundle):
    products, _ = bundle
    ids = [p.product_id for p in products]
    task = _addon(products, budget=1000.0, voucher=Voucher(shop_id=SHOP, min_spend=500, discount=50))
    prompt = _stage2_prompt(task, _traj(ids), ids, {p.product_id: p for p in products}, set(ids), 4000, 300)
    for p in products:
        assert p.title in prompt and f"base_colour: {p.attributes['base_colour']}" in prompt
    assert f"shop {SHOP!r}" in prompt and "Budget: 1000 INR" in prompt
