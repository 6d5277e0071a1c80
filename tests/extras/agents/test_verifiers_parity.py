"""The verifiers environment ``shopping-companion-bench`` against ``shopcomp eval`` (issue 36).

A real ``vf-eval`` run (verifiers 0.4.0's own eval command, in a subprocess, through its
interception server) plays every (task, strategy) of the suite's 10-task benchmark with the
scripted policy served on 127.0.0.1, the same policy ``shopcomp eval`` played in the
``eval_results`` fixture. From vf-eval's ``traces.jsonl``: every message verifiers recorded (the
stages' opening messages, the policy's turns, every tool observation) is the eval's, in order; the
judge's verdicts and the reward breakdowns kept on the trace are the eval's; verifiers logged each
rubric member per stage (``stage1.R_z``, ...) with its weight, equal to the eval's components to
the float, its trace reward is the sum of the stage totals, and the ``acc`` / ``succ`` metrics are
the eval's Acc and Succ for every one of the 40 episodes. In process, :func:`load_environment` builds the
environment with one task per (task, strategy) and refuses bad settings naming the field.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.extras.agents.conftest import ENV, N_TASKS, STRATEGIES, require

require("verifiers.v1", "shopping_companion_bench")

from shopping_companion.errors import ConfigError  # noqa: E402
from shopping_companion.integrations import verifiers as sc_vf  # noqa: E402
from tests.openai_server import ScriptedOpenAIServer  # noqa: E402
from tests.scripted_policy import policy_script  # noqa: E402

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[3]


def vf_eval(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).parent / "vf-eval"
    env = {**os.environ, "PYTHONPATH": str(REPO), "SC_TEST_KEY": "k"}
    return subprocess.run([str(exe), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=900)


def test_vf_eval_rollouts_equal_shopcomp_eval(
    agents_bench, agents_bench_dir, catalog_index_dir, eval_results, tmp_path
):
    with ScriptedOpenAIServer(policy_script(agents_bench.tasks)) as policy:
        args = [
            sc_vf.TASKSET_ID,
            "--env.taskset.bench", str(agents_bench_dir),
            "--env.taskset.strategies", ",".join(STRATEGIES),
            "--env.taskset.env", json.dumps(ENV),
            "--env.taskset.index-dir", str(catalog_index_dir),
            "-m", "scripted",
            "--client.base-url", policy.base_url,
            "--client.api-key-var", "SC_TEST_KEY",
            "-c", "8",
            "--no-push", "--no-rich",
            "-o", str(tmp_path / "outputs"),
        ]  # fmt: skip
        out = vf_eval(args, tmp_path)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    (traces_file,) = (tmp_path / "outputs").glob("*/traces.jsonl")
    episodes = [json.loads(line) for line in traces_file.read_text().splitlines()]
    assert len(episodes) == N_TASKS * len(STRATEGIES)
    seen = set()
    for ep in episodes:
        assert ep["ok"], ep["errors"]
        (trace,) = ep["traces"]
        data = trace["task"]["data"]
        want = eval_results[(data["task_id"], data["strategy"])]
        # every message verifiers recorded, in order: both stages' chats, tool observations included
        recorded = [(n["message"]["role"], n["message"]["content"]) for n in trace["nodes"]]
        played = [(m.role, m.content) for st in want.stages for m in st.trajectory.messages]
        assert recorded == played
        assert sum(r == "tool" for r, _ in recorded) >= len(want.stages)
        got = trace["info"]["shopping_companion"]
        assert [s["verdict"] for s in got["stages"]] == [st.verdict.model_dump(mode="json") for st in want.stages]
        assert [s["reward"] for s in got["stages"]] == [
            st.reward.model_dump(mode="json", include={"total", "components"}) for st in want.stages
        ]
        # verifiers' own reward log: each member of each stage, with its weight
        expected = {
            f"stage{st.trajectory.stage}.{key}": {"score": st.reward.components[key], "weight": 1.0}
            for st in want.stages
            for key in ("R_z", "R_tool", "R_fmt")
        }
        assert trace["rewards"] == expected
        total = sum(r["score"] * r["weight"] for r in trace["rewards"].values())
        assert total == pytest.approx(sum(st.reward.total for st in want.stages), rel=1e-12)
        assert trace["metrics"] == {"acc": want.acc, "succ": float(want.succ), "scored": 1.0}
        seen.add((data["task_id"], data["strategy"]))
    # every episode's Acc and Succ are the eval's, so the run's figures per strategy are too
    assert seen == set(eval_results)


def test_load_environment_builds_the_tasks_and_refuses_bad_settings(agents_bench_dir, catalog_index_dir):
    env = sc_vf.load_environment(
        str(agents_bench_dir), strategy="two_stage:none,oracle", index_dir=str(catalog_index_dir), env=ENV
    )
    tasks = list(env.taskset)
    assert len(tasks) == 2 * N_TASKS
    assert {t.data.strategy for t in tasks} == {"two_stage:none", "oracle"}
    assert len({t.key for t in tasks}) == len(tasks)
    with pytest.raises(ConfigError, match="supported: .*two_stage:high"):
        list(
            sc_vf.load_environment(
                str(agents_bench_dir), strategy="three_stage", index_dir=str(catalog_index_dir)
            ).taskset
        )
    with pytest.raises(ConfigError, match="taskset.bench"):
        list(sc_vf.load_environment("", index_dir=str(catalog_index_dir)).taskset)
