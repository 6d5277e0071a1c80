"""GRPO log-probabilities under the distribution the rollouts were drawn from.

TRL's GRPO scores every completion token with the model's full temperature-scaled softmax, while
the rollouts are drawn after top-k / top-p truncation (:func:`~shopping_companion.llm.batch_generate.sampling_support`).
The policy gradient of a token with a negative advantage then raises every other token of the
vocabulary in proportion to its probability, including the tail the sampler never draws: that
mass is never sampled, so no later advantage takes it back, and it grows step after step until it
enters the top-k and the format breaks (the entropy rise measured in docs/pipeline.md). With
``trainer.processed_logprobs: true`` the loss, the old-policy ratio and the KL to the reference
all use log-probabilities renormalised over the sampler's support (vLLM's "processed logprobs"),
so the gradient moves mass only between tokens the sampler can draw. The entropy TRL logs stays
that of the full distribution, so a growing tail still shows.

:func:`processed_log_probs` is plain torch; :func:`processed_grpo_trainer` wraps TRL's
``GRPOTrainer`` (imported by the caller: TRL lives in ``.venv-rl`` only).
"""

from __future__ import annotations

from typing import Any

from shopping_companion.llm.batch_generate import sampling_support

__all__ = ["processed_grpo_trainer", "processed_log_probs"]


def processed_log_probs(
    logits: Any, labels: Any, *, temperature: float, top_k: int | None, top_p: float, entropy: bool = True
) -> tuple[Any, Any]:
    """Log-probability of each label under the truncated sampling distribution, and the entropy
    of the full temperature-scaled distribution.

    ``logits``: float tensor ``(..., V)`` (raw model output); ``labels``: long tensor ``(...)``
    of token ids in ``[0, V)``. ``temperature`` > 0; ``top_k`` None/0 (off) or >= 1; ``top_p`` in
    (0, 1]. Returns ``(log_probs, entropy)``, both of shape ``labels.shape``: ``log_probs`` is
    differentiable with respect to ``logits`` and normalised over :func:`sampling_support` plus the
    label itself (a label outside the support, possible only off-policy or at a floating-point
    near-tie, keeps a finite log-probability); ``entropy`` (nats, no gradient) is the full
    distribution's, None with ``entropy=False`` (the softmax over the vocabulary is skipped). Raises ``ValueError`` for a temperature <= 0."""
    import torch

    if not temperature > 0:
        raise ValueError(f"temperature must be > 0 for processed log-probabilities, got {temperature!r}")
    scaled = logits.float() / float(temperature)
    with torch.no_grad():
        idx, keep = sampling_support(scaled, top_k, top_p)
        lab = labels.unsqueeze(-1)
        label_kept = ((idx == lab) & keep).any(-1, keepdim=True)
        cols = torch.cat([idx, lab], dim=-1)
        col_keep = torch.cat([keep, ~label_kept], dim=-1)
        ent = None
        if entropy:
            full = torch.log_softmax(scaled, dim=-1)
            ent = -(full.exp() * full).sum(-1)
    support = scaled.gather(-1, cols).masked_fill(~col_keep, float("-inf"))
    log_z = torch.logsumexp(support, dim=-1)
    return scaled.gather(-1, lab).squeeze(-1) - log_z, ent


def processed_grpo_trainer(base: type) -> type:
    """A subclass of TRL's ``GRPOTrainer`` (``base``) whose per-token log-probabilities (policy,
    old policy and reference model alike) come from :func:`processed_log_probs` at the trainer's
    ``temperature``, ``top_k`` and ``top_p``. Text-only causal LMs; the model's forward must accept
    ``logits_to_keep`` (every transformers causal LM does)."""

    class ProcessedLogprobsGRPOTrainer(base):  # type: ignore[misc, valid-type]
        def _get_per_token_logps_and_entropies(  # noqa: PLR0913 - TRL's signature
            self,
            model: Any,
            input_ids: Any,
            attention_mask: Any,
            logits_to_keep: int,
            batch_size: int | None = None,
            compute_entropy: bool = False,
            compute_aux_loss: bool = False,
            **multimodal: Any,
        ) -> tuple[Any, Any, Any]:
            import torch

            if any(v is not None for v in multimodal.values()) or compute_aux_loss:
                raise ValueError("trainer.processed_logprobs supports text-only models without MoE auxiliary loss")
            batch_size = batch_size or input_ids.size(0)
            logps, entropies = [], []
            for start in range(0, input_ids.size(0), batch_size):
                ids = input_ids[start : start + batch_size]
                mask = attention_mask[start : start + batch_size]
                with self.accelerator.autocast():
                    logits = model(input_ids=ids, attention_mask=mask, logits_to_keep=logits_to_keep + 1).logits
                lp, ent = processed_log_probs(
                    logits[:, :-1],
                    ids[:, -logits_to_keep:],
                    temperature=self.temperature,
                    top_k=self.top_k,
                    top_p=self.top_p if self.top_p is not None else 1.0,
                    entropy=compute_entropy,
                )
                logps.append(lp)
                entropies.append(ent)
            return torch.cat(logps), (torch.cat(entropies) if compute_entropy else None), None

    return ProcessedLogprobsGRPOTrainer
