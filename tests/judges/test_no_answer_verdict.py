"""A stage that ended without a final answer scores as no answer (issue 32, item 5): the LLM judge
sends no request for it and both judges return the same no-answer verdict (every score 0, the
reason ``no final answer: …``), so R_z, Acc, Succ and the SFT keep rules see 0. The LLM judge runs
against the local scripted OpenAI-compatible server; an empty script answers any request with
HTTP 500, so a request that should not be sent is also seen in ``srv.bodies``."""

from __future__ import annotations

import pytest

from shopping_companion.judges.base import NO_ANSWER, accuracy, no_answer_verdict, success
from shopping_companion.judges.rule import RuleJudge
from shopping_companion.rewards import compute_reward, outcome_reward, safe_reward
from shopping_companion.types import Step, ToolCall, ToolResult, Trajectory
from tests.openai_server import ScriptedOpenAIServer
from tests.judges.test_llm_judge import GOOD1, addon_task, judge_for, lookup, single_task, stage1_traj


def unanswered(stage: int, termination: str = "max_turns", answer: str | None = None) -> Trajectory:
    """A stage that only called tools (one call, one result), then ended without an answer."""
    name = "mem_search" if stage == 1 else "product_search"
    return Trajectory(
        task_id="t",
        stage=stage,
        final_answer=answer,
        termination=termination,
        steps=[
            Step(
                assistant_text=f'<tool_call>{{"name": "{name}", "arguments": {{}}}}</tool_call>',
                tool_calls=[ToolCall(name=name, arguments={}, call_id="c0")],
                tool_results=[ToolResult(call_id="c0", name=name, content="..", returned_ids=["m:1"])],
            )
        ],
    )


CASES = [
    (single_task, 1, "max_turns", None),
    (single_task, 2, "invalid_output", None),
    (addon_task, 1, "context_length", None),
    (addon_task, 2, "max_turns", None),
    (single_task, 1, "answered", "   "),  # an empty answer block
    (single_task, 2, "answered", ""),
]


@pytest.mark.parametrize("make_task,stage,termination,answer", CASES)
def test_llm_judge_sends_no_request_and_both_judges_give_the_no_answer_verdict(make_task, stage, termination, answer):
    task, traj = make_task(), unanswered(stage, termination, answer)
    with ScriptedOpenAIServer([]) as srv:
        judge = judge_for(srv)
        v = judge.judge(task, traj)
        assert srv.bodies == [] and srv.errors == []
    assert judge.stats["requests"] == 0 and judge.stats["no_answer"] == 1 and judge.stats["judged"] == 1
    assert v.no_answer and not v.failed and not v.success and v.matched == []
    assert v.judge == "llm:judge-model" and (v.F, v.N, v.b) == (
        len(task.preferences),
        task.n_products,
        int(task.task_type == "addon"),
    )
    assert len(v.reasons) == 1 and v.reasons[0].startswith(NO_ANSWER + ": ")
    assert (termination if answer is None else "the answer block is empty") in v.reasons[0]
    addon = task.task_type == "addon"
    if stage == 1:
        assert (v.q1, v.m1, v.h1, v.c1) == (0, 0, 0, 0 if addon else None)
    else:
        assert (v.p2, v.q2, v.m2, v.n2, v.u2) == (0, 0, 0, *((0, 0) if addon else (None, None)))
    # the rule judge gives the same verdict (only the judge's name differs)
    r = RuleJudge(lookup).judge(task, traj)
    assert r.judge == "rule" and r.model_dump(exclude={"judge"}) == v.model_dump(exclude={"judge"})
    assert r == no_answer_verdict("rule", task, traj)
    # what rewards and metrics read off it: nothing
    assert outcome_reward(v) == 0.0
    breakdown = safe_reward(task, traj, v)
    assert breakdown is not None and breakdown.components["R_z"] == 0.0 and breakdown.components["success"] == 0.0
    assert (accuracy(v) if stage == 1 else float(success(v))) == 0.0


def test_no_answer_has_acc_zero_even_without_gold_preferences():
    """F = 0 has nothing to miss, but a stage that gave no answer did not find it: Acc 0, not 1
    (the SFT `pref_acc` rule would otherwise keep the unanswered stage)."""
    task = single_task().model_copy(update={"preferences": []})
    v = RuleJudge(lookup).judge(task, unanswered(1))
    assert v.no_answer and v.F == 0 and not v.success and accuracy(v) == 0.0
    assert compute_reward(task, unanswered(1), v).components["R_z"] == 0.0
    # an answer that reports no preference is an answer: F = 0 is then fully met
    answered = Trajectory(task_id="t", stage=1, final_answer='{"preferences": []}', termination="answered")
    v2 = RuleJudge(lookup).judge(task, answered)
    assert not v2.no_answer and accuracy(v2) == 1.0


def test_a_trajectory_with_an_answer_is_still_sent_to_the_llm_judge():
    # a hand-built trajectory may carry the parsed answer without the text: it is an answer
    traj = stage1_traj().model_copy(update={"final_answer": None})
    with ScriptedOpenAIServer([GOOD1, GOOD1]) as srv:
        judge = judge_for(srv)
        v = judge.judge(single_task(), traj)
        answered = judge.judge(single_task(), stage1_traj())
        assert len(srv.bodies) == 2
    assert not v.no_answer and v.m1 == 2 and not answered.no_answer and answered.m1 == 2
    assert no_answer_verdict("x", single_task(), traj) is None
    assert judge.stats["no_answer"] == 0


def test_judge_many_asks_only_about_the_answered_stages():
    items = [(single_task(), unanswered(1)), (single_task(), stage1_traj()), (addon_task(), unanswered(2))]
    with ScriptedOpenAIServer([GOOD1]) as srv:
        judge = judge_for(srv, concurrency=3)
        verdicts = judge.judge_many(items)
        assert len(srv.bodies) == 1
    assert [v.no_answer for v in verdicts] == [True, False, True]
    assert verdicts[1].m1 == 2 and judge.stats["no_answer"] == 2 and judge.stats["requests"] == 1
