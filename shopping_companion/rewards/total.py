"""Total reward R = R_z + R_tool + R_fmt (Shopping Companion §5.3, Eq. 12)."""

from __future__ import annotations

from shopping_companion.rewards.format import format_indicators, format_reward
from shopping_companion.rewards.outcome import outcome_reward
from shopping_companion.rewards.tool_wise import (
    MEMORY_TOOLS,
    PRODUCT_TOOLS,
    tool_call_reward,
    trajectory_tool_results,
)
from shopping_companion.types import RewardBreakdown, Task, Trajectory, Verdict

__all__ = ["compute_reward"]


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def compute_reward(task: Task, trajectory: Trajectory, verdict: Verdict) -> RewardBreakdown:
    """The reward of one stage trajectory (Eq. 12): ``total = R_z + R_tool + R_fmt``, unit weights.

    ``components`` holds ``R_z``, ``R_tool``, ``R_fmt``, ``R1`` (stage 1) or ``R2`` (stage 2),
    ``f_ans``, ``f_th``, ``f_tc``, ``f_rec`` (0.0 and unused in stage 1), ``tool_mem_mean`` and
    ``tool_prod_mean`` (mean r(u) over memory / product calls, 0 when none), ``n_tool_calls``,
    ``success`` (1.0/0.0 from the verdict) and ``stage``. ``per_tool_call`` is r(u) per call
    (Eqs. 8–9). Raises ``ValueError`` for a failed verdict (never scored as 0) or a verdict of
    another stage or task type.
    """
    if verdict.stage != trajectory.stage:
        raise ValueError(f"verdict is for stage {verdict.stage} but the trajectory is stage {trajectory.stage}")
    expected_b = 1 if task.task_type == "addon" else 0
    if verdict.b != expected_b:
        raise ValueError(f"verdict has b={verdict.b} but task {task.task_id!r} is {task.task_type!r}")
    r_z = outcome_reward(verdict)

    results = trajectory_tool_results(trajectory)
    per_call = [tool_call_reward(r, task) for r in results]
    r_tool = _mean(per_call)
    mem = [x for r, x in zip(results, per_call) if r.name in MEMORY_TOOLS]
    prod = [x for r, x in zip(results, per_call) if r.name in PRODUCT_TOOLS]

    r_fmt = format_reward(trajectory)
    flags = format_indicators(trajectory)

    components: dict[str, float] = {
        "R_z": r_z,
        "R_tool": r_tool,
        "R_fmt": r_fmt,
        f"R{trajectory.stage}": r_z,
        **flags,
        "tool_mem_mean": _mean(mem),
        "tool_prod_mean": _mean(prod),
        "n_tool_calls": float(len(per_call)),
        "success": 1.0 if verdict.success else 0.0,
        "stage": float(trajectory.stage),
    }
    return RewardBreakdown(total=r_z + r_tool + r_fmt, components=components, per_tool_call=per_call)
