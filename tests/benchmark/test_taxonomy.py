"""The rule taxonomy of failed episodes (App. F), one hand-built trajectory per class.

Every episode below is a real :class:`EpisodeResult` shaped like the environment's output (tool
observations are the JSON the tools emit, verdicts carry the fields and reasons the rule judge
writes), so each expected class and evidence string is worked out by hand from the trajectory.
"""

from __future__ import annotations

import json

from shopping_companion.benchmark import taxonomy as T
from shopping_companion.types import (
    EpisodeResult,
    Preference,
    ProductSlot,
    RewardBreakdown,
    SessionRef,
    StageResult,
    Step,
    Task,
    ToolResult,
    Trajectory,
    Verdict,
    Voucher,
)

# --------------------------------------------------------------------------- builders

NAVY, COTTON = "colour=navy", "material=cotton"


def tr(name, payload, ids=(), error=None):
    content = payload if isinstance(payload, str) else json.dumps(payload)
    return ToolResult(call_id="c", name=name, content=content, returned_ids=list(ids), error=error)


def step(*results, text="<tool_call>…</tool_call>"):
    return Step(assistant_text=text, tool_results=list(results))


def mem_search(*ids, snippet="I only wear navy shirts"):
    return tr("mem_search", {"results": [{"session_id": i, "turn": 1, "snippet": snippet} for i in ids]}, ids)


def mem_view(*ids, text="I only wear navy shirts, cotton please"):
    sessions = [{"session_id": i, "turns": [{"role": "user", "content": text}]} for i in ids]
    return tr("mem_view", {"sessions": sessions}, ids)


PRODUCTS = {
    "p1": {"product_id": "p1", "title": "Navy shirt", "shop_id": "s1", "price": 10, "attributes": {"colour": "Navy"}},
    "p2": {"product_id": "p2", "title": "Blue shirt", "shop_id": "s1", "price": 12, "attributes": {"colour": "Blue"}},
    "p3": {"product_id": "p3", "title": "Navy cap", "shop_id": "s2", "price": 9, "attributes": {"colour": "Navy"}},
    "p4": {"product_id": "p4", "title": "Navy cap", "shop_id": "s1", "price": 30, "attributes": {"colour": "Navy"}},
}


def search(*ids):
    return tr("product_search", {"results": [PRODUCTS[i] for i in ids], "n_results": len(ids)}, ids)


def view(*ids):
    return tr("product_view", {"products": [PRODUCTS[i] for i in ids]}, ids)


def v1(F=2, m1=2, matched=(NAVY, COTTON), h1=0, reasons=()):
    return Verdict(
        judge="rule", stage=1, F=F, N=1, q1=1, m1=m1, h1=h1, matched=list(matched), reasons=list(reasons), success=False
    )


def v2(F=2, N=1, matched=(), reasons=(), u2=None, p2=1, q2=1):
    return Verdict(
        judge="rule",
        stage=2,
        F=F,
        N=N,
        b=1 if N > 1 else 0,
        p2=p2,
        q2=q2,
        m2=len(matched),
        u2=u2,
        matched=list(matched),
        reasons=list(reasons),
    )


def stage(traj_stage, steps, verdict, prefs=None, recs=(), answer="done", termination="answered"):
    traj = Trajectory(
        task_id="t",
        stage=traj_stage,
        steps=steps,
        identified_preferences=prefs,
        recommended_ids=list(recs),
        final_answer=answer,
        termination=termination,
    )
    return StageResult(trajectory=traj, verdict=verdict, reward=RewardBreakdown(total=0.0))


def good_stage1(**kw):
    """Stage 1 that read the needle s1 and found both gold preferences."""
    return stage(
        1,
        [step(mem_search("s1")), step(mem_view("s1")), step(text="<answer>…</answer>")],
        kw.pop("verdict", v1()),
        prefs=[P("colour", "navy"), P("material", "cotton")],
        **kw,
    )


def P(attr, value, polarity="want"):
    return Preference(attribute=attr, value=value, polarity=polarity)


def episode(stages, task_type="single", mode="two_stage", succ=False, acc=1.0, error=None):
    return EpisodeResult(
        task_id="t",
        task_type=task_type,
        mode=mode,
        policy="p",
        stages=stages,
        acc=acc,
        succ=succ,
        wall_s=1.0,
        error=error,
    )


