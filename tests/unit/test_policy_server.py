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
