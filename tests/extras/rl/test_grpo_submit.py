"""`shopcomp grpo submit` against a real local Ray cluster (the session's, conftest.ray_cluster: head
with dashboard and job agent, 2 CPUs):
the packaging smoke job (`--smoke`) and the real verl entrypoint (`--cfg job --resolve`: Hydra
composes and prints the config in the job and exits, so no GPU is needed) run under the job's
runtime_env; the imports must come from the shipped copy, `grpo_judged` must be registered with
verl's entry points switched off, and the spec's JSON must reach verl's config unchanged."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest

from tests.extras.rl.conftest import require

require("verl", "hydra", "ray")

from tests.extras.rl.test_grpo_launch_check import _bench  # noqa: E402

PLUGIN = """
from shopping_companion.rewards.rubric import Rubric, reward
from submit_plugin_pkg import WEIGHT  # a package next to the module: shipped through py_modules

@reward("brev_submit", key="brev_submit", needs=("trajectory",))
def brevity(ctx):
    return 1.0 / (1 + len(ctx.trajectory.steps))

RUBRIC = Rubric([("outcome", 1.0), ("format", 1.0), (brevity, WEIGHT)], name="brev_submit")
"""


@pytest.fixture(scope="module")
def ray_dashboard(ray_cluster):
    """The session's Ray cluster (conftest: one node, 2 CPUs) once its job API answers: its URL."""
    from ray.job_submission import JobSubmissionClient

    t0 = time.monotonic()
    for i in range(120):  # the job agent comes up shortly after the dashboard
        try:
            JobSubmissionClient(ray_cluster.dashboard_url).list_jobs()
            break
        except Exception:  # noqa: BLE001
            assert i < 119, "the Ray job API did not answer"
            time.sleep(0.5)
    print(f"ray job API ready in {time.monotonic() - t0:.1f} s")
    return ray_cluster.dashboard_url


def test_submit_smoke_and_the_real_entrypoint_run_on_the_cluster(tmp_path, tool_model_dir, ray_dashboard):
    from ray.job_submission import JobSubmissionClient

    from shopping_companion.rewards.spec import load_reward_spec
    from shopping_companion.trainers.rows import prepare_datasets

    bench = _bench(tmp_path)
    prepare_datasets(bench, tmp_path / "rows", limit=4)
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "submit_plugin_mod.py").write_text(PLUGIN)
    (tmp_path / "plugins" / "submit_plugin_pkg").mkdir()
    (tmp_path / "plugins" / "submit_plugin_pkg" / "__init__.py").write_text("WEIGHT = 0.5\n")
    # the rubric is a YAML file of its own (relative to the spec file), with a member from the plugin
    (tmp_path / "rubrics").mkdir()
    rubric = {
        "name": "brev_submit_yaml",
        "rewards": [
            {"name": "outcome", "weight": 1.0},
            {"name": "format", "weight": 1.0},
            {"path": "submit_plugin_mod:brevity", "weight": 0.5},
        ],
    }
    (tmp_path / "rubrics" / "submit_rubric.yaml").write_text(json.dumps(rubric))  # JSON is YAML
    spec_file = tmp_path / "reward.yaml"
    spec_file.write_text("rubric: rubrics/submit_rubric.yaml\npython_path: [plugins]\nscoring_deadline_s: 45\n")
    env = {
        **os.environ,
        "SHOPCOMP_CKPT_DIR": str(tmp_path / "ckpt"),
        "VERL_USE_EXTERNAL_PLUGINS": "none",  # no entry point: the estimator must come from our env var
        "MY_TEST_TOKEN": "s3cr3t-token-value",
    }
    env.pop("VERL_USE_EXTERNAL_MODULES", None)
    sid = f"shopcomp-test-{os.getpid()}"
    t0 = time.monotonic()
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "shopping_companion.cli.grpo",
            "submit",
            "--variant",
            "gpu_smoke",
            "--model",
            str(tool_model_dir),
            "--rows-dir",
            str(tmp_path / "rows"),
            "--reward-config",
            str(spec_file),
            "--address",
            ray_dashboard,
            "--submission-id",
            sid,
            "--env-var",
            "MY_TEST_TOKEN",
            "--smoke",
            "--cfg",
            "job",
            "--resolve",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
        cwd=tmp_path,
    )
    smoke_s = time.monotonic() - t0
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-6000:]
    assert "s3cr3t-token-value" not in out  # a secret passed by name is never printed
    assert "launch check passed" in r.stdout and f"submitted: {sid}" in r.stdout
    assert f"ray job logs --address {ray_dashboard} --follow {sid}" in r.stdout
    assert f"job stop --address {ray_dashboard} {sid}" in r.stdout
    report = json.loads(next(x for x in r.stdout.splitlines() if x.startswith("smoke report: "))[14:])
    for where in [report["driver"], *report["nodes"]]:
        assert where["problems"] == [], where
        assert where["shipped"] and "runtime_resources" in where["package"]  # not the editable install
        assert "runtime_resources" in where["modules"]["submit_plugin_mod"]  # from the working_dir
        assert "runtime_resources" in where["modules"]["submit_plugin_pkg"]  # from py_modules
        assert where["adv_estimator"]["registered"] and "runtime_resources" in where["adv_estimator"]["plugin"]
        assert where["components"] == ["R_z", "R_fmt", "brev_submit", "success", "stage"]
    assert len(report["nodes"]) == 1
    # the real verl entrypoint in the same runtime_env
    client = JobSubmissionClient(ray_dashboard)
    deadline = time.monotonic() + 240
    while str(client.get_job_status(sid)).rsplit(".", 1)[-1] not in ("SUCCEEDED", "FAILED", "STOPPED"):
        assert time.monotonic() < deadline, client.get_job_logs(sid)[-3000:]
        time.sleep(0.2)
    logs = client.get_job_logs(sid)
    assert str(client.get_job_status(sid)).endswith("SUCCEEDED"), logs[-4000:]
    info = client.get_job_info(sid)
    renv = info.runtime_env
    assert len(renv["py_modules"]) == 2 and all(m.startswith("gcs://") for m in renv["py_modules"])
    assert renv["working_dir"].startswith("gcs://")
    assert renv["env_vars"]["MY_TEST_TOKEN"] == "s3cr3t-token-value"
    assert renv["env_vars"]["VERL_USE_EXTERNAL_MODULES"] == "shopping_companion.trainers.verl_plugin"
    import yaml

    lines = logs.splitlines()
    start = next((i for i, x in enumerate(lines) if re.match(r"^[a-z_]+:( |$)", x)), None)
    assert start is not None, logs[-3000:]  # Hydra printed the composed config
    cfg = yaml.safe_load("\n".join(lines[start:]))
    rc = cfg["reward"]["custom_reward_function"]["reward_kwargs"]["reward_config"]
    spec = load_reward_spec(rc)
    assert spec.rubric == rubric and spec.scoring_deadline_s == 45 and spec.python_path == []  # inlined
    assert str(tmp_path) not in json.dumps({k: v for k, v in json.loads(rc).items() if k != "source"})
    assert cfg["trainer"]["default_local_dir"] == f"{tmp_path / 'ckpt'}/shopping_companion_grpo/gpu_smoke"
    assert cfg["actor_rollout_ref"]["rollout"]["agent"]["agent_loop_config_path"] == "configs/grpo/agent_loop.yaml"
    print(f"smoke + submit {smoke_s:.1f} s, whole job done {time.monotonic() - t0:.1f} s")

    # the job does not need the rubric file of this machine: with it gone, the node still builds
    # the rubric (from the spec the job carries) and imports the plugin from the shipped copy
    from shopping_companion.trainers.launch import launch_command
    from shopping_companion.trainers.submit import plan_job, run_smoke, smoke_args

    cmd = launch_command("gpu_smoke", str(tool_model_dir), tmp_path / "rows", [], load_reward_spec(str(spec_file)))
    plan = plan_job(cmd, load_reward_spec(str(spec_file)), address=ray_dashboard, submission_id=f"{sid}-nofile")
    try:
        args = smoke_args(plan, None, config_name="gpu_smoke", paths=[])
        (tmp_path / "rubrics" / "submit_rubric.yaml").rename(tmp_path / "rubrics" / "moved.yaml")
        res = run_smoke(plan, args, timeout_s=240, poll_s=0.2)
    finally:
        plan.cleanup()
    assert res["problems"] == [], (res["problems"], res["logs_tail"])
    for where in [res["report"]["driver"], *res["report"]["nodes"]]:
        assert where["components"] == ["R_z", "R_fmt", "brev_submit", "success", "stage"]
        assert "runtime_resources" in where["modules"]["submit_plugin_mod"]


