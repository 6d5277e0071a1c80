"""Evaluation metrics over :class:`~shopping_companion.types.EpisodeResult` records.

Everything here is a pure function of the results (no I/O except the PNG plot), so the numbers of
a report can be recomputed from ``results.jsonl`` alone.

Which episodes count (:func:`scored`)
    An episode counts toward every metric iff it finished without a backend error
    (``error is None``) and no stage verdict is marked ``failed`` by its judge. Errored and
    judge-failed episodes are counted apart and never scored as 0.

Strategies (paper §6.3, Table 3)
    A strategy is an environment mode plus a user-simulator hint mode. Its canonical name
    (:func:`strategy_name`) is ``"two_stage:none" | "two_stage:low" | "two_stage:high"`` for the
    two-stage variants and the bare mode (``"oracle"``, ``"one_stage"``) when the hint is
    ``"none"``; any other combination is ``"<mode>:<hint>"``.

Acc and Succ (paper §4)
    Acc of an episode is ``EpisodeResult.acc`` (m1 / F of the stage-1 verdict — of the
    ``preference_verdict`` in ``one_stage`` mode —, in [0, 1]); it is not applicable to ``oracle``
    episodes, which are left out of Acc means (:func:`acc_applies`). Succ is
    ``EpisodeResult.succ`` (Eq. 5, 0 or 1). Per task type they are episode means; "avg" is the
    unweighted mean of the per-type means (the paper's "Avg." column); "all" is the mean over
    all scored episodes (equal to "avg" when the types have equally many episodes).

Abilities and stress variants
    :func:`group_table` gives Acc, Succ and pass^k per strategy and per task group: the memory
    abilities of ``Task.abilities`` (:func:`task_abilities`) or the stress variant of ``Task.stress``
    (:func:`task_stress`); :func:`stress_drops` is each variant's Succ minus the original tasks'.

pass@k and pass^k (k trials per task)
    For a task with n scored trials of which c succeeded, ``pass@k = 1 - C(n-c, k) / C(n, k)``
    (probability that at least one of k trials drawn without replacement succeeds) and
    ``pass^k = C(c, k) / C(n, k)`` (probability that all k succeed). Reported values are means
    over tasks; tasks with n < k are left out of that k and counted in ``n_tasks_short``.

Behaviour (paper §6.3, Table 4) — per scored episode, then averaged
    turns: assistant turns summed over the episode's stages; tool uses: tool calls the agent
    issued (every :class:`~shopping_companion.types.ToolResult`, so rejected and malformed calls
    count, as in R_tool's |U(τ)|); response length: the sum over assistant turns of
    ``completion_tokens`` (episodes whose backend did not report tokens are left out of this
    mean and counted) and, always available, of characters of the assistant text; tool-call
    rate: fraction of assistant turns that issued at least one tool call.

Per-turn tool calls (App. F, Figure 3 left)
    Turn t of an episode is its t-th assistant turn counting from 0 across stages in order
    (stage-1 turns, then stage-2 turns), as in the paper's figure, which shows memory tools in the
    first turns and the product search–view loop afterwards. Counts are summed over episodes.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from shopping_companion.envs.tools import MEMORY_TOOLS, PRODUCT_TOOLS
from shopping_companion.types import EpisodeResult, Task

__all__ = [
    "STRATEGY_LABELS",
    "TASK_TYPE_LABELS",
    "strategy_name",
    "strategy_of",
    "scored",
    "pass_at_k",
    "pass_hat_k",
    "pass_k_table",
    "acc_succ",
    "acc_applies",
    "strategy_table",
    "behaviour",
    "tool_calls_per_turn",
    "plot_tool_calls_per_turn",
    "succ_by_source",
    "task_source",
    "task_abilities",
    "task_stress",
    "group_table",
    "stage1_success",
    "stress_drops",
]

#: Display names of the strategies of Table 3.
STRATEGY_LABELS: dict[str, str] = {
    "oracle": "Oracle",
    "one_stage": "One-Stage",
    "two_stage:none": "Two-Stage (No Hint)",
    "two_stage:low": "Two-Stage (Low Hint)",
    "two_stage:high": "Two-Stage (High Hint)",
}
TASK_TYPE_LABELS: dict[str, str] = {"single": "Single", "addon": "Add-on"}
TOOL_ORDER = (*MEMORY_TOOLS, *PRODUCT_TOOLS, "invalid_tool_call")


def strategy_name(mode: str, hint: str = "none") -> str:
    """Canonical strategy name: ``two_stage:<hint>``, bare ``mode`` when hint is ``none``,
    else ``<mode>:<hint>``."""
    if mode == "two_stage" or (hint or "none") != "none":
        return f"{mode}:{hint or 'none'}"
    return mode


def strategy_of(r: EpisodeResult) -> str:
    return strategy_name(r.mode, r.hint)


def scored(results: Iterable[EpisodeResult]) -> list[EpisodeResult]:
    """Episodes that count: no backend error and no failed judge verdict."""
    return [r for r in results if r.error is None and not any(s.verdict.failed for s in r.stages)]


def _mean(xs: Iterable[float]) -> float | None:
    xs = list(xs)
    return statistics.fmean(xs) if xs else None


# --------------------------------------------------------------------------- pass@k / pass^k


def _check(n: int, c: int, k: int) -> None:
    if not (0 <= c <= n):
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    if not (1 <= k <= n):
        raise ValueError(f"need 1 <= k <= n, got n={n}, k={k}")


def pass_at_k(n: int, c: int, k: int) -> float:
    """``1 - C(n-c, k) / C(n, k)``: at least one of k trials (drawn from n, c correct) succeeds.

    Range [0, 1]. Raises ``ValueError`` unless ``0 <= c <= n`` and ``1 <= k <= n``.
    """
    _check(n, c, k)
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """pass^k = ``C(c, k) / C(n, k)``: all k trials (drawn from n, c correct) succeed.

    Range [0, 1]. Raises ``ValueError`` unless ``0 <= c <= n`` and ``1 <= k <= n``.
    """
    _check(n, c, k)
    return math.comb(c, k) / math.comb(n, k)


def pass_k_table(results: Iterable[EpisodeResult], ks: Sequence[int]) -> dict[str, Any]:
    """pass@k and pass^k for each k, overall and per task type, over scored episodes.

    Trials are grouped by (strategy, task_id): call it on one strategy's results (or all of them
    for a per-(strategy, task) pooling). Returns ``{"k": {k: {"pass@k", "pass^k", "n_tasks",
    "n_tasks_short", "by_task_type": {tt: {"pass@k", "pass^k", "n_tasks"}}}}, "trials": {min, max}}``;
    a value is None when no task has k scored trials.
    """
    groups: dict[tuple[str, str], list[bool]] = defaultdict(list)
    types: dict[tuple[str, str], str] = {}
    for r in scored(results):
        key = (strategy_of(r), r.task_id)
        groups[key].append(bool(r.succ))
        types[key] = r.task_type
    out: dict[str, Any] = {
        "k": {},
        "trials": {
            "min": min((len(v) for v in groups.values()), default=0),
            "max": max((len(v) for v in groups.values()), default=0),
        },
    }
    for k in sorted(set(int(k) for k in ks)):
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        at: list[float] = []
        hat: list[float] = []
        by_type: dict[str, dict[str, list[float]]] = defaultdict(lambda: {"at": [], "hat": []})
        short = 0
        for key, s in groups.items():
            n, c = len(s), sum(s)
            if n < k:
                short += 1
                continue
            a, h = pass_at_k(n, c, k), pass_hat_k(n, c, k)
            at.append(a)
            hat.append(h)
            by_type[types[key]]["at"].append(a)
            by_type[types[key]]["hat"].append(h)
        out["k"][k] = {
            "pass@k": _mean(at),
            "pass^k": _mean(hat),
            "n_tasks": len(at),
            "n_tasks_short": short,
            "by_task_type": {
                tt: {"pass@k": _mean(v["at"]), "pass^k": _mean(v["hat"]), "n_tasks": len(v["at"])}
                for tt, v in sorted(by_type.items())
            },
        }
    return out


# --------------------------------------------------------------------------- Acc / Succ


def acc_succ(results: Iterable[EpisodeResult]) -> dict[str, Any]:
    """Acc and Succ per task type, their unweighted average over types, and over all episodes.

    Returns ``{"by_task_type": {tt: {"n", "acc", "succ"}}, "avg": {"acc", "succ"},
    "all": {"n", "acc", "succ"}}``; means are in [0, 1] (None when there is nothing to average).
    """
    rs = scored(results)
    by_type: dict[str, dict[str, Any]] = {}
    for tt in sorted({r.task_type for r in rs}):
        sub = [r for r in rs if r.task_type == tt]
        by_type[tt] = {
            "n": len(sub),
            "acc": _mean(r.acc for r in sub if acc_applies(r)),
            "succ": _mean(float(r.succ) for r in sub),
        }
    accs = [v["acc"] for v in by_type.values() if v["acc"] is not None]
    return {
        "by_task_type": by_type,
        "avg": {"acc": _mean(accs), "succ": _mean(v["succ"] for v in by_type.values())},
        "all": {
            "n": len(rs),
            "acc": _mean(r.acc for r in rs if acc_applies(r)),
            "succ": _mean(float(r.succ) for r in rs),
        },
    }


def acc_applies(r: EpisodeResult) -> bool:
    """Acc is not applicable to ``oracle`` episodes (the gold sessions are given; the environment
    records acc = 1.0 by construction): they are left out of every Acc mean."""
    return r.mode != "oracle"


def strategy_table(results: Iterable[EpisodeResult]) -> dict[str, dict[str, Any]]:
    """:func:`acc_succ` per strategy (Table 3 rows), in the paper's order, then any others."""
    groups: dict[str, list[EpisodeResult]] = defaultdict(list)
    for r in results:
        groups[strategy_of(r)].append(r)
    order = [s for s in STRATEGY_LABELS if s in groups] + sorted(s for s in groups if s not in STRATEGY_LABELS)
    return {s: acc_succ(groups[s]) for s in order}


