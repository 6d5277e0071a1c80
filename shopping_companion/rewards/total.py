"""Total reward R = R_z + R_tool + R_fmt (Shopping Companion §5.3, Eq. 12) and the safe entry point.

:func:`compute_reward` is the paper's rubric (:func:`~shopping_companion.rewards.rubric.paper_rubric`);
any other weighting is a :class:`~shopping_companion.rewards.rubric.Rubric`. :func:`safe_reward`
is what a runner calls when a judge may fail: it returns ``None`` — "judge failed, not scored" —
instead of raising, so a judge failure is recorded as such and never enters metrics as a 0.
:func:`unscored_breakdown` is the breakdown recorded for such a stage, and :func:`score_stage`
judges and rewards one stage, turning every judge failure into that breakdown and a message.
"""

from __future__ import annotations

import functools
import logging
from typing import Any, Callable

from shopping_companion.errors import UncertainUnscoredError
from shopping_companion.judges.base import JudgeFailedError
from shopping_companion.rewards.rubric import Rubric, paper_rubric
from shopping_companion.types import RewardBreakdown, Task, Trajectory, Verdict

RewardFn = Callable[[Task, Trajectory, Verdict], RewardBreakdown]

__all__ = ["compute_reward", "judge_stage", "safe_reward", "score_stage", "unscored_breakdown"]

log = logging.getLogger(__name__)


@functools.cache
def _paper() -> Rubric:
    """The paper's rubric, built on first use."""
    return paper_rubric()


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
        log.warning(
            "task %s stage %s: judge %s failed, not scored: %s",
            task.task_id,
            trajectory.stage,
            verdict.judge,
            "; ".join(verdict.reasons),
        )
        return None
    try:
        return (rubric or _paper())(task, trajectory, verdict)
    except JudgeFailedError as e:
        log.warning("task %s stage %s: not scored: %s", task.task_id, trajectory.stage, e)
        return None


def unscored_breakdown(stage: int, **extra: float) -> RewardBreakdown:
    """The breakdown recorded for a stage that is not scored (its judge failed, a judge inside the
    reward failed, or a scoring deadline ran out): ``total`` 0.0 and components
    ``judge_failed`` = 1.0, then ``extra`` (e.g. ``deadline_missed=1.0``), then ``stage``.

    Consumers recognise it by ``components["judge_failed"] > 0`` and must leave the stage out of
    reward and metric averages (never train on the 0.0). ``stage`` is 1 or 2; ``ValueError``
    otherwise.
    """
    if stage not in (1, 2):
        raise ValueError(f"stage: must be 1 or 2, got {stage!r}")
    return RewardBreakdown(
        total=0.0, components={"judge_failed": 1.0, **{k: float(v) for k, v in extra.items()}, "stage": float(stage)}
    )


def judge_stage(
    judge: Any, task: Task, trajectory: Trajectory, *, reraise: tuple[type[BaseException], ...] = ()
) -> tuple[Verdict | None, str | None]:
    """``judge.judge(task, trajectory)`` with its failures as data: ``(verdict, error)``.

    ``error`` is None for a usable verdict, ``"judge failed: <Type>: <message>"`` (message cut to
    300 characters; ``verdict`` None) when the judge raised, and ``"judge failed: <reasons>"``
    for a verdict with ``failed=True``. Exceptions of the types in ``reraise`` propagate.
    """
    try:
        verdict = judge.judge(task, trajectory)
    except reraise:
        raise
    except Exception as e:  # a judge failure is recorded, never scored as 0
        return None, f"judge failed: {type(e).__name__}: {str(e)[:300]}"
    if verdict.failed:
        return verdict, "judge failed: " + ("; ".join(verdict.reasons) or "no reason given")
    return verdict, None


def score_stage(
    judge: Any,
    reward_fn: RewardFn,
    task: Task,
    trajectory: Trajectory,
    *,
    reraise: tuple[type[BaseException], ...] = (),
) -> tuple[Verdict | None, RewardBreakdown, str | None]:
    """Judge one stage trajectory (``judge.judge(task, trajectory)``) and reward it
    (``reward_fn(task, trajectory, verdict)``), never scoring a judge failure as 0.

    Returns ``(verdict, reward, error)``: ``error`` is None when the stage was scored; otherwise
    ``reward`` is :func:`unscored_breakdown` of the trajectory's stage and ``error`` says why: the
    messages of :func:`judge_stage` (``verdict`` None when the judge raised), or ``"judge failed
    inside the reward: <message>"`` (cut to 300 characters) when the reward raised
    :class:`~shopping_companion.judges.base.JudgeFailedError`, and ``"judge failed: <message>"``
    with the component ``uncertain_unscored`` = 1.0 when it raised
    :class:`~shopping_companion.errors.UncertainUnscoredError` (the spec's ``uncertain: unscored``). Exceptions of the types in
    ``reraise`` (e.g. a circuit breaker saying the judge's endpoint is down) propagate; so does
    any error of ``reward_fn`` other than ``JudgeFailedError``.
    """
    verdict, error = judge_stage(judge, task, trajectory, reraise=reraise)
    if verdict is None or error is not None:
        return verdict, unscored_breakdown(trajectory.stage), error
    try:
        return verdict, reward_fn(task, trajectory, verdict), None
    except UncertainUnscoredError as e:  # the spec's ``uncertain: unscored``
        return verdict, unscored_breakdown(trajectory.stage, uncertain_unscored=1.0), f"judge failed: {str(e)[:300]}"
    except JudgeFailedError as e:  # a judge used inside the reward failed (or a scoring deadline passed)
        return verdict, unscored_breakdown(trajectory.stage), f"judge failed inside the reward: {str(e)[:300]}"
