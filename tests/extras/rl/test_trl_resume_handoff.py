"""A GRPO run resumed from a checkpoint still proves what its first rollouts sampled from (the
hash is written when first known and read back on resume; the pipeline compares it with the SFT
weights), and its summary covers the steps of every invocation."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from tests.extras.rl.conftest import require

require("trl", "datasets", "peft")

REPO = Path(__file__).resolve().parents[3]
CPU_CONFIG = REPO / "configs" / "grpo" / "trl_cpu.yaml"


def test_resumed_run_still_proves_its_first_rollouts_came_from_the_given_model(
    tmp_path, synth_bench, tool_model_dir, catalog_index_dir
):
    from shopping_companion.benchmark.synth import write_benchmark
    from shopping_companion.cli import app
    from shopping_companion.llm.weights import weights_sha256

    bench = write_benchmark(synth_bench(3, seed=17, sessions_per_user=30, test_fraction=0.0), tmp_path / "bench")
    out = tmp_path / "run"
    common = [
        "grpo",
        "trl",
        "--config",
        str(CPU_CONFIG),
        "--model",
        str(tool_model_dir),
        "--bench",
        str(bench),
        "--output-dir",
        str(out),
        "--set",
        f"index_dir={catalog_index_dir}",
        # weight decay moves the weights even when no group has reward variance
        "--set",
        "trainer.extra_args={weight_decay: 0.5}",
        "--set",
        "trainer.learning_rate=0.001",
        "--set",
        "trainer.save_steps=1",
    ]
    given = weights_sha256(tool_model_dir)
    r1 = CliRunner().invoke(app, [*common, "--max-steps", "1"])  # a run killed after checkpoint-1
    assert r1.exit_code == 0, r1.output
    s1 = json.loads((out / "summary.json").read_text())
    assert s1["first_rollout_weights_sha256"] == given
    assert s1["checkpoint_weights_sha256"][str(out / "checkpoint-1")] != given  # step 1 moved the weights
    r2 = CliRunner().invoke(app, [*common, "--max-steps", "2"])  # the pipeline's rerun resumes
    assert r2.exit_code == 0, r2.output
    s2 = json.loads((out / "summary.json").read_text())
    assert s2["resumed_from"] == str(out / "checkpoint-1")
    # what the pipeline compares with the SFT hash (train_pipeline/run.py phase_grpo):
    assert s2["first_rollout_weights_sha256"] == given
    assert [h["step"] for h in s2["logged"]] == [1, 2]
