"""Memory: session loaders, the MiniLM embedder with its SQLite cache, and MemoryStore
(mem_search / mem_view). Offline; real SGD and ShareGPT data; the real MiniLM model."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import numpy as np
import pytest

from shopping_companion.errors import ToolInputError
from shopping_companion.memory.embedder import Embedder
from shopping_companion.memory.loaders import (
    SGD_RELATIVE_PATH,
    SessionPool,
    load_sgd,
    load_sharegpt,
    sharegpt_default_path,
)
from shopping_companion.memory.store import TRUNCATION_MARKER, MemoryStore
from shopping_companion.paths import resolve_data_dir
from shopping_companion.types import Session, SessionRef, Turn

# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def sgd() -> list[Session]:
    return load_sgd(resolve_data_dir() / SGD_RELATIVE_PATH)


@pytest.fixture(scope="module")
def sharegpt_head() -> list[Session]:
    sessions, _ = load_sharegpt(limit=1500)
    return sessions


@pytest.fixture(scope="module")
def embedder(tmp_path_factory: pytest.TempPathFactory) -> Embedder:
    return Embedder(cache_path=tmp_path_factory.mktemp("emb") / "cache.sqlite")


NEEDLE = Session(
    session_id="needle:shirts",
    date="2024-05-17",
    source="test",
    turns=[
        Turn(
            role="user",
            content="Could you help me pick a few shirts for the office? I always "
            "go for navy or dark blue ones, and only cotton, polyester makes me sweat.",
        ),
        Turn(role="assistant", content="Sure. Navy or dark blue, cotton only. Any fit you prefer?"),
        Turn(role="user", content="Regular fit, medium. Long sleeves are fine."),
        Turn(
            role="assistant", content="Noted, I'll keep to regular-fit long-sleeve cotton in navy or dark blue, size M."
        ),
    ],
)


@pytest.fixture(scope="module")
def haystack(sgd: list[Session], sharegpt_head: list[Session]) -> list[Session]:
    """42 real sessions (30 SGD + 12 short ShareGPT) with the needle hidden in the middle."""
    rng = random.Random(7)
    short_sharegpt = [s for s in sharegpt_head if len(s.turns) <= 8 and max(len(t.content) for t in s.turns) < 1500]
    hay = rng.sample(sgd, 30) + rng.sample(short_sharegpt, 12)
    rng.shuffle(hay)
    sessions = hay[:21] + [NEEDLE] + hay[21:]
    return [
        s.model_copy(update={"date": f"2024-{1 + i // 28:02d}-{1 + i % 28:02d}"})
        if s.session_id != NEEDLE.session_id
        else s
        for i, s in enumerate(sessions)
    ]


@pytest.fixture(scope="module")
def store(haystack: list[Session], embedder: Embedder) -> MemoryStore:
    return MemoryStore(haystack, embedder)


# --------------------------------------------------------------------------- SGD


def test_sgd_counts_and_roles(sgd: list[Session]) -> None:
    assert len(sgd) == 3069
    assert sum(len(s.turns) for s in sgd) == 46142
    assert len({s.session_id for s in sgd}) == 3069
    first = sgd[0]
    assert first.session_id == "sgd:1_00000"
    assert first.source == "sgd" and first.date is None
    assert first.turns[0].role == "user"
    assert first.turns[0].content.startswith("I am feeling hungry")
    assert first.turns[1].role == "assistant"
    # SGD alternates USER, SYSTEM: the mapping must preserve that in every dialogue
    for s in sgd:
        assert [t.role for t in s.turns] == ["user", "assistant"] * (len(s.turns) // 2) + (
            ["user"] if len(s.turns) % 2 else []
        )


def test_sgd_rejects_unknown_speaker(tmp_path: Path) -> None:
    p = tmp_path / "bad.jsonl"
    p.write_text(
        json.dumps(
            {
                "dialogue_id": "x",
                "services": [],
                "turns": [{"speaker": "USER", "utterance": "hi"}, {"speaker": "BOT", "utterance": "hello"}],
            }
        )
        + "\n"
    )
    with pytest.raises(ValueError, match=r"bad\.jsonl:1.*BOT"):
        load_sgd(p)


# --------------------------------------------------------------------------- ShareGPT


def test_sharegpt_bundled_file_is_cut_and_complete_records_recovered() -> None:
    path = sharegpt_default_path()
    with open(path, "rb") as fh:
        fh.seek(-200, 2)
        tail = fh.read()
    assert not tail.rstrip().endswith(b"]"), "the bundled file is expected to be cut off"

    sessions, report = load_sharegpt()
    assert report.parsed == 17671  # the data README's count of complete conversations
    assert report.truncated_tail_chars > 0
    assert report.kept == len(sessions)
    assert report.kept + sum(report.dropped.values()) == report.parsed
    assert report.kept > 17000
    assert set(report.dropped) <= {"too_few_turns", "duplicate_id", "malformed"}
    ids = [s.session_id for s in sessions]
    assert len(set(ids)) == len(ids)
    assert all(i.startswith("sharegpt:") for i in ids)
    for s in sessions:
        assert len(s.turns) >= 2 and s.source == "sharegpt" and s.date is None
        assert all(t.content.strip() for t in s.turns)
    # the bundled data has system turns; they must be skipped, not mapped
    assert report.turns_skipped_by_role.get("system", 0) > 0
    assert sessions[0].session_id == "sharegpt:QWJhYvA_0"
    assert sessions[0].turns[0].content.startswith("Summarize the main ideas of Jeff Walker")


def _rec(rid: str, turns: list[tuple[str, str]]) -> dict:
    return {"id": rid, "conversations": [{"from": f, "value": v} for f, v in turns]}


@pytest.mark.parametrize("chunk_chars", [7, 64, 1 << 20])
@pytest.mark.parametrize("gz", [False, True])
def test_sharegpt_truncated_file_keeps_exactly_complete_records(tmp_path: Path, chunk_chars: int, gz: bool) -> None:
    records = [
        _rec("a_0", [("human", "Hello there"), ("gpt", "Hi! How can I help?")]),
        _rec(
            "b_0",
            [
                ("system", "be nice"),
                ("human", "Tell me a joke"),
                ("bard", "x"),
                ("gpt", '<div class="markdown prose w-full"><p>Why &amp; how?</p><ol><li>one</li></ol></div>'),
                ("human", "   "),
            ],
        ),
        _rec("c_0", [("human", "only one turn")]),
        _rec("a_0", [("human", "same id again"), ("gpt", "dropped")]),
        _rec(
            "d_0", [("user", 'pasted code: <div class="modal"><p>x</p></div>'), ("chatgpt", "That markup looks fine.")]
        ),
        _rec("e_0", [("human", "this record is cut"), ("gpt", "never finished")]),
    ]
    text = "[\n" + ",\n".join(json.dumps(r, indent=2) for r in records) + "\n]"
    cut = text[: text.index("never fin")]  # cut inside the last record's last string
    p = tmp_path / ("cut.json.gz" if gz else "cut.json")
    if gz:
        p.write_bytes(gzip.compress(cut.encode()))
    else:
        p.write_text(cut)

    sessions, report = load_sharegpt(p, chunk_chars=chunk_chars)

    assert [s.session_id for s in sessions] == ["sharegpt:a_0", "sharegpt:b_0", "sharegpt:d_0"]
    assert report.parsed == 5
    assert report.kept == 3
    assert report.dropped == {"too_few_turns": 1, "duplicate_id": 1}
    assert report.turns_skipped_by_role == {"system": 1, "bard": 1}
    assert report.empty_turns_dropped == 1
    assert report.html_stripped_turns == 1
    assert report.truncated_tail_chars > 0
    b = sessions[1]
    assert [t.role for t in b.turns] == ["user", "assistant"]
    assert b.turns[1].content == "Why & how?\n\none"
    # markup a user pasted is content, not page HTML: kept verbatim
    assert sessions[2].turns[0].content == 'pasted code: <div class="modal"><p>x</p></div>'
    assert sessions[0].turns[1].content == "Hi! How can I help?"

    # the same file, complete: nothing truncated, all 5 parsed
    full = tmp_path / "full.json"
    full.write_text(text)
    sessions_full, report_full = load_sharegpt(full, chunk_chars=chunk_chars)
    assert report_full.parsed == 6 and report_full.truncated_tail_chars == 0
    assert sessions_full[-1].session_id == "sharegpt:e_0"


def test_sharegpt_limit_stops_early() -> None:
    sessions, report = load_sharegpt(limit=25)
    assert len(sessions) == 25 and report.kept == 25 and report.stopped_at_limit
    assert report.parsed < 100


def test_sharegpt_rejects_non_array(tmp_path: Path) -> None:
    p = tmp_path / "obj.json"
    p.write_text('{"id": "x"}')
    with pytest.raises(ValueError, match="JSON array"):
        load_sharegpt(p)


# --------------------------------------------------------------------------- pool


@pytest.mark.parametrize("name", ["pool.jsonl", "pool.jsonl.gz"])
def test_session_pool_roundtrip(tmp_path: Path, name: str, sgd: list[Session], sharegpt_head: list[Session]) -> None:
    pool = SessionPool(sgd[:50] + sharegpt_head[:20])
    assert len(pool) == 70 and "sgd:1_00000" in pool
    assert pool.source_counts() == {"sgd": 50, "sharegpt": 20}
    assert [s.session_id for s in pool.by_source("sharegpt")] == [s.session_id for s in sharegpt_head[:20]]
    with pytest.raises(ValueError, match="already in the pool"):
        pool.add(sgd[0])

    path = pool.save_jsonl(tmp_path / name)
    assert sorted(x.name for x in tmp_path.iterdir()) == [name]  # no temp file left behind
    loaded = SessionPool.load_jsonl(path)
    assert list(loaded) == list(pool)
    assert all(loaded[k] == pool[k] for k in pool)


def test_session_pool_load_names_bad_line(tmp_path: Path) -> None:
    p = tmp_path / "bad.jsonl"
    p.write_text(NEEDLE.model_dump_json() + "\n" + '{"session_id": "x"}\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl:2"):
        SessionPool.load_jsonl(p)


# --------------------------------------------------------------------------- embedder


@pytest.mark.slow
def test_embedder_cache_hits_and_same_vectors(embedder: Embedder, tmp_path: Path) -> None:
    texts = [
        "I prefer navy cotton shirts.",
        "Book a table for two at an Italian place in San Jose.",
        "What is the capital of France?",
        "I prefer navy cotton shirts.",  # repeated inside one call
    ]
    cache = tmp_path / "c.sqlite"
    e1 = Embedder(cache_path=cache, commit_every=2)
    v1 = e1.encode(texts)
    assert v1.shape == (4, 384) and v1.dtype == np.float32
    assert np.allclose(np.linalg.norm(v1, axis=1), 1.0, atol=1e-5)
    assert e1.stats.misses == 3 and e1.stats.hits == 0
    assert e1.cache_size() == 3
    assert np.array_equal(v1[0], v1[3])
    # semantic sanity: the shirt sentence is closer to a clothing paraphrase than to the others
    q = e1.encode("what clothes does the user like to wear")[0]
    assert q @ v1[0] > q @ v1[1] and q @ v1[0] > q @ v1[2]

    e1.reset_stats()
    v2 = e1.encode(texts)
    assert e1.stats.misses == 0 and e1.stats.hits == 4
    assert np.allclose(v1, v2, atol=1e-3)

    e2 = Embedder(cache_path=cache, memory_cache_size=0)  # a new process would see the same
    v3 = e2.encode(texts[:3])
    assert e2.stats.hits == 3 and e2.stats.misses == 0
    assert e2.stats.load_s == 0.0  # the model was never needed
    assert np.allclose(v1[:3], v3, atol=1e-3)

    # a vector computed without any cache agrees with the cached one within fp16 tolerance
    e3 = Embedder(cache_path=None)
    assert np.allclose(e3.encode(texts[1])[0], v1[1], atol=2e-3)
    e1.close()
    e2.close()


def test_embedder_is_thread_safe(embedder: Embedder, sgd: list[Session]) -> None:
    from concurrent.futures import ThreadPoolExecutor

    texts = [t.content for s in sgd[100:104] for t in s.turns]
    chunks = [texts[i::3] for i in range(3)] + [texts]
    with ThreadPoolExecutor(4) as ex:
        outs = list(ex.map(embedder.encode, chunks))
    ref = embedder.encode(texts)
    for i in range(3):
        assert np.array_equal(outs[i], ref[i::3])
    assert np.array_equal(outs[3], ref)


_KILLED_WORKER = """
import sys
from shopping_companion.memory.embedder import Embedder
from shopping_companion.memory.loaders import load_sgd
texts = [t.content for s in load_sgd(sys.argv[2]) for t in s.turns][:4000]
Embedder(cache_path=sys.argv[1], commit_every=16, batch_size=16).encode(texts)
"""


@pytest.mark.slow
def test_embedder_cache_survives_a_killed_run(tmp_path: Path, sgd: list[Session]) -> None:
    """A run killed mid-encode (SIGKILL) leaves a readable cache with every committed chunk."""
    import sqlite3
    import subprocess
    import sys
    import time

    cache = tmp_path / "killed.sqlite"
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILLED_WORKER, str(cache), str(resolve_data_dir() / SGD_RELATIVE_PATH)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 180
        n = 0
        while time.monotonic() < deadline and proc.poll() is None:
            if cache.exists():
                try:
                    with sqlite3.connect(cache, timeout=5) as db:
                        n = db.execute("SELECT COUNT(*) FROM emb").fetchone()[0]
                except sqlite3.OperationalError:  # table not created yet
                    n = 0
                if n >= 32:
                    break
            time.sleep(0.05)
        assert proc.poll() is None, f"worker ended early: {proc.stderr.read().decode()[-2000:]}"
        proc.kill()
    finally:
        proc.kill()
        proc.wait()

    texts = [t.content for s in sgd for t in s.turns][:4000]
    e = Embedder(cache_path=cache)
    committed = e.cache_size()
    assert 32 <= committed < len(set(texts))  # interrupted, and kept what it committed
    assert e._db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"  # noqa: SLF001
    first = sorted(dict.fromkeys(texts), key=len, reverse=True)[:32]  # committed longest first, 16 per chunk
    e.encode(first)
    assert e.stats.hits == 32 and e.stats.misses == 0
    e.close()


def test_embedder_rejects_non_strings(embedder: Embedder) -> None:
    with pytest.raises(TypeError, match=r"texts\[1\]"):
        embedder.encode(["ok", 3])  # type: ignore[list-item]
    assert embedder.encode([]).shape == (0, 384)


# --------------------------------------------------------------------------- MemoryStore


@pytest.mark.slow
def test_search_finds_needle_for_paraphrased_query(store: MemoryStore) -> None:
    assert len(store) == 43 and NEEDLE.session_id in store
    res = store.search(["what colours and fabrics does the user like for clothes"], top_k=5)
    assert len(res) == 5
    top = res[0]
    assert top["session_id"] == NEEDLE.session_id
    assert top["date"] == "2024-05-17"
    # the user's own statement of the preference is among the hits, not only the recap
    assert (NEEDLE.session_id, 0) in [(r["session_id"], r["turn_index"]) for r in res]
    # and it is a clear win: the best non-needle turn scores lower than the best needle turn
    best_other = max(r["score"] for r in res if r["session_id"] != NEEDLE.session_id)
    assert top["score"] > best_other + 0.1
    assert set(top) == {"session_id", "turn_index", "role", "date", "score", "snippet", "query"}
    assert NEEDLE.turns[top["turn_index"]].content.startswith(top["snippet"][:50])
    assert -1.0 <= top["score"] <= 1.0 and top["score"] == round(top["score"], 4)
    scores = [r["score"] for r in res]
    assert scores == sorted(scores, reverse=True)
    # a control query about something else must not rank the needle first
    other = store.search("book a restaurant reservation for dinner", top_k=3)
    assert other[0]["session_id"] != NEEDLE.session_id


@pytest.mark.slow
def test_search_multi_query_merges_and_dedups(store: MemoryStore) -> None:
    qa = "navy cotton shirts"
    qb = "make a restaurant booking"
    single_a = {(r["session_id"], r["turn_index"]): r["score"] for r in store.search(qa, top_k=50)}
    single_b = {(r["session_id"], r["turn_index"]): r["score"] for r in store.search(qb, top_k=50)}
    merged = store.search([qa, qb, qa], top_k=20)
    keys = [(r["session_id"], r["turn_index"]) for r in merged]
    assert len(merged) == 20 and len(set(keys)) == 20
    assert [r["score"] for r in merged] == sorted((r["score"] for r in merged), reverse=True)
    for r, k in zip(merged, keys):
        expect = max(single_a.get(k, -2.0), single_b.get(k, -2.0))
        assert r["score"] == pytest.approx(expect, abs=1e-4)
        assert r["query"] == (qa if single_a.get(k, -2.0) >= single_b.get(k, -2.0) else qb)
    # both queries contribute: needle turns and restaurant turns are in one ranking
    assert any(s == NEEDLE.session_id for s, _ in keys)
    assert any(r["query"] == qb for r in merged)
    # top_k larger than the index returns every turn once
    assert len(store.search(qa, top_k=50)) == min(50, store.n_turns)


@pytest.mark.slow
def test_snippets_are_cut_with_marker(embedder: Embedder) -> None:
    long_turn = "I only buy shoes made of real leather, never synthetic. " * 20
    s = Session(
        session_id="s1",
        date="2024-01-01",
        turns=[Turn(role="user", content=long_turn), Turn(role="assistant", content="Got it.")],
    )
    st = MemoryStore([s], embedder, snippet_chars=40)
    res = st.search("leather shoes", top_k=2)
    assert res[0]["turn_index"] == 0
    snip = res[0]["snippet"]
    assert snip.endswith(TRUNCATION_MARKER) and len(snip) <= 40 + len(TRUNCATION_MARKER)
    assert long_turn.startswith(snip[: -len(TRUNCATION_MARKER)])
    assert res[1]["snippet"] == "Got it."


def test_view_returns_sessions_and_unknown_ids(store: MemoryStore, haystack: list[Session]) -> None:
    other = haystack[0].session_id
    sessions, unknown = store.view([NEEDLE.session_id, "sgd:does-not-exist", other, NEEDLE.session_id])
    assert [s.session_id for s in sessions] == [NEEDLE.session_id, other]
    assert unknown == ["sgd:does-not-exist"]
    assert sessions[0] == NEEDLE
    sessions[0].turns.clear()  # callers get copies
    assert store.view([NEEDLE.session_id])[0][0].turns == NEEDLE.turns
    assert store.session_ids == [s.session_id for s in haystack]


def test_from_pool_sets_dates_from_refs(sgd: list[Session], embedder: Embedder) -> None:
    pool = SessionPool(sgd[:5])
    refs = [
        SessionRef(session_id=sgd[3].session_id, date="2023-02-01"),
        SessionRef(session_id=sgd[1].session_id, date="2023-03-05"),
    ]
    st = MemoryStore.from_pool(pool, refs, embedder)
    assert st.session_ids == [sgd[3].session_id, sgd[1].session_id]
    got, unknown = st.view(st.session_ids)
    assert [s.date for s in got] == ["2023-02-01", "2023-03-05"] and unknown == []
    assert pool[sgd[3].session_id].date is None  # the pool is not modified
    assert {r["date"] for r in st.search("restaurant", top_k=50)} == {"2023-02-01", "2023-03-05"}
    with pytest.raises(KeyError, match="sgd:nope"):
        MemoryStore.from_pool(pool, [SessionRef(session_id="sgd:nope", date="2023-01-01")], embedder)


@pytest.mark.parametrize(
    ("call", "field", "hint"),
    [
        (lambda st: st.search([]), "queries", "1–10"),
        (lambda st: st.search(["   "]), "queries", "empty"),
        (lambda st: st.search(""), "queries", "empty"),
        (lambda st: st.search(["x" * 2001]), "queries", "2000"),
        (lambda st: st.search([f"q{i}" for i in range(11)]), "queries", "10"),
        (lambda st: st.search([1]), "queries", "string"),
        (lambda st: st.search({"q": 1}), "queries", "list"),
        (lambda st: st.search("ok", top_k=0), "top_k", "1 to 50"),
        (lambda st: st.search("ok", top_k=51), "top_k", "1 to 50"),
        (lambda st: st.search("ok", top_k="5"), "top_k", "1 to 50"),
        (lambda st: st.search("ok", top_k=2.0), "top_k", "1 to 50"),
        (lambda st: st.search("ok", top_k=True), "top_k", "1 to 50"),
        (lambda st: st.view("sgd:1_00000"), "session_ids", "list"),
        (lambda st: st.view([]), "session_ids", "1–10"),
        (lambda st: st.view([None]), "session_ids", "string"),
        (lambda st: st.view([f"s{i}" for i in range(11)]), "session_ids", "10"),
    ],
)
def test_validation_errors_name_the_field(store: MemoryStore, call, field: str, hint: str) -> None:
    with pytest.raises(ToolInputError) as ei:
        call(store)
    assert ei.value.field == field
    assert str(ei.value).startswith(f"{field}: ")
    assert hint in str(ei.value)


def test_search_accepts_boundary_values(store: MemoryStore) -> None:
    assert len(store.search(["y" * 2000], top_k=1)) == 1
    assert len(store.search([f"shirt colour {i}" for i in range(10)], top_k=50)) == 50
    assert len(store.view([f"s{i}" for i in range(10)])[1]) == 10


def test_store_rejects_duplicate_sessions(embedder: Embedder) -> None:
    with pytest.raises(ValueError, match="twice"):
        MemoryStore([NEEDLE, NEEDLE], embedder)


def test_make_embedder_keeps_one_instance_per_cache_file(tmp_path):
    """The quickstart's synthesis statistics and its evaluation share one embedder (model, query
    encoder, in-memory cache); a closed one is replaced, another cache file gets its own."""
    from shopping_companion.pipeline import make_embedder

    a = make_embedder(tmp_path / "a.sqlite")
    assert make_embedder(tmp_path / "a.sqlite") is a and not a.closed
    a.close()
    b = make_embedder(tmp_path / "a.sqlite")
    assert b is not a and a.closed and not b.closed and b.cache_size() == 0
    c = make_embedder(tmp_path / "c.sqlite")
    assert c is not b and c.cache_path == tmp_path / "c.sqlite"
