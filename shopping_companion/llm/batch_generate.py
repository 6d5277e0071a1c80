"""Batched sampling from a local causal LM, each row with its own settings and random stream.

A small model on a CPU (or one GPU) spends most of a generation step in per-call overhead, not in
arithmetic, so generating the turns of many concurrent episodes as one padded batch is several
times faster than one after another (``benchmarks/bench_batch_generate.py``). Two users:

- :class:`~shopping_companion.llm.local_transformers.LocalTransformersBackend` batches the
  ``chat`` calls of concurrent evaluation episodes (``batch_size``);
- the TRL GRPO rollout (:mod:`shopping_companion.trainers.trl_rollout`) plays the trajectories of a
  step concurrently and generates their turns together (:class:`AsyncBatcher`).

:func:`generate_batch` left-pads the prompts, runs one forward pass over them with a KV cache, then
decodes token by token for every row until each row has produced a stop token or its
``max_new_tokens``. Sampling follows the usual order (temperature, then top-k, then top-p, then a
draw); ``temperature == 0`` is greedy. A row with a ``seed`` draws from its own
``torch.Generator`` seeded with it, so its tokens do not depend on the other rows of the batch
(up to floating-point differences of padded matrix products, which can in rare cases flip a
near-tie); a row without one draws from ``torch``'s global generator.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from shopping_companion.errors import check_at_least

__all__ = ["AsyncBatcher", "GenRequest", "ThreadBatcher", "generate_batch", "sampling_support"]


@dataclass
class GenRequest:
    """One row of a batch: ``ids`` (the prompt, >= 1 token), ``max_new_tokens`` (>= 1), sampling
    ``temperature`` (>= 0; 0 = greedy), ``top_p`` in (0, 1], ``top_k`` (None or 0: off) and an
    optional ``seed`` for the row's own random stream."""

    ids: Sequence[int]
    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int | None = None
    seed: int | None = None


def sampling_support(logits: Any, top_k: int | None, top_p: float) -> tuple[Any, Any]:
    """The tokens a draw at these settings can pick: top-k, then top-p (nucleus) over what is left.

    ``logits``: a float tensor of shape ``(..., V)``, already divided by the temperature. Returns
    ``(idx, keep)``, both of shape ``(..., K)``: ``idx`` the K most likely token ids in descending
    order of logit, ``keep`` whether each is in the support. Top-k keeps every token whose logit is
    at least the k-th largest (ties with it included, as transformers' ``TopKLogitsWarper`` does;
    ``K`` is the widest row's count, ``V`` when ``top_k`` is None or 0); top-p then keeps the
    smallest prefix whose probability mass, renormalised over those, reaches ``top_p`` (the first
    token always stays).
    ``top_p`` in (0, 1]. The sampler (:func:`generate_batch`) draws from exactly this support, and
    GRPO's processed log-probabilities (:mod:`shopping_companion.trainers.processed_logprobs`)
    normalise over it."""
    import torch

    n = logits.shape[-1]
    if not top_k or top_k >= n:
        vals, idx = torch.sort(logits, dim=-1, descending=True)
        keep = torch.ones_like(idx, dtype=torch.bool)
    else:
        kth = torch.topk(logits, int(top_k), dim=-1).values[..., -1:]
        width = int((logits >= kth).sum(-1).max())  # ties with the k-th token stay in (as in transformers)
        vals, idx = torch.topk(logits, width, dim=-1)
        keep = vals >= kth
    if top_p < 1.0:
        probs = torch.softmax(vals.masked_fill(~keep, float("-inf")), dim=-1)
        keep = keep & ((torch.cumsum(probs, dim=-1) - probs) <= top_p)
    return idx, keep


def _filter(logits: Any, top_k: int | None, top_p: float) -> Any:
    """One row of logits (a 1-D tensor) with every token outside :func:`sampling_support` at -inf."""
    import torch

    if not top_k and top_p >= 1.0:
        return logits
    idx, keep = sampling_support(logits, top_k, top_p)
    out = torch.full_like(logits, float("-inf"))
    return out.scatter(-1, idx[keep], logits[idx[keep]])


def _cache_arg(model: Any) -> str:
    """The keyword the model's ``forward`` takes its KV cache by: ``cache`` in newer transformers
    (``past_key_values`` is deprecated there), ``past_key_values`` before."""
    import inspect

    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return "past_key_values"
    return "cache" if "cache" in params else "past_key_values"


