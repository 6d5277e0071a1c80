"""Tool-wise process reward R_tool (Shopping Companion §5.3, Eqs. 8–10).

Every tool call u gets r(u) ∈ [0, 1] from the ids its result returned
(:attr:`~shopping_companion.types.ToolResult.returned_ids`):

- memory tools (``mem_search``, ``mem_view``): the fraction of returned sessions that are gold
  preference (needle) sessions (Eq. 8);
- product tools (``product_search``, ``product_view``): the fraction of returned products that are
  reference products of the task (Eq. 9).

Conventions (not fixed by the paper, stated here):

- a call whose result has ``error`` set, or that returned no ids, scores 0 (|I_u| = 0 would divide
  by zero, and a rejected call retrieved nothing);
- duplicated ids within one result count once (|I_u| is a set size), so repeating an id cannot
  inflate or deflate the score;
- a call to any other tool name scores 0 and still counts in the mean of Eq. 10;
- the paper's LLM semantic-matching fallback for missing ids is not applied here: ids are always
  recorded by our tools.
"""

from __future__ import annotations

from collections.abc import Iterable

from shopping_companion.types import Task, ToolResult, Trajectory

__all__ = [
    "MEMORY_TOOLS",
    "PRODUCT_TOOLS",
    "memory_call_reward",
    "product_call_reward",
    "tool_call_reward",
    "tool_wise_reward",
    "trajectory_tool_results",
]

MEMORY_TOOLS = frozenset({"mem_search", "mem_view"})
PRODUCT_TOOLS = frozenset({"product_search", "product_view"})


def _precision(result: ToolResult, gold: Iterable[str]) -> float:
    if result.error is not None:
        return 0.0
    returned = list(dict.fromkeys(result.returned_ids))  # dedupe, keep order
    if not returned:
        return 0.0
    gold_set = set(gold)
    return sum(1 for i in returned if i in gold_set) / len(returned)


def memory_call_reward(result: ToolResult, gold_session_ids: Iterable[str]) -> float:
    """r(u) for a memory call (Eq. 8): ``|{i ∈ I_u : sess(i) ∈ S_gold}| / |I_u|``.

    ``I_u`` is the set of distinct session ids in ``result.returned_ids``; 0 when the call errored
    or returned nothing.
    """
    return _precision(result, gold_session_ids)


def product_call_reward(result: ToolResult, reference_ids: Iterable[str]) -> float:
    """r(u) for a product call (Eq. 9): ``|{p ∈ P_u : p ∈ P_ref}| / |P_u|``.

    ``P_u`` is the set of distinct product ids in ``result.returned_ids``; 0 when the call errored
    or returned nothing.
    """
    return _precision(result, reference_ids)


def tool_call_reward(result: ToolResult, task: Task) -> float:
    """r(u) (Eq. 8 or 9, by ``result.name``); 0 for any tool that is neither memory nor product."""
    if result.name in MEMORY_TOOLS:
        return memory_call_reward(result, task.needle_session_ids)
    if result.name in PRODUCT_TOOLS:
        return product_call_reward(result, task.reference_product_ids)
    return 0.0


def trajectory_tool_results(trajectory: Trajectory) -> list[ToolResult]:
    """U(τ): one result per tool call of the trajectory, in order.

    Per step, each parsed ``ToolCall`` is paired with the ``ToolResult`` of the same ``call_id``;
    a call with no result (the episode ended first) is represented by an error result (scores 0);
    a result with no parsed call (e.g. the environment's observation for a rejected call) counts
    as a call of its own.
    """
    out: list[ToolResult] = []
    for step in trajectory.steps:
        by_id: dict[str, list[ToolResult]] = {}
        for r in step.tool_results:
            by_id.setdefault(r.call_id, []).append(r)
        for call in step.tool_calls:
            rs = by_id.get(call.call_id)
            if rs:
                out.append(rs.pop(0))
            else:
                out.append(
                    ToolResult(call_id=call.call_id, name=call.name, content="", error="no result recorded")
                )
        for rs in by_id.values():
            out.extend(rs)
    return out


def tool_wise_reward(trajectory: Trajectory, task: Task) -> tuple[float, list[float]]:
    """R_tool (Eq. 10): the mean of r(u) over all tool calls U(τ); 0 when there are none.

    Returns ``(R_tool, per_call)`` with ``per_call`` in the order of
    :func:`trajectory_tool_results`.
    """
    per_call = [tool_call_reward(r, task) for r in trajectory_tool_results(trajectory)]
    total = sum(per_call) / len(per_call) if per_call else 0.0
    return total, per_call
