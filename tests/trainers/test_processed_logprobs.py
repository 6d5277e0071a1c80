"""processed_log_probs: GRPO log-probabilities over the sampler's top-k / top-p support."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from shopping_companion.llm.batch_generate import sampling_support  # noqa: E402
from shopping_companion.trainers.processed_logprobs import processed_log_probs  # noqa: E402


def _reference(logits, label, temperature, top_k, top_p):
    """Brute force: the support by sorting probabilities, then log p(label) renormalised."""
    scaled = logits.double() / temperature
    order = sorted(range(len(scaled)), key=lambda i: -float(scaled[i]))
    if top_k:
        order = order[:top_k]
    probs = torch.softmax(scaled[order], dim=-1)
    kept, mass = [], 0.0
    for tok, p in zip(order, probs.tolist()):
        if kept and mass > top_p:
            break
        kept.append(tok)
        mass += p
    if label not in kept:
        kept.append(label)
    return float(scaled[label] - torch.logsumexp(scaled[kept], dim=0))


@pytest.mark.parametrize(("top_k", "top_p"), [(None, 1.0), (5, 1.0), (None, 0.7), (8, 0.9), (3, 0.5)])
def test_matches_brute_force(top_k, top_p):
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(6, 40, generator=g) * 2
    labels = torch.randint(0, 40, (6,), generator=g)
    labels[0] = int(torch.argmax(logits[0]))  # one label surely in the support
    got, ent = processed_log_probs(logits, labels, temperature=0.8, top_k=top_k, top_p=top_p)
    for i in range(6):
        assert float(got[i]) == pytest.approx(_reference(logits[i], int(labels[i]), 0.8, top_k, top_p), abs=1e-5)
    full = torch.log_softmax(logits / 0.8, dim=-1)
    assert torch.allclose(ent, -(full.exp() * full).sum(-1), atol=1e-5)
    if top_k is None and top_p == 1.0:  # no truncation: the full softmax
        assert torch.allclose(got, full.gather(-1, labels[:, None]).squeeze(-1), atol=1e-5)


def test_gradient_stays_inside_the_support():
    g = torch.Generator().manual_seed(1)
    logits = (torch.randn(2, 3, 50, generator=g) * 3).requires_grad_()
    idx, keep = sampling_support(logits.detach(), 4, 0.9)
    labels = idx[..., 0]  # the most likely token: always drawn-able
    lp, _ = processed_log_probs(logits, labels, temperature=1.0, top_k=4, top_p=0.9)
    (-lp.sum()).backward()
    support = torch.zeros_like(logits, dtype=torch.bool).scatter(-1, idx, keep)
    assert float(logits.grad[~support].abs().max()) == 0.0
    assert float(logits.grad[support].abs().max()) > 0.0
    assert lp.shape == (2, 3)


def test_bad_temperature_named():
    with pytest.raises(ValueError, match="temperature"):
        processed_log_probs(torch.zeros(1, 4), torch.zeros(1, dtype=torch.long), temperature=0, top_k=2, top_p=1.0)


def test_ties_with_the_kth_token_stay_in_the_support():
    """As transformers' TopKLogitsWarper: every token tied with the k-th largest logit is drawable."""
    logits = torch.tensor([[5.0, 4.0, 3.0, 3.0, 3.0, 1.0, 0.0], [7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0]])
    idx, keep = sampling_support(logits, 3, 1.0)
    assert sorted(idx[0][keep[0]].tolist()) == [0, 1, 2, 3, 4]
    assert sorted(idx[1][keep[1]].tolist()) == [0, 1, 2]
    lp, _ = processed_log_probs(logits[:1], torch.tensor([3]), temperature=1.0, top_k=3, top_p=1.0)
    assert float(lp[0]) == pytest.approx(float(3.0 - torch.logsumexp(torch.tensor([5.0, 4.0, 3.0, 3.0, 3.0]), 0)))
