"""The viewer's data layer on a real run: the evaluation runner plays the reference policy on a
small synthesised benchmark (real catalog, BM25 search, memory, rule judge and rewards), writing
``results.jsonl`` as ``shopcomp eval`` does; every episode then opens through the viewer's store,
fully annotated, and its numbers agree with ``benchmark.metrics`` and the stored rewards."""

from __future__ import annotations

import json

import pytest

from shopping_companion.benchmark import metrics as M
from shopping_companion.benchmark.report import final_results, read_results
from shopping_companion.benchmark.taxonomy import classify_failures
from shopping_companion.rewards.tool_wise import trajectory_tool_results
from shopping_companion.viewer.store import RunCatalog, compare

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def real_runs(viewer_runs):
    """``(root, bench, results)``: ``root/store-runs/`` holds two evaluations of the reference policy
    on the benchmark at ``root/bench`` (``ref-a``: 2 trials, at most 12 turns; ``ref-b``: at most 4),
    each with a ``config.yaml`` naming the benchmark relative to ``root``, the directory the runs were
    started from; ``results`` maps each run name to its episode results in file order. Built once per
    session with the browser tests' runs (tests/viewer/viewer_runs.py)."""
    return viewer_runs.root, viewer_runs.bench, viewer_runs.store_results


def test_every_real_episode_opens_annotated(real_runs):
    root, bench, results = real_runs
    cat = RunCatalog([root / "store-runs"])
    assert cat.run_ids() == ["ref-a", "ref-b"]
    idx = cat.get("ref-a")
    rs = read_results(idx.path)
    s = idx.summary
    assert s.benchmark_found and s.benchmark == "bench" and s.n_episodes == len(rs) == 4 * 2 * 2
    pooled = M.acc_succ(final_results(rs))["all"]
    assert s.acc == pytest.approx(pooled["acc"]) and s.succ == pytest.approx(pooled["succ"])
    assert s.strategies == ["one_stage", "two_stage:none"] and s.trials == 2 and s.policy == rs[0].policy
    page = idx.query(limit=500)
    assert page.total == len(rs) and all(r.status == "ok" for r in page.rows)
    tasks = {t.task_id: t for t in bench.tasks}
    marks: set[str] = set()
    for row, r in zip(page.rows, rs):
        assert (row.task_id, row.trial, row.strategy) == (r.task_id, r.trial, M.strategy_of(r))
        assert row.source and row.category and row.instruction == tasks[r.task_id].instruction
        v = idx.episode(row.line)
        assert v.result == r and v.task == tasks[r.task_id] and v.gold == tasks[r.task_id].preferences
        assert len(v.stages) == len(r.stages)
        for sv, st in zip(v.stages, r.stages):
            calls = [c for t in sv.turns for c in t.calls]
            assert [c.name for c in calls] == [u.name for u in trajectory_tool_results(st.trajectory)]
            assert [c.reward for c in calls] == st.reward.per_tool_call  # r(u) aligned with the calls
            marks.update(m for c in calls for _, m in c.returned)
            assert [c.product_id for c in sv.recommended] == list(dict.fromkeys(st.trajectory.recommended_ids))
            assert all(c.seen and c.title for c in sv.recommended)
            assert len(sv.turns) == len(st.trajectory.steps)
    assert {"needle", "reference"} <= marks and "unknown" not in marks
    # failures get the same primary class as the rules give them with the task
    want = {(c.task_id, c.trial, c.strategy): c.primary for c in classify_failures(rs, tasks)}
    failed = idx.query(failed_only=True, limit=500).rows
    assert {(r.task_id, r.trial, r.strategy): r.taxonomy for r in failed} == want


def test_compare_two_real_runs(real_runs):
    root, _bench, results = real_runs
    cat = RunCatalog([root / "store-runs"])
    a, b = cat.get("ref-a"), cat.get("ref-b")
    c = compare(a, b, n_boot=300)
    ra = {(r.task_id, r.trial, M.strategy_of(r)): r for r in M.scored(final_results(results["ref-a"]))}
    rb = {(r.task_id, r.trial, M.strategy_of(r)): r for r in M.scored(final_results(results["ref-b"]))}
    keys = ra.keys() & rb.keys()
    assert c.same_benchmark and c.n_pairs == len(keys) > 0
    won = {k for k in keys if rb[k].succ and not ra[k].succ}
    assert {(p.task_id, p.trial, p.strategy) for p in c.transitions["won"]} == won
    assert sum(len(v) for v in c.transitions.values()) == len(keys)
    succ = next(d for d in c.deltas if d.metric == "Succ")
    true = sum(rb[k].succ - ra[k].succ for k in keys) / len(keys)
    assert succ.delta == pytest.approx(true) and succ.ci_low <= true <= succ.ci_high
    json.dumps([d.__dict__ for d in c.deltas])  # plain numbers, ready for the page
