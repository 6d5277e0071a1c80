"""A resumed TRL run's summary covers the step logs of earlier invocations: ``metrics.jsonl`` read
leniently (lines that are not a JSON object with a ``step`` are passed over, never fatal)."""

from __future__ import annotations

import json
from pathlib import Path

from shopping_companion.trainers.trl_train import _earlier_logs


def test_earlier_logs_keep_the_step_records_and_pass_over_the_rest(tmp_path: Path) -> None:
    lines = [
        json.dumps({"step": 1, "loss": 0.5}),
        "not json",
        "",
        json.dumps([1, 2]),
        json.dumps({"loss": 0.4}),  # no step
        json.dumps({"step": 2, "loss": 0.3}),
    ]
    (tmp_path / "metrics.jsonl").write_text("\n".join(lines) + "\n" + '{"step": 3', encoding="utf-8")
    assert _earlier_logs(tmp_path) == [{"step": 1, "loss": 0.5}, {"step": 2, "loss": 0.3}]


def test_earlier_logs_of_a_first_run_are_empty(tmp_path: Path) -> None:
    assert _earlier_logs(tmp_path) == []
