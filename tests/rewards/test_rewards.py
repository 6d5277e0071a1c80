"""Rewards of §5.3 against hand-computed values (Eqs. 6–12)."""

from __future__ import annotations

import pytest

from shopping_companion.envs.parsing import format_flags, parse_action
from shopping_companion.rewards import (
    compute_reward,
    format_indicators,
    format_reward,
    memory_call_reward,
    outcome_reward,
    product_call_reward,
    stage1_reward,
    stage2_reward,
    tool_call_reward,
    tool_wise_reward,
)
from shopping_companion.types import (
    Preference,
    ProductSlot,
    SessionRef,
    Step,
    Task,
    ToolCall,
    ToolResult,
    Trajectory,
    Verdict,
)


def V(stage, F, N=1, b=0, **kw):
    return Verdict(judge="test", stage=stage, F=F, N=N, b=b, **kw)


def make_task(addon=False):
    slots = [ProductSlot(product_type="shirt", reference_product_id="p:ref1")]
    if addon:
        slots += [
            ProductSlot(product_type="jeans", reference_product_id="p:ref2"),
            ProductSlot(product_type="belt", reference_product_id="p:ref3"),
        ]
    return Task(
        task_id="t1",
        task_type="addon" if addon else "single",
        instruction="find me a shirt",
        user_id="u1",
        history=[SessionRef(session_id=s, date="2024-01-01") for s in ("s1", "s2", "s3", "s4")],
        needle_session_ids=["s2", "s4"],
        preferences=[Preference(attribute="colour", value="navy"), Preference(attribute="size", value="M")],
        slots=slots,
    )


def step(text, calls=(), results=()):
    p = parse_action(text)
    return Step(
        assistant_text=text, tool_calls=list(calls) or p.tool_calls, tool_results=list(results), format=format_flags(p)
    )


def R(call_id, name, ids, error=None):
    return ToolResult(call_id=call_id, name=name, content="...", returned_ids=ids, error=error)


def C(call_id, name):
    return ToolCall(name=name, arguments={}, call_id=call_id)


# --------------------------------------------------------------------------- Eq. 6 / Eq. 7


def test_stage1_single_hand_computed():
    # F=2, q1=1, m1=1: (1+1)/(1+2) = 2/3
    assert stage1_reward(V(1, 2, q1=1, m1=1)) == pytest.approx(2 / 3)
    # F=3, q1=1, m1=3 -> 4/4
    assert stage1_reward(V(1, 3, q1=1, m1=3)) == pytest.approx(1.0)
    # F=2, q1=0, m1=0 -> 0
    assert stage1_reward(V(1, 2, q1=0, m1=0)) == 0.0
    # b=0 ignores c1 even if given: F=1, q1=1, m1=0, c1=5 -> 1/2
    assert stage1_reward(V(1, 1, N=1, q1=1, m1=0, c1=1)) == pytest.approx(0.5)


def test_stage1_addon_hand_computed():
    # F=5, N=3, q1=1, m1=4, c1=2: (1+4+2)/(1+5+3) = 7/9
    assert stage1_reward(V(1, 5, N=3, b=1, q1=1, m1=4, c1=2)) == pytest.approx(7 / 9)


def test_stage2_single_hand_computed():
    # F=2: p2=1, q2=1, m2=1 -> (1+1+1)/(2+2) = 3/4
    assert stage2_reward(V(2, 2, p2=1, q2=1, m2=1)) == pytest.approx(0.75)
    # F=3: p2=0, q2=1, m2=3 -> 4/5
    assert stage2_reward(V(2, 3, p2=0, q2=1, m2=3)) == pytest.approx(0.8)


def test_stage2_addon_hand_computed():
    # F=5, N=3: p2=1, q2=1, m2=3, n2=2, u2=0 -> (1+1+3+2+0)/(2+5+4) = 7/11
    assert stage2_reward(V(2, 5, N=3, b=1, p2=1, q2=1, m2=3, n2=2, u2=0)) == pytest.approx(7 / 11)
    # all perfect -> 1
    assert stage2_reward(V(2, 5, N=3, b=1, p2=1, q2=1, m2=5, n2=3, u2=1)) == pytest.approx(1.0)


