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

A stage that ended without a final answer (``max_turns``, only tool calls, invalid output, an empty
answer block) is not judged: :func:`no_answer_verdict` gives its verdict — every score field 0,
``no_answer=True``, a reason starting with :data:`NO_ANSWER` — so no judge (and no LLM request)
can award it partial credit. The rule and LLM judges both return it.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from shopping_companion.types import Task, Trajectory, Verdict
from shopping_companion.errors import JudgeFailedError  # noqa: F401 - re-exported

__all__ = ["NO_ANSWER", "Judge", "JudgeFailedError", "accuracy", "no_answer_verdict", "success"]

#: The first words of the reason of a :func:`no_answer_verdict`.
NO_ANSWER = "no final answer"


@runtime_checkable
class Judge(Protocol):
    """``judge(task, trajectory) -> Verdict`` for the trajectory's stage; ``name`` labels verdicts."""

    name: str

    def judge(self, task: Task, trajectory: Trajectory) -> Verdict: ...


def no_answer_verdict(judge: str, task: Task, trajectory: Trajectory) -> Verdict | None:
    """The verdict of a stage that ended without a final answer, or None when it has one.

    No answer means ``trajectory.final_answer`` is None (the stage ended by ``max_turns``,
    ``invalid_output``, ``length``, ``context_length``, ``token_budget``) or blank, and the
    trajectory carries no answer read from elsewhere (stage 1: ``identified_preferences`` is None;
    stage 2: ``recommended_ids`` is empty; the environment fills both only from a final answer,
    callers building trajectories by hand may give them instead). The verdict
    (``judge`` names it) has ``no_answer=True``, every score field of the trajectory's stage 0
    (``c1``, ``n2``, ``u2`` only for add-on tasks), ``success`` False and one reason starting with
    :data:`NO_ANSWER` that names the termination: R_z is 0 and Acc is 0.
    """
    answer = trajectory.final_answer
    if answer is not None and answer.strip():
        return None
    if trajectory.stage == 1:
        carried = trajectory.identified_preferences is not None
    else:
        carried = bool(trajectory.recommended_ids)
    if carried:
        return None
    addon = task.task_type == "addon"
    why = "the answer block is empty" if answer is not None else f"the stage ended by {trajectory.termination}"
    base = {
        "judge": judge,
        "stage": trajectory.stage,
        "F": len(task.preferences),
        "N": task.n_products,
        "b": 1 if addon else 0,
        "no_answer": True,
        "reasons": [f"{NO_ANSWER}: {why}; every score is 0 and no judge was asked"],
    }
    zero = 0 if addon else None
    if trajectory.stage == 1:
        return Verdict(**base, q1=0, m1=0, h1=0, c1=zero)
    return Verdict(**base, p2=0, q2=0, m2=0, n2=zero, u2=zero)


def _usable(verdict: Verdict, stage: int, what: str) -> None:
    if verdict.failed:
        raise ValueError(f"{what}: judge {verdict.judge!r} failed; a failed verdict has no {what}")
    if verdict.stage != stage:
        raise ValueError(f"{what} needs a stage-{stage} verdict, got stage {verdict.stage}")


def accuracy(verdict1: Verdict) -> float:
    """Acc (paper §4): the fraction of gold preference attributes the agent retrieved in stage 1,
    ``m1 / F``, clipped to [0, 1].

    A stage without a final answer (``verdict1.no_answer``) has Acc = 0.0. Otherwise a task with
    no gold preference (F = 0) has nothing to miss: Acc = 1.0. An unset ``m1`` counts as 0
    matched. Raises ``ValueError`` for a failed verdict (it has no Acc; callers that record
    one use 0.0 and mark the episode unscored) or a verdict of stage 2.
    """
    _usable(verdict1, 1, "accuracy")
    if verdict1.no_answer:
        return 0.0
    if verdict1.F == 0:
        return 1.0
    return min(max(float(verdict1.m1 or 0.0) / verdict1.F, 0.0), 1.0)


def success(verdict2: Verdict) -> bool:
    """Succ (paper §4, Eq. 5): the stage-2 verdict's ``success`` (correct count, need satisfied,
    all preferences matched, budget feasible for add-on). Raises ``ValueError`` for a failed or
    stage-1 verdict."""
    _usable(verdict2, 2, "success")
    return bool(verdict2.success)
