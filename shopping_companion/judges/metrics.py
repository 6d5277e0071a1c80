"""Per-episode metrics of Shopping Companion §4 ("Evaluation Metrics") from judge verdicts."""

from __future__ import annotations

from shopping_companion.types import Verdict

__all__ = ["accuracy", "success"]


def _usable(verdict: Verdict, stage: int, what: str) -> None:
    if verdict.failed:
        raise ValueError(f"{what}: judge {verdict.judge!r} failed; a failed verdict has no {what}")
    if verdict.stage != stage:
        raise ValueError(f"{what} needs a stage-{stage} verdict, got stage {verdict.stage}")


def accuracy(verdict1: Verdict) -> float:
    """Acc: the fraction of gold preference attributes the agent retrieved, ``m1 / F``.

    A task with no gold preference (F = 0) has nothing to miss: Acc = 1.0. Raises ``ValueError``
    for a failed verdict, a stage-2 verdict or a missing ``m1``.
    """
    _usable(verdict1, 1, "accuracy")
    if verdict1.m1 is None:
        raise ValueError("accuracy: verdict has no m1")
    if verdict1.F == 0:
        return 1.0
    return min(max(float(verdict1.m1) / verdict1.F, 0.0), 1.0)


def success(verdict2: Verdict) -> bool:
    """Succ (Eq. 5): the stage-2 verdict's ``success`` (correct count, need satisfied, all
    preferences matched, budget feasible for add-on). Raises ``ValueError`` for a failed or
    stage-1 verdict."""
    _usable(verdict2, 2, "success")
    return bool(verdict2.success)
