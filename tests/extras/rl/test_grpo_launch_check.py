"""`shopcomp grpo launch --check` and `CHECK_ONLY=1 scripts/gpu_smoke.sh`: the GPU smoke run's config
composed with verl's Hydra config and checked by verl's validate_config plus our checks, on CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.extras.rl.conftest import require

require("verl", "hydra")

from shopping_companion.trainers.launch import launch_command  # noqa: E402
from shopping_companion.trainers.launch_check import check_launch  # noqa: E402

REPO = Path(__file__).resolve().parents[3]


def _sessions_of(tasks) -> str:
    """One small session per session id the tasks reference (load_benchmark refuses missing ones)."""
    from shopping_companion.types import Session, Turn

    ids = sorted({r.session_id for t in tasks for r in t.history})
    return "".join(
        Session(
            session_id=i, date="2024-01-01", turns=[Turn(role="user", content="I like black shoes.")]
        ).model_dump_json()
        + "\n"
        for i in ids
    )


def _bench(root: Path) -> Path:
    bench = root / "bench"
    bench.mkdir()
    from tests.task_support import shoe_task

    tasks = [shoe_task(i, split="train" if i < 6 else "test") for i in range(8)]
    (bench / "tasks.jsonl").write_text("\n".join(t.model_dump_json() for t in tasks) + "\n")
    (bench / "sessions.jsonl").write_text(_sessions_of(tasks))
    (bench / "manifest.json").write_text("{}")
    return bench


def _long_context_model(root: Path, tool_model_dir: Path, positions: int = 262144) -> Path:
    """A copy of the tiny model whose config.json says ``max_position_embeddings: positions``
    (Qwen3-4B-Thinking-2507's 262,144 by default): the paper configs' 8,192 + 32,768 tokens fit."""
    import shutil

    model = root / f"model-{positions}"
    if not model.exists():
        shutil.copytree(tool_model_dir, model)
        cfg = json.loads((model / "config.json").read_text())
        cfg["max_position_embeddings"] = positions
        (model / "config.json").write_text(json.dumps(cfg))
    return model


def test_gpu_smoke_script_prepares_rows_and_its_config_passes_the_check(tmp_path, tool_model_dir):
    bench = _bench(tmp_path)
    env = {
        **os.environ,
        "CHECK_ONLY": "1",
        "MODEL": str(tool_model_dir),
        "BENCH": str(bench),
        "OUT": str(tmp_path / "smoke"),
        "PYTHON": sys.executable,
    }
    r = subprocess.run(
        ["bash", str(REPO / "scripts" / "gpu_smoke.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    line = next(x for x in r.stdout.splitlines() if x.startswith("launch check passed: "))
    summary = json.loads(line.split(": ", 1)[1])
    assert summary["config"] == "gpu_smoke" and summary["gpus"] == 1 and summary["trainer"] == "RayPPOTrainer"
    assert summary["train_rows"] == 8 and summary["val_rows"] == 4  # --limit 4 tasks x 2 stages; 2 test tasks
    assert summary["trajectories_per_step"] == 16 and summary["total_training_steps"] == 3
    assert summary["adv_estimator"] == "grpo_judged" and summary["rubric"] == "paper"
    assert not (tmp_path / "smoke" / "train.log").exists()  # stopped before Ray and verl


def test_check_names_each_problem(tmp_path, tool_model_dir):
    cmd = launch_command(
        "gpu_smoke",
        str(tmp_path / "no-model"),
        tmp_path / "no-data",
        [
            "algorithm.adv_estimator=not_an_estimator",
            "trainer.use_v1=true",
            "reward.custom_reward_function.reward_kwargs.reward_config=no_such_rubric",
        ],
    )
    problems, _ = check_launch(cmd)
    text = "\n".join(problems)
    for needle in (
        "data.train_files",
        "data.val_files",
        "actor_rollout_ref.model.path",
        "algorithm.adv_estimator",
        "trainer.use_v1=true",
        "reward.custom_reward_function.reward_kwargs.reward_config: 'no_such_rubric'",
    ):
        assert needle in text, (needle, text)
    problems, _ = check_launch(launch_command("gpu_smoke", str(tool_model_dir), tmp_path, ["data.no_such_key=1"]))
    assert len(problems) == 1 and problems[0].startswith("hydra overrides:")
    # verl's own validate_config runs too
    problems, _ = check_launch(
        launch_command("gpu_smoke", str(tool_model_dir), tmp_path, ["actor_rollout_ref.rollout.temperature=0"])
    )  # validation samples (do_sample) at temperature 0
    assert any(p.startswith("verl validate_config") for p in problems), problems


def test_paper_configs_pass_and_a_batch_larger_than_the_data_is_refused(tmp_path, tool_model_dir, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")  # the paper configs log to wandb: online would need a key
    bench = _bench(tmp_path)
    from shopping_companion.trainers.rows import prepare_datasets

    prepare_datasets(bench, tmp_path / "data")  # 6 train tasks -> 12 rows, 2 test tasks -> 4 rows
    model = _long_context_model(tmp_path, tool_model_dir)
    for variant in ("outcome_tool", "outcome_only"):
        problems, summary = check_launch(
            launch_command(variant, str(model), tmp_path / "data", ["data.train_batch_size=8"])
        )
        assert problems == [] and summary["trajectories_per_step"] == 64 and summary["lora_rank"] == 64
        assert summary["context"]["tokens"] == 262144 and summary["context"]["prompt_plus_response"] == 40960
    problems, _ = check_launch(launch_command("outcome_tool", str(model), tmp_path / "data", []))
    assert len(problems) == 1 and "data.train_batch_size: 16 prompts per step" in problems[0]


def test_odd_values_are_problems_not_tracebacks_and_foreign_rows_are_refused(tmp_path, tool_model_dir):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from shopping_companion.trainers.rows import prepare_datasets

    prepare_datasets(_bench(tmp_path), tmp_path / "data")
    data = tmp_path / "data"
    for override, key in [
        ("data.train_batch_size=abc", "data.train_batch_size"),
        ("actor_rollout_ref.rollout.n=0", "actor_rollout_ref.rollout.n"),
        ("actor_rollout_ref.rollout.multi_turn.max_assistant_turns=null", "max_assistant_turns"),
        ("trainer.n_gpus_per_node=null", "validate_config"),
        ("data.train_files=null", "data.train_files"),
    ]:
        problems, _ = check_launch(launch_command("gpu_smoke", str(tool_model_dir), data, [override]))
        assert any(key in p for p in problems), (override, problems)
    # verl takes a list of files
    both = f"data.train_files=[{data / 'train.parquet'},{data / 'train.parquet'}]"
    problems, summary = check_launch(launch_command("gpu_smoke", str(tool_model_dir), data, [both]))
    assert problems == [] and summary["train_rows"] == 24
    # rows of another agent loop, without our extra_info
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    table = pa.table(
        {
            "prompt": [[{"role": "user", "content": "hi"}]] * 4,
            "agent_name": ["tool_agent"] * 4,
            "extra_info": [{"index": i} for i in range(4)],
            "reward_model": [{"ground_truth": "x"}] * 4,
        }
    )
    for f in ("train.parquet", "test.parquet"):
        pq.write_table(table, foreign / f)
    problems, _ = check_launch(launch_command("gpu_smoke", str(tool_model_dir), foreign, []))
    assert any("tool_agent" in p for p in problems) and any("extra_info.task_id" in p for p in problems)
    # no model given: verl's placeholder default is not taken for a model
    problems, _ = check_launch(launch_command("gpu_smoke", None, data, []))
    assert any(p.startswith("actor_rollout_ref.model.path: not set") for p in problems)
    _, summary = check_launch(launch_command("gpu_smoke", "Qwen/Qwen3-0.6B", data, []))
    assert any("hub" in n for n in summary["notes"])


def test_paths_needing_quotes_bad_registries_and_odd_summary_values(tmp_path, tool_model_dir):
    import shutil

    from shopping_companion.trainers.rows import prepare_datasets

    prepare_datasets(_bench(tmp_path), tmp_path / "data, v2")  # a comma and a space in the path
    model = tmp_path / "models" / "m,1"
    shutil.copytree(tool_model_dir, model)
    problems, summary = check_launch(launch_command("gpu_smoke", str(model), tmp_path / "data, v2", []))
    assert problems == [] and summary["model"] == str(model) and summary["train_rows"] == 12
    bad = tmp_path / "loops.yaml"
    for text, msg in (("- name: [unclosed\n", "not valid YAML"), ("5\n", "must be a list")):
        bad.write_text(text)
        problems, _ = check_launch(
            launch_command(
                "gpu_smoke",
                str(model),
                tmp_path / "data, v2",
                [f"actor_rollout_ref.rollout.agent.agent_loop_config_path={bad}"],
            )
        )
        assert any(msg in p for p in problems), problems
    problems, _ = check_launch(
        launch_command("gpu_smoke", str(model), tmp_path / "data, v2", ["trainer.n_gpus_per_node=abc"])
    )
    assert any(p.startswith("trainer.n_gpus_per_node") for p in problems), problems
    # a summary value that is not JSON-able (a mapping) does not break the report
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "shopping_companion.cli.grpo",
            "launch",
            "--variant",
            "gpu_smoke",
            "--model",
            str(model),
            "--rows-dir",
            str(tmp_path / "data, v2"),
            "--check",
            "trainer.total_epochs={a:1}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode in (0, 2) and "Traceback" not in r.stderr, r.stderr[-2000:]


def test_hydra_values_round_trip_for_awkward_paths():
    """Every path launch_command writes into an override reads back unchanged through Hydra's
    override parser and OmegaConf's resolution (quotes, backslashes, ${, non-ASCII, brackets)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    from shopping_companion.trainers.launch import hydra_value

    parser = OverridesParser.create()
    for path in [
        "/plain/p-1_2.x",
        "/tmp/données/x",
        "/tmp/~tilde/x",
        "/tmp/back\\slash/x",
        "/tmp/end\\",
        "/tmp/it's",
        "/tmp/a b,c",
        "/tmp/[x]",
        "/tmp/a=b",
        "/tmp/$x",
        "/tmp/${oc.env:HOME}/x",
        "/tmp/q\\'z",
        "/tmp/a\\${b}",
        "/tmp/x\\\\y",
        "/tmp/{a:1}",
        '/tmp/"dq"',
    ]:
        value = parser.parse_override(f"data.train_files={hydra_value(path)}").value()
        cfg = OmegaConf.create({"data": {"train_files": value}})
        assert OmegaConf.to_container(cfg, resolve=True)["data"]["train_files"] == path, path


def test_check_compares_the_scoring_rubric_with_the_agent_loops_and_reports_spec_wandb_and_checkpoints(
    tmp_path, tool_model_dir, monkeypatch
):
    """The issue's case: `--check` passed while the scoring rubric (reward_kwargs.rubric) named a
    component the agent loop's own rubric (agent_loop.yaml) does not compute."""
    import yaml

    from shopping_companion.trainers.rows import prepare_datasets

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("SHOPCOMP_CKPT_DIR", raising=False)
    prepare_datasets(_bench(tmp_path), tmp_path / "data")
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "check_plugin_mod.py").write_text(
        "from shopping_companion.rewards.rubric import Rubric, reward\n"
        "@reward('brev_check', key='brev_check', needs=('trajectory',))\n"
        "def brevity(ctx):\n    return 1.0 / (1 + len(ctx.trajectory.steps))\n"
        "RUBRIC = Rubric([('outcome', 1.0), ('format', 1.0), (brevity, 0.5)], name='brev_check')\n"
    )
    spec = tmp_path / "reward.yaml"
    spec.write_text("rubric: check_plugin_mod:RUBRIC\npython_path: [plugins]\n")
    loops = yaml.safe_load((REPO / "configs" / "grpo" / "agent_loop.yaml").read_text())
    loops[0]["rubric"] = "paper"  # the older per-side rubric keys
    (tmp_path / "loops.yaml").write_text(yaml.safe_dump(loops))
    older = [
        "~reward.custom_reward_function.reward_kwargs.reward_config",
        f"+reward.custom_reward_function.reward_kwargs.rubric={spec}",
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={tmp_path / 'loops.yaml'}",
    ]
    problems, _ = check_launch(
        launch_command(
            "outcome_tool",
            str(_long_context_model(tmp_path, tool_model_dir)),
            tmp_path / "data",
            [*older, "data.train_batch_size=8"],
        )
    )
    assert len(problems) == 1, problems
    assert "['brev_check']" in problems[0] and "does not compute" in problems[0] and "'paper'" in problems[0]
    # one spec for both sides (what --reward-config gives): passes, and the summary shows it
    from shopping_companion.rewards.spec import load_reward_spec

    cmd = launch_command(
        "outcome_tool",
        str(_long_context_model(tmp_path, tool_model_dir)),
        tmp_path / "data",
        ["data.train_batch_size=8", "trainer.nnodes=2"],
        reward_spec=load_reward_spec(str(spec)),
    )
    problems, summary = check_launch(cmd)
    assert problems == [], problems
    assert summary["rubric"] == "check_plugin_mod:RUBRIC" and summary["reward"]["judge"].startswith("rule")
    assert summary["reward"]["components"] == ["R_z", "R_fmt", "brev_check", "success", "stage"]
    assert (
        summary["checkpoint_dir"] == "checkpoints/shopping_companion_grpo/outcome_tool"
        and summary["wandb"] == "offline"
    )
    notes = "\n".join(summary["notes"])
    assert "WANDB_MODE=offline" in notes and "trainer.nnodes=2 every node writes its checkpoint shards" in notes
    # wandb online without a key is a problem; a shared checkpoint directory is no warning
    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("SHOPCOMP_CKPT_DIR", "/shared/ckpt")
    problems, summary = check_launch(cmd)
    assert len(problems) == 1 and problems[0].startswith("trainer.logger: has wandb"), problems
    assert summary["checkpoint_dir"] == "/shared/ckpt/shopping_companion_grpo/outcome_tool"
    assert not any("checkpoint" in n for n in summary["notes"])