# --------------------------------------------------------------------------- behaviour


def _episode_behaviour(r: EpisodeResult) -> dict[str, Any]:
    steps = [st for s in r.stages for st in s.trajectory.steps]
    tokens = [st.completion_tokens for st in steps]
    return {
        "turns": len(steps),
        "tool_uses": sum(len(st.tool_results) for st in steps),
        "resp_tokens": sum(tokens) if steps and all(t is not None for t in tokens) else None,  # type: ignore[arg-type]
        "resp_chars": sum(len(st.assistant_text) for st in steps),
        "turns_with_tools": sum(1 for st in steps if st.tool_results),
        "by_tool": Counter(tr.name for st in steps for tr in st.tool_results),
        "by_stage_turns": {s.trajectory.stage: len(s.trajectory.steps) for s in r.stages},
    }


def behaviour(results: Iterable[EpisodeResult]) -> dict[str, Any]:
    """Table 4 behaviour means over scored episodes (definitions in the module docstring).

    Returns ``{"n", "turns", "tool_uses", "resp_tokens", "n_resp_tokens", "resp_chars",
    "tool_call_rate", "tool_uses_by_tool": {name: mean per episode}, "turns_by_stage":
    {stage: mean}}``; means are None when there are no episodes.
    """
    rs = scored(results)
    per = [_episode_behaviour(r) for r in rs]
    tok = [p["resp_tokens"] for p in per if p["resp_tokens"] is not None]
    total_turns = sum(p["turns"] for p in per)
    by_tool: Counter[str] = Counter()
    stage_turns: dict[int, list[int]] = defaultdict(list)
    for p in per:
        by_tool.update(p["by_tool"])
        for s, t in p["by_stage_turns"].items():
            stage_turns[s].append(t)
    n = len(per)
    tools = [t for t in TOOL_ORDER if t in by_tool] + sorted(t for t in by_tool if t not in TOOL_ORDER)
    return {
        "n": n,
        "turns": _mean(p["turns"] for p in per),
        "tool_uses": _mean(p["tool_uses"] for p in per),
        "resp_tokens": _mean(tok),
        "n_resp_tokens": len(tok),
        "resp_chars": _mean(p["resp_chars"] for p in per),
        "tool_call_rate": (sum(p["turns_with_tools"] for p in per) / total_turns) if total_turns else None,
        "tool_uses_by_tool": {t: by_tool[t] / n for t in tools} if n else {},
        "turns_by_stage": {f"stage{s}": statistics.fmean(v) for s, v in sorted(stage_turns.items())},
    }


