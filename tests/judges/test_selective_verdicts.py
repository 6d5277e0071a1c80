"""Selective verdicts (issue 32, item 1): every item the rule judge decides is confident or
uncertain with a reason, verdicts carry the items and totals, and the reward spec's ``uncertain``
says what uncertain items earn (no_credit by default: making the judge unsure never pays)."""

from __future__ import annotations

import json

import pytest

from shopping_companion.errors import ConfigError, UncertainUnscoredError
from shopping_companion.judges.rule import RuleJudge
from shopping_companion.judges.selective import UNCERTAIN_REASONS, judging_stats, undecided
from shopping_companion.rewards import stage1_reward, stage2_reward
from shopping_companion.rewards.rubric import paper_rubric
from shopping_companion.rewards.spec import load_reward_spec
from shopping_companion.rewards.total import score_stage
from shopping_companion.types import (
    Preference,
    Product,
    ProductSlot,
    Session,
    SessionRef,
    Step,
    Task,
    ToolResult,
    Trajectory,
    Turn,
    Verdict,
    VerdictItem,
    Voucher,
)

SHIRTS = ["Apparel", "Topwear", "Shirts"]
SESSIONS = {
    "s1": Session(
        session_id="s1",
        turns=[
            Turn(role="user", content="I only wear navy, and it has to be cotton. I like a slim cut too."),
            Turn(role="assistant", content="Noted."),
        ],
    )
}


def P(pid, title, cat=SHIRTS, shop="S1", price=1000.0, **attrs):
    return Product(
        product_id=pid,
        title=title,
        source="t",
        shop="T",
        shop_id=shop,
        price=price,
        category_path=list(cat),
        attributes=attrs,
    )


CATALOG = {
    p.product_id: p
    for p in [
        P("p:navy", "Roadster Men Navy Casual Shirt", base_colour="Navy Blue", fabric="Cotton"),
        P("p:plain", "Roadster Men Casual Shirt", fabric="Cotton"),  # says nothing of its colour
        P("p:clash", "Roadster Men Navy Casual Shirt", base_colour="Red", fabric="Cotton"),  # title vs field
        P("p:accent", "Roadster Men Navy Silver-Toned Casual Shirt", base_colour="Navy Blue", fabric="Cotton"),
        P("p:shoes", "Roadster Men Navy Shoes", cat=["Footwear", "Shoes", "Sports Shoes"], base_colour="Navy"),
        P("p:red", "Roadster Men Red Casual Shirt", base_colour="Red", fabric="Cotton"),
        P(
            "p:tee",
            "Roadster Men Navy T-Shirt",
            cat=["Apparel", "Topwear", "Tshirts"],
            base_colour="Navy",
            fabric="Cotton",
        ),
        P(
            "p:belt",
            "Woodland Brown Leather Belt",
            cat=["Accessories", "Belts"],
            shop="S1",
            price=500,
            material="Leather",
        ),
    ]
}


def lookup(ids):
    return {i: CATALOG[i] for i in ids if i in CATALOG}


def task(prefs=None, addon=False):
    prefs = prefs or [Preference(attribute="colour", value="navy"), Preference(attribute="fabric", value="cotton")]
    slots = [ProductSlot(product_type="casual shirt", category_path=SHIRTS, reference_product_id="p:navy")]
    extra = {}
    if addon:
        slots.append(
            ProductSlot(product_type="belt", category_path=["Accessories", "Belts"], reference_product_id="p:belt")
        )
        extra = {"task_type": "addon", "voucher": Voucher(shop_id="S1", min_spend=1000, discount=100), "budget": 1500}
    return Task(
        task_id="t",
        instruction="A casual shirt for work",
        user_id="u",
        history=[SessionRef(session_id="s1", date="2024-01-01")],
        needle_session_ids=["s1"],
        preferences=prefs,
        slots=slots,
        **extra,
    )


def s1(*prefs: tuple[str, str]) -> Trajectory:
    ident = [Preference(attribute=a, value=v) for a, v in prefs]
    return Trajectory(
        task_id="t",
        stage=1,
        final_answer=json.dumps({"preferences": [{"attribute": a, "value": v} for a, v in prefs]}),
        identified_preferences=ident,
        termination="answered",
        steps=[Step(assistant_text="<answer>..</answer>")],
    )


def s2(*ids: str) -> Trajectory:
    return Trajectory(
        task_id="t",
        stage=2,
        recommended_ids=list(ids),
        final_answer=" ".join(f"@REC::{i}@" for i in ids),
        termination="answered",
        steps=[
            Step(
                assistant_text="..",
                tool_results=[ToolResult(call_id="c", name="product_search", content="..", returned_ids=list(ids))],
            )
        ],
    )


def judge(policy="no_credit"):
    return RuleJudge(lookup, sessions=SESSIONS, uncertain=policy)


def items(v: Verdict, kind: str) -> list[VerdictItem]:
    return [it for it in v.items if it["kind"] == kind]


