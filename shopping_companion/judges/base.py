"""The judge protocol (docs/architecture.md, judges), the judge-failure error and the per-verdict
metrics Acc and Succ.

A judge turns one stage trajectory into a :class:`~shopping_companion.types.Verdict` with the
fields of App. C.1 (stage 1: q1, m1, c1; stage 2: p2, q2, m2, n2, u2). A judge that cannot decide
(a model that keeps answering invalid JSON, a catalog that fails) returns a verdict with
``failed=True`` and the reasons; such a verdict is never scored (rewards raise
:class:`JudgeFailedError`, :func:`~shopping_companion.rewards.total.safe_reward` returns None).

:func:`accuracy` (Acc) and :func:`success` (Succ) are the per-episode metrics of the paper's §4
("Evaluation Metrics"), read off one verdict; the environment fills ``EpisodeResult.acc`` /
``succ`` with them and :mod:`shopping_companion.benchmark.metrics` averages those.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from shopping_companion.types import Task, Trajectory, Verdict
from shopping_companion.errors import JudgeFailedError  # noqa: F401 - re-exported

__all__ = ["Judge", "JudgeFailedError", "accuracy", "success"]


@runtime_checkable
class Judge(Protocol):
    """``judge(task, trajectory) -> Verdict`` for the trajectory's stage; ``name`` labels verdicts."""

    name: str

    def judge(self, task: Task, trajectory: Trajectory) -> Verdict: ...


def _usable(verdict: Verdict, stage: int, what: str) -> None:
    if verdict.failed:
        raise ValueError(f"{what}: judge {verdict.judge!r} failed; a failed verdict has no {what}")
    if verdict.stage != stage:
        raise ValueError(f"{what} needs a stage-{stage} verdict, got stage {verdict.stage}")


def accuracy(verdict1: Verdict) -> float:
    """Acc (paper §4): the fraction of gold preference attributes the agent retrieved in stage 1,
    ``m1 / F``, clipped to [0, 1].

    A task with no gold preference (F = 0) has nothing to miss: Acc = 1.0. An unset ``m1`` counts
    as 0 matched. Raises ``ValueError`` for a failed verdict (it has no Acc; callers that record
    one use 0.0 and mark the episode unscored) or a verdict of stage 2.
    """
    _usable(verdict1, 1, "accuracy")
    if verdict1.F == 0:
        return 1.0
    return min(max(float(verdict1.m1 or 0.0) / verdict1.F, 0.0), 1.0)


def success(verdict2: Verdict) -> bool:
    """Succ (paper §4, Eq. 5): the stage-2 verdict's ``success`` (correct count, need satisfied,
    all preferences matched, budget feasible for add-on). Raises ``ValueError`` for a failed or
    stage-1 verdict."""
    _usable(verdict2, 2, "success")
    return bool(verdict2.success)
