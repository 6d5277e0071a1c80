"""`shopcomp grpo launch --check` with the agent loop's ``tool_service: serve:URL``: the check
asks the real tool service (tests/serve_server.py on 127.0.0.1) whether it is ready, holds the
rows' benchmark and scores with the launch's reward spec, one clear problem line per failure."""

from __future__ import annotations

from pathlib import Path

from tests.extras.rl.conftest import require

require("verl", "hydra")

import yaml  # noqa: E402

from shopping_companion.rewards.spec import load_reward_spec  # noqa: E402
from shopping_companion.trainers.launch import launch_command  # noqa: E402
from shopping_companion.trainers.launch_check import check_launch  # noqa: E402
from tests.extras.rl.test_grpo_launch_check import REPO, _bench  # noqa: E402
from tests.serve_server import Bench, ServeServer, bench_from_dir  # noqa: E402


def _loops(tmp_path: Path, url: str, **service) -> str:
    loops = yaml.safe_load((REPO / "configs" / "grpo" / "agent_loop.yaml").read_text())
    assert loops[0]["tool_service"] == "local"  # the shipped default
    loops[0]["tool_service"] = f"serve:{url}"
    loops[0]["service"] = {"retries": 0, **service}
    path = tmp_path / "loops.yaml"
    path.write_text(yaml.safe_dump(loops))
    return f"actor_rollout_ref.rollout.agent.agent_loop_config_path={path}"


def test_launch_check_asks_the_tool_service(tmp_path, tool_model_dir, monkeypatch, product_search, embedder):
    from shopping_companion.trainers.rows import prepare_datasets

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("MY_SERVE_TOKEN", raising=False)
    bench = _bench(tmp_path)
    prepare_datasets(bench, tmp_path / "data")
    data = tmp_path / "data"
    with ServeServer(product_search, {"b": bench_from_dir(bench)}, embedder, token="t0k") as srv:
        loops = _loops(tmp_path, srv.base_url, token_env="MY_SERVE_TOKEN")
        cmd = launch_command("gpu_smoke", str(tool_model_dir), data, [loops])
        problems, _ = check_launch(cmd)
        assert len(problems) == 1, problems
        assert "requires a bearer token: set $MY_SERVE_TOKEN" in problems[0] and "tool_service" in problems[0]
        monkeypatch.setenv("MY_SERVE_TOKEN", "t0k")
        problems, summary = check_launch(cmd)
        assert problems == [], problems
        ts = summary["tool_service"]
        assert ts["tool_service"] == f"serve:{srv.base_url}" and list(ts["benchmarks"].values()) == ["b"]
        assert ts["judge"] == "rule" and ts["rubric"] == "paper"
        # the launch scores with another spec than the service
        other = launch_command("gpu_smoke", str(tool_model_dir), data, [loops], load_reward_spec("outcome_only"))
        problems, _ = check_launch(other)
        assert len(problems) == 1 and "another reward spec" in problems[0] and "outcome_only" in problems[0]
    # a service without the rows' benchmark, and one that is down
    tasks = bench_from_dir(bench).tasks[:2]
    with ServeServer(product_search, {"x": Bench(tasks, {}, "/srv/x")}, embedder) as srv2:
        problems, _ = check_launch(
            launch_command("gpu_smoke", str(tool_model_dir), data, [_loops(tmp_path, srv2.base_url)])
        )
        assert len(problems) == 1 and "has not loaded the benchmark" in problems[0] and "/srv/x" in problems[0]
    problems, _ = check_launch(
        launch_command("gpu_smoke", str(tool_model_dir), data, [_loops(tmp_path, srv2.base_url)])
    )
    assert len(problems) == 1 and "does not answer" in problems[0] and srv2.base_url in problems[0]
    # a tool_service value that is not one
    bad = yaml.safe_load((REPO / "configs" / "grpo" / "agent_loop.yaml").read_text())
    bad[0]["tool_service"] = "remote"
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(bad))
    problems, _ = check_launch(
        launch_command(
            "gpu_smoke",
            str(tool_model_dir),
            data,
            [f"actor_rollout_ref.rollout.agent.agent_loop_config_path={tmp_path / 'bad.yaml'}"],
        )
    )
    assert len(problems) == 1 and "tool_service: must be local, or serve:URL" in problems[0], problems
