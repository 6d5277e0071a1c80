"""`shopcomp grpo launch` and scripts/run_grpo.sh: the verl command they build (no verl, no Ray)."""

from __future__ import annotations

import json
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


# --------------------------------------------------------------------------- the reward spec at launch


PLUGIN = """
from shopping_companion.rewards.rubric import Rubric, reward

@reward("{key}", key="{key}", needs=("trajectory",))
def brevity(ctx):
    return 1.0 / (1 + len(ctx.trajectory.steps))

RUBRIC = Rubric([("outcome", 1.0), ("format", 1.0), (brevity, 0.5)], name="{key}")
"""


def _plugin_spec(root: Path, mod: str = "launch_plugin_rw") -> Path:
    """A reward spec file whose rubric (member ``brev_<mod>``) lives in a module of its own python_path."""
    (root / "plugins").mkdir(parents=True, exist_ok=True)
    (root / "plugins" / f"{mod}.py").write_text(PLUGIN.format(key=f"brev_{mod}"))
    spec = root / "reward.yaml"
    spec.write_text(f"rubric: {mod}:RUBRIC\npython_path: [plugins]\nscoring_deadline_s: 45\n")
    return spec


def _bench(root: Path) -> Path:
    from shopping_companion.types import Session, Turn

    bench = root / "bench"
    bench.mkdir()
    from tests.task_support import shoe_task

    tasks = [shoe_task(i, split="train" if i < 3 else "test") for i in range(4)]
    (bench / "tasks.jsonl").write_text("\n".join(t.model_dump_json() for t in tasks) + "\n")
    sessions = [
        Session(session_id=f"s{i}", date="2024-01-01", turns=[Turn(role="user", content="hi")]) for i in range(4)
    ]
    (bench / "sessions.jsonl").write_text("".join(s.model_dump_json() + "\n" for s in sessions))
    (bench / "manifest.json").write_text("{}")
    return bench


def _override(stdout: str) -> str:
    """The reward_config value of the printed verl command, unquoted by the shell's rules."""
    import shlex

    from shopping_companion.trainers.launch import REWARD_CONFIG_KEY

    cmd = shlex.split(stdout.strip().splitlines()[-1])
    (arg,) = [a for a in cmd if a.startswith(REWARD_CONFIG_KEY + "=")]
    value = arg.split("=", 1)[1]
    assert value.startswith("'") and value.endswith("'")  # Hydra-quoted: JSON has braces, quotes, commas
    return value[1:-1].replace("\\'", "'")


def test_prepare_records_the_spec_and_launch_uses_it_unless_told_otherwise(tmp_path):
    import json

    from typer.testing import CliRunner

    from shopping_companion.cli.grpo import app
    from shopping_companion.rewards.spec import load_reward_spec

    spec_file = _plugin_spec(tmp_path)
    rows = tmp_path / "rows"
    r = CliRunner().invoke(
        app, ["prepare", "--bench", str(_bench(tmp_path)), "--out", str(rows), "--reward-config", str(spec_file)]
    )
    assert r.exit_code == 0, r.output
    recorded = load_reward_spec((rows / "reward_config.json").read_text())
    assert recorded.rubric == "launch_plugin_rw:RUBRIC" and recorded.scoring_deadline_s == 45
    assert recorded.python_path == [str(tmp_path / "plugins")]
    assert "rubric: launch_plugin_rw:RUBRIC" in (rows / "reward_config.yaml").read_text()
    assert json.loads(r.stdout)["reward_config"][0] == str(rows / "reward_config.json")
    # launch without --reward-config: the recorded spec, said so
    r = CliRunner().invoke(app, ["launch", "--variant", "outcome_tool", "--rows-dir", str(rows)])
    assert r.exit_code == 0, r.output
    assert "reward spec from" in " ".join(r.stderr.split()) and "launch_plugin_rw:RUBRIC" in r.stderr
    assert load_reward_spec(_override(r.stdout)) == recorded
    # --reward-config wins; with the same key as a Hydra override too it is refused
    r = CliRunner().invoke(app, ["launch", "--rows-dir", str(rows), "--reward-config", "outcome_only"])
    assert r.exit_code == 0 and load_reward_spec(_override(r.stdout)).rubric == "outcome_only"
    key = "reward.custom_reward_function.reward_kwargs.reward_config"
    r = CliRunner().invoke(app, ["launch", "--rows-dir", str(rows), "--reward-config", "paper", f"{key}=paper"])
    assert r.exit_code == 2 and "both set" in r.output
    # an explicit override of the key: the recorded spec is not added
    r = CliRunner().invoke(app, ["launch", "--rows-dir", str(rows), f"{key}=outcome_only"])
    assert r.exit_code == 0 and r.stdout.count(key) == 1 and "reward spec from" not in r.stderr
    # a bad spec fails before any row is written; a later prepare without the option drops the stale record
    bad = CliRunner().invoke(
        app, ["prepare", "--bench", str(tmp_path / "bench"), "--out", str(tmp_path / "r2"), "--reward-config", "nope"]
    )
    assert bad.exit_code == 2 and "nope" in bad.output and not (tmp_path / "r2").exists()
    again = CliRunner().invoke(app, ["prepare", "--bench", str(tmp_path / "bench"), "--out", str(rows)])
    assert again.exit_code == 0 and not (rows / "reward_config.json").exists() and "removed" in again.stderr