# --------------------------------------------------------------------------- Figure 3


def tool_calls_per_turn(results: Iterable[EpisodeResult]) -> dict[str, list[int]]:
    """``{tool name: [count at turn 0, turn 1, ...]}`` summed over scored episodes.

    Turns are episode-level assistant-turn indices (stage 1 then stage 2, from 0). Every list
    has the same length (the longest episode); tool names follow the order memory → product →
    invalid calls. Rejected calls count under the name they were made with; malformed blocks
    count as ``invalid_tool_call``.
    """
    counts: dict[str, Counter[int]] = defaultdict(Counter)
    max_turn = -1
    for r in scored(results):
        t = 0
        for s in r.stages:
            for st in s.trajectory.steps:
                for tr in st.tool_results:
                    counts[tr.name][t] += 1
                max_turn = max(max_turn, t)
                t += 1
    names = [n for n in TOOL_ORDER if n in counts] + sorted(n for n in counts if n not in TOOL_ORDER)
    return {n: [counts[n].get(i, 0) for i in range(max_turn + 1)] for n in names}


_TOOL_COLOURS = {
    "mem_search": "#4C72B0",
    "mem_view": "#55A868",
    "product_search": "#DD8452",
    "product_view": "#C44E52",
    "invalid_tool_call": "#8C8C8C",
}


