"""The view models of :mod:`shopping_companion.viewer`: what a page shows of a run, a line and an
episode (plain dataclasses, no file access), and the names of their kinds and statuses."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, get_args

from shopping_companion.types import EpisodeResult, Message, Preference, RewardBreakdown, Task, Verdict

__all__ = [
    "RunKind",
    "Mark",
    "RowStatus",
    "ROW_STATUSES",
    "SORT_FIELDS",
    "MAX_LIMIT",
    "RAW_CAP",
    "RunSummary",
    "EpisodeRow",
    "Page",
    "CallView",
    "TurnView",
    "ProductCard",
    "StageView",
    "EpisodeView",
]

RunKind = Literal["eval", "sft_rollouts", "sft_kept", "grpo_val"]
#: ``unknown``: the task (benchmark) is not available, so the id cannot be classified.
Mark = Literal["needle", "non_needle", "reference", "alternative", "other", "unknown"]
RowStatus = Literal["ok", "error", "unreadable", "foreign", "torn", "superseded"]
#: Every :data:`RowStatus`, in that order.
ROW_STATUSES: tuple[str, ...] = get_args(RowStatus)

#: Fields :meth:`~shopping_companion.viewer.index.RunIndex.query` can sort by.
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
#: Largest page size of :meth:`~shopping_companion.viewer.index.RunIndex.query`.
MAX_LIMIT = 500
#: Characters of a raw line kept in :attr:`EpisodeView.raw`.
RAW_CAP = 200_000


# --------------------------------------------------------------------------- records


@dataclass
class RunSummary:
    """One run on the runs page. ``acc`` / ``succ`` in [0, 1] (None: nothing scored);
    ``pass_hat_k``: k -> pass^k of Succ (trials grouped by strategy and task); ``components``: mean
    reward component over scored stages, keyed ``s<stage>.<name>`` (``s1.R_z``, ``s2.total``);
    ``updated``: ISO-8601 UTC modification time of the run file; ``live``: a writer holds a lock on
    it, or it changed in the last :data:`~shopping_companion.viewer.files.LIVE_WINDOW_S` seconds and no
    ``summary.json`` beside it is as new or newer (a finished run writes one). ``n_episodes``: final episodes
    (one per result key, errored included); ``n_unreadable``: unreadable and foreign lines.
    ``problem``: None when the run file can be read; else one line saying why it cannot (not a
    regular file, resolves outside the directory the run was found in, open or read failed; the
    run then shows no rows and :class:`~shopping_companion.viewer.files.RunUnreadableError` is raised when a line is
    opened)."""

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
    component (scored lines only). ``ability``: the task's memory abilities, comma-joined
    (``untagged`` when it records none); ``stress``: its stress variant (``original`` when none).
    """

    line: int
    status: RowStatus
    problem: str | None
    task_id: str | None = None
    task_type: str | None = None
    source: str | None = None
    category: str | None = None
    ability: str | None = None
    stress: str | None = None
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
    """One page of :meth:`~shopping_companion.viewer.index.RunIndex.query`: ``rows`` from ``offset`` (``total`` rows
    matched). ``unclassified``: scored failures of the run whose taxonomy class is not known yet (being
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
