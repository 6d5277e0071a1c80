"""The input files of ``shopcomp import-tasks``: the task file (one
:class:`~shopping_companion.benchmark.task_schema.TaskInput` a line; a line's problems are
:class:`Issue` records) and the haystack sessions file (``--sessions``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError
from pydantic_core import ValidationError as CoreValidationError

from shopping_companion.benchmark.task_schema import TaskInput
from shopping_companion.config import validation_message
from shopping_companion.errors import DataError
from shopping_companion.types import Session

__all__ = ["Issue", "load_session_file", "read_task_file"]


@dataclass
class Issue:
    """One problem of one input line: ``check`` names the test (module docstring), ``field`` the
    path in the line (``preferences[1].value``; ``""`` for the whole line), ``severity`` is
    ``error`` (the task is not imported) or ``warning`` (recorded, imported)."""

    line: int
    field: str
    check: str
    message: str
    severity: Literal["error", "warning"] = "error"
    task_id: str | None = None

    def text(self) -> str:
        where = f"line {self.line}" + (f", {self.field}" if self.field else "")
        return f"{where}: {self.message} [{self.check}]"


def _loc(loc: Sequence[Any]) -> str:
    out = ""
    for x in loc:
        out += f"[{x}]" if isinstance(x, int) else (f".{x}" if out else str(x))
    return out


def _schema_issues(line: int, err: ValidationError) -> list[Issue]:
    """One :class:`Issue` per pydantic error, worded by :func:`validation_message`."""
    out = []
    for e in err.errors():
        one = {k: e[k] for k in ("type", "loc", "input", "ctx") if k in e}
        try:
            single = CoreValidationError.from_exception_data("TaskInput", [one])  # type: ignore[list-item]
            msg = validation_message(TaskInput, single)
        except Exception:  # noqa: BLE001 - an error type pydantic cannot rebuild: its own wording
            msg = f"{'.'.join(map(str, e.get('loc', ())))}: {e.get('msg', 'invalid')}"
        path = _loc(e.get("loc", ()))
        plain = ".".join(str(x) for x in e.get("loc", ()))
        if plain and msg.startswith(plain + ": "):
            msg = msg[len(plain) + 2 :]
        out.append(Issue(line, path, "schema", msg))
    return out


def read_task_file(path: str | Path) -> list[tuple[int, TaskInput | None, list[Issue]]]:
    """``(line number, task or None, issues)`` for every non-blank line of ``path`` (1-based line
    numbers). Raises :class:`DataError` when the file cannot be read or holds no task line."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DataError(f"task file {p} not found") from None
    except UnicodeDecodeError as e:
        raise DataError(f"task file {p}: not UTF-8 text ({e})") from None
    out: list[tuple[int, TaskInput | None, list[Issue]]] = []
    for i, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except ValueError as e:
            out.append((i, None, [Issue(i, "", "json", f"not valid JSON ({e})")]))
            continue
        if not isinstance(obj, dict):
            out.append((i, None, [Issue(i, "", "json", f"a task line is a JSON object, got {type(obj).__name__}")]))
            continue
        try:
            out.append((i, TaskInput.model_validate(obj), []))
        except ValidationError as e:
            out.append((i, None, _schema_issues(i, e)))
            if isinstance(obj.get("task_id"), str):
                raw_id = obj["task_id"]
                for issue in out[-1][2]:
                    issue.task_id = raw_id
    if not out:
        raise DataError(f"task file {p} holds no task line (one JSON object a line: see docs/tasks.md)")
    return out


def load_session_file(path: str | Path) -> list[Session]:
    """Haystack sessions from a JSON-lines file: one :class:`~shopping_companion.types.Session`
    a line (``{"session_id", "turns": [{"role", "content"}], "date"?, "source"?}``; dates are
    ignored, the importer dates the history). Raises :class:`DataError` naming the line and field
    of a bad record, repeated ids, or an empty file."""
    p = Path(path)
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise DataError(f"--sessions file {p} not found") from None
    out: list[Session] = []
    seen: dict[str, int] = {}
    for i, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            s = Session.model_validate_json(raw)
        except ValidationError as e:
            raise DataError(validation_message(Session, e, source=f"{p} line {i}")) from None
        if s.session_id in seen:
            raise DataError(f"{p} line {i}: session_id {s.session_id!r} repeats line {seen[s.session_id]}")
        seen[s.session_id] = i
        out.append(s.model_copy(update={"source": s.source or f"import-sessions:{p.name}"}))
    if not out:
        raise DataError(f"--sessions file {p} holds no session (one Session JSON object a line)")
    return out
