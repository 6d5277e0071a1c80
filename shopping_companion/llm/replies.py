"""Reading a JSON object out of a model's reply: the one extractor of the LLM judge, the
personalization benchmark's LLM roles, the LLM task generator and the LLM attribute extractor.

:func:`extract_json` removes reasoning (``<think>…</think>`` blocks, and everything up to a lone
``</think>``), then reads, in this order: the whole remaining reply (or one Markdown code fence
around all of it) as one JSON value, which must be an object; else the Markdown code blocks
(```` ```json ```` or bare fences) whose content is one JSON object; else the bare JSON objects in
the prose (``json.JSONDecoder.raw_decode`` at each ``{``, skipping over every decoded object, so an
object nested in another is never a candidate on its own). Among several candidates of the first
kind found, ``which`` picks the ``"first"`` or the ``"last"``: the judge takes the last (a preamble
or a draft comes before the grading), the generators the first.

:class:`ReplyCache` is the one reply cache of the package (the LLM judge, the personalization
benchmark's LLM roles, the LLM task generator, the LLM attribute extractor): replies under a content
key, in an in-memory LRU and, with a path, in an SQLite file shared by threads, processes and runs.
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

__all__ = ["ReplyCache", "extract_json"]

_THINK_RE = re.compile(r"<think>.*?</think>", re.S | re.I)
_FENCE_RE = re.compile(r"^```[a-zA-Z]*\s*\n?(.*?)\n?```$", re.S)
_BLOCK_RE = re.compile(r"```[a-zA-Z]*[ \t]*\n?(.*?)```", re.S)


def extract_json(text: str, *, which: Literal["first", "last"]) -> dict[str, Any]:
    """The JSON object ``text`` (a model's reply) holds (module docstring for the rule);
    ``which``: the ``"first"`` or the ``"last"`` of several fenced, else bare, objects.

    Raises:
        ValueError: the reply is empty, is one JSON value that is not an object, or holds no JSON
            object (the message says which, and where the whole reply stopped parsing).
    """
    if which not in ("first", "last"):
        raise ValueError(f"which: must be 'first' or 'last', got {which!r}")
    s = _THINK_RE.sub("", text or "")
    if "</think>" in s:
        s = s.rsplit("</think>", 1)[1]
    s = s.strip()
    m = _FENCE_RE.match(s)
    if m:
        s = m.group(1).strip()
    if not s:
        raise ValueError("the reply is empty; expected one JSON object")
    try:
        obj = json.loads(s)
    except json.JSONDecodeError as e:
        first_err = f"{e.msg} at character {e.pos}"
    except (ValueError, RecursionError) as e:
        first_err = str(e) or type(e).__name__
    else:
        if not isinstance(obj, dict):
            raise ValueError(f"the reply is JSON {type(obj).__name__}, expected an object")
        return obj
    for candidates in (_fenced_objects(s), _bare_objects(s)):
        found: dict[str, Any] | None = None
        for cand in candidates:
            found = cand
            if which == "first":
                break
        if found is not None:
            return found
    raise ValueError(f"the reply holds no JSON object ({first_err}); expected one JSON object and nothing else")


def _fenced_objects(s: str) -> Iterator[dict[str, Any]]:
    """The contents of the Markdown code blocks of ``s`` that are one JSON object, in order."""
    for fm in _BLOCK_RE.finditer(s):
        try:
            cand = json.loads(fm.group(1).strip())
        except (ValueError, RecursionError):
            continue
        if isinstance(cand, dict):
            yield cand


def _bare_objects(s: str) -> Iterator[dict[str, Any]]:
    """The top-level JSON objects in the prose of ``s``, in order (nested ones are skipped over)."""
    decoder = json.JSONDecoder()
    i = s.find("{")
    while i != -1:
        try:
            cand, end = decoder.raw_decode(s, i)
        except (ValueError, RecursionError):
            i = s.find("{", i + 1)
            continue
        if isinstance(cand, dict):
            yield cand
        i = s.find("{", end)


class ReplyCache:
    """Replies under a content key: an in-memory LRU of at most ``max_entries`` replies (a GRPO run
    judges without end), plus, when ``path`` is given, the SQLite file ``path`` (WAL; unbounded; safe
    across threads and processes). ``get`` reads memory, then the file; ``put`` writes both.

    A caller keys a call with :meth:`key` of everything that makes two of its calls the same
    (model, messages, sampling, reply schema, prompt version, ...). Replies live in the table
    ``llm_replies (key, model, reply, created)``. A file written before this class was the one cache
    (the judge's table ``replies``, the generators' ``calls``; the same keys) is migrated into it once
    when opened (``PRAGMA user_version`` 0 -> 1; the old tables are left as they were); an old table
    of another shape is ignored.
    """

    TABLE = "llm_replies"
    _VERSION = 1
    #: the tables of earlier files: ``table -> (its columns, the SELECT of (key, model, reply, created))``
    _OLD_TABLES = {
        "replies": (
            {"key", "reply", "created"},
            "SELECT key, NULL, reply, created FROM replies WHERE typeof(key) = 'text' AND typeof(reply) = 'text'",
        ),
        "calls": (
            {"key", "model", "response", "created"},
            "SELECT key, model, response, created FROM calls WHERE typeof(key) = 'text' AND typeof(response) = 'text'",
        ),
    }

    def __init__(self, path: str | Path | None, max_entries: int = 50_000) -> None:
        self.path = None if path is None else Path(path).expanduser()
        self._mem: OrderedDict[str, str] = OrderedDict()
        self._max = max(1, int(max_entries))
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(str(self.path), check_same_thread=False, timeout=30, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._open_table(self._db)

    @classmethod
    def _open_table(cls, db: sqlite3.Connection) -> None:
        """Create :attr:`TABLE` and migrate the tables of older files, once, in one transaction."""
        db.execute("BEGIN IMMEDIATE")
        try:
            db.execute(
                f"CREATE TABLE IF NOT EXISTS {cls.TABLE} "
                "(key TEXT PRIMARY KEY, model TEXT, reply TEXT NOT NULL, created REAL)"
            )
            if int(db.execute("PRAGMA user_version").fetchone()[0]) < cls._VERSION:
                for table, (columns, select) in cls._OLD_TABLES.items():
                    found = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
                    if columns <= found:
                        db.execute(f"INSERT OR IGNORE INTO {cls.TABLE} {select}")
                db.execute(f"PRAGMA user_version = {cls._VERSION}")
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    @staticmethod
    def key(payload: dict[str, Any]) -> str:
        """Hex SHA-256 of ``payload`` as JSON (keys sorted, non-ASCII kept): the content key."""
        return hashlib.sha256(json.dumps(payload, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()

    def get(self, key: str) -> str | None:
        """The reply stored under ``key``, or None."""
        with self._lock:
            if key in self._mem:
                self._mem.move_to_end(key)
                return self._mem[key]
            if self._db is not None:
                row = self._db.execute(f"SELECT reply FROM {self.TABLE} WHERE key = ?", (key,)).fetchone()
                if row is not None:
                    self._remember(key, str(row[0]))
                    return str(row[0])
        return None

    def _remember(self, key: str, reply: str) -> None:
        self._mem[key] = reply
        self._mem.move_to_end(key)
        while len(self._mem) > self._max:
            self._mem.popitem(last=False)

    def put(self, key: str, reply: str, *, model: str | None = None) -> None:
        """Store ``reply`` under ``key`` (replacing what was there); ``model`` is recorded beside it."""
        with self._lock:
            self._remember(key, reply)
            if self._db is not None:
                self._db.execute(
                    f"INSERT OR REPLACE INTO {self.TABLE} VALUES (?, ?, ?, ?)", (key, model, reply, time.time())
                )

    def __len__(self) -> int:
        """Replies stored: in the file when there is one, else in memory."""
        with self._lock:
            if self._db is None:
                return len(self._mem)
            return int(self._db.execute(f"SELECT COUNT(*) FROM {self.TABLE}").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None
