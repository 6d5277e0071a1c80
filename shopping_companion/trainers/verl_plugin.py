"""verl plugin: the ``grpo_judged`` advantage estimator.

Loaded through verl's public plugin hook: this package declares the entry point
``[project.entry-points."verl.plugins"] shopping_companion = "shopping_companion.trainers.verl_plugin"``,
and ``import verl`` loads every ``verl.plugins`` entry point in every process (driver and workers;
``VERL_USE_EXTERNAL_PLUGINS=none`` turns that off). Importing this module registers the estimator with
verl's ``register_adv_est``; the configs select it with ``algorithm.adv_estimator: grpo_judged``.

Why: when the judge fails on a trajectory, our agent loop sets its ``response_mask`` to 0 (no
gradient) and ``compute_score`` reports ``judge_failed`` with a placeholder score. Plain GRPO would
still put that placeholder into its group's mean and standard deviation and so shift the advantages
of the prompt's other rollouts. ``grpo_judged`` is GRPO (Shao et al., 2024, DeepSeekMath §4.1.2:
A_i = (r_i − mean(r)) / (std(r) + ε) over the G rollouts of a prompt, the same for every token) computed
over the trajectories whose ``response_mask`` has at least one token; the others get advantage 0. With
no judge failure it equals verl's ``grpo`` exactly.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage, register_adv_est

NAME = "grpo_judged"


@register_adv_est(NAME)
def compute_grpo_judged_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool | None = None,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO advantages over the trajectories with a non-empty ``response_mask`` (module docstring).

    Args:
        token_level_rewards: (batch, response_length) float; the score sits on the last response token.
        response_mask: (batch, response_length) 0/1; all 0 marks a trajectory that must not be
            trained on (judge failure).
        index: (batch,) group ids (verl's ``uid``: the rollouts of one prompt share it).
        epsilon: added to the group standard deviation.
        norm_adv_by_std_in_grpo: divide by the group std (GRPO) or not (Dr. GRPO); default: the
            algorithm config's ``norm_adv_by_std_in_grpo``, else True.
        config: verl's algorithm config (passed by verl's trainer).

    Returns:
        ``(advantages, returns)``, both (batch, response_length), masked by ``response_mask``; rows
        with an empty mask are 0.
    """
    if norm_adv_by_std_in_grpo is None:
        norm_adv_by_std_in_grpo = bool(getattr(config, "norm_adv_by_std_in_grpo", True)) if config is not None else True
    advantages = torch.zeros_like(token_level_rewards)
    returns = torch.zeros_like(token_level_rewards)
    valid = (response_mask.sum(dim=-1) > 0).nonzero(as_tuple=True)[0]
    if len(valid):
        rows = valid.cpu().numpy()
        a, r = compute_grpo_outcome_advantage(
            token_level_rewards=token_level_rewards[valid],
            response_mask=response_mask[valid],
            index=np.asarray(index, dtype=object)[rows],
            epsilon=epsilon,
            norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo,
            config=config,
        )
        advantages[valid] = a
        returns[valid] = r
    return advantages, returns
