"""Issue 13, item 4: the action protocol and the Eq. 11 indicators mean what they say.

Each test reproduces a defect of the old parser/indicators (it failed before the fix): a
``</tool_call>`` inside a JSON string cut the call, NaN/Infinity were valid JSON, two answer
blocks (the last silently won), two think blocks and a tool call after the answer all kept
R_fmt = 1.
"""

from __future__ import annotations

import json

import pytest

from shopping_companion.envs.parsing import format_flags, parse_action, parse_preferences
from shopping_companion.llm.base import StructuredToolCall
from shopping_companion.rewards import format_indicators, format_reward
from shopping_companion.types import FormatFlags, Step, Trajectory

GOOD1 = '<think>found them</think><answer>{"preferences": [{"attribute": "colour", "value": "navy"}]}</answer>'
GOOD2 = "<think>ok</think><answer>Best pick: @REC::p:ref1@</answer>"
CALL = '<tool_call>{"name": "product_search", "arguments": {"query": "navy shirt"}}</tool_call>'


def step(text: str, structured=None) -> Step:
    p = parse_action(text, structured=structured)
    return Step(assistant_text=text, tool_calls=p.tool_calls, format=format_flags(p))


def traj(stage: int, *texts: str) -> Trajectory:
    steps = [step(t) for t in texts]
    return Trajectory(task_id="t", stage=stage, steps=steps, final_answer=parse_action(texts[-1]).answer)


# --------------------------------------------------------------------------- tool calls by object boundary


def test_close_tag_inside_a_json_string_does_not_cut_the_call():
    text = '<tool_call>{"name": "product_search", "arguments": {"query": "tag </tool_call> inside"}}</tool_call>'
    p = parse_action(text)
    assert p.tool_errors == [] and p.errors == []
    assert [(c.name, c.arguments) for c in p.tool_calls] == [("product_search", {"query": "tag </tool_call> inside"})]
    t = traj(2, text, GOOD2)
    assert format_indicators(t)["f_tc"] == 1.0 and format_reward(t) == 1.0


def test_close_tag_in_a_string_then_a_second_block():
    text = (
        '<tool_call>{"name": "a", "arguments": {"q": "</tool_call><tool_call>"}}</tool_call>\n'
        '<tool_call>```json\n{"name": "b", "arguments": {}}\n```</tool_call>'
    )
    p = parse_action(text)
    assert [c.name for c in p.tool_calls] == ["a", "b"] and p.errors == []
    assert p.tool_calls[0].arguments == {"q": "</tool_call><tool_call>"}


def test_text_after_the_json_value_is_an_error_and_the_block_ends_at_the_following_closer():
    text = '<tool_call>{"name": "x", "arguments": {"q": "</tool_call>"}} junk</tool_call>' + CALL
    p = parse_action(text)
    assert [c.name for c in p.tool_calls] == ["product_search"]
    assert len(p.tool_errors) == 1 and p.tool_errors[0].startswith(
        "tool-call block #1: invalid JSON in <tool_call>: Extra data at line 1 column 51 (char 50)"
    )


def test_unclosed_and_stray_and_invalid_messages_are_kept():
    assert (
        parse_action('<tool_call>{"name": "a", "arguments": {}}')
        .tool_errors[0]
        .startswith("tool-call block #1: unclosed <tool_call> (no </tool_call>)")
    )
    assert parse_action("</tool_call>").tool_errors == ["stray </tool_call> without a matching <tool_call>"]
    e = parse_action('<tool_call>{"name": "a", "arguments": {"q": 1}</tool_call>').tool_errors[0]
    assert "Expecting ',' delimiter at line 1 column 36 (char 35)" in e


