"""The judge protocol (DESIGN.md §8) and the judge-failure error.

A judge turns one stage trajectory into a :class:`~shopping_companion.types.Verdict` with the
fields of App. C.1 (stage 1: q1, m1, c1; stage 2: p2, q2, m2, n2, u2). A judge that cannot decide
(a model that keeps answering invalid JSON, a catalog that fails) returns a verdict with
``failed=True`` and the reasons; such a verdict is never scored (rewards raise
:class:`JudgeFailedError`, :func:`~shopping_companion.rewards.total.safe_reward` returns None).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from shopping_companion.types import Task, Trajectory, Verdict

__all__ = ["Judge", "JudgeFailedError"]


class JudgeFailedError(ValueError):
    """A judge failed, so the trajectory cannot be scored (it is recorded as unscored, never 0)."""


@runtime_checkable
class Judge(Protocol):
    """``judge(task, trajectory) -> Verdict`` for the trajectory's stage; ``name`` labels verdicts."""

    name: str

    def judge(self, task: Task, trajectory: Trajectory) -> Verdict: ...
