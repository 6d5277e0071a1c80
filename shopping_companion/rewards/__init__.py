"""Rewards of Shopping Companion §5.3: outcome (Eqs. 6–7), tool-wise (Eqs. 8–10), format (Eq. 11)
and their sum (Eq. 12). One implementation serves evaluation, SFT filtering and GRPO.

Rewards are plug-ins (:mod:`shopping_companion.rewards.rubric`): named reward functions combined by a
weighted :class:`Rubric`; :func:`compute_reward` is the paper's rubric and :func:`safe_reward` its
judge-failure-tolerant form (``None`` = not scored).
"""

from shopping_companion.rewards.format import format_indicators, format_reward
from shopping_companion.rewards.outcome import outcome_reward, stage1_reward, stage2_reward
from shopping_companion.rewards.rubric import (
    RewardContext,
    RewardFunction,
    RewardOutput,
    Rubric,
    as_reward,
    load_rubric,
    outcome_only_rubric,
    paper_rubric,
    reward,
)
from shopping_companion.rewards.tool_wise import (
    MEMORY_TOOLS,
    PRODUCT_TOOLS,
    memory_call_reward,
    product_call_reward,
    reference_ids_available,
    rule_product_matcher,
    semantic_tool_wise_reward,
    tool_call_reward,
    tool_wise_reward,
    trajectory_tool_results,
)
from shopping_companion.rewards.total import compute_reward, judge_stage, safe_reward, score_stage, unscored_breakdown

__all__ = [
    "MEMORY_TOOLS",
    "PRODUCT_TOOLS",
    "RewardContext",
    "RewardFunction",
    "RewardOutput",
    "Rubric",
    "as_reward",
    "compute_reward",
    "format_indicators",
    "format_reward",
    "judge_stage",
    "load_rubric",
    "memory_call_reward",
    "outcome_only_rubric",
    "outcome_reward",
    "paper_rubric",
    "product_call_reward",
    "reference_ids_available",
    "reward",
    "rule_product_matcher",
    "safe_reward",
    "score_stage",
    "semantic_tool_wise_reward",
    "stage1_reward",
    "stage2_reward",
    "tool_call_reward",
    "tool_wise_reward",
    "trajectory_tool_results",
    "unscored_breakdown",
]
