"""The whole training chain (`shopcomp pipeline`), 2 steps per training phase: the hand-offs and the
report, not learning (benchmarks/bench_learning.py measures that, outside CI).

Runs in the main environment (``.venv``) and drives the other two stacks through their
interpreters: LLaMA-Factory in ``.venv-sft``, TRL in ``.venv-rl`` (scripts/test.sh installs them
before this suite). Real data from ../shared/data, a real scripted teacher over HTTP on 127.0.0.1,
a real nano model built from a config, real LLaMA-Factory and TRL runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
SFT_PY = ROOT / ".venv-sft" / "bin" / "python"
RL_PY = ROOT / ".venv-rl" / "bin" / "python"

SETS = [
    "benchmark.synth.n_tasks=6",
    "benchmark.synth.test_fraction=0.34",
    "benchmark.synth.pool_size=60",
    "collect.trials=2",
    "model.nano.vocab_size=800",
    "model.nano.hidden_size=64",
    "model.nano.intermediate_size=128",
    "model.nano.num_hidden_layers=1",
    "model.nano.max_position_embeddings=4096",
    "sft.args.max_steps=2",
    "sft.args.num_train_epochs=1.0",
    "sft.args.per_device_train_batch_size=4",
    "grpo.trainer.max_steps=2",
    "grpo.trainer.extra_args={warmup_steps: 1}",  # the shipped 4 would not end before step 2
    "grpo.trainer.per_device_train_batch_size=4",
    "grpo.trainer.num_generations=2",
    "grpo.trainer.max_completion_length=768",
    "grpo.rows.limit=2",
    "grpo.select={by: spread, trials: 2}",  # the select phase (off in the shipped config)
    "env.max_turns=3",
    "env.max_tokens_per_turn=24",
    "eval.trials=2",
    "eval.concurrency=8",
    "eval.checkpoints=all",  # checkpoint-1 of each arm too
    "grpo.trainer.save_steps=1",
    "grpo.trainer.save_total_limit=2",
]


def _require_stacks() -> None:
    missing = [str(p) for p in (SFT_PY, RL_PY) if not p.is_file()]
    if missing:
        msg = f"the pipeline needs {missing} (scripts/install_sft.sh, scripts/install_rl.sh)"
        if os.environ.get("SHOPCOMP_REQUIRE_EXTRAS") == "1":
            pytest.fail(msg)
        pytest.skip(msg)


def _run(runs: Path, *extra: str) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable,
        "-m",
        "shopping_companion.cli",
        "pipeline",
        "--config",
        str(ROOT / "configs/pipeline/cpu_nano.yaml"),
        "--runs-dir",
        str(runs),
        "--name",
        "chain",
        *[x for s in SETS for x in ("--set", s)],
        *extra,
    ]
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env, timeout=1800)


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess]:
    _require_stacks()
    runs = tmp_path_factory.mktemp("pipeline")
    res = _run(runs)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-6000:]
    return runs / "chain", res


def test_every_phase_finished_with_its_outputs(chain: tuple[Path, subprocess.CompletedProcess]) -> None:
    run, _ = chain
    for phase in ("bench", "collect", "model", "sft", "select", "grpo/outcome_only", "grpo/outcome_tool"):
        rec = json.loads((run / phase / "phase.json").read_text())
        assert rec["status"] == "done" and rec["wall_s"] > 0, phase
    # the select phase chose rows.limit of the train tasks, and each arm trained on exactly those
    chosen = json.loads((run / "select" / "phase.json").read_text())["outputs"]
    n_train = json.loads((run / "bench" / "phase.json").read_text())["outputs"]["train"]
    assert len(chosen["task_ids"]) == 2 and chosen["candidates"] == n_train
    for arm in ("outcome_only", "outcome_tool"):
        conf = yaml.safe_load((run / "grpo" / arm / "trl.yaml").read_text())
        assert conf["rows"]["task_ids"] == chosen["task_ids"], arm
        trained = {json.loads(line)["task_id"] for line in (run / "grpo" / arm / "trl" / "rollouts.jsonl").open()}
        assert trained <= set(chosen["task_ids"]), (arm, trained)
    for model in ("base", "sft", "outcome_only", "outcome_tool"):
        for split in ("test", "train"):
            rec = json.loads((run / "eval" / model / split / "phase.json").read_text())
            assert rec["status"] == "done"
            assert Path(rec["outputs"]["results"]).is_file()
    # the SFT data renders in LLaMA-Factory exactly as the policy's chat template renders it
    lf = json.loads((run / "sft" / "phase.json").read_text())["outputs"]["lf_check"]
    assert lf["records"] > 0 and lf["mismatches"] == 0


def test_handoffs_are_proven_by_weight_hashes(chain: tuple[Path, subprocess.CompletedProcess]) -> None:
    run, _ = chain
    report = json.loads((run / "report.json").read_text())
    h = {x["checkpoint"]: x for x in report["handoffs"]}
    base, sft = h["base"]["weights_sha256"], h["sft"]["weights_sha256"]
    assert base and sft and base != sft  # SFT changed the weights
    for arm in ("outcome_only", "outcome_tool"):
        g = h[f"grpo {arm}"]
        assert g["first_rollout_weights_sha256"] == sft  # GRPO sampled from the SFT model first
        assert g["weights_sha256"]
        zero = report["learning"][arm]["zero_std_groups"]["mean"]
        # GRPO moved the weights exactly when some group had reward variance (a gradient)
        assert (g["weights_sha256"] != sft) == (zero < 1.0), (zero, g)
    expected = {
        "base": base,
        "sft": sft,
        **{a: h[f"grpo {a}"]["weights_sha256"] for a in ("outcome_only", "outcome_tool")},
    }
    for arm in ("outcome_only", "outcome_tool"):
        grpo = json.loads((run / "grpo" / arm / "phase.json").read_text())["outputs"]
        assert [c["step"] for c in grpo["checkpoints"]] == [1, 2]
        expected[f"{arm}@1"] = grpo["checkpoints"][0]["weights_sha256"]
    for row in report["table"]:
        assert row["weights_sha256"] == expected[row["model"]], row  # each eval loaded what it names


def test_report_has_the_table_curves_and_wall_times(chain: tuple[Path, subprocess.CompletedProcess]) -> None:
    run, _ = chain
    md = (run / "report.md").read_text()
    report = json.loads((run / "report.json").read_text())
    models = ("base", "sft", "outcome_only@1", "outcome_only", "outcome_tool@1", "outcome_tool")
    assert {(r["model"], r["split"]) for r in report["table"]} == {(m, s) for m in models for s in ("test", "train")}
    for r in report["table"]:
        assert r["n"] and r["format_valid"]["turns"] > 0
        assert set(r["pass^k"]) == {"1", "2"}
    assert "scripted teacher" in report["teacher"] and "not a model" in report["teacher"]
    assert "plumbing check" in md
    assert (run / "curves.png").stat().st_size > 1000
    for arm in ("outcome_only", "outcome_tool"):
        assert report["learning"][arm]["trajectories"] > 0
        assert (run / "grpo" / arm / "trl" / "rollouts.jsonl").is_file()
    assert set(report["wall_s"]["phases"]) >= {"bench", "collect", "model", "sft"}
    assert "| sft | test |" in md and "pass^2" in md
    # the hand-off line says what was checked, from the records
    assert "first rollouts sampled from the SFT weights: `outcome_only`, `outcome_tool`" in md
    assert "12 evaluations loaded the weights of the checkpoint they name" in md and "not checked" not in md


def test_grpo_summary_keeps_every_logged_metric(chain: tuple[Path, subprocess.CompletedProcess]) -> None:
    run, _ = chain
    summary = json.loads((run / "grpo" / "outcome_tool" / "trl" / "summary.json").read_text())
    assert summary["steps"] == 2 and len(summary["logged"]) == 2
    for entry in summary["logged"]:
        assert {"entropy", "frac_reward_zero_std", "grad_norm", "rewards/R_tool/mean"} <= set(entry)
    metrics = (run / "grpo" / "outcome_tool" / "trl" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in metrics] == [1, 2]
    assert summary["zero_std_groups"]["steps"] == 2


def test_rerun_reuses_every_phase(chain: tuple[Path, subprocess.CompletedProcess]) -> None:
    run, _ = chain
    res = _run(run.parent)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-4000:]
    out = res.stdout + res.stderr
    assert "] running" not in out
    assert out.count("reused") == 7 + 6 * 2  # 4 phases, select, 2 arms, 6 models x 2 splits


def test_changed_settings_are_refused_not_mixed(chain: tuple[Path, subprocess.CompletedProcess]) -> None:
    run, _ = chain
    res = _run(run.parent, "--set", "grpo.trainer.learning_rate=0.001")
    assert res.returncode == 2
    assert "phase grpo:outcome_only" in res.stderr + res.stdout and "--fresh" in res.stderr + res.stdout


def test_grpo_pointed_at_the_base_model_is_caught(chain: tuple[Path, subprocess.CompletedProcess]) -> None:
    run, _ = chain
    base = json.loads((run / "model" / "phase.json").read_text())["outputs"]["path"]
    res = _run(run.parent, "--fresh", "grpo", "--set", f"grpo.extra.model={base}")
    out = res.stdout + res.stderr
    assert res.returncode == 3, out[-3000:]
    assert "hand-off is broken" in out and "not the SFT model" in out
    moved = [p.name for p in (run / "grpo").iterdir() if ".stale-" in p.name]
    assert moved  # the earlier arms were moved aside, not deleted
