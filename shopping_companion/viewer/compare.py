"""Comparing two runs episode by episode: success transitions and paired bootstrap CIs.

Episodes are paired by ``(task_id, trial, strategy)`` over the final, scored episodes of each run
(:meth:`~shopping_companion.viewer.index.RunIndex.final_rows`). For every metric the mean of the
per-pair difference ``b - a`` gets a 95% confidence interval from :func:`scipy.stats.bootstrap`
(BCa; the percentile method when BCa cannot be computed, e.g. almost constant differences;
``[delta, delta]`` when every difference is equal or there is a single pair), with a seeded
generator so a page shows the same interval every time.

With one pair per task the pairs are resampled (``paired=True``). When some task has several pairs
(several trials or strategies), the pairs of one task are not independent, so the bootstrap
resamples *tasks* and keeps each task's pairs together (a cluster bootstrap: the statistic is the
pooled mean ``sum of differences / number of pairs`` over the drawn tasks, so ``delta`` is still
the mean over all pairs); :attr:`MetricDelta.method` then starts with ``cluster``.

The metrics are the episode-level ones of :data:`COMPARED_METRICS` (named as every page names them,
:mod:`~shopping_companion.viewer.labels`: R1 / R2 the outcome rewards, "S1 total" / "S2 total" the
stage totals), then every reward component the runs log per stage (``s1 R_tool``, ``s2 f_rec``,
a custom rubric member such as ``s2 few_turns``: the keys of :attr:`EpisodeRow.components`) that
both runs have, with the same bootstrap. A component only one run logs is listed in
:attr:`Comparison.components_only_a` / :attr:`Comparison.components_only_b`, never dropped silently.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Callable

from shopping_companion.viewer.labels import HELP, MEAN_HELP, component_help, stage_total_help

if TYPE_CHECKING:
    from shopping_companion.viewer.index import RunIndex
    from shopping_companion.viewer.models import EpisodeRow, RunSummary

__all__ = [
    "COMPARED_METRICS",
    "COUNT_COMPONENTS",
    "COUNT_METRICS",
    "Comparison",
    "MetricDelta",
    "TaskPair",
    "cluster_bootstrap_ci",
    "compare",
    "component_label",
    "compared_components",
    "paired_bootstrap_ci",
]

#: ``(metric name, EpisodeRow attribute)`` of the episode-level metrics, in the order
#: :attr:`Comparison.deltas` lists them (before the per-stage components). R1 / R2: the outcome
#: rewards (Eqs. 6-7); S1 / S2 total: the stage totals under each run's rubric.
COMPARED_METRICS: tuple[tuple[str, str], ...] = (
    ("Succ", "success"),
    ("Acc", "acc"),
    ("R1", "r1"),
    ("R2", "r2"),
    ("S1 total", "stage1_total"),
    ("S2 total", "stage2_total"),
    ("R_tool", "r_tool"),
    ("R_fmt", "r_fmt"),
    ("turns", "turns"),
    ("tool_calls", "tool_calls"),
)
_METRIC_HELP = {**HELP, **MEAN_HELP, "S1 total": stage_total_help(1), "S2 total": stage_total_help(2)}
#: Metrics that are counts per episode (their means are shown with fewer decimals).
COUNT_METRICS = frozenset({"turns", "tool_calls"})
#: Reward components that are counts (shown like :data:`COUNT_METRICS`).
COUNT_COMPONENTS = frozenset({"n_tool_calls", "num_turns", "tool_semantic_calls", "tool_semantic_matched"})
#: Per-stage components already compared as an episode-level metric (R1 / R2 and the stage totals
#: of :data:`COMPARED_METRICS`) or not a reward (``stage``), by stage prefix.
_COVERED = {"s1": frozenset({"R_z", "R1", "total", "stage"}), "s2": frozenset({"R_z", "R2", "R1", "total", "stage"})}
#: Components listed first within a stage, the rest follow by name.
_COMPONENT_HEAD = ("R_tool", "R_fmt")


@dataclass
class TaskPair:
    """One paired episode: the same task, trial and strategy in both runs, and its line in each."""

    task_id: str
    trial: int
    strategy: str
    line_a: int
    line_b: int


@dataclass
class MetricDelta:
    """``metric``'s mean in run a and run b over the ``n`` pairs where both have a value, the mean
    paired difference ``delta`` = mean(b - a) and its 95% bootstrap CI ``[ci_low, ci_high]``.
    Succ is 0/1 per episode (its means are success rates); turns and tool_calls are counts.
    ``n_tasks``: distinct tasks among the ``n`` pairs; ``method``: ``BCa``, ``percentile`` or
    ``exact``, prefixed ``cluster`` when tasks (not pairs) were resampled (module docstring)."""

    metric: str
    a: float
    b: float
    delta: float
    ci_low: float
    ci_high: float
    n: int
    method: str = "BCa"
    n_tasks: int = 0
    #: ``main`` (an episode-level metric of :data:`COMPARED_METRICS`) or ``component`` (a
    #: per-stage reward component, :attr:`key` ``s<stage>.<name>``)
    group: str = "main"
    #: the EpisodeRow attribute or the component key the values came from
    key: str = ""
    #: what the number is (the row's tooltip)
    help: str = ""
    #: a count per episode (its means are shown with fewer decimals)
    count: bool = False

    @property
    def clustered(self) -> bool:
        """The CI comes from resampling tasks with all their pairs (several pairs per task)."""
        return self.method.startswith("cluster")


@dataclass
class Comparison:
    """Two runs compared. ``transitions``: ``won`` (b succeeds where a fails), ``lost`` (the
    reverse), ``both``, ``neither``, each a list of :class:`TaskPair`; ``same_benchmark``: both runs
    read the same tasks (same ``tasks.jsonl`` content, or the same declared benchmark when one is
    not found); ``only_a`` / ``only_b``: final scored episodes without a partner.
    ``components_only_a`` / ``components_only_b``: labels of the reward components (``s2 few_turns``)
    that only run a / only run b logs (not compared); ``components_unpaired``: components both runs
    log but no pair has in both (no delta)."""

    a: RunSummary
    b: RunSummary
    same_benchmark: bool
    n_pairs: int
    transitions: dict[str, list[TaskPair]]
    deltas: list[MetricDelta]
    only_a: int = 0
    only_b: int = 0
    notes: list[str] = field(default_factory=list)
    components_only_a: list[str] = field(default_factory=list)
    components_only_b: list[str] = field(default_factory=list)
    components_unpaired: list[str] = field(default_factory=list)

    @property
    def main_deltas(self) -> list[MetricDelta]:
        """The episode-level metrics (:data:`COMPARED_METRICS`)."""
        return [d for d in self.deltas if d.group == "main"]

    @property
    def component_deltas(self) -> list[MetricDelta]:
        """The per-stage reward components both runs log."""
        return [d for d in self.deltas if d.group == "component"]

    @property
    def clustered(self) -> bool:
        """Some metric's CI resampled tasks rather than pairs (a task has several pairs)."""
        return any(d.clustered for d in self.deltas)