def test_prompt_plus_response_over_the_models_context_is_refused(tmp_path, tool_model_dir, monkeypatch):
    """The researcher's case: the paper config on 2 x 8 GPUs (8,192 + 32,768 = 40,960 tokens) with a
    model whose max_position_embeddings is 32,768 passed --check; verl's vLLM rollout caps the
    context at that, so long trajectories fail inside the step."""
    from shopping_companion.trainers.rows import prepare_datasets

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("SHOPCOMP_CKPT_DIR", "/shared/ckpt")
    prepare_datasets(_bench(tmp_path), tmp_path / "data")
    data = tmp_path / "data"
    assert json.loads((tool_model_dir / "config.json").read_text())["max_position_embeddings"] == 32768
    base = ["data.train_batch_size=8", "trainer.nnodes=2"]
    problems, summary = check_launch(launch_command("outcome_tool", str(tool_model_dir), data, base))
    assert len(problems) == 1, problems
    p = problems[0]
    for needle in (
        "data.max_prompt_length + data.max_response_length = 8192 + 32768 = 40960 tokens",
        "32768-token context",
        f"actor_rollout_ref.model.path {tool_model_dir}",
        f"max_position_embeddings in {tool_model_dir / 'config.json'}",
        "lower data.max_response_length to 24576",
    ):
        assert needle in p, (needle, p)
    assert summary["context"]["tokens"] == 32768 and summary["context"]["prompt_plus_response"] == 40960
    # the fix it names passes
    problems, summary = check_launch(
        launch_command("outcome_tool", str(tool_model_dir), data, [*base, "data.max_response_length=24576"])
    )
    assert problems == [] and summary["context"]["prompt_plus_response"] == 32768
    # verl reads max_position_embeddings after actor_rollout_ref.model.override_config
    problems, summary = check_launch(
        launch_command(
            "outcome_tool",
            str(tool_model_dir),
            data,
            [*base, "+actor_rollout_ref.model.override_config.max_position_embeddings=65536"],
        )
    )
    assert problems == [] and summary["context"]["tokens"] == 65536
    # the rollout's own limit: above the model's context verl's vLLM server refuses to start ...
    problems, _ = check_launch(
        launch_command("gpu_smoke", str(tool_model_dir), data, ["actor_rollout_ref.rollout.max_model_len=65536"])
    )
    assert len(problems) == 1 and problems[0].startswith("actor_rollout_ref.rollout.max_model_len: 65536 tokens")
    # ... and below prompt + response (6,144 + 4,096 here) the trajectories do not fit it
    problems, summary = check_launch(
        launch_command("gpu_smoke", str(tool_model_dir), data, ["actor_rollout_ref.rollout.max_model_len=8192"])
    )
    assert len(problems) == 1 and "6144 + 4096 = 10240 tokens is more than the 8192-token context" in problems[0]
    assert "(actor_rollout_ref.rollout.max_model_len)" in problems[0] and "model allows 32768" in problems[0]
    # a rollout length set apart from data.* is checked too
    problems, _ = check_launch(
        launch_command("gpu_smoke", str(tool_model_dir), data, ["actor_rollout_ref.rollout.response_length=30000"])
    )
    assert any(
        "actor_rollout_ref.rollout.prompt_length + actor_rollout_ref.rollout.response_length = 6144 + 30000" in x
        for x in problems
    ), problems


