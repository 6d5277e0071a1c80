"""Per-sample scoring deadline of GRPO rollouts: a judge (or reward) that takes longer than
``scoring_deadline_s`` leaves its sample unscored and flagged (no gradient), and the episode returns
at the deadline instead of waiting for it. Real environment, index, memory, rule judge and rubric;
the slow judge is the real rule judge behind a sleep."""

from __future__ import annotations

import asyncio
import math
import time

import pytest

from shopping_companion.rewards.rubric import load_rubric
from shopping_companion.trainers.chat_tokens import ChatTokens
from shopping_companion.trainers.episode import run_row_episode
from shopping_companion.trainers.resources import EnvResources, ScoringDeadline, ScoringDeadlineError
from tests.env_support import EnvKit, SlowJudge, make_single_tasks
from tests.tiny_model import TOOL_CHAT_TEMPLATE, build_tiny_model

SLEEP_S = 4.0
DEADLINE_S = 0.5


@pytest.fixture(scope="module")
def kit(tmp_path_factory, catalog_products, sgd_sessions, product_search, embedder):
    from transformers import AutoTokenizer

    tasks, pool = make_single_tasks(catalog_products, sgd_sessions, n=1, seed=11, haystack_size=10)
    k = EnvKit(product_search, embedder, pool)
    rubric = load_rubric("paper", resources={"lookup": k.lookup})
    tok = AutoTokenizer.from_pretrained(build_tiny_model(tmp_path_factory.mktemp("tok")))
    tok.chat_template = TOOL_CHAT_TEMPLATE

    def resources(judge=None, reward_fn=None) -> EnvResources:
        return EnvResources(
            tasks={t.task_id: t for t in tasks},
            sessions=pool,
            products=product_search,
            embedder=embedder,
            judge=judge or k.judge,
            reward_fn=reward_fn or rubric,
        )

    return resources, k, rubric, tasks[0], tok


def _policy(tok, task):
    from shopping_companion.envs.scripted import GoldPolicy
    from shopping_companion.envs.tools import MEMORY_TOOLS, PRODUCT_TOOLS, tool_schema
    from shopping_companion.trainers.episode import Generation

    gold = GoldPolicy(task)

    async def generate(ids, sp):
        text = tok.decode(ids)
        stage_text = text[text.rfind("<|im_start|>system") :]
        turn = stage_text.count("<|im_start|>assistant") - 1
        names = MEMORY_TOOLS if '"name": "mem_search"' in stage_text.split("</tools>")[0] else PRODUCT_TOOLS
        reply = gold.chat([{"role": "assistant"}] * turn, [tool_schema(n) for n in names]).content
        return Generation((tok.encode(reply, add_special_tokens=False) + [tok.eos_token_id])[: sp["max_tokens"]])

    return generate


def _play(res: EnvResources, task, tok, stage: int, deadline, response_length: int = 32768):
    env = res.make_env(task, scoring_deadline_s=deadline)
    t0 = time.perf_counter()
    ep = asyncio.run(run_row_episode(env, stage, ChatTokens(tok), _policy(tok, task), {}, response_length))
    return ep, time.perf_counter() - t0


@pytest.mark.slow
@pytest.mark.parametrize("stage", [1, 2])
def test_a_judge_past_the_deadline_leaves_the_sample_unscored_and_flagged(kit, stage):
    resources, k, _, task, tok = kit
    ep, wall = _play(resources(judge=SlowJudge(k.judge, SLEEP_S)), task, tok, stage, DEADLINE_S)
    assert ep.deadline_missed and ep.result is None
    assert "scoring deadline missed" in ep.judge_failed and "scoring_deadline_s" in ep.judge_failed
    c = ep.reward.components
    assert c["deadline_missed"] == 1.0 and c["judge_failed"] == 1.0 and ep.reward.total == 0.0
    assert ep.extra_fields()["shopcomp_deadline_missed"] == 1
    assert ep.termination == "answered"  # the trajectory itself is complete
    # the episode did not wait for the late judge (a stage-2 row judges stage 1 first: one
    # deadline for the whole sample, so the second judge call fails at once)
    assert wall < SLEEP_S, wall


@pytest.mark.slow
def test_a_reward_past_the_deadline_is_a_miss_too(kit):
    resources, _, rubric, task, tok = kit

    def slow_reward(t, traj, verdict):
        time.sleep(SLEEP_S)
        return rubric(t, traj, verdict)

    ep, wall = _play(resources(reward_fn=slow_reward), task, tok, 1, DEADLINE_S)
    assert ep.deadline_missed and ep.reward.components["deadline_missed"] == 1.0 and wall < SLEEP_S


@pytest.mark.slow
def test_an_unfinished_stage_past_the_deadline_is_a_miss(kit):
    # the response budget runs out (termination token_budget): scored outside the environment
    resources, k, _, task, tok = kit
    ep, wall = _play(resources(judge=SlowJudge(k.judge, SLEEP_S)), task, tok, 1, DEADLINE_S, response_length=8)
    assert ep.termination == "token_budget" and ep.deadline_missed and wall < SLEEP_S


@pytest.mark.slow
def test_within_the_deadline_the_sample_is_scored_as_without_one(kit):
    resources, k, _, task, tok = kit
    res = resources(judge=SlowJudge(k.judge, 0.05))
    with_deadline, _ = _play(res, task, tok, 2, 30.0)
    without, _ = _play(res, task, tok, 2, None)
    assert not with_deadline.deadline_missed and with_deadline.judge_failed is None
    assert with_deadline.reward == without.reward and with_deadline.reward.components["success"] == 1.0
    assert "deadline_missed" not in with_deadline.reward.components
    assert with_deadline.extra_fields()["shopcomp_deadline_missed"] == 0


def test_scoring_deadline_settings_are_checked(kit):
    resources, k, rubric, task, _ = kit
    res = resources()
    for bad in (0, -1, math.nan, math.inf, "60", True):
        with pytest.raises(ValueError, match="scoring_deadline_s"):
            res.make_env(task, scoring_deadline_s=bad)
    sd = ScoringDeadline(SlowJudge(k.judge, 0.3), rubric, 0.1)
    with pytest.raises(ScoringDeadlineError, match="0.1 s"):
        sd.judge(task, None)
    assert sd.missed and sd.missed_in == "judge"
    with pytest.raises(ScoringDeadlineError):  # spent: later calls fail at once
        sd.reward(task, None, None)
