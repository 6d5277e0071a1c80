"""The long-term-memory corpora LoCoMo and LongMemEval (:mod:`~shopping_companion.memory.loaders`
loads them by name): their sessions, dated, and their users' histories (:class:`UserHistory`).

LoCoMo: ``conversations/locomo10.zip``; ``locomo:<sample_id>:<N>``; each session's own date.
LongMemEval: ``longmemeval_s.json`` / ``longmemeval_oracle.json`` (pass the path);
``longmemeval:<haystack_session_id>``; one session is placed at different dates in different
instances, so its pool sessions are undated and each instance's ``history`` carries the dates.
"""

from __future__ import annotations

import calendar
import hashlib
import json
import os
import re
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shopping_companion.memory.load_report import LoadReport, OnError, Recorder, UserHistory, read_json_file
from shopping_companion.memory.pool import SessionPool
from shopping_companion.paths import resolve_data_dir
from shopping_companion.types import Session, SessionRef, Turn

__all__ = [
    "LOCOMO_RELATIVE_PATH",
    "LocomoData",
    "LongMemEvalData",
    "LongMemEvalInstance",
    "load_locomo",
    "load_longmemeval",
    "parse_locomo_datetime",
    "parse_longmemeval_datetime",
]

LOCOMO_RELATIVE_PATH = Path("conversations") / "locomo10.zip"

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
                obj = read_json_file(f)
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
        yield from from_json(str(p), p.stem.split(".")[0], read_json_file(p))


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
    rec_ = Recorder(rep, on_error)
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
    rec_ = Recorder(rep, on_error)
    data = read_json_file(p)
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
