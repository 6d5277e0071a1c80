"""The memory index: the low-latency query path, document precisions keyed in the cache, float16
storage quality (top-10 recall against float32), and MemoryBank (one embedding per distinct
turn across users). Real MiniLM, real SGD / ShareGPT turns; offline, CPU."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from benchmarks.bench_memory import topk_recall
from shopping_companion.envs.tools import ToolBox
from shopping_companion.memory.bank import MemoryBank
from shopping_companion.memory.embedder import Embedder, finish_f16
from shopping_companion.memory.loaders import SessionPool, load_sgd, load_sharegpt
from shopping_companion.memory.store import TRUNCATION_MARKER, MemoryStore
from shopping_companion.types import Session, SessionRef, ToolCall, Turn

QUERIES = [
    "what colours does the user like for clothes",
    "fabrics the user avoids",
    "user's shoe size",
    "brands the user dislikes",
    "does the user have any allergies",
    "preferred price range for electronics",
    "what kind of food does the user enjoy",
    "where does the user live",
    "does the user have pets",
    "user's budget for furniture",
    "laptop preferences of the user",
    "what sports does the user play",
    "favourite movie genres",
    "travel destinations the user mentioned",
    "kitchen appliances the user bought before",
    "user's dietary restrictions vegetarian vegan",
    "which stores the user likes to shop at",
    "preferred fit for jeans",
    "home decor style the user likes",
    "book a table for dinner tonight",
    "python error when reading a file",
    "write a poem about the sea",
    "I need a new pair of running shoes. Could you pick one that fits what I usually like?",
    "help me plan a trip to Japan in spring",
]


@pytest.fixture(scope="module")
def sgd() -> list[Session]:
    return load_sgd()


@pytest.fixture(scope="module")
def sharegpt() -> list[Session]:
    return load_sharegpt(limit=400)[0]


@pytest.fixture(scope="module")
def user(sgd: list[Session], sharegpt: list[Session]) -> list[Session]:
    """A small realistic user: 16 SGD + 5 short ShareGPT sessions."""
    rng = random.Random(3)
    sg = [s for s in sharegpt if len(s.turns) <= 8 and sum(len(t.content) for t in s.turns) < 2500]
    picked = rng.sample(sgd, 16) + rng.sample(sg, 5)
    rng.shuffle(picked)
    return picked


@pytest.fixture(scope="module")
def emb(tmp_path_factory: pytest.TempPathFactory) -> Embedder:
    e = Embedder(cache_path=tmp_path_factory.mktemp("idx") / "emb.sqlite")
    yield e
    e.close()


def _cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(axis=1)


# --------------------------------------------------------------------------- query path


@pytest.mark.slow
def test_cached_queries_answer_from_the_cache_only_and_never_block(emb: Embedder) -> None:
    import threading

    qs = ["a cached query about boots", "another one about lamps"]
    want = emb.encode_queries(qs)
    got = emb.cached_queries(list(reversed(qs)))
    assert got is not None and got.dtype == np.float32 and np.array_equal(got, want[::-1])
    got[0, 0] = 99.0  # a copy: the cache is untouched
    assert np.array_equal(emb.encode_queries(qs), want)
    assert emb.cached_queries([qs[0], "never encoded before, not cached"]) is None
    assert emb.cached_queries([]) is None
    held, release = threading.Event(), threading.Event()

    def hold() -> None:  # an encoding in progress holds the lock
        with emb._lock:
            held.set()
            release.wait(10)

    t = threading.Thread(target=hold)
    t.start()
    held.wait(10)
    try:
        assert emb.cached_queries(qs) is None  # returns at once instead of waiting
    finally:
        release.set()
        t.join()
    assert emb.cached_queries(qs) is not None
    with pytest.raises(TypeError):
        emb.cached_queries([1])  # type: ignore[list-item]


def test_query_path_matches_document_path(emb: Embedder, user: list[Session]) -> None:
    import torch

    turns = [t.content for s in user for t in s.turns]
    texts = QUERIES + turns[::10] + ["word " * 400]  # the last is cut at 256 word pieces
    exact = emb.encode_uncached(texts)  # float32, no rounding, no cache
    stored = emb.encode(texts)  # float16-rounded, cached
    n_disk = emb.cache_size()
    threads = torch.get_num_threads()
    emb.reset_stats()

    assert Embedder(cache_path=None).query_backend is None  # nothing built before a query
    q = emb.encode_queries(texts)
    assert q.shape == (len(texts), 384) and q.dtype == np.float32
    assert np.allclose(np.linalg.norm(q, axis=1), 1.0, atol=1e-5)
    assert emb.query_precision == "bf16"
    assert _cos(q, exact).min() >= 0.999
    assert _cos(q, stored).min() >= 0.999
    assert torch.get_num_threads() == threads  # the one-thread setting is restored
    assert emb.cache_size() == n_disk  # queries never go to disk
    assert emb.stats.query_misses == len(set(texts)) and emb.stats.query_hits == 0
    assert emb.stats.misses == 0  # the document cache was not touched

    # a repeated query is the identical vector (LRU); alone or in a batch: the same vector
    again = emb.encode_queries([texts[3], texts[0]])
    assert np.array_equal(again, q[[3, 0]]) and emb.stats.query_hits == 2
    fresh = Embedder(cache_path=None)
    for i in (0, 5, len(QUERIES) + 2, len(texts) - 1):  # short, short, a turn, a cut-off text
        assert np.array_equal(fresh.encode_queries(texts[i]), q[i : i + 1])

    # the TorchScript encoder (default on CPU) agrees with the eager module it was traced from
    assert emb.query_backend == "torchscript"
    eager = Embedder(cache_path=None, query_jit=False)
    qe = eager.encode_queries(texts[-12:])
    assert eager.query_backend == "eager"
    assert _cos(qe, q[-12:]).min() >= 0.9999 and _cos(qe, exact[-12:]).min() >= 0.999

    # float32 query weights reproduce the document model's vectors
    e32 = Embedder(cache_path=None, query_precision="fp32", query_threads=None)
    q32 = e32.encode_queries(texts[-12:])
    assert _cos(q32, exact[-12:]).min() >= 0.99999


def test_encode_f16_is_what_encode_returns(emb: Embedder) -> None:
    texts = ["Please book two tickets.", "I'd like a vegetarian place.", "Please book two tickets."]
    v16 = emb.encode_f16(texts)
    assert v16.dtype == np.float16 and v16.shape == (3, 384)
    assert np.array_equal(finish_f16(v16), emb.encode(texts))
    assert np.allclose(np.linalg.norm(v16.astype(np.float32), axis=1), 1.0, atol=2e-3)


def test_lone_surrogates_are_encoded(emb: Embedder) -> None:
    bad = "\ud800 leather boots \udfff"
    d = emb.encode([bad, "\ufffd leather boots \ufffd"])
    assert np.allclose(d[0], d[1])  # the model sees U+FFFD for a lone surrogate
    q = emb.encode_queries(bad)
    assert _cos(q, d[:1])[0] >= 0.999


@pytest.mark.parametrize(
    ("kwargs", "msg"),
    [
        ({"precision": "fp8"}, "precision"),
        ({"query_precision": "int8"}, "query_precision"),
        ({"threads": 0}, "threads"),
        ({"query_threads": 1.5}, "query_threads"),
        ({"batch_size": 0}, "batch_size"),
    ],
)
def test_embedder_rejects_bad_settings(kwargs: dict, msg: str) -> None:
    with pytest.raises(ValueError, match=msg):
        Embedder(cache_path=None, **kwargs)


def test_document_threads_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHOPCOMP_EMBED_THREADS", "1")
    assert Embedder(cache_path=None).threads == 1
    assert Embedder(cache_path=None, threads=2).threads == 2  # an explicit value wins
    monkeypatch.setenv("SHOPCOMP_EMBED_THREADS", "two")
    with pytest.raises(ValueError, match="SHOPCOMP_EMBED_THREADS"):
        Embedder(cache_path=None)
    monkeypatch.delenv("SHOPCOMP_EMBED_THREADS")
    assert Embedder(cache_path=None).threads is None


@pytest.mark.slow
def test_bf16_documents_are_keyed_apart(tmp_path: Path, sgd: list[Session]) -> None:
    texts = list(dict.fromkeys(t.content for s in sgd[200:206] for t in s.turns))[:40]
    cache = tmp_path / "c.sqlite"
    e32 = Embedder(cache_path=cache)
    v32 = e32.encode(texts)
    e16 = Embedder(cache_path=cache, precision="bf16")
    v16 = e16.encode(texts)
    assert e16.stats.misses == len(texts) and e16.stats.hits == 0  # never reads fp32 vectors
    assert e16.cache_size() == 2 * len(texts)
    assert _cos(v16, v32).min() >= 0.998
    assert not np.array_equal(v16, v32)
    again = Embedder(cache_path=cache, precision="bf16", memory_cache_size=0)
    assert np.array_equal(again.encode(texts), v16) and again.stats.hits == len(texts)
    assert again.stats.load_s == 0.0
    for e in (e32, e16, again):
        e.close()


# --------------------------------------------------------------------------- float16 storage quality


def test_topk_recall_counts_ties_and_checks_shapes() -> None:
    rng = np.random.default_rng(0)
    a = rng.normal(size=(50, 8)).astype(np.float32)
    a /= np.linalg.norm(a, axis=1, keepdims=True)
    q = a[:5]
    assert np.array_equal(topk_recall(q, a, a, k=10), np.ones(5))
    shuffled = rng.normal(size=a.shape).astype(np.float32)
    assert topk_recall(q, a, shuffled, k=10).mean() < 0.6
    tied = np.vstack([a, a[:1]])  # a duplicate item: either copy is a correct answer
    assert np.array_equal(topk_recall(q, tied, tied[::-1].copy()[::-1], k=1), np.ones(5))
    assert topk_recall(q, a[:3], a[:3], k=10).tolist() == [1.0] * 5  # k clipped to n
    with pytest.raises(ValueError, match="shapes"):
        topk_recall(q, a, a[:10])
    with pytest.raises(ValueError, match="k must"):
        topk_recall(q, a, a, k=0)


@pytest.mark.slow
def test_fp16_storage_loses_at_most_1pct_recall_at_10(emb: Embedder, user: list[Session]) -> None:
    turns = [t.content for s in user for t in s.turns]
    assert len(turns) > 150, len(turns)
    exact = emb.encode_uncached(turns)  # float32 reference
    stored = emb.encode(turns)  # what the index holds: float16 rounded, re-normalised
    queries = QUERIES + turns[1::9][:30]  # instruction-like and turn-like queries
    q = emb.encode_uncached(queries)
    rec = topk_recall(q, exact, stored, k=10)
    assert rec.mean() >= 0.99, f"fp16 storage top-10 recall {rec.mean():.4f}"
    # the bf16 query path on top of fp16 storage stays close as well
    qb = emb.encode_queries(queries)
    rec_b = topk_recall(q, exact, stored, k=10, candidate_queries=qb)
    assert rec_b.mean() >= 0.97, f"bf16 queries + fp16 storage top-10 recall {rec_b.mean():.4f}"


# --------------------------------------------------------------------------- MemoryBank


@pytest.fixture(scope="module")
def pool(sgd: list[Session], sharegpt: list[Session]) -> SessionPool:
    short = [s for s in sharegpt if len(s.turns) <= 6 and sum(len(t.content) for t in s.turns) < 1500]
    return SessionPool(sgd[300:340] + short[:8])


def _users(pool: SessionPool, n: int, size: int) -> list[list[SessionRef]]:
    rng = random.Random(11)
    ids = list(pool)
    out = []
    for u in range(n):
        picked = rng.sample(ids, size)
        out.append([SessionRef(session_id=s, date=f"2024-{1 + u:02d}-{1 + i:02d}") for i, s in enumerate(picked)])
    return out


@pytest.mark.slow
def test_bank_stores_equal_direct_stores_and_embed_each_text_once(tmp_path: Path, pool: SessionPool) -> None:
    users = _users(pool, 5, 14)  # overlapping histories
    e = Embedder(cache_path=tmp_path / "bank.sqlite")
    bank = MemoryBank(pool, e)
    stores = [bank.store(refs) for refs in users]
    used = {r.session_id for refs in users for r in refs}
    distinct = {t.content for sid in used for t in pool[sid].turns}
    windows = {w for t in distinct for w in e.windows(t)}  # a long turn is several windows
    assert e.stats.misses == len(windows)  # each distinct window encoded once across users
    assert len(bank) == len(used)
    n_rows = sum(len(e.windows(t.content)) for s in used for t in pool[s].turns)
    assert bank.nbytes == n_rows * 384 * 2 == bank.stats()["bytes"]

    # identical to building each store directly from the (now warm) cache
    e.reset_stats()
    for refs, st in zip(users, stores):
        direct = MemoryStore.from_pool(pool, refs, e)
        assert np.array_equal(st.embeddings, direct.embeddings)
        assert st.session_ids == [r.session_id for r in refs]
        assert st.turn_ids == direct.turn_ids
        assert st.search(["restaurant booking", "flight"], top_k=7) == direct.search(
            ["restaurant booking", "flight"], top_k=7
        )
        dates = {r["session_id"]: r["date"] for r in st.search("hello", top_k=50)}
        assert all(dates[r.session_id] == r.date for r in refs if r.session_id in dates)
    assert e.stats.misses == 0

    # a second bank in a "new process" (new embedder, same file) encodes nothing
    e2 = Embedder(cache_path=tmp_path / "bank.sqlite", memory_cache_size=0)
    bank2 = MemoryBank(pool, e2)
    assert bank2.prewarm(used) == len(distinct)
    assert e2.stats.misses == 0 and e2.stats.hit_rate == 1.0 and not e2.loaded
    assert np.array_equal(bank2.store(users[0]).embeddings, stores[0].embeddings)
    e.close()
    e2.close()


def test_bank_errors_and_plain_ids(emb: Embedder, pool: SessionPool) -> None:
    bank = MemoryBank(pool, emb, snippet_chars=25)
    ids = list(pool)[:3]
    st = bank.store(ids)  # plain ids: the pool's sessions as they are (undated)
    assert st.session_ids == ids and {r["date"] for r in st.search("hi", top_k=5)} == {None}
    long = [r for r in st.search("hi", top_k=50) if r["snippet"].endswith(TRUNCATION_MARKER)]
    assert long and all(len(r["snippet"]) <= 25 + len(TRUNCATION_MARKER) for r in long)
    with pytest.raises(KeyError, match="sgd:nope"):
        bank.store(["sgd:nope", ids[0]])
    with pytest.raises(KeyError, match="sgd:nope"):
        bank.prewarm(["sgd:nope"])
    with pytest.raises(ValueError, match="twice"):
        bank.store([ids[0], ids[0]])
    with pytest.raises(ValueError, match="snippet_chars"):
        MemoryBank(pool, emb, snippet_chars=0)
    empty = bank.store([])
    assert empty.n_turns == 0 and empty.search("anything") == []


def test_search_uses_the_query_path_and_writes_nothing(tmp_path: Path, pool: SessionPool) -> None:
    e = Embedder(cache_path=tmp_path / "q.sqlite")
    store = MemoryBank(pool, e).store(list(pool)[:5])
    n_disk = e.cache_size()
    e.reset_stats()
    first = store.search(["train tickets to Portland", "a vegetarian restaurant"], top_k=5)
    assert e.stats.query_misses == 2 and e.stats.misses == 0 and e.stats.hits == 0
    assert store.search(["train tickets to Portland", "a vegetarian restaurant"], top_k=5) == first
    assert e.stats.query_hits == 2
    assert e.cache_size() == n_disk
    e.close()


def test_memory_store_rejects_wrong_embeddings_shape(emb: Embedder) -> None:
    s = Session(session_id="x", turns=[Turn(role="user", content="hi"), Turn(role="assistant", content="hello")])
    with pytest.raises(ValueError, match=r"\(2, 384\)"):
        MemoryStore([s], emb, embeddings=np.zeros((3, 384), np.float32))


def test_mem_view_through_the_toolbox_names_unknown_ids(emb: Embedder, pool: SessionPool) -> None:
    ids = list(pool)[:4]
    store = MemoryBank(pool, emb).store([SessionRef(session_id=i, date=f"2024-03-0{n + 1}") for n, i in enumerate(ids)])
    box = ToolBox(products=None, memory=store)  # type: ignore[arg-type]
    allowed = ("mem_search", "mem_view")

    res = box.execute(ToolCall(name="mem_view", arguments={"session_ids": ["s_missing"]}, call_id="1"), allowed)
    assert res.error and "unknown session ids ['s_missing']" in res.error
    assert "mem_search" in res.error and res.returned_ids == []

    res = box.execute(ToolCall(name="mem_view", arguments={"session_ids": [ids[1], "s_missing"]}, call_id="2"), allowed)
    body = json.loads(res.content)
    assert res.error is None and res.returned_ids == [ids[1]]
    assert body["unknown_session_ids"] == ["s_missing"]
    assert body["sessions"][0]["date"] == "2024-03-02"
    assert len(body["sessions"][0]["turns"]) == len(pool[ids[1]].turns)  # whole session

    res = box.execute(
        ToolCall(
            name="mem_search",
            arguments={"queries": ["restaurant", "movie tickets", "restaurant"], "top_k": 8},
            call_id="3",
        ),
        allowed,
    )
    hits = json.loads(res.content)["results"]
    assert len(hits) == 8 and len({(h["session_id"], h["turn_index"]) for h in hits}) == 8
    assert {h["query"] for h in hits} <= {"restaurant", "movie tickets"}
    assert all(set(h) >= {"session_id", "date", "score", "snippet", "turn_index"} for h in hits)
    # one session id per retrieved turn (Eq. 8 counts retrieved items, issue 13), not per session
    assert res.returned_ids == [h["session_id"] for h in hits]