def plot_tool_calls_per_turn(results: Iterable[EpisodeResult], path: str | Path, title: str = "") -> Path | None:
    """Stacked bar chart of tool calls per turn (Figure 3, left) written as a PNG.

    Returns the path, or None (and writes nothing) when there is no tool call to plot.
    Uses matplotlib's Agg backend; never opens a window.
    """
    data = tool_calls_per_turn(results)
    if not data or not any(sum(v) for v in data.values()):
        return None
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    n_turns = len(next(iter(data.values())))
    xs = list(range(n_turns))
    fig, ax = plt.subplots(figsize=(max(6.0, 0.45 * n_turns + 2), 4.0), dpi=110)
    bottom = [0] * n_turns
    for name, ys in data.items():
        ax.bar(xs, ys, bottom=bottom, label=name, color=_TOOL_COLOURS.get(name))
        bottom = [b + y for b, y in zip(bottom, ys)]
    ax.set_xlabel("assistant turn (episode, from 0)")
    ax.set_ylabel("tool calls (sum over episodes)")
    ax.set_xticks(xs)
    ax.set_title(title or "Tool calls per turn")
    ax.legend(fontsize=8)
    fig.tight_layout()
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(p, format="png")
    plt.close(fig)
    return p


def task_source(task: Task) -> str:
    """The catalog source of a task's reference products (``"a+b"`` when they differ,
    ``"(open)"`` for a task without reference products). Product ids are ``source:id``."""
    srcs = sorted({pid.split(":", 1)[0] for pid in task.reference_product_ids if pid and ":" in pid})
    return "+".join(srcs) if srcs else "(open)"


