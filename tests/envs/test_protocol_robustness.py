"""Issue 14, the episode protocol: model output that used to stop a run or lose a result.

Each test reproduces a defect of the old code (it failed before the fix): arguments nested 200+
levels deep reached the trajectory (pydantic's writer refuses them: "maximum serialization depth";
at 195–255 levels the line is written but cannot be read back); a JSON ``"\\ud800"`` escape in tool
arguments or in a stage-1 answer decoded to a lone surrogate that crashed the next request's
encoding and the result writer; tool calls written only in the reasoning channel went unnoticed;
``product_view`` with one empty id failed the whole call. These tests use the parser, the format
reward and the tools on their own (no index, no server); the episode tests over a real index and a
real HTTP server are in ``tests/benchmark/test_episode_robustness.py``.
"""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from shopping_companion.envs.env import EnvConfig
from shopping_companion.envs.parsing import (
    ArgumentLimits,
    REASONING_CALL_ERROR,
    bound_and_clean,
    clean_text,
    format_flags,
    parse_action,
    parse_preferences,
)
from shopping_companion.llm.base import StructuredToolCall
from shopping_companion.rewards import format_indicators
from shopping_companion.sft.examples import with_reasoning
from shopping_companion.types import Step, ToolCall, Trajectory

DEPTHS = (50, 195, 200, 255, 1000, 10000)


def nested(depth: int) -> str:
    """A JSON arguments object whose ``query`` value nests ``depth`` lists deep."""
    return '{"query": ' + "[" * depth + '"x"' + "]" * depth + "}"


def round_trips(step: Step) -> None:
    """The step, inside a trajectory, serialises to UTF-8 and loads back equal."""
    traj = Trajectory(task_id="t", stage=2, steps=[step])
    line = traj.model_dump_json()
    line.encode("utf-8")
    json.loads(line)
    assert Trajectory.model_validate_json(line) == traj


@pytest.mark.parametrize("depth", DEPTHS)
@pytest.mark.parametrize("channel", ["text", "structured"])
def test_deeply_nested_arguments_never_reach_the_trajectory(depth, channel):
    args = nested(depth)
    if channel == "text":
        p = parse_action('<tool_call>{"name": "product_search", "arguments": %s}</tool_call>' % args)
    else:
        p = parse_action("", structured=[StructuredToolCall(id="srv-1", name="product_search", arguments=args)])
    if depth <= 255:  # decodes: the call is kept with {} and rejected with the limit named
        assert [c.arguments for c in p.tool_calls] == [{}]
        (why,) = p.rejected.values()
        assert "max_tool_arg_depth = 16" in why
        assert p.tool_json_ok  # valid JSON: not a format error
    else:  # the decoder itself refuses it: a tool-call JSON error
        assert p.tool_calls == [] and "nested too deeply" in p.tool_errors[0]
    step = Step(assistant_text="x", tool_calls=p.tool_calls, format=format_flags(p))
    round_trips(step)


def test_item_and_size_limits_name_the_field_and_value():
    lim = ArgumentLimits(max_depth=4, max_chars=100, max_items=5)
    assert bound_and_clean({"ids": ["a"] * 5}, lim)[1] is not None  # 1 + 5 = 6 items > 5
    assert "max_tool_arg_items = 5" in bound_and_clean({"ids": ["a"] * 5}, lim)[1]
    assert bound_and_clean({"ids": ["a"] * 4}, lim) == ({"ids": ["a"] * 4}, None)
    err = bound_and_clean({"q": "x" * 200}, lim)[1]
    assert "max_tool_arg_chars = 100" in err and "208 characters" in err
    err = bound_and_clean({"a": {"b": {"c": {"d": {}}}}}, lim)[1]
    assert "max_tool_arg_depth = 4" in err
    assert "finite" in bound_and_clean({"max_price": float("inf")}, lim)[1]
    # the parser applies the limits it is given
    p = parse_action(
        '<tool_call>{"name": "mem_view", "arguments": {"session_ids": ["a", "b", "c", "d", "e", "f"]}}</tool_call>',
        limits=lim,
    )
    assert p.rejected and "max_tool_arg_items = 5" in next(iter(p.rejected.values()))


