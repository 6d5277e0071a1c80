"""Issue 13, item 7: the LLM judge's JSON extraction finds a fenced or bare JSON object after a
prose preamble (the old parser rejected every reply that was not exactly one object)."""

from __future__ import annotations

import pytest

from shopping_companion.judges.llm import parse_json_reply


def test_bare_object_after_a_prose_preamble():
    assert parse_json_reply('Here is my grading:\n{"m1": 2, "reasons": ["navy {matches}"]}') == {
        "m1": 2,
        "reasons": ["navy {matches}"],
    }


def test_bare_object_with_prose_after_it():
    assert parse_json_reply('{"q1": 1}\n\nI hope this helps.') == {"q1": 1}


def test_fenced_block_after_a_preamble_and_preferred_over_bare_objects():
    text = 'The user said {"colour": "navy"} earlier.\n```json\n{"m1": 1}\n```\nDone.'
    assert parse_json_reply(text) == {"m1": 1}
    assert parse_json_reply('Result:\n```\n{"p2": 0}\n```') == {"p2": 0}


def test_nested_objects_are_not_candidates_and_the_last_top_level_object_wins():
    assert parse_json_reply('Draft: {"a": {"b": 1}} Final: {"a": {"b": 2}}') == {"a": {"b": 2}}
    assert parse_json_reply('x {"a": {"b": 1}} y') == {"a": {"b": 1}}


def test_after_thinking_and_preamble():
    assert parse_json_reply('<think>maybe {"x": 0}</think>Sure! {"a": 1}') == {"a": 1}


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "   ",
        "no json here",
        "{broken",
        "Sure: [1, 2]",
        "[1, 2]",
        '[{"a": 1}]',
        "```json\n[1]\n```",
        "{'single': 'quotes'}",
    ],
)
def test_replies_without_an_object_are_rejected(bad):
    with pytest.raises(ValueError):
        parse_json_reply(bad)