@pytest.mark.parametrize("const", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_not_json(const):
    p = parse_action(
        '<tool_call>{"name": "product_search", "arguments": {"query": "x", "max_price": ' + const + "}}</tool_call>"
    )
    assert p.tool_calls == [] and not p.tool_json_ok
    assert f"non-standard JSON constant {const}" in p.tool_errors[0]
    # inside an "arguments" string and in a structured call's arguments
    p = parse_action('<tool_call>{"name": "x", "arguments": "{\\"a\\": ' + const + '}"}</tool_call>')
    assert p.tool_calls == [] and "non-standard JSON constant" in p.tool_errors[0]
    p = parse_action("", structured=[StructuredToolCall(id="c", name="x", arguments='{"a": ' + const + "}")])
    assert p.tool_calls == [] and p.tool_error_ids == ["c"] and "non-standard JSON constant" in p.tool_errors[0]
    t = traj(1, '<tool_call>{"name": "mem_search", "arguments": {"top_k": ' + const + "}}</tool_call>", GOOD1)
    assert format_indicators(t)["f_tc"] == 0.0 and format_reward(t) == pytest.approx(2 / 3)


@pytest.mark.parametrize("const", ["NaN", "Infinity", "-Infinity"])
def test_stage1_answer_with_nan_is_not_parsable(const):
    prefs, err = parse_preferences('{"preferences": [{"attribute": "width", "value": ' + const + "}]}")
    assert prefs == [] and err is not None and "non-standard JSON constant" in err
    text = '<answer>{"preferences": [{"attribute": "width", "value": ' + const + "}]}</answer>"
    assert format_indicators(traj(1, text))["f_ans"] == 0.0


# --------------------------------------------------------------------------- answers


def test_two_answer_blocks_give_f_ans_zero_even_identical():
    two = "<think>x</think><answer>Buy @REC::p:ref1@</answer><answer>Buy @REC::p:2@</answer>"
    p = parse_action(two)
    assert p.n_answers == 2 and p.answer == "Buy @REC::p:ref1@" and p.has_answer
    assert any("2 <answer> blocks in one turn" in e for e in p.errors)
    f = format_indicators(traj(2, two))
    assert f == {"f_ans": 0.0, "f_th": 1.0, "f_tc": 1.0, "f_rec": 1.0}
    same = "<answer>@REC::p:ref1@</answer><answer>@REC::p:ref1@</answer>"
    assert format_indicators(traj(2, same))["f_ans"] == 0.0
    assert format_reward(traj(2, same)) == pytest.approx(3 / 4)
    s1 = GOOD1 + '<answer>{"preferences": []}</answer>'
    assert format_reward(traj(1, s1)) == pytest.approx(2 / 3)


def test_exactly_one_answer_block_is_fine():
    assert format_indicators(traj(2, GOOD2)) == {"f_ans": 1.0, "f_th": 1.0, "f_tc": 1.0, "f_rec": 1.0}
    assert format_flags(parse_action(GOOD2)).n_answers == 1


# --------------------------------------------------------------------------- thinking


def test_two_think_blocks_are_a_format_error():
    text = "<think>a</think><think>b</think><answer>@REC::p:ref1@</answer>"
    p = parse_action(text)
    assert not p.think_ok and p.n_think_blocks == 2 and p.answer == "@REC::p:ref1@"
    assert p.errors == ["2 thinking blocks in one turn (at most one <think> block per turn)"]
    assert format_indicators(traj(2, text))["f_th"] == 0.0
    assert format_reward(traj(2, text)) == pytest.approx(3 / 4)
    # a leading </think> (Qwen3 template) plus another block is two blocks too
    assert not parse_action("plan</think><think>more</think><answer>x</answer>").think_ok
    # one block, and the Qwen3 leading </think> alone, stay fine
    assert parse_action("<think>a</think><answer>x</answer>").n_think_blocks == 1
    assert parse_action("plan</think><answer>x</answer>").think_ok


# --------------------------------------------------------------------------- order


def test_tool_call_after_the_answer_is_a_protocol_error():
    text = "<think>x</think><answer>@REC::p:ref1@</answer>" + CALL
    p = parse_action(text)
    assert p.tool_after_answer and p.tool_json_ok and p.tool_errors == []  # the JSON itself is fine
    assert p.answer == "@REC::p:ref1@" and len(p.tool_calls) == 1
    assert any("tool call(s) after the <answer> block" in e for e in p.errors)
    f = format_flags(p)
    assert f.tool_after_answer and not f.tool_json_ok
    assert format_indicators(traj(2, text)) == {"f_ans": 1.0, "f_th": 1.0, "f_tc": 0.0, "f_rec": 1.0}
    assert format_reward(traj(2, text)) == pytest.approx(3 / 4)


def test_tool_call_inside_the_answer_block_is_after_it():
    p = parse_action("<answer>@REC::p:ref1@ " + CALL + "</answer>")
    assert p.tool_after_answer and p.answer == "@REC::p:ref1@"


def test_tool_call_before_the_answer_is_not_an_order_error():
    p = parse_action(CALL + "<answer>@REC::p:ref1@</answer>")
    assert not p.tool_after_answer and p.errors == [] and format_flags(p).tool_json_ok


def test_malformed_block_after_the_answer_is_also_after_it():
    p = parse_action('<answer>x</answer><tool_call>{"name": </tool_call>')
    assert p.tool_after_answer and not p.tool_json_ok


def test_structured_calls_in_an_answer_turn_follow_the_content():
    sc = StructuredToolCall(id="srv-1", name="product_search", arguments='{"query": "navy shirt"}')
    # a server-side parser moved the block that followed the answer into tool_calls
    p = parse_action("<answer>@REC::p:ref1@</answer>", structured=[sc])
    assert p.tool_after_answer
    # its text echo precedes the answer: not after
    p = parse_action(CALL + "<answer>@REC::p:ref1@</answer>", structured=[sc])
    assert not p.tool_after_answer and [c.call_id for c in p.tool_calls] == ["srv-1"]
    # echo after the answer: after, counted once
    p = parse_action("<answer>@REC::p:ref1@</answer>" + CALL, structured=[sc])
    assert p.tool_after_answer and any(e.startswith("1 tool call(s) after") for e in p.errors)
    # no answer: structured calls are ordinary
    assert not parse_action("", structured=[sc]).tool_after_answer


# --------------------------------------------------------------------------- flags and old results


def test_old_flags_without_the_new_fields_still_load_and_score_as_before():
    old = json.loads('{"think_ok": true, "tool_json_ok": true, "has_answer": true, "errors": []}')
    f = FormatFlags.model_validate(old)
    assert f.n_answers is None and f.n_think_blocks is None and f.tool_after_answer is False
    t = Trajectory(task_id="t", stage=2, steps=[Step(assistant_text="x", format=f)], final_answer="@REC::p:1@")
    assert format_reward(t) == 1.0


def test_builtin_format_member_equals_format_reward():
    from shopping_companion.rewards.rubric import load_rubric
    from shopping_companion.types import Preference, ProductSlot, Task, Verdict

    task = Task(
        task_id="t",
        task_type="single",
        instruction="shirt",
        user_id="u",
        history=[],
        needle_session_ids=[],
        preferences=[Preference(attribute="colour", value="navy")],
        slots=[ProductSlot(product_type="shirt", reference_product_id="p:ref1")],
    )
    rubric = load_rubric("paper")
    for text in (
        GOOD2,
        GOOD2 + CALL,
        "<think>a</think><think>b</think><answer>@REC::p:ref1@</answer>",
        "<answer>@REC::p:ref1@</answer><answer>@REC::p:ref1@</answer>",
    ):
        t = traj(2, text)
        v = Verdict(judge="t", stage=2, F=1, N=1, b=0, p2=1, q2=1, m2=1)
        out = rubric(task, t, v)
        assert out.components["R_fmt"] == pytest.approx(format_reward(t)), text


def test_env_answer_turn_with_a_trailing_call_ends_the_stage_and_runs_nothing():
    from shopping_companion.envs.env import ShoppingCompanionEnv
    from shopping_companion.envs.tools import ToolBox
    from shopping_companion.types import Preference, ProductSlot, SessionRef, Task, Verdict

    class Memory:
        calls = 0

        def search(self, *a, **k):
            Memory.calls += 1
            return []

    class Judge:
        name = "stub"

        def judge(self, task, trajectory):
            return Verdict(judge="stub", stage=trajectory.stage, F=1, N=1, b=0, q1=1, m1=1)

    task = Task(
        task_id="t",
        task_type="single",
        instruction="shirt",
        user_id="u",
        history=[SessionRef(session_id="s1", date="2024-01-01")],
        needle_session_ids=["s1"],
        preferences=[Preference(attribute="colour", value="navy")],
        slots=[ProductSlot(product_type="shirt", reference_product_id="p:ref1")],
    )
    env = ShoppingCompanionEnv(task, ToolBox(products=None, memory=Memory()), Judge())  # type: ignore[arg-type]
    env.reset()
    text = GOOD1 + '<tool_call>{"name": "mem_search", "arguments": {"queries": ["shirt"]}}</tool_call>'
    res = env.step(text)
    stage1 = env.results[0].trajectory
    assert Memory.calls == 0 and stage1.termination == "answered"
    assert stage1.steps[0].format.tool_after_answer and stage1.steps[0].tool_results == []
    assert res.info["stage_done"] is True
    assert format_indicators(stage1) == {"f_ans": 1.0, "f_th": 1.0, "f_tc": 0.0, "f_rec": 0.0}


def test_a_broken_block_does_not_swallow_the_next_one():
    # an unterminated string is not an object boundary: the broken block ends at the first closer
    p = parse_action('<tool_call>"oops</tool_call><tool_call>{"name": "b"}</tool_call>')
    assert [c.name for c in p.tool_calls] == ["b"] and len(p.tool_errors) == 1
    p = parse_action('<tool_call>{"name": "a", "q": "x</tool_call>' + CALL)
    assert [c.name for c in p.tool_calls] == ["product_search"] and len(p.tool_errors) == 1
