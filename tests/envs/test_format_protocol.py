"""Issue 13, item 4: the action protocol and the Eq. 11 indicators mean what they say.

Each test reproduces a defect of the old parser/indicators (it failed before the fix): a
``</tool_call>`` inside a JSON string cut the call, NaN/Infinity were valid JSON, two answer
blocks (the last silently won), two think blocks and a tool call after the answer all kept
R_fmt = 1.

Issue 31, item 0 (the tests at the end): the indicators are not vacuously 1. A stage without a
valid action (a protocol tool call, or a parsable final answer) earns no format credit, f_tc needs
a tool call and a valid action in every turn without an answer, and trying and failing never scores
below doing nothing. Tests above that check one indicator on an answer turn play a valid tool call
before it, so that the stage acts and the other indicators keep their values.
"""

from __future__ import annotations

import itertools
import json

import pytest

from shopping_companion.envs.parsing import format_flags, parse_action, parse_preferences
from shopping_companion.llm.base import StructuredToolCall
from shopping_companion.rewards import format_indicators, format_reward
from shopping_companion.types import FormatFlags, Step, ToolCall, Trajectory

GOOD1 = '<think>found them</think><answer>{"preferences": [{"attribute": "colour", "value": "navy"}]}</answer>'
GOOD2 = "<think>ok</think><answer>Best pick: @REC::p:ref1@</answer>"
CALL = '<tool_call>{"name": "product_search", "arguments": {"query": "navy shirt"}}</tool_call>'
CALL1 = '<tool_call>{"name": "mem_search", "arguments": {"queries": ["colour"]}}</tool_call>'


def step(text: str, structured=None) -> Step:
    p = parse_action(text, structured=structured)
    return Step(assistant_text=text, tool_calls=p.tool_calls, format=format_flags(p))


def traj(stage: int, *texts: str) -> Trajectory:
    steps = [step(t) for t in texts]
    return Trajectory(task_id="t", stage=stage, steps=steps, final_answer=parse_action(texts[-1]).answer)


def acted(stage: int, *texts: str) -> Trajectory:
    """``texts`` after one valid tool-call turn (the stage acts: f_tc can be 1)."""
    return traj(stage, CALL1 if stage == 1 else CALL, *texts)


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
    f = format_indicators(acted(2, two))
    assert f == {"f_ans": 0.0, "f_th": 1.0, "f_tc": 1.0, "f_rec": 1.0}
    same = "<answer>@REC::p:ref1@</answer><answer>@REC::p:ref1@</answer>"
    assert format_indicators(acted(2, same))["f_ans"] == 0.0
    assert format_reward(acted(2, same)) == pytest.approx(3 / 4)
    s1 = GOOD1 + '<answer>{"preferences": []}</answer>'
    assert format_reward(acted(1, s1)) == pytest.approx(2 / 3)
    # alone, an answer turn that fails f_ans is no valid action: the stage earns nothing
    assert format_reward(traj(2, same)) == 0.0 and format_reward(traj(1, s1)) == 0.0


def test_exactly_one_answer_block_is_fine():
    assert format_indicators(acted(2, GOOD2)) == {"f_ans": 1.0, "f_th": 1.0, "f_tc": 1.0, "f_rec": 1.0}
    assert format_flags(parse_action(GOOD2)).n_answers == 1


# --------------------------------------------------------------------------- thinking


