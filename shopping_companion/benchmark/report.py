"""Reading ``results.jsonl``, aggregate metrics, the Markdown report, plots and parquet exports.

Files written next to the report by :func:`write_report` / :func:`write_parquet`:

- ``report.md``: run identity (policy, model/endpoint without credentials, judge, simulator,
  strategies, trials, seeds, package version), Acc/Succ per task type (Table 2 shape), the
  strategies table (Table 3), pass@k / pass^k, behaviour (Table 4), tool calls per turn
  (Figure 3), the error taxonomy (Table 7) with optional LLM attribution, errored episodes, reward
  components, configuration, example trajectories;
- ``tool_calls_per_turn[_<strategy>].png`` and ``error_taxonomy.png``;
- ``results.parquet`` (one row per episode) and ``results_stages.parquet`` (one row per stage).

Metric definitions are in :mod:`shopping_companion.benchmark.metrics`, taxonomy rules in
:mod:`shopping_companion.benchmark.taxonomy`.
"""

from __future__ import annotations

import json
import logging
import re
import statistics
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence


from shopping_companion import __version__
from shopping_companion.assembly.endpoints import scrub_url
from shopping_companion.markdown import markdown_table
from shopping_companion.runs import JsonlScan, scan_jsonl
from shopping_companion.types import EpisodeResult, Task

__all__ = [
    "EPISODE_ERROR_PREFIX",
    "ResultsScan",
    "scan_results",
    "read_results",
    "error_kind",
    "errors_by_kind",
    "left_out_results",
    "result_key",
    "final_results",
    "judging_summary",
    "summarize",
    "write_report",
    "write_parquet",
    "episode_rows",
    "stage_rows",
    "scrub_url",
]


logger = logging.getLogger(__name__)

#: Prefix of ``EpisodeResult.error`` for an unexpected exception inside an episode (or a result
#: line that could not be written); see :func:`error_kind`.
EPISODE_ERROR_PREFIX = "episode error: "


class ResultsScan(JsonlScan[EpisodeResult]):
    """What :func:`scan_results` found in a results file (a :class:`~shopping_companion.runs.JsonlScan`
    of :class:`EpisodeResult`).

    ``results``: every readable line, in file order. ``unreadable``: ``(line number from 1,
    reason)`` of each complete line that is not a valid :class:`EpisodeResult` (not JSON, not the
    schema). ``torn_tail``: the last line has no newline (an interrupted write; a resumed run
    cuts it off before appending) — it is not counted in ``unreadable``.
    """

    @property
    def results(self) -> list[EpisodeResult]:
        return self.records


def scan_results(path: str | Path) -> ResultsScan:
    """Read a results file line by line, keeping track of lines that cannot be read back."""
    return ResultsScan(**vars(scan_jsonl(path, EpisodeResult.model_validate_json)))


def read_results(path: str | Path) -> list[EpisodeResult]:
    """Read every complete line of a results file, in file order.

    A torn last line (no newline: an interrupted write) is ignored. Other lines that cannot be
    read back are left out with a logged warning naming their count and line numbers (use
    :func:`scan_results` to get them).
    """
    scan = scan_results(path)
    if scan.unreadable:
        logger.warning("%s: %s cannot be read back and are left out", path, scan.describe_unreadable())
    return scan.results


def error_kind(r: EpisodeResult) -> str | None:
    """The kind of an errored result: ``"episode"`` (an unexpected exception inside the episode,
    or a result that could not be written; ``error`` starts with :data:`EPISODE_ERROR_PREFIX`),
    ``"judge"`` (``error`` starts with ``judge failed``), ``"backend"`` (anything else: the backend
    failed after its retries); None when ``error`` is None."""
    if r.error is None:
        return None
    if r.error.startswith(EPISODE_ERROR_PREFIX):
        return "episode"
    if r.error.startswith("judge failed"):
        return "judge"
    return "backend"


def errors_by_kind(results: Iterable[EpisodeResult]) -> dict[str, int]:
    """Count of errored results per :func:`error_kind` (only kinds that occur)."""
    c = Counter(k for k in (error_kind(r) for r in results) if k is not None)
    return dict(sorted(c.items()))


def left_out_results(
    results: Iterable[EpisodeResult],
    benchmark_task_ids: Iterable[str],
    requested: Iterable[tuple[str, int, str, str]],
    examples: int = 5,
) -> dict[str, Any]:
    """Final results in a file whose key is not part of this run, split by why.

    ``not_in_benchmark``: the task id is not a task of the benchmark; ``not_requested``: the task is
    in the benchmark but this (task, trial, strategy) was not requested (another ``--limit``,
    ``--split``, ``--trials`` or ``--strategies``). Each holds ``{"count", "examples": [task ids]}``.
    """
    bench = set(benchmark_task_ids)
    req = set(requested)
    out: dict[str, dict[str, Any]] = {
        "not_in_benchmark": {"count": 0, "examples": []},
        "not_requested": {"count": 0, "examples": []},
    }
    for r in final_results(results):
        if result_key(r) in req:
            continue
        which = out["not_requested" if r.task_id in bench else "not_in_benchmark"]
        which["count"] += 1
        if r.task_id not in which["examples"] and len(which["examples"]) < examples:
            which["examples"].append(r.task_id)
    return out


