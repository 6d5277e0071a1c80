"""GRPO datasets: one parquet row per (task, stage) (Shopping Companion App. D.1: 800 train tasks →
1,600 rows, 200 test tasks → 400 rows), in the layout verl's ``RLHFDataset`` reads.

Columns of each row:

``data_source``  ``"shopping_companion"``.
``agent_name``   the verl agent loop that plays the row (``"shopping_companion"``).
``prompt``       the stage's opening chat (system + user messages, OpenAI form). Stage 1: the
                 stage-1 prompts. Stage 2: the stage-2 prompts with the gold preferences handed
                 over (what the episode shows when ``stage1="gold"`` and ``hint="none"``); with
                 ``stage1="policy"`` the episode starts at stage 1, so the row holds stage 1's
                 opening. The agent loop always rebuilds the chat from the environment; this column
                 is what verl's length filter and logs see.
``ability``      ``"shopping_agent"``.
``reward_model`` ``{"style": "rule", "ground_truth": <JSON string>}``: the gold preferences,
                 reference product ids and needle session ids of the task.
``extra_info``   ``index`` (row number), ``split``, ``task_id``, ``task_type``, ``stage`` (1|2),
                 ``stage1`` (who plays stage 1 of a stage-2 row: ``gold``|``policy``), ``hint``
                 (user-simulator hint between the stages: ``none``|``low``|``high``) and
                 ``benchmark`` (the benchmark directory the task comes from).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Sequence

from shopping_companion.envs.simulator import HINTS
from shopping_companion.errors import ConfigError, DataError
from shopping_companion.types import Task

__all__ = ["AGENT_NAME", "DATA_SOURCE", "HINTS", "task_rows", "build_rows", "write_parquet", "prepare_datasets"]

AGENT_NAME = "shopping_companion"
DATA_SOURCE = "shopping_companion"


def _ground_truth(task: Task) -> str:
    return json.dumps(
        {
            "task_id": task.task_id,
            "preferences": [p.model_dump() for p in task.preferences],
            "reference_product_ids": task.reference_product_ids,
            "needle_session_ids": list(task.needle_session_ids),
        },
        ensure_ascii=False,
        sort_keys=True,
    )


def _opening(task: Task, stage: int, stage1: str, max_turns: int) -> list[dict[str, str]]:
    from shopping_companion.envs import prompts

    if stage == 1 or stage1 == "policy":
        return [
            {"role": "system", "content": prompts.stage1_system(max_turns)},
            {"role": "user", "content": prompts.stage1_user(task)},
        ]
    return [
        {"role": "system", "content": prompts.stage2_system(max_turns)},
        {"role": "user", "content": prompts.stage2_user(task, list(task.preferences), None)},
    ]


def task_rows(
    task: Task,
    *,
    benchmark: str,
    stages: Sequence[int] = (1, 2),
    stage1: str = "gold",
    hint: str = "none",
    max_turns: int = 20,
) -> list[dict[str, Any]]:
    """The rows of one task (one per stage in ``stages``); ``index`` is filled by :func:`build_rows`.

    Raises :class:`~shopping_companion.errors.ConfigError` naming the field for a stage not in
    {1, 2} or given twice, ``stage1`` not in {gold, policy} or ``hint`` not in {none, low, high}.
    """
    bad = [s for s in stages if s not in (1, 2)]
    if bad or not stages:
        raise ConfigError(f"stages: each must be 1 or 2 (got {list(stages)!r})")
    if len(set(stages)) != len(stages):
        raise ConfigError(
            f"stages: each stage at most once (got {list(stages)!r}); a repeated stage would duplicate rows"
        )
    if stage1 not in ("gold", "policy"):
        raise ConfigError(f"stage1: must be 'gold' or 'policy', got {stage1!r}")
    if hint not in HINTS:
        raise ConfigError(f"hint: must be one of {HINTS}, got {hint!r}")
    rows = []
    for stage in stages:
        rows.append(
            {
                "data_source": DATA_SOURCE,
                "agent_name": AGENT_NAME,
                "prompt": _opening(task, stage, stage1, max_turns),
                "ability": "shopping_agent",
                "reward_model": {"style": "rule", "ground_truth": _ground_truth(task)},
                "extra_info": {
                    "index": -1,
                    "split": task.split,
                    "task_id": task.task_id,
                    "task_type": task.task_type,
                    "stage": int(stage),
                    "stage1": stage1,
                    "hint": hint,
                    "benchmark": benchmark,
                },
            }
        )
    return rows


def build_rows(
    tasks: Iterable[Task],
    *,
    benchmark: str,
    stages: Sequence[int] = (1, 2),
    stage1: str = "gold",
    hint: str = "none",
    max_turns: int = 20,
) -> list[dict[str, Any]]:
    """All rows of ``tasks`` in task order (stage 1 then stage 2 per task), ``index`` = row number."""
    rows: list[dict[str, Any]] = []
    for t in tasks:
        rows += task_rows(t, benchmark=benchmark, stages=stages, stage1=stage1, hint=hint, max_turns=max_turns)
    for i, r in enumerate(rows):
        r["extra_info"]["index"] = i
    return rows


def write_parquet(rows: list[dict[str, Any]], path: str | Path) -> Path:
    """Write rows with pyarrow (nested columns as structs/lists); returns the path."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not rows:
        raise DataError(f"{path}: no rows to write (empty split?)")
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), p)
    return p


def prepare_datasets(
    benchmark: str | Path,
    out_dir: str | Path,
    *,
    stages: Sequence[int] = (1, 2),
    stage1: str = "gold",
    hint: str = "none",
    max_turns: int = 20,
    limit: int | None = None,
) -> dict[str, Any]:
    """Write ``train.parquet`` and ``test.parquet`` for the benchmark's train and test splits.

    ``limit`` keeps the first ``limit`` tasks of each split (smoke runs). Returns a summary:
    paths, task and row counts per split. Raises
    :class:`~shopping_companion.errors.BenchmarkMissingError` for a directory that is not a complete
    benchmark, :class:`~shopping_companion.errors.DataError` for an empty split and
    :class:`~shopping_companion.errors.ConfigError` for a bad option (nothing is written then).
    """
    from shopping_companion.assembly.data import load_benchmark

    bench = Path(benchmark).resolve()
    b = load_benchmark(bench)
    out = Path(out_dir)
    summary: dict[str, Any] = {
        "benchmark": str(bench),
        "stages": list(stages),
        "stage1": stage1,
        "hint": hint,
        "max_turns": max_turns,
        "splits": {},
    }
    # check every split and build every row before writing anything: a failure must not leave a
    # new train.parquet next to an older test.parquet / prepare.json in a reused output directory
    built: dict[str, tuple[list[Task], list[dict[str, Any]]]] = {}
    for split in ("train", "test"):
        tasks = [t for t in b.tasks if t.split == split][:limit]
        if not tasks:
            raise DataError(f"split {split!r}: the benchmark {bench} has no {split} tasks")
        built[split] = (
            tasks,
            build_rows(tasks, benchmark=str(bench), stages=stages, stage1=stage1, hint=hint, max_turns=max_turns),
        )
    for split, (tasks, rows) in built.items():
        path = write_parquet(rows, out / f"{split}.parquet")
        summary["splits"][split] = {"path": str(path), "tasks": len(tasks), "rows": len(rows)}
    (out / "prepare.json").write_text(json.dumps(summary, indent=2))
    return summary