def test_two_think_blocks_are_a_format_error():
    text = "<think>a</think><think>b</think><answer>@REC::p:ref1@</answer>"
    p = parse_action(text)
    assert not p.think_ok and p.n_think_blocks == 2 and p.answer == "@REC::p:ref1@"
    assert p.errors == ["2 thinking blocks in one turn (at most one <think> block per turn)"]
    assert format_indicators(acted(2, text))["f_th"] == 0.0
    assert format_reward(acted(2, text)) == pytest.approx(3 / 4)
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
    assert format_indicators(acted(2, text)) == {"f_ans": 1.0, "f_th": 1.0, "f_tc": 0.0, "f_rec": 1.0}
    assert format_reward(acted(2, text)) == pytest.approx(3 / 4)


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
    call = FormatFlags.model_validate(
        json.loads('{"think_ok": true, "tool_json_ok": true, "has_answer": false, "errors": []}')
    )
    searched = Step(assistant_text="y", tool_calls=[ToolCall(name="product_search", call_id="c0")], format=call)
    t = Trajectory(
        task_id="t", stage=2, steps=[searched, Step(assistant_text="x", format=f)], final_answer="@REC::p:1@"
    )
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
    assert [m.get("version") for m in rubric.describe()["rewards"]] == [None, None, 2]  # the format rules' version
    for text in (
        GOOD2,
        GOOD2 + CALL,
        "<think>a</think><think>b</think><answer>@REC::p:ref1@</answer>",
        "<answer>@REC::p:ref1@</answer><answer>@REC::p:ref1@</answer>",
        "I would recommend the navy one.",
        "",
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


# --------------------------------------------------------------------------- no credit for inaction (issue 31)

#: Kinds of a turn without an answer, from doing nothing to acting.
FREE = "I think the navy shirt is the best choice for you."
TURNS = {
    "free": FREE,
    "empty": "",
    "think_only": "<think>let me think</think>",
    "malformed": '<tool_call>{"name": "mem_search", "arguments": {</tool_call>',
    "reasoning_only": None,  # the call only in the reasoning channel (built in step_of)
    "rejected": '<tool_call>{"name": "buy_now", "arguments": {"id": 1}}</tool_call>',  # parses; a tool refuses it
    "valid": None,  # the stage's tool call (CALL1 / CALL)
}
ENDINGS = {
    1: {"none": None, "bad": "<answer>navy please</answer>", "good": GOOD1},
    2: {"none": None, "bad": "<answer>   </answer>", "good": GOOD2},
}


def step_of(kind: str, stage: int) -> Step:
    if kind == "reasoning_only":
        p = parse_action("Let me look.", reasoning="I will search. " + (CALL1 if stage == 1 else CALL))
        return Step(assistant_text="Let me look.", tool_calls=p.tool_calls, format=format_flags(p))
    return step(TURNS[kind] if kind != "valid" else (CALL1 if stage == 1 else CALL))


def stage_of(stage: int, kinds: tuple[str, ...], ending: str) -> Trajectory:
    steps = [step_of(k, stage) for k in kinds]
    text = ENDINGS[stage][ending]
    answer = None
    if text is not None:
        steps.append(step(text))
        answer = parse_action(text).answer
    term = "answered" if text is not None else "invalid_output"
    return Trajectory(task_id="t", stage=stage, steps=steps, final_answer=answer, termination=term)


@pytest.mark.parametrize("stage", [1, 2])
@pytest.mark.parametrize("kind", ["free", "empty", "think_only", "malformed", "reasoning_only"])
def test_a_stage_without_a_valid_action_earns_no_format_credit(stage, kind):
    for n in (1, 3):
        t = stage_of(stage, (kind,) * n, "none")
        assert format_indicators(t) == {"f_ans": 0.0, "f_th": 0.0, "f_tc": 0.0, "f_rec": 0.0}, (kind, n)
        assert format_reward(t) == 0.0
        # an answer that is not parsable is no valid action either
        assert format_reward(stage_of(stage, (kind,) * n, "bad")) == 0.0


@pytest.mark.parametrize("stage", [1, 2])
def test_answering_without_a_tool_call_scores_below_calling_and_answering(stage):
    no_call = stage_of(stage, (), "good")
    called = stage_of(stage, ("valid",), "good")
    want = {"f_ans": 1.0, "f_th": 1.0, "f_tc": 0.0, "f_rec": 1.0 if stage == 2 else 0.0}
    assert format_indicators(no_call) == want
    assert format_reward(no_call) == pytest.approx(2 / 3 if stage == 1 else 3 / 4)
    assert format_reward(called) == 1.0
    # free text before the answer buys nothing either
    assert format_reward(stage_of(stage, ("free", "free"), "good")) == format_reward(no_call)


@pytest.mark.parametrize("stage", [1, 2])
@pytest.mark.parametrize("kind", ["free", "empty", "think_only", "malformed", "reasoning_only"])
def test_a_turn_without_a_valid_action_in_a_good_stage_costs_f_tc(stage, kind):
    t = stage_of(stage, ("valid", kind, "valid"), "good")
    f = format_indicators(t)
    assert f["f_tc"] == 0.0 and f["f_ans"] == 1.0 and f["f_th"] == 1.0, kind
    assert format_reward(t) == pytest.approx(2 / 3 if stage == 1 else 3 / 4)


@pytest.mark.parametrize("stage", [1, 2])
def test_a_call_a_tool_rejects_is_a_valid_action(stage):
    t = stage_of(stage, ("rejected",), "good")
    assert format_indicators(t)["f_tc"] == 1.0 and format_reward(t) == 1.0


@pytest.mark.parametrize("stage", [1, 2])
def test_an_unparsable_answer_after_calls_scores_like_no_answer(stage):
    # the answer turn is judged by f_ans alone: trying to answer never scores below not answering
    bad = stage_of(stage, ("valid",), "bad")
    none = stage_of(stage, ("valid",), "none")
    assert format_indicators(bad) == format_indicators(none) == {"f_ans": 0.0, "f_th": 1.0, "f_tc": 1.0, "f_rec": 0.0}


def test_a_call_in_the_answer_turn_is_not_the_stages_call():
    # calls before the answer are no error, but they are never run: they do not buy f_tc
    t = traj(1, CALL1 + GOOD1)
    assert format_indicators(t) == {"f_ans": 1.0, "f_th": 1.0, "f_tc": 0.0, "f_rec": 0.0}
    assert format_reward(traj(1, CALL1, GOOD1)) == 1.0
    # and they do not make an unparsable answer a valid action
    assert format_reward(traj(2, CALL + "<answer> </answer>")) == 0.0


@pytest.mark.parametrize("stage", [1, 2])
def test_trying_never_scores_below_doing_nothing(stage):
    """Over every stage of up to three turns (any mix of the kinds above) and every ending: making
    a turn try (free text → a malformed call → a valid call) or the ending try (no answer → an
    unparsable one → a parsable one) never lowers R_fmt; the stage that does nothing scores 0."""
    ladder = ["free", "malformed", "valid"]
    kinds = list(TURNS)
    endings = ["none", "bad", "good"]
    checked = 0
    for n in range(0, 4):
        for seq in itertools.product(kinds, repeat=n):
            for e in endings:
                if n == 0 and e == "none":
                    continue
                r = format_reward(stage_of(stage, seq, e))
                assert 0.0 <= r <= 1.0
                if all(k in ("free", "empty", "think_only") for k in seq) and e != "good":
                    assert r == 0.0, (seq, e)
                for i, k in enumerate(seq):  # one turn one rung up the ladder
                    if k in ladder[:-1]:
                        up = seq[:i] + (ladder[ladder.index(k) + 1],) + seq[i + 1 :]
                        assert format_reward(stage_of(stage, up, e)) >= r - 1e-12, (seq, up, e)
                        checked += 1
                if e != "good":  # the ending one rung up
                    up_e = endings[endings.index(e) + 1]
                    assert format_reward(stage_of(stage, seq, up_e)) >= r - 1e-12, (seq, e, up_e)
                    checked += 1
    assert checked > 1000
