"""`shopcomp grpo launch` and scripts/run_grpo.sh: the verl command they build (no verl, no Ray)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from shopping_companion.trainers.launch import launch_command

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "run_grpo.sh"


def test_launch_runs_verl_with_this_interpreter_and_absolute_data_paths(tmp_path, monkeypatch):
    # `python` on PATH may be another environment (no verl); Ray actors do not share our cwd
    monkeypatch.chdir(tmp_path)
    cmd = launch_command("outcome_only", "/m", Path("rel/data"), ["trainer.nnodes=2"])
    assert cmd[:3] == [sys.executable, "-m", "verl.trainer.main_ppo"]
    assert f"data.train_files={tmp_path / 'rel' / 'data' / 'train.parquet'}" in cmd
    assert f"data.val_files={tmp_path / 'rel' / 'data' / 'test.parquet'}" in cmd
    assert "--config-name=outcome_only" in cmd and cmd[-1] == "trainer.nnodes=2"


def _fake_env(tmp_path: Path) -> dict[str, str]:
    """A fake `ray` (status: no cluster) and a fake interpreter that prints its arguments."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "ray").write_text('#!/bin/sh\necho "ray $*" >&2\n[ "$1" = status ] && exit 1\nexit 0\n')
    (bin_ / "python").write_text('#!/bin/sh\necho "ARGS $*"\n')
    for f in bin_.iterdir():
        f.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_}:{os.environ['PATH']}", "PYTHON": str(bin_ / "python")}


def _run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=60)


def test_run_grpo_train_passes_options_and_overrides(tmp_path):
    env = _fake_env(tmp_path)
    data = tmp_path / "mydata"
    data.mkdir()
    (data / "train.parquet").write_bytes(b"")
    # a --data relative to the caller's directory (the script itself runs from the repository root)
    r = _run(
        ["train", "--variant", "outcome_only", "--model", "/ckpt/m", "--data", "mydata", "trainer.nnodes=2"],
        env,
        tmp_path,
    )
    assert r.returncode == 0, r.stderr
    line = next(x for x in r.stdout.splitlines() if x.startswith("ARGS "))
    assert line.split()[1:] == [
        "-m",
        "shopping_companion.cli.grpo",
        "launch",
        "--variant",
        "outcome_only",
        "--rows-dir",
        str(data),
        "--model",
        "/ckpt/m",
        "--run",
        "trainer.nnodes=2",
    ]
    assert "ray start --head" in r.stderr  # no cluster running: a local head first


def test_run_grpo_reports_a_missing_option_value_and_prints_usage(tmp_path):
    env = _fake_env(tmp_path)
    for args in (["train", "--model"], ["train", "--data"], ["worker", "--address"], ["head", "--port"]):
        r = _run(args, env, tmp_path)
        assert r.returncode == 2 and "needs a value" in r.stderr, (args, r.stderr)
    usage = _run([], env, tmp_path)
    assert usage.returncode == 2 and "run_grpo.sh train" in usage.stdout
    assert all(x.startswith("#") for x in usage.stdout.splitlines())  # the header only, no script lines


def test_check_without_verl_says_which_environment_has_it():
    import importlib.util

    import pytest
    from typer.testing import CliRunner

    from shopping_companion.cli.grpo import app

    if importlib.util.find_spec("verl") is not None:
        pytest.skip("verl is installed here: tests/extras/rl/test_grpo_launch_check.py covers --check")
    r = CliRunner().invoke(app, ["launch", "--variant", "gpu_smoke", "--model", "/m", "--check"])
    assert r.exit_code == 2 and "install_rl.sh" in r.output and "--check" in r.output
    r = CliRunner().invoke(app, ["launch", "--variant", "nope"])
    assert r.exit_code == 2 and "gpu_smoke" in r.output  # the message lists the configs


def test_a_local_model_path_becomes_absolute_and_a_hub_id_is_passed_on(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models" / "tiny").mkdir(parents=True)
    cmd = launch_command("gpu_smoke", "models/tiny", Path("d"), [])
    assert f"actor_rollout_ref.model.path={tmp_path / 'models' / 'tiny'}" in cmd
    assert "actor_rollout_ref.model.path=Qwen/Qwen3-0.6B" in launch_command(
        "gpu_smoke", "Qwen/Qwen3-0.6B", Path("d"), []
    )


def test_launch_rows_dir_and_the_deprecated_data_dir_alias(tmp_path):
    """--rows-dir is the parquet folder (--data-dir means the raw data everywhere else); the old
    --data-dir spelling still works here, with a note, and a disagreeing pair is refused."""
    from typer.testing import CliRunner

    from shopping_companion.cli.grpo import app

    rows = tmp_path / "rows"
    r = CliRunner().invoke(app, ["launch", "--variant", "outcome_only", "--rows-dir", str(rows), "x.y=1"])
    assert r.exit_code == 0, r.output
    assert f"data.train_files={rows / 'train.parquet'}" in r.stdout and r.stdout.rstrip().endswith("x.y=1")
    old = CliRunner().invoke(app, ["launch", "--variant", "outcome_only", "--data-dir", str(rows), "x.y=1"])
    assert old.exit_code == 0 and old.stdout == r.stdout
    assert "--data-dir is deprecated; use --rows-dir" in " ".join(old.stderr.split())
    both = CliRunner().invoke(app, ["launch", "--rows-dir", str(rows), "--data-dir", str(tmp_path / "other")])
    assert both.exit_code == 2 and "disagree" in both.output
    helptext = CliRunner().invoke(app, ["launch", "-h"], terminal_width=80).output
    assert "--rows-dir DIR" in helptext and "--data-dir" not in helptext