def test_outcome_reward_dispatches():
    assert outcome_reward(V(1, 2, q1=1, m1=1)) == pytest.approx(2 / 3)
    assert outcome_reward(V(2, 2, p2=1, q2=1, m2=1)) == pytest.approx(0.75)


def test_failed_verdict_raises_never_zero():
    with pytest.raises(ValueError, match="failed"):
        outcome_reward(V(1, 2, q1=0, m1=0, failed=True, reasons=["timeout"]))
    with pytest.raises(ValueError, match="failed"):
        stage2_reward(V(2, 2, p2=0, q2=0, m2=0, failed=True))


@pytest.mark.parametrize(
    "verdict",
    [
        V(1, 2, m1=1),  # q1 missing
        V(1, 2, q1=1),  # m1 missing
        V(1, 2, N=2, b=1, q1=1, m1=1),  # c1 missing for add-on
        V(2, 2, q2=1, m2=1),  # p2 missing
        V(2, 2, N=2, b=1, p2=1, q2=1, m2=1, n2=1),  # u2 missing for add-on
        V(1, 2, q1=1, m1=3),  # m1 > F
        V(1, 2, q1=2, m1=1),  # q1 not binary
        V(2, 2, N=2, b=1, p2=1, q2=1, m2=1, n2=3, u2=1),  # n2 > N
    ],
)
def test_missing_or_out_of_range_fields_raise(verdict):
    with pytest.raises(ValueError):
        outcome_reward(verdict)


def test_stage_mismatch_raises():
    with pytest.raises(ValueError):
        stage1_reward(V(2, 2, p2=1, q2=1, m2=1))


# --------------------------------------------------------------------------- Eqs. 8–10


def test_memory_and_product_call_rewards():
    # 4 distinct sessions returned, 2 gold -> 1/2
    assert memory_call_reward(R("c", "mem_search", ["s1", "s2", "s3", "s4"]), ["s2", "s4"]) == 0.5
    # duplicates count once: {s2, s1} -> 1/2 (not 2/3)
    assert memory_call_reward(R("c", "mem_view", ["s2", "s2", "s1"]), ["s2"]) == 0.5
    # 1 of 5 products is a reference -> 1/5
    assert product_call_reward(R("c", "product_search", ["a", "b", "p:ref1", "c", "d"]), ["p:ref1"]) == pytest.approx(
        0.2
    )
    # empty and errored calls score 0
    assert product_call_reward(R("c", "product_search", []), ["p:ref1"]) == 0.0
    assert product_call_reward(R("c", "product_view", ["p:ref1"], error="bad id"), ["p:ref1"]) == 0.0


def test_tool_call_reward_dispatch():
    task = make_task()
    assert tool_call_reward(R("c", "mem_search", ["s2"]), task) == 1.0
    assert tool_call_reward(R("c", "product_view", ["p:ref1", "x"]), task) == 0.5
    assert tool_call_reward(R("c", "product_view", ["s2"]), task) == 0.0  # a session id is no product
    assert tool_call_reward(R("c", "calculator", ["s2"]), task) == 0.0


def test_tool_wise_reward_several_calls():
    task = make_task()
    traj = Trajectory(
        task_id="t1",
        stage=1,
        steps=[
            Step(
                assistant_text="a",
                tool_calls=[C("c0", "mem_search"), C("c1", "mem_view")],
                tool_results=[R("c0", "mem_search", ["s1", "s2", "s3", "s4"]), R("c1", "mem_view", ["s2"])],
            ),
            Step(assistant_text="b", tool_calls=[C("c2", "mem_view")], tool_results=[R("c2", "mem_view", ["s3"])]),
            Step(assistant_text="<answer>[]</answer>"),
        ],
    )
    # r = [2/4, 1, 0] -> mean 0.5
    total, per = tool_wise_reward(traj, task)
    assert per == [0.5, 1.0, 0.0]
    assert total == pytest.approx(0.5)


