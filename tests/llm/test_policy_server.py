"""The scripted teacher served as an OpenAI-compatible endpoint (llm/policy_server.py,
llm/teacher.py), through the real OpenAI client of OpenAIBackend."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from shopping_companion.llm.base import Sampling
from shopping_companion.llm.openai_backend import OpenAIBackend
from shopping_companion.llm.policy_server import PolicyServer
from shopping_companion.llm.teacher import ScriptedTeacher
from shopping_companion.types import Preference, ProductSlot, SessionRef, Task


def _task() -> Task:
    return Task(
        task_id="t1",
        split="train",
        instruction="I need a pair of socks.",
        user_id="u1",
        history=[
            SessionRef(session_id="s_gold", date="2023-01-02"),
            SessionRef(session_id="s_other", date="2023-01-03"),
        ],
        needle_session_ids=["s_gold"],
        preferences=[
            Preference(slot=0, attribute="colour", value="Brown", polarity="want"),
            Preference(slot=0, attribute="pattern", value="Stripes", polarity="want"),
        ],
        slots=[ProductSlot(product_type="socks", reference_product_id="p:1")],
    )


def _msgs(stage: int) -> list[dict]:
    tail = "Identify my relevant preferences." if stage == 1 else "Preferences: ..."
    return [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": f"Shopping request: I need a pair of socks.\n\n{tail}"},
    ]


def _tools(*names: str) -> list[dict]:
    return [{"type": "function", "function": {"name": n, "parameters": {}}} for n in names]


def test_teacher_plays_both_stages_through_the_openai_client() -> None:
    teacher = ScriptedTeacher([_task()], top_k=[2], p_stray=0.0, p_slip=0.0)
    with PolicyServer(teacher, model="teacher") as srv:
        be = OpenAIBackend(model="teacher", base_url=srv.base_url)
        s = Sampling(temperature=1.0, seed=3, max_tokens=64)
        m = _msgs(1)
        first = be.chat(m, _tools("mem_search", "mem_view"), s).content
        assert json.loads(first.split("<tool_call>")[1].split("</tool_call>")[0]) == {
            "name": "mem_search",
            "arguments": {"queries": ["socks"], "top_k": 2},
        }
        hits = {"results": [{"session_id": "s_other"}, {"session_id": "s_gold"}]}
        m += [
            {"role": "assistant", "content": first},
            {"role": "tool", "name": "mem_search", "content": json.dumps(hits)},
        ]
        view = be.chat(m, _tools("mem_search", "mem_view"), s).content
        assert '"session_ids": ["s_gold"]' in view  # the needle, not the first hit
        m += [{"role": "assistant", "content": view}, {"role": "tool", "name": "mem_view", "content": "{}"}]
        answer = be.chat(m, _tools("mem_search", "mem_view"), s).content
        prefs = json.loads(answer.removeprefix("<answer>").removesuffix("</answer>"))["preferences"]
        assert {(p["attribute"], p["value"]) for p in prefs} == {("colour", "Brown"), ("pattern", "Stripes")}
        search = be.chat(_msgs(2), _tools("product_search", "product_view"), s).content
        assert '"query": "socks Brown Stripes"' in search
        assert srv.requests == 4


def test_same_seed_same_choices_other_seed_other_draws() -> None:
    teacher = ScriptedTeacher([_task()], top_k=[1, 2, 3, 4, 5], seed=0)
    draws = {teacher.chat(_msgs(1), _tools("mem_search", "mem_view"), Sampling(seed=s)).content for s in range(12)}
    assert len(draws) > 1
    again = teacher.chat(_msgs(1), _tools("mem_search", "mem_view"), Sampling(seed=4)).content
    assert again == teacher.chat(_msgs(1), _tools("mem_search", "mem_view"), Sampling(seed=4)).content


def test_bad_requests_are_400s_naming_the_field() -> None:
    teacher = ScriptedTeacher([_task()])
    with PolicyServer(teacher) as srv:

        def post(body: object) -> tuple[int, dict]:
            req = urllib.request.Request(
                srv.base_url + "/chat/completions",
                data=json.dumps(body).encode(),
                headers={"Content-Type": "application/json"},
            )
            try:
                with urllib.request.urlopen(req, timeout=10) as r:
                    return r.status, json.loads(r.read())
            except urllib.error.HTTPError as e:
                return e.code, json.loads(e.read())

        code, body = post({"messages": "nope"})
        assert code == 400 and "messages" in body["error"]["message"]
        code, body = post(
            {"messages": [{"role": "user", "content": "Shopping request: another task"}], "tools": _tools("mem_search")}
        )
        assert code == 400 and "names no task" in body["error"]["message"]
        code, body = post({"messages": _msgs(1), "temperature": -1})
        assert code == 400 and "temperature" in body["error"]["message"]
        code, body = post({"messages": _msgs(1), "stream": True})
        assert code == 400 and "stream" in body["error"]["message"]
    with pytest.raises(ValueError, match="p_stray"):
        ScriptedTeacher([_task()], p_stray=2)


def _two_needle_task() -> Task:
    t = _task()
    return t.model_copy(update={"needle_session_ids": ["s_brown", "s_stripes"]})


def _view_and_answer(teacher: ScriptedTeacher, seed: int, observation: dict) -> tuple[list[str], set[tuple[str, str]]]:
    """One stage-1 episode after the search: the sessions the teacher views (hits: both needles and
    one other session) and the preferences it answers after reading ``observation``."""
    tools = _tools("mem_search", "mem_view")
    s = Sampling(seed=seed)
    m = _msgs(1)
    first = teacher.chat(m, tools, s).content
    hits = {"results": [{"session_id": "s_brown"}, {"session_id": "s_other"}, {"session_id": "s_stripes"}]}
    m += [{"role": "assistant", "content": first}, {"role": "tool", "name": "mem_search", "content": json.dumps(hits)}]
    view = teacher.chat(m, tools, s).content
    ids = json.loads(view.split("<tool_call>")[1].split("</tool_call>")[0])["arguments"]["session_ids"]
    m += [
        {"role": "assistant", "content": view},
        {"role": "tool", "name": "mem_view", "content": json.dumps(observation)},
    ]
    answer = teacher.chat(m, tools, s).content
    prefs = json.loads(answer.removeprefix("<answer>").removesuffix("</answer>"))["preferences"]
    return ids, {(p["attribute"], p["value"]) for p in prefs}


def _session(sid: str, *user: str) -> dict:
    return {"session_id": sid, "turns": [{"role": "user", "content": u} for u in user]}


def _states(p: Preference, text: str) -> bool:
    return p.value.lower() in text.lower()


def test_evidence_teacher_answers_only_what_the_viewed_sessions_state() -> None:
    teacher = ScriptedTeacher(
        [_two_needle_task()], top_k=[3], p_stray=0.0, p_slip=0.0, answer_from="evidence", states=_states
    )
    both = {"sessions": [_session("s_brown", "I only wear brown socks."), _session("s_stripes", "Stripes, always.")]}
    ids, prefs = _view_and_answer(teacher, 1, both)
    assert ids == ["s_brown", "s_stripes"]  # every retrieved needle, in one call
    assert prefs == {("colour", "Brown"), ("pattern", "Stripes")}
    one = {"sessions": [_session("s_brown", "I only wear brown socks."), _session("s_other", "Any film tips?")]}
    assert _view_and_answer(teacher, 1, one)[1] == {("colour", "Brown")}
    # an assistant turn stating a value is not the user's evidence; a malformed observation is none
    said_by_assistant = {"sessions": [{"session_id": "s_other", "turns": [{"role": "assistant", "content": "brown"}]}]}
    assert _view_and_answer(teacher, 1, said_by_assistant)[1] == set()
    assert _view_and_answer(teacher, 1, {"sessions": "nope"})[1] == set()
    # the gold-knowing default answers every preference whatever it read
    gold = ScriptedTeacher([_two_needle_task()], top_k=[3], p_stray=0.0, p_slip=0.0)
    assert _view_and_answer(gold, 1, {"sessions": []})[1] == {("colour", "Brown"), ("pattern", "Stripes")}


def test_evidence_teacher_strays_per_needle() -> None:
    teacher = ScriptedTeacher(
        [_two_needle_task()], top_k=[3], p_stray=1.0, p_slip=0.0, answer_from="evidence", states=_states
    )
    ids, _ = _view_and_answer(teacher, 2, {"sessions": []})
    assert ids == ["s_other", "s_stripes"]  # one other hit to stray to: the second needle stays
    mixed = ScriptedTeacher(
        [_two_needle_task()], top_k=[3], p_stray=0.5, p_slip=0.0, answer_from="evidence", states=_states
    )
    seen = {tuple(_view_and_answer(mixed, s, {"sessions": []})[0]) for s in range(40)}
    assert ("s_brown", "s_stripes") in seen and any("s_other" in v for v in seen)


def test_evidence_teacher_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="states"):
        ScriptedTeacher([_task()], answer_from="evidence")
    with pytest.raises(ValueError, match="answer_from"):
        ScriptedTeacher([_task()], answer_from="memory", states=_states)


def _first_queries(teacher: ScriptedTeacher, seed: int) -> list[str]:
    first = teacher.chat(_msgs(1), _tools("mem_search", "mem_view"), Sampling(seed=seed)).content
    return json.loads(first.split("<tool_call>")[1].split("</tool_call>")[0])["arguments"]["queries"]


def test_teacher_asks_one_query_per_attribute_at_the_configured_rate() -> None:
    always = ScriptedTeacher([_two_needle_task()], top_k=[3], p_stray=0.0, p_slip=0.0, p_attribute_queries=1.0)
    assert _first_queries(always, 0) == ["socks colour", "socks pattern"]
    never = ScriptedTeacher([_two_needle_task()], top_k=[3], p_stray=0.0, p_slip=0.0)
    assert {tuple(_first_queries(never, s)) for s in range(20)} == {("socks",)}
    half = ScriptedTeacher([_two_needle_task()], top_k=[3], p_stray=0.0, p_slip=0.0, p_attribute_queries=0.5)
    kinds = [len(_first_queries(half, s)) for s in range(60)]
    assert 15 <= kinds.count(2) <= 45 and kinds.count(1) + kinds.count(2) == 60
    with pytest.raises(ValueError, match="p_attribute_queries"):
        ScriptedTeacher([_task()], p_attribute_queries=1.5)
