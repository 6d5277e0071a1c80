"""Batched sampling (llm/batch_generate.py) against transformers' own greedy generate, per-row
random streams, and the two batchers."""

from __future__ import annotations

import asyncio
import threading

import pytest

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from shopping_companion.trainers.nano import NanoModelConfig, build_nano_model

    texts = ["I need socks for the office, in brown stripes.", '{"name": "mem_search", "arguments": {}}'] * 20
    cfg = NanoModelConfig(vocab_size=400, hidden_size=32, intermediate_size=64, num_hidden_layers=1)
    path = build_nano_model(tmp_path_factory.mktemp("nano"), texts, cfg)
    return AutoModelForCausalLM.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path)


def test_greedy_batch_equals_one_by_one_generate(tiny) -> None:
    from shopping_companion.llm.batch_generate import GenRequest, generate_batch

    model, tok = tiny
    prompts = ["I need socks", "brown stripes for the office, please", "x"]
    reqs = [GenRequest(tok.encode(p), 9, temperature=0) for p in prompts]
    out = generate_batch(model, reqs, stop_ids=[tok.eos_token_id], pad_id=tok.pad_token_id)
    for p, got in zip(prompts, out):
        ids = torch.tensor([tok.encode(p)])
        ref = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=9,
            do_sample=False,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
        )[0, ids.shape[1] :].tolist()
        assert got == ref and 1 <= len(got) <= 9


def test_a_seeded_row_does_not_depend_on_its_batch(tiny) -> None:
    from shopping_companion.llm.batch_generate import GenRequest, generate_batch

    model, tok = tiny
    a = GenRequest(tok.encode("I need socks"), 12, temperature=1.0, seed=5)
    other = GenRequest(tok.encode("brown stripes for the office"), 12, temperature=1.0, seed=7)
    alone = generate_batch(model, [a], stop_ids=[], pad_id=tok.pad_token_id)[0]
    together = generate_batch(model, [other, a], stop_ids=[], pad_id=tok.pad_token_id)[1]
    assert alone == together and len(alone) == 12
    b = GenRequest(tok.encode("I need socks"), 12, temperature=1.0, seed=6)
    assert generate_batch(model, [b], stop_ids=[], pad_id=tok.pad_token_id)[0] != alone


def test_stop_tokens_and_limits_per_row(tiny) -> None:
    from shopping_companion.llm.batch_generate import GenRequest, generate_batch

    model, tok = tiny
    reqs = [GenRequest(tok.encode("socks"), 3, temperature=0), GenRequest(tok.encode("socks"), 7, temperature=0)]
    out = generate_batch(model, reqs, stop_ids=[], pad_id=tok.pad_token_id)
    assert [len(o) for o in out] == [3, 7] and out[1][:3] == out[0]
    first = out[1][0]
    stopped = generate_batch(model, reqs[1:], stop_ids=[first], pad_id=tok.pad_token_id)[0]
    assert stopped == [first]
    with pytest.raises(ValueError, match="max_new_tokens"):
        generate_batch(model, [GenRequest([1], 0)], stop_ids=[], pad_id=0)


def test_async_batcher_waits_for_every_registered_episode() -> None:
    from shopping_companion.llm.batch_generate import AsyncBatcher, GenRequest

    seen: list[int] = []

    def run(reqs):
        seen.append(len(reqs))
        return [[len(r.ids)] for r in reqs]

    b = AsyncBatcher(run, max_batch=8)

    async def episode(n: int, turns: int) -> list[list[int]]:
        try:
            return [await b.generate(GenRequest([0] * n, 1)) for _ in range(turns)]
        finally:
            b.unregister()

    async def main():
        for _ in range(3):
            b.register()
        return await asyncio.gather(episode(1, 2), episode(2, 1), episode(3, 2))

    out = asyncio.run(main())
    assert out == [[[1], [1]], [[2]], [[3], [3]]]
    assert seen == [3, 2]  # all three, then the two still running


def test_thread_batcher_batches_concurrent_callers_and_hands_errors_to_each() -> None:
    from shopping_companion.llm.batch_generate import GenRequest, ThreadBatcher

    sizes: list[int] = []

    def run(reqs):
        sizes.append(len(reqs))
        if any(r.ids == [99] for r in reqs):
            raise RuntimeError("boom")
        return [list(r.ids) for r in reqs]

    b = ThreadBatcher(run, max_batch=4, max_wait_s=0.5)
    results: dict[int, object] = {}

    def call(i: int) -> None:
        try:
            results[i] = b.generate(GenRequest([i], 1))
        except RuntimeError as e:
            results[i] = str(e)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert results == {i: [i] for i in range(4)} and sizes == [4]
    threads = [threading.Thread(target=call, args=(i,)) for i in (98, 99)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert results[98] == "boom" and results[99] == "boom"
