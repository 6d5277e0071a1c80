"""The pipeline's ``select`` phase choice (train_pipeline/select.py): the tasks whose R_z varied
across the SFT model's trials train first, ties by variance then benchmark order."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shopping_companion.errors import DataError
from shopping_companion.train_pipeline.select import select_by_spread


def _episode(task_id: str, trial: int, r1: float, r2: float | None) -> dict:
    stages = [{"reward": {"components": {"R_z": r1, "stage": 1.0}}}]
    if r2 is not None:
        stages.append({"reward": {"components": {"R_z": r2, "stage": 2.0}}})
    return {"task_id": task_id, "trial": trial, "stages": stages}


def _write(path: Path, episodes: list[dict]) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in episodes), encoding="utf-8")
    return path


def test_tasks_whose_outcome_varied_are_chosen_first(tmp_path: Path) -> None:
    trials = {
        "always": [(1.0, 1.0)] * 4,  # solved every time: no advantage to learn from
        "never": [(0.0, 0.0)] * 4,
        "one_stage": [(0.5, 1.0), (0.5, 0.0), (0.5, 1.0), (0.5, 1.0)],
        "both": [(0.0, 1.0), (1.0, 0.0), (0.5, 1.0), (1.0, 1.0)],
        "one_stage_wide": [(0.0, 1.0), (1.0, 1.0), (0.0, 1.0), (1.0, 1.0)],
    }
    eps = [_episode(t, i, *v) for t, vs in trials.items() for i, v in enumerate(vs)]
    out = select_by_spread(_write(tmp_path / "results.jsonl", eps), 3)
    # "both" varied in two stages; of the one-stage tasks the wider spread (variance 0.25) goes first
    assert out["task_ids"] == ["both", "one_stage_wide", "one_stage"]
    assert out["candidates"] == 5
    assert out["stages_with_spread"] == 4 and out["stages_with_spread_all"] == 4
    assert out["table"]["always"]["stages_with_spread"] == 0
    assert out["table"]["one_stage"]["R_z"][2] == [1.0, 0.0, 1.0, 1.0]


def test_ties_keep_benchmark_order_and_a_short_list_is_whole(tmp_path: Path) -> None:
    eps = [_episode(t, i, 1.0, 1.0) for t in ("b", "a", "c") for i in range(2)]
    out = select_by_spread(_write(tmp_path / "r.jsonl", eps), 5)
    assert out["task_ids"] == ["b", "a", "c"] and out["stages_with_spread"] == 0


def test_an_episode_that_stopped_early_counts_zero_for_the_missing_stage(tmp_path: Path) -> None:
    eps = [_episode("x", 0, 1.0, 1.0), _episode("x", 1, 1.0, None), {"task_id": "x", "trial": 2, "error": "boom"}]
    out = select_by_spread(_write(tmp_path / "r.jsonl", eps), 1)
    assert out["table"]["x"]["R_z"] == {1: [1.0, 1.0, 0.0], 2: [1.0, 0.0, 0.0]}
    assert out["table"]["x"]["stages_with_spread"] == 2


def test_an_empty_results_file_and_a_bad_limit_are_refused(tmp_path: Path) -> None:
    empty = _write(tmp_path / "r.jsonl", [])
    with pytest.raises(DataError, match="no episode"):
        select_by_spread(empty, 2)
    with pytest.raises(ValueError, match="limit"):
        select_by_spread(_write(tmp_path / "s.jsonl", [_episode("x", 0, 1.0, 1.0)]), 0)
