"""Metrics over ``results.jsonl`` and the Markdown evaluation report."""

from __future__ import annotations

import json
import statistics
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Iterable

from shopping_companion import __version__
from shopping_companion.types import EpisodeResult


def read_results(path: str | Path) -> list[EpisodeResult]:
    """Read every complete line of a results file (a torn last line is ignored)."""
    out = []
    p = Path(path)
    if not p.exists():
        return out
    with open(p, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                out.append(EpisodeResult.model_validate_json(line))
            except ValueError:
                continue
    return out


def _mean(xs: Iterable[float]) -> float | None:
    xs = list(xs)
    return statistics.fmean(xs) if xs else None


def summarize(results: list[EpisodeResult]) -> dict[str, Any]:
    """Aggregate metrics.

    Acc: mean over episodes of m1/F (paper §4). Succ: fraction of episodes whose stage-2 verdict
    is a success (Eq. 5). Episodes that ended with a backend error are counted apart and excluded
    from Acc/Succ and reward means (never scored as 0).
    """
    scored = [r for r in results if r.error is None]
    errors = [r for r in results if r.error is not None]
    comp: dict[str, list[float]] = defaultdict(list)
    turns: dict[int, list[int]] = defaultdict(list)
    tool_counts: Counter[str] = Counter()
    resp_chars: list[int] = []
    term: Counter[str] = Counter()
    for r in scored:
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
    n = len(scored)
    by_type: dict[str, dict[str, float | int]] = {}
    for tt in sorted({r.task_type for r in scored}):
        rs = [r for r in scored if r.task_type == tt]
        by_type[tt] = {"n": len(rs), "acc": _mean(r.acc for r in rs) or 0.0,
                       "succ": _mean(float(r.succ) for r in rs) or 0.0}
    return {
        "n_episodes": len(results),
        "n_scored": n,
        "n_errors": len(errors),
        "acc": _mean(r.acc for r in scored),
        "succ": _mean(float(r.succ) for r in scored),
        "by_task_type": by_type,
        "reward_means": {k: round(statistics.fmean(v), 4) for k, v in sorted(comp.items())},
        "mean_turns": {f"stage{s}": round(statistics.fmean(v), 3) for s, v in sorted(turns.items())},
        "mean_tool_calls_per_episode": {k: round(v / n, 3) for k, v in sorted(tool_counts.items())} if n else {},
        "mean_total_tool_calls": round(sum(tool_counts.values()) / n, 3) if n else None,
        "mean_response_chars": round(statistics.fmean(resp_chars), 1) if resp_chars else None,
        "terminations": dict(sorted(term.items())),
        "mean_wall_s": _mean(r.wall_s for r in results),
    }


def _fmt(x: Any) -> str:
    if x is None:
        return "–"
    if isinstance(x, float):
        return f"{x:.4f}"
    return str(x)


def _transcript(r: EpisodeResult, max_chars: int = 600) -> str:
    lines = [f"#### {r.task_id} (Acc {r.acc:.2f}, Succ {int(r.succ)})", ""]
    for st in r.stages:
        t = st.trajectory
        lines.append(f"**Stage {t.stage}** — termination `{t.termination}`, reward {st.reward.total:.3f}, "
                     f"verdict reasons: {'; '.join(st.verdict.reasons) or '–'}")
        lines.append("")
        lines.append("```text")
        for m in t.messages[1:]:
            content = m.content if len(m.content) <= max_chars else m.content[:max_chars] + " …"
            lines.append(f"[{m.role}{':' + m.name if m.name else ''}] {content}")
        lines.append("```")
        lines.append("")
    return "\n".join(lines)


def write_report(
    results: list[EpisodeResult],
    path: str | Path,
    meta: dict[str, Any],
    n_examples: int = 2,
) -> dict[str, Any]:
    """Write the Markdown report and return the summary it shows."""
    s = summarize(results)
    policy = meta.get("policy", "")
    out = [f"# Shopping Companion evaluation: {meta.get('run_name', '')}", ""]
    if meta.get("baseline_note"):
        out += [f"> **{meta['baseline_note']}**", ""]
    out += [
        "| | |", "|---|---|",
        f"| policy | {policy} |",
        f"| benchmark | {meta.get('benchmark', '')} |",
        f"| judge | {meta.get('judge', '')} |",
        f"| mode / hint | {meta.get('mode', 'two_stage')} / {meta.get('hint', 'none')} |",
        f"| episodes (scored / errors) | {s['n_episodes']} ({s['n_scored']} / {s['n_errors']}) |",
        f"| package version | {__version__} |",
        "",
        "## Main metrics", "",
        "| task type | n | Acc | Succ |", "|---|---|---|---|",
    ]
    for tt, v in s["by_task_type"].items():
        out.append(f"| {tt} | {v['n']} | {_fmt(v['acc'])} | {_fmt(v['succ'])} |")
    out.append(f"| **all** | {s['n_scored']} | **{_fmt(s['acc'])}** | **{_fmt(s['succ'])}** |")
    out += ["", "Acc: fraction of gold preference attributes recovered in stage 1. "
            "Succ: stage-2 recommendation satisfies count, request, every preference (and budget for add-on deals).",
            "", "## Reward components (means)", "", "| component | mean |", "|---|---|"]
    for k, v in s["reward_means"].items():
        out.append(f"| {k} | {_fmt(v)} |")
    out += ["", "## Behaviour", "", "| metric | value |", "|---|---|"]
    for k, v in s["mean_turns"].items():
        out.append(f"| mean assistant turns, {k} | {_fmt(v)} |")
    out.append(f"| mean tool calls per episode | {_fmt(s['mean_total_tool_calls'])} |")
    for k, v in s["mean_tool_calls_per_episode"].items():
        out.append(f"| mean `{k}` calls per episode | {_fmt(v)} |")
    out.append(f"| mean assistant message length (chars) | {_fmt(s['mean_response_chars'])} |")
    out.append(f"| mean episode wall time (s) | {_fmt(s['mean_wall_s'])} |")
    for k, v in s["terminations"].items():
        out.append(f"| terminations {k} | {v} |")
    out += ["", "## Configuration", "", "```json", json.dumps(meta.get("config", {}), indent=2, default=str), "```", ""]
    examples = [r for r in results if r.error is None][:n_examples]
    if examples:
        out += ["## Example trajectories", ""]
        for r in examples:
            out.append(_transcript(r))
    Path(path).write_text("\n".join(out), encoding="utf-8")
    return s