def test_wandb_modes(monkeypatch, tmp_path):
    from shopping_companion.trainers.launch_check import check_wandb

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("NETRC", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_BASE_URL", raising=False)
    for mode, want in (("offline", "offline"), ("disabled", "disabled"), ("dryrun", "offline")):
        monkeypatch.setenv("WANDB_MODE", mode)
        problems, notes = [], []
        assert check_wandb(["console", "wandb"], problems, notes) == want and problems == []
        assert mode in notes[0]
    monkeypatch.delenv("WANDB_MODE")
    problems, notes = [], []
    assert check_wandb(["console"], problems, notes) == "not used" and not problems and not notes
    assert check_wandb(["console", "wandb"], problems, notes) == "online (no key)"
    assert len(problems) == 1
    for way in ("WANDB_API_KEY", "WANDB_MODE=offline", "trainer.logger=[console]"):
        assert way in problems[0]
    (tmp_path / ".netrc").write_text("machine api.wandb.ai\n  login user\n  password k3y\n")
    (tmp_path / ".netrc").chmod(0o600)
    problems = []
    assert check_wandb("wandb", problems, []) == f"online (key: {tmp_path / '.netrc'} (api.wandb.ai))"
    assert problems == []
    monkeypatch.setenv("WANDB_API_KEY", "x")
    assert check_wandb(["wandb"], problems, []) == "online (key: WANDB_API_KEY)" and problems == []
    monkeypatch.setenv("WANDB_MODE", "sometimes")
    check_wandb(["wandb"], problems, [])
    assert problems and "WANDB_MODE" in problems[0]


def test_checkpoint_dir_warnings_on_several_nodes(tmp_path):
    from shopping_companion.trainers.launch_check import check_checkpoint_dir

    shared = tmp_path.parent / "not-tmp"  # only the path matters: /tmp is node-local
    for path, nodes, warned in (
        ("checkpoints/p/e", 1, False),
        ("checkpoints/p/e", 2, "relative"),
        ("/tmp/ck/p/e", 2, "/tmp"),
        (str(REPO / "checkpoints" / "p"), 2, str(REPO)),
        ("/shared/ckpt/p/e", 2, False),
    ):
        notes: list[str] = []
        assert check_checkpoint_dir(path, nodes, notes) == path
        if warned:
            assert len(notes) == 1 and warned in notes[0] and "shared storage" in notes[0], (path, notes)
            assert f"trainer.nnodes={nodes}" in notes[0] and "SHOPCOMP_CKPT_DIR" in notes[0]
        else:
            assert notes == [], (path, notes)
    assert shared  # (documented above)


def test_component_mismatch_between_the_scoring_rubric_and_the_agent_loop(tmp_path):
    """The issue's complaint: the scoring rubric names a component the agent loop never computes."""
    import sys

    from shopping_companion.trainers.launch_check import check_reward

    spec_file = _plugin_spec(tmp_path, "launch_plugin_mm")
    entry = {"name": "shopping_companion", "_target_": "x.ShoppingCompanionAgentLoop"}
    # the older way: compute_score's rubric (custom) vs the agent loop's own (none: paper)
    problems: list[str] = []
    check_reward({"reward_kwargs": {"rubric": str(spec_file)}}, [entry], problems)
    assert len(problems) == 1 and "['brev_launch_plugin_mm']" in problems[0] and "does not compute" in problems[0]
    assert "--reward-config" in problems[0] and "reward_kwargs.rubric" in problems[0]
    # the agent loop's entry has the same rubric: fine
    problems = []
    summary = check_reward(
        {"reward_kwargs": {"rubric": str(spec_file)}}, [{**entry, "rubric": str(spec_file)}], problems
    )
    assert problems == [] and summary["components"] == ["R_z", "R_fmt", "brev_launch_plugin_mm", "success", "stage"]
    # one reward_config: both sides by construction; plus a rubric on either side is refused
    problems = []
    summary = check_reward({"reward_kwargs": {"reward_config": str(spec_file)}}, [entry], problems)
    assert problems == [] and summary["rubric"] == "launch_plugin_mm:RUBRIC" and summary["scoring_deadline_s"] == 45
    assert summary["judge"].startswith("rule") and "launch_plugin_mm" in sys.modules  # imported via python_path
    check_reward({"reward_kwargs": {"reward_config": "paper", "rubric": "paper"}}, [entry], problems)
    check_reward({"reward_kwargs": {"reward_config": "paper"}}, [{**entry, "rubric": "outcome_only"}], problems)
    assert len(problems) == 2 and "both set" in problems[0] and "agent loop 'shopping_companion'" in problems[1]
    # a rubric whose module does not import names the key
    problems = []
    check_reward({"reward_kwargs": {"reward_config": "no_such_mod_x:RUBRIC"}}, [entry], problems)
    assert len(problems) == 1 and problems[0].startswith("reward.custom_reward_function.reward_kwargs.reward_config")


def test_an_llm_judge_that_does_not_answer_is_a_problem_naming_its_url(tmp_path):
    import socket

    from shopping_companion.trainers.launch_check import check_reward

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    spec = {"rubric": "paper", "judge": {"kind": "llm", "model": "j", "base_url": f"http://127.0.0.1:{port}/v1"}}
    problems: list[str] = []
    summary = check_reward({"reward_kwargs": {"reward_config": json.dumps(spec)}}, [{"name": "s"}], problems)
    assert len(problems) == 1 and f"judge.base_url http://127.0.0.1:{port}/v1" in problems[0], problems
    assert summary["judge"] == f"rule, uncertain stages to llm: j at http://127.0.0.1:{port}/v1"


def test_submit_dry_run_ships_the_package_and_the_spec_modules(tmp_path, monkeypatch):
    """The job a submission would make (no Ray needed): entrypoint relative to the staged configs,
    py_modules, env vars, and a secret passed by name whose value is never printed."""
    import shlex

    from typer.testing import CliRunner

    from shopping_companion.cli.grpo import app
    from shopping_companion.rewards.spec import load_reward_spec

    spec_file = _plugin_spec(tmp_path, "launch_plugin_sub")
    monkeypatch.setenv("MY_JUDGE_TOKEN", "s3cr3t-value")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("SHOPCOMP_CKPT_DIR", "/shared/ck")
    monkeypatch.setenv("SHOPCOMP_SOMETHING_API_KEY", "never")
    args = ["submit", "--no-check", "--dry-run", "--rows-dir", str(tmp_path / "rows"), "--model", "/m"]
    args += ["--reward-config", str(spec_file), "--env-var", "MY_JUDGE_TOKEN", "--submission-id", "s1", "x.y=1"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    assert "s3cr3t-value" not in r.output and "never" not in r.output
    job = json.loads(next(x for x in r.stdout.splitlines() if x.startswith("job: "))[5:])
    env = job["runtime_env"]
    assert env["py_modules"] == [str(REPO / "shopping_companion")]  # Ray ships directories only:
    assert job["working_dir_modules"] == [str(tmp_path / "plugins" / "launch_plugin_sub.py")]  # a file: working_dir
    assert env["env_vars"]["MY_JUDGE_TOKEN"] == "***" and env["env_vars"]["WANDB_MODE"] == "offline"
    assert env["env_vars"]["VERL_USE_EXTERNAL_MODULES"] == "shopping_companion.trainers.verl_plugin"
    assert env["env_vars"]["SHOPCOMP_CKPT_DIR"] == "/shared/ck" and "SHOPCOMP_SOMETHING_API_KEY" not in env["env_vars"]
    assert not Path(env["working_dir"]).exists()  # the staged configs are removed after use
    parts = shlex.split(job["entrypoint"])
    assert parts[:3] == [sys.executable, "-m", "verl.trainer.main_ppo"] and parts[-1] == "x.y=1"
    assert "--config-path=$PWD/configs/grpo" in parts
    assert "actor_rollout_ref.rollout.agent.agent_loop_config_path=configs/grpo/agent_loop.yaml" in parts
    (rc,) = [p for p in parts if p.startswith("reward.custom_reward_function.reward_kwargs.reward_config=")]
    shipped = load_reward_spec(rc.split("=", 1)[1][1:-1].replace("\\'", "'"))
    assert shipped.rubric == "launch_plugin_sub:RUBRIC" and shipped.python_path == []  # its module is shipped
    unset = CliRunner().invoke(app, ["submit", "--no-check", "--dry-run", "--env-var", "NOT_SET_ANYWHERE_X"])
    assert unset.exit_code == 2 and "NOT_SET_ANYWHERE_X" in unset.output


def _job_reward_config(stdout: str) -> tuple[dict, str]:
    """The printed job of a dry run, and the reward_config JSON its entrypoint carries."""
    import shlex

    job = json.loads(next(x for x in stdout.splitlines() if x.startswith("job: "))[5:])
    key = "reward.custom_reward_function.reward_kwargs.reward_config="
    (rc,) = [p.lstrip("+") for p in shlex.split(job["entrypoint"]) if p.lstrip("+").startswith(key)]
    return job, rc.split("=", 1)[1][1:-1].replace("\\'", "'")


def _without_source(spec_json: str) -> str:
    return json.dumps({k: v for k, v in json.loads(spec_json).items() if k != "source"})


def test_submit_dry_run_inlines_every_rubric_yaml_the_spec_names(tmp_path, monkeypatch):
    """The issue's case: a spec YAML whose rubric is another YAML file, a rubric YAML given as the
    spec (paper_semantic), and a spec named by a Hydra override instead of --reward-config. The job
    must not name a path of this machine: the rubric's content travels inline in the spec JSON."""
    import yaml
    from typer.testing import CliRunner

    from shopping_companion.cli.grpo import app
    from shopping_companion.rewards.rubric import load_rubric
    from shopping_companion.rewards.spec import load_reward_spec
    from shopping_companion.serve.remote import same_reward_spec

    monkeypatch.setenv("SHOPCOMP_CKPT_DIR", "/shared/ck")
    root = tmp_path / "my specs"  # a space: quoted on the command line
    _plugin_spec(root, "launch_plugin_yml")
    (root / "plugins" / "weights.yaml").write_text("brevity: 0.5\n")  # next to the module: shipped with it
    (root / "rubrics").mkdir()
    rubric = {
        "name": "yaml_brev",
        "rewards": [
            {"name": "outcome", "weight": 1.0},
            {"path": "launch_plugin_yml:brevity", "weight": 0.25},
            {"name": "tool_wise", "weight": 1.0, "params": {"semantic_fallback": "auto", "matcher": "rule"}},
        ],
    }
    (root / "rubrics" / "brev.yaml").write_text(yaml.safe_dump(rubric))
    spec_file = root / "reward.yaml"
    spec_file.write_text("rubric: rubrics/brev.yaml\npython_path: [plugins]\nscoring_deadline_s: 30\n")
    base = ["submit", "--no-check", "--dry-run", "--rows-dir", str(tmp_path / "rows"), "--model", "/m"]
    r = CliRunner().invoke(app, [*base, "--reward-config", str(spec_file)])
    assert r.exit_code == 0, r.output
    job, rc = _job_reward_config(r.stdout)
    # no path of this machine in the spec the job runs with (``source`` only labels messages)
    assert json.loads(rc)["source"] == str(spec_file) and str(tmp_path) not in _without_source(rc)
    shipped = load_reward_spec(rc)
    assert shipped.rubric == rubric and shipped.python_path == [] and shipped.scoring_deadline_s == 30
    assert job["inlined"] == {"rubric": str(root / "rubrics" / "brev.yaml")}
    assert job["working_dir_modules"] == [str(root / "plugins" / "launch_plugin_yml.py")]
    assert job["working_dir_files"] == [str(root / "plugins" / "weights.yaml")]
    # the inlined rubric builds the same members as the file
    monkeypatch.syspath_prepend(str(root / "plugins"))
    members = [(m.key, m.weight, dict(m.params)) for m in load_rubric(shipped.rubric).members]
    assert members == [
        (m.key, m.weight, dict(m.params)) for m in load_rubric(str(root / "rubrics" / "brev.yaml")).members
    ]
    # a tool service started with the file scores with the same spec as the job's inline copy
    assert same_reward_spec(load_reward_spec(str(spec_file)).to_json(), rc)
    assert not same_reward_spec(load_reward_spec("paper").to_json(), rc)
    # a plain rubric YAML as the spec (configs/rewards/paper_semantic.yaml)
    semantic = REPO / "configs" / "rewards" / "paper_semantic.yaml"
    r = CliRunner().invoke(app, [*base, "--reward-config", str(semantic)])
    assert r.exit_code == 0, r.output
    job, rc = _job_reward_config(r.stdout)
    assert str(REPO) not in _without_source(rc) and load_reward_spec(rc).rubric == yaml.safe_load(semantic.read_text())
    assert job["inlined"] == {"rubric": str(semantic)}
    # the spec given as a Hydra override of reward_config (no --reward-config): shipped all the same
    key = "reward.custom_reward_function.reward_kwargs.reward_config"
    r = CliRunner().invoke(app, [*base, f"+{key}='{spec_file}'"])
    assert r.exit_code == 0, r.output
    job, rc = _job_reward_config(r.stdout)
    assert str(tmp_path) not in _without_source(rc) and load_reward_spec(rc).rubric == rubric
    assert job["working_dir_modules"] == [str(root / "plugins" / "launch_plugin_yml.py")]
    assert f"+{key}=" in job["entrypoint"]  # the override keeps its "+"
    # a rubric file that is gone cannot be shipped: exit 2 naming it
    (root / "rubrics" / "brev.yaml").unlink()
    r = CliRunner().invoke(app, [*base, "--reward-config", str(spec_file)])
    assert r.exit_code == 2 and "brev.yaml" in r.output and "does not exist" in r.output, r.output


def test_run_grpo_submit_passes_its_options_to_grpo_submit(tmp_path):
    env = _fake_env(tmp_path)
    r = _run(["submit", "--variant", "outcome_only", "--address", "http://h:8265", "--smoke", "a.b=1"], env, tmp_path)
    assert r.returncode == 0, r.stderr
    line = next(x for x in r.stdout.splitlines() if x.startswith("ARGS "))
    assert line.split()[1:] == [
        "-m",
        "shopping_companion.cli.grpo",
        "submit",
        "--variant",
        "outcome_only",
        "--address",
        "http://h:8265",
        "--smoke",
        "a.b=1",
    ]
