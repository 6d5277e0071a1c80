"""Reward hacking (issue 13): no scripted adversary may out-score the honest policy.

The adversaries of ``benchmarks/reward_hacking_policies.py`` (the ones
``benchmarks/bench_reward_hacking.py`` measures) play real two-stage episodes — the real
environment, parser, ``RuleJudge(lookup, sessions=...)`` and the ``paper`` / ``paper_semantic``
rubrics — on a few tasks synthesised here from the real catalog and real SGD sessions (2 single-
product tasks, 2 add-on deals). For every task, each adversary's episode reward (both stages'
rubric totals) must be strictly below the honest policy's under both rubrics; the honest policy
must succeed in both stages of every task. The adversaries that do nothing (issue 31: ``no_tools``,
``free_text``) must also be strictly below an honest *weak* attempt (``honest_weak``: valid tool
calls that find less) and never above an attempt that tries and fails (``failed_calls``: the same
calls malformed) on every task.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.reward_hacking_policies import (
    ADVERSARIES,
    BELOW_WEAK,
    FAILED_BASELINE,
    NEUTRAL_CONTROLS,
    POLICIES,
    InMemoryProducts,
    make_context,
    run_policy,
    WEAK_BASELINE,
    select_products,
)
from shopping_companion.benchmark.synth import SynthConfig, synthesize
from shopping_companion.judges.rule import RuleJudge
from shopping_companion.rewards.rubric import Rubric

ROOT = Path(__file__).resolve().parents[2]
RUBRICS = ("paper", "paper_semantic")

#: Adversaries that still tie with (or beat) the honest policy on the judge of HEAD 88708ff;
#: the issue-13 judge must make them strictly worse (then drop them from this set).
XFAIL_ISSUE13: frozenset[str] = frozenset()  # every adversary is caught since issue 13


@pytest.fixture(scope="module")
def bench(catalog_products, sgd_sessions):
    return synthesize(
        catalog_products, sgd_sessions, SynthConfig(n_tasks=4, seed=0, addon_share=0.5, sessions_per_user=20)
    )


@pytest.fixture(scope="module")
def scores(bench, catalog_products):
    products, vocab = select_products(catalog_products, bench.tasks, per_category=200)
    backend = InMemoryProducts(products)
    judge = RuleJudge(backend.lookup, sessions=bench.sessions)
    rubrics = {
        r: Rubric.from_config(str(ROOT / "configs" / "rewards" / f"{r}.yaml"), resources={"lookup": backend.lookup})
        for r in RUBRICS
    }
    out: dict[str, list] = {n: [] for n in POLICIES}
    for task in bench.tasks:
        ctx = make_context(task, products, bench.sessions, vocab, product_backend=backend)
        for name, cls in POLICIES.items():
            out[name].append(run_policy(cls(), ctx, judge, rubrics))
    return out


def test_tasks_cover_both_types(bench):
    assert {t.task_type for t in bench.tasks} == {"single", "addon"}


def test_honest_policy_succeeds_on_every_task(scores):
    for s in scores["honest"]:
        assert s.error is None, s.error
        assert s.success1, (s.task_id, s.reasons[0])
        assert s.success2, (s.task_id, s.reasons[1])


#: Hacks that need something the task may not have (a task without does-not-matter attributes
#: gives dont_care_values nothing to list): they must apply on some task, not on every one.
CONDITIONAL = {"dont_care_values"}


def test_every_adversary_plays_its_hack(scores, bench):
    by_id = {t.task_id: t for t in bench.tasks}
    for name in ADVERSARIES:
        played = 0
        for adv, hon in zip(scores[name], scores["honest"]):
            if name in CONDITIONAL and not by_id[adv.task_id].dont_care:
                continue
            assert adv.texts != hon.texts, f"{name} played exactly like honest on {adv.task_id}"
            played += 1
        assert played, f"{name} was never played"


def _param(name: str):
    marks = [pytest.mark.xfail(strict=False, reason="issue 13 judge")] if name in XFAIL_ISSUE13 else []
    return pytest.param(name, marks=marks, id=name)


@pytest.mark.parametrize("adversary", [_param(n) for n in ADVERSARIES])
def test_adversary_scores_below_honest(scores, adversary):
    failures = []
    for adv, hon in zip(scores[adversary], scores["honest"]):
        assert adv.error is None and hon.error is None, (adv.error, hon.error)
        if adversary in CONDITIONAL and adv.texts == hon.texts:
            continue  # nothing to play on this task (checked by test_every_adversary_plays_its_hack)
        for r in RUBRICS:
            a, h = adv.total(r), hon.total(r)
            # a single-product task has one product: the judge does not read the slot index there
            # (0- or 1-based are both fine), so a "wrong slot" can only tie
            tie_ok = adversary in NEUTRAL_CONTROLS or (adversary == "wrong_slot" and adv.task_type == "single")
            bad = a > h + 1e-9 if tie_ok else a >= h - 1e-9
            if bad:
                failures.append(
                    f"{adv.task_id} ({adv.task_type}) {r}: adversary {a:.4f} vs honest {h:.4f}; "
                    f"stage-1 judge: {adv.reasons[0][:3]}"
                )
    assert not failures, "\n".join(failures)


def test_the_weak_attempt_acts_validly_and_finds_less(scores):
    for w, h in zip(scores[WEAK_BASELINE], scores["honest"]):
        assert w.error is None, w.error
        for r in RUBRICS:
            assert [c["R_fmt"] for c in w.components[r]] == [1.0, 1.0]  # well-formed valid calls and answers
            assert w.total(r) < h.total(r)


@pytest.mark.parametrize("adversary", BELOW_WEAK)
def test_doing_nothing_scores_below_an_honest_weak_attempt(scores, adversary):
    failures = []
    for adv, weak in zip(scores[adversary], scores[WEAK_BASELINE]):
        assert adv.error is None and weak.error is None, (adv.error, weak.error)
        for r in RUBRICS:
            a, w = adv.total(r), weak.total(r)
            if a >= w - 1e-9:
                failures.append(f"{adv.task_id} ({adv.task_type}) {r}: {adversary} {a:.4f} vs {WEAK_BASELINE} {w:.4f}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("adversary", BELOW_WEAK)
def test_trying_and_failing_never_scores_below_doing_nothing(scores, adversary):
    failures = []
    for adv, failed in zip(scores[adversary], scores[FAILED_BASELINE]):
        assert failed.error is None, failed.error
        assert all(c["f_tc"] == 0.0 for c in failed.components["paper"])  # it did try, and failed
        for r in RUBRICS:
            a, f = adv.total(r), failed.total(r)
            if a > f + 1e-9:
                failures.append(
                    f"{adv.task_id} ({adv.task_type}) {r}: {adversary} {a:.4f} vs {FAILED_BASELINE} {f:.4f}"
                )
    assert not failures, "\n".join(failures)
