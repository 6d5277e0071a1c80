"""Did GRPO learn? Statistics over a run's per-trajectory rollout records (docs/pipeline.md).

``shopcomp grpo trl`` appends one line per sampled trajectory to ``<output_dir>/rollouts.jsonl``
(:func:`~shopping_companion.trainers.trl_rollout.make_rollout_func`): the step it was sampled at,
its GRPO group and its scored reward components. :func:`learning_delta` compares the first and
the last steps of a run:

- the **task reward** of a trajectory is ``R_z + R_tool`` (outcome plus tool-wise process reward,
  Eqs. 6–10; the format reward is left out, so a policy cannot pass by formatting alone);
- the statistic is mean(last ``window`` steps) − mean(first ``window`` steps);
- its 95% interval is a cluster bootstrap (:func:`scipy.stats.bootstrap`, percentile method):
  the unit resampled is a GRPO group (one prompt's completions at one step), since the
  completions of a group share their prompt and are not independent.

Unscored trajectories (judge failed, scoring deadline missed) are left out.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

__all__ = ["learning_delta", "read_rollouts", "step_means", "task_reward", "tool_calls"]


def read_rollouts(path: str | Path) -> list[dict[str, Any]]:
    """The scored records of a ``rollouts.jsonl`` (a torn last line is ignored)."""
    out = []
    p = Path(path)
    if not p.is_file():
        return out
    with p.open(encoding="utf-8") as f:
        for line in f:
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict) and rec.get("reward"):
                out.append(rec)
    return out


def task_reward(rec: dict[str, Any]) -> float:
    """``R_z + R_tool`` of one record."""
    r = rec["reward"]
    return float(r.get("R_z", 0.0)) + float(r.get("R_tool", 0.0))


def tool_calls(rec: dict[str, Any]) -> float:
    """Tool calls of the trajectory."""
    return float(rec["reward"].get("n_tool_calls", 0.0))


def step_means(records: Iterable[dict[str, Any]], key: Callable[[dict[str, Any]], float]) -> dict[int, float]:
    """``{step: mean of key over that step's trajectories}``."""
    acc: dict[int, list[float]] = defaultdict(list)
    for r in records:
        acc[int(r["step"])].append(key(r))
    return {s: sum(v) / len(v) for s, v in sorted(acc.items())}


def _group_means(records: list[dict[str, Any]], key: Callable[[dict[str, Any]], float]) -> list[float]:
    groups: dict[tuple[int, int], list[float]] = defaultdict(list)
    for r in records:
        groups[(int(r["step"]), int(r.get("group", 0)))].append(key(r))
    return [sum(v) / len(v) for v in groups.values()]


def learning_delta(
    records: list[dict[str, Any]],
    *,
    window: int = 5,
    key: Callable[[dict[str, Any]], float] = task_reward,
    n_boot: int = 2000,
    seed: int = 0,
) -> dict[str, Any]:
    """Mean ``key`` over the last ``window`` steps minus the first ``window`` (module docstring).

    Returns ``first``, ``last`` (means), ``delta``, ``ci_low``, ``ci_high`` (95% cluster bootstrap;
    None with fewer than 2 groups on a side), ``steps`` (number of steps seen), ``groups_first`` /
    ``groups_last``. Raises ``ValueError`` when ``window`` < 1 or the records hold fewer than
    ``2 × window`` steps (the two windows would overlap)."""
    import numpy as np
    from scipy import stats

    if window < 1:
        raise ValueError(f"window: must be >= 1, got {window}")
    steps = sorted({int(r["step"]) for r in records})
    if len(steps) < 2 * window:
        raise ValueError(
            f"need at least {2 * window} logged steps to compare two windows of {window}; got {len(steps)}"
        )
    first_steps, last_steps = set(steps[:window]), set(steps[-window:])
    a = _group_means([r for r in records if int(r["step"]) in first_steps], key)
    b = _group_means([r for r in records if int(r["step"]) in last_steps], key)
    out: dict[str, Any] = {
        "first": float(np.mean(a)),
        "last": float(np.mean(b)),
        "delta": float(np.mean(b) - np.mean(a)),
        "ci_low": None,
        "ci_high": None,
        "steps": len(steps),
        "groups_first": len(a),
        "groups_last": len(b),
    }
    if len(a) >= 2 and len(b) >= 2:

        def diff(x: Any, y: Any, axis: int = -1) -> Any:
            return np.mean(y, axis=axis) - np.mean(x, axis=axis)

        res = stats.bootstrap(
            (np.asarray(a), np.asarray(b)),
            diff,
            paired=False,
            vectorized=True,
            n_resamples=n_boot,
            confidence_level=0.95,
            method="percentile",
            rng=np.random.default_rng(seed),
        )
        out["ci_low"] = float(res.confidence_interval.low)
        out["ci_high"] = float(res.confidence_interval.high)
    return out
