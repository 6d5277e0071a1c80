"""The action protocol parser: correct on well-formed turns, total (never raises) on anything."""

from __future__ import annotations

import json
import random

import pytest

from shopping_companion.envs.parsing import ParsedAction, extract_rec_ids, format_flags, parse_action, parse_preferences
from shopping_companion.llm.base import StructuredToolCall

TC = '<tool_call>{"name": "product_search", "arguments": {"query": "navy shirt"}}</tool_call>'


# --------------------------------------------------------------------------- well-formed turns


def test_think_then_tool_call():
    p = parse_action("<think>need a shirt</think>\n" + TC)
    assert p.think_ok and p.tool_json_ok and not p.errors
    assert p.thinking == "need a shirt"
    assert len(p.tool_calls) == 1
    c = p.tool_calls[0]
    assert c.name == "product_search" and c.arguments == {"query": "navy shirt"} and c.call_id == "call_0"
    assert p.answer is None and not p.has_answer


def test_two_tool_calls_get_distinct_ids_with_prefix():
    text = TC + "\n" + '<tool_call>{"name": "product_view", "arguments": {"product_ids": ["a:1"]}}</tool_call>'
    p = parse_action(text, call_id_prefix="t3")
    assert [c.call_id for c in p.tool_calls] == ["t3_0", "t3_1"]
    assert [c.name for c in p.tool_calls] == ["product_search", "product_view"]


def test_two_answer_blocks_are_an_error_and_the_first_is_the_answer():
    # was: the last answer silently won with no error (issue 13); exactly one answer ends a stage
    p = parse_action("<think>x</think><answer> first </answer> then <answer>second</answer>")
    assert p.answer == "first" and p.has_answer and p.think_ok and p.n_answers == 2
    assert p.errors == [
        "2 <answer> blocks in one turn: exactly one answer block ends a stage (the first one was taken as the answer)"
    ]


def test_no_think_tags_is_fine():
    p = parse_action("<answer>ok</answer>")
    assert p.think_ok and p.answer == "ok" and p.thinking == ""


def test_leading_stray_close_think_is_ok_qwen3_template():
    p = parse_action("I reason here.\n</think>\n\n<answer>done</answer>")
    assert p.think_ok and p.thinking == "I reason here." and p.answer == "done"


def test_tool_call_inside_thinking_is_not_executed():
    p = parse_action("<think>maybe " + TC + "</think><answer>a</answer>")
    assert p.tool_calls == [] and p.answer == "a" and p.tool_json_ok


def test_answer_inside_thinking_is_ignored():
    p = parse_action("<think><answer>draft</answer></think>" + TC)
    assert p.answer is None and len(p.tool_calls) == 1


def test_arguments_as_json_string_are_decoded():
    p = parse_action('<tool_call>{"name": "mem_search", "arguments": "{\\"queries\\": [\\"shoes\\"]}"}</tool_call>')
    assert p.tool_json_ok and p.tool_calls[0].arguments == {"queries": ["shoes"]}


def test_unknown_fields_are_ignored_and_parameters_alias():
    p = parse_action('<tool_call>{"name": "mem_view", "parameters": {"session_ids": ["s1"]}, "extra": 1}</tool_call>')
    assert p.tool_json_ok and p.tool_calls[0].arguments == {"session_ids": ["s1"]}


def test_missing_arguments_means_empty_object():
    p = parse_action('<tool_call>{"name": "mem_search"}</tool_call>')
    assert p.tool_json_ok and p.tool_calls[0].arguments == {}


def test_structured_calls_keep_server_id_and_dedupe_text_echo():
    sc = StructuredToolCall(id="srv-1", name="product_search", arguments='{"query": "navy shirt"}')
    p = parse_action(TC, structured=[sc])
    assert len(p.tool_calls) == 1 and p.tool_calls[0].call_id == "srv-1"
    p2 = parse_action("", structured=[sc, StructuredToolCall(id="", name="mem_view", arguments="")])
    assert [c.call_id for c in p2.tool_calls] == ["srv-1", "call_1"]
    assert p2.tool_calls[1].arguments == {}


def test_structured_call_with_broken_arguments_is_an_error():
    sc = StructuredToolCall(id="x", name="product_search", arguments='{"query": ')
    p = parse_action("", structured=[sc])
    assert not p.tool_json_ok and p.tool_calls == [] and "not valid JSON" in p.tool_errors[0]


# --------------------------------------------------------------------------- error reporting


def test_invalid_json_error_names_position():
    p = parse_action('<tool_call>{"name": "product_search", "arguments": {"query": "x"}</tool_call>')
    assert not p.tool_json_ok and p.tool_calls == []
    assert len(p.tool_errors) == 1 and "char" in p.tool_errors[0] and "column" in p.tool_errors[0]


