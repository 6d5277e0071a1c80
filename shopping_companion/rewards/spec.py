"""Compatibility shim: only re-exports. The reward spec lives in
:mod:`shopping_companion.assembly.reward_spec` and its judge in
:mod:`shopping_companion.assembly.judging` (docs/architecture.md, layers). Kept because reward
plug-ins, configs and docs import this path; code inside the package imports the new homes."""

from shopping_companion.assembly.judging import DEFAULT_MAX_IN_FLIGHT, BoundedJudge, RewardJudge
from shopping_companion.assembly.reward_spec import RewardSpec, load_reward_spec

__all__ = ["DEFAULT_MAX_IN_FLIGHT", "BoundedJudge", "RewardJudge", "RewardSpec", "load_reward_spec"]