def task(task_type="single", needles=("s1",), n_products=1, voucher=None, budget=None):
    return Task(
        task_id="t",
        task_type=task_type,
        instruction="find me a shirt",
        user_id="u",
        history=[SessionRef(session_id=s, date="2024-01-01") for s in ("s0", "s1", "s2")],
        needle_session_ids=list(needles),
        preferences=[P("colour", "navy"), P("material", "cotton")],
        slots=[ProductSlot(product_type="shirt", reference_product_id="p1") for _ in range(n_products)],
        voucher=voucher,
        budget=budget,
    )


# --------------------------------------------------------------------------- one class each


def test_insufficient_memory_inspection_needle_never_returned():
    s1 = stage(
        1,
        [step(mem_search("s0")), step(mem_search("s2")), step(mem_view("s0", text="I like hiking"))],
        v1(m1=0, matched=(), reasons=["missing: colour=navy", "missing: material=cotton"]),
        prefs=[],
    )
    s2 = stage(2, [step(search("p2")), step(view("p2"))], v2(reasons=["p2 lacks colour=navy"]), recs=["p2"])
    c = T.classify(episode([s1, s2], acc=0.0), task())
    assert c.primary == "insufficient_tool_calls" and c.labels == ["insufficient_tool_calls"]
    assert c.evidence["insufficient_tool_calls"] == [
        "stage 1: missed colour=navy, material=cotton; 1/1 needle session(s) never opened with mem_view "
        "(mem_search returned 0/1 needles in 2 call(s); 1 mem_view call(s))"
    ]
    # without the task (no needle ids) the rule needs the absence of any mem_view call
    s1b = stage(1, [step(mem_search("s0"))], v1(m1=0, matched=()), prefs=[])
    c = T.classify(episode([s1b, s2], acc=0.0))
    assert c.primary == "insufficient_tool_calls"
    assert c.evidence["insufficient_tool_calls"] == [
        "stage 1: missed 2 preference(s) with no successful mem_view call (1 mem_search)"
    ]


def test_preference_hallucination_spurious_and_unsupported_value():
    s1 = stage(
        1,
        [step(mem_search("s1")), step(mem_view("s1"))],
        v1(m1=1, matched=(NAVY,), h1=1, reasons=["spurious: material=leather (want) is stated in no user turn"]),
        prefs=[P("colour", "navy"), P("material", "leather")],
    )
    s2 = stage(2, [step(search("p1")), step(view("p1"))], v2(matched=(NAVY,)), recs=["p1"])
    c = T.classify(episode([s1, s2], acc=0.5), task())
    assert c.primary == "preference_hallucination"
    assert c.evidence["preference_hallucination"] == [
        "stage 1: 1 spurious preference(s) reported (material=leather (want) is stated in no user turn)",
        "stage 1: value 'leather' (material) is in no memory observation",
        "stage 1: missed material=cotton although all 1 needle session(s) were opened with mem_view",
    ]


def test_preference_hallucination_evidence_read_but_not_extracted():
    s1 = stage(
        1, [step(mem_search("s1")), step(mem_view("s1"))], v1(m1=1, matched=(NAVY,)), prefs=[P("colour", "navy")]
    )
    s2 = stage(2, [step(search("p1")), step(view("p1"))], v2(matched=(NAVY,)), recs=["p1"])
    c = T.classify(episode([s1, s2], acc=0.5), task())
    assert c.primary == "preference_hallucination" and c.labels == ["preference_hallucination"]
    assert c.evidence["preference_hallucination"] == [
        "stage 1: missed material=cotton although all 1 needle session(s) were opened with mem_view"
    ]


def test_insufficient_product_tool_calls():
    s2 = stage(2, [step(text="<answer>@REC::p1@</answer>")], v2(p2=0), recs=["p1"])
    c = T.classify(episode([good_stage1(), s2]), task())
    assert c.primary == "insufficient_tool_calls"
    assert c.evidence["insufficient_tool_calls"] == [
        "stage 2: 0 successful product tool calls in 1 turn(s); recommended p1 without evidence"
    ]
    assert "product_id_sourcing" in c.secondary  # p1 was never returned either


def test_product_id_sourcing_fabricated_id_and_malformed_marker():
    s2 = stage(
        2,
        [step(search("p1")), step(view("p1"))],
        v2(p2=0, reasons=["zz:9: not in the catalog"]),
        recs=["zz:9"],
        answer="Take @REC::zz:9@ or @REC:: p1@",
    )
    c = T.classify(episode([good_stage1(), s2]), task(), lookup=lambda ids: {})
    assert c.primary == "product_id_sourcing"
    assert c.evidence["product_id_sourcing"] == [
        "stage 2: zz:9 never returned by a product tool",
        "stage 2: malformed marker '@REC:: p1@'",
    ]


