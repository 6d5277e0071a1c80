"""What every corpus loader of :mod:`~shopping_companion.memory.loaders` shares: the
:class:`LoadReport` of what it read and left out, the :class:`Recorder` that fills it (and raises
with ``on_error="raise"``), the :class:`DataWarning` it emits, :class:`UserHistory` and the JSON
file reader.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from shopping_companion.catalog.loader import open_text
from shopping_companion.types import SessionRef

__all__ = ["DataWarning", "LoadReport", "OnError", "Recorder", "UserHistory", "read_json_file"]

OnError = Literal["raise", "skip"]


class DataWarning(UserWarning):
    """Records, sessions or turns were skipped while loading a corpus; the message says how
    many and why (the loader's :class:`LoadReport` has the counts and examples)."""


_MAX_EXAMPLES = 20


@dataclass
class LoadReport:
    """What a loader read, returned and left out.

    ``records``: top-level records read (dialogues, conversations, instances);
    ``sessions``: sessions returned; ``dropped``: records or sessions not returned, by reason;
    ``turns_dropped``: turns left out of returned sessions, by reason; ``notes``: oddities that
    were kept as they are (or repaired), by kind; ``examples``: the first
    20 problems as ``"<where>: <reason>[: detail]"``; ``extra``: loader-specific counts.
    """

    source: str
    path: str
    records: int = 0
    sessions: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    turns_dropped: dict[str, int] = field(default_factory=dict)
    notes: dict[str, int] = field(default_factory=dict)
    examples: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def n_problems(self) -> int:
        """Dropped records/sessions plus dropped turns."""
        return sum(self.dropped.values()) + sum(self.turns_dropped.values())

    def summary(self) -> str:
        """One line: counts and reasons."""
        parts = [f"{self.source} ({self.path}): {self.records} records read, {self.sessions} sessions kept"]
        if self.dropped:
            parts.append(f"dropped {dict(sorted(self.dropped.items()))}")
        if self.turns_dropped:
            parts.append(f"turns dropped {dict(sorted(self.turns_dropped.items()))}")
        if self.notes:
            parts.append(f"notes {dict(sorted(self.notes.items()))}")
        if self.examples:
            parts.append(f"first: {self.examples[0]}")
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Recorder:
    """Counts problems into a report; raises on malformed input when ``on_error="raise"``."""

    def __init__(self, report: LoadReport, on_error: OnError) -> None:
        if on_error not in ("raise", "skip"):
            raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
        self.report = report
        self.on_error = on_error

    def _add(self, table: dict[str, int], reason: str, where: str, detail: str, fatal: bool) -> None:
        table[reason] = table.get(reason, 0) + 1
        msg = f"{where}: {reason}" + (f": {detail}" if detail else "")
        if len(self.report.examples) < _MAX_EXAMPLES:
            self.report.examples.append(msg)
        if fatal and self.on_error == "raise":
            raise ValueError(f"bad {self.report.source} input at {msg}")

    def drop(self, reason: str, where: str, detail: str = "", *, fatal: bool = True) -> None:
        """A record or session is not returned."""
        self._add(self.report.dropped, reason, where, detail, fatal)

    def drop_turn(self, reason: str, where: str, detail: str = "", *, fatal: bool = True) -> None:
        """A turn is left out of its session."""
        self._add(self.report.turns_dropped, reason, where, detail, fatal)

    def turn_fields(
        self, t: Any, where: str, role_key: str, text_key: str, roles: Mapping[str, str]
    ) -> tuple[str, str] | None:
        """``(role, text)`` of one raw turn: ``roles[t[role_key]]`` and ``t[text_key]`` as is. A
        turn whose speaker is not in ``roles`` is dropped as ``unknown_<role_key>`` (e.g.
        ``unknown_speaker``), one whose text is not a string as ``malformed_turn``; both return None."""
        speaker = t.get(role_key) if isinstance(t, dict) else None
        text = t.get(text_key) if isinstance(t, dict) else None
        if speaker not in roles:
            self.drop_turn(f"unknown_{role_key}", where, f"{role_key} {speaker!r} is not one of {sorted(roles)}")
            return None
        if not isinstance(text, str):
            self.drop_turn("malformed_turn", where, f"{text_key} is not a string")
            return None
        return roles[speaker], text

    def note(self, kind: str, where: str, detail: str = "") -> None:
        """Kept as is (or repaired), but worth knowing."""
        self.report.notes[kind] = self.report.notes.get(kind, 0) + 1
        if len(self.report.examples) < _MAX_EXAMPLES:
            self.report.examples.append(f"{where}: {kind}" + (f": {detail}" if detail else ""))

    def finish(self) -> None:
        if self.report.n_problems:
            warnings.warn(DataWarning(self.report.summary()), stacklevel=3)


@dataclass(frozen=True)
class UserHistory:
    """One user's memory as a corpus defines it: ``history`` lists the user's sessions in the
    corpus's order (chronological for LoCoMo and LongMemEval) with ISO dates; ids are pool ids,
    so ``MemoryStore.from_pool(pool, user.history, embedder)`` builds the user's store.
    ``evidence_session_ids``: sessions the corpus marks as holding the answer (LongMemEval's
    ``answer_session_ids``), a subset of ``history``; empty when the corpus has none.
    ``meta``: source-specific fields (e.g. LoCoMo's speaker names)."""

    user_id: str
    source: str
    history: tuple[SessionRef, ...]
    evidence_session_ids: tuple[str, ...] = ()
    meta: Mapping[str, Any] = field(default_factory=dict)

    @property
    def session_ids(self) -> list[str]:
        return [r.session_id for r in self.history]


def read_json_file(p: Path) -> Any:
    with open_text(p, errors="strict") as fh:
        return json.load(fh)
