"""16 episodes at once through ``ShoppingCompanionEnv.astep`` (asyncio.gather), sharing one
ProductSearch (Lucene through pyjnius), one Embedder and the per-user MemoryStores, give exactly
the results of running them one after another."""

from __future__ import annotations

import asyncio

import pytest

from shopping_companion.envs.scripted import GoldPolicy
from shopping_companion.llm.reference import ReferencePolicy, build_attribute_vocabulary
from tests.env_support import EnvKit, make_single_tasks, run

pytestmark = pytest.mark.slow

CONFIGS = [
    dict(mode="two_stage", hint="none"),
    dict(mode="two_stage", hint="high"),
    dict(mode="one_stage"),
    dict(mode="oracle"),
]


@pytest.fixture(scope="module")
def setup(catalog_products, sgd_sessions, product_search, embedder):
    tasks, pool = make_single_tasks(catalog_products, sgd_sessions, n=4, seed=33)
    return tasks, EnvKit(product_search, embedder, pool), ReferencePolicy(build_attribute_vocabulary(catalog_products))


def _jobs(setup):
    tasks, kit, ref = setup
    jobs = []
    for i, t in enumerate(tasks):
        for j, cfg in enumerate(CONFIGS):
            # half the episodes use the rule-based reference policy (real searches with varied
            # queries), half the gold policy
            policy = ref if (i + j) % 2 and cfg["mode"] == "two_stage" else GoldPolicy(t)
            jobs.append((t, cfg, policy))
    assert len(jobs) == 16
    return jobs


def _comparable(res) -> dict:
    d = res.model_dump()
    d.pop("wall_s")
    return d


async def _episode(kit, task, cfg, policy):
    env = kit.env(task, **cfg)
    env.reset(seed=0)
    while not env.done:
        msg = await asyncio.to_thread(policy.chat, env.messages, env.tool_schemas)
        await env.astep(msg)
    return env.episode_result(policy=policy.name, seed=0)


def test_sixteen_concurrent_episodes_equal_sequential(setup):
    tasks, kit, _ = setup
    jobs = _jobs(setup)
    for t in tasks:
        kit.memory(t)  # build the stores first (their construction is not what is tested)
    sequential = [run(kit.env(t, **cfg), p) for t, cfg, p in jobs]

    async def all_at_once():
        return await asyncio.gather(*(_episode(kit, t, cfg, p) for t, cfg, p in jobs))

    concurrent = asyncio.run(all_at_once())
    assert [_comparable(r) for r in concurrent] == [_comparable(r) for r in sequential]
    # the runs did real work: every episode called tools and returned ids
    for r in sequential:
        assert r.error is None
        assert any(res.returned_ids for st in r.stages for res in st.trajectory.tool_results)
    assert sum(r.succ for r in sequential) >= 8  # at least the gold-policy episodes succeed
