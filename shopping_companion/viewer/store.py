"""The viewer's data layer: finds runs, indexes their JSONL files and builds annotated episodes.

This is the only module of :mod:`shopping_companion.viewer` that reads run files; the web app
(``viewer/app.py``) only calls :class:`RunCatalog`, :class:`RunIndex` and :func:`compare`.
Everything here is read-only: no file under a run is ever written, locked or moved.

Kinds of runs (:data:`RunKind`), found by file name (names holding ``.stale-`` are ignored):

- ``eval``: a directory holding ``results.jsonl`` (one ``EpisodeResult`` per line);
- ``sft_rollouts``: ``rollouts.jsonl`` of an SFT collection (``EpisodeResult`` lines too);
- ``sft_kept``: ``kept.jsonl`` of an SFT collection (one :class:`~shopping_companion.sft.collect.KeptStage`
  per line: one stage trajectory and its verdict, no reward);
- ``grpo_val``: a verl validation dump ``<step>.jsonl`` (lines with ``input``, ``output``,
  ``gts``, ``score`` and the reward's extra keys). Each step file is a run of its own (run id
  ``<dir>/<step>.jsonl``), so two steps can be compared like two evaluations. The task id comes
  from ``gts`` (:func:`grpo_task_id`); the multi-turn ``output`` is split into turns, tool calls
  and results (:func:`grpo_trajectory`).

Run ids: the relative POSIX path of the run directory under the target that was searched (an
explicitly given run directory: its own name), each segment reduced to ``[A-Za-z0-9._-]``; a
second run file in the same directory (``kept.jsonl`` next to ``rollouts.jsonl``, every GRPO step
file) gets ``<dir id>/<file name>``; duplicates get ``-2``, ``-3``. Ids never hold an absolute path
or ``..``.

Indexing (:class:`RunIndex`): every line is parsed once with ``json.loads`` into a light
:class:`EpisodeRow` plus its byte offset; later reads are incremental (only bytes appended after
the last complete line are read; an unterminated last line is ``torn`` until it is completed; a
file that shrank, was replaced (another inode) or was rewritten in place is indexed again; a run
file that is not a regular file or resolves outside the directory its run was found in is never
read: :attr:`RunSummary.problem` says why). Pydantic parses only the one
line an episode page opens (:meth:`RunIndex.episode`), seeking to its offset.

Line status: ``ok`` (a record of the run's kind), ``error`` (an ``EpisodeResult`` with ``error``
set: a backend, judge or episode error, never scored), ``unreadable`` (not JSON), ``foreign``
(JSON but not a record of the kind: the structural check at indexing, or the full pydantic
validation when the line is opened, names the problem), ``torn`` (the last line, no newline yet),
``superseded`` (an attempt that a later line of the same ``benchmark.report.result_key`` replaced,
chosen as :func:`~shopping_companion.benchmark.report.final_results` does; hidden unless asked).

Metrics of a run (:class:`RunSummary`) are over the final, scored episodes
(:func:`shopping_companion.benchmark.metrics.scored`), computed with
:func:`~shopping_companion.benchmark.metrics.acc_succ` and
:func:`~shopping_companion.benchmark.metrics.pass_k_table`. Taxonomy classes come from the run's
``taxonomy.jsonl`` (written when a run finishes) and otherwise from
:func:`~shopping_companion.benchmark.taxonomy.classify` with the task: a page classifies its own
rows (within :data:`PAGE_CLASSIFY_BUDGET_S`), a background thread the other failures (tens of ms
each on long trajectories); :attr:`Page.unclassified` says how many are still waiting.

Annotations of an episode (:class:`EpisodeView`): returned session ids are ``needle`` /
``non_needle`` (the task's ``needle_session_ids``); returned product ids are ``reference`` (a
slot's ``reference_product_id``), ``alternative`` (the rule matcher
:func:`~shopping_companion.rewards.tool_wise.rule_product_matcher` accepts the record the agent was
shown) or ``other``; without the task (benchmark not found) every id is ``unknown``. Each call's
r(u) is ``RewardBreakdown.per_tool_call`` aligned with
:func:`~shopping_companion.rewards.tool_wise.trajectory_tool_results`.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import stat
import statistics
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Literal, Sequence

from pydantic import ValidationError

from shopping_companion.benchmark import metrics as M
from shopping_companion.benchmark.report import result_key
from shopping_companion.envs.tools import MEMORY_TOOLS, PRODUCT_TOOLS
from shopping_companion.errors import ConfigError
from shopping_companion.types import (
    EpisodeResult,
    Message,
    Preference,
    Product,
    RewardBreakdown,
    Step,
    Task,
    ToolResult,
    Trajectory,
    Verdict,
)

__all__ = [
    "RunKind",
    "Mark",
    "RowStatus",
    "SORT_FIELDS",
    "MAX_LIMIT",
    "RAW_CAP",
    "LIVE_WINDOW_S",
    "SIDE_FILE_CAP",
    "TASKS_FILE_CAP",
    "RunCatalog",
    "RunSummary",
    "RunUnreadableError",
    "RunIndex",
    "Page",
    "EpisodeRow",
    "EpisodeView",
    "StageView",
    "TurnView",
    "CallView",
    "ProductCard",
    "compare",
    "Comparison",
    "TaskPair",
    "MetricDelta",
]

RunKind = Literal["eval", "sft_rollouts", "sft_kept", "grpo_val"]
#: ``unknown``: the task (benchmark) is not available, so the id cannot be classified.
Mark = Literal["needle", "non_needle", "reference", "alternative", "other", "unknown"]
RowStatus = Literal["ok", "error", "unreadable", "foreign", "torn", "superseded"]

#: Fields :meth:`RunIndex.query` can sort by.
SORT_FIELDS: tuple[str, ...] = (
    "line",
    "status",
    "task_id",
    "task_type",
    "source",
    "category",
    "strategy",
    "trial",
    "success",
    "acc",
    "r1",
    "r2",
    "stage1_total",
    "stage2_total",
    "r_tool",
    "r_fmt",
    "turns",
    "tool_calls",
    "termination",
    "taxonomy",
)
#: Largest page size of :meth:`RunIndex.query`.
MAX_LIMIT = 500
#: Characters of a raw line kept in :attr:`EpisodeView.raw`.
RAW_CAP = 200_000
#: A run whose file changed within this many seconds is ``live`` (unless its summary.json is newer).
LIVE_WINDOW_S = 120.0
#: Seconds :meth:`RunCatalog.runs` answers from its last discovery while no target directory and
#: no run file changed (monotonic clock).
RUNS_CACHE_S = 1.0
#: Seconds a page request may spend classifying its own rows' failures (the rest: in the background).
PAGE_CLASSIFY_BUDGET_S = 0.5
#: Largest depth below a runs directory that discovery searches.
MAX_DEPTH = 4
#: Largest size in bytes of a side file of a run that is read whole (``taxonomy.jsonl``,
#: ``config.yaml``, ``summary.json``); a larger one is ignored.
SIDE_FILE_CAP = 64 << 20
#: Largest size in bytes of a benchmark's ``tasks.jsonl``; a larger one counts as no benchmark.
TASKS_FILE_CAP = 512 << 20
#: Bytes of a file's first line read to tell its kind (a longer first line is not a JSON object).
_SNIFF_CAP = 32 << 20

_PRIMARY: dict[str, RunKind] = {"results.jsonl": "eval", "rollouts.jsonl": "sft_rollouts", "kept.jsonl": "sft_kept"}
_STEP_FILE = re.compile(r"^\d+\.jsonl$")
_SEGMENT_BAD = re.compile(r"[^A-Za-z0-9._-]")
_CHUNK = 16 << 20
_ANCHOR_BYTES = 64 << 10
_EPISODE_FIELDS = frozenset(EpisodeResult.model_fields)
_EPISODE_REQUIRED = frozenset(k for k, f in EpisodeResult.model_fields.items() if f.is_required())
_KEPT_REQUIRED = frozenset(
    ("task_id", "trial", "mode", "hint", "stage", "policy", "reason", "acc", "succ", "trajectory", "verdict")
)
#: keys of a validation-dump line that are not reward components (``reward``: verl's copy of ``score``)
_GRPO_TEXT = frozenset(
    ("input", "output", "score", "reward", "step", "gts", "data_source", "task_id", "task_type", "request_id")
)


# --------------------------------------------------------------------------- records


@dataclass
class RunSummary:
    """One run on the runs page. ``acc`` / ``succ`` in [0, 1] (None: nothing scored);
    ``pass_hat_k``: k -> pass^k of Succ (trials grouped by strategy and task); ``components``: mean
    reward component over scored stages, keyed ``s<stage>.<name>`` (``s1.R_z``, ``s2.total``);
    ``updated``: ISO-8601 UTC modification time of the run file; ``live``: a writer holds a lock on
    it, or it changed in the last :data:`LIVE_WINDOW_S` seconds and no ``summary.json`` beside it is
    as new or newer (a finished run writes one). ``n_episodes``: final episodes
    (one per result key, errored included); ``n_unreadable``: unreadable and foreign lines.
    ``problem``: None when the run file can be read; else one line saying why it cannot (not a
    regular file, resolves outside the directory the run was found in, open or read failed; the
    run then shows no rows and :class:`RunUnreadableError` is raised when a line is opened)."""

    run_id: str
    kind: RunKind
    name: str
    path: str
    policy: str | None
    benchmark: str | None
    strategies: list[str]
    trials: int
    n_lines: int
    n_episodes: int
    n_scored: int
    n_errors: int
    n_unreadable: int
    acc: float | None
    succ: float | None
    pass_hat_k: dict[int, float]
    components: dict[str, float]
    updated: str
    live: bool
    n_foreign: int = 0
    n_superseded: int = 0
    torn: bool = False
    benchmark_found: bool = False
    problem: str | None = None
    #: the benchmark directory the tasks were actually read from (``benchmark`` is the path as the
    #: run's config wrote it; a relative one may resolve elsewhere); None when not found
    benchmark_used: str | None = None
    #: the training step of the policy where it is known: the ``checkpoint-<N>`` / ``global_step_<N>``
    #: of the policy name or of the run's ``config.yaml`` ``backend.model_path`` / ``adapter``, the
    #: step of a GRPO validation dump (its ``<step>.jsonl``); None otherwise
    step: int | None = None
    #: ``<run>/checkpoint-<N>`` (or ``<experiment>/global_step_<N>``) of the run's local checkpoint
    #: (``config.yaml`` ``backend.model_path``, ``+lora:`` its adapter) when the policy name does
    #: not already say it (runs evaluated before policy names carried the run); else None
    checkpoint: str | None = None


@dataclass
class EpisodeRow:
    """One line of a run file, as the episodes table shows it.

    ``line``: 1-based line number (the episode's id in URLs). ``success``: Succ (stage 2; for a
    GRPO line the ``success`` key). ``acc``: m1/F in [0, 1] (None for oracle episodes, where Acc
    does not apply). ``r1`` / ``r2``: the paper's outcome rewards R1 / R2 (R_z of stage 1, Eq. 6 /
    of stage 2, Eq. 7; the components ``R1`` / ``R2``, else the stage's ``R_z``; in a one-stage
    episode R1 is the ``R1`` component of its single stage); ``stage1_total`` / ``stage2_total``:
    the stage's reward total under the run's rubric (shown as "S1 total" / "S2 total", see
    :mod:`~shopping_companion.viewer.labels`); ``r_tool`` / ``r_fmt``: the mean of that component
    over the stages. ``turns``: assistant turns over all stages;
    ``tool_calls``: tool results over all stages. ``termination``: the first stage that did not
    end ``answered``, else the last stage's. ``taxonomy``: the primary error class of a scored
    failure (None: a success, not scored, or not classified yet). ``scored``: counts toward the
    metrics (:func:`~shopping_companion.benchmark.metrics.scored`). ``superseded_by``: the line
    that replaced this attempt. ``components``: ``s<stage>.<name>`` -> value of every reward
    component (scored lines only).
    """

    line: int
    status: RowStatus
    problem: str | None
    task_id: str | None = None
    task_type: str | None = None
    source: str | None = None
    category: str | None = None
    strategy: str | None = None
    trial: int | None = None
    success: bool | None = None
    acc: float | None = None
    r1: float | None = None
    r2: float | None = None
    stage1_total: float | None = None
    stage2_total: float | None = None
    r_tool: float | None = None
    r_fmt: float | None = None
    turns: int | None = None
    tool_calls: int | None = None
    termination: str | None = None
    taxonomy: str | None = None
    instruction: str | None = None
    mode: str | None = None
    hint: str | None = None
    stage: int | None = None
    policy: str | None = None
    scored: bool = False
    superseded_by: int | None = None
    components: dict[str, float] = field(default_factory=dict, repr=False)


@dataclass
class Page:
    """One page of :meth:`RunIndex.query`: ``rows`` from ``offset`` (``total`` rows matched).
    ``unclassified``: scored failures of the run whose taxonomy class is not known yet (being
    classified in the background), so a taxonomy filter or sort may still miss them."""

    rows: list[EpisodeRow]
    total: int
    offset: int
    limit: int
    unclassified: int = 0


@dataclass
class CallView:
    """One tool call: its ``arguments``, the observation ``content``, ``error`` (rejected call),
    ``returned`` ids with their :data:`Mark`, and ``reward`` r(u) in [0, 1] (None when the stage's
    ``per_tool_call`` does not line up with its calls or there is no reward)."""

    name: str
    arguments: dict
    content: str
    error: str | None
    returned: list[tuple[str, Mark]]
    reward: float | None
    call_id: str = ""


@dataclass
class TurnView:
    """One assistant turn: ``think`` (text of the thinking block, None if none), ``text`` (the rest
    of the message), the separate ``reasoning`` channel, the parser's ``format_errors`` and the
    turn's calls. ``index`` counts from 0 within the stage."""

    index: int
    think: str | None
    text: str
    reasoning: str | None
    finish_reason: str | None
    format_errors: list[str]
    calls: list[CallView]
    prompt_tokens: int | None
    completion_tokens: int | None
    latency_s: float | None = None