def paired_bootstrap_ci(
    a: list[float], b: list[float], *, n_boot: int = 2000, seed: int = 0, confidence: float = 0.95
) -> tuple[float, float, str]:
    """``(low, high, method)``: the bootstrap CI of mean(b - a) over paired values (equal lengths
    >= 1). ``method``: ``BCa``, ``percentile`` (BCa failed or gave NaN) or ``exact`` (all
    differences equal, or one pair: the interval is the point). Raises ``ValueError`` for unequal
    or empty inputs and ``n_boot`` < 1."""
    import numpy as np

    if len(a) != len(b) or not a:
        raise ValueError(f"a, b: need two equally long non-empty lists, got {len(a)} and {len(b)}")
    if n_boot < 1:
        raise ValueError(f"n_boot: must be >= 1, got {n_boot}")
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    d = y - x
    if len(d) < 2 or np.all(d == d[0]):
        m = float(d.mean())
        return m, m, "exact"

    def stat(xa, yb, axis=-1):
        return np.mean(yb - xa, axis=axis)

    found = _scipy_bootstrap((x, y), stat, n_boot=n_boot, seed=seed, confidence=confidence)
    if found is not None:
        return found
    m = float(d.mean())
    return m, m, "exact"


def _scipy_bootstrap(
    data: tuple[Any, Any], stat: Callable[..., Any], *, n_boot: int, seed: int, confidence: float, label: str = ""
) -> tuple[float, float, str] | None:
    """``scipy.stats.bootstrap`` over the paired samples ``data`` with ``stat``: BCa, else the
    percentile method when BCa fails or gives a non-finite bound; ``None`` when both fail. The
    method name is prefixed with ``label``."""
    import numpy as np
    from scipy import stats

    for method in ("BCa", "percentile"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                res = stats.bootstrap(
                    data,
                    stat,
                    paired=True,
                    vectorized=True,
                    n_resamples=n_boot,
                    confidence_level=confidence,
                    method=method,
                    rng=np.random.default_rng(seed),
                )
            except (ValueError, FloatingPointError):
                continue
        lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
        if math.isfinite(lo) and math.isfinite(hi):
            return lo, hi, label + method
    return None


def cluster_bootstrap_ci(
    groups: Sequence[Sequence[float]], *, n_boot: int = 2000, seed: int = 0, confidence: float = 0.95
) -> tuple[float, float, str]:
    """``(low, high, method)``: the cluster bootstrap CI of the pooled mean of paired differences
    ``groups`` (one non-empty list of ``b - a`` per task; >= 1 task). Tasks are resampled with
    replacement, each with all its differences; the statistic is ``sum / count`` over the drawn
    tasks. ``method``: ``cluster BCa``, ``cluster percentile``, or ``exact`` (every difference
    equal, or one task). Raises ``ValueError`` for no group, an empty group or ``n_boot`` < 1."""
    import numpy as np

    if not groups or any(len(g) == 0 for g in groups):
        raise ValueError("groups: need at least one task, each with at least one difference")
    if n_boot < 1:
        raise ValueError(f"n_boot: must be >= 1, got {n_boot}")
    sums = np.asarray([float(sum(g)) for g in groups])
    counts = np.asarray([float(len(g)) for g in groups])
    flat = np.asarray([float(x) for g in groups for x in g])
    m = float(flat.mean())
    if len(groups) < 2 or np.all(flat == flat[0]):
        return m, m, "exact"

    def stat(s, c, axis=-1):
        return np.sum(s, axis=axis) / np.sum(c, axis=axis)

    found = _scipy_bootstrap((sums, counts), stat, n_boot=n_boot, seed=seed, confidence=confidence, label="cluster ")
    return found if found is not None else (m, m, "exact")


def _value(row: EpisodeRow, attr: str) -> float | None:
    v = getattr(row, attr)
    if v is None:
        return None
    return float(v)


def _component(row: EpisodeRow, key: str) -> float | None:
    v = row.components.get(key)
    return None if v is None else float(v)


def component_label(key: str) -> str:
    """How the compare page names the component ``key`` (``s2.few_turns`` -> ``s2 few_turns``;
    a key without a stage prefix is its name)."""
    stage, _, name = key.rpartition(".")
    return f"{stage} {name}" if stage else name


def _component_order(key: str) -> tuple[str, int, str]:
    stage, _, name = key.rpartition(".")
    head = _COMPONENT_HEAD.index(name) if name in _COMPONENT_HEAD else len(_COMPONENT_HEAD)
    return stage, head, name


def compared_components(rows: list[EpisodeRow]) -> set[str]:
    """The component keys of ``rows`` the compare page compares: every ``s<stage>.<name>`` (or
    bare ``<name>``) of :attr:`EpisodeRow.components`, without those already compared as an
    episode-level metric (R1 / R2, the stage totals) and ``stage``. A stage's ``R_z`` is R1 / R2
    and left out, unless some row logs an ``R_z`` that differs from its ``R1`` / ``R2`` (a custom
    member keyed ``R_z``)."""
    out: set[str] = set()
    for r in rows:
        for key, value in r.components.items():
            stage, _, name = key.rpartition(".")
            if name in _COVERED.get(stage, frozenset({"stage"})):
                own = r.components.get(f"{stage}.R{stage[1:]}")
                if not (name == "R_z" and own is not None and abs(own - value) > 1e-9):
                    continue
            out.add(key)
    return out


def _delta(
    name: str, pairs: list[tuple[str, float | None, float | None]], *, n_boot: int, seed: int, **extra: Any
) -> MetricDelta | None:
    """The :class:`MetricDelta` of ``(task id, value in a, value in b)`` pairs (those with both
    values); None when no pair has both."""
    va: list[float] = []
    vb: list[float] = []
    by_task: dict[str, list[float]] = {}
    for task, x, y in pairs:
        if x is not None and y is not None:
            va.append(x)
            vb.append(y)
            by_task.setdefault(task, []).append(y - x)
    if not va:
        return None
    if len(by_task) < len(va):  # some task has several pairs: resample tasks
        lo, hi, method = cluster_bootstrap_ci(list(by_task.values()), n_boot=n_boot, seed=seed)
    else:
        lo, hi, method = paired_bootstrap_ci(va, vb, n_boot=n_boot, seed=seed)
    ma, mb = sum(va) / len(va), sum(vb) / len(vb)
    return MetricDelta(name, ma, mb, mb - ma, lo, hi, len(va), method, len(by_task), **extra)


def compare(a: RunIndex, b: RunIndex, *, n_boot: int = 2000, seed: int = 0) -> Comparison:
    """Compare run ``a`` with run ``b`` (module docstring). Raises ``ValueError`` when no final
    scored episode of one run has a partner in the other (different benchmarks, strategies or
    trials), or for ``n_boot`` < 1."""
    if n_boot < 1:
        raise ValueError(f"n_boot: must be >= 1, got {n_boot}")
    rows_a = {(r.task_id, r.trial, r.strategy): r for r in a.final_rows() if r.task_id is not None}
    rows_b = {(r.task_id, r.trial, r.strategy): r for r in b.final_rows() if r.task_id is not None}
    keys = [k for k in rows_a if k in rows_b]
    if not keys:
        raise ValueError(
            f"runs {a.run_id!r} and {b.run_id!r} share no scored episode (pairs are matched by task id, trial "
            "and strategy); compare runs of the same benchmark"
        )
    transitions: dict[str, list[TaskPair]] = {"won": [], "lost": [], "both": [], "neither": []}
    for k in keys:
        ra, rb = rows_a[k], rows_b[k]
        pair = TaskPair(task_id=k[0] or "", trial=k[1] or 0, strategy=k[2] or "", line_a=ra.line, line_b=rb.line)
        sa, sb = bool(ra.success), bool(rb.success)
        transitions["both" if sa and sb else "won" if sb else "lost" if sa else "neither"].append(pair)
    deltas: list[MetricDelta] = []
    for name, attr in COMPARED_METRICS:
        pairs = [(k[0] or "", _value(rows_a[k], attr), _value(rows_b[k], attr)) for k in keys]
        d = _delta(
            name,
            pairs,
            n_boot=n_boot,
            seed=seed,
            key=attr,
            help=_METRIC_HELP.get(name, ""),
            count=name in COUNT_METRICS,
        )
        if d is not None:
            deltas.append(d)
    comps_a, comps_b = compared_components(list(rows_a.values())), compared_components(list(rows_b.values()))
    unpaired: list[str] = []
    for key in sorted(comps_a & comps_b, key=_component_order):
        stage, _, name = key.rpartition(".")
        pairs = [(k[0] or "", _component(rows_a[k], key), _component(rows_b[k], key)) for k in keys]
        where = f" (stage {stage[1:]})" if stage else ""
        d = _delta(
            component_label(key),
            pairs,
            n_boot=n_boot,
            seed=seed,
            group="component",
            key=key,
            help=component_help(name) + where,
            count=name in COUNT_COMPONENTS,
        )
        if d is None:
            unpaired.append(component_label(key))
        else:
            deltas.append(d)
    return Comparison(
        a=a.summary,
        b=b.summary,
        same_benchmark=_same_benchmark(a, b),
        n_pairs=len(keys),
        transitions=transitions,
        deltas=deltas,
        only_a=len(rows_a) - len(keys),
        only_b=len(rows_b) - len(keys),
        components_only_a=[component_label(k) for k in sorted(comps_a - comps_b, key=_component_order)],
        components_only_b=[component_label(k) for k in sorted(comps_b - comps_a, key=_component_order)],
        components_unpaired=unpaired,
    )


def _same_benchmark(a: RunIndex, b: RunIndex) -> bool:
    da, db = a.tasks_digest, b.tasks_digest
    if da is not None and db is not None:
        return da == db
    sa, sb = a.summary.benchmark, b.summary.benchmark
    return sa is not None and sa == sb