def test_a_hub_model_is_checked_from_the_local_cache_or_said_to_be_unchecked(tmp_path, tool_model_dir, monkeypatch):
    from shopping_companion.trainers.rows import prepare_datasets

    prepare_datasets(_bench(tmp_path), tmp_path / "data")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    import huggingface_hub.constants as hc

    monkeypatch.setattr(hc, "HF_HUB_CACHE", str(tmp_path / "hub"))
    cmd = launch_command("gpu_smoke", "Org/not-cached", tmp_path / "data", ["data.max_response_length=40000"])
    problems, summary = check_launch(cmd)
    assert problems == [] and summary["context"].startswith("not checked: Org/not-cached is not a local directory")
    assert any("context not checked" in n and "46144 tokens" in n for n in summary["notes"]), summary["notes"]
    # the same id with its config.json in the Hugging Face cache (the layout huggingface_hub writes)
    repo = tmp_path / "hub" / "models--Org--cached"
    snap = repo / "snapshots" / "0123abcd"
    snap.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    (snap / "config.json").write_text(json.dumps({"text_config": {"max_position_embeddings": 40960}}))
    problems, summary = check_launch(
        launch_command("gpu_smoke", "Org/cached", tmp_path / "data", ["data.max_response_length=40000"])
    )
    assert len(problems) == 1 and "46144 tokens is more than the 40960-token context" in problems[0], problems
    assert "text_config.max_position_embeddings in" in problems[0]