def result_key(r: EpisodeResult) -> tuple[str, int, str, str]:
    """The resume key of a result: ``(task_id, trial, mode, hint)``."""
    return (r.task_id, r.trial, r.mode, r.hint)


def final_results(results: Iterable[EpisodeResult]) -> list[EpisodeResult]:
    """One result per key: the last one without an error, else the last errored one.

    Order: by the position of the chosen line. (A key has several lines only when errored
    episodes were retried by a resumed run.)
    """
    chosen: dict[tuple[str, int, str, str], tuple[int, EpisodeResult]] = {}
    for i, r in enumerate(results):
        k = result_key(r)
        prev = chosen.get(k)
        if prev is None or r.error is None or prev[1].error is not None:
            chosen[k] = (i, r)
    return [r for _, r in sorted(chosen.values(), key=lambda x: x[0])]


def _mean(xs: Iterable[float]) -> float | None:
    xs = list(xs)
    return statistics.fmean(xs) if xs else None


def _default_ks(results: list[EpisodeResult]) -> list[int]:
    from shopping_companion.benchmark.metrics import scored, strategy_of

    per: Counter[tuple[str, str]] = Counter((strategy_of(r), r.task_id) for r in scored(results))
    top = max(per.values(), default=1)
    ks = [k for k in (1, 2, 3, 4, 5, 8, 10, 16, 32) if k <= top]
    return sorted(set(ks + [top]))


def summarize(
    results: list[EpisodeResult],
    *,
    tasks: Mapping[str, Task] | None = None,
    ks: Sequence[int] | None = None,
    lookup: Callable[[list[str]], Mapping[str, Any]] | None = None,
    taxonomy: list[Any] | None = None,
) -> dict[str, Any]:
    """Aggregate metrics over the final result of every key (:func:`final_results`).

    Top-level ``acc`` / ``succ`` / ``by_task_type`` pool all strategies (Acc: mean m1/F, paper §4;
    Succ: fraction of stage-2 successes, Eq. 5); ``strategies`` has them per strategy (Table 3);
    ``by_source`` (with ``tasks``) has Succ by the catalog source of each task's reference products
    and task type (:func:`~shopping_companion.benchmark.metrics.succ_by_source`); ``by_ability`` and
    ``by_stress`` have Acc, Succ and pass^k per strategy and memory ability / stress variant, and
    ``stress_drops`` each variant's Succ minus the original tasks'
    (:func:`~shopping_companion.benchmark.metrics.group_table`, ``stress_drops``).
    Episodes with a backend error or a failed judge verdict are counted apart (``n_errors``,
    ``n_judge_failed``; ``errors_by_kind``: backend / judge / episode, :func:`error_kind`) and
    excluded from every metric, never scored as 0. ``ks``: the k values of
    pass@k / pass^k (default: 1, 2, 3, 4, 5, 8, … up to the number of trials). ``taxonomy``:
    precomputed :class:`~shopping_companion.benchmark.taxonomy.Classification` items (default:
    the rules applied here, with ``tasks`` and ``lookup`` when given).
    """
    from shopping_companion.benchmark import metrics as M
    from shopping_companion.benchmark import taxonomy as T
    from shopping_companion.benchmark.metrics import succ_by_source

    results = final_results(results)
    ok = M.scored(results)
    errors = [r for r in results if r.error is not None]
    judge_failed = [r for r in results if r.error is None and r not in ok]
    comp: dict[str, list[float]] = defaultdict(list)
    turns: dict[int, list[int]] = defaultdict(list)
    tool_counts: Counter[str] = Counter()
    resp_chars: list[int] = []
    term: Counter[str] = Counter()
    for r in ok:
        for st in r.stages:
            s = st.trajectory.stage
            comp[f"stage{s}.total"].append(st.reward.total)
            for k, v in st.reward.components.items():
                if k == "stage":
                    continue
                comp[f"stage{s}.{k}"].append(float(v))
            turns[s].append(len(st.trajectory.steps))
            term[f"stage{s}:{st.trajectory.termination}"] += 1
            for step in st.trajectory.steps:
                resp_chars.append(len(step.assistant_text))
                for tr in step.tool_results:
                    tool_counts[tr.name] += 1
    n = len(ok)
    pooled = M.acc_succ(ok)
    by_strategy: dict[str, list[EpisodeResult]] = defaultdict(list)
    for r in results:
        by_strategy[M.strategy_of(r)].append(r)
    strategies = M.strategy_table(results)
    ks = list(ks) if ks else _default_ks(results)
    items = taxonomy if taxonomy is not None else T.classify_failures(results, tasks, lookup)
    return {
        "n_episodes": len(results),
        "n_scored": n,
        "n_errors": len(errors),
        "n_judge_failed": len(judge_failed),
        "acc": pooled["all"]["acc"],
        "succ": pooled["all"]["succ"],
        "avg": pooled["avg"],
        "by_task_type": {
            tt: {"n": v["n"], "acc": v["acc"] or 0.0, "succ": v["succ"] or 0.0}
            for tt, v in pooled["by_task_type"].items()
        },
        "strategies": strategies,
        "by_source": succ_by_source(list(tasks.values()), ok)["by_source"] if tasks else {},
        "by_ability": M.group_table(tasks, ok, M.task_abilities, ks) if tasks else {},
        "by_stress": M.group_table(tasks, ok, M.task_stress, ks) if tasks else {},
        "stress_drops": M.stress_drops(M.group_table(tasks, ok, M.task_stress, ks)) if tasks else {},
        "pass_k": {s: M.pass_k_table(by_strategy[s], ks) for s in strategies},
        "behaviour": {s: M.behaviour(by_strategy[s]) for s in strategies},
        "tool_calls_per_turn": {s: M.tool_calls_per_turn(by_strategy[s]) for s in strategies},
        "taxonomy": {
            "primary": T.taxonomy_table(items, "primary"),
            "labels": T.taxonomy_table(items, "labels"),
            "items": [it.to_dict() for it in items],
        },
        "errors_by_kind": errors_by_kind(errors),
        "errors": [
            {
                "task_id": r.task_id,
                "trial": r.trial,
                "strategy": M.strategy_of(r),
                "kind": error_kind(r),
                "error": r.error,
            }
            for r in errors
        ],
        "reward_means": {k: round(statistics.fmean(v), 4) for k, v in sorted(comp.items())},
        "mean_turns": {f"stage{s}": round(statistics.fmean(v), 3) for s, v in sorted(turns.items())},
        "mean_tool_calls_per_episode": {k: round(v / n, 3) for k, v in sorted(tool_counts.items())} if n else {},
        "mean_total_tool_calls": round(sum(tool_counts.values()) / n, 3) if n else None,
        "mean_response_chars": round(statistics.fmean(resp_chars), 1) if resp_chars else None,
        "terminations": dict(sorted(term.items())),
        "mean_wall_s": _mean(r.wall_s for r in results),
        "judging": judging_summary(results),
    }


