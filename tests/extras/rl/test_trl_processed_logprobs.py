"""TRL GRPO with ``trainer.processed_logprobs``: the trainer's per-token log-probabilities are
renormalised over the sampler's top-k / top-p support (trainers/processed_logprobs.py), and a
GRPO step trains with them."""

from __future__ import annotations

import math

from tests.extras.rl.conftest import require, tiny_grpo

require("trl", "datasets")


def test_grpo_step_uses_log_probs_over_the_sampling_support(tmp_path, rl_kit, tool_model_dir):
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOTrainer

    from shopping_companion.trainers.processed_logprobs import processed_grpo_trainer, processed_log_probs
    from shopping_companion.trainers.trl_rollout import make_rollout_func

    rows, funcs, args = tiny_grpo(
        rl_kit, tmp_path / "out", max_steps=1, learning_rate=1e-3, beta=0.04, temperature=0.8, top_p=0.9, top_k=5
    )
    tok = AutoTokenizer.from_pretrained(tool_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tool_model_dir)
    trainer = processed_grpo_trainer(GRPOTrainer)(
        model=model,
        processing_class=tok,
        reward_funcs=funcs,
        args=args,
        train_dataset=Dataset.from_list(rows),
        rollout_func=make_rollout_func(rl_kit, rows, max_turns=2, max_tokens_per_turn=64),
    )
    ids = torch.tensor([tok("find me running shoes in size 9, please")["input_ids"]])
    mask = torch.ones_like(ids)
    keep = ids.shape[1] - 2
    with torch.no_grad():
        got, ent, _ = trainer._get_per_token_logps_and_entropies(model, ids, mask, keep, compute_entropy=True)
        logits = model(input_ids=ids, attention_mask=mask).logits[:, -keep - 1 : -1]
        want, want_ent = processed_log_probs(logits, ids[:, -keep:], temperature=0.8, top_k=5, top_p=0.9)
        full = torch.log_softmax(logits / 0.8, dim=-1).gather(-1, ids[:, -keep:, None]).squeeze(-1)
    assert got.shape == (1, keep) and torch.allclose(got, want, atol=1e-5) and torch.allclose(ent, want_ent, atol=1e-5)
    assert bool((got >= full - 1e-6).all()) and bool((got > full + 1e-3).any())  # renormalised over fewer tokens

    before = [p.detach().clone() for p in model.parameters()]
    trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert logs and all(math.isfinite(h["loss"]) and math.isfinite(h["entropy"]) for h in logs)
    assert any(not (a == b.detach()).all() for a, b in zip(before, model.parameters())), "the step did not train"