def generate_batch(
    model: Any, requests: Sequence[GenRequest], *, stop_ids: Sequence[int], pad_id: int
) -> list[list[int]]:
    """The generated ids of every request (same order), each ending with its stop token when one
    was produced (module docstring). ``stop_ids``: tokens that end a row (e.g. EOS,
    ``<|im_end|>``); ``pad_id``: the padding token. Raises ``ValueError`` for an empty prompt or
    ``max_new_tokens`` < 1."""
    import torch

    if not requests:
        return []
    for r in requests:
        if not r.ids:
            raise ValueError("ids: a request needs at least one prompt token")
        check_at_least("max_new_tokens", r.max_new_tokens, 1)
    device = next(model.parameters()).device
    n = len(requests)
    width = max(len(r.ids) for r in requests)
    ids = torch.full((n, width), int(pad_id), dtype=torch.long)
    mask = torch.zeros((n, width), dtype=torch.long)
    for i, r in enumerate(requests):
        ids[i, width - len(r.ids) :] = torch.tensor(list(r.ids), dtype=torch.long)
        mask[i, width - len(r.ids) :] = 1
    ids, mask = ids.to(device), mask.to(device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    gens = [torch.Generator(device="cpu").manual_seed(int(r.seed)) if r.seed is not None else None for r in requests]
    stops = {int(s) for s in stop_ids}
    limits = [int(r.max_new_tokens) for r in requests]
    out: list[list[int]] = [[] for _ in requests]
    live = [True] * n
    from transformers import DynamicCache

    kv = {_cache_arg(model): DynamicCache()}
    with torch.inference_mode():
        logits = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, **kv).logits[
            :, -1, :
        ]
        next_pos = positions[:, -1:] + 1
        for _step in range(max(limits)):
            logits = logits.float().cpu()
            chosen = torch.full((n,), int(pad_id), dtype=torch.long)
            for i, r in enumerate(requests):
                if not live[i]:
                    continue
                row = logits[i]
                if r.temperature <= 0:
                    tok = int(torch.argmax(row))
                else:
                    row = _filter(row / float(r.temperature), r.top_k, float(r.top_p))
                    probs = torch.softmax(row, dim=-1)
                    tok = int(torch.multinomial(probs, 1, generator=gens[i]))
                out[i].append(tok)
                chosen[i] = tok
                if tok in stops or len(out[i]) >= limits[i]:
                    live[i] = False
            if not any(live):
                break
            mask = torch.cat([mask, torch.ones((n, 1), dtype=torch.long, device=device)], dim=1)
            logits = model(
                input_ids=chosen.to(device)[:, None], attention_mask=mask, position_ids=next_pos, use_cache=True, **kv
            ).logits[:, -1, :]
            next_pos = next_pos + 1
    return out


class AsyncBatcher:
    """Batches the generations of concurrent asyncio episodes (one event loop).

    Each episode calls :meth:`register` once before it starts and :meth:`unregister` when it ends;
    :meth:`generate` queues a request and waits. The queued requests run as one batch (through
    ``run``, a function of a list of :class:`GenRequest`) as soon as every registered episode is
    waiting, or ``max_batch`` are queued — so the batch is as large as the episodes allow, and an
    episode busy in its environment is never waited on past its next request. ``run`` is called on
    the event loop's thread (the episodes have nothing else to do meanwhile)."""

    def __init__(self, run: Callable[[list[GenRequest]], list[list[int]]], max_batch: int = 64) -> None:
        self.run = run
        self.max_batch = check_at_least("max_batch", max_batch, 1)
        self.active = 0
        self._queue: list[tuple[GenRequest, asyncio.Future]] = []
        self.batches: list[int] = []  # the size of every batch run, for logs and tests

    def register(self) -> None:
        self.active += 1

    def unregister(self) -> None:
        self.active -= 1
        self._flush()

    async def generate(self, request: GenRequest) -> list[int]:
        fut = asyncio.get_running_loop().create_future()
        self._queue.append((request, fut))
        self._flush()
        return await fut

    def _flush(self) -> None:
        while self._queue and (len(self._queue) >= max(self.active, 1) or len(self._queue) >= self.max_batch):
            batch, self._queue = self._queue[: self.max_batch], self._queue[self.max_batch :]
            self.batches.append(len(batch))
            try:
                results = self.run([r for r, _ in batch])
            except BaseException as e:  # every waiting episode gets the failure
                for _, fut in batch:
                    if not fut.done():
                        fut.set_exception(e)
                continue
            for (_, fut), ids in zip(batch, results):
                if not fut.done():
                    fut.set_result(ids)


class ThreadBatcher:
    """Batches the generations of concurrent threads: :meth:`generate` blocks until its request's
    batch has run. A batch starts when ``max_batch`` requests are queued or ``max_wait_s`` seconds
    after the first one arrived, whichever is first; one batch runs at a time (``run`` is called
    from the calling threads, never two at once)."""

    def __init__(
        self, run: Callable[[list[GenRequest]], list[list[int]]], max_batch: int = 16, max_wait_s: float = 0.02
    ) -> None:
        self.run = run
        self.max_batch = check_at_least("max_batch", max_batch, 1)
        self.max_wait_s = check_at_least("max_wait_s", max_wait_s, 0)
        self._cv = threading.Condition()
        self._queue: list[dict[str, Any]] = []
        self._running = False
        self.batches: list[int] = []

    def generate(self, request: GenRequest) -> list[int]:
        item: dict[str, Any] = {"request": request, "t": time.monotonic(), "done": False, "result": None, "error": None}
        with self._cv:
            self._queue.append(item)
            self._cv.notify_all()
            while not item["done"]:
                timeout: float | None = None
                if not self._running and self._queue:
                    waited = time.monotonic() - self._queue[0]["t"]
                    if len(self._queue) >= self.max_batch or waited >= self.max_wait_s:
                        self._run_one()
                        continue
                    timeout = self.max_wait_s - waited
                self._cv.wait(timeout)
        if item["error"] is not None:
            raise item["error"]
        return item["result"]

    def _run_one(self) -> None:
        """Run the oldest ``max_batch`` queued requests (called holding the lock; released while
        the batch runs, so new requests queue meanwhile)."""
        batch, self._queue = self._queue[: self.max_batch], self._queue[self.max_batch :]
        self._running = True
        self._cv.release()
        try:
            try:
                results, error = self.run([b["request"] for b in batch]), None
            except BaseException as e:  # noqa: BLE001 - handed to every caller of the batch
                results, error = [None] * len(batch), e
        finally:
            self._cv.acquire()
        for b, r in zip(batch, results):
            b["result"], b["error"], b["done"] = r, error, True
        self.batches.append(len(batch))
        self._running = False
        self._cv.notify_all()
