"""The gymnasium adapter: gymnasium's own env checker, ``gymnasium.make``, a full episode driven
through the gym API, and the text space."""

from __future__ import annotations

import warnings

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

from shopping_companion.envs.env import EnvConfig
from shopping_companion.envs.gym import ENV_ID, ShoppingCompanionGymEnv, TextSpace, make_gym_env, render_messages
from shopping_companion.envs.scripted import GoldPolicy
from shopping_companion.envs.tools import ToolBox
from shopping_companion.judges.rule import RuleJudge
from tests.env_support import EnvKit, make_single_tasks

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def setup(catalog_products, sgd_sessions, product_search, embedder):
    tasks, pool = make_single_tasks(catalog_products, sgd_sessions, n=2, seed=21)
    return tasks, EnvKit(product_search, embedder, pool)


def _gym(setup, **cfg) -> ShoppingCompanionGymEnv:
    tasks, kit = setup
    return make_gym_env(tasks[0], ToolBox(kit.products, kit.memory(tasks[0])), kit.judge, EnvConfig(**cfg))


def _check(env) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env)
    return [str(w.message) for w in caught]


def test_env_checker_passes_on_the_raw_env(setup):
    msgs = _check(_gym(setup))
    # The only warning: the alternative render modes need a spec (an env built without gymnasium.make).
    assert all("not having a spec" in m for m in msgs), msgs


@pytest.mark.parametrize("mode", ["two_stage", "one_stage", "oracle"])
def test_env_checker_passes_through_gymnasium_make(setup, mode):
    tasks, kit = setup
    products = kit.products
    # gymnasium deep-copies the kwargs when it re-makes the env from its spec: the ToolBox shares
    # its services on copy, and a RuleJudge over a plain function copies fine
    judge = RuleJudge(lambda ids: {i: products.get(i) for i in ids if products.get(i) is not None})
    env = gymnasium.make(
        ENV_ID, task=tasks[0], toolbox=ToolBox(products, kit.memory(tasks[0])), judge=judge, config=EnvConfig(mode=mode)
    )
    assert isinstance(env.unwrapped, ShoppingCompanionGymEnv)
    msgs = _check(env.unwrapped)  # with a spec: render modes and close are checked too
    assert msgs == [], msgs


def test_a_full_episode_through_the_gym_api(setup):
    tasks, kit = setup
    env = _gym(setup, hint="high")
    obs, info = env.reset(seed=5)
    assert obs in env.observation_space and obs.startswith("[system]\n") and "[user]\n" in obs
    assert {t["function"]["name"] for t in info["tools"]} == {"mem_search", "mem_view"}
    policy = GoldPolicy(tasks[0])
    rewards, stages, steps = [], [], 0
    terminated = truncated = False
    while not (terminated or truncated):
        action = policy.chat(info["messages"], info["tools"]).content
        assert action in env.action_space
        obs, reward, terminated, truncated, info = env.step(action)
        assert isinstance(reward, float) and obs in env.observation_space
        rewards.append(reward)
        stages.append(info["stage"])
        steps += 1
    assert terminated and not truncated and steps == 6 and stages == [1, 1, 2, 2, 2, 2]
    res = env.result()
    assert res.succ and res.acc == 1.0
    assert sum(rewards) == pytest.approx(sum(s.reward.total for s in res.stages))
    assert rewards[2] == pytest.approx(res.stages[0].reward.total)  # stage 1 ended on step 3
    with pytest.raises(RuntimeError, match="episode is over"):
        env.step("more")


def test_turn_limit_is_truncation_and_options_switch_the_mode(setup):
    env = _gym(setup, max_turns=1)
    obs, info = env.reset(options={"config": {"mode": "oracle", "max_turns": 1}})
    assert info["mode"] == "oracle" and "Past conversations" in obs
    obs, reward, terminated, truncated, info = env.step("I am still looking.")
    assert truncated and not terminated and info["termination"] == "max_turns"
    assert "neither a tool call nor a final answer" in obs
    # two_stage: a stage-1 turn limit does not end the episode
    obs, info = env.reset()
    obs, reward, terminated, truncated, info = env.step("hmm")
    assert not terminated and not truncated and info["next_stage"] == 2 and "[system]" in obs


def test_text_space():
    sp = TextSpace(seed=3)
    a = [sp.sample() for _ in range(20)]
    sp.seed(3)
    assert [sp.sample() for _ in range(20)] == a
    assert any(ord(ch) > 127 for s in a for ch in s)
    assert "anything ✓ \U0001f6d2" in sp and "" in sp and 5 not in sp and b"x" not in sp
    assert "abc" not in TextSpace(max_length=2) and "ab" in TextSpace(max_length=2)
    assert TextSpace() == TextSpace() and TextSpace(max_length=3) != TextSpace()
    assert not sp.is_np_flattenable
    assert render_messages([{"role": "tool", "name": "mem_view", "content": "{}"}]) == "[tool mem_view]\n{}"


def test_unknown_env_option_is_refused_at_construction():
    # the gym env passes its keyword options on to ShoppingCompanionEnv at each reset: a misspelt one
    # must fail when the environment is built, naming what is allowed, not at the first reset
    with pytest.raises(TypeError, match=r"reward_fun.*allowed: reward_fn, simulator, sessions, token_counter"):
        ShoppingCompanionGymEnv(None, None, None, reward_fun=None)  # type: ignore[arg-type]
