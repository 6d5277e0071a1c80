"""Did GRPO learn? Statistics over a run's per-trajectory rollout records (docs/pipeline.md).

``shopcomp grpo trl`` appends one line per sampled trajectory to ``<output_dir>/rollouts.jsonl``
(:func:`~shopping_companion.trainers.trl_rollout.make_rollout_func`): the step it was sampled at,
its GRPO group and its scored reward components. :func:`learning_delta` compares the first and
the last steps of a run:

- the **task reward** of a trajectory is ``R_z + R_tool`` (outcome plus tool-wise process reward,
  Eqs. 6–10; the format reward is left out, so a policy cannot pass by formatting alone);
- the statistic is mean(last ``window`` steps) − mean(first ``window`` steps), **paired by
  prompt** when the records name it (``task_id`` and ``stage``) and both windows hold at least
  ``min_pairs`` common prompts: each prompt's mean over the last window minus its mean over the
  first, averaged over those prompts. Prompts differ in difficulty far more than learning moves
  them (on the CPU chain the spread of prompt means is about as large as the within-group spread),
  so comparing a prompt with itself removes that spread; with every prompt in both windows (a
  window at least one epoch of prompts) it estimates the same change as the unpaired difference;
- the same statistic of ``R_z`` (:func:`outcome_reward`) and of ``R_tool`` (:func:`process_reward`)
  alone shows which part moved: an arm trained on ``R_z`` alone can raise it while its untrained
  tool use drifts (docs/pipeline.md);
- its 95% interval is a cluster bootstrap (:func:`scipy.stats.bootstrap`, percentile method):
  the unit resampled is a prompt's pair of window means (paired) or a GRPO group (one prompt's
  completions at one step; unpaired), since completions of one prompt are not independent.

Unscored trajectories (judge failed, scoring deadline missed) are left out.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from shopping_companion.runs import scan_jsonl

__all__ = [
    "learning_delta",
    "outcome_reward",
    "process_reward",
    "read_rollouts",
    "step_means",
    "task_reward",
    "tool_calls",
]


def read_rollouts(path: str | Path) -> list[dict[str, Any]]:
    """The scored records of a ``rollouts.jsonl`` (a torn last line is ignored)."""
    if not Path(path).is_file():
        return []
    return [rec for rec in scan_jsonl(path, json.loads).records if isinstance(rec, dict) and rec.get("reward")]


def task_reward(rec: dict[str, Any]) -> float:
    """``R_z + R_tool`` of one record."""
    r = rec["reward"]
    return float(r.get("R_z", 0.0)) + float(r.get("R_tool", 0.0))


def outcome_reward(rec: dict[str, Any]) -> float:
    """``R_z`` of one record (the outcome part of the task reward)."""
    return float(rec["reward"].get("R_z", 0.0))


def process_reward(rec: dict[str, Any]) -> float:
    """``R_tool`` of one record (the tool-wise process part of the task reward)."""
    return float(rec["reward"].get("R_tool", 0.0))


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


def _prompt_means(
    records: list[dict[str, Any]], key: Callable[[dict[str, Any]], float]
) -> dict[tuple[str, int], float]:
    acc: dict[tuple[str, int], list[float]] = defaultdict(list)
    for r in records:
        if r.get("task_id") is not None:
            acc[(str(r["task_id"]), int(r.get("stage", 0)))].append(key(r))
    return {p: sum(v) / len(v) for p, v in acc.items()}


def learning_delta(
    records: list[dict[str, Any]],
    *,
    window: int = 5,
    key: Callable[[dict[str, Any]], float] = task_reward,
    paired: bool = True,
    min_pairs: int = 8,
    n_boot: int = 2000,
    seed: int = 0,
) -> dict[str, Any]:
    """Mean ``key`` over the last ``window`` steps minus the first ``window`` (module docstring).

    Returns ``delta`` with its 95% bootstrap interval ``ci_low`` / ``ci_high`` (None with fewer
    than 2 units), ``pairing`` (``"prompt"`` or ``"none"``), ``units`` (prompts paired, or groups
    of the smaller window), ``first`` / ``last`` (the two windows' means over the same units),
    ``delta_unpaired`` (all trajectories of the last window minus the first), ``steps`` (steps
    seen), ``groups_first`` / ``groups_last``. ``paired=False`` or fewer than ``min_pairs`` prompts
    common to both windows: the unpaired group bootstrap. Raises ``ValueError`` when ``window`` <
    1 or the records hold fewer than ``2 × window`` steps (the two windows would overlap)."""
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
    first = [r for r in records if int(r["step"]) in first_steps]
    last = [r for r in records if int(r["step"]) in last_steps]
    a, b = _group_means(first, key), _group_means(last, key)
    pa, pb = _prompt_means(first, key), _prompt_means(last, key)
    common = sorted(set(pa) & set(pb))
    out: dict[str, Any] = {
        "delta_unpaired": float(np.mean(b) - np.mean(a)),
        "steps": len(steps),
        "groups_first": len(a),
        "groups_last": len(b),
        "ci_low": None,
        "ci_high": None,
    }
    rng = np.random.default_rng(seed)
    if paired and len(common) >= max(2, min_pairs):
        x = np.asarray([pa[p] for p in common])
        y = np.asarray([pb[p] for p in common])
        out.update(pairing="prompt", units=len(common), first=float(x.mean()), last=float(y.mean()))
        out["delta"] = float((y - x).mean())
        res = stats.bootstrap(
            (y - x,), np.mean, vectorized=True, n_resamples=n_boot, confidence_level=0.95, method="percentile", rng=rng
        )
    else:
        out.update(pairing="none", units=min(len(a), len(b)), first=float(np.mean(a)), last=float(np.mean(b)))
        out["delta"] = out["delta_unpaired"]
        if len(a) < 2 or len(b) < 2:
            return out

        def diff(u: Any, v: Any, axis: int = -1) -> Any:
            return np.mean(v, axis=axis) - np.mean(u, axis=axis)

        res = stats.bootstrap(
            (np.asarray(a), np.asarray(b)),
            diff,
            paired=False,
            vectorized=True,
            n_resamples=n_boot,
            confidence_level=0.95,
            method="percentile",
            rng=rng,
        )
    out["ci_low"] = float(res.confidence_interval.low)
    out["ci_high"] = float(res.confidence_interval.high)
    return out
