"""GRPO logs the share of judged items the rule judge was uncertain about, and the LLM-judge calls
of a cascade, per step (issue 32, item 1): TRL through the trainer's metrics; the episode hands
the counts to both trainers (``extra_fields["shopcomp_judging"]``; verl's per-step metrics:
tests/extras/rl/test_verl_uncertain_share.py)."""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace

from shopping_companion.judges.rule import RuleJudge
from shopping_companion.judges.selective import judging_stats
from shopping_companion.trainers.trl_rollout import _log_unscored
from tests.judges.test_selective_verdicts import SESSIONS, lookup, s1, s2, task


def test_trl_logs_the_uncertain_share_and_llm_calls_per_batch() -> None:
    judge = RuleJudge(lookup, sessions=SESSIONS)
    sure = judge.judge(task(), s2("p:navy"))  # 3 items, none uncertain
    unsure = judge.judge(task(), s1(("colour", "the one I mentioned"), ("fabric", "cotton")))  # 3 items, 2 uncertain
    eps = [
        SimpleNamespace(judge_failed=None, deadline_missed=False, judging=judging_stats(sure)),
        SimpleNamespace(judge_failed=None, deadline_missed=False, judging=judging_stats(unsure)),
        SimpleNamespace(judge_failed="judge error", deadline_missed=False, judging=judging_stats(None)),
        SimpleNamespace(judge_failed=None, deadline_missed=False, judging={**judging_stats(unsure), "llm_calls": 1.0}),
    ]
    trainer = SimpleNamespace(_metrics={"train": defaultdict(list), "eval": defaultdict(list)})
    _log_unscored(trainer, True, eps)
    m = trainer._metrics["train"]
    items = len(sure.items) + 2 * len(unsure.items)
    assert m["shopcomp/uncertain_share"] == [4 / items]
    assert m["shopcomp/llm_judge_calls"] == [0.25]
    assert m["shopcomp/unscored"] == [0.25]
    # a batch without verdict items logs no share (never a made-up 0)
    trainer = SimpleNamespace(_metrics={"train": defaultdict(list), "eval": defaultdict(list)})
    _log_unscored(trainer, False, [SimpleNamespace(judge_failed="x", deadline_missed=False, judging={})])
    assert "shopcomp/uncertain_share" not in trainer._metrics["eval"]
    assert trainer._metrics["eval"]["shopcomp/llm_judge_calls"] == [0.0]
