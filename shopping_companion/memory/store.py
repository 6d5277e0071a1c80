"""One user's long-term memory: dense turn retrieval (``mem_search``) and session lookup
(``mem_view``), as in the Shopping Companion paper (App. B.1): every dialogue turn of the user's
history is embedded with all-MiniLM-L6-v2, and a search returns the top-k turns by cosine
similarity to the agent's queries.

A turn longer than the model's window (254 word pieces of text for MiniLM) is embedded as several
overlapping windows (:meth:`~shopping_companion.memory.embedder.Embedder.windows`), so a fact near
its end is found too; a turn's score is the best score of its windows and it is still returned
once, as one turn of its session. :data:`MEMORY_INDEX_VERSION` names this layout (2: windows;
1: one truncated vector per turn).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from shopping_companion.errors import ToolInputError, check_at_least, check_tool_text
from shopping_companion.memory.embedder import DIM, Embedder, finish_f16
from shopping_companion.tool_args import (  # the limits are re-exported (public names of this module)
    MAX_QUERIES,
    MAX_QUERY_CHARS,
    MAX_SESSION_IDS,
    MAX_TOP_K,
    check_id_list,
    check_top_k,
)
from shopping_companion.sentences import split_sentences
from shopping_companion.types import Session, SessionRef

__all__ = [
    "MAX_QUERIES",
    "MAX_QUERY_CHARS",
    "MAX_SESSION_IDS",
    "MAX_TOP_K",
    "MEMORY_INDEX_VERSION",
    "TRUNCATION_MARKER",
    "MemoryStore",
]

#: Layout of the memory index: 2 = every turn embedded as overlapping windows of at most the
#: model's length (1 was one vector per turn, cut at 256 word pieces). Nothing cached goes stale
#: across the change: the embedder's cache is keyed by text, and a window is keyed by its own text.
MEMORY_INDEX_VERSION = 2

#: Appended to a snippet cut at ``snippet_chars``.
TRUNCATION_MARKER = " …[truncated]"


class MemoryStore:
    """Dense retrieval over the turns of one user's history sessions.

    ``sessions`` are the user's history in chronological order (ids must be unique; ``date`` is
    the ISO date shown in results and may be None). Every turn, user and assistant, is embedded
    once with ``embedder`` at construction (cached by the embedder), as one row per window when
    the embedder has ``encode_windows_f16`` (a turn longer than the model's window gets several
    overlapping rows), else one row per turn. ``snippet_chars`` (>= 1) is the longest turn text
    a search result shows before the :data:`TRUNCATION_MARKER`.

    ``embeddings``: optional precomputed matrix, float32 ``[n_rows, 384]`` with unit rows in
    (session, turn, window) order, e.g. from :class:`~shopping_companion.memory.bank.MemoryBank`;
    then nothing is encoded at construction. ``window_turns``: int ``[n_rows]``, the turn each
    row belongs to, numbered 0..n_turns-1 in (session, turn) order, non-decreasing, every turn
    at least once; ``None`` means one row per turn. Queries are embedded with
    ``embedder.encode_queries`` when the embedder has it (else ``encode``).

    Raises ``ValueError`` for repeated session ids, ``snippet_chars < 1``, or an ``embeddings``
    matrix / ``window_turns`` that does not match the history.
    """

    def __init__(
        self,
        sessions: Sequence[Session],
        embedder: Embedder,
        snippet_chars: int = 300,
        *,
        embeddings: np.ndarray | None = None,
        window_turns: np.ndarray | Sequence[int] | None = None,
    ) -> None:
        self.embedder = embedder
        self.snippet_chars = check_at_least("snippet_chars", snippet_chars, 1)
        self._sessions: dict[str, Session] = {}
        for s in sessions:
            if s.session_id in self._sessions:
                raise ValueError(f"session id {s.session_id!r} appears twice in the history")
            self._sessions[s.session_id] = s
        self._order = list(self._sessions)
        sess_idx: list[int] = []
        turn_idx: list[int] = []
        texts: list[str] = []
        for si, sid in enumerate(self._order):
            for ti, turn in enumerate(self._sessions[sid].turns):
                sess_idx.append(si)
                turn_idx.append(ti)
                texts.append(turn.content)
        self._sess_idx = np.asarray(sess_idx, dtype=np.int64)
        self._turn_idx = np.asarray(turn_idx, dtype=np.int64)
        n = len(texts)
        # [n_rows, 384] float32, unit rows (one per window of each turn): the whole index,
        # searched with one mat-mul; self._row_turn[row] is the turn (0..n-1) a row belongs to.
        if embeddings is not None:
            m = np.ascontiguousarray(embeddings, dtype=np.float32)
            if window_turns is None:
                if m.shape != (n, DIM):
                    raise ValueError(
                        f"embeddings has shape {m.shape}; this history has {n} turns, so "
                        f"({n}, {DIM}) is required (or pass window_turns for one row per window)"
                    )
                owner = np.arange(n, dtype=np.int64)
            else:
                owner = np.asarray(window_turns, dtype=np.int64)
                if m.ndim != 2 or m.shape[1] != DIM or owner.shape != (m.shape[0],):
                    raise ValueError(
                        f"embeddings has shape {m.shape} and window_turns {owner.shape}; "
                        f"(n_rows, {DIM}) and (n_rows,) are required"
                    )
                self._check_owner(owner, n)
            self._matrix = m
        elif not texts:
            self._matrix, owner = np.zeros((0, DIM), dtype=np.float32), np.zeros(0, dtype=np.int64)
        elif callable(getattr(embedder, "encode_windows_f16", None)):
            v16, owner = embedder.encode_windows_f16(texts)
            self._matrix = finish_f16(v16)
        else:
            self._matrix, owner = embedder.encode(texts), np.arange(n, dtype=np.int64)
        self._row_turn = owner
        self._n_turns = n
        # first row of each turn (rows are grouped by turn), for the per-turn max in search
        self._turn_starts = np.flatnonzero(np.r_[True, np.diff(owner) != 0]) if owner.shape[0] != n else None
        enc_q = getattr(embedder, "encode_queries", None)
        self._encode_queries = enc_q if callable(enc_q) else embedder.encode
        win = getattr(embedder, "windows", None)
        self._windows_of = win if callable(win) else None

    @staticmethod
    def _check_owner(owner: np.ndarray, n_turns: int) -> None:
        ok = (
            owner.size == 0
            if n_turns == 0
            else (
                owner.size > 0
                and int(owner[0]) == 0
                and int(owner[-1]) == n_turns - 1
                and bool(np.all(np.diff(owner) >= 0))
                and bool(np.all(np.diff(owner) <= 1))
            )
        )
        if not ok:
            raise ValueError(
                f"window_turns must number the rows' turns 0..{n_turns - 1} in order, non-decreasing, "
                "every turn at least once"
            )

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_pool(
        cls,
        pool: Mapping[str, Session],
        history_refs: Sequence[SessionRef],
        embedder: Embedder,
        snippet_chars: int = 300,
    ) -> MemoryStore:
        """Build a user's store from a session pool (e.g. a
        :class:`~shopping_companion.memory.loaders.SessionPool`) and the task's ordered
        ``history`` refs; each session is copied with the ref's ``date``. Raises ``KeyError``
        listing every ref id missing from the pool."""
        missing = [r.session_id for r in history_refs if r.session_id not in pool]
        if missing:
            raise KeyError(
                f"{len(missing)} history session id(s) not in the pool: {missing[:10]}"
                + (" …" if len(missing) > 10 else "")
            )
        sessions = [pool[r.session_id].model_copy(update={"date": r.date}) for r in history_refs]
        return cls(sessions, embedder, snippet_chars=snippet_chars)

    # ------------------------------------------------------------------ properties

    @property
    def session_ids(self) -> list[str]:
        """The history's session ids in chronological (construction) order."""
        return list(self._order)

    @property
    def n_turns(self) -> int:
        """Number of indexed turns."""
        return self._n_turns

    @property
    def n_windows(self) -> int:
        """Number of rows of :attr:`embeddings` (>= :attr:`n_turns`: one per window of a turn)."""
        return int(self._matrix.shape[0])

    @property
    def embeddings(self) -> np.ndarray:
        """The index matrix, float32 ``[n_windows, 384]``, unit rows in (session, turn, window)
        order; a read-only view."""
        v = self._matrix.view()
        v.flags.writeable = False
        return v

    @property
    def window_turns(self) -> np.ndarray:
        """int64 ``[n_windows]``: the turn (0..n_turns-1, (session, turn) order) of each row of
        :attr:`embeddings`; a read-only view."""
        v = self._row_turn.view()
        v.flags.writeable = False
        return v

    @property
    def turn_ids(self) -> list[tuple[str, int]]:
        """``(session_id, turn_index)`` of every row of :attr:`embeddings`, in row order (a turn
        of several windows appears once per window)."""
        return [(self._order[int(self._sess_idx[t])], int(self._turn_idx[t])) for t in self._row_turn]

    def __len__(self) -> int:
        return len(self._order)

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._sessions

    def __repr__(self) -> str:
        return f"MemoryStore({len(self)} sessions, {self.n_turns} turns, {self.n_windows} windows)"

    # ------------------------------------------------------------------ validation

    @staticmethod
    def _check_queries(queries: Any) -> list[str]:
        if isinstance(queries, str):
            queries = [queries]
        if not isinstance(queries, (list, tuple)):
            raise ToolInputError(
                "queries", f"must be a list of 1–{MAX_QUERIES} non-empty strings, got {type(queries).__name__}"
            )
        if not queries:
            raise ToolInputError("queries", f"must hold 1–{MAX_QUERIES} non-empty strings, got an empty list")
        if len(queries) > MAX_QUERIES:
            raise ToolInputError("queries", f"at most {MAX_QUERIES} queries per call, got {len(queries)}")
        out: list[str] = []
        for i, q in enumerate(queries):
            if not isinstance(q, str):
                raise ToolInputError("queries", f"item {i} must be a string, got {type(q).__name__}")
            if not q.strip():
                raise ToolInputError("queries", f"item {i} is empty or whitespace; give search text")
            if len(q) > MAX_QUERY_CHARS:
                raise ToolInputError(
                    "queries", f"item {i} has {len(q)} characters; at most {MAX_QUERY_CHARS} are allowed"
                )
            out.append(check_tool_text("queries", q.strip(), i))
        return list(dict.fromkeys(out))  # drop repeated queries, keep order

    @staticmethod
    def _check_session_ids(session_ids: Any) -> list[str]:
        session_ids = check_id_list("session_ids", session_ids, MAX_SESSION_IDS, "session")
        for i, s in enumerate(session_ids):
            if not isinstance(s, str):
                raise ToolInputError("session_ids", f"item {i} must be a string, got {type(s).__name__}")
            check_tool_text("session_ids", s, i)
        return list(dict.fromkeys(session_ids))

    # ------------------------------------------------------------------ tools

    def _snippet(self, text: str) -> str:
        if len(text) <= self.snippet_chars:
            return text
        return text[: self.snippet_chars].rstrip() + TRUNCATION_MARKER

    def search(self, queries: list[str] | str, top_k: int = 10) -> list[dict[str, Any]]:
        """``mem_search``: the ``top_k`` turns most similar to any of ``queries``.

        ``queries``: one string or a list of 1–10 strings, each non-blank and ≤ 2,000 characters
        (repeats are merged). ``top_k``: int in 1..50. Each turn's score is its highest cosine
        similarity over the queries and over its windows (a long turn is indexed as overlapping
        windows); turns are ranked by score (ties: earlier
        session, then earlier turn) and each appears at most once. Returns at most
        ``min(top_k, n_turns)`` dicts, best first::

            {"session_id": str, "turn_index": int (0-based), "role": "user"|"assistant",
             "date": str|None, "score": float (cosine in [-1, 1], 4 decimals),
             "snippet": str (turn text, cut at snippet_chars + TRUNCATION_MARKER; for a long
                        turn scored by a later window, "…" + that window, cut the same way),
             "query": str (the query that gave the score)}

        Raises :class:`~shopping_companion.errors.ToolInputError` with ``field`` ``"queries"`` or
        ``"top_k"`` for invalid arguments.
        """
        qs, k = self.check_search(queries, top_k)
        if self.n_turns == 0:
            return []
        return self._rank(qs, self._encode_queries(qs), k)  # [q, 384], unit rows

    @classmethod
    def check_search(cls, queries: Any, top_k: Any) -> tuple[list[str], int]:
        """The arguments of :meth:`search` as it uses them: ``(queries, top_k)`` with the queries
        stripped, repeats merged (first occurrence kept, order kept) and ``top_k`` an ``int``.
        What :meth:`search_vectors` needs query vectors for, one row per returned query, in order.
        Raises :class:`~shopping_companion.errors.ToolInputError` (``field`` ``"queries"`` or
        ``"top_k"``) exactly as :meth:`search` does."""
        return cls._check_queries(queries), check_top_k(top_k)

    def search_vectors(self, queries: list[str] | str, qvec: np.ndarray, top_k: int = 10) -> list[dict[str, Any]]:
        """:meth:`search` with the query vectors encoded elsewhere (e.g. batched across requests
        by a service): ``qvec`` is float32 ``[len(q), 384]``, row i the unit vector
        ``embedder.encode_queries`` gives for ``q[i]``, where ``q`` is ``check_search(queries,
        top_k)[0]``. With those vectors the result equals ``search(queries, top_k)`` exactly.
        (Snippets of long turns still encode their sentences with this store's embedder.)

        Raises :class:`~shopping_companion.errors.ToolInputError` as :meth:`search` does, and
        ``ValueError`` when ``qvec`` is not ``[len(q), 384]``."""
        qs, k = self.check_search(queries, top_k)
        qv = np.asarray(qvec, dtype=np.float32)
        if qv.shape != (len(qs), DIM):
            raise ValueError(f"qvec has shape {qv.shape}; ({len(qs)}, {DIM}) is required (one row per query)")
        if self.n_turns == 0:
            return []
        return self._rank(qs, qv, k)

    def _rank(self, qs: list[str], qvec: np.ndarray, k: int) -> list[dict[str, Any]]:
        """The search results of the checked queries ``qs`` with vectors ``qvec`` ``[q, 384]``."""
        # One matrix-vector product per query: numpy's BLAS runs a [q>=3, 384] x [384, n] product
        # on its thread pool, which costs ~8 ms on a busy 2-core machine instead of ~0.02 ms.
        sims = np.stack([self._matrix @ v for v in qvec])  # [q, n_windows]
        if self._turn_starts is not None:  # some turn has several windows: its best window
            sims = np.maximum.reduceat(sims, self._turn_starts, axis=1)  # [q, n_turns]
        best_q = sims.argmax(axis=0)
        scores = sims[best_q, np.arange(sims.shape[1])]
        k = min(k, scores.shape[0])
        if k < scores.shape[0]:
            cand = np.argpartition(-scores, k - 1)[:k]
            # take every turn tied with the k-th score so the tie-break below is exact
            kth = scores[cand].min()
            cand = np.flatnonzero(scores >= kth)
        else:
            cand = np.arange(scores.shape[0])
        # row order is (session order, turn order), so a stable sort on -score breaks ties by it
        cand = np.sort(cand)
        order = cand[np.argsort(-scores[cand], kind="stable")][:k]
        results: list[dict[str, Any]] = []
        for row in order:
            sess = self._sessions[self._order[int(self._sess_idx[row])]]
            ti = int(self._turn_idx[row])
            turn = sess.turns[ti]
            results.append(
                {
                    "session_id": sess.session_id,
                    "turn_index": ti,
                    "role": turn.role,
                    "date": sess.date,
                    "score": round(float(scores[row]), 4),
                    "snippet": self._best_snippet(int(row), turn.content, qvec[int(best_q[row])]),
                    "query": qs[int(best_q[row])],
                }
            )
        return results

    def _best_snippet(self, turn: int, text: str, qv: np.ndarray) -> str:
        """The snippet of a turn: its start, or — when a later window of a long turn gave the
        score — that window, after a leading ``"…"`` (so a fact near the end of a long turn is
        visible in the result, not only found)."""
        starts = self._turn_starts
        if starts is None or self._windows_of is None:
            return self._snippet(text)
        a = int(starts[turn])
        b = int(starts[turn + 1]) if turn + 1 < len(starts) else self._matrix.shape[0]
        if b - a < 2:
            return self._snippet(text)
        j = int(np.argmax(self._matrix[a:b] @ qv))
        if j == 0:
            return self._snippet(text)
        try:
            windows = self._windows_of(text)
        except Exception:  # a custom embedder's windows(); the start of the turn is still right
            return self._snippet(text)
        if len(windows) != b - a:
            return self._snippet(text)
        return "…" + self._snippet(self._best_passage(windows[j], qv))

    def _best_passage(self, window: str, qv: np.ndarray) -> str:
        """The sentences of ``window`` around the one most similar to the query vector ``qv``,
        up to ``snippet_chars`` (at most 32 sentences are scored, with the query encoder)."""
        parts = split_sentences(window)[:32]
        if len(parts) < 2 or len(window) <= self.snippet_chars:
            return window.strip()
        sims = self._encode_queries(parts) @ qv
        i = int(np.argmax(sims))
        lo = hi = i
        size = len(parts[i])
        while True:  # grow to the right first (what follows a fact often completes it), then left
            if hi + 1 < len(parts) and size + 1 + len(parts[hi + 1]) <= self.snippet_chars:
                hi += 1
                size += 1 + len(parts[hi])
            elif lo > 0 and size + 1 + len(parts[lo - 1]) <= self.snippet_chars:
                lo -= 1
                size += 1 + len(parts[lo])
            else:
                break
        return " ".join(p.strip() for p in parts[lo : hi + 1])

    def view(self, session_ids: list[str]) -> tuple[list[Session], list[str]]:
        """``mem_view``: the full sessions for ``session_ids`` (a list of 1–10 strings; repeats
        merged). Returns ``(sessions, unknown_ids)``: deep copies of the known sessions in the
        requested order, and the requested ids that are not in this user's history (the caller
        reports them to the agent). Raises :class:`~shopping_companion.errors.ToolInputError`
        with ``field="session_ids"`` for an invalid argument."""
        ids = self._check_session_ids(session_ids)
        found = [self._sessions[i].model_copy(deep=True) for i in ids if i in self._sessions]
        unknown = [i for i in ids if i not in self._sessions]
        return found, unknown
