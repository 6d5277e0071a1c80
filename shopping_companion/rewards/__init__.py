"""Rewards of Shopping Companion §5.3: outcome (Eqs. 6–7), tool-wise (Eqs. 8–10), format (Eq. 11)
and their sum (Eq. 12). One implementation serves evaluation, SFT filtering and GRPO."""

from shopping_companion.rewards.format import format_indicators, format_reward
from shopping_companion.rewards.outcome import outcome_reward, stage1_reward, stage2_reward
from shopping_companion.rewards.tool_wise import (
    MEMORY_TOOLS,
    PRODUCT_TOOLS,
    memory_call_reward,
    product_call_reward,
    tool_call_reward,
    tool_wise_reward,
    trajectory_tool_results,
)
from shopping_companion.rewards.total import compute_reward

__all__ = [
    "MEMORY_TOOLS",
    "PRODUCT_TOOLS",
    "compute_reward",
    "format_indicators",
    "format_reward",
    "memory_call_reward",
    "outcome_reward",
    "product_call_reward",
    "stage1_reward",
    "stage2_reward",
    "tool_call_reward",
    "tool_wise_reward",
    "trajectory_tool_results",
]