def judging_summary(results: Iterable[EpisodeResult]) -> dict[str, dict[str, Any]]:
    """Per stage (``stage1``, ``stage2``), over every recorded verdict (unscored stages included):
    ``stages``, ``items`` (decisions behind the verdicts), ``uncertain`` (items the rule judge was
    not sure of), ``uncertain_share`` (uncertain / items, None without items), ``stages_uncertain``
    (stages with at least one uncertain item), ``llm_calls`` (stages sent to an LLM judge by a
    cascade) and ``reasons`` (uncertain items per reason)."""
    out: dict[str, dict[str, Any]] = {}
    for r in results:
        for st in r.stages:
            v = st.verdict
            d = out.setdefault(
                f"stage{st.trajectory.stage}",
                {"stages": 0, "items": 0, "uncertain": 0, "stages_uncertain": 0, "llm_calls": 0, "reasons": Counter()},
            )
            d["stages"] += 1
            d["items"] += len(v.items)
            d["uncertain"] += v.uncertain
            d["stages_uncertain"] += v.uncertain > 0
            d["llm_calls"] += v.llm_calls
            d["reasons"].update(it["reason"] for it in v.items if not it["confident"])
    for d in out.values():
        d["uncertain_share"] = round(d["uncertain"] / d["items"], 4) if d["items"] else None
        d["reasons"] = dict(sorted(d["reasons"].items()))
    return dict(sorted(out.items()))


# --------------------------------------------------------------------------- formatting


def _fmt(x: Any) -> str:
    if x is None:
        return "–"
    if isinstance(x, bool):
        return str(int(x))
    if isinstance(x, float):
        return f"{x:.4f}"
    return str(x)


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}"


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


def _transcript(r: EpisodeResult, max_chars: int = 600) -> str:
    lines = [f"#### {r.task_id} (Acc {r.acc:.2f}, Succ {int(r.succ)})", ""]
    for st in r.stages:
        t = st.trajectory
        lines.append(
            f"**Stage {t.stage}** — termination `{t.termination}`, reward {st.reward.total:.3f}, "
            f"verdict reasons: {'; '.join(st.verdict.reasons) or '–'}"
        )
        lines.append("")
        lines.append("```text")
        for m in t.messages[1:]:
            content = m.content if len(m.content) <= max_chars else m.content[:max_chars] + " …"
            lines.append(f"[{m.role}{':' + m.name if m.name else ''}] {content}")
        lines.append("```")
        lines.append("")
    return "\n".join(lines)


