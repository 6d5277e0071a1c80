"""A pool of sessions: :class:`SessionPool`, the collection the benchmark draws users' histories
from, saved and read as JSON lines."""

from __future__ import annotations

import gzip
import os
import tempfile
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO

from shopping_companion.catalog.loader import open_text
from shopping_companion.types import Session

__all__ = ["SessionPool"]


class SessionPool(Mapping[str, Session]):
    """An insertion-ordered, read-mostly mapping ``session_id -> Session``.

    ``SessionPool(sessions)`` raises ``ValueError`` on a repeated session id. Persist with
    :meth:`save_jsonl` (one ``Session`` JSON per line; ``.gz`` suffix compresses) and read back
    with :meth:`load_jsonl`.
    """

    def __init__(self, sessions: Iterable[Session] = ()) -> None:
        self._by_id: dict[str, Session] = {}
        self.add(sessions)

    # Mapping protocol
    def __getitem__(self, session_id: str) -> Session:
        return self._by_id[session_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_id)

    def __len__(self) -> int:
        return len(self._by_id)

    def __repr__(self) -> str:
        return f"SessionPool({len(self)} sessions, sources={self.source_counts()})"

    def add(self, sessions: Session | Iterable[Session], *, overwrite: bool = False) -> None:
        """Add one or more sessions. A repeated id raises ``ValueError`` unless ``overwrite``."""
        if isinstance(sessions, Session):
            sessions = [sessions]
        for s in sessions:
            if not isinstance(s, Session):
                raise TypeError(f"SessionPool holds Session objects, got {type(s).__name__}")
            if not overwrite and s.session_id in self._by_id:
                raise ValueError(f"session id {s.session_id!r} is already in the pool")
            self._by_id[s.session_id] = s

    def sessions(self) -> list[Session]:
        """All sessions in insertion order."""
        return list(self._by_id.values())

    def by_source(self, source: str) -> list[Session]:
        """Sessions whose ``source`` equals ``source`` (e.g. ``"sgd"``), in insertion order."""
        return [s for s in self._by_id.values() if s.source == source]

    def source_counts(self) -> dict[str, int]:
        """Number of sessions per source."""
        return dict(Counter(s.source for s in self._by_id.values()))

    def save_jsonl(self, path: str | os.PathLike[str]) -> Path:
        """Write every session as one JSON line, atomically: a temp file in the same directory,
        fsynced, then renamed over ``path``. A ``.gz`` suffix writes gzip. Returns the path."""
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
        try:
            with os.fdopen(fd, "wb") as raw:
                stream: IO[bytes] = gzip.GzipFile(fileobj=raw, mode="wb") if p.suffix == ".gz" else raw
                for s in self._by_id.values():
                    stream.write(s.model_dump_json().encode("utf-8"))
                    stream.write(b"\n")
                if stream is not raw:
                    stream.close()
                raw.flush()
                os.fsync(raw.fileno())
            os.replace(tmp, p)
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise
        return p

    @classmethod
    def load_jsonl(cls, path: str | os.PathLike[str]) -> SessionPool:
        """Read a file written by :meth:`save_jsonl`. Raises ``ValueError`` naming the line of a
        record that is not a valid ``Session`` or repeats an id."""
        p = Path(path)
        pool = cls()
        with open_text(p, errors="strict") as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    pool.add(Session.model_validate_json(line))
                except ValueError as e:
                    raise ValueError(f"{p}:{lineno}: {e}") from e
        return pool
