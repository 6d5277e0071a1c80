"""EnvResources.with_reward over local services: the spec's judge and rubric, built once per spec,
over the same tasks, index, embedder and memory-store cache."""

from __future__ import annotations

from tests.env_support import EnvKit, make_single_tasks


def test_with_reward_shares_the_services_and_builds_each_spec_once(
    catalog_products, sgd_sessions, product_search, embedder
):
    tasks, pool = make_single_tasks(catalog_products, sgd_sessions, n=1, seed=11, haystack_size=10)
    kit = EnvKit(product_search, embedder, pool)
    res = kit.resources(tasks, memory_cache=3)
    paper = res.reward_fn
    other = res.with_reward("outcome_only")
    assert res.with_reward("outcome_only") is other  # once per spec
    assert other.reward_fn.describe() != paper.describe() and res.reward_fn is paper  # res unchanged
    assert other.judge is not res.judge
    assert other.tasks is res.tasks and other.sessions is pool
    assert other.products is product_search and other.embedder is embedder
    assert other.memory_cache == 3 and other.remote is None
    assert other.memory(tasks[0]) is res.memory(tasks[0])  # one memory-store cache for both
