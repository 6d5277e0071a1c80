"""``shopcomp grpo trl`` refuses to resume a checkpoint with a changed config (break-test finding
17.1): the real command trains one step on CPU with the tiny tool-calling model, then a second
invocation with another rubric, learning rate and row limit is refused naming every changed field,
and the stored ``config.yaml`` is left as the first run wrote it. A change of only the fields a
resume may change (length, logging, reporting) passes the same check."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.extras.rl.conftest import require

require("trl", "datasets", "peft")

REPO = Path(__file__).resolve().parents[3]
CPU_CONFIG = REPO / "configs" / "grpo" / "trl_cpu.yaml"


@pytest.fixture(scope="module")
def bench_dir(synth_bench, tmp_path_factory) -> Path:
    from shopping_companion.benchmark.synth import write_benchmark

    bench = synth_bench(2, seed=23, sessions_per_user=30, test_fraction=0.0)
    return write_benchmark(bench, tmp_path_factory.mktemp("trlresume") / "bench")


def _invoke(args: list[str]):
    from shopping_companion.cli import app

    return CliRunner().invoke(app, ["grpo", "trl", *args])


def test_resume_with_a_changed_config_is_refused_naming_each_field(
    tmp_path, bench_dir, tool_model_dir, catalog_index_dir
):
    out = tmp_path / "run"
    common = [
        "--config",
        str(CPU_CONFIG),
        "--model",
        str(tool_model_dir),
        "--bench",
        str(bench_dir),
        "--output-dir",
        str(out),
        "--set",
        f"index_dir={catalog_index_dir}",
        "--set",
        "rows.limit=1",
        "--set",
        "trainer.report_to=none",
    ]
    first = _invoke([*common, "--max-steps", "1"])
    assert first.exit_code == 0, first.output
    assert (out / "checkpoint-1" / "trainer_state.json").is_file()
    stored = (out / "config.yaml").read_text()

    res = _invoke(
        [
            *common,
            "--max-steps",
            "2",
            "--reward-config",
            "outcome_only",
            "--set",
            "trainer.learning_rate=5e-5",
            "--set",
            "rows.limit=2",
        ]
    )
    text = " ".join(res.output.split())
    assert res.exit_code == 2, res.output
    assert f"resume: {out / 'checkpoint-1'} was trained with another config" in text
    assert "reward_config: 'paper' → 'outcome_only'" in text
    assert "trainer.learning_rate: 0.0001 → 5e-05" in text
    assert "rows.limit: 1 → 2" in text
    assert "reward_spec.rubric: 'paper' → 'outcome_only'" in text
    assert "trainer.max_steps" not in text.split("changed:")[1].split(". A resume")[0]  # allowed to change
    assert "another --output-dir" in text
    assert "Traceback" not in res.output
    assert (out / "config.yaml").read_text() == stored  # the stored config is kept
    assert not (out / "checkpoint-2").exists()  # nothing trained

    # only fields a resume may change: the same check passes
    from shopping_companion.config import load_model
    from shopping_companion.rewards.spec import load_reward_spec
    from shopping_companion.trainers.trl_train import TrlGrpoConfig, check_resume_config

    again = load_model(
        TrlGrpoConfig,
        out / "config.yaml",
        [
            "trainer.max_steps=5",
            "trainer.logging_steps=2",
            "trainer.save_steps=3",
            "trainer.report_to=tensorboard",
            "trainer.run_name=again",
            "resume=true",
        ],
    )
    check_resume_config(again, load_reward_spec(again.reward_config).identity(), out / "checkpoint-1")
