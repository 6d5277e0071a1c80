"""Total reward R = R_z + R_tool + R_fmt (Shopping Companion §5.3, Eq. 12) and the safe entry point.

:func:`compute_reward` is the paper's rubric (:func:`~shopping_companion.rewards.rubric.paper_rubric`);
any other weighting is a :class:`~shopping_companion.rewards.rubric.Rubric`. :func:`safe_reward`
is what a runner calls when a judge may fail: it returns ``None`` — "judge failed, not scored" —
instead of raising, so a judge failure is recorded as such and never enters metrics as a 0.
"""

from __future__ import annotations

import logging

from shopping_companion.judges.base import JudgeFailedError
from shopping_companion.rewards.rubric import Rubric, paper_rubric
from shopping_companion.types import RewardBreakdown, Task, Trajectory, Verdict

__all__ = ["compute_reward", "safe_reward"]

log = logging.getLogger(__name__)

_PAPER: Rubric | None = None


def _paper() -> Rubric:
    global _PAPER
    if _PAPER is None:
        _PAPER = paper_rubric()
    return _PAPER


def compute_reward(task: Task, trajectory: Trajectory, verdict: Verdict) -> RewardBreakdown:
    """The reward of one stage trajectory (Eq. 12): ``total = R_z + R_tool + R_fmt``, unit weights.

    ``components`` holds ``R_z``, ``R_tool``, ``R_fmt``, ``R1`` (stage 1) or ``R2`` (stage 2),
    ``f_ans``, ``f_th``, ``f_tc``, ``f_rec`` (0.0 and unused in stage 1), ``tool_mem_mean`` and
    ``tool_prod_mean`` (mean r(u) over memory / product calls, 0 when none), ``n_tool_calls``,
    ``success`` (1.0/0.0 from the verdict) and ``stage``. ``per_tool_call`` is r(u) per call
    (Eqs. 8–9). Raises ``ValueError`` for a verdict of another stage or task type and
    :class:`~shopping_companion.judges.base.JudgeFailedError` (a ``ValueError``) for a failed
    verdict (never scored as 0).
    """
    return _paper()(task, trajectory, verdict)


def safe_reward(
    task: Task, trajectory: Trajectory, verdict: Verdict, rubric: Rubric | None = None
) -> RewardBreakdown | None:
    """The rubric's breakdown (default: the paper's, Eq. 12), or ``None`` when the judge failed.

    ``None`` means "judge failed, not scored": the verdict has ``failed=True`` (its ``reasons``
    say why), or a judge used inside a reward (the LLM matcher of the tool-wise semantic fallback)
    failed. Callers record the trajectory with its failed verdict and exclude it from reward and
    metric averages. Any other error (a verdict for the wrong stage, a bad config) still raises.
    """
    if verdict.failed:
        log.warning("task %s stage %s: judge %s failed, not scored: %s", task.task_id, trajectory.stage,
                    verdict.judge, "; ".join(verdict.reasons))
        return None
    try:
        return (rubric or _paper())(task, trajectory, verdict)
    except JudgeFailedError as e:
        log.warning("task %s stage %s: not scored: %s", task.task_id, trajectory.stage, e)
        return None