def _plot_taxonomy(table: dict[str, Any], path: Path) -> Path | None:
    from shopping_companion.benchmark.taxonomy import CATEGORY_LABELS

    rows = {c: v for c, v in table["rows"].items() if v["total"]}
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    names = [CATEGORY_LABELS.get(c, c) for c in rows]
    single = [v["single"] for v in rows.values()]
    addon = [v["addon"] for v in rows.values()]
    fig, ax = plt.subplots(figsize=(7.0, 0.45 * len(rows) + 1.5), dpi=110)
    ys = list(range(len(rows)))[::-1]
    ax.barh(ys, single, label="Single", color="#4C72B0")
    ax.barh(ys, addon, left=single, label="Add-on", color="#DD8452")
    ax.set_yticks(ys)
    ax.set_yticklabels(names, fontsize=8)
    ax.set_xlabel(f"failed episodes (primary category, n={table['n_failures']})")
    ax.set_title("Error taxonomy of failed episodes (rules)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)
    return path


def _main_metrics_section(s: dict[str, Any], strategies: list[str]) -> list[str]:
    """Table 2: Acc and Succ per task type, per strategy."""
    from shopping_companion.benchmark.metrics import STRATEGY_LABELS

    out = ["## Main metrics (Acc, Succ)", ""]
    for name in strategies:
        st = s["strategies"][name]
        if len(strategies) > 1:
            out += [f"### {STRATEGY_LABELS.get(name, name)} (`{name}`)", ""]
        rows = [[tt, v["n"], _fmt(v["acc"]), _fmt(v["succ"])] for tt, v in st["by_task_type"].items()]
        if len(st["by_task_type"]) > 1:
            rows.append(["avg (of types)", "–", _fmt(st["avg"]["acc"]), _fmt(st["avg"]["succ"])])
        rows.append(["**all**", st["all"]["n"], f"**{_fmt(st['all']['acc'])}**", f"**{_fmt(st['all']['succ'])}**"])
        out += [markdown_table(["task type", "n", "Acc", "Succ"], rows), ""]
    out += [
        "Acc: fraction of gold preference attributes recovered in stage 1 (m1/F). "
        "Succ: the recommendation satisfies count, request, every preference (and budget for add-on deals). "
        "Episodes with backend errors or failed judge verdicts are excluded, never scored as 0.",
        "",
    ]
    return out


def _source_section(s: dict[str, Any]) -> list[str]:
    """Succ by the catalog source of the reference products (nothing with one source)."""
    out: list[str] = []
    by_source = {k: v for k, v in s.get("by_source", {}).items() if k != "all"}
    if len(by_source) > 1:
        rows = [
            [name]
            + [f"{_fmt(row[t]['succ'])} (n={row[t]['n']})" if row[t]["n"] else "–" for t in ("single", "addon", "all")]
            for name, row in by_source.items()
        ]
        out += _table_section("Succ by source of the reference products", ["source", "single", "addon", "all"], rows)
    return out


def _group_section(s: dict[str, Any], key: str, title: str, trivial: str) -> list[str]:
    """Acc, Succ and pass^k per strategy and group (``key``: ``by_ability`` or ``by_stress``);
    nothing when every task is in the ``trivial`` group (untagged / original)."""
    table = s.get(key) or {}
    if all(set(row) <= {trivial} for row in table.values()):
        return []
    ks = sorted({k for row in table.values() for cell in row.values() for k in cell["pass^k"]})
    drops = s.get("stress_drops", {}) if key == "by_stress" else {}
    rows = []
    for strategy, row in table.items():
        for g, c in row.items():
            drop = drops.get(strategy, {}).get(g) or {}
            succ, s1 = (
                _fmt(c.get(m)) + (f" ({100 * drop[m]:+.1f} pts)" if drop.get(m) is not None else "")
                for m in ("succ", "succ1")
            )
            hat = [_fmt(c["pass^k"].get(k)) for k in ks]
            rows.append([strategy, g, c["n"], c["n_tasks"], _fmt(c["acc"]), s1, succ, *hat])
    columns = ["strategy", "group", "episodes", "tasks", "Acc", "S1", "Succ", *(f"pass^{k}" for k in ks)]
    out = [f"## {title}", "", markdown_table(columns, rows)]
    out += ["", "S1: stage-1 success (every preference found, none invented: what abstention and needle_removed test)."]
    if drops:
        out += ["In brackets: the variant's S1 / Succ minus the original tasks' (the policy's drop)."]
    return [*out, ""]


def _strategies_section(s: dict[str, Any], strategies: list[str]) -> list[str]:
    """Table 3: Succ per strategy and task type (nothing with one strategy)."""
    from shopping_companion.benchmark.metrics import STRATEGY_LABELS, TASK_TYPE_LABELS

    out: list[str] = []
    if len(strategies) > 1:
        types = sorted({tt for v in s["strategies"].values() for tt in v["by_task_type"]})
        columns = ["strategy", *(TASK_TYPE_LABELS.get(t, t) for t in types), "Avg.", "Acc avg."]
        rows = [
            [STRATEGY_LABELS.get(name, name)]
            + [_pct(v["by_task_type"].get(t, {}).get("succ")) for t in types]
            + [_pct(v["avg"]["succ"]), _pct(v["avg"]["acc"])]
            for name, v in s["strategies"].items()
        ]
        out += _table_section("Strategies (Succ %, Table 3)", columns, rows)
    return out


def _table_section(
    title: str, columns: list[str], rows: Iterable[Sequence[Any]], intro: str | None = None
) -> list[str]:
    """A report section that is a Markdown table: ``## title``, a blank line, ``intro`` and a blank
    line (when given), the table (:func:`~shopping_companion.markdown.markdown_table`) and a blank line."""
    head = [f"## {title}", ""] + ([intro, ""] if intro else [])
    return [*head, markdown_table(columns, rows), ""]


def _pass_k_section(s: dict[str, Any]) -> list[str]:
    """pass@k and pass^k per strategy and k."""
    intro = (
        "Per task with n scored trials and c successes: pass@k = 1 − C(n−c,k)/C(n,k), "
        "pass^k = C(c,k)/C(n,k); means over tasks with n ≥ k."
    )
    rows = [
        [name, k, v["n_tasks"], _fmt(v["pass@k"]), _fmt(v["pass^k"])]
        for name, tab in s["pass_k"].items()
        for k, v in tab["k"].items()
    ]
    return _table_section("pass@k and pass^k", ["strategy", "k", "tasks", "pass@k", "pass^k"], rows, intro)


def _behaviour_section(s: dict[str, Any]) -> list[str]:
    """Table 4: turns, tool uses and response length per strategy, and tool uses by tool."""
    columns = ["strategy", "Turns", "Tool Uses", "Resp. Len. (tokens)", "Resp. Len. (chars)", "tool-call rate"]
    rows = []
    for name, b in s["behaviour"].items():
        tok = _fmt(b["resp_tokens"]) + (f" (n={b['n_resp_tokens']})" if b["n_resp_tokens"] != b["n"] else "")
        rows.append(
            [name, _fmt(b["turns"]), _fmt(b["tool_uses"]), tok, _fmt(b["resp_chars"]), _fmt(b["tool_call_rate"])]
        )
    out = _table_section("Behaviour (Table 4, means per episode)", columns, rows)
    out += [
        "Turns: assistant turns over all stages. Tool uses: every tool call issued (rejected and "
        "malformed ones included). Resp. Len.: sum of completion tokens (as reported by the backend) and "
        "of characters over the episode's assistant turns.",
        "",
    ]
    tools = sorted({t for b in s["behaviour"].values() for t in b["tool_uses_by_tool"]})
    if tools:
        rows = [[name] + [_fmt(b["tool_uses_by_tool"].get(t)) for t in tools] for name, b in s["behaviour"].items()]
        out += [markdown_table(["strategy", *(f"`{t}`" for t in tools)], rows), ""]
    return out


def _tool_calls_section(
    s: dict[str, Any], results: list[EpisodeResult], strategies: list[str], out_dir: Path, plots: bool
) -> list[str]:
    """Figure 3: tool calls per turn per strategy, as tables and (with ``plots``) PNGs in ``out_dir``."""
    from shopping_companion.benchmark.metrics import STRATEGY_LABELS, plot_tool_calls_per_turn

    out = ["## Tool calls per turn (Figure 3)", ""]
    for name, data in s["tool_calls_per_turn"].items():
        if not data:
            continue
        label = STRATEGY_LABELS.get(name, name)
        fname = "tool_calls_per_turn.png" if len(strategies) == 1 else f"tool_calls_per_turn_{_safe(name)}.png"
        if plots:
            sub = [r for r in results if _strategy(r) == name]
            if plot_tool_calls_per_turn(sub, out_dir / fname, title=f"Tool calls per turn — {label}"):
                out += [f"![tool calls per turn, {label}]({fname})", ""]
        n_turns = len(next(iter(data.values())))
        out += [
            f"{label}: tool calls summed over episodes, by episode turn (stage 1 then stage 2, from 0).",
            "",
            markdown_table(["tool", *range(n_turns)], [[f"`{tool}`", *ys] for tool, ys in data.items()]),
            "",
        ]
    return out


def _taxonomy_section(s: dict[str, Any], out_dir: Path, plots: bool) -> list[str]:
    """Table 7: the error taxonomy of failed episodes (and the LLM attribution, if any)."""
    from shopping_companion.benchmark.taxonomy import CATEGORY_LABELS

    out: list[str] = []
    tax = s["taxonomy"]
    out += ["## Error taxonomy of failed episodes (App. F.2, Table 7)", ""]
    if tax["primary"]["n_failures"]:
        out += [
            "Rules over the recorded trajectories (definitions in `shopping_companion.benchmark.taxonomy`). "
            "Primary: one category per failure, earliest failure in the trajectory first; "
            "all labels: a failure counts under every rule it matches.",
            "",
        ]
        rows = []
        for c, v in tax["primary"]["rows"].items():
            lab = tax["labels"]["rows"].get(c, {}).get("total", 0)
            share = f" ({100 * v['share']:.1f}%)" if v["share"] is not None else ""
            rows.append([CATEGORY_LABELS.get(c, c), v["single"], v["addon"], f"{v['total']}{share}", lab])
        by_type = tax["primary"]["by_task_type"]
        rows.append(["**Total**", by_type.get("single", 0), by_type.get("addon", 0), tax["primary"]["n_failures"], ""])
        out += [markdown_table(["error type", "Single", "Add-on", "Total (primary)", "all labels"], rows), ""]
        if plots and _plot_taxonomy(tax["primary"], out_dir / "error_taxonomy.png"):
            out += ["![error taxonomy](error_taxonomy.png)", ""]
        llm = [it for it in tax["items"] if it.get("llm")]
        if llm:
            agree = sum(1 for it in llm if it["llm"].get("category") == it["primary"])
            usable = sum(1 for it in llm if it["llm"].get("category"))
            model = llm[0]["llm"].get("model", "")
            cnt = Counter(it["llm"].get("category") or "(unusable reply)" for it in llm)
            out += [
                f"LLM attribution ({model}): {usable}/{len(llm)} usable replies; "
                f"agrees with the rule's primary category on {agree}.",
                "",
                markdown_table(
                    ["LLM category", "failures"], [[CATEGORY_LABELS.get(c, c), v] for c, v in cnt.most_common()]
                ),
                "",
            ]
    else:
        out += ["No failed episode.", ""]
    return out


def _errors_section(s: dict[str, Any], meta: dict[str, Any]) -> list[str]:
    """The episodes not scored, and the results-file lines left out (``meta['results_file']``)."""
    out: list[str] = []
    if s["errors"]:
        kinds = ", ".join(f"{v} {k}" for k, v in s["errors_by_kind"].items())
        intro = (
            f"Recorded and excluded from every metric ({kinds}). Kinds: `backend` — the backend failed "
            "after its retries; `judge` — the judge failed; `episode` — an unexpected exception inside "
            "the episode (traceback in `<results stem>.errors.log`). Rerunning the same command retries "
            "backend and judge errors (`--no-retry-errors` skips them); episode errors are retried only "
            "with `--retry-failed`."
        )
        rows = [
            [e["task_id"], e["trial"], e["strategy"], e["kind"], (e["error"] or "")[:300]] for e in s["errors"][:50]
        ]
        if len(s["errors"]) > 50:
            rows.append(["…", "", "", "", f"{len(s['errors']) - 50} more"])
        out += _table_section(
            "Episodes not scored (errors)", ["task", "trial", "strategy", "kind", "error"], rows, intro
        )
    rf = meta.get("results_file") or {}
    notes = []
    if rf.get("unreadable_lines"):
        notes.append(
            f"- {rf['unreadable_lines']} line(s) of the results file cannot be read back (line numbers "
            f"{', '.join(str(n) for n in rf.get('unreadable_line_numbers', []))}); left out, their "
            "episodes were run again."
        )
    for why, text in (
        ("not_in_benchmark", "tasks that are not in the benchmark"),
        ("not_requested", "tasks, strategies or trials not requested by this run"),
    ):
        v = (rf.get("left_out") or {}).get(why) or {}
        if v.get("count"):
            notes.append(
                f"- {v['count']} result(s) for {text} (e.g. {', '.join(v['examples'])}): left out of every metric."
            )
    if notes:
        out += ["## Results file", ""] + notes + [""]
    return out


def _means_section(s: dict[str, Any]) -> list[str]:
    """Reward component means, the judging counts and the other behaviour means."""
    means = [[k, _fmt(v)] for k, v in s["reward_means"].items()]
    out = ["## Reward components (means)", "", markdown_table(["component", "mean"], means)]
    judging = s.get("judging") or {}
    if any(d["items"] for d in judging.values()):
        out += [
            "",
            "## Judging",
            "",
            'Items are the judge\'s decisions (docs/judge.md, "Selective verdicts"); uncertain ones earn what the '
            "reward spec's `uncertain` says, or go to the LLM judge in a cascade.",
            "",
        ]
        columns = ["stage", "stages", "items", "uncertain", "uncertain share", "stages with uncertain items"]
        rows = [
            [k, d["stages"], d["items"], d["uncertain"], f"{_pct(d['uncertain_share'])}%", d["stages_uncertain"]]
            + [d["llm_calls"], ", ".join(f"{r} {n}" for r, n in d["reasons"].items()) or "–"]
            for k, d in judging.items()
        ]
        out.append(markdown_table([*columns, "LLM calls", "reasons"], rows))
    rows = [[f"mean assistant turns, {k}", _fmt(v)] for k, v in s["mean_turns"].items()]
    rows.append(["mean tool calls per episode", _fmt(s["mean_total_tool_calls"])])
    rows += [[f"mean `{k}` calls per episode", _fmt(v)] for k, v in s["mean_tool_calls_per_episode"].items()]
    rows.append(["mean assistant message length (chars)", _fmt(s["mean_response_chars"])])
    rows.append(["mean episode wall time (s)", _fmt(s["mean_wall_s"])])
    rows += [[f"terminations {k}", v] for k, v in s["terminations"].items()]
    out += ["", "## Other behaviour", "", markdown_table(["metric", "value"], rows)]
    return out


def write_report(
    results: list[EpisodeResult],
    path: str | Path,
    meta: dict[str, Any],
    n_examples: int = 2,
    *,
    tasks: Mapping[str, Task] | None = None,
    ks: Sequence[int] | None = None,
    lookup: Callable[[list[str]], Mapping[str, Any]] | None = None,
    taxonomy: list[Any] | None = None,
    plots: bool = True,
) -> dict[str, Any]:
    """Write the Markdown report (and its PNG plots next to it); return :func:`summarize`'s dict.

    ``meta`` keys shown when present: ``run_name``, ``policy``, ``baseline_note``, ``benchmark``,
    ``judge``, ``simulator``, ``endpoint`` (passed through :func:`scrub_url`), ``model``,
    ``model_path``, ``adapter``, ``strategies``, ``trials``, ``seeds``, ``config`` (JSON),
    ``results_file`` (``unreadable_lines``, ``unreadable_line_numbers``, ``left_out`` as returned by
    :func:`left_out_results`: shown in a "Results file" section). Never
    put secrets in ``meta``: it is written as given (except the endpoint, scrubbed).
    """
    results = final_results(results)
    s = summarize(results, tasks=tasks, ks=ks, lookup=lookup, taxonomy=taxonomy)
    out_path = Path(path)
    out_dir = out_path.parent
    out_dir.mkdir(parents=True, exist_ok=True)
    strategies = list(s["strategies"])
    out = [f"# Shopping Companion evaluation: {meta.get('run_name', '')}", ""]
    if meta.get("baseline_note"):
        out += [f"> **{meta['baseline_note']}**", ""]
    ident = [
        ("policy", meta.get("policy", "")),
        ("model", meta.get("model")),
        ("endpoint", scrub_url(meta.get("endpoint"))),
        ("local checkpoint", meta.get("model_path")),
        ("LoRA adapter", meta.get("adapter")),
        ("benchmark", meta.get("benchmark", "")),
        ("judge", meta.get("judge", "")),
        ("user simulator", meta.get("simulator")),
        ("strategies", ", ".join(strategies) or meta.get("strategies")),
        ("trials per task", meta.get("trials")),
        ("seeds", meta.get("seeds")),
        (
            "episodes (scored / errors / judge failures)",
            f"{s['n_episodes']} ({s['n_scored']} / {s['n_errors']} / {s['n_judge_failed']})",
        ),
        ("package version", __version__),
    ]
    out += [markdown_table(["", ""], [[k, v] for k, v in ident if v not in (None, "")]), ""]

    out += _main_metrics_section(s, strategies)
    out += _source_section(s)
    out += _group_section(s, "by_ability", "Per memory ability", "untagged")
    out += _group_section(s, "by_stress", "Per stress variant", "original")
    out += _strategies_section(s, strategies)
    out += _pass_k_section(s)
    out += _behaviour_section(s)
    out += _tool_calls_section(s, results, strategies, out_dir, plots)
    out += _taxonomy_section(s, out_dir, plots)
    out += _errors_section(s, meta)
    out += _means_section(s)
    out += ["", "## Configuration", "", "```json", json.dumps(meta.get("config", {}), indent=2, default=str), "```", ""]
    examples = [r for r in results if r.error is None][:n_examples]
    if examples:
        out += ["## Example trajectories", ""]
        for r in examples:
            out.append(_transcript(r))
    out_path.write_text("\n".join(out), encoding="utf-8")
    return s


def _strategy(r: EpisodeResult) -> str:
    from shopping_companion.benchmark.metrics import strategy_of

    return strategy_of(r)


# --------------------------------------------------------------------------- parquet


def _stage_stats(st) -> dict[str, Any]:
    steps = st.trajectory.steps
    ctoks = [x.completion_tokens for x in steps]
    ptoks = [x.prompt_tokens for x in steps]
    return {
        "turns": len(steps),
        "tool_uses": sum(len(x.tool_results) for x in steps),
        "tool_errors": sum(1 for x in steps for tr in x.tool_results if tr.error),
        "completion_tokens": sum(ctoks) if steps and all(t is not None for t in ctoks) else None,  # type: ignore[arg-type]
        "prompt_tokens": sum(ptoks) if steps and all(t is not None for t in ptoks) else None,  # type: ignore[arg-type]
        "resp_chars": sum(len(x.assistant_text) for x in steps),
        "termination": st.trajectory.termination,
        "reward_total": st.reward.total,
        "success": st.verdict.success,
    }


def _json_or_none(x: Any) -> str | None:
    return None if x is None else json.dumps(x, sort_keys=True, default=str)


def _group_columns(tasks: Mapping[str, Task] | None, task_id: str) -> dict[str, Any]:
    """``abilities`` (comma-joined, ``untagged`` when none) and ``stress`` (``original`` when none)
    of the episode's task; None for both without ``tasks`` or for a task not in it."""
    from shopping_companion.benchmark.metrics import task_abilities, task_stress

    t = tasks.get(task_id) if tasks else None
    if t is None:
        return {"abilities": None, "stress": None}
    return {"abilities": ",".join(task_abilities(t)), "stress": task_stress(t)[0]}


def episode_rows(results: Iterable[EpisodeResult], tasks: Mapping[str, Task] | None = None) -> list[dict[str, Any]]:
    """One flat dict per final result: identity, Acc/Succ, error and its kind, ``simulator`` (JSON
    text), then ``stage<s>_*`` columns (turns, tool uses, tokens, termination, reward total, verdict
    success, reward components); with ``tasks``, the task's ``abilities`` and ``stress`` variant.
    Score columns (``acc``, ``succ``, ``stage<s>_reward_*``,
    ``stage<s>_success``) are None for episodes that are not scored (``scored`` False: an error or
    a failed judge verdict), never 0 / False."""
    from shopping_companion.benchmark.metrics import strategy_of

    rows = []
    for r in final_results(results):
        ok = r.error is None and not any(s.verdict.failed for s in r.stages)
        row: dict[str, Any] = {
            "task_id": r.task_id,
            "task_type": r.task_type,
            **_group_columns(tasks, r.task_id),
            "strategy": strategy_of(r),
            "mode": r.mode,
            "hint": r.hint,
            "simulator": _json_or_none(getattr(r, "simulator", None)),
            "policy": r.policy,
            "trial": r.trial,
            "seed": r.seed,
            "acc": r.acc if ok else None,
            "succ": bool(r.succ) if ok else None,
            "error": r.error,
            "error_kind": error_kind(r),
            "wall_s": r.wall_s,
            "scored": ok,
            "recommended_ids": list(r.stages[-1].trajectory.recommended_ids) if r.stages else [],
        }
        for st in r.stages:
            p = f"stage{st.trajectory.stage}_"
            for k, v in _stage_stats(st).items():
                row[p + k] = None if not ok and k in _SCORE_STATS else v
            for k, v in st.reward.components.items():
                row[p + "reward_" + k] = float(v) if ok else None
        rows.append(row)
    return rows


#: Per-stage statistics that are scores: null in the parquet files for episodes that are not scored.
_SCORE_STATS = ("reward_total", "success")


def stage_rows(results: Iterable[EpisodeResult], tasks: Mapping[str, Task] | None = None) -> list[dict[str, Any]]:
    """One flat dict per stage of every final result: identity, stage statistics, every verdict
    field (``verdict_*``), reward components (``reward_*``), identified preferences (JSON) and
    recommended ids; with ``tasks``, the task's ``abilities`` and ``stress``. ``success`` and the
    reward columns are None for stages of episodes that are not scored (``scored`` False)."""
    from shopping_companion.benchmark.metrics import strategy_of

    rows = []
    for r in final_results(results):
        ok = r.error is None and not any(s.verdict.failed for s in r.stages)
        for st in r.stages:
            v = st.verdict
            stats = {k: (None if not ok and k in _SCORE_STATS else x) for k, x in _stage_stats(st).items()}
            row: dict[str, Any] = {
                "task_id": r.task_id,
                "task_type": r.task_type,
                **_group_columns(tasks, r.task_id),
                "strategy": strategy_of(r),
                "trial": r.trial,
                "policy": r.policy,
                "error": r.error,
                "scored": ok,
                "stage": st.trajectory.stage,
                **stats,
                "identified_preferences": json.dumps([p.model_dump() for p in st.trajectory.identified_preferences])
                if st.trajectory.identified_preferences is not None
                else None,
                "recommended_ids": list(st.trajectory.recommended_ids),
                "verdict_judge": v.judge,
                "verdict_failed": v.failed,
                "verdict_F": v.F,
                "verdict_N": v.N,
                "verdict_reasons": "; ".join(v.reasons),
            }
            for f in ("q1", "m1", "c1", "p2", "q2", "m2", "n2", "u2"):
                val = getattr(v, f)
                row["verdict_" + f] = None if val is None else float(val)
            for k, val in st.reward.components.items():
                row["reward_" + k] = float(val) if ok else None
            row["reward_per_tool_call"] = list(st.reward.per_tool_call)
            rows.append(row)
    return rows


def write_parquet(
    results: Iterable[EpisodeResult], out_dir: str | Path, tasks: Mapping[str, Task] | None = None
) -> tuple[Path, Path]:
    """Write ``results.parquet`` (per episode) and ``results_stages.parquet`` (per stage) into
    ``out_dir`` (with ``tasks``: ``abilities`` and ``stress`` columns); returns both paths. Needs
    pandas and pyarrow."""
    import pandas as pd

    results = list(results)
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    ep, st = d / "results.parquet", d / "results_stages.parquet"
    _frame(pd, episode_rows(results, tasks)).to_parquet(ep, engine="pyarrow", index=False)
    _frame(pd, stage_rows(results, tasks)).to_parquet(st, engine="pyarrow", index=False)
    return ep, st


def _frame(pd: Any, rows: list[dict[str, Any]]) -> Any:
    """A DataFrame whose score columns keep None as null: nullable ``boolean`` for the success
    columns, ``float64`` (NaN = null in parquet) for the numeric ones."""
    df = pd.DataFrame(rows)
    for col in df.columns:
        if col in ("succ", "scored") or col.endswith("_success") or col == "success":
            df[col] = df[col].astype("boolean")
        elif col == "acc" or "reward_" in col and col != "reward_per_tool_call":
            df[col] = pd.to_numeric(df[col], errors="coerce").astype("Float64")
    return df
