"""RL training (Shopping Companion §5.3, §6.1, App. C.2, D): GRPO over the same environment and
rewards as evaluation.

verl-free parts (import with the core package): :mod:`~shopping_companion.trainers.rows` (verl
parquet rows, one per (task, stage)), :mod:`~shopping_companion.trainers.reward` (the
``compute_score`` reward hook), :mod:`~shopping_companion.trainers.episode` (token-level episodes:
ids, response mask, observations), :mod:`~shopping_companion.trainers.resources` (shared services
per worker process), :mod:`~shopping_companion.trainers.launch` (the verl command of ``shopcomp grpo launch``) and
:mod:`~shopping_companion.trainers.launch_check` (its CPU pre-flight check).

Optional stacks, imported only by their own modules: :mod:`~shopping_companion.trainers.verl_agent_loop`
(extra ``verl``: verl 0.9.1's ``AgentLoopBase`` subclass) and
:mod:`~shopping_companion.trainers.trl_rollout` (extra ``trl``: TRL 1.16's ``GRPOTrainer`` rollout
function). See docs/grpo.md.
"""
