"""Tool-call ids are given out in one place, :func:`parse_action`, unique within a turn (issue 32,
item 5): a server's duplicate, empty or missing ids, ids that collide with generated ones, text
calls mixed with structured calls and malformed calls of either kind. The environment copies these
ids into the assistant message and its tool messages (tests/benchmark/test_eval_unanswered_stages_and_tool_call_ids.py
runs that against an OpenAI-strict server)."""

from __future__ import annotations

import itertools
import json

from shopping_companion.envs.parsing import format_tool_call, parse_action
from shopping_companion.llm.base import StructuredToolCall

SEARCH = {"queries": ["navy shirt"], "top_k": 5}


def sc(cid: str, name: str = "mem_search", args: dict | str | None = None) -> StructuredToolCall:
    raw = args if isinstance(args, str) else json.dumps(args if args is not None else {"queries": [cid or "q"]})
    return StructuredToolCall(id=cid, name=name, arguments=raw)


def all_ids(p) -> list[str]:
    return [c.call_id for c in p.tool_calls] + list(p.tool_error_ids)


def test_duplicate_server_ids_are_renamed_and_listed_in_server_order():
    p = parse_action("", structured=[sc("a"), sc("a", args={"queries": ["x"]}), sc("a", args={"queries": ["y"]})])
    assert p.structured_ids == ["a", "a_1", "a_2"]
    assert [c.call_id for c in p.tool_calls] == ["a", "a_1", "a_2"]


def test_a_renamed_id_never_takes_an_id_the_server_gave_a_later_call():
    p = parse_action("", structured=[sc("a"), sc("a", args={"queries": ["x"]}), sc("a_1", args={"queries": ["y"]})])
    assert p.structured_ids == ["a", "a_2", "a_1"]


def test_empty_ids_get_generated_ids_that_avoid_server_ids():
    calls = [sc(""), sc("", args={"queries": ["x"]}), sc("t_1", args={"queries": ["y"]})]
    p = parse_action("", structured=calls, call_id_prefix="t")
    assert p.structured_ids == ["t_0", "t_1_1", "t_1"]
    assert [c.call_id for c in p.tool_calls] == p.structured_ids


def test_text_calls_mixed_with_structured_calls_get_ids_of_their_own():
    text = format_tool_call("mem_view", {"session_ids": ["s1"]})
    p = parse_action(text, structured=[sc("t_1", args=SEARCH)], call_id_prefix="t")
    assert p.structured_ids == ["t_1"]
    assert [(c.name, c.call_id) for c in p.tool_calls] == [("mem_search", "t_1"), ("mem_view", "t_1_1")]


def test_a_text_echo_of_a_structured_call_is_still_dropped():
    p = parse_action(format_tool_call("mem_search", SEARCH), structured=[sc("srv", args=SEARCH)])
    assert [c.call_id for c in p.tool_calls] == ["srv"] and p.structured_ids == ["srv"]


def test_malformed_calls_get_unique_ids_too():
    bad_text = "<tool_call>{not json}</tool_call>"
    structured = [sc("x", args='{"queries": '), sc("x", args=SEARCH), sc("", name="", args=SEARCH)]
    p = parse_action(bad_text, structured=structured, call_id_prefix="t")
    assert len(p.tool_errors) == 3 and len(p.tool_calls) == 1
    # errors: the text block first, then the structured ones in server order
    assert p.tool_error_ids == ["t-invalid0", "x", "t-invalid2"]
    assert p.structured_ids == ["x", "x_1", "t-invalid2"] and p.tool_calls[0].call_id == "x_1"


def test_a_generated_error_id_avoids_a_server_id():
    p = parse_action("<tool_call>{oops}</tool_call>", structured=[sc("t-invalid0", args=SEARCH)], call_id_prefix="t")
    assert p.structured_ids == ["t-invalid0"] and p.tool_error_ids == ["t-invalid0_1"]


def test_ids_of_a_turn_are_always_unique_and_structured_ids_parallel():
    """Every mix of server ids (duplicate, empty, colliding with generated ones), good and broken
    arguments and text calls: all ids of the turn are distinct, and each structured call's id is
    the id its call or its error carries."""
    ids = ["a", "", "a_1", "c_0", "c-invalid0"]
    argses = [SEARCH, '{"queries": ', {"queries": ["other"]}]
    texts = ["", format_tool_call("mem_view", {"session_ids": ["s"]}), "<tool_call>{bad}</tool_call>"]
    n = 0
    for k in (1, 2, 3):
        for combo in itertools.product(ids, range(len(argses)), repeat=k):
            cids, picks = combo[0::2], combo[1::2]
            structured = [
                sc(cid, args=argses[j] if j != 2 else {"queries": [f"q{i}"]})
                for i, (cid, j) in enumerate(zip(cids, picks))
            ]
            for text in texts:
                p = parse_action(text, structured=structured, call_id_prefix="c")
                got = all_ids(p)
                assert len(got) == len(set(got)) and all(got), (cids, picks, text, got)
                assert len(p.structured_ids) == len(structured)
                assert set(p.structured_ids) <= set(got)
                n += 1
    assert n > 1000