def test_missing_name():
    p = parse_action('<tool_call>{"arguments": {}}</tool_call>')
    assert p.tool_errors == ['tool-call block #1: bad <tool_call>: missing "name"']


def test_arguments_not_an_object():
    p = parse_action('<tool_call>{"name": "mem_search", "arguments": [1, 2]}</tool_call>')
    assert not p.tool_json_ok and "must be a JSON object" in p.tool_errors[0]
    p = parse_action('<tool_call>{"name": "mem_search", "arguments": "[1, 2]"}</tool_call>')
    assert not p.tool_json_ok and "must be a JSON object" in p.tool_errors[0]


def test_unclosed_tool_call():
    p = parse_action('<tool_call>{"name": "mem_search", "arguments": {}}')
    assert not p.tool_json_ok and p.tool_calls == [] and "unclosed <tool_call>" in p.tool_errors[0]


def test_one_bad_block_one_good_block():
    p = parse_action(TC + "<tool_call>{oops}</tool_call>")
    assert len(p.tool_calls) == 1 and len(p.tool_errors) == 1 and not p.tool_json_ok


def test_unclosed_think():
    p = parse_action("<think>still thinking " + TC)
    assert not p.think_ok and p.tool_calls == [] and any("unclosed <think>" in e for e in p.errors)


def test_nested_think():
    p = parse_action("<think>a <think>b</think> c</think><answer>x</answer>")
    assert not p.think_ok and p.answer == "x"


def test_stray_close_think_after_a_block():
    p = parse_action("<think>a</think> text </think><answer>x</answer>")
    assert not p.think_ok and p.answer == "x"


def test_two_leading_close_thinks_is_not_ok():
    p = parse_action("a</think>b</think><answer>x</answer>")
    assert not p.think_ok


def test_unclosed_answer():
    p = parse_action("<answer>no end")
    assert p.answer is None and not p.has_answer and any("unclosed <answer>" in e for e in p.errors)


def test_stray_close_answer_and_earlier_complete_answer_kept():
    p = parse_action("<answer>a</answer></answer>")
    assert p.answer == "a" and any("stray </answer>" in e for e in p.errors)


def test_format_flags_copy_the_parse():
    p = parse_action("<think>x<answer>y</answer>")
    f = format_flags(p)
    assert f.think_ok is False and f.tool_json_ok is True and f.has_answer is False and f.errors == p.errors


# --------------------------------------------------------------------------- never raises

_NASTY: list[object] = [
    "",
    " ",
    "plain text, no tags at all",
    "<think>",
    "</think>",
    "<think></think>",
    "<think><think><think>",
    "</think></think></think>",
    "<tool_call>",
    "</tool_call>",
    "<tool_call></tool_call>",
    "<tool_call>   </tool_call>",
    "<tool_call>null</tool_call>",
    "<tool_call>[]</tool_call>",
    "<tool_call>[1, 2]</tool_call>",
    '<tool_call>"just a string"</tool_call>',
    "<tool_call>{'name': 'single quotes'}</tool_call>",
    '<tool_call>{"name": 42, "arguments": {}}</tool_call>',
    '<tool_call>{"name": "", "arguments": {}}</tool_call>',
    '<tool_call>{"name": null}</tool_call>',
    '<tool_call>{"name": "x", "arguments": 3.5}</tool_call>',
    '<tool_call>{"name": "x", "arguments": "not json"}</tool_call>',
    '<tool_call>{"name": "x", "arguments": {"a": NaN}}</tool_call>',
    '<tool_call>{"name": "x", "arguments": {"a": 1}} trailing</tool_call>',
    '<tool_call><tool_call>{"name": "x"}</tool_call></tool_call>',
    '<tool_call>```json\n{"name": "x", "arguments": {}}\n```</tool_call>',
    '<tool_call>[{"name": "a"}, {"name": "b", "arguments": {}}]</tool_call>',
    '<tool_call>{"function": {"name": "x", "arguments": "{}"}}</tool_call>',
    "<answer>",
    "</answer>",
    "<answer><answer>x</answer></answer>",
    "<answer></answer>",
    "<ANSWER>upper case</ANSWER>",
    "<think>😀 ünïcödé 中文 </think><answer>日本語 @REC::a:1@</answer>",
    "\x00\x01\x02\xff binary \ud800 lone surrogate",
    b"\xff\xfe\x00bytes<answer>x</answer>",
    None,
    12345,
    "<think>" * 10000 + "</think>" * 9999,
    "<tool_call>" + "[" * 100000 + "</tool_call>",
    '<tool_call>{"name": "x", "arguments": ' + "{" * 50000 + "}" * 50000 + "}</tool_call>",
    "<answer>" + "a" * 1_000_000 + "</answer>",
    "x" * 1_048_576,
    ("<think>t</think>" + TC + "<answer>z</answer>") * 2000,
]


