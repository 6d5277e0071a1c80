"""Hostile model output through the evaluation path (issue 14, "Figures to report").

>= 500 distinct hostile assistant turns (seeded generator in ``tests/hostile_outputs.py``; distinct
by SHA-256 of the reply the server sends) are served by the scripted OpenAI-compatible server on
127.0.0.1, one per episode, inside otherwise valid oracle episodes, and go through the real
``OpenAIBackend`` and ``run_evaluation`` over real single-product tasks (real catalog products, real
SGD conversations, the real BM25 index, real MiniLM memory stores, rule judge, paper rewards).

Per case it checks: no exception escapes and the run completes (``crash``); no batch or episode
exceeds its wall-clock bound (``hang``); every episode has exactly one readable result line and the
file re-loads completely (``silent_drop``); the result serialises to strict UTF-8; rewards are in
range; the hostile episode never earns more than the same episode with the hostile turn replaced
by a plain invalid turn (per stage and in sum; for a turn that must be rejected, the outcome
reward R_z of both stages is unchanged); and an invalid call gets an observation naming the
problem. The precise definitions are in the docstring of ``tests/hostile_outputs.py``.

Run with ``-s`` to see the per-category table (also printed by ``benchmarks/bench_fuzz.py``).
"""

from __future__ import annotations

import threading
from collections import Counter

import pytest

from shopping_companion.judges.rule import RuleJudge
from shopping_companion.memory.store import MemoryStore
from tests.env_support import make_single_tasks
from tests.hostile_outputs import CATEGORIES, generate_cases, reply_digest, run_fuzz

pytestmark = pytest.mark.slow

SEED = 20260


@pytest.fixture(scope="module")
def fuzz_setup(catalog_products, sgd_sessions, product_search, embedder):
    tasks, pool = make_single_tasks(catalog_products, sgd_sessions, n=3, seed=SEED, haystack_size=15)
    stores: dict[str, MemoryStore] = {}
    lock = threading.Lock()

    def make_memory(task):  # one read-only store per task, shared by its episodes
        with lock:
            if task.task_id not in stores:
                stores[task.task_id] = MemoryStore.from_pool(pool, task.history, embedder)
            return stores[task.task_id]

    for t in tasks:
        make_memory(t)
    judge = RuleJudge(lambda ids: {p: product_search.get(p) for p in ids if product_search.get(p) is not None})
    return tasks, make_memory, judge


def test_generator_is_seeded_distinct_and_covers_every_category(fuzz_setup):
    tasks, _, _ = fuzz_setup
    cases = generate_cases(tasks, seed=SEED)
    again = generate_cases(tasks, seed=SEED)
    assert [c.digest for c in cases] == [c.digest for c in again]  # seeded: same cases, same order
    digests = {reply_digest(c.reply) for c in cases}
    assert len(digests) == len(cases) >= 500
    per_cat = Counter(c.category for c in cases)
    assert set(per_cat) == set(CATEGORIES) and min(per_cat.values()) >= 10, per_cat
    assert {c.stage for c in cases} == {1, 2} and {c.turn for c in cases} == {0, 1}
    assert all(c.names for c in cases if c.expect == "reject")


def test_hostile_outputs_through_the_eval_path(fuzz_setup, product_search, tmp_path):
    tasks, make_memory, judge = fuzz_setup
    cases = generate_cases(tasks, seed=SEED)
    report = run_fuzz(
        cases,
        tasks,
        product_search,
        make_memory,
        judge,
        tmp_path,
        concurrency=4,
        episode_bound_s=60.0,
        batch_timeout_s=600.0,
        log=print,
    )
    print("\n" + report.summary())
    lines = [f"{f.kind:15s} {f.category:24s} {f.label[:50]!r}: {f.detail[:220]}" for f in report.failures]
    # every control stage is a perfect one (3.0), so "<= control" is "<= the best honest stage"
    assert set(report.control_totals) == {3.0}, report.control_totals
    assert not report.failures, f"{len(report.failures)} failure(s):\n" + "\n".join(lines[:80])
