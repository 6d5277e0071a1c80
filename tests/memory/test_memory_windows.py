"""Long turns are indexed as overlapping windows: a fact placed only at the end of a turn longer
than MiniLM's 256-word-piece window is found, a turn is still one result (scored by its best
window), and a MemoryBank store equals a direct store. Real MiniLM, real ShareGPT / SGD turns."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from shopping_companion.memory.bank import MemoryBank
from shopping_companion.memory.embedder import Embedder
from shopping_companion.memory.loaders import load_sgd, load_sharegpt
from shopping_companion.memory.store import MemoryStore
from shopping_companion.rewards.tool_wise import memory_call_reward
from shopping_companion.envs.tools import ToolBox
from shopping_companion.types import Session, ToolCall, Turn

FACT = "One more thing about me: I am allergic to wool, so please never suggest wool sweaters or scarves."
QUERY = "is the user allergic to any fabric or material"


@pytest.fixture(scope="module")
def emb(tmp_path_factory: pytest.TempPathFactory) -> Embedder:
    e = Embedder(cache_path=tmp_path_factory.mktemp("win") / "emb.sqlite")
    yield e
    e.close()


@pytest.fixture(scope="module")
def sessions(emb: Embedder) -> tuple[list[Session], str]:
    """12 real SGD sessions plus one ShareGPT session whose first turn is a real long turn (about
    600 word pieces, on an unrelated topic) with FACT appended at its very end."""
    rng = random.Random(5)
    tok = emb._window_tokenizer()
    sharegpt = load_sharegpt(limit=300)[0]
    long_text = next(
        t.content
        for s in sharegpt
        for t in s.turns
        if t.role == "user"
        and 500 <= len(tok(t.content)) <= 700
        and "wool" not in t.content.lower()
        and "allerg" not in t.content.lower()
    )
    needle = Session(
        session_id="needle",
        turns=[Turn(role="user", content=long_text + "\n\n" + FACT), Turn(role="assistant", content="Thanks, noted.")],
    )
    picked = rng.sample(load_sgd(), 12)
    return picked[:6] + [needle] + picked[6:], long_text


@pytest.mark.slow
def test_fact_at_the_end_of_a_long_turn_is_found(emb: Embedder, sessions) -> None:
    hist, long_text = sessions
    needle_text = hist[6].turns[0].content
    wins = emb.windows(needle_text)
    assert len(wins) >= 3 and FACT in wins[-1]  # split, and the fact lies whole in the last window
    tok = emb._window_tokenizer()
    assert all(len(tok(w)) <= emb.window_tokens for w in wins)
    assert wins[0] == needle_text[: len(wins[0])]  # windows are substrings covering the text
    assert needle_text.endswith(wins[-1])
    # what the model sees of the whole turn is cut before the fact: the plain vector misses it
    whole = emb.encode([needle_text])[0]
    assert np.allclose(whole, emb.encode([long_text])[0], atol=0.02)

    store = MemoryStore(hist, emb)
    assert store.n_turns == sum(len(s.turns) for s in hist)
    assert store.n_windows == store.n_turns + len(wins) - 1
    top = store.search(QUERY, top_k=3)
    assert (top[0]["session_id"], top[0]["turn_index"]) == ("needle", 0), top
    # the score is the best window's
    best = float((emb.encode([w for w in wins]) @ emb.encode_queries([QUERY])[0]).max())
    assert abs(top[0]["score"] - round(best, 4)) < 2e-3
    # the snippet shows the window that scored (with the fact), not only the start of the turn
    assert top[0]["snippet"].startswith("…") and FACT in top[0]["snippet"], top[0]["snippet"]


@pytest.mark.slow
def test_a_long_turn_is_one_result_and_rewards_count_turns(emb: Embedder, sessions) -> None:
    hist, _ = sessions
    store = MemoryStore(hist, emb)
    res = store.search([QUERY, "book a restaurant table"], top_k=50)
    keys = [(r["session_id"], r["turn_index"]) for r in res]
    assert len(keys) == len(set(keys)) == min(50, store.n_turns)  # no duplicate turn, top_k counts turns
    assert ("needle", 0) in keys
    # through the real tool: one returned id per retrieved turn, and the tool-wise reward
    # (Eq. 8, per retrieved turn) counts turns, not windows
    box = ToolBox(products=None, memory=store)  # type: ignore[arg-type]
    res = box.execute(
        ToolCall(name="mem_search", arguments={"queries": [QUERY], "top_k": 5}, call_id="1"), ("mem_search", "mem_view")
    )
    hits = json.loads(res.content)["results"]
    assert res.returned_ids == [h["session_id"] for h in hits] and len(hits) == 5
    assert len({(h["session_id"], h["turn_index"]) for h in hits}) == 5
    assert res.returned_ids.count("needle") <= 2  # the needle session has two turns
    assert memory_call_reward(res, ["needle"]) == pytest.approx(res.returned_ids.count("needle") / 5)


@pytest.mark.slow
def test_bank_store_equals_direct_store_with_windows(emb: Embedder, sessions) -> None:
    hist, _ = sessions
    pool = {s.session_id: s for s in hist}
    bank = MemoryBank(pool, emb)
    ids = [s.session_id for s in hist]
    a, b = bank.store(ids), MemoryStore(hist, emb)
    assert np.array_equal(a.embeddings, b.embeddings)
    assert np.array_equal(a.window_turns, b.window_turns) and a.turn_ids == b.turn_ids
    assert a.search(QUERY, top_k=10) == b.search(QUERY, top_k=10)
    st = bank.stats()
    assert st["turns"] == a.n_turns and st["rows"] == a.n_windows > a.n_turns


def test_window_arguments_are_checked(emb: Embedder) -> None:
    with pytest.raises(ValueError, match="window_stride"):
        Embedder(cache_path=None, window_stride=0)
    with pytest.raises(ValueError, match="window_stride"):
        Embedder(cache_path=None, window_stride=255)
    with pytest.raises(TypeError, match="str"):
        emb.windows(None)  # type: ignore[arg-type]
    assert emb.windows("short text") == ["short text"]
    assert emb.window_tokens == 254
    s = Session(session_id="a", turns=[Turn(role="user", content="x"), Turn(role="user", content="y")])
    with pytest.raises(ValueError, match="window_turns"):
        MemoryStore([s], emb, embeddings=np.zeros((3, 384), np.float32), window_turns=[0, 0, 2])
    with pytest.raises(ValueError, match="window_turns"):
        MemoryStore([s], emb, embeddings=np.zeros((3, 384), np.float32), window_turns=[0, 1])
