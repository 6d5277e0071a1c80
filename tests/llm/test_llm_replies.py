"""The one JSON-object-from-a-reply extractor (llm/replies.extract_json) that the LLM judge
(which="last"), the LLM task generator and the LLM attribute extractor (which="first") share."""

from __future__ import annotations

import pytest

from shopping_companion.llm.replies import extract_json


@pytest.mark.parametrize("which", ["first", "last"])
def test_one_object_alone_in_a_fence_or_in_prose(which):
    assert extract_json('{"a": 1}', which=which) == {"a": 1}
    assert extract_json('```json\n{"a": 1}\n```', which=which) == {"a": 1}
    assert extract_json('Sure! Here it is:\n{"a": {"b": [1, 2]}}\nHope this helps.', which=which) == {
        "a": {"b": [1, 2]}
    }
    assert extract_json('{"note": "braces {in} a string"} done', which=which) == {"note": "braces {in} a string"}


def test_several_bare_objects_first_or_last():
    text = 'Draft: {"a": {"b": 1}} Final: {"a": {"b": 2}}'
    assert extract_json(text, which="first") == {"a": {"b": 1}}
    assert extract_json(text, which="last") == {"a": {"b": 2}}
    # a nested object is never a candidate of its own, whichever end is taken
    assert extract_json('x {"a": {"b": 1}} y', which="last") == {"a": {"b": 1}}


def test_several_fenced_objects_first_or_last_and_fences_beat_bare_objects():
    text = 'The user said {"colour": "navy"}.\n```json\n{"m": 1}\n```\nor\n```\n{"m": 2}\n```\nthen {"z": 0}'
    assert extract_json(text, which="first") == {"m": 1}
    assert extract_json(text, which="last") == {"m": 2}
    # a fence that does not hold one object is passed over
    assert extract_json('```\n[1, 2]\n``` and ```json\n{"ok": true}\n```', which="first") == {"ok": True}


@pytest.mark.parametrize("which", ["first", "last"])
def test_reasoning_is_removed(which):
    assert extract_json('<think>maybe {"x": 0}</think>Sure! {"a": 1}', which=which) == {"a": 1}
    assert extract_json('<THINK>{"x": 0}</THINK>{"a": 1}', which=which) == {"a": 1}
    assert extract_json('reasoning {"x": 0} here</think>{"a": 2}', which=which) == {"a": 2}  # a lone </think>


@pytest.mark.parametrize("which", ["first", "last"])
def test_malformed_json_is_skipped_when_an_object_follows(which):
    assert extract_json('{broken, "a": } then {"ok": 1}', which=which) == {"ok": 1}
    assert extract_json("```json\n{'single': 1}\n```\n{\"ok\": 2}", which=which) == {"ok": 2}


@pytest.mark.parametrize("which", ["first", "last"])
@pytest.mark.parametrize(
    "bad, says",
    [
        ("", "empty"),
        ("   ", "empty"),
        ("<think>{}</think>", "empty"),
        ("no json here", "no JSON object"),
        ("{broken", "no JSON object"),
        ("{'single': 'quotes'}", "no JSON object"),
        ("Sure: [1, 2]", "no JSON object"),
        ("[1, 2]", "JSON list"),
        ('[{"a": 1}]', "JSON list"),  # one JSON value that is not an object: refused, not searched
        ("```json\n[1]\n```", "JSON list"),
        ('"text"', "JSON str"),
    ],
)
def test_replies_without_an_object_are_refused(bad, says, which):
    with pytest.raises(ValueError, match=says):
        extract_json(bad, which=which)


def test_which_must_be_first_or_last():
    with pytest.raises(ValueError, match="which"):
        extract_json('{"a": 1}', which="middle")  # type: ignore[arg-type]