@dataclass
class ProductCard:
    """A recommended product: the record the agent saw (title, ``price`` as ``"<value> <currency>"``,
    shop, ``attributes`` with extraction notes like `` (from title)`` removed, plus brand and
    category) and the gold preference labels (``attribute=value``, `` (avoid)`` for avoided
    values) the rule matcher finds it meets (``matched``) or misses (``missing``) in that record;
    both empty when the agent never saw a record of it or there is no task. ``seen``: a record was
    shown; ``viewed``: a full ``product_view`` record (else only a search hit, which has no
    attributes, so its wanted values count as missing)."""

    product_id: str
    mark: Mark
    title: str | None
    price: str | None
    shop: str | None
    attributes: dict[str, str]
    matched: list[str]
    missing: list[str]
    seen: bool = False
    viewed: bool = False


@dataclass
class StageView:
    """One stage: how it ended, the judge's verdict, the reward breakdown (None for SFT kept lines,
    which have none), the turns, cards of the recommended products, the identified preferences
    (stage 1) and the text of the answer block."""

    stage: int
    termination: str
    verdict: Verdict | None
    reward: RewardBreakdown | None
    turns: list[TurnView]
    recommended: list[ProductCard]
    identified: list[Preference] | None
    final_answer: str | None
    messages: list[Message] = field(default_factory=list, repr=False)


@dataclass
class EpisodeView:
    """Everything the episode page shows, annotated. ``raw``: the line's text (capped at
    :data:`RAW_CAP` characters) for unreadable, foreign and torn lines; ``result``: the parsed
    ``EpisodeResult`` (None for other kinds and bad lines); ``task``: None when the benchmark
    cannot be found; ``taxonomy``: ``{"primary", "evidence", "secondary", "labels"}`` of a scored
    failure, when known; ``record``: the parsed line of an ``sft_kept`` or ``grpo_val`` run."""

    row: EpisodeRow
    raw: str | None
    result: EpisodeResult | None
    task: Task | None
    gold: list[Preference]
    stages: list[StageView]
    simulator: dict | None
    taxonomy: dict | None
    record: dict | None = None
    #: the stored length of a bad line in bytes (``raw`` holds at most :data:`RAW_CAP` characters of it)
    raw_bytes: int | None = None


# --------------------------------------------------------------------------- reading files safely


class RunUnreadableError(ValueError):
    """A run file, or a line of it, cannot be read now: it is not a regular file (a directory, a
    FIFO, a device), it resolves outside the directory its run was found in (a symlink put in its
    place), or opening or reading it failed. The message is one line naming the path and why.
    :meth:`RunIndex.raw` and :meth:`RunIndex.episode` raise it; :attr:`RunSummary.problem` says
    the same on the runs page."""


def _file_type(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a plain file"


def _real_path(fd: int, path: Path) -> Path:
    """Where the open descriptor ``fd`` really points (``/proc/self/fd``; else ``path`` resolved)."""
    try:
        return Path(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:
        return Path(os.path.realpath(path))


def _open_regular(path: Path, root: Path | None, cap: int | None = None) -> Any:
    """``path`` opened for binary reading, only if it is a regular file of at most ``cap`` bytes
    (None: any size) whose real path lies inside the resolved directory ``root`` (None: anywhere).
    Never blocks on a FIFO and never opens a device. Raises :class:`RunUnreadableError` naming the
    path and the reason (a missing file too: ``FileNotFoundError`` is its ``__cause__``)."""
    shown = _display(path)
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            raise RunUnreadableError(f"{shown}: {_file_type(st.st_mode)}, not a regular file; not read")
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise RunUnreadableError(f"{shown}: cannot be read ({e.strerror or type(e).__name__})") from e
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise RunUnreadableError(f"{shown}: {_file_type(st.st_mode)}, not a regular file; not read")
        if cap is not None and st.st_size > cap:
            raise RunUnreadableError(f"{shown}: {st.st_size} bytes, more than the {cap} allowed; not read")
        if root is not None:
            real = _real_path(fd, path)
            if not real.is_relative_to(root):
                raise RunUnreadableError(f"{shown}: resolves to {real}, outside {root}; not read")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _read_side(path: Path, root: Path | None, cap: int = SIDE_FILE_CAP) -> bytes | None:
    """The bytes of a side file read whole (:func:`_open_regular` rules), or None when it is
    missing or refused."""
    try:
        with _open_regular(path, root, cap) as f:
            return f.read(cap + 1)[:cap]
    except (RunUnreadableError, OSError):
        return None


def _first_line(p: Path, root: Path | None) -> Any:
    """The first non-blank line of ``p`` parsed as JSON (at most :data:`_SNIFF_CAP` bytes read);
    None when there is none, it is not JSON, or the file cannot be read."""
    try:
        with _open_regular(p, root) as f:
            budget = _SNIFF_CAP
            while budget > 0:
                raw = f.readline(budget)
                if not raw:
                    return None
                budget -= len(raw)
                if raw.strip():
                    return json.loads(raw) if raw.endswith(b"\n") or budget > 0 else None
    except (RunUnreadableError, OSError, ValueError, RecursionError):
        return None
    return None


# --------------------------------------------------------------------------- small helpers


def _article(word: str) -> str:
    return "an" if word[:1] in "AEIOUaeiou" else "a"


def _short(e: BaseException, n: int = 200) -> str:
    return f"{type(e).__name__}: {' '.join(str(e).split())}"[:n]


def _validation_problem(model: str, e: ValidationError) -> str:
    """One short line naming the first field pydantic refused (and how many more)."""
    errs = e.errors()
    if not errs:
        return f"not {_article(model)} {model}"
    first = errs[0]
    loc = ".".join(str(x) for x in first.get("loc", ())) or "(record)"
    more = f" (+{len(errs) - 1} more)" if len(errs) > 1 else ""
    return f"not {_article(model)} {model}: {loc}: {first.get('msg', '')}{more}"[:300]


def _num(v: Any) -> float | None:
    """``v`` as a finite float (a bool as 0.0 / 1.0); None for anything else: not a number, NaN,
    infinite, or an integer too large for a float."""
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)):
        try:
            x = float(v)
        except OverflowError:
            return None
        return x if math.isfinite(x) else None
    return None


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="seconds")


def _digest(b: bytes) -> bytes:
    return hashlib.blake2b(b, digest_size=16).digest()


