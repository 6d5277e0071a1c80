"""The skyrl-gym environment ``shopping_companion`` against ``shopcomp eval`` (issue 36).

The scripted policy of tests/scripted_policy.py plays every (task, strategy) of a 10-task benchmark
twice: through ``shopcomp eval`` (its OpenAI-compatible server, the ``eval_results`` fixture) and
by driving :class:`~shopping_companion.integrations.skyrl.ShoppingCompanionTextEnv` made with
``skyrl_gym.make`` directly, each turn the policy's answer to the request the eval would send (the
current stage's chat, its tools and the episode's sampling seed). Tool observations, verdicts and
rewards must be equal to the float, the step rewards must add up to the stage totals, and the
environment's metrics must carry the eval's Acc and Succ. Bad ``env_config`` / ``extras`` are
refused naming the field.
"""

from __future__ import annotations

import pytest

from tests.extras.agents.conftest import STRATEGIES, require

require("skyrl_gym")

import skyrl_gym  # noqa: E402

from shopping_companion.benchmark.metrics import acc_succ  # noqa: E402
from shopping_companion.errors import ConfigError  # noqa: E402
from shopping_companion.integrations import skyrl as sc_skyrl  # noqa: E402
from tests.extras.agents.parity import assert_same_episode  # noqa: E402
from tests.scripted_policy import policy_script  # noqa: E402

pytestmark = pytest.mark.slow


def play(env, script) -> tuple[list[float], list[dict]]:
    """Drive ``env`` to its end with ``script``; the per-step rewards and observations."""
    chat, meta = env.init([{"role": "user", "content": "replaced by the environment"}])
    tools = meta["tools"]
    seed = env.sampling.seed if env.sampling is not None else None
    rewards, seen = [], []
    done = False
    while not done:
        text = script({"messages": chat, "tools": tools, "seed": seed})
        out = env.step(text)
        rewards.append(out["reward"])
        seen.extend(out["observations"])
        done = out["done"]
        chat = chat + [{"role": "assistant", "content": text}] + out["observations"]
        if out["metadata"].get("next_stage"):  # stage 2 opens a new chat: system and user
            start = max(i for i, m in enumerate(out["observations"]) if m["role"] == "system")
            chat = out["observations"][start:]
            tools = out["metadata"]["tools"]
    return rewards, seen


def test_skyrl_episodes_equal_shopcomp_eval(agents_bench, eval_results, source_settings):
    script = policy_script(agents_bench.tasks)
    played = {}
    for strategy in STRATEGIES:
        for task in agents_bench.tasks:
            env = skyrl_gym.make(
                sc_skyrl.ENV_NAME,
                env_config=source_settings,
                extras={"extra_info": {"task_id": task.task_id, "strategy": strategy}},
            )
            rewards, observations = play(env, script)
            want = eval_results[(task.task_id, strategy)]
            assert_same_episode(env.result, want)
            assert sum(rewards) == sum(s.reward.total for s in want.stages)  # zeros between stage ends
            assert any(m["role"] == "tool" for m in observations)
            metrics = env.get_metrics()
            assert (metrics["acc"], metrics["succ"]) == (want.acc, float(want.succ))
            for st in want.stages:
                assert metrics[f"stage{st.trajectory.stage}.R_z"] == st.reward.components["R_z"]
            played[(task.task_id, strategy)] = env.result
    # the figures of the whole run are the eval's (10 tasks x 4 strategies)
    for strategy in STRATEGIES:
        ours = [played[(t.task_id, strategy)] for t in agents_bench.tasks]
        theirs = [eval_results[(t.task_id, strategy)] for t in agents_bench.tasks]
        assert acc_succ(ours) == acc_succ(theirs)
    assert len({r.succ for r in played.values()}) == 2  # the scripted policy both succeeds and fails


def test_skyrl_env_refuses_bad_settings(agents_bench, source_settings):
    task_id = agents_bench.tasks[0].task_id
    with pytest.raises(ConfigError, match="env_config.bench"):
        skyrl_gym.make(sc_skyrl.ENV_NAME, env_config={}, extras={"task_id": task_id})
    with pytest.raises(ConfigError, match="task_id"):
        skyrl_gym.make(sc_skyrl.ENV_NAME, env_config=source_settings, extras={})
    with pytest.raises(ConfigError, match="not a selected task"):
        skyrl_gym.make(sc_skyrl.ENV_NAME, env_config=source_settings, extras={"task_id": "nope"})
    with pytest.raises(ConfigError, match="supported: .*two_stage:high"):
        skyrl_gym.make(sc_skyrl.ENV_NAME, env_config=source_settings, extras={"task_id": task_id, "strategy": "x"})
    with pytest.raises(ConfigError, match=r"env_config\.benchh: unknown setting; allowed: bench, reward_config"):
        skyrl_gym.make(sc_skyrl.ENV_NAME, env_config={**source_settings, "benchh": "x"}, extras={"task_id": task_id})
    with pytest.raises(ConfigError, match=r"extras\.trial: must be an integer"):
        skyrl_gym.make(sc_skyrl.ENV_NAME, env_config=source_settings, extras={"task_id": task_id, "trial": "x"})
    env = skyrl_gym.make(sc_skyrl.ENV_NAME, env_config=source_settings, extras={"task_id": task_id})
    with pytest.raises(RuntimeError, match=r"call init\(\) before step\(\)"):
        env.step("<answer>{}</answer>")