def test_tool_wise_reward_no_calls_is_zero_and_missing_result_scores_zero():
    task = make_task()
    assert tool_wise_reward(Trajectory(task_id="t1", stage=2, steps=[Step(assistant_text="x")]), task) == (0.0, [])
    traj = Trajectory(
        task_id="t1",
        stage=2,
        steps=[
            Step(
                assistant_text="x",
                tool_calls=[C("c0", "product_view"), C("c1", "product_view")],
                tool_results=[R("c0", "product_view", ["p:ref1"])],
            )
        ],
    )
    # c0 -> 1, c1 has no result -> 0; mean 0.5
    assert tool_wise_reward(traj, task) == (0.5, [1.0, 0.0])


# --------------------------------------------------------------------------- Eq. 11

GOOD1 = '<think>found them</think><answer>{"preferences": [{"attribute": "colour", "value": "navy"}]}</answer>'
GOOD2 = "<think>ok</think><answer>Best pick: @REC::p:ref1@</answer>"


def test_format_stage1_correct():
    traj = Trajectory(
        task_id="t1",
        stage=1,
        steps=[step('<think>a</think><tool_call>{"name": "mem_search", "arguments": {}}</tool_call>'), step(GOOD1)],
        final_answer=parse_action(GOOD1).answer,
    )
    assert format_indicators(traj) == {"f_ans": 1.0, "f_th": 1.0, "f_tc": 1.0, "f_rec": 0.0}
    assert format_reward(traj) == pytest.approx(1.0)  # 3/3


def test_format_stage1_partial():
    # a good call, bad tool JSON in turn 2, unparsable stage-1 answer: f_ans=0, f_th=1, f_tc=0 -> 1/3
    bad = "<think>x</think><answer>navy please</answer>"
    good_call = step('<tool_call>{"name": "mem_search", "arguments": {"queries": ["x"]}}</tool_call>')
    broken = step('<tool_call>{"name": "mem_search", </tool_call>')
    traj = Trajectory(
        task_id="t1", stage=1, steps=[good_call, broken, step(bad)], final_answer=parse_action(bad).answer
    )
    assert format_indicators(traj)["f_ans"] == 0.0
    assert format_indicators(traj)["f_tc"] == 0.0
    assert format_reward(traj) == pytest.approx(1 / 3)
    # without the good call no turn holds a valid action (issue 31): no format credit at all
    traj = Trajectory(task_id="t1", stage=1, steps=[broken, step(bad)], final_answer=parse_action(bad).answer)
    assert format_indicators(traj) == {"f_ans": 0.0, "f_th": 0.0, "f_tc": 0.0, "f_rec": 0.0}
    assert format_reward(traj) == 0.0


def test_format_stage1_malformed():
    # unclosed think, no answer, broken call: everything 0 -> 0
    traj = Trajectory(
        task_id="t1", stage=1, steps=[step("<think>x</think></think><tool_call>{</tool_call>")], termination="max_turns"
    )
    assert format_reward(traj) == 0.0


SEARCH = '<think>s</think><tool_call>{"name": "product_search", "arguments": {"query": "shirt"}}</tool_call>'


def test_format_stage2_correct():
    traj = Trajectory(task_id="t1", stage=2, steps=[step(SEARCH), step(GOOD2)], final_answer=parse_action(GOOD2).answer)
    assert format_reward(traj) == pytest.approx(1.0)  # 4/4
    # the same answer without any tool call: f_tc = 0 (issue 31) -> 3/4
    traj = Trajectory(task_id="t1", stage=2, steps=[step(GOOD2)], final_answer=parse_action(GOOD2).answer)
    assert format_indicators(traj)["f_tc"] == 0.0 and format_reward(traj) == pytest.approx(0.75)


def test_format_stage2_malformed_rec_marker():
    # answer present, think ok, tool ok, but marker malformed -> 3/4
    text = "<answer>Best: @REC:p:ref1@</answer>"
    traj = Trajectory(task_id="t1", stage=2, steps=[step(SEARCH), step(text)], final_answer=parse_action(text).answer)
    assert format_indicators(traj)["f_rec"] == 0.0
    assert format_reward(traj) == pytest.approx(0.75)
    # one good and one malformed marker still fails f_rec
    text = "<answer>@REC::p:ref1@ and @REC::@</answer>"
    traj = Trajectory(task_id="t1", stage=2, steps=[step(SEARCH), step(text)], final_answer=parse_action(text).answer)
    assert format_reward(traj) == pytest.approx(0.75)