def _cap(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")[:RAW_CAP]


def _segment(s: str) -> str:
    s = _SEGMENT_BAD.sub("_", s) or "_"
    return "_" if s in (".", "..") else s


def _display(p: Path) -> str:
    try:
        return Path(os.path.relpath(p)).as_posix() if p.is_relative_to(Path.cwd()) else str(p)
    except (OSError, ValueError):
        return str(p)


def _locked(st: os.stat_result) -> bool:
    """A lock is held on the file (``/proc/locks``; read without taking a lock, so a starting
    writer is never refused because of the viewer). False where ``/proc/locks`` is absent."""
    try:
        text = Path("/proc/locks").read_text()
    except OSError:
        return False
    want = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    return any(len(p) > 5 and p[5] == want for p in (ln.split() for ln in text.splitlines()))


def _first_user_text(stages: Any) -> str | None:
    try:
        for m in stages[0]["trajectory"]["messages"]:
            if m.get("role") == "user" and isinstance(m.get("content"), str):
                return m["content"][:2000]
    except (KeyError, IndexError, TypeError, AttributeError):
        return None
    return None


def _termination(terms: list[str]) -> str | None:
    return next((t for t in terms if t != "answered"), terms[-1] if terms else None)


def _mean(xs: Iterable[float]) -> float | None:
    xs = list(xs)
    return statistics.fmean(xs) if xs else None


def _task_category(task: Task) -> str:
    names = [(s.category_path[-1] if s.category_path else s.product_type) for s in task.slots]
    return " + ".join(dict.fromkeys(n for n in names if n)) or ""


def _pref_label(p: Preference) -> str:
    return f"{p.attribute}={p.value}" + (" (avoid)" if p.polarity == "avoid" else "")


# --------------------------------------------------------------------------- rows from parsed lines


def _structure_problem(d: Any, required: frozenset[str], allowed: frozenset[str] | None, what: str) -> str | None:
    a = _article(what)
    if not isinstance(d, dict):
        return f"not {a} {what}: a JSON {type(d).__name__}, not an object"
    missing = sorted(required - d.keys())
    if missing:
        return f"not {a} {what}: missing field(s) {', '.join(missing[:5])}"
    if allowed is not None:
        extra = sorted(d.keys() - allowed)
        if extra:
            return f"not {a} {what}: unknown field(s) {', '.join(extra[:5])}"
    return None


def _outcome(comps: dict[str, float], stage: int) -> float | None:
    """The paper's outcome reward R1 (``stage`` 1) or R2 (2) from a row's ``s<stage>.<name>``
    components: the component ``R1`` / ``R2`` the outcome reward logs (``R1`` of stage 1, or of the
    single stage 2 of a one-stage episode, where it scores the answer's preferences), else that
    stage's ``R_z``; None when the run's rubric logs neither."""
    name = f"R{stage}"
    for key in (f"s{stage}.{name}", *(f"s{n}.{name}" for n in (1, 2) if n != stage), f"s{stage}.R_z"):
        if key in comps:
            return comps[key]
    return None


def _episode_row(line: int, d: Any) -> EpisodeRow:
    """A row from a parsed ``EpisodeResult`` line (structural checks only; never raises: a number
    out of range, such as an infinite stage or an integer too large for a float, makes it foreign)."""
    problem = _structure_problem(d, _EPISODE_REQUIRED, _EPISODE_FIELDS, "EpisodeResult")
    if problem is None:
        try:
            return _episode_row_unchecked(line, d)
        except (TypeError, KeyError, AttributeError, ValueError, IndexError, OverflowError) as e:
            problem = f"not an EpisodeResult: {_short(e, 160)}"
    return EpisodeRow(line=line, status="foreign", problem=problem)


def _episode_row_unchecked(line: int, d: dict) -> EpisodeRow:
    stages = d["stages"]
    if not isinstance(stages, list) or not all(isinstance(s, dict) for s in stages):
        raise TypeError("stages must be a list of objects")
    for k in ("task_id", "mode", "policy", "task_type"):
        if not isinstance(d[k], str):
            raise TypeError(f"{k} must be a string")
    if not isinstance(d["succ"], bool) or _num(d["acc"]) is None:
        raise TypeError("acc must be a finite number and succ a boolean")
    error = d.get("error")
    mode, hint = d["mode"], d.get("hint") or "none"
    trial = d.get("trial", 0)
    if not isinstance(trial, int) or isinstance(trial, bool):
        raise TypeError("trial must be an integer")
    judge_failed = any(bool(s["verdict"].get("failed")) for s in stages)
    scored = error is None and not judge_failed
    turns = tools = 0
    terms: list[str] = []
    comps: dict[str, float] = {}
    totals: dict[int, float] = {}
    tool_vals: list[float] = []
    fmt_vals: list[float] = []
    for s in stages:
        traj = s["trajectory"]
        steps = traj.get("steps") or []
        turns += len(steps)
        tools += sum(len(st.get("tool_results") or []) for st in steps)
        terms.append(str(traj.get("termination", "running")))
        stage_no = int(traj.get("stage", 0))
        rew = s.get("reward") or {}
        tot = _num(rew.get("total"))
        if tot is not None:
            totals[stage_no] = tot
            comps[f"s{stage_no}.total"] = tot
        for k, v in (rew.get("components") or {}).items():
            x = _num(v)
            if x is None or k == "stage":
                continue
            comps[f"s{stage_no}.{k}"] = x
            if k == "R_tool":
                tool_vals.append(x)
            elif k == "R_fmt":
                fmt_vals.append(x)
    return EpisodeRow(
        line=line,
        status="ok" if error is None else "error",
        problem=None if error is None else str(error)[:500],
        task_id=d["task_id"],
        task_type=d["task_type"],
        strategy=M.strategy_name(mode, hint),
        trial=trial,
        success=bool(d["succ"]) if scored else None,
        acc=float(d["acc"]) if scored and mode != "oracle" else None,
        r1=_outcome(comps, 1) if scored else None,
        r2=_outcome(comps, 2) if scored else None,
        stage1_total=totals.get(1) if scored else None,
        stage2_total=totals.get(2) if scored else None,
        r_tool=_mean(tool_vals) if scored else None,
        r_fmt=_mean(fmt_vals) if scored else None,
        turns=turns,
        tool_calls=tools,
        termination=_termination(terms),
        instruction=_first_user_text(stages),
        mode=mode,
        hint=hint,
        policy=d["policy"],
        scored=scored,
        components=comps if scored else {},
    )


def _kept_row(line: int, d: Any) -> EpisodeRow:
    """A row from a parsed ``KeptStage`` line (one stage trajectory and its verdict); never raises
    (a number out of range makes it foreign)."""
    problem = _structure_problem(d, _KEPT_REQUIRED, _KEPT_REQUIRED, "KeptStage")
    if problem is None:
        try:
            traj = d["trajectory"]
            steps = traj.get("steps") or []
            mode, hint = str(d["mode"]), str(d["hint"] or "none")
            stage = int(d["stage"])
            acc = _num(d["acc"])
            if acc is None:
                raise TypeError("acc must be a finite number")
            return EpisodeRow(
                line=line,
                status="ok",
                problem=None,
                task_id=str(d["task_id"]),
                strategy=M.strategy_name(mode, hint),
                trial=int(d["trial"]),
                success=bool(d["succ"]),
                acc=acc if mode != "oracle" else None,
                turns=len(steps),
                tool_calls=sum(len(st.get("tool_results") or []) for st in steps),
                termination=str(traj.get("termination", "running")),
                instruction=_first_user_text([d]),
                mode=mode,
                hint=hint,
                stage=stage,
                policy=str(d["policy"]),
                scored=True,
            )
        except (TypeError, KeyError, AttributeError, ValueError, OverflowError) as e:
            problem = f"not a KeptStage: {_short(e, 160)}"
    return EpisodeRow(line=line, status="foreign", problem=problem)


def _grpo_row(line: int, d: Any) -> EpisodeRow:
    """A row from one line of a verl validation dump (``input``, ``output``, ``score``, extras);
    never raises (numbers that are not finite are left out)."""
    problem = _structure_problem(d, frozenset(("input", "output")), None, "GRPO validation record")
    if problem is None and not (isinstance(d["input"], str) and isinstance(d["output"], str)):
        problem = "not a GRPO validation record: input and output must be strings"
    if problem is None:
        try:
            return _grpo_row_unchecked(line, d)
        except (TypeError, ValueError, OverflowError) as e:
            problem = f"not a GRPO validation record: {_short(e, 160)}"
    return EpisodeRow(line=line, status="foreign", problem=problem)


def _dump_instruction(prompt: str) -> str:
    """The last user message of verl's decoded prompt (the text after its last ``user`` header
    line, without the closing ``assistant`` header), at most 2,000 characters; the prompt's tail
    when it has no such line. Replaced by the task's instruction when the benchmark is found."""
    i = prompt.rfind("\nuser\n")
    text = prompt[i + len("\nuser\n") :] if i >= 0 else prompt
    if text.endswith("\nassistant\n"):
        text = text[: -len("\nassistant\n")]
    return text.strip()[:2000] if i >= 0 else text[-2000:]


def _grpo_row_unchecked(line: int, d: dict) -> EpisodeRow:
    stage = _num(d.get("stage"))
    stage_no = int(stage) if stage in (1.0, 2.0) else None
    comps = {
        (f"s{stage_no}.{k}" if stage_no else k): x
        for k, v in d.items()
        if k not in _GRPO_TEXT and k != "stage" and (x := _num(v)) is not None
    }
    score = _num(d.get("score"))
    if score is not None:
        comps[f"s{stage_no}.total" if stage_no else "total"] = score
    succ = _num(d.get("success"))
    # assistant turns, as on the episode page (the dump's num_turns counts messages, observations too)
    turns = sum(role == "assistant" for role, _ in split_dump_output(d["output"]))
    return EpisodeRow(
        line=line,
        status="ok",
        problem=None,
        task_id=grpo_task_id(d),
        task_type=d["task_type"] if isinstance(d.get("task_type"), str) else None,
        success=None if succ is None else succ > 0.5,
        r1=_outcome(comps, 1),
        r2=_outcome(comps, 2),
        stage1_total=score if stage_no == 1 else None,
        stage2_total=score if stage_no == 2 else None,
        r_tool=_num(d.get("R_tool")),
        r_fmt=_num(d.get("R_fmt")),
        turns=turns,
        tool_calls=None if _num(d.get("n_tool_calls")) is None else int(_num(d.get("n_tool_calls")) or 0),
        stage=stage_no,
        instruction=_dump_instruction(d["input"]),
        scored=not (_num(d.get("judge_failed")) or _num(d.get("deadline_missed"))),
        components=comps,
    )


_ROW_BUILDERS = {"eval": _episode_row, "sft_rollouts": _episode_row, "sft_kept": _kept_row, "grpo_val": _grpo_row}


def _stand_in(row: EpisodeRow) -> EpisodeResult:
    """A field-light ``EpisodeResult`` (no stages) carrying what the metric functions read."""
    return EpisodeResult.model_construct(
        task_id=row.task_id or "",
        task_type=row.task_type or "single",
        mode=row.mode or "two_stage",
        hint=row.hint or "none",
        policy=row.policy or "",
        trial=row.trial or 0,
        stages=[],
        acc=row.acc if row.acc is not None else 1.0,
        succ=bool(row.success),
        wall_s=0.0,
        error=None,
    )


# --------------------------------------------------------------------------- benchmark lookup


def _run_config(run_dir: Path, root: Path | None = None) -> dict | None:
    """The run's ``config.yaml`` as a mapping, read only when it is a regular file of at most
    :data:`SIDE_FILE_CAP` bytes resolving inside ``root`` (None: anywhere); None when it is absent,
    cannot be read or parsed, or is not a mapping."""
    from shopping_companion.config import parse_yaml

    cfg = run_dir / "config.yaml"
    raw = _read_side(cfg, root)
    if raw is None:
        return None
    try:
        data = parse_yaml(raw.decode("utf-8"), f"config file {str(cfg)!r}")
    except Exception:  # noqa: BLE001 - a config the viewer cannot parse names nothing
        return None
    return data if isinstance(data, dict) else None


_STEP_IN_NAME = re.compile(r"(?:^|[/:+])(?:checkpoint-|global_step_)(\d+)(?=$|[/+])")


def policy_step(policy: str | None) -> int | None:
    """The training step a policy name carries (``local:outcome_only/checkpoint-60`` -> 60,
    ``local:exp/global_step_40`` -> 40; with a ``+lora:`` adapter of its own step, the adapter's);
    None when it names none."""
    found = _STEP_IN_NAME.findall(policy or "")
    return int(found[-1]) if found else None


def declared_checkpoint(config: dict | None) -> tuple[str | None, int | None]:
    """``(label, step)`` of the local checkpoint a run's config evaluates (``backend.kind: local``,
    ``backend.model_path`` and ``backend.adapter``) as
    :func:`~shopping_companion.llm.local_transformers.default_policy_name` names it, without the
    ``local:`` prefix; ``(None, None)`` for another backend or no config."""
    from shopping_companion.llm.local_transformers import checkpoint_label, checkpoint_step

    backend = (config or {}).get("backend")
    if not isinstance(backend, dict) or backend.get("kind") != "local":
        return None, None
    model, adapter = backend.get("model_path"), backend.get("adapter")
    if not isinstance(model, str) or not model:
        return None, None
    label = checkpoint_label(model)
    step = checkpoint_step(model)
    if isinstance(adapter, str) and adapter:
        label += f"+lora:{checkpoint_label(adapter)}"
        step = checkpoint_step(adapter) if checkpoint_step(adapter) is not None else step
    return label, step


def _declared_benchmarks(run_dir: Path, root: Path | None = None, config: dict | None = None) -> list[str]:
    """Benchmark paths named by the run: ``config.yaml`` ``bench.path`` (also ``benchmark.path``;
    ``config``: that file as :func:`_run_config` read it, read here when None), then
    ``summary.json`` ``meta.benchmark``. Both are read only when they are regular files of at most
    :data:`SIDE_FILE_CAP` bytes resolving inside ``root`` (None: anywhere)."""
    out: list[str] = []
    data = config if config is not None else _run_config(run_dir, root)
    if isinstance(data, dict):
        for key in ("bench", "benchmark"):
            sec = data.get(key)
            if isinstance(sec, dict) and isinstance(sec.get("path"), str):
                out.append(sec["path"])
    raw = _read_side(run_dir / "summary.json", root)
    if raw is not None:
        try:
            meta = json.loads(raw).get("meta") or {}
            if isinstance(meta.get("benchmark"), str):
                out.append(meta["benchmark"])
        except (ValueError, AttributeError, RecursionError):
            pass
    return list(dict.fromkeys(out))


def _tasks_file_ok(p: Path) -> bool:
    """``p`` is a regular file of at most :data:`TASKS_FILE_CAP` bytes (symlinks followed)."""
    try:
        st = os.stat(p)
    except (OSError, ValueError):
        return False
    return stat.S_ISREG(st.st_mode) and st.st_size <= TASKS_FILE_CAP


def find_benchmark(
    run_dir: Path, root: Path | None = None, config: dict | None = None
) -> tuple[Path | None, str | None]:
    """``(benchmark directory holding tasks.jsonl or None, the path the run names or None)``.

    A relative declared path is tried against the current directory, then the run directory and
    each of its parents (a run started elsewhere); last, ``<run dir>/bench`` (the quickstart's).
    ``root``: the directory the run's side files must resolve inside (:func:`_declared_benchmarks`);
    the benchmark itself may be anywhere, but its ``tasks.jsonl`` must be a regular file of at most
    :data:`TASKS_FILE_CAP` bytes."""
    declared = _declared_benchmarks(run_dir, root, config)
    cands: list[Path] = []
    for s in declared:
        p = Path(s).expanduser()
        if p.is_absolute():
            cands.append(p)
        else:
            cands += [Path.cwd() / p, run_dir / p, *(q / p for q in list(run_dir.resolve().parents)[:8])]
    cands.append(run_dir / "bench")
    for c in cands:
        if _tasks_file_ok(c / "tasks.jsonl"):
            return c, declared[0] if declared else _display(c)
    return None, declared[0] if declared else None


def load_tasks(bench_dir: Path) -> tuple[dict[str, Task], str | None]:
    """``(task_id -> Task, SHA-256 hex digest of the file)`` from ``<bench_dir>/tasks.jsonl``, read
    once (lines that are not tasks are skipped); ``({}, None)`` when it is not a regular file of at
    most :data:`TASKS_FILE_CAP` bytes or cannot be read. The digest tells whether two runs share a
    benchmark (:func:`~shopping_companion.viewer.compare.compare`)."""
    import hashlib

    out: dict[str, Task] = {}
    h = hashlib.sha256()
    try:
        with _open_regular(bench_dir / "tasks.jsonl", None, TASKS_FILE_CAP) as f:
            for raw in f:
                h.update(raw)
                if raw.strip():
                    try:
                        t = Task.model_validate_json(raw)
                    except (ValueError, RecursionError):
                        continue
                    out[t.task_id] = t
    except (OSError, RunUnreadableError):
        return {}, None
    return out, h.hexdigest()


# --------------------------------------------------------------------------- one run


class RunIndex:
    """The index of one run file (see the module docstring). Thread-safe.

    Built by :class:`RunCatalog`; ``path`` is the run file, ``run_dir`` its directory, ``root``
    the resolved directory the run was found in (default: the resolved ``run_dir``): the run file
    and its side files (``taxonomy.jsonl``, ``config.yaml``, ``summary.json``) are read only while
    they are regular files whose real path lies inside it, so a symlink put in their place later
    is never followed out of it. Public counters for tests and diagnostics: ``end_offset`` (bytes
    up to the end of the last complete line indexed) and ``last_read`` (``(start, stop)`` byte
    range read by the last :meth:`refresh` that read anything).
    """

    def __init__(
        self,
        run_id: str,
        kind: RunKind,
        path: Path,
        name: str,
        *,
        background_taxonomy: bool = True,
        root: Path | None = None,
    ) -> None:
        self.run_id = run_id
        self.background_taxonomy = background_taxonomy
        self._gen = 0
        self._bg: threading.Thread | None = None
        self.kind: RunKind = kind
        self.path = Path(path)
        self.run_dir = self.path.parent
        self.root = Path(root) if root is not None else Path(os.path.realpath(self.run_dir))
        self.name = name
        self._lock = threading.RLock()
        self._tasks: dict[str, Task] | None = None
        self._tasks_sha256: str | None = None
        self._bench_dir: Path | None = None
        self._bench_declared: str | None = None
        self._checkpoint: tuple[str | None, int | None] = (None, None)
        self._summary: RunSummary | None = None
        self._tax_mtime: int | None = None
        self._tax_file: dict[tuple[str, int, str], dict[str, Any]] = {}
        self._reset()
        self.refresh()

    # ------------------------------------------------------------------ indexing

    def _reset(self) -> None:
        self._gen = getattr(self, "_gen", 0) + 1
        self._rows: list[EpisodeRow] = []
        self._by_line: dict[int, EpisodeRow] = {}
        self._loc: dict[int, tuple[int, int]] = {}
        self._torn: EpisodeRow | None = None
        self._torn_loc: tuple[int, int] | None = None
        self._final: dict[tuple, int] = {}
        self._tax_detail: dict[int, dict[str, Any] | None] = {}
        self._tax_pending: set[int] = set()
        self._bg_line: int | None = None  # the line the background classifier is working on
        self.end_offset = 0
        self.last_read: tuple[int, int] | None = None
        self._next_line = 1
        self._ident: tuple[int, int] | None = None
        self._seen: tuple[int, int] | None = None  # (size, mtime_ns) at the last read
        self._mtime = 0.0
        self._summary = None
        self._problem: str | None = None  # why the run file cannot be read (None: it can)
        # (offset, length, digest of the first _ANCHOR_BYTES) of the first and the last indexed line
        self._anchors: list[tuple[int, int, bytes] | None] = [None, None]

    def _ensure_tasks(self) -> dict[str, Task]:
        if self._tasks is None:
            config = _run_config(self.run_dir, self.root)
            self._checkpoint = declared_checkpoint(config)
            self._bench_dir, self._bench_declared = find_benchmark(self.run_dir, self.root, config)
            if self._bench_dir is not None:
                self._tasks, self._tasks_sha256 = load_tasks(self._bench_dir)
            else:
                self._tasks, self._tasks_sha256 = {}, None
        return self._tasks

    @property
    def tasks_digest(self) -> str | None:
        """SHA-256 of the benchmark's ``tasks.jsonl`` as it was loaded (None: no benchmark read)."""
        with self._lock:
            self._ensure_tasks()
            return self._tasks_sha256

    @property
    def tasks(self) -> dict[str, Task]:
        """``task_id -> Task`` of the run's benchmark (empty when it cannot be found)."""
        with self._lock:
            return self._ensure_tasks()

    @property
    def benchmark_dir(self) -> Path | None:
        """The benchmark directory found for the run (None: not found)."""
        with self._lock:
            self._ensure_tasks()
            return self._bench_dir

    def refresh(self) -> bool:
        """Read what was appended since the last call (complete lines; an unterminated last line
        becomes a ``torn`` row); index from scratch when the file shrank or is another file
        (inode), or when the first or last indexed line no longer holds the bytes it was indexed
        from (rewritten in place, even if longer); reload ``taxonomy.jsonl`` when it changed.
        Returns True when anything changed. A missing file is an empty run; a file that cannot be
        read (not a regular file, outside :attr:`root`, open failed) is an empty run whose
        :attr:`RunSummary.problem` says why. Never raises for the file's contents."""
        with self._lock:
            changed = self._refresh_taxonomy_file()
            try:
                st = os.stat(self.path)
            except OSError:
                if self._rows or self._torn is not None or self._problem is not None:
                    self._reset()
                    return True
                return changed
            ident = (st.st_dev, st.st_ino)
            if self._ident is not None and (ident != self._ident or st.st_size < self.end_offset):
                self._reset()
                changed = True
            if self._seen == (st.st_size, st.st_mtime_ns) and self._ident == ident:
                return changed
            if self._ident is not None and not self._anchors_hold():
                self._reset()
            self._read(ident)
            self._seen = (st.st_size, st.st_mtime_ns)
            self._mtime = st.st_mtime
            self._summary = None
            self._kick()
            return True

    def _anchors_hold(self) -> bool:
        """The first and the last indexed line still start with the bytes they were indexed from
        and still end in a newline where they ended (a rewrite in place moved them otherwise).
        True when there is nothing to check or the file cannot be opened (:meth:`_read` says so)."""
        checks = [a for a in self._anchors if a is not None]
        if not checks:
            return True
        try:
            with _open_regular(self.path, self.root) as f:
                for off, n, digest in checks:
                    f.seek(off)
                    head = f.read(min(n, _ANCHOR_BYTES))
                    f.seek(off + n)
                    if _digest(head) != digest or f.read(1) != b"\n":
                        return False
        except (RunUnreadableError, OSError):
            return True
        return True

    def _set_anchor(self, which: int, offset: int, raw: bytes) -> None:
        self._anchors[which] = (offset, len(raw), _digest(raw[:_ANCHOR_BYTES]))

    def _unreadable(self, problem: str, ident: tuple[int, int]) -> None:
        """Forget every row: the run file cannot be read (``problem`` says why)."""
        self._reset()
        self._problem = problem[:500]
        self._ident = ident

    def _read(self, ident: tuple[int, int]) -> None:
        tasks = self._ensure_tasks()
        build = _ROW_BUILDERS[self.kind]
        start = self.end_offset
        try:
            f = _open_regular(self.path, self.root)
        except RunUnreadableError as e:
            if isinstance(e.__cause__, FileNotFoundError):
                return  # removed between stat and open: the next refresh sees it missing
            self._unreadable(str(e), ident)
            return
        self._problem = None
        with f:
            fst = os.fstat(f.fileno())
            if (fst.st_dev, fst.st_ino) != ident and self._ident is not None:
                self._reset()  # replaced between stat and open
                start = 0
            self._ident = (fst.st_dev, fst.st_ino)
            f.seek(start)
            pos = start  # file offset of the first byte of ``pending``
            pending = b""
            self._torn, self._torn_loc = None, None
            while True:
                try:
                    chunk = f.read(_CHUNK)
                except OSError as e:
                    self._problem = f"{_display(self.path)}: read failed at byte {pos} ({e.strerror or e})"[:500]
                    break
                if not chunk:
                    break
                data = pending + chunk if pending else chunk
                cut = data.rfind(b"\n")
                if cut < 0:
                    pending = data
                    continue
                i = 0
                last: tuple[int, bytes] | None = None
                try:
                    while i <= cut:
                        j = data.index(b"\n", i)
                        raw = data[i:j]
                        if raw.strip():
                            self._add(self._next_line, raw, pos + i, build, tasks)
                            last = (pos + i, raw)
                            if self._anchors[0] is None:
                                self._set_anchor(0, pos + i, raw)
                        self._next_line += 1
                        self.end_offset = pos + j + 1  # per line: an error later never adds a line twice
                        i = j + 1
                finally:
                    if last is not None:
                        self._set_anchor(1, *last)
                pos += cut + 1
                pending = data[cut + 1 :]
            self.end_offset = pos
            if pending.strip():
                self._torn = EpisodeRow(
                    line=self._next_line,
                    status="torn",
                    problem=f"incomplete last line ({len(pending)} bytes, no newline yet): still being "
                    "written, or a write cut short by a crash",
                )
                self._torn_loc = (pos, len(pending))
            self.last_read = (start, pos + len(pending))

    def _add(self, line: int, raw: bytes, offset: int, build: Any, tasks: dict[str, Task]) -> None:
        try:
            d = json.loads(raw)
        except (ValueError, RecursionError) as e:
            row = EpisodeRow(line=line, status="unreadable", problem=f"not JSON: {_short(e)}")
        else:
            try:
                row = build(line, d)
            except Exception as e:  # noqa: BLE001 - a line the builder cannot read is foreign, never a crash
                row = EpisodeRow(line=line, status="foreign", problem=f"not a record of this run: {_short(e, 160)}")
            if row.status in ("ok", "error"):
                self._annotate_task(row, tasks.get(row.task_id or ""))
                if self.kind in ("eval", "sft_rollouts"):
                    self._supersede(row)
                    if row.scored and row.success is False:
                        self._set_taxonomy_from_file(row)
        self._rows.append(row)
        self._by_line[line] = row
        self._loc[line] = (offset, len(raw))

    @staticmethod
    def _annotate_task(row: EpisodeRow, task: Task | None) -> None:
        if task is None:
            return
        from shopping_companion.benchmark.calibrate import task_source

        row.instruction = task.instruction
        row.task_type = row.task_type or task.task_type
        row.source = task_source(task)
        row.category = _task_category(task)

    def _supersede(self, row: EpisodeRow) -> None:
        """Apply :func:`~shopping_companion.benchmark.report.final_results`' choice incrementally:
        per result key the last line without an error, else the last errored one."""
        key = result_key(_stand_in(row))
        prev_line = self._final.get(key)
        if prev_line is None:
            self._final[key] = row.line
            return
        prev = self._by_line[prev_line]
        if row.status == "ok" or prev.status != "ok":
            self._final[key] = row.line
            self._mark_superseded(prev, row.line)
        else:
            self._mark_superseded(row, prev_line)

    def _mark_superseded(self, row: EpisodeRow, by: int) -> None:
        row.superseded_by = by
        row.problem = f"superseded by line {by}" + (f" (this attempt: {row.problem})" if row.problem else "")
        row.status = "superseded"
        self._tax_pending.discard(row.line)

    def _refresh_taxonomy_file(self) -> bool:
        p = self.run_dir / "taxonomy.jsonl"
        try:
            mtime = p.stat().st_mtime_ns
        except OSError:
            mtime = None
        if mtime == self._tax_mtime or self.kind not in ("eval",):
            return False
        self._tax_mtime = mtime
        items: dict[tuple[str, int, str], dict[str, Any]] = {}
        data = _read_side(p, self.root) if mtime is not None else None
        for raw in (data or b"").splitlines():
            try:
                d = json.loads(raw)
                items[(str(d["task_id"]), int(d["trial"]), str(d["strategy"]))] = d
            except (ValueError, KeyError, TypeError, OverflowError, RecursionError):
                continue
        self._tax_file = items
        for row in self._rows:
            if row.scored and row.success is False and row.status == "ok":
                self._set_taxonomy_from_file(row)
        self._summary = None
        return True

    def _set_taxonomy_from_file(self, row: EpisodeRow) -> None:
        item = self._tax_file.get((row.task_id or "", row.trial or 0, row.strategy or ""))
        if item is not None:
            row.taxonomy = str(item.get("primary"))
            self._tax_detail[row.line] = item
            self._tax_pending.discard(row.line)
        elif row.line not in self._tax_detail:
            self._tax_pending.add(row.line)

    def _classify_raw(self, raw: bytes, task_of: dict[str, Task]) -> tuple[dict[str, Any] | None, str | None]:
        """``(classification dict or None, problem)``: the rules of
        :func:`~shopping_companion.benchmark.taxonomy.classify` on one line; ``problem`` is set
        when the line is not an ``EpisodeResult`` after all."""
        from shopping_companion.benchmark.taxonomy import classify

        try:
            res = EpisodeResult.model_validate_json(raw)
        except ValidationError as e:
            return None, _validation_problem("EpisodeResult", e)
        except ValueError as e:
            return None, _short(e)
        try:
            c = classify(res, task_of.get(res.task_id))
        except Exception:  # noqa: BLE001 - malformed data must never break a page
            return None, None
        return (c.to_dict() if c is not None else None), None

    def _store_class(self, line: int, detail: dict[str, Any] | None, problem: str | None) -> None:
        row = self._by_line.get(line)
        if row is None:
            return
        if problem is not None:
            row.status, row.problem, row.scored = "foreign", problem, False
            self._summary = None
        self._tax_detail[line] = detail
        row.taxonomy = detail["primary"] if detail else None

    def _resolve_taxonomy(self, lines: Iterable[int], budget_s: float | None = None) -> None:
        """Classify the pending failures among ``lines`` now (lock held), until ``budget_s``
        seconds have passed (None: all); the rest stay pending for the background worker."""
        from shopping_companion.benchmark.taxonomy import classify  # noqa: F401 - imported before the clock starts

        tasks = self._ensure_tasks()  # loading the tasks is not part of the budget either
        t0 = time.monotonic()
        # a line the background worker has taken but not stored yet is classified here too, so a
        # page never shows one of its own failures unclassified (the worker's result is the same)
        todo = [x for x in lines if x in self._tax_pending or (x == self._bg_line and x not in self._tax_detail)]
        for line in todo:
            if budget_s is not None and time.monotonic() - t0 > budget_s:
                break
            self._tax_pending.discard(line)
            try:
                raw = self._raw(line)
            except (OSError, KeyError, RunUnreadableError):
                continue
            self._store_class(line, *self._classify_raw(raw, tasks))

    @property
    def unclassified(self) -> int:
        """Scored failures whose taxonomy class is not known yet (the background classifier works
        on them); 0 once every failure is classified."""
        with self._lock:
            return len(self._tax_pending)

    def classify_pending(self) -> int:
        """Classify every scored failure whose taxonomy class is not known yet, now (blocking);
        returns how many were classified. (A background worker does the same when
        ``background_taxonomy`` is on.)"""
        with self._lock:
            pending = sorted(self._tax_pending)
            self._resolve_taxonomy(pending)
            return len(pending)

    def _kick(self) -> None:
        """Start the background classifier when failures wait and it is not running (lock held)."""
        if not self.background_taxonomy or not self._tax_pending:
            return
        if self._bg is not None and self._bg.is_alive():
            return
        self._bg = threading.Thread(target=self._bg_loop, name=f"viewer-taxonomy:{self.run_id}", daemon=True)
        self._bg.start()

    def _bg_loop(self) -> None:
        """Classify pending failures one at a time; the lock is held only to pick a line and to
        store its class, so pages are served meanwhile. A re-index (another generation) drops the
        result of a line read before it."""
        while True:
            with self._lock:
                if not self._tax_pending:
                    return
                line = min(self._tax_pending)
                self._tax_pending.discard(line)
                self._bg_line = line
                gen, loc, tasks = self._gen, self._loc.get(line), self._ensure_tasks()
            if loc is None:
                continue
            try:
                with _open_regular(self.path, self.root) as f:
                    f.seek(loc[0])
                    raw = f.read(loc[1])
            except (OSError, RunUnreadableError):
                continue
            detail, problem = self._classify_raw(raw, tasks)
            with self._lock:
                self._bg_line = None
                if gen == self._gen and line not in self._tax_detail:
                    self._store_class(line, detail, problem)
            time.sleep(0.001)  # let request threads take the GIL

    # ------------------------------------------------------------------ reading one line

    def raw(self, line: int) -> bytes:
        """The stored bytes of result line ``line`` (1-based), exactly as in the file (no newline);
        the torn last line too. Raises ``KeyError`` for a line that does not exist and
        :class:`RunUnreadableError` (one line: path and reason) when the run file cannot be read
        now or is no longer the file that was indexed; never ``OSError``."""
        with self._lock:
            return self._raw(line)

    def _raw(self, line: int) -> bytes:
        if self._problem is not None:
            raise RunUnreadableError(self._problem)
        if self._torn is not None and line == self._torn.line and self._torn_loc is not None:
            off, n = self._torn_loc
        elif line in self._loc:
            off, n = self._loc[line]
        else:
            raise KeyError(line)
        try:
            with _open_regular(self.path, self.root) as f:
                fst = os.fstat(f.fileno())
                if self._ident is not None and (fst.st_dev, fst.st_ino) != self._ident:
                    raise RunUnreadableError(f"{_display(self.path)}: replaced since it was indexed; reload the page")
                f.seek(off)
                return f.read(n)
        except OSError as e:
            raise RunUnreadableError(f"{_display(self.path)}: cannot be read ({e.strerror or e})") from None

    def _load_result(self, line: int) -> EpisodeResult | None:
        """The ``EpisodeResult`` of ``line`` (pydantic), or None: the row becomes ``foreign``."""
        row = self._by_line[line]
        try:
            return EpisodeResult.model_validate_json(self._raw(line))
        except RunUnreadableError:
            raise
        except ValidationError as e:
            row.status, row.problem, row.scored = "foreign", _validation_problem("EpisodeResult", e), False
        except (ValueError, OSError) as e:
            row.status, row.problem, row.scored = "unreadable", _short(e), False
        self._summary = None
        return None

    # ------------------------------------------------------------------ public queries

    @property
    def summary(self) -> RunSummary:
        """The run's :class:`RunSummary` as of the last :meth:`refresh` (``live`` is current)."""
        with self._lock:
            if self._summary is None:
                self._summary = self._summarize()
            s = self._summary
            s.live = self._is_live()
            return s

    def _is_live(self) -> bool:
        """A writer holds a lock on the run file, or the file changed in the last
        :data:`LIVE_WINDOW_S` seconds and no ``summary.json`` beside it is as new or newer (a run
        writes its summary when it ends, so a finished run is not live)."""
        try:
            st = os.stat(self.path)
        except OSError:
            return False
        if time.time() - st.st_mtime < LIVE_WINDOW_S:
            try:
                finished = os.stat(self.path.parent / "summary.json").st_mtime_ns >= st.st_mtime_ns
            except OSError:
                finished = False
            if not finished:
                return True
        return _locked(st)

    def _summarize(self) -> RunSummary:
        self._ensure_tasks()
        rows = self._rows
        final = [r for r in rows if r.status in ("ok", "error")]
        scored = [r for r in final if r.scored]
        acc = succ = None
        pass_hat: dict[int, float] = {}
        if self.kind in ("eval", "sft_rollouts"):
            standins = [_stand_in(r) for r in scored]
            pooled = M.acc_succ(standins)["all"]
            acc, succ = pooled["acc"], pooled["succ"]
            per = Counter((r.strategy, r.task_id) for r in scored)
            top = max(per.values(), default=0)
            if top:
                table = M.pass_k_table(standins, list(range(1, top + 1)))
                pass_hat = {int(k): v["pass^k"] for k, v in table["k"].items() if v["pass^k"] is not None}
        else:
            acc = _mean(r.acc for r in scored if r.acc is not None)
            succ = _mean(float(r.success) for r in scored if r.success is not None)
        comp: dict[str, list[float]] = {}
        for r in scored:
            for k, v in r.components.items():
                comp.setdefault(k, []).append(v)
        policies = Counter(r.policy for r in final if r.policy)
        policy = policies.most_common(1)[0][0] if policies else None
        bench = self._bench_declared or (_display(self._bench_dir) if self._bench_dir else None)
        ckpt, ckpt_step = self._checkpoint
        if ckpt is not None and policy is not None and ckpt in policy:
            ckpt = None  # the policy name says it already
        step = policy_step(policy)
        if step is None:
            step = int(self.path.stem) if self.kind == "grpo_val" and self.path.stem.isdigit() else ckpt_step
        return RunSummary(
            run_id=self.run_id,
            kind=self.kind,
            name=self.name,
            path=_display(self.path),
            policy=policy,
            benchmark=bench,
            strategies=sorted({r.strategy for r in final if r.strategy}),
            trials=max((r.trial for r in final if r.trial is not None), default=-1) + 1,
            n_lines=len(rows) + (1 if self._torn is not None else 0),
            n_episodes=len(final),
            n_scored=len(scored),
            n_errors=sum(1 for r in final if r.status == "error"),
            n_unreadable=sum(1 for r in rows if r.status in ("unreadable", "foreign")),
            acc=acc,
            succ=succ,
            pass_hat_k=pass_hat,
            components={k: statistics.fmean(v) for k, v in sorted(comp.items())},
            updated=_iso(self._mtime) if self._mtime else "",
            live=False,
            n_foreign=sum(1 for r in rows if r.status == "foreign"),
            n_superseded=sum(1 for r in rows if r.status == "superseded"),
            torn=self._torn is not None,
            benchmark_found=self._bench_dir is not None,
            benchmark_used=str(Path(self._bench_dir).resolve()) if self._bench_dir is not None else None,
            problem=self._problem,
            step=step,
            checkpoint=ckpt,
        )

    def _all_rows(self) -> list[EpisodeRow]:
        return self._rows + ([self._torn] if self._torn is not None else [])

    def query(
        self,
        *,
        failed_only: bool = False,
        task_type: str | None = None,
        taxonomy: str | None = None,
        strategy: str | None = None,
        q: str | None = None,
        sort: str = "line",
        desc: bool = False,
        offset: int = 0,
        limit: int = 50,
        include_superseded: bool = False,
        status: str | None = None,
    ) -> Page:
        """Filter, sort and page the rows (in memory; nothing is read from disk).

        ``failed_only``: scored episodes that did not succeed. ``task_type`` / ``taxonomy`` /
        ``strategy`` / ``status``: exact values (see :meth:`facets`); the taxonomy filter and sort
        see the classes known so far (``Page.unclassified`` failures are still being classified). ``q``: case-insensitive
        substring of the instruction or task id. ``sort``: one of :data:`SORT_FIELDS` (None values
        last in either direction). ``offset`` >= 0, ``limit`` in 1..:data:`MAX_LIMIT`.
        ``include_superseded``: also rows of replaced attempts (always shown when ``status`` is
        ``superseded``). Raises ``ValueError`` naming the parameter and the allowed values.
        """
        if sort not in SORT_FIELDS:
            raise ValueError(f"sort: must be one of {', '.join(SORT_FIELDS)}; got {sort!r}")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
            raise ValueError(f"limit: must be an integer from 1 to {MAX_LIMIT}; got {limit!r}")
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValueError(f"offset: must be an integer >= 0; got {offset!r}")
        statuses = ("ok", "error", "unreadable", "foreign", "torn", "superseded")
        if status is not None and status not in statuses:
            raise ValueError(f"status: must be one of {', '.join(statuses)}; got {status!r}")
        with self._lock:
            needle = q.casefold() if q else None
            out: list[EpisodeRow] = []
            for r in self._all_rows():
                if r.status == "superseded" and not include_superseded and status != "superseded":
                    continue
                if status is not None and r.status != status:
                    continue
                if failed_only and not (r.scored and r.success is False and r.status == "ok"):
                    continue
                if task_type is not None and r.task_type != task_type:
                    continue
                if strategy is not None and r.strategy != strategy:
                    continue
                if taxonomy is not None and r.taxonomy != taxonomy:
                    continue
                if needle is not None and not (
                    needle in (r.task_id or "").casefold() or needle in (r.instruction or "").casefold()
                ):
                    continue
                out.append(r)
            if sort != "line":
                have = [r for r in out if getattr(r, sort) is not None]
                none = [r for r in out if getattr(r, sort) is None]
                have.sort(key=lambda r: (getattr(r, sort), r.line), reverse=desc)
                out = have + none
            elif desc:
                out.reverse()
            page = out[offset : offset + limit]
            self._resolve_taxonomy((r.line for r in page), budget_s=PAGE_CLASSIFY_BUDGET_S)
            self._kick()
            return Page(rows=page, total=len(out), offset=offset, limit=limit, unclassified=len(self._tax_pending))

    def rows_after(self, line: int) -> list[EpisodeRow]:
        """Rows of complete lines after ``line`` (any status), in file order: what a live page
        appends. Call :meth:`refresh` first to see new lines."""
        with self._lock:
            rows = [r for r in self._rows if r.line > line]
            self._resolve_taxonomy((r.line for r in rows), budget_s=PAGE_CLASSIFY_BUDGET_S)
            return rows

    def row(self, line: int) -> EpisodeRow:
        """The row of ``line``; KeyError when no row has that line number."""
        with self._lock:
            if self._torn is not None and line == self._torn.line:
                return self._torn
            return self._by_line[line]

    @property
    def last_line(self) -> int:
        """The line number of the last complete line indexed (0 when none)."""
        with self._lock:
            return self._rows[-1].line if self._rows else 0

    def facets(self) -> dict[str, list[str]]:
        """Values for the filter menus: ``task_type``, ``strategy``, ``status`` (those present),
        ``taxonomy`` (every category of :data:`~shopping_companion.benchmark.taxonomy.CATEGORY_LABELS`
        plus ``other``, and any other class found)."""
        from shopping_companion.benchmark.taxonomy import CATEGORY_LABELS, OTHER

        with self._lock:
            rows = self._all_rows()
            tax = list(CATEGORY_LABELS) + [OTHER]
            tax += sorted({r.taxonomy for r in rows if r.taxonomy and r.taxonomy not in tax})
            return {
                "task_type": sorted({r.task_type for r in rows if r.task_type}),
                "taxonomy": tax,
                "strategy": sorted({r.strategy for r in rows if r.strategy}),
                "status": sorted({r.status for r in rows}),
            }

    def episode(self, line: int) -> EpisodeView:
        """The annotated episode of ``line`` (module docstring). KeyError for a line that has no
        row (blank, or past the end); :class:`RunUnreadableError` when the run file cannot be read
        now (never ``OSError``). Bad lines give a view with ``raw`` and no stages."""
        with self._lock:
            if self._problem is not None:
                raise RunUnreadableError(self._problem)
            row = self.row(line)
            tasks = self._ensure_tasks()
            if row.status in ("unreadable", "foreign", "torn"):
                return self._bad_view(row)
            if self.kind in ("eval", "sft_rollouts"):
                res = self._load_result(line)
                if res is None:
                    return self._bad_view(row)
                task = tasks.get(res.task_id)
                if row.scored and row.success is False:
                    self._resolve_taxonomy([line])
                stages = _stage_views(
                    [(s.trajectory, s.verdict, s.reward) for s in res.stages], task, _episode_records(res)
                )
                tax = self._tax_detail.get(line)
                return EpisodeView(
                    row=row,
                    raw=None,
                    result=res,
                    task=task,
                    gold=list(task.preferences) if task else [],
                    stages=stages,
                    simulator=res.simulator,
                    taxonomy=_tax_view(tax),
                )
            raw = self._raw(line)
            if self.kind == "sft_kept":
                from shopping_companion.sft.collect import KeptStage

                try:
                    kept = KeptStage.model_validate_json(raw)
                except ValidationError as e:
                    row.status, row.problem = "foreign", _validation_problem("KeptStage", e)
                    return self._bad_view(row)
                task = tasks.get(kept.task_id)
                records = _trajectory_records([kept.trajectory])
                stages = _stage_views([(kept.trajectory, kept.verdict, None)], task, records)
                return EpisodeView(
                    row=row,
                    raw=None,
                    result=None,
                    task=task,
                    gold=list(task.preferences) if task else [],
                    stages=stages,
                    simulator=None,
                    taxonomy=None,
                    record=json.loads(raw),
                )
            d = json.loads(raw)
            tid = grpo_task_id(d)
            task = tasks.get(tid) if tid else None
            traj, reward = grpo_trajectory(d, task)
            stages = _stage_views([(traj, None, reward)], task, _trajectory_records([traj]))
            return EpisodeView(
                row=row,
                raw=None,
                result=None,
                task=task,
                gold=list(task.preferences) if task else grpo_gold(d),
                stages=stages,
                simulator=None,
                taxonomy=None,
                record={k: v for k, v in d.items() if k not in ("input", "output")},
            )

    def _bad_view(self, row: EpisodeRow) -> EpisodeView:
        try:
            data = self._raw(row.line)
        except (OSError, KeyError):
            data = None
        return EpisodeView(
            row=row,
            raw=_cap(data) if data is not None else None,
            result=None,
            task=None,
            gold=[],
            stages=[],
            simulator=None,
            taxonomy=None,
            raw_bytes=len(data) if data is not None else None,
        )

    def final_rows(self) -> list[EpisodeRow]:
        """The final, scored episode rows (status ``ok``, counted by the metrics), in file order."""
        with self._lock:
            return [r for r in self._rows if r.status == "ok" and r.scored]

    def __len__(self) -> int:
        with self._lock:
            return len(self._rows) + (1 if self._torn is not None else 0)


def _tax_view(item: dict[str, Any] | None) -> dict[str, Any] | None:
    if not item:
        return None
    return {
        "primary": item.get("primary"),
        "evidence": item.get("evidence") or {},
        "secondary": item.get("secondary") or [],
        "labels": item.get("labels") or [],
        "llm": item.get("llm"),
    }


# --------------------------------------------------------------------------- GRPO lines


def grpo_ground_truth(d: Any) -> dict[str, Any]:
    """The ``gts`` of a validation-dump line as a dict: the JSON string our GRPO rows put in
    ``reward_model.ground_truth`` (:func:`shopping_companion.trainers.rows.task_rows`: ``task_id``,
    ``preferences``, ``reference_product_ids``, ``needle_session_ids``), which verl copies into the
    dump; a dict is taken as it is. Anything else (missing, not JSON, not an object): ``{}``."""
    g = d.get("gts") if isinstance(d, dict) else None
    if isinstance(g, str) and len(g) <= RAW_CAP:
        try:
            g = json.loads(g)
        except (ValueError, RecursionError):
            return {}
    return g if isinstance(g, dict) else {}


def grpo_task_id(d: Any) -> str | None:
    """The task id of a validation-dump line: a top-level ``task_id`` string, else the ``task_id``
    of its ground truth (:func:`grpo_ground_truth`); None when neither is a non-empty string."""
    if isinstance(d, dict) and isinstance(d.get("task_id"), str) and d["task_id"]:
        return d["task_id"]
    t = grpo_ground_truth(d).get("task_id")
    return t if isinstance(t, str) and t else None


def grpo_gold(d: Any) -> list[Preference]:
    """The gold preferences carried by a dump line's ground truth (those that validate as
    :class:`Preference`); shown when the benchmark itself is not found."""
    out: list[Preference] = []
    prefs = grpo_ground_truth(d).get("preferences")
    for p in prefs if isinstance(prefs, list) else []:
        try:
            out.append(Preference.model_validate(p))
        except (ValidationError, TypeError, ValueError):
            continue
    return out


#: A role header left by a Qwen/ChatML template once verl decodes with ``skip_special_tokens``
#: (``<|im_start|>user\n`` → ``user\n``, preceded by the ``\n`` after the previous ``<|im_end|>``).
_ROLE_HEADER = re.compile(r"(?:^|\n)(user|assistant|tool)\n")
_TOOL_RESPONSE = re.compile(r"<tool_response>\n?(.*?)\n?</tool_response>", re.DOTALL)


def split_dump_output(output: str) -> list[tuple[str, str]]:
    """verl's decoded response of one multi-turn trajectory as ``[(role, text), ...]``.

    verl writes ``tokenizer.decode(response_ids, skip_special_tokens=True)``: the assistant turns
    the policy generated and, between them, the observations the agent loop appended
    (:mod:`shopping_companion.trainers.episode`), rendered by the chat template. With Qwen/ChatML
    templates the ``<|im_start|>`` / ``<|im_end|>`` markers are special and vanish, leaving a line
    ``user`` (or ``tool``) before each observation and ``assistant`` before the next turn. The
    text before the first header is the first assistant turn (its header ends the prompt). A
    ``user`` line starts an observation only when text follows it; an ``assistant`` line ends one.
    Roles: ``assistant`` and ``observation``. Tool observations hold ``<tool_response>`` blocks
    (``<tool_response>`` … ``</tool_response>``); others are the environment's plain user messages (format feedback).
    Model text that itself holds a line ``user`` would be split there (the decoded text carries
    no other boundary)."""
    parts: list[tuple[str, str]] = []
    role, start = "assistant", 0
    for m in _ROLE_HEADER.finditer(output):
        header = m.group(1)
        if role == "assistant" and header in ("user", "tool"):
            parts.append((role, output[start : m.start()]))
            role, start = "observation", m.end()
        elif role == "observation" and header == "assistant":
            parts.append((role, output[start : m.start()]))
            role, start = "assistant", m.end()
        elif role == "observation" and header in ("user", "tool"):
            # consecutive observation messages (one user turn per tool result, as some templates do)
            parts.append((role, output[start : m.start()]))
            start = m.end()
    parts.append((role, output[start:]))
    if parts and parts[-1] == ("assistant", "") and len(parts) > 1:
        parts.pop()
    return [(r, t.rstrip("\n") if r == "assistant" else t) for r, t in parts]


_ID_KEYS = {"mem_search": ("results", "session_id"), "mem_view": ("sessions", "session_id")}
_ID_KEYS.update({"product_search": ("results", "product_id"), "product_view": ("products", "product_id")})


def observed_ids(name: str, content: str) -> tuple[list[str], str | None]:
    """``(returned ids, error)`` of one tool observation's text, as the tool box recorded them
    (:mod:`shopping_companion.envs.tools`): ``mem_search`` one session id per distinct
    ``(session_id, turn_index)`` item, ``mem_view`` / ``product_view`` each session / product once,
    ``product_search`` each hit; an ``{"error": …}`` observation returns nothing and its message.
    An observation cut at ``max_observation_chars`` is not JSON: its ids are the
    ``"session_id"`` / ``"product_id"`` values still visible in the text (as the tool box counts a
    cut observation's ids). Other tool names: no ids."""
    if name not in _ID_KEYS:
        return [], None
    key, field_ = _ID_KEYS[name]
    try:
        obj = json.loads(content)
    except (ValueError, RecursionError):
        obj = None
    if isinstance(obj, dict):
        if isinstance(obj.get("error"), str) and key not in obj:
            return [], obj["error"]
        items = obj.get(key)
        items = [x for x in items if isinstance(x, dict)] if isinstance(items, list) else []
        if name == "mem_search":
            seen = dict.fromkeys((str(x.get(field_)), str(x.get("turn_index"))) for x in items if x.get(field_))
            return [sid for sid, _ in seen], None
        ids = [str(x[field_]) for x in items if isinstance(x.get(field_), str)]
        return (ids if name == "product_search" else list(dict.fromkeys(ids))), None
    found = re.findall(rf'"{field_}": "((?:[^"\\]|\\.)*)"', content)
    return found, None


def grpo_trajectory(d: dict[str, Any], task: Task | None = None) -> tuple[Trajectory, RewardBreakdown | None]:
    """A validation-dump line as a one-stage :class:`Trajectory` and its reward breakdown.

    ``output`` is split into turns (:func:`split_dump_output`); each assistant turn is parsed by
    the environment's own parser (:func:`~shopping_companion.envs.parsing.parse_action` with the
    environment's call ids ``s<stage>t<turn>c<k>``, :func:`~shopping_companion.envs.parsing.format_flags`),
    and the ``<tool_response>`` blocks of the observation after it are its calls' results, in
    order (ids from :func:`observed_ids`); a plain observation is format feedback. The last turn's
    answer gives ``final_answer``, the identified preferences (stage 1,
    :func:`~shopping_companion.envs.parsing.parse_preferences`) or the recommended ids (stage 2,
    :func:`~shopping_companion.envs.parsing.extract_rec_ids`), as the environment derives them.
    ``messages``: the prompt (``input``, verl's decoded prompt) as one user message, then the
    turns. ``task_id``: :func:`grpo_task_id`. The reward breakdown: the line's numeric keys
    (``total`` = ``score``); with ``task``, ``per_tool_call`` is r(u) of the exact tool-wise reward
    (:func:`~shopping_companion.rewards.tool_wise.tool_wise_reward`) when its mean equals the
    line's ``R_tool`` (else it is left empty: the run used another tool-wise rule)."""
    from shopping_companion.envs.parsing import extract_rec_ids, format_flags, parse_action, parse_preferences

    output = str(d.get("output", ""))
    stage_f = _num(d.get("stage"))
    stage = int(stage_f) if stage_f in (1.0, 2.0) else 2
    messages = [Message(role="user", content=str(d.get("input", "")))]
    steps: list[Step] = []
    answer: str | None = None
    for role, text in split_dump_output(output):
        if role == "assistant":
            parsed = parse_action(text, call_id_prefix=f"s{stage}t{len(steps)}")
            steps.append(Step(assistant_text=text, tool_calls=parsed.tool_calls, format=format_flags(parsed)))
            messages.append(Message(role="assistant", content=text))
            if parsed.has_answer:
                answer = parsed.answer
            continue
        blocks = _TOOL_RESPONSE.findall(text)
        if not blocks:
            messages.append(Message(role="user", content=text.rstrip("\n")))
            continue
        last = steps[-1] if steps else None
        for content in blocks:
            calls = last.tool_calls if last is not None else []
            k = len(last.tool_results) if last is not None else 0  # results so far: one per call, in order
            call = calls[k] if k < len(calls) else None
            name = call.name if call is not None else "unknown"
            cid = call.call_id if call is not None else f"s{stage}t{max(len(steps) - 1, 0)}r{k}"
            ids, err = observed_ids(name, content)
            res = ToolResult(call_id=cid, name=name, content=content, returned_ids=ids, error=err)
            if last is not None:
                last.tool_results.append(res)
            messages.append(Message(role="tool", content=content, name=name, tool_call_id=cid))
    traj = Trajectory(
        task_id=grpo_task_id(d) or "",
        stage=stage,
        messages=messages,
        steps=steps,
        final_answer=answer,
        termination="answered" if answer is not None else "running",
    )
    if answer is not None and stage == 1:
        prefs, err = parse_preferences(answer)
        traj.identified_preferences = prefs if err is None else None
    if answer is not None and stage == 2:
        traj.recommended_ids = extract_rec_ids(answer)[0]
    score = _num(d.get("score"))
    comps = {k: x for k, v in d.items() if k not in _GRPO_TEXT and (x := _num(v)) is not None}
    reward = RewardBreakdown(total=score, components=comps) if score is not None else None
    if reward is not None and task is not None and task.task_id == traj.task_id:
        from shopping_companion.rewards.tool_wise import tool_wise_reward

        try:
            r_tool, per_call = tool_wise_reward(traj, task)
        except Exception:  # noqa: BLE001 - a trajectory the reward cannot read shows no r(u)
            r_tool, per_call = None, []
        want = comps.get("R_tool")
        if r_tool is not None and want is not None and abs(r_tool - want) <= 1e-6:
            reward.per_tool_call = list(per_call)
    return traj, reward


# --------------------------------------------------------------------------- annotation


def _strip_origin(value: Any) -> str:
    from shopping_companion.envs.tools import _ORIGIN_LABEL

    s = str(value)
    for label in (*_ORIGIN_LABEL.values(), "extracted"):
        suffix = f" ({label})"
        if s.endswith(suffix):
            return s[: -len(suffix)]
    return s


def _trajectory_records(trajs: Sequence[Trajectory]) -> dict[str, dict[str, Any]]:
    """``product id -> the merged record`` from every successful product tool call, in order (a
    later ``product_view`` overrides a search hit's fields)."""
    from shopping_companion.benchmark.taxonomy import _products_in

    seen: dict[str, dict[str, Any]] = {}
    for t in trajs:
        for tr in t.tool_results:
            if tr.name not in PRODUCT_TOOLS or tr.error is not None:
                continue
            for obj in _products_in(tr.content):
                if set(obj) <= {"product_id", "error"}:
                    continue  # a product_view "errors" entry, not a record
                seen.setdefault(obj["product_id"], {}).update(obj)
                if tr.name == "product_view":
                    seen[obj["product_id"]][_VIEWED] = True
    return seen


#: Key marking a merged record that includes a ``product_view`` record (never a product field).
_VIEWED = "\x00viewed"


def _episode_records(res: EpisodeResult) -> dict[str, dict[str, Any]]:
    return _trajectory_records([s.trajectory for s in res.stages])


def record_product(rec: dict[str, Any]) -> Product | None:
    """A :class:`Product` from a record the agent was shown (a ``product_view`` record or a search
    hit): extraction notes stripped from attribute values, the source taken from the id, a search
    hit's ``category`` as the category path; None when it does not validate."""
    d: dict[str, Any] = {k: v for k, v in rec.items() if k in Product.model_fields and k != "attribute_sources"}
    pid = str(rec.get("product_id", ""))
    d.setdefault("source", pid.split(":", 1)[0] if ":" in pid else "unknown")
    if isinstance(d.get("attributes"), dict):
        d["attributes"] = {str(k): _strip_origin(v) for k, v in d["attributes"].items()}
    if "category_path" not in d and isinstance(rec.get("category"), str) and rec["category"]:
        d["category_path"] = [rec["category"]]
    try:
        return Product.model_validate(d)
    except ValidationError:
        return None


def _product_marks(task: Task | None, ids: Iterable[str], records: dict[str, dict[str, Any]]) -> dict[str, Mark]:
    from shopping_companion.rewards.tool_wise import rule_product_matcher

    ids = list(dict.fromkeys(ids))
    if task is None:
        return {i: "unknown" for i in ids}
    refs = set(task.reference_product_ids)
    marks: dict[str, Mark] = {i: ("reference" if i in refs else "other") for i in ids}
    cands = [(i, p) for i in ids if i not in refs and i in records and (p := record_product(records[i])) is not None]
    if cands:
        try:
            decisions = rule_product_matcher(task, [p for _, p in cands])
        except Exception:  # noqa: BLE001 - a record the matcher cannot read stays "other"
            decisions = [False] * len(cands)
        for (i, _), ok in zip(cands, decisions):
            if ok:
                marks[i] = "alternative"
    return marks


def _card(pid: str, mark: Mark, rec: dict[str, Any] | None, task: Task | None) -> ProductCard:
    from shopping_companion.judges.rule import is_relevant, product_satisfies

    if rec is None:
        return ProductCard(pid, mark, None, None, None, {}, [], [], seen=False)
    attrs = {str(k): _strip_origin(v) for k, v in (rec.get("attributes") or {}).items()}
    for k in ("brand", "category"):
        if rec.get(k):
            attrs.setdefault(k, str(rec[k]))
    if rec.get("category_path"):
        attrs.setdefault("category", " > ".join(map(str, rec["category_path"])))
    price = rec.get("price")
    price_s = None if price is None else f"{price} {rec.get('currency') or ''}".strip()
    matched: list[str] = []
    missing: list[str] = []
    p = record_product(rec)
    if task is not None and p is not None:
        n = task.n_products
        try:
            slots = [s for s, slot in enumerate(task.slots) if n == 1 or is_relevant(p, slot)] or list(range(n))
            for g in task.preferences:
                if n > 1 and g.slot not in slots:
                    continue
                (matched if product_satisfies(p, g) else missing).append(_pref_label(g))
        except Exception:  # noqa: BLE001 - never fail a page on a record
            matched, missing = [], []
    return ProductCard(
        product_id=pid,
        mark=mark,
        title=rec.get("title"),
        price=price_s,
        shop=rec.get("shop"),
        attributes=attrs,
        matched=matched,
        missing=missing,
        seen=True,
        viewed=bool(rec.get(_VIEWED)),
    )


def _stage_views(
    stages: Sequence[tuple[Trajectory, Verdict | None, RewardBreakdown | None]],
    task: Task | None,
    records: dict[str, dict[str, Any]],
) -> list[StageView]:
    from shopping_companion.envs.parsing import _split_thinking
    from shopping_companion.rewards.tool_wise import trajectory_tool_results

    prod_ids = [
        i for t, _, _ in stages for tr in t.tool_results if tr.name in PRODUCT_TOOLS for i in tr.returned_ids
    ] + [i for t, _, _ in stages for i in t.recommended_ids]
    pmarks = _product_marks(task, prod_ids, records)
    needles = set(task.needle_session_ids) if task else set()

    def mark(name: str, i: str) -> Mark:
        if task is None:
            return "unknown"
        if name in MEMORY_TOOLS:
            return "needle" if i in needles else "non_needle"
        if name in PRODUCT_TOOLS:
            return pmarks.get(i, "other")
        return "other"

    out: list[StageView] = []
    for traj, verdict, reward in stages:
        per_step: list[list[ToolResult]] = [
            trajectory_tool_results(Trajectory.model_construct(steps=[st])) for st in traj.steps
        ]
        n_calls = sum(len(x) for x in per_step)
        scores = list(reward.per_tool_call) if reward is not None else []
        aligned = len(scores) == n_calls
        k = 0
        turns: list[TurnView] = []
        for i, (st, results) in enumerate(zip(traj.steps, per_step)):
            calls: list[CallView] = []
            for j, tr in enumerate(results):
                args = st.tool_calls[j].arguments if j < len(st.tool_calls) else {}
                calls.append(
                    CallView(
                        name=tr.name,
                        arguments=dict(args),
                        content=tr.content,
                        error=tr.error,
                        returned=[(rid, mark(tr.name, rid)) for rid in tr.returned_ids],
                        reward=scores[k] if aligned else None,
                        call_id=tr.call_id,
                    )
                )
                k += 1
            _ok, spans, outside, _errs = _split_thinking(st.assistant_text)
            think = "\n\n".join(s.strip() for s in spans if s.strip()) or None
            turns.append(
                TurnView(
                    index=i,
                    think=think,
                    text=outside,
                    reasoning=st.reasoning,
                    finish_reason=st.finish_reason,
                    format_errors=list(st.format.errors),
                    calls=calls,
                    prompt_tokens=st.prompt_tokens,
                    completion_tokens=st.completion_tokens,
                    latency_s=st.latency_s,
                )
            )
        cards = [
            _card(pid, pmarks.get(pid, "unknown" if task is None else "other"), records.get(pid), task)
            for pid in dict.fromkeys(traj.recommended_ids)
        ]
        out.append(
            StageView(
                stage=traj.stage,
                termination=traj.termination,
                verdict=verdict,
                reward=reward,
                turns=turns,
                recommended=cards,
                identified=traj.identified_preferences,
                final_answer=traj.final_answer,
                messages=list(traj.messages),
            )
        )
    return out


# --------------------------------------------------------------------------- discovery


@dataclass
class _Found:
    """A discovered run file; ``root``: the resolved directory it was found in (its file, and the
    side files read beside it, must resolve inside it)."""

    path: Path
    kind: RunKind
    run_id: str
    name: str
    root: Path | None = None


def _looks_grpo(p: Path) -> bool:
    """The first non-blank line of ``p`` is a JSON object with ``input``, ``output`` and ``score``."""
    d = _first_line(p, None)
    return isinstance(d, dict) and {"input", "output", "score"} <= d.keys()


def _sniff_kind(p: Path) -> RunKind:
    if p.name in _PRIMARY:
        return _PRIMARY[p.name]
    d = _first_line(p, None)
    if isinstance(d, dict) and {"input", "output", "score"} <= d.keys():
        return "grpo_val"
    if isinstance(d, dict) and {"trajectory", "verdict"} <= d.keys():
        return "sft_kept"
    return "eval"


def _check_run_file(target: Path) -> None:
    """Refuse an explicitly given file that is not a run file: it must be a regular ``.jsonl``
    file named ``results.jsonl``, ``rollouts.jsonl``, ``kept.jsonl`` or ``<step>.jsonl``, or one
    whose first non-blank line is a JSON object. Raises ``ConfigError`` naming the path."""
    kinds = "results.jsonl, rollouts.jsonl, kept.jsonl, <step>.jsonl, or a .jsonl file of JSON objects"
    if not target.name.endswith(".jsonl"):
        raise ConfigError(f"{target}: not a run file (a run file is {kinds}; or give a run or runs directory)")
    if target.name in _PRIMARY or _STEP_FILE.match(target.name):
        return
    if not isinstance(_first_line(target, None), dict):
        raise ConfigError(f"{target}: not a run file: its first line is not a JSON object (a run file is {kinds})")


def _run_files(d: Path, root: Path) -> list[tuple[Path, RunKind]]:
    """Run files directly in directory ``d`` (no symlink resolving outside ``root``)."""
    out: list[tuple[Path, RunKind]] = []
    try:
        entries = sorted(os.scandir(d), key=lambda e: e.name)
    except OSError:
        return out
    steps: list[Path] = []
    for e in entries:
        if ".stale-" in e.name or not e.name.endswith(".jsonl"):
            continue
        p = Path(e.path)
        try:
            if not p.is_file() or (e.is_symlink() and not p.resolve().is_relative_to(root)):
                continue
        except OSError:
            continue
        if e.name in _PRIMARY:
            out.append((p, _PRIMARY[e.name]))
        elif _STEP_FILE.match(e.name):
            steps.append(p)
    order = list(_PRIMARY.values())
    out.sort(key=lambda x: order.index(x[1]))
    out += [(p, "grpo_val") for p in sorted(steps, key=lambda p: int(p.stem)) if _looks_grpo(p)]
    return out


def _walk(target: Path, root: Path, base_id: str | None, depth: int, seen: set[Path]) -> list[_Found]:
    """Runs in ``target`` and below (``depth`` levels left); ``base_id``: the id of ``target``
    itself (None: the searched root, whose own runs take ``root_name``)."""
    found: list[_Found] = []
    try:
        real = target.resolve()
    except OSError:
        return found
    if real in seen:
        return found
    seen.add(real)
    files = _run_files(target, root)
    dir_id = base_id if base_id is not None else _segment(target.name)
    for n, (p, kind) in enumerate(files):
        primary = n == 0 and kind != "grpo_val"
        rid = dir_id if primary else f"{dir_id}/{_segment(p.name)}"
        name = target.name if primary else f"{target.name}/{p.name}"
        found.append(_Found(p, kind, rid, name, root))
    if depth <= 0:
        return found
    try:
        subdirs = sorted((e for e in os.scandir(target) if e.is_dir()), key=lambda e: e.name)
    except OSError:
        return found
    for e in subdirs:
        if e.name.startswith(".") or e.name == "__pycache__":
            continue
        sub = Path(e.path)
        try:
            if e.is_symlink() and not sub.resolve().is_relative_to(root):
                continue
        except OSError:
            continue
        child_id = _segment(e.name) if base_id is None else f"{base_id}/{_segment(e.name)}"
        found += _walk(sub, root, child_id, depth - 1, seen)
    return found


def _discover(target: Path) -> list[_Found]:
    if not target.exists():
        raise ConfigError(f"{target}: does not exist (give a runs directory, a run directory or a run file)")
    if not target.is_file() and not target.is_dir():
        raise ConfigError(
            f"{target}: neither a regular file nor a directory (give a runs directory, a run directory or a run file)"
        )
    if target.is_file():
        _check_run_file(target)
        kind = _sniff_kind(target)
        parent = _segment(target.resolve().parent.name)
        primary = target.name in ("results.jsonl", "rollouts.jsonl")
        rid = parent if primary else f"{parent}/{_segment(target.name)}"
        name = target.parent.name if primary else f"{target.parent.name}/{target.name}"
        return [_Found(target, kind, rid, name, target.resolve().parent)]
    root = target.resolve()
    own = _run_files(target, root)
    if own:  # a run directory given itself: its runs are named after it, runs below it after their path
        found = _walk(target, root, _segment(target.resolve().name), MAX_DEPTH, set())
    else:
        found = []
        seen: set[Path] = {root}
        try:
            subdirs = sorted((e for e in os.scandir(target) if e.is_dir()), key=lambda e: e.name)
        except OSError as ex:
            raise ConfigError(f"{target}: cannot be read ({ex.strerror})") from None
        for e in subdirs:
            if e.name.startswith(".") or e.name == "__pycache__":
                continue
            sub = Path(e.path)
            if e.is_symlink() and not sub.resolve().is_relative_to(root):
                continue
            found += _walk(sub, root, _segment(e.name), MAX_DEPTH - 1, seen)
    return found


class RunCatalog:
    """Every run under the given targets (module docstring: kinds, ids).

    ``targets``: runs directories (searched recursively, depth <= :data:`MAX_DEPTH`, symlinks that
    resolve outside the target skipped), run directories, or run files. Raises
    :class:`~shopping_companion.errors.ConfigError` naming the path when a target does not exist
    or holds no run. Thread-safe; indexes are built on first use and refreshed incrementally.
    ``background_taxonomy``: classify failures of runs without ``taxonomy.jsonl`` in a background
    thread per run (off: only the rows a page shows, or :meth:`RunIndex.classify_pending`).
    """

    def __init__(self, targets: Sequence[Path | str], *, background_taxonomy: bool = True) -> None:
        if not targets:
            raise ConfigError("no runs given: name a runs directory, a run directory or a run file")
        self.targets = [Path(t) for t in targets]
        self.background_taxonomy = background_taxonomy
        self._lock = threading.RLock()
        self._ids: dict[str, _Found] = {}
        self._by_path: dict[Path, str] = {}
        self._indexes: dict[str, RunIndex] = {}
        self._runs_cache: tuple[float, tuple, list[RunSummary]] | None = None
        for t in self.targets:
            found = _discover(t)
            if not found:
                raise ConfigError(
                    f"{t}: holds no run (no results.jsonl, rollouts.jsonl, kept.jsonl or GRPO validation "
                    f"<step>.jsonl within {MAX_DEPTH} levels)"
                )
            self._register(found)

    def _register(self, found: Iterable[_Found]) -> None:
        for f in found:
            try:
                key = f.path.resolve()
            except OSError:
                continue
            if key in self._by_path:
                continue
            rid, n = f.run_id, 2
            while rid in self._ids:
                rid = f"{f.run_id}-{n}"
                n += 1
            f.run_id = rid
            self._ids[rid] = f
            self._by_path[key] = rid

    def _rediscover(self) -> None:
        for t in self.targets:
            try:
                self._register(_discover(t))
            except ConfigError:
                continue

    def run_ids(self) -> list[str]:
        """Every known run id, in discovery order (no indexing)."""
        with self._lock:
            return list(self._ids)

    def _stamp(self) -> tuple:
        """What a cached :meth:`runs` answer depends on: the modification time of every target and
        the size, modification time and inode of every known run file (one ``stat`` each)."""
        out: list[tuple] = []
        for p in [*self.targets, *(f.path for f in self._ids.values())]:
            try:
                st = os.stat(p)
                out.append((st.st_mtime_ns, st.st_size, st.st_ino))
            except OSError:
                out.append(None)
        return tuple(out)

    def runs(self) -> list[RunSummary]:
        """Summaries of every run (new runs are discovered; each index is refreshed; runs whose
        file disappeared are left out). Within :data:`RUNS_CACHE_S` seconds of the last call, and
        while no target and no run file changed (:meth:`_stamp`), the last answer is returned
        without walking the targets again (a new run nested below a target shows up after at most
        that long; a changed run file, or a new run directly in a target, at once)."""
        with self._lock:
            now = time.monotonic()
            cached = self._runs_cache
            stamp = self._stamp() if cached is not None and now - cached[0] < RUNS_CACHE_S else None
            if cached is not None and stamp == cached[1]:
                return list(cached[2])
            self._rediscover()
            started, stamp = time.monotonic(), self._stamp()  # before reading: a change meanwhile shows next time
            out = []
            for rid, f in self._ids.items():
                if not f.path.exists():
                    continue
                out.append(self.get(rid).summary)
            self._runs_cache = (started, stamp, out)
            return list(out)

    def get(self, run_id: str) -> RunIndex:
        """The refreshed index of ``run_id``; KeyError for an id that names no discovered run."""
        with self._lock:
            if run_id not in self._ids:
                self._rediscover()
            f = self._ids[run_id]
            idx = self._indexes.get(run_id)
            if idx is None:
                idx = self._indexes[run_id] = RunIndex(
                    run_id, f.kind, f.path, f.name, background_taxonomy=self.background_taxonomy, root=f.root
                )
            else:
                idx.refresh()
            return idx


# compare() lives in viewer/compare.py (it needs scipy); re-exported here as the contract names it.
from shopping_companion.viewer.compare import Comparison, MetricDelta, TaskPair, compare  # noqa: E402