def test_env_config_limits_are_validated_with_the_field_named():
    cfg = EnvConfig()
    assert (cfg.max_tool_arg_depth, cfg.max_tool_arg_chars, cfg.max_tool_arg_items) == (16, 65_536, 1_000)
    assert cfg.max_invalid_turns == 3 and cfg.max_prompt_tokens is None
    for bad in (
        {"max_invalid_turns": 0},
        {"max_tool_arg_depth": 0},
        {"max_prompt_tokens": 10},
        {"prompt_chars_per_token": 0},
    ):
        with pytest.raises(ValidationError, match=next(iter(bad))):
            EnvConfig(**bad)


@pytest.mark.parametrize("escape", ["\\ud800", "\\udfff", "\\ud800\\ud800x"])
def test_lone_surrogate_escapes_in_arguments_and_keys_are_replaced(escape):
    text = '<tool_call>{"name": "product_search%s", "arguments": {"query%s": "navy %s shirt"}}</tool_call>' % (
        escape,
        escape,
        escape,
    )
    for p in (
        parse_action(text),
        parse_action(
            "",
            structured=[
                StructuredToolCall(
                    id="c", name="product_search", arguments='{"query%s": "navy %s shirt"}' % (escape, escape)
                )
            ],
        ),
    ):
        (call,) = p.tool_calls
        dumped = json.dumps(call.model_dump(), ensure_ascii=False).encode("utf-8")  # raised before
        assert "\ufffd" in dumped.decode("utf-8")
        assert all(clean_text(k) == k for k in call.arguments)


def test_a_real_lone_surrogate_in_python_text_is_cleaned():
    p = parse_action("<think>hmm \ud800</think><answer>pick \udfff</answer>")
    assert p.answer == "pick \ufffd" and p.thinking == "hmm \ufffd"
    assert clean_text(b"\xff") == "\ufffd" and clean_text(None) == ""


def test_stage1_answer_fields_with_surrogate_escapes_are_cleaned():
    prefs, err = parse_preferences(
        '{"preferences": [{"attribute": "colour\\ud800", "value": "navy\\udfff", "polarity": "want"}], "\\ud800": 1}'
    )
    assert err is None
    assert [(p.attribute, p.value) for p in prefs] == [("colour\ufffd", "navy\ufffd")]
    json.dumps([p.model_dump() for p in prefs], ensure_ascii=False).encode("utf-8")
    _, err = parse_preferences('[{"attribute": "c", "value": "v", "polarity": "maybe\\ud800"}]')
    err.encode("utf-8")  # the error message is clean too


def test_close_tag_inside_a_structured_argument_string_is_an_argument():
    p = parse_action(
        "", structured=[StructuredToolCall(id="c", name="product_search", arguments='{"query": "a </tool_call> b"}')]
    )
    assert p.tool_calls[0].arguments == {"query": "a </tool_call> b"} and p.errors == []


# --------------------------------------------------------------------------- reasoning channel

CALL = '<tool_call>{"name": "mem_search", "arguments": {"queries": ["colour"]}}</tool_call>'


def test_calls_only_in_the_reasoning_are_a_format_error_of_their_own():
    p = parse_action("Let me look that up.", reasoning="I should search. " + CALL)
    assert p.tool_calls == [] and p.calls_in_reasoning == 1
    assert p.errors[-1].startswith(REASONING_CALL_ERROR)
    flags = format_flags(p)
    assert not flags.tool_json_ok
    traj = Trajectory(task_id="t", stage=1, steps=[Step(assistant_text="x", format=flags)])
    assert format_indicators(traj)["f_tc"] == 0.0


@pytest.mark.parametrize("content", [CALL, '<answer>{"preferences": []}</answer>', "<tool_call>{broken</tool_call>"])
def test_reasoning_that_mentions_a_call_is_fine_when_the_content_acts(content):
    p = parse_action(content, reasoning="plan: " + CALL)
    assert p.calls_in_reasoning == 0 and not any(e.startswith(REASONING_CALL_ERROR) for e in p.errors)


def test_reasoning_becomes_the_think_block_of_sft_content():
    assert (
        with_reasoning("<answer>x</answer>", "I compared them")
        == "<think>\nI compared them\n</think>\n\n<answer>x</answer>"
    )
    assert with_reasoning("<think>own</think>x", "other") == "<think>own</think>x"
    assert with_reasoning("x", None) == "x" and with_reasoning("x", "  ") == "x"
    p = parse_action(with_reasoning(CALL, "because"))
    assert p.thinking == "because" and [c.name for c in p.tool_calls] == ["mem_search"]


