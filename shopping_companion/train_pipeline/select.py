"""Choosing the tasks GRPO trains on by the SFT model's reward spread (the pipeline's ``select``
phase; docs/pipeline.md, "Choosing the GRPO prompts").

GRPO learns only from groups whose rewards differ: a group's advantages are its rewards minus
their mean, so a prompt the policy always solves, or never does, contributes no gradient (TRL logs
the share of such groups as ``frac_reward_zero_std``; DAPO, Yu et al. 2025, §3.2, filters them out
while sampling). With a few prompts per step, as on one CPU, a prompt that cannot move still takes
a slot of every batch. The ``select`` phase therefore plays each train task a few times with the
SFT model at the GRPO sampling settings and keeps the tasks whose outcome reward R_z varied.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from statistics import pvariance
from typing import Any

from shopping_companion.errors import DataError
from shopping_companion.runs import scan_jsonl

__all__ = ["select_by_spread"]


def select_by_spread(results: str | Path, limit: int) -> dict[str, Any]:
    """The ``limit`` tasks of an evaluation's ``results.jsonl`` whose R_z varied most across trials.

    Tasks are ranked by the number of their stages (0–2) whose R_z was not the same in every trial,
    then by the sum over stages of R_z's population variance across trials, then by the order in
    which the file first names them (benchmark order). Episodes that failed (``error``) count with
    R_z 0 for the stages they did not reach.

    Returns ``task_ids`` (the chosen tasks, best first; ``limit`` of them or every task when fewer),
    ``candidates`` (tasks seen), ``stages_with_spread`` (of the chosen tasks) and
    ``stages_with_spread_all``, and ``table``: ``{task_id: {"stages_with_spread": n, "variance": v,
    "R_z": {stage: [per-trial values]}}}``. Raises :class:`~shopping_companion.errors.DataError`
    when the file holds no episode, and ``ValueError`` for ``limit`` < 1.
    """
    if limit < 1:
        raise ValueError(f"limit: must be >= 1, got {limit}")
    per_task: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for rec in scan_jsonl(results, json.loads).records:
        if not isinstance(rec, dict) or not isinstance(rec.get("task_id"), str):
            continue
        stages = rec.get("stages") or []
        for i in (1, 2):
            st = stages[i - 1] if i - 1 < len(stages) and isinstance(stages[i - 1], dict) else {}
            comp = (st.get("reward") or {}).get("components") or {}
            per_task[rec["task_id"]][i].append(float(comp.get("R_z", 0.0)))
    if not per_task:
        raise DataError(f"{results}: no episode to choose GRPO tasks from")
    table: dict[str, dict[str, Any]] = {}
    for tid, by_stage in per_task.items():
        spread = sum(1 for v in by_stage.values() if len(v) > 1 and max(v) != min(v))
        variance = sum(pvariance(v) for v in by_stage.values() if len(v) > 1)
        table[tid] = {"stages_with_spread": spread, "variance": round(variance, 6), "R_z": dict(by_stage)}
    order = {tid: i for i, tid in enumerate(per_task)}
    ranked = sorted(table, key=lambda t: (-table[t]["stages_with_spread"], -table[t]["variance"], order[t]))
    chosen = ranked[:limit]
    return {
        "task_ids": chosen,
        "candidates": len(table),
        "stages_with_spread": sum(table[t]["stages_with_spread"] for t in chosen),
        "stages_with_spread_all": sum(v["stages_with_spread"] for v in table.values()),
        "table": table,
    }