def succ_by_source(tasks: list[Task], episodes: list[EpisodeResult]) -> dict[str, Any]:
    """Succ (stage-2 success, Eq. 5 of the paper) by source and task type.

    ``episodes``: results of one run (every trial and strategy counts as one episode; errored
    episodes are left out and counted). Returns ``{"episodes": n, "errored": n, "by_source":
    {source: {"single"|"addon"|"all": {"n", "succ"}}}}`` with ``succ`` in [0, 1]; sources in
    decreasing number of episodes, then ``"all"`` last."""
    by_id = {t.task_id: t for t in tasks}
    cells: dict[str, dict[str, list[bool]]] = defaultdict(lambda: defaultdict(list))
    errored = 0
    used = 0
    for ep in episodes:
        task = by_id.get(ep.task_id)
        if task is None:
            continue
        if ep.error is not None:
            errored += 1
            continue
        used += 1
        for src in (task_source(task), "all"):
            cells[src][task.task_type].append(bool(ep.succ))
            cells[src]["all"].append(bool(ep.succ))

    def cell(xs: list[bool]) -> dict[str, Any]:
        return {"n": len(xs), "succ": round(sum(xs) / len(xs), 4) if xs else None}

    order = sorted((s for s in cells if s != "all"), key=lambda s: (-len(cells[s]["all"]), s))
    if "all" in cells:
        order.append("all")
    return {
        "episodes": used,
        "errored": errored,
        "by_source": {s: {k: cell(cells[s][k]) for k in ("single", "addon", "all")} for s in order},
    }


# --------------------------------------------------------------------------- abilities and stress variants


def task_abilities(task: Task) -> list[str]:
    """The abilities a task tests (``Task.abilities``; ``["untagged"]`` when it records none)."""
    return list(task.abilities) or ["untagged"]


def task_stress(task: Task) -> list[str]:
    """The stress variant of a task as a one-item list (``["original"]`` for an unstressed task)."""
    return [task.stress or "original"]


def stage1_success(r: EpisodeResult) -> bool | None:
    """The stage-1 verdict's success of an episode (every gold preference found, none spurious:
    ``m1 == F`` and ``h1 == 0``; the ``preference_verdict`` in ``one_stage`` mode); None when it has
    none (``oracle``)."""
    v = next((st.verdict for st in r.stages if st.trajectory.stage == 1), None) or r.preference_verdict
    return None if v is None else bool(v.success)


def group_table(
    tasks: Mapping[str, Task],
    results: Iterable[EpisodeResult],
    groups_of: Callable[[Task], list[str]],
    ks: Sequence[int] = (1,),
) -> dict[str, dict[str, dict[str, Any]]]:
    """Acc, Succ and pass^k per strategy and task group (:func:`task_abilities` or
    :func:`task_stress`; a task in several groups counts in each), over scored episodes of tasks in
    ``tasks``. Returns ``{strategy: {group: {"n", "n_tasks", "acc", "succ", "succ1", "pass^k": {k:
    value}}}}``; Acc / Succ / ``succ1`` (:func:`stage1_success`: nothing invented, everything found —
    what abstention and ``needle_removed`` tasks test) in [0, 1] (None when nothing applies),
    pass^k as in :func:`pass_k_table` (None when no task of the group has k trials)."""
    cells: dict[str, dict[str, list[EpisodeResult]]] = defaultdict(lambda: defaultdict(list))
    for r in scored(results):
        task = tasks.get(r.task_id)
        if task is None:
            continue
        for g in groups_of(task):
            cells[strategy_of(r)][g].append(r)
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for strategy in [s for s in STRATEGY_LABELS if s in cells] + sorted(s for s in cells if s not in STRATEGY_LABELS):
        out[strategy] = {}
        for g, rs in cells[strategy].items():
            pk = pass_k_table(rs, ks)["k"]
            out[strategy][g] = {
                "n": len(rs),
                "n_tasks": len({r.task_id for r in rs}),
                "acc": _mean(r.acc for r in rs if acc_applies(r)),
                "succ": _mean(float(r.succ) for r in rs),
                "succ1": _mean(float(s) for s in map(stage1_success, rs) if s is not None),
                "pass^k": {int(k): pk[k]["pass^k"] for k in pk},
            }
    return out


def stress_drops(by_stress: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per strategy and stress variant, ``{"succ", "succ1"}``: the variant's Succ and stage-1
    success minus the original tasks' (negative = the policy drops), from :func:`group_table` with
    :func:`task_stress`; None where either is missing."""
    out: dict[str, dict[str, Any]] = {}
    for strategy, row in by_stress.items():
        base = row.get("original") or {}
        out[strategy] = {
            v: {
                m: (None if base.get(m) is None or cell.get(m) is None else round(cell[m] - base[m], 4))
                for m in ("succ", "succ1")
            }
            for v, cell in row.items()
            if v != "original"
        }
    return out