# --------------------------------------------------------------------------- stage 1


def test_explicit_answer_is_all_confident():
    v = judge().judge(task(), s1(("colour", "navy blue"), ("fabric", "cotton"), ("fit", "slim fit")))
    assert (v.q1, v.m1, v.h1, v.success, v.uncertain, v.uncertain_policy) == (1, 2, 0, True, 0, None)
    assert [it["kind"] for it in v.items] == ["match", "match", "grounding"]
    assert all(it["confident"] and it["reason"] is None and it["decided_by"] == "rule" for it in v.items)
    assert items(v, "match")[0]["answer"] == (0,) and items(v, "grounding")[0]["ok"]  # slim fit: said by the user


def test_words_outside_the_vocabulary_make_an_uncertain_miss_that_earns_nothing():
    t = task()
    traj = s1(("colour", "the colour of the sky at midnight"), ("fabric", "cotton"))
    v = judge().judge(t, traj)
    colour = items(v, "match")[0]
    assert not colour["ok"] and not colour["confident"] and colour["reason"] == "value_outside_vocabulary"
    assert colour["answer"] == (0,)  # the answer preference that may state it
    assert v.uncertain == 2 and v.uncertain_policy == "no_credit"  # the miss and the answer preference
    # no_credit: not counted, not subtracted, but q1 and success are withheld
    assert (v.m1, v.h1, v.q1, v.success) == (1, 0, 0, False)
    honest = judge().judge(t, s1(("colour", "navy"), ("fabric", "cotton")))
    assert stage1_reward(v) < stage1_reward(honest)
    # credit: the uncertain miss counts (once per answer preference), so does the answer preference
    vc = judge("credit").judge(t, traj)
    assert (vc.m1, vc.h1, vc.q1, vc.success) == (2, 0, 1, True)
    assert vc.items == v.items  # the decisions are the same; only what they earn differs


def test_credit_gives_one_gold_preference_per_vague_answer_preference():
    t = task()
    vc = judge("credit").judge(t, s1(("x", "whatever suits me")))
    misses = items(vc, "match")
    assert all(not it["confident"] and it["reason"] == "unknown_key" for it in misses)
    assert vc.m1 == 1  # two gold preferences may be stated by one vague preference: credited once


def test_unknown_key_and_ungrounded_values():
    t = task()
    # a key the lexicon does not know, a value of the gold vocabulary: read as that attribute
    v = judge().judge(t, s1(("shade", "navy"), ("fabric", "cotton")))
    assert v.m1 == 2 and v.uncertain == 0
    # an invented preference the lexicon reads (never said by the user): a confident spurious one
    v = judge().judge(t, s1(("colour", "navy"), ("fabric", "cotton"), ("neck", "v-neck")))
    g = items(v, "grounding")[0]
    assert (g["ok"], g["confident"], v.h1, v.q1) == (False, True, 1, 0)
    # an invented preference in words no vocabulary reads: uncertain, not subtracted, no q1
    v = judge().judge(t, s1(("colour", "navy"), ("fabric", "cotton"), ("vibe", "something breezy")))
    g = items(v, "grounding")[0]
    assert (g["ok"], g["confident"], g["reason"]) == (False, False, "indirect_statement")
    assert (v.m1, v.h1, v.q1, v.success) == (2, 0, 0, False)


# --------------------------------------------------------------------------- stage 2


def test_stage2_items_and_reasons():
    t = task()
    v = judge().judge(t, s2("p:navy"))
    assert (v.q2, v.m2, v.success, v.uncertain) == (1, 2, True, 0)
    assert [it["kind"] for it in v.items] == ["type", "attribute", "attribute"]
    # a wanted colour the product states nowhere: uncertain (not_stated), no credit
    v = judge().judge(t, s2("p:plain"))
    colour = items(v, "attribute")[0]
    assert (colour["ok"], colour["confident"], colour["reason"]) == (False, False, "not_stated")
    assert (v.m2, v.success) == (1, False)
    assert judge("credit").judge(t, s2("p:plain")).success
    # the field says red, the title says navy: the field's "no" is uncertain (field_text_conflict)
    v = judge().judge(t, s2("p:clash"))
    colour = items(v, "attribute")[0]
    assert (colour["ok"], colour["confident"], colour["reason"]) == (False, False, "field_text_conflict")
    assert judge("credit").judge(t, s2("p:clash")).success
    # a title naming an accent colour beside the field's does not unsettle an accepted field
    assert judge().judge(t, s2("p:accent")).uncertain == 0
    assert v.m2 == 1 and stage2_reward(v) < stage2_reward(judge().judge(t, s2("p:navy")))
    # a field and title that agree on another colour: a confident miss
    colour = items(judge().judge(t, s2("p:red")), "attribute")[0]
    assert (colour["ok"], colour["confident"]) == (False, True)