def test_a_relative_checkpoint_dir_is_refused_before_submission(tmp_path, tool_model_dir):
    """In a job, a relative default_local_dir would land in Ray's temporary working_dir copy."""
    from typer.testing import CliRunner

    from shopping_companion.cli.grpo import app
    from shopping_companion.trainers.rows import prepare_datasets

    prepare_datasets(_bench(tmp_path), tmp_path / "rows", limit=4)
    os.environ.pop("SHOPCOMP_CKPT_DIR", None)
    args = ["submit", "--variant", "gpu_smoke", "--model", str(tool_model_dir), "--rows-dir", str(tmp_path / "rows")]
    r = CliRunner().invoke(app, [*args, "--address", "http://127.0.0.1:9", "--dry-run"])
    assert r.exit_code == 2 and "trainer.default_local_dir" in r.output and "SHOPCOMP_CKPT_DIR" in r.output
    ok = CliRunner().invoke(app, [*args, f"trainer.default_local_dir={tmp_path / 'ck'}", "--dry-run"])
    assert ok.exit_code == 0, ok.output
    # no dashboard there: a service error (exit 4) naming the address
    down = CliRunner().invoke(
        app, [*args, f"trainer.default_local_dir={tmp_path / 'ck'}", "--address", "http://127.0.0.1:9"]
    )
    assert down.exit_code == 4 and "http://127.0.0.1:9" in down.output


def test_probe_reports_what_is_not_shipped_or_missing(tmp_path):
    """The smoke job's probe run here (not in a job): the package is the local one, a module is
    missing, a path does not exist; each is a problem."""
    from shopping_companion.trainers.submit import probe

    rep = probe(
        {
            "modules": ["no_such_module_zz"],
            "spec": None,
            "config": "configs/grpo/none.yaml",
            "paths": [str(tmp_path / "nope")],
            "writable": [str(tmp_path / "new" / "dir")],
            "adv_estimator": "grpo_judged",
        }
    )
    text = "\n".join(rep["problems"])
    assert not rep["shipped"] and "not the shipped copy" in text
    assert "no_such_module_zz does not import" in text and "nope does not exist on this node" in text
    assert "configs/grpo/none.yaml" in text and "cannot be created" not in text  # tmp_path is writable
    assert rep["adv_estimator"]["registered"]  # pip-installed here: the entry point
