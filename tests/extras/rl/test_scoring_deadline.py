"""The per-sample scoring deadline through verl 0.9.1's own AgentLoopWorker, offline on CPU: a
judge that answers long after ``scoring_deadline_s`` leaves its trajectories with response_mask all
0, flagged, counted per step as ``shopcomp/deadline_missed/count``, and the rollout returns at the
deadline instead of waiting for the judge."""

from __future__ import annotations

import time

import numpy as np
import pytest

from tests.env_support import SlowJudge
from tests.extras.rl.conftest import require

require("verl", "ray", "tensordict")

from tests.extras.rl.rl_support import ScriptedServer, verl_config  # noqa: E402
from tests.extras.rl.test_verl_agent_loop import _batch, _dataset, _run, _worker  # noqa: E402

from shopping_companion.trainers.resources import EnvResources, register_resources  # noqa: E402
from shopping_companion.trainers.rows import build_rows, write_parquet  # noqa: E402

SLEEP_S = 6.0


@pytest.fixture(scope="module")
def setup(tmp_path_factory, rl_kit):
    d = tmp_path_factory.mktemp("deadline")
    slow = EnvResources(
        tasks=rl_kit.tasks,
        sessions=rl_kit.sessions,
        products=rl_kit.products,
        embedder=rl_kit.embedder,
        judge=SlowJudge(rl_kit.judge, SLEEP_S),
        reward_fn=rl_kit.reward_fn,
    )
    register_resources("rl-slow-judge", slow)
    tasks = list(rl_kit.tasks.values())
    rows = build_rows(tasks, benchmark="(test kit)")
    path = write_parquet(rows, d / "train.parquet")
    loop_yaml = d / "agent_loop.yaml"
    loop_yaml.write_text(
        "- name: shopping_companion\n"
        "  _target_: shopping_companion.trainers.verl_agent_loop.ShoppingCompanionAgentLoop\n"
        "  resources: rl-slow-judge\n  scoring_deadline_s: 0.5\n"
    )
    return {"parquet": path, "tasks": tasks, "rows": rows, "loop_yaml": str(loop_yaml)}


def test_judge_past_the_deadline_gives_no_gradient_and_is_counted(setup, tool_model_dir):
    from shopping_companion.trainers.verl_agent_loop import rollout_reward_metrics

    cfg = verl_config(tool_model_dir, setup["loop_yaml"])
    ds, tok = _dataset(setup, tool_model_dir, cfg)
    server = ScriptedServer(tok, setup["tasks"])
    worker = _worker(cfg, server)
    t0 = time.perf_counter()
    out = _run(worker.generate_sequences(_batch(ds, only=[0, 1])))
    wall = time.perf_counter() - t0
    nt = out.non_tensor_batch
    assert len(out) == 2
    for i in range(len(out)):
        assert int(nt["shopcomp_deadline_missed"][i]) == 1
        assert "scoring deadline missed" in str(nt["shopcomp_judge_failed"][i])
        assert int(out.batch["response_mask"][i].sum()) == 0  # no policy gradient
        assert int(out.batch["attention_mask"][i].sum()) > 0  # the trajectory itself is there
    # two rows, each judged at least once: waiting for the judge would take >= 2 x SLEEP_S
    assert wall < 2 * SLEEP_S, wall
    m = rollout_reward_metrics(dict(nt))
    assert m["shopcomp/deadline_missed/count"] == 2 and m["shopcomp/judge_failed/count"] == 2
    assert "shopcomp/R_z/mean" not in m  # no unscored trajectory enters a mean


def test_reward_metrics_count_deadline_misses_per_step():
    from shopping_companion.trainers.verl_agent_loop import rollout_reward_metrics

    ok = {"total": 1.0, "components": {"R_z": 1.0, "stage": 1.0}}
    missed = {"total": 0.0, "components": {"judge_failed": 1.0, "deadline_missed": 1.0, "stage": 1.0}}
    m = rollout_reward_metrics(
        {
            "shopcomp_reward": np.array([ok, missed, ok], dtype=object),
            "shopcomp_stage": np.array([1, 1, 1], dtype=object),
            "shopcomp_judge_failed": np.array(["", "scoring deadline missed", ""], dtype=object),
            "shopcomp_deadline_missed": np.array([0, 1, 0], dtype=object),
        }
    )
    assert m["shopcomp/deadline_missed/count"] == 1 and m["shopcomp/judge_failed/count"] == 1
    assert m["shopcomp/R_z/mean"] == 1.0 and m["shopcomp/trajectories"] == 3
    # older batches without the column: 0, from the breakdown alone otherwise
    m = rollout_reward_metrics({"shopcomp_reward": np.array([ok, missed], dtype=object)})
    assert m["shopcomp/deadline_missed/count"] == 1