def test_avoid_not_stated_is_a_confident_satisfaction():
    t = task([Preference(attribute="pattern", value="printed", polarity="avoid")])
    v = judge().judge(t, s2("p:navy"))
    (it,) = items(v, "attribute")
    assert it["ok"] and it["confident"] and v.m2 == 1


def test_adjacent_type_is_uncertain_and_another_type_is_not():
    t = task()
    t.slots[0] = ProductSlot(
        product_type="pair of men's casual shoes", category_path=["Footwear", "Shoes", "Casual Shoes"]
    )
    v = judge().judge(t, s2("p:shoes"))  # a plain "shoes" filed under sports shoes
    (ty,) = items(v, "type")
    assert (ty["ok"], ty["confident"], ty["reason"]) == (False, False, "adjacent_type")
    assert v.q2 == 0 and not v.success
    assert judge("credit").judge(t, s2("p:shoes")).q2 == 1
    (ty,) = items(judge().judge(task(), s2("p:tee")), "type")  # a T-shirt is not a casual shirt
    assert (ty["ok"], ty["confident"]) == (False, True)


def test_bundle_item_is_confident_and_drives_u2():
    t = task(
        [
            Preference(slot=0, attribute="colour", value="navy"),
            Preference(slot=1, attribute="material", value="leather"),
        ],
        addon=True,
    )
    v = judge().judge(t, s2("p:navy", "p:belt"))
    (b,) = items(v, "bundle")
    assert b["confident"] and b["ok"] and v.u2 == 1 and v.n2 == 2 and v.success
    assert {it["slot"] for it in items(v, "type")} == {0, 1}


# --------------------------------------------------------------------------- policies and models


def test_unscored_policy_leaves_the_stage_unscored_like_a_judge_failure():
    t = task()
    traj = s2("p:plain")
    v = judge("unscored").judge(t, traj)
    assert v.uncertain_policy == "unscored" and undecided(v) == 1
    with pytest.raises(UncertainUnscoredError):
        stage2_reward(v)
    verdict, reward, error = score_stage(judge("unscored"), paper_rubric(), t, traj)
    assert verdict is not None and error and error.startswith("judge failed")
    assert reward.components["judge_failed"] == 1.0 and reward.components["uncertain_unscored"] == 1.0
    # a confident stage is scored as usual under the same policy
    verdict, reward, error = score_stage(judge("unscored"), paper_rubric(), t, s2("p:navy"))
    assert error is None and reward.components["R_z"] == 1.0


def test_bad_policy_values_name_the_field_and_the_allowed_values():
    with pytest.raises(ConfigError, match=r"uncertain: must be one of no_credit, credit, unscored; got 'maybe'"):
        RuleJudge(lookup, uncertain="maybe")
    with pytest.raises(ConfigError, match=r"uncertain.*no_credit, credit, unscored.*'sometimes'"):
        load_reward_spec({"rubric": "paper", "uncertain": "sometimes"})
    item = {"kind": "match", "label": "x", "slot": 0, "ok": True, "decided_by": "rule", "answer": (), "detail": ""}
    base = {"judge": "rule", "stage": 1, "F": 1, "N": 1}
    with pytest.raises(ValueError, match=r"items\[0\]\.reason: required exactly when confident is False"):
        Verdict(**base, items=[{**item, "confident": False, "reason": None}], uncertain=1)
    with pytest.raises(ValueError, match=r"items\[0\]\.reason"):
        Verdict(**base, items=[{**item, "confident": True, "reason": "unknown_key"}])
    with pytest.raises(ValueError, match=r"items\.0\.reason"):
        Verdict(**base, items=[{**item, "confident": False, "reason": "a hunch"}], uncertain=1)
    with pytest.raises(ValueError, match="uncertain: must count"):
        Verdict(**base, items=[{**item, "confident": False, "reason": "unknown_key"}], uncertain=0)


def test_spec_identity_and_json_carry_the_policy():
    a, b = load_reward_spec("paper"), load_reward_spec({"rubric": "paper", "uncertain": "credit"})
    assert a.uncertain == "no_credit" and a.identity()["uncertain"] == "no_credit"
    assert a.identity() != b.identity()
    assert load_reward_spec(b.to_json()).uncertain == "credit"


def test_verdicts_round_trip_and_old_results_still_load():
    v = judge().judge(task(), s1(("colour", "the colour of the sky at midnight"), ("fabric", "cotton")))
    again = Verdict.model_validate_json(v.model_dump_json())
    assert again == v and again.items[0]["reason"] in UNCERTAIN_REASONS
    old = Verdict.model_validate({"judge": "rule", "stage": 1, "F": 1, "N": 1, "q1": 1, "m1": 1, "h1": 0})
    assert (
        old.items == []
        and old.uncertain == 0
        and judging_stats(old) == {"items": 0.0, "uncertain": 0.0, "llm_calls": 0.0}
    )
    assert judging_stats(v) == {"items": float(len(v.items)), "uncertain": 2.0, "llm_calls": 0.0}