# --------------------------------------------------------------------------- product_view


class _Catalog:
    """A two-product catalog behind the ProductBackend protocol (the tool box's input)."""

    def __init__(self):
        from shopping_companion.types import Product

        self.items = {
            f"p:{i}": Product(product_id=f"p:{i}", title=f"shirt {i}", source="t", shop="s", shop_id="s")
            for i in (1, 2)
        }

    def search(self, *a, **k):
        return []

    def view(self, ids):
        return [self.items[i] for i in ids if i in self.items], [i for i in ids if i not in self.items]


def test_product_view_with_some_bad_ids_returns_the_known_products_and_per_id_errors():
    from shopping_companion.envs.tools import ToolBox
    from shopping_companion.rewards.tool_wise import product_call_reward

    box = ToolBox(_Catalog(), None)
    call = ToolCall(name="product_view", call_id="c", arguments={"product_ids": ["p:1", "", "nope:9", 7, "p:2"]})
    res = box.execute(call, ["product_view"])
    assert res.error is None and res.returned_ids == ["p:1", "p:2"]
    body = json.loads(res.content)
    assert [p["product_id"] for p in body["products"]] == ["p:1", "p:2"]
    assert {e["product_id"]: e["error"] for e in body["errors"]} == {
        "": "empty product id",
        "7": "a product id must be a string, got int",
        "nope:9": "unknown product id; use ids returned by product_search",
    }
    assert product_call_reward(res, ["p:1"]) == pytest.approx(0.5)  # the known products still count (Eq. 9)
    # nothing usable: an error naming every bad id
    bad = box.execute(
        ToolCall(name="product_view", call_id="d", arguments={"product_ids": ["", None]}), ["product_view"]
    )
    assert bad.error and "empty product id" in bad.error and "got NoneType" in bad.error
    unknown = box.execute(
        ToolCall(name="product_view", call_id="e", arguments={"product_ids": ["x:1"]}), ["product_view"]
    )
    assert unknown.error and "unknown product ids ['x:1']" in unknown.error


# --------------------------------------------------------------- found by the eval-path fuzz suite


@pytest.mark.parametrize("tag", ["</think>", "<think>", "<think></think>", "</think><think>"])
def test_thinking_tags_inside_a_tool_call_json_string_are_argument_text(tag: str) -> None:
    """A ``</think>`` in an id was taken for the closer of a thinking block that opened in the
    prompt (everything before it became thinking and the call was lost, with a message blaming a
    stray ``</tool_call>``); a ``<think>`` opened a span that swallowed the rest of the turn."""
    text = (
        '<think>look it up</think>\n<tool_call>{"name": "product_view", "arguments": '
        '{"ids": ["B0' + tag + 'X"]}}</tool_call>'
    )
    parsed = parse_action(text)
    assert parsed.think_ok and parsed.errors == []
    assert [c.arguments for c in parsed.tool_calls] == [{"ids": ["B0" + tag + "X"]}]
    # without a leading thinking block too
    parsed = parse_action(text.split("\n", 1)[1])
    assert parsed.think_ok and [c.arguments["ids"] for c in parsed.tool_calls] == [["B0" + tag + "X"]]


def test_real_thinking_tags_around_a_call_still_count() -> None:
    """Masking applies to JSON values only: a real unclosed ``<think>`` still swallows the turn."""
    text = '<think>plan <tool_call>{"name": "mem_search", "arguments": {"query": "x"}}</tool_call>'
    parsed = parse_action(text)
    assert not parsed.think_ok and parsed.tool_calls == []


def test_a_stage1_answer_with_thousands_of_preferences_is_invalid() -> None:
    """20,000 preferences held one episode for minutes in the judge (pairwise contradiction
    check); more than ``MAX_PREFERENCES`` now makes the answer invalid, with a message."""
    from shopping_companion.envs.parsing import MAX_PREFERENCES

    many = json.dumps([{"attribute": "colour", "value": f"c{i}"} for i in range(20_000)])
    prefs, err = parse_preferences(many)
    assert prefs == [] and err is not None and str(MAX_PREFERENCES) in err
    ok = json.dumps([{"attribute": "colour", "value": f"c{i}"} for i in range(MAX_PREFERENCES)])
    prefs, err = parse_preferences(ok)
    assert err is None and len(prefs) == MAX_PREFERENCES
