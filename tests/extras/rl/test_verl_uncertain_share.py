"""verl's per-step reward metrics carry the share of judged items the rule judge was uncertain
about, the LLM-judge calls of a cascade and the stages left unscored by ``uncertain: unscored``
(issue 32, item 1)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.extras.rl.conftest import require

require("verl")


def test_step_metrics_carry_the_uncertain_share_and_llm_calls():
    from shopping_companion.trainers.verl_agent_loop import rollout_reward_metrics

    ok = {"total": 1.0, "components": {"R_z": 1.0, "stage": 1.0}}
    unscored = {"total": 0.0, "components": {"judge_failed": 1.0, "uncertain_unscored": 1.0, "stage": 2.0}}
    m = rollout_reward_metrics(
        {
            "shopcomp_reward": np.array([ok, ok, unscored], dtype=object),
            "shopcomp_stage": np.array([1, 1, 2], dtype=object),
            "shopcomp_judge_failed": np.array(["", "", "judge failed: uncertain"], dtype=object),
            "shopcomp_judging": np.array(
                [
                    {"items": 4.0, "uncertain": 0.0, "llm_calls": 0.0},
                    {"items": 3.0, "uncertain": 2.0, "llm_calls": 1.0},
                    {"items": 3.0, "uncertain": 1.0, "llm_calls": 0.0},
                ],
                dtype=object,
            ),
        }
    )
    assert m["shopcomp/uncertain_share"] == pytest.approx(3 / 10)  # unscored trajectories count too
    assert m["shopcomp/llm_judge_calls/sum"] == 1.0
    assert m["shopcomp/uncertain_unscored/count"] == 1 and m["shopcomp/judge_failed/count"] == 1
    assert m["shopcomp/R_z/mean"] == 1.0  # the unscored stage enters no mean
    # batches from before the column: no share (never a made-up 0), no calls
    m = rollout_reward_metrics({"shopcomp_reward": np.array([ok], dtype=object)})
    assert "shopcomp/uncertain_share" not in m and m["shopcomp/llm_judge_calls/sum"] == 0.0
