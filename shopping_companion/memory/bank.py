"""Turn embeddings of a whole session pool, shared by many users' memory stores.

A benchmark draws every user's history from one pool of real sessions, so the same session (and
the same turn text) appears in many users' histories. :class:`MemoryBank` embeds each distinct
turn text once (through the :class:`~shopping_companion.memory.embedder.Embedder` and its on-disk
content-hash cache, so also once across processes and reruns), keeps each session's turn vectors
in memory as float16 (768 bytes a row: one row per turn, several overlapping window rows for a turn
longer than the model's window), and builds a user's
:class:`~shopping_companion.memory.store.MemoryStore` by concatenating them: no hashing, no SQLite
and no model call per user.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from shopping_companion.errors import check_at_least
from shopping_companion.memory.embedder import DIM, Embedder, finish_f16
from shopping_companion.memory.store import MemoryStore
from shopping_companion.types import Session, SessionRef, Task

__all__ = ["MemoryBank"]


class MemoryBank:
    """Per-session turn vectors of ``pool`` (a mapping ``session_id -> Session``, e.g. a
    :class:`~shopping_companion.memory.loaders.SessionPool` or a benchmark's ``sessions``),
    computed on first use and shared by every store built from it.

    ``embedder``: the document embedder (its cache file makes a rebuild in another process cheap).
    ``snippet_chars``: passed to every :class:`MemoryStore`. ``chunk``: texts per ``encode`` call
    when embedding many sessions at once (>= 1).

    A store built here is identical (bit for bit, same matrix) to
    ``MemoryStore.from_pool(pool, history, embedder)``. Thread-safe: one lock guards the
    per-session table. Raises ``ValueError`` for ``snippet_chars < 1`` or ``chunk < 1``.
    """

    def __init__(
        self, pool: Mapping[str, Session], embedder: Embedder, snippet_chars: int = 300, *, chunk: int = 2048
    ) -> None:
        self.pool = pool
        self.embedder = embedder
        self.snippet_chars = check_at_least("snippet_chars", snippet_chars, 1)
        self.chunk = check_at_least("chunk", chunk, 1)
        self._vecs: dict[str, np.ndarray] = {}  # session id -> float16 [n_rows, 384]
        self._owner: dict[str, np.ndarray] = {}  # session id -> int64 [n_rows]: turn of each row
        self._lock = threading.RLock()

    def __len__(self) -> int:
        """Number of sessions whose vectors are held."""
        return len(self._vecs)

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._vecs

    def __repr__(self) -> str:
        return f"MemoryBank({len(self)} of {len(self.pool)} sessions embedded, {self.nbytes} bytes)"

    @property
    def nbytes(self) -> int:
        """Bytes of vectors held (float16: 768 per row, one row per window of a turn)."""
        return sum(v.nbytes for v in self._vecs.values())

    def prewarm(self, session_ids: Iterable[str] | None = None) -> int:
        """Embed the turns of ``session_ids`` (default: every session of the pool) that are not
        held yet, ``chunk`` distinct window texts per embedder call (a turn longer than the
        model's window is embedded as its overlapping windows, when the embedder has
        ``windows``). Returns the number of distinct turn texts looked up or encoded. Raises
        ``KeyError`` listing ids missing from the pool."""
        ids = list(self.pool) if session_ids is None else list(dict.fromkeys(session_ids))
        missing = [i for i in ids if i not in self.pool]
        if missing:
            raise KeyError(
                f"{len(missing)} session id(s) not in the pool: {missing[:10]}" + (" …" if len(missing) > 10 else "")
            )
        split = getattr(self.embedder, "windows", None)
        with self._lock:
            todo = [i for i in ids if i not in self._vecs]
            texts = list(dict.fromkeys(t.content for i in todo for t in self.pool[i].turns))
            wins = {t: (split(t) if callable(split) else [t]) for t in texts}
            flat = list(dict.fromkeys(w for t in texts for w in wins[t]))
            by_text: dict[str, np.ndarray] = {}
            for j in range(0, len(flat), self.chunk):
                part = flat[j : j + self.chunk]
                v16 = self.embedder.encode_f16(part)
                for t, row in zip(part, v16):
                    by_text[t] = row
            for i in todo:
                rows = [(ti, w) for ti, t in enumerate(self.pool[i].turns) for w in wins[t.content]]
                m = np.empty((len(rows), DIM), dtype=np.float16)
                for r, (_, w) in enumerate(rows):
                    m[r] = by_text[w]
                self._vecs[i] = m
                self._owner[i] = np.fromiter((ti for ti, _ in rows), dtype=np.int64, count=len(rows))
        return len(texts)

    def session_vectors(self, session_id: str) -> np.ndarray:
        """float16 ``[n_rows, 384]`` stored vectors of one session (embedded on first use), one
        row per window of each turn in (turn, window) order (:meth:`session_window_turns` maps
        rows to turns); ``KeyError`` if the id is not in the pool."""
        with self._lock:
            v = self._vecs.get(session_id)
            if v is None:
                self.prewarm([session_id])
                v = self._vecs[session_id]
        return v

    def session_window_turns(self, session_id: str) -> np.ndarray:
        """int64 ``[n_rows]``: the turn index (within the session) of each row of
        :meth:`session_vectors`; ``KeyError`` if the id is not in the pool."""
        with self._lock:
            self.session_vectors(session_id)
            return self._owner[session_id]

    def store(self, history: Sequence[SessionRef] | Sequence[str]) -> MemoryStore:
        """A user's :class:`MemoryStore` over ``history``: ``SessionRef`` items (each session is
        copied with the ref's date) or plain session ids (the pool's sessions as they are), in
        chronological order. Sessions not embedded yet are embedded first. Raises ``KeyError``
        listing ids missing from the pool, ``ValueError`` for a repeated id."""
        refs = list(history)
        ids = [r.session_id if isinstance(r, SessionRef) else str(r) for r in refs]
        missing = [i for i in ids if i not in self.pool]
        if missing:
            raise KeyError(
                f"{len(missing)} history session id(s) not in the pool: {missing[:10]}"
                + (" …" if len(missing) > 10 else "")
            )
        with self._lock:
            todo = [i for i in ids if i not in self._vecs]
            if todo:
                self.prewarm(todo)
            blocks = [self._vecs[i] for i in ids]
            owners = [self._owner[i] for i in ids]
        sessions = [
            self.pool[r.session_id].model_copy(update={"date": r.date})
            if isinstance(r, SessionRef)
            else self.pool[str(r)]
            for r in refs
        ]
        m16 = np.concatenate(blocks, axis=0) if blocks else np.zeros((0, DIM), np.float16)
        # turn numbers across the whole history: each session's turns follow the previous ones
        base = np.cumsum([0] + [len(s.turns) for s in sessions[:-1]], dtype=np.int64)
        owner = np.concatenate([o + b for o, b in zip(owners, base)]) if owners else np.zeros(0, np.int64)
        return MemoryStore(
            sessions, self.embedder, snippet_chars=self.snippet_chars, embeddings=finish_f16(m16), window_turns=owner
        )

    def for_task(self, task: Task) -> MemoryStore:
        """``store(task.history)``: the memory of the task's user, with the task's dates."""
        return self.store(task.history)

    def stats(self) -> dict[str, Any]:
        """``{"sessions": held, "turns": turns held, "rows": window rows held, "bytes": nbytes}``."""
        with self._lock:
            return {
                "sessions": len(self._vecs),
                "turns": int(sum(len(self.pool[i].turns) for i in self._vecs)),
                "rows": int(sum(v.shape[0] for v in self._vecs.values())),
                "bytes": self.nbytes,
            }