def test_multi_sku_in_single_task():
    s2 = stage(
        2,
        [step(search("p1", "p2")), step(view("p1", "p2"))],
        v2(p2=0, matched=(NAVY, COTTON), reasons=["expected 1 product(s), got 2"]),
        recs=["p1", "p2"],
    )
    c = T.classify(episode([good_stage1(), s2]), task())
    assert c.primary == "multi_sku_single_task" and c.labels == ["multi_sku_single_task"]
    assert c.evidence["multi_sku_single_task"] == ["stage 2: 2 ids recommended for one product: p1, p2"]


def test_same_shop_alignment():
    t = task("addon", n_products=2, voucher=Voucher(shop_id="s1", min_spend=10, discount=2), budget=100)
    s2 = stage(
        2,
        [step(search("p1", "p3")), step(view("p1", "p3"))],
        v2(N=2, matched=(NAVY, COTTON), u2=0, reasons=["products are from different shops: s1, s2"]),
        recs=["p1", "p3"],
    )
    c = T.classify(episode([good_stage1(), s2], "addon"), t)
    assert c.primary == "same_shop_alignment" and c.labels == ["same_shop_alignment"]
    assert c.evidence["same_shop_alignment"] == [
        "stage 2: products from shops p1@s1, p3@s2",
        "stage 2: not in the voucher's shop s1: p3",
    ]


def test_unverified_attributes_known_preference_not_checked():
    # stage 1 found both preferences; the recommended product was viewed and lacks navy
    s2 = stage(
        2,
        [step(search("p1", "p2")), step(view("p2"))],
        v2(matched=(COTTON,), reasons=["p2 lacks colour=navy (value 'Blue')"]),
        recs=["p2"],
    )
    c = T.classify(episode([good_stage1(), s2]), task())
    assert c.primary == "unverified_attributes" and c.labels == ["unverified_attributes"]
    assert c.evidence["unverified_attributes"] == [
        "stage 2: judge: p2 lacks colour=navy (value 'Blue'); the preference was identified in stage 1, "
        "its viewed record does not show 'navy'"
    ]
    # without the task the verdicts' matched lists still say what was known and what failed
    c = T.classify(episode([good_stage1(), s2]))
    assert c.primary == "unverified_attributes" and c.evidence["unverified_attributes"][0].startswith(
        "stage 2: judge: p2 lacks colour=navy"
    )


def test_unverified_attributes_no_view_asserted_value_and_wrong_type():
    s2 = stage(
        2,
        [step(search("p1", "p3")), step(view("p3"))],
        v2(matched=(NAVY, COTTON), q2=0, reasons=["p1: a 'cap' is not a 'shirt'"]),
        recs=["p1"],
        answer="A cotton shirt. @REC::p1@",
    )
    c = T.classify(episode([good_stage1(), s2]), task())
    assert c.primary == "unverified_attributes"
    assert c.evidence["unverified_attributes"] == [
        "stage 2: p1 recommended without product_view",
        "stage 2: answer asserts 'cotton' but no viewed record of the recommendation has it",
        "stage 2: judge: p1: a 'cap' is not a 'shirt'",
    ]
    # the judge quotes a type holding an apostrophe with double quotes
    s2.verdict.reasons = ["p1: a 'cap' is not a \"men's shirt\""]
    assert T.classify(episode([good_stage1(), s2]), task()).evidence["unverified_attributes"][-1] == (
        "stage 2: judge: p1: a 'cap' is not a \"men's shirt\""
    )


def test_budget_exceeded_extension():
    t = task("addon", n_products=2, voucher=Voucher(shop_id="s1", min_spend=10, discount=2), budget=30)
    s2 = stage(
        2,
        [step(search("p1", "p4")), step(view("p1", "p4"))],
        v2(N=2, matched=(NAVY, COTTON), u2=0, reasons=["total 40 - discount 2 = 38 exceeds budget 30"]),
        recs=["p1", "p4"],
    )
    c = T.classify(episode([good_stage1(), s2], "addon"), t)
    assert c.primary == "budget_exceeded" and c.labels == ["budget_exceeded"]
    assert c.evidence["budget_exceeded"] == ["stage 2: judge: total 40 - discount 2 = 38 exceeds budget 30"]


