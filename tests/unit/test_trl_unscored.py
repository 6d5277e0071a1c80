"""TRL (1.16) leaves a completion out of its group baseline only when *every* reward function
returns None for it. A weight-0 flag function defined for every completion (an earlier
``deadline_missed`` reward) put unscored completions back into the baseline as reward 0."""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace

from shopping_companion.trainers.trl_rollout import _log_unscored, reward_functions


def _br(judge_failed: str = "", deadline_missed: bool = False) -> dict:
    scored = {"score": 2.5, "R_z": 2.0, "R_tool": 0.3, "R_fmt": 0.2, "success": 1.0}
    return {"judge_failed": judge_failed, "deadline_missed": deadline_missed, "scored": scored}


def test_every_reward_function_is_none_for_an_unscored_completion() -> None:
    funcs, weights = reward_functions()
    assert len(funcs) == len(weights) and weights[0] == 1.0 and all(w == 0.0 for w in weights[1:])
    batch = [_br(), _br("scoring deadline missed", True), _br("judge error: boom")]
    cols = [f(completions=[None] * 3, shopcomp_reward=batch) for f in funcs]
    rows = list(zip(*cols))
    assert all(v is not None for v in rows[0])
    assert all(v is None for v in rows[1]) and all(v is None for v in rows[2])


def test_unscored_shares_are_logged_per_batch() -> None:
    trainer = SimpleNamespace(_metrics={"train": defaultdict(list), "eval": defaultdict(list)})
    eps = [
        SimpleNamespace(judge_failed=None, deadline_missed=False),
        SimpleNamespace(judge_failed="scoring deadline missed", deadline_missed=True),
        SimpleNamespace(judge_failed="judge error", deadline_missed=False),
        SimpleNamespace(judge_failed=None, deadline_missed=False),
    ]
    _log_unscored(trainer, True, eps)
    assert trainer._metrics["train"]["shopcomp/deadline_missed"] == [0.25]
    assert trainer._metrics["train"]["shopcomp/unscored"] == [0.5]
    assert trainer._metrics["eval"] == {}
    _log_unscored(SimpleNamespace(), True, eps)  # a trainer without metrics: nothing to do, no error
