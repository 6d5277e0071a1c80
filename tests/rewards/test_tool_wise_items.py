"""Issue 13: Eq. 8 per retrieved ITEM (the paper's |I_u|), not per session.

mem_search returns turns; each retrieved turn is an item and sess(i) its session. 10 turns of the
gold session + 5 turns of 5 other sessions is 10/15 (the old code deduped by session: 1/6).
"""

from __future__ import annotations

import json

import pytest

from shopping_companion.envs.tools import ToolBox
from shopping_companion.rewards import memory_call_reward, product_call_reward, tool_wise_reward
from shopping_companion.types import Preference, ProductSlot, SessionRef, Step, Task, ToolCall, ToolResult, Trajectory


class FakeMemory:
    """``search`` returns fixed hits shaped like :meth:`MemoryStore.search`'s."""

    def __init__(self, hits):
        self.hits = hits

    def search(self, queries, top_k=10):
        return self.hits[:top_k]


def hit(sid: str, ti: int) -> dict:
    return {
        "session_id": sid,
        "turn_index": ti,
        "role": "user",
        "date": "2024-01-01",
        "score": 0.5,
        "snippet": f"turn {ti} of {sid}",
        "query": "q",
    }


HITS = [hit("gold", i) for i in range(10)] + [hit(f"other{k}", 0) for k in range(5)]


def task() -> Task:
    return Task(
        task_id="t",
        task_type="single",
        instruction="x",
        user_id="u",
        history=[SessionRef(session_id=s, date="2024-01-01") for s in ["gold"] + [f"other{k}" for k in range(5)]],
        needle_session_ids=["gold"],
        preferences=[Preference(attribute="colour", value="navy")],
        slots=[ProductSlot(product_type="shirt", reference_product_id="p:1")],
    )


def search(box: ToolBox, max_chars: int | None = None) -> ToolResult:
    call = ToolCall(name="mem_search", arguments={"queries": ["q"], "top_k": 50}, call_id="c0")
    return box.execute(call, ("mem_search", "mem_view"), max_chars=max_chars)


def test_mem_search_lists_one_session_id_per_retrieved_turn():
    res = search(ToolBox(products=None, memory=FakeMemory(HITS)))  # type: ignore[arg-type]
    assert res.error is None
    assert res.returned_ids == ["gold"] * 10 + [f"other{k}" for k in range(5)]


def test_ten_gold_turns_and_five_other_sessions_score_ten_fifteenths():
    res = search(ToolBox(products=None, memory=FakeMemory(HITS)))  # type: ignore[arg-type]
    assert memory_call_reward(res, ["gold"]) == pytest.approx(10 / 15)
    t = Trajectory(
        task_id="t",
        stage=1,
        steps=[
            Step(
                assistant_text="x",
                tool_calls=[ToolCall(name="mem_search", arguments={}, call_id="c0")],
                tool_results=[res],
            )
        ],
    )
    assert tool_wise_reward(t, task()) == (pytest.approx(10 / 15), [pytest.approx(10 / 15)])


def test_same_turn_twice_is_one_item():
    res = search(ToolBox(products=None, memory=FakeMemory([hit("gold", 0), hit("gold", 0), hit("x", 1)])))  # type: ignore[arg-type]
    assert res.returned_ids == ["gold", "x"]
    assert memory_call_reward(res, ["gold"]) == 0.5


def test_memory_reward_counts_items_for_search_and_sessions_for_view():
    ids = ["gold"] * 10 + [f"other{k}" for k in range(5)]
    assert memory_call_reward(
        ToolResult(call_id="c", name="mem_search", content="", returned_ids=ids), ["gold"]
    ) == pytest.approx(10 / 15)
    # mem_view items are the distinct sessions viewed
    assert (
        memory_call_reward(
            ToolResult(call_id="c", name="mem_view", content="", returned_ids=["gold", "gold", "x"]), ["gold"]
        )
        == 0.5
    )
    # product tools: a product is one item however often it is listed
    assert (
        product_call_reward(
            ToolResult(call_id="c", name="product_search", content="", returned_ids=["p:1", "p:1", "b"]), ["p:1"]
        )
        == 0.5
    )
    # errors and empty results still score 0
    assert (
        memory_call_reward(
            ToolResult(call_id="c", name="mem_search", content="", returned_ids=["gold"], error="bad"), ["gold"]
        )
        == 0.0
    )
    assert memory_call_reward(ToolResult(call_id="c", name="mem_search", content=""), ["gold"]) == 0.0


def test_cut_observation_keeps_as_many_items_as_are_visible():
    box = ToolBox(products=None, memory=FakeMemory(HITS))  # type: ignore[arg-type]
    full = search(box)
    payload = json.dumps({"results": HITS, "n_results": 15}, ensure_ascii=False, separators=(", ", ": "))
    cut_at = payload.index('"turn_index": 3')  # hits 0..3 of the gold session show their session id
    res = search(box, max_chars=cut_at)
    assert full.returned_ids.count("gold") == 10
    assert res.returned_ids == ["gold"] * 4
    assert memory_call_reward(res, ["gold"]) == 1.0


def test_readers_of_returned_ids_accept_repeated_session_ids():
    # the judges and the taxonomy read returned ids as sets (product tools only); a repeated memory
    # id must not break the tool-wise mean or the trajectory pairing
    res = ToolResult(call_id="c0", name="mem_search", content="", returned_ids=["gold", "gold", "x"])
    t = Trajectory(
        task_id="t",
        stage=1,
        steps=[
            Step(
                assistant_text="x",
                tool_calls=[ToolCall(name="mem_search", arguments={}, call_id="c0")],
                tool_results=[res],
            )
        ],
    )
    assert tool_wise_reward(t, task())[1] == [pytest.approx(2 / 3)]