def test_incomplete_answer_extension():
    s2 = stage(
        2,
        [step(search("p1")) for _ in range(3)],
        v2(p2=0, q2=0, reasons=["expected 1 product(s), got 0"]),
        answer=None,
        termination="max_turns",
    )
    c = T.classify(episode([good_stage1(), s2]), task())
    assert c.primary == "incomplete_answer" and c.labels == ["incomplete_answer"]
    assert c.evidence["incomplete_answer"] == ["stage 2: ended by max_turns after 3 turn(s) without an answer"]


def test_no_rule_matches_is_other():
    # correct preferences, the viewed product shows both values, yet the judge rejects it
    s2 = stage(
        2,
        [step(search("p1")), step(view("p1"))],
        v2(matched=(NAVY, COTTON), p2=1, q2=1, reasons=["all checks passed"]),
        recs=["p1"],
    )
    c = T.classify(episode([good_stage1(), s2]), task())
    assert c.labels == [] and c.primary == "other" and c.secondary == [] and c.evidence == {}


# --------------------------------------------------------------------------- precedence and scope


def test_cascading_stage1_error_is_primary_else_secondary():
    s1 = stage(
        1, [step(mem_search("s1")), step(mem_view("s1"))], v1(m1=1, matched=(NAVY,)), prefs=[P("colour", "navy")]
    )
    # the product fails the preference stage 1 missed: the stage-1 error is primary
    s2 = stage(2, [step(search("p1")), step(view("p1"))], v2(matched=(NAVY,), reasons=["p1 lacks material=cotton"]))
    s2.trajectory.recommended_ids = ["p1"]
    c = T.classify(episode([s1, s2], acc=0.5), task())
    assert c.primary == "preference_hallucination" and c.secondary == []
    # the product has what stage 1 missed but fails what it found: stage 2 is the cause
    s2b = stage(
        2, [step(search("p2")), step(view("p2"))], v2(matched=(COTTON,), reasons=["p2 lacks colour=navy"]), recs=["p2"]
    )
    c = T.classify(episode([s1, s2b], acc=0.5), task())
    assert c.primary == "unverified_attributes" and c.secondary == ["preference_hallucination"]


def test_oracle_and_one_stage_and_unscored():
    s2 = stage(2, [step(search("p2")), step(view("p2"))], v2(matched=(COTTON,)), recs=["p2"])
    c = T.classify(episode([s2], mode="oracle"), task())
    assert c.primary == "unverified_attributes"
    assert "the preference was given (oracle)" in c.evidence["unverified_attributes"][0]
    # one_stage: the single trajectory is judged for preferences through preference_verdict
    one = stage(
        2, [step(mem_search("s0")), step(search("p2")), step(view("p2"))], v2(matched=(COTTON,)), prefs=[], recs=["p2"]
    )
    e = episode([one], mode="one_stage", acc=0.0)
    e.preference_verdict = v1(m1=0, matched=())
    c = T.classify(e, task())
    assert c.primary == "insufficient_tool_calls" and "unverified_attributes" not in c.labels
    ok = stage(2, [step(search("p1"))], v2(matched=(NAVY, COTTON)), recs=["p1"])
    assert T.classify(episode([good_stage1(), ok], succ=True), task()) is None
    assert T.classify(episode([good_stage1(), ok], error="backend_error: x"), task()) is None


def test_table_rows_and_shares():
    items = [
        T.Classification("a", 0, "two_stage:none", "single", [], "other"),
        T.Classification(
            "b", 0, "two_stage:none", "addon", ["same_shop_alignment", "budget_exceeded"], "same_shop_alignment"
        ),
    ]
    prim = T.taxonomy_table(items)
    assert prim["n_failures"] == 2 and prim["rows"]["other"] == {"single": 1, "addon": 0, "total": 1, "share": 0.5}
    assert set(T.CATEGORIES) <= set(prim["rows"]) and "budget_exceeded" not in prim["rows"]
    labels = T.taxonomy_table(items, "labels")
    assert labels["rows"]["budget_exceeded"]["total"] == 1 and labels["rows"]["same_shop_alignment"]["addon"] == 1
    assert T.CATEGORIES == (
        "unverified_attributes",
        "same_shop_alignment",
        "multi_sku_single_task",
        "product_id_sourcing",
        "preference_hallucination",
        "insufficient_tool_calls",
    )
