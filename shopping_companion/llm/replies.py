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

:class:`LLMCache` keeps replies in an SQLite file shared by processes (the LLM task generator and
the LLM attribute extractor).
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

__all__ = ["LLMCache", "extract_json"]

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


class LLMCache:
    """SQLite cache ``key -> response text`` (WAL; safe for several processes)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(self.path), check_same_thread=False, timeout=30)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS calls (key TEXT PRIMARY KEY, model TEXT, response TEXT, created REAL)"
        )
        self._db.commit()
        self._lock = threading.Lock()

    @staticmethod
    def key(payload: dict[str, Any]) -> str:
        return hashlib.sha256(json.dumps(payload, sort_keys=True, ensure_ascii=False).encode()).hexdigest()

    def get(self, key: str) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT response FROM calls WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def put(self, key: str, model: str, response: str) -> None:
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO calls VALUES (?, ?, ?, ?)", (key, model, response, time.time()))
            self._db.commit()

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM calls").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()
