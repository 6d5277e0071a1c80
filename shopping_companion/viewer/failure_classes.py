"""Taxonomy classes of a run's scored failures, for the episodes table and the episode page.

A class comes from the run's ``taxonomy.jsonl`` (written when an evaluation finishes) and
otherwise from :func:`~shopping_companion.benchmark.taxonomy.classify` on the line with its task:
a page classifies its own rows (within a time budget), a background thread the other failures
(tens of ms each on long trajectories).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any, Iterable, Protocol

from pydantic import ValidationError

from shopping_companion.types import EpisodeResult, Task
from shopping_companion.viewer.files import RunUnreadableError, read_side
from shopping_companion.viewer.models import EpisodeRow
from shopping_companion.viewer.values import short_error, validation_problem

__all__ = ["ClassifiedRun", "FailureClasses", "classify_line"]


class ClassifiedRun(Protocol):
    """What :class:`FailureClasses` reads of the run it classifies (a
    :class:`~shopping_companion.viewer.index.RunIndex`); each member takes the run's lock."""

    @property
    def tasks(self) -> dict[str, Task]: ...

    def raw(self, line: int) -> bytes: ...

    def row(self, line: int) -> EpisodeRow: ...

    def mark_foreign(self, line: int, problem: str) -> None: ...


def classify_line(raw: bytes, task_of: dict[str, Task]) -> tuple[dict[str, Any] | None, str | None]:
    """``(classification dict or None, problem)``: the rules of
    :func:`~shopping_companion.benchmark.taxonomy.classify` on one line; ``problem`` is set
    when the line is not an ``EpisodeResult`` after all."""
    from shopping_companion.benchmark.taxonomy import classify

    try:
        res = EpisodeResult.model_validate_json(raw)
    except ValidationError as e:
        return None, validation_problem("EpisodeResult", e)
    except ValueError as e:
        return None, short_error(e)
    try:
        c = classify(res, task_of.get(res.task_id))
    except Exception:  # noqa: BLE001 - malformed data must never break a page
        return None, None
    return (c.to_dict() if c is not None else None), None


class FailureClasses:
    """The taxonomy classes of one run's scored failures, by line number.

    ``run``: the run index whose rows are classified; ``lock``: its lock (every method here
    expects it held, except the background thread, which takes it to pick and read a line and to
    store its class, not while classifying). ``taxonomy_file``: the run's ``taxonomy.jsonl``,
    read by :func:`~shopping_companion.viewer.files.read_side` rules inside ``root`` (None: the
    run kind has none). ``background``: classify pending failures in a thread named
    ``thread_name``. ``detail``: line -> classification dict (None: not a failure class);
    ``pending``: failures not classified yet.
    """

    def __init__(
        self,
        run: ClassifiedRun,
        *,
        lock: threading.RLock,
        taxonomy_file: Path | None,
        root: Path,
        background: bool,
        thread_name: str,
    ) -> None:
        self._run = run
        self._lock = lock
        self._file = taxonomy_file
        self._root = root
        self.background = background
        self._thread_name = thread_name
        self._bg: threading.Thread | None = None
        self._file_mtime: int | None = None
        self._file_items: dict[tuple[str, int, str], dict[str, Any]] = {}
        self._gen = 0
        self.forget()

    def forget(self) -> None:
        """Drop every class and pending line (the run is indexed again); a line the background
        thread is classifying meanwhile is dropped when it is done."""
        self._gen += 1
        self.detail: dict[int, dict[str, Any] | None] = {}
        self.pending: set[int] = set()
        self._bg_line: int | None = None  # the line the background classifier is working on

    def reload_file(self, rows: Iterable[EpisodeRow]) -> bool:
        """Read ``taxonomy.jsonl`` again when its modification time changed and give its classes to
        the failures among ``rows``; True when it was read (or went away)."""
        if self._file is None:
            return False
        try:
            mtime = self._file.stat().st_mtime_ns
        except OSError:
            mtime = None
        if mtime == self._file_mtime:
            return False
        self._file_mtime = mtime
        items: dict[tuple[str, int, str], dict[str, Any]] = {}
        data = read_side(self._file, self._root) if mtime is not None else None
        for raw in (data or b"").splitlines():
            try:
                d = json.loads(raw)
                items[(str(d["task_id"]), int(d["trial"]), str(d["strategy"]))] = d
            except (ValueError, KeyError, TypeError, OverflowError, RecursionError):
                continue
        self._file_items = items
        for row in rows:
            if row.scored and row.success is False and row.status == "ok":
                self.note(row)
        return True

    def note(self, row: EpisodeRow) -> None:
        """A scored failure was indexed: its class from ``taxonomy.jsonl``, else it waits to be
        classified."""
        item = self._file_items.get((row.task_id or "", row.trial or 0, row.strategy or ""))
        if item is not None:
            row.taxonomy = str(item.get("primary"))
            self.detail[row.line] = item
            self.pending.discard(row.line)
        elif row.line not in self.detail:
            self.pending.add(row.line)

    def discard(self, line: int) -> None:
        """``line`` needs no class any more (a later attempt replaced it)."""
        self.pending.discard(line)

    def _store(self, line: int, detail: dict[str, Any] | None, problem: str | None) -> None:
        try:
            row = self._run.row(line)
        except KeyError:
            return
        if problem is not None:
            self._run.mark_foreign(line, problem)
        self.detail[line] = detail
        row.taxonomy = detail["primary"] if detail else None

    def resolve(self, lines: Iterable[int], budget_s: float | None = None) -> None:
        """Classify the pending failures among ``lines`` now, until ``budget_s`` seconds have
        passed (None: all); the rest stay pending for the background worker."""
        from shopping_companion.benchmark.taxonomy import classify  # noqa: F401 - imported before the clock starts

        tasks = self._run.tasks  # loading the tasks is not part of the budget either
        t0 = time.monotonic()
        # a line the background worker has taken but not stored yet is classified here too, so a
        # page never shows one of its own failures unclassified (the worker's result is the same)
        todo = [x for x in lines if x in self.pending or (x == self._bg_line and x not in self.detail)]
        for line in todo:
            if budget_s is not None and time.monotonic() - t0 > budget_s:
                break
            self.pending.discard(line)
            try:
                raw = self._run.raw(line)
            except (OSError, KeyError, RunUnreadableError):
                continue
            self._store(line, *classify_line(raw, tasks))

    def kick(self) -> None:
        """Start the background classifier when failures wait and it is not running."""
        if not self.background or not self.pending:
            return
        if self._bg is not None and self._bg.is_alive():
            return
        self._bg = threading.Thread(target=self._bg_loop, name=self._thread_name, daemon=True)
        self._bg.start()

    def _bg_loop(self) -> None:
        """Classify pending failures one at a time; the lock is held only to pick and read a line
        and to store its class, so pages are served meanwhile. A re-index (:meth:`forget`) drops
        the result of a line read before it."""
        while True:
            with self._lock:
                if not self.pending:
                    return
                line = min(self.pending)
                self.pending.discard(line)
                self._bg_line = line
                gen, tasks = self._gen, self._run.tasks
                try:
                    raw = self._run.raw(line)
                except (OSError, KeyError, RunUnreadableError):
                    continue
            detail, problem = classify_line(raw, tasks)
            with self._lock:
                self._bg_line = None
                if gen == self._gen and line not in self.detail:
                    self._store(line, detail, problem)
            time.sleep(0.001)  # let request threads take the GIL
