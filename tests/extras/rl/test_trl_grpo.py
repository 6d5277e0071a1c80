"""TRL 1.16.0 on CPU: two GRPO steps of the tiny tool-calling model through our environment
(rollout_func) and rubric; the rubric's rewards must appear in the trainer's logged metrics.
This is the library-level run (the pieces assembled by hand, as in a notebook); the same run
through ``shopcomp grpo trl`` is tests/extras/rl/test_trl_command.py."""

from __future__ import annotations

import math
import time

from tests.extras.rl.conftest import require, tiny_grpo

require("trl", "datasets")


def test_two_trl_grpo_steps_log_our_rewards(tmp_path, rl_kit, tool_model_dir):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOTrainer

    from shopping_companion.trainers.trl_rollout import make_rollout_func

    rows, funcs, args = tiny_grpo(rl_kit, tmp_path / "out")
    tok = AutoTokenizer.from_pretrained(tool_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tool_model_dir)
    before = [p.detach().clone() for p in model.parameters()]
    trainer = GRPOTrainer(
        model=model,
        processing_class=tok,
        reward_funcs=funcs,
        args=args,
        train_dataset=Dataset.from_list(rows),
        rollout_func=make_rollout_func(rl_kit, rows, max_turns=3, max_tokens_per_turn=96),
    )
    t0 = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - t0
    print(f"TRL GRPO 2 steps on CPU: {wall:.1f} s")
    logs = [h for h in trainer.state.log_history if "rewards/shopcomp_total/mean" in h]
    assert len(logs) == 2
    for h in logs:
        for name in ("shopcomp_total", "R_z", "R_tool", "R_fmt", "success"):
            v = h[f"rewards/{name}/mean"]
            assert math.isfinite(v)
        # R_fmt ∈ [0, 1] and the total is the rubric's sum of the logged components (Eq. 12)
        assert 0.0 <= h["rewards/R_fmt/mean"] <= 1.0
        total = h["rewards/R_z/mean"] + h["rewards/R_tool/mean"] + h["rewards/R_fmt/mean"]
        assert abs(h["rewards/shopcomp_total/mean"] - total) < 1e-4
        assert h["reward"] == h["rewards/shopcomp_total/mean"]  # only the total carries weight
        # unscored shares are logged from the rollout (not as reward functions: see trl_rollout)
        assert 0.0 <= h["shopcomp/unscored"] <= 1.0 and h["shopcomp/deadline_missed"] == 0.0
    assert any(h["rewards/R_fmt/mean"] > 0 for h in logs)
    changed = any(not (a == b.detach()).all() for a, b in zip(before, model.parameters()))
    assert changed, "two GRPO steps did not update the model"