@pytest.mark.parametrize("text", _NASTY, ids=[f"nasty{i}" for i in range(len(_NASTY))])
def test_parse_action_never_raises(text):
    p = parse_action(text)  # type: ignore[arg-type]
    assert isinstance(p, ParsedAction)
    assert p.tool_json_ok == (not p.tool_errors)
    assert p.has_answer == (p.answer is not None)
    assert set(p.tool_errors) <= set(p.errors)
    format_flags(p)
    extract_rec_ids(text)  # type: ignore[arg-type]
    parse_preferences(text)  # type: ignore[arg-type]


def test_nasty_list_is_large_enough():
    assert len(_NASTY) >= 30


def test_random_junk_never_raises():
    rng = random.Random(0)
    pieces = [
        "<think>",
        "</think>",
        "<tool_call>",
        "</tool_call>",
        "<answer>",
        "</answer>",
        "{",
        "}",
        '"',
        ":",
        "[",
        "]",
        "@REC::",
        "@",
        "name",
        "arguments",
        "\n",
        "é",
        "\x00",
    ]
    for _ in range(500):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 40)))
        p = parse_action(text)
        assert p.tool_json_ok == (not p.tool_errors)
        extract_rec_ids(text)
        parse_preferences(text)


def test_huge_text_is_linear_enough():
    import time

    text = ("<think>t</think>" + TC + "<answer>z</answer>") * 20000  # ~2.3 MB
    t0 = time.perf_counter()
    p = parse_action(text)
    assert time.perf_counter() - t0 < 10
    assert len(p.tool_calls) == 20000 and p.answer == "z"


def test_list_block_and_function_wrapper():
    p = parse_action('<tool_call>[{"name": "a"}, {"name": "b", "arguments": {"k": 1}}]</tool_call>')
    assert [c.name for c in p.tool_calls] == ["a", "b"] and p.tool_json_ok
    p = parse_action('<tool_call>{"function": {"name": "x", "arguments": "{\\"q\\": 1}"}}</tool_call>')
    assert p.tool_calls[0].name == "x" and p.tool_calls[0].arguments == {"q": 1}


# --------------------------------------------------------------------------- @REC markers


def test_extract_rec_ids_good_and_dedup():
    ids, bad = extract_rec_ids(
        "Buy @REC::myntra_styles:10000@ and @REC::ikea-sa:1.2_b@, again @REC::myntra_styles:10000@"
    )
    assert ids == ["myntra_styles:10000", "ikea-sa:1.2_b"] and bad == []


@pytest.mark.parametrize(
    "text", ["@REC::@", "@REC:id1@", "@REC::two words@", "@REC::unterminated", "@rec::lower@", "@REC id@"]
)
def test_extract_rec_ids_malformed(text):
    ids, bad = extract_rec_ids(text)
    assert ids == [] and len(bad) == 1 and bad[0].lower().startswith("@rec")


def test_extract_rec_ids_mixed_and_adjacent():
    ids, bad = extract_rec_ids("@REC::a:1@REC::b:2@ and @REC::@")
    assert ids == ["a:1", "b:2"] and bad == ["@REC::@"]
    assert extract_rec_ids(None) == ([], [])


# --------------------------------------------------------------------------- stage-1 preferences


def test_preferences_wrapped_object():
    prefs, err = parse_preferences(
        json.dumps(
            {
                "preferences": [
                    {"attribute": "colour", "value": "navy", "polarity": "want", "slot": 1},
                    {"attribute": "brand", "value": "Nike", "polarity": "avoid"},
                ]
            }
        )
    )
    assert err is None
    assert [(p.slot, p.attribute, p.value, p.polarity) for p in prefs] == [
        (1, "colour", "navy", "want"),
        (0, "brand", "Nike", "avoid"),
    ]


def test_preferences_bare_list_and_fence_and_list_values():
    text = 'Here you go:\n```json\n[{"attribute": "size", "value": ["M", "L"]}]\n```'
    prefs, err = parse_preferences(text)
    assert err is None and [p.value for p in prefs] == ["M", "L"]


def test_preferences_flat_object():
    prefs, err = parse_preferences('{"colour": "navy", "sleeve": ["short", "half"], "fit": 3}')
    assert err is None
    assert [(p.attribute, p.value) for p in prefs] == [
        ("colour", "navy"),
        ("sleeve", "short"),
        ("sleeve", "half"),
        ("fit", "3"),
    ]


def test_preferences_invalid():
    for bad in [
        "",
        "not json",
        "[1, 2]",
        '{"preferences": 5}',
        '[{"attribute": "c"}]',
        '[{"attribute": "c", "value": "x", "polarity": "maybe"}]',
        "42",
    ]:
        prefs, err = parse_preferences(bad)
        assert prefs == [] and isinstance(err, str) and err, bad


def test_preferences_empty_list_is_valid():
    assert parse_preferences('{"preferences": []}') == ([], None)