def test_format_stage2_no_answer_bad_think():
    # nested think before a valid call, no answer: f_ans=0, f_th=0, f_tc=1, f_rec=0 -> 1/4
    call = '<tool_call>{"name": "product_search", "arguments": {"query": "shirt"}}</tool_call>'
    traj = Trajectory(task_id="t1", stage=2, steps=[step("<think><think>x</think></think>" + call)])
    assert format_reward(traj) == pytest.approx(0.25)
    # the same turn without the call holds no valid action: 0 (issue 31; was 1/4, f_tc vacuously 1)
    traj = Trajectory(task_id="t1", stage=2, steps=[step("<think><think>x</think></think>")])
    assert format_reward(traj) == 0.0


def test_format_empty_trajectory_is_zero():
    assert format_reward(Trajectory(task_id="t1", stage=2)) == 0.0


# --------------------------------------------------------------------------- Eq. 12


def test_compute_reward_stage1_total():
    task = make_task()
    traj = Trajectory(
        task_id="t1",
        stage=1,
        steps=[
            Step(
                assistant_text="<tool_call>{}</tool_call>",
                tool_calls=[C("c0", "mem_search")],
                tool_results=[R("c0", "mem_search", ["s1", "s2"])],
            ),
            step(GOOD1),
        ],
        final_answer=parse_action(GOOD1).answer,
    )
    rb = compute_reward(task, traj, V(1, 2, q1=1, m1=1))
    # R1 = 2/3, R_tool = 1/2, R_fmt = 3/3 -> 2/3 + 1/2 + 1
    assert rb.total == pytest.approx(2 / 3 + 0.5 + 1.0)
    c = rb.components
    assert c["R_z"] == pytest.approx(2 / 3) and c["R1"] == pytest.approx(2 / 3) and "R2" not in c
    assert c["R_tool"] == 0.5 and c["R_fmt"] == 1.0
    assert c["tool_mem_mean"] == 0.5 and c["tool_prod_mean"] == 0.0 and c["n_tool_calls"] == 1.0
    assert c["success"] == 0.0
    assert {"f_ans", "f_th", "f_tc", "f_rec"} <= set(c)
    assert rb.per_tool_call == [0.5]


def test_compute_reward_stage2_addon_total():
    task = make_task(addon=True)
    traj = Trajectory(
        task_id="t1",
        stage=2,
        steps=[
            Step(
                assistant_text="x",
                tool_calls=[C("c0", "product_search"), C("c1", "product_view")],
                tool_results=[
                    R("c0", "product_search", ["p:ref1", "p:ref2", "z", "y"]),
                    R("c1", "product_view", ["p:ref3"]),
                ],
            ),
            step(GOOD2),
        ],
        final_answer=parse_action(GOOD2).answer,
    )
    v = V(2, 2, N=3, b=1, p2=1, q2=1, m2=2, n2=3, u2=1, success=True)
    rb = compute_reward(task, traj, v)
    # R2 = (1+1+2+3+1)/(2+2+4) = 1; R_tool = (2/4 + 1)/2 = 0.75; R_fmt = 4/4
    assert rb.components["R2"] == pytest.approx(1.0)
    assert rb.components["R_tool"] == pytest.approx(0.75)
    assert rb.components["tool_prod_mean"] == pytest.approx(0.75)
    assert rb.total == pytest.approx(2.75)
    assert rb.components["success"] == 1.0


def test_compute_reward_rejects_failed_or_mismatched_verdict():
    task = make_task()
    traj = Trajectory(task_id="t1", stage=1, steps=[step(GOOD1)], final_answer="[]")
    with pytest.raises(ValueError):
        compute_reward(task, traj, V(1, 2, q1=1, m1=1, failed=True))
    with pytest.raises(ValueError):
        compute_reward(task, traj, V(2, 2, p2=1, q2=1, m2=1))
    with pytest.raises(ValueError):
        compute_reward(task, traj, V(1, 2, N=1, b=1, q1=1, m1=1, c1=1))
