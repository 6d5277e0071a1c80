"""Environment time per GRPO step (issue figure): 16 prompts × 8 rollouts = 128 trajectories,
each a full row episode of ~9 tool calls, with a scripted policy in place of the model, on CPU.

What is timed: everything :func:`~shopping_companion.trainers.episode.run_row_episode` does
outside generation — environment steps (tool calls on the real BM25 index and MiniLM memory,
parsing, the rule judge and the Eq. 12 rubric at stage ends, the user simulator), stage 1 played by
the gold policy for stage-2 rows, and the token work of the episode (chat-template rendering and
tokenisation of prompts and observations with a real tokenizer). The scripted policy answers with
the token ids of a gold-knowing agent that makes extra searches first; its own time is excluded (it is the
model's share). With ``--extra-calls 7`` (default) a trajectory makes 9 tool calls (7 searches + the
gold path's search/view). As in verl, the batch is split over agent-loop worker processes
(``--workers``, default 2 = the cores of the reference machine; index, memory and tokenizer loaded
once per worker, outside the timing); within a worker, ``--concurrency`` trajectories run at once on
one event loop with tools in threads (default 1: the scripted policy has no generation latency to
overlap, so more in flight only adds thread contention). The first steps include the JVM's JIT
warm-up of the Lucene searcher; the median is over all steps.

    python benchmarks/bench_grpo_env.py [--prompts 16] [--rollouts 8] [--steps 12] [--workers 2] [--concurrency 1] [--breakdown]

Prints per step: wall seconds for the 128 trajectories, summed env seconds, tool calls per
trajectory; then the median over steps. Target (issue 33): median <= 2.0 s of environment time per step
on 2 cores, and token work <= 0.5 s in the sequential ``--breakdown``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


_W: dict = {}


def _setup(args: argparse.Namespace, ready) -> None:
    """Worker-process initializer: load the index, memory, tasks and tokenizer once (as a verl
    agent-loop worker does), then report ready."""
    from transformers import AutoTokenizer

    from shopping_companion.catalog.loader import load_products
    from shopping_companion.memory.loaders import load_sgd
    from shopping_companion.paths import resolve_data_dir
    from shopping_companion.pipeline import make_embedder, open_product_search
    from shopping_companion.rewards.rubric import load_rubric
    from shopping_companion.trainers.chat_tokens import ChatTokens
    from shopping_companion.trainers.resources import EnvResources
    from tests.env_support import EnvKit, make_single_tasks
    from tests.tiny_model import TOOL_CHAT_TEMPLATE, build_tiny_model

    import torch

    torch.set_num_threads(1)  # one core per worker process
    data = resolve_data_dir()
    products, _ = load_products(data / "catalog" / "products.jsonl.gz")
    sgd = load_sgd(data / "conversations" / "sgd_dialogues.jsonl.gz")
    search = open_product_search(index_dir=args.index_dir)
    embedder = make_embedder()
    n_tasks = max(1, args.prompts // 2)
    tasks, pool = make_single_tasks(products, sgd, n=n_tasks, seed=3, haystack_size=40)
    kit = EnvKit(search, embedder, pool)
    res = EnvResources(
        tasks={t.task_id: t for t in tasks},
        sessions=pool,
        products=search,
        embedder=embedder,
        judge=kit.judge,
        reward_fn=load_rubric("paper", resources={"lookup": kit.lookup}),
    )
    tok = AutoTokenizer.from_pretrained(build_tiny_model(Path(tempfile.mkdtemp()) / "tok"))
    tok.chat_template = TOOL_CHAT_TEMPLATE  # Qwen2.5's layout, as a real checkpoint's template renders
    for t in tasks:  # warm the memory stores (built once per user in a real worker too)
        res.memory(t)
    words = sorted({w.lower() for p in products[:20000] for w in p.title.split() if w.isalpha() and len(w) > 3})
    _W.update(args=args, tasks=tasks, res=res, tok=tok, chat=ChatTokens(tok), words=words)
    ready.put(len(tasks))


def _scripted(task, stage: int, nonce: str):
    """A gold-knowing agent that first makes ``--extra-calls`` searches (memory tools in stage 1,
    product tools in stage 2), then follows the gold path; returns a GenerateFn and its own time.
    ``nonce`` (step, rollout) adds two catalog title words drawn at random to every extra search, so
    rollouts differ as a sampled policy's do: query encodings are not served from the embedding
    cache, and search results (hence observation texts) differ between rollouts. The gold path's
    calls are the same in every rollout, like a policy that has learnt the task."""
    from shopping_companion.envs.scripted import GoldPolicy
    from shopping_companion.envs.tools import MEMORY_TOOLS, PRODUCT_TOOLS, tool_schema
    from shopping_companion.trainers.episode import Generation

    args, tok = _W["args"], _W["tok"]
    policy = GoldPolicy(task)
    names = MEMORY_TOOLS if stage == 1 else PRODUCT_TOOLS
    schemas = [tool_schema(n) for n in names]
    turn = [0]
    spent = [0.0]

    async def generate(ids, sp):
        t = time.perf_counter()
        k = turn[0]
        turn[0] += 1
        if k < args.extra_calls:
            rng = random.Random(f"{nonce}-{k}")
            q = (
                [
                    "what do I like",
                    "my usual style",
                    "things I avoid",
                    "colours I wear",
                    "fabric I prefer",
                    "my budget",
                    "brands I trust",
                    "what I bought before",
                ][k % 8]
                + " "
                + " ".join(rng.sample(_W["words"], 2))
            )
            call = (
                {"name": "mem_search", "arguments": {"queries": [q, task.instruction], "top_k": 10}}
                if stage == 1
                else {
                    "name": "product_search",
                    "arguments": {"query": f"{task.slots[0].product_type} {q}", "top_k": 10},
                }
            )
            reply = "<think>look around</think>\n<tool_call>" + json.dumps(call) + "</tool_call>"
        else:
            reply = policy.chat([{"role": "assistant", "content": ""}] * (k - args.extra_calls), schemas).content
        out = Generation(tok.encode(reply, add_special_tokens=False) + [tok.eos_token_id])
        spent[0] += time.perf_counter() - t
        return out

    return generate, spent


def _run_share(
    step_rows: tuple[int, list[tuple[int, int, int]]],
) -> tuple[float, float, list[tuple[float, int, float, float]]]:
    """Run this worker's trajectories (task index, stage, rollout) of one step concurrently on one
    event loop (tools in threads); returns (wall s, CPU s of the whole process, per-trajectory figures)."""
    from shopping_companion.trainers.chat_tokens import clear_encode_caches
    from shopping_companion.trainers.episode import run_row_episode

    args, tasks, res, chat = _W["args"], _W["tasks"], _W["res"], _W["chat"]
    step, rows = step_rows
    clear_encode_caches()  # a real step has new prompts: no hits from the previous step's texts

    async def one(ti: int, stage: int, rollout: int, sem):
        async with sem:
            task = tasks[ti]
            gen, spent = _scripted(task, stage, f"s{step}r{rollout}")
            env = res.make_env(task)
            t = time.perf_counter()
            ep = await run_row_episode(env, stage, chat, gen, {}, 32768, stage1="gold")
            wall = time.perf_counter() - t
            calls = sum(
                len(s.tool_calls) for r in env.results if r.trajectory.stage == stage for s in r.trajectory.steps
            )
            return wall - spent[0], calls, ep.reward.components.get("R_tool", 0.0), spent[0]

    async def share():
        sem = asyncio.Semaphore(args.concurrency)
        return await asyncio.gather(*(one(ti, s, r, sem) for ti, s, r in rows))

    t, c = time.perf_counter(), time.process_time()
    out = asyncio.run(share())
    return time.perf_counter() - t, time.process_time() - c, out


def _breakdown(rows: list[tuple[int, int, int]]) -> dict[str, float]:
    """One worker, one trajectory at a time (wall = CPU): seconds spent in the environment
    (``env.astep``: tools, parsing, simulator, judge and rubric at stage ends; stage 1 played by the
    gold policy for stage-2 rows) versus the agent loop's token work (chat-template rendering,
    tokenising observations and prompts, decoding) for the given trajectories; ``token_cpu`` is the
    token work's CPU seconds of the worker's thread (what other processes on a shared machine do
    not inflate)."""
    from shopping_companion.trainers.chat_tokens import ChatTokens, clear_encode_caches
    from shopping_companion.trainers.episode import run_row_episode

    tasks, res, tok = _W["tasks"], _W["res"], _W["tok"]
    spent = {"env": 0.0, "render": 0.0, "encode": 0.0, "decode": 0.0, "token_cpu": 0.0}

    depth = [0]  # timed calls in progress: a call inside another one is counted by the outer one only

    def timed(name: str, key: str):
        """Wrap ChatTokens.<name> to add its time to spent[key] (encode_decoded decodes what it
        encoded: that decode counts as encoding, not twice)."""
        inner = getattr(ChatTokens, name)

        def wrapper(self, *a, **k):
            depth[0] += 1
            t, c = time.perf_counter(), time.thread_time()
            try:
                return inner(self, *a, **k)
            finally:
                depth[0] -= 1
                if depth[0] == 0:
                    spent[key] += time.perf_counter() - t
                    spent["token_cpu"] += time.thread_time() - c

        return wrapper

    class TimedChat(ChatTokens):
        render = timed("render", "render")
        encode_decoded = timed("encode_decoded", "encode")
        decode = timed("decode", "decode")

    chat = TimedChat(tok)
    clear_encode_caches()

    async def run_all():
        for ti, stage, rollout in rows:
            env = res.make_env(tasks[ti])
            astep = env.astep

            async def timed(text, _astep=astep):
                t = time.perf_counter()
                try:
                    return await _astep(text)
                finally:
                    spent["env"] += time.perf_counter() - t

            env.astep = timed
            gen, _ = _scripted(tasks[ti], stage, f"b{rollout}")
            await run_row_episode(env, stage, chat, gen, {}, 32768, stage1="gold")

    t = time.perf_counter()
    asyncio.run(run_all())
    spent["total"] = time.perf_counter() - t
    return spent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--rollouts", type=int, default=8)
    ap.add_argument("--steps", type=int, default=12, help="GRPO steps; the first ones include the JVM's JIT warm-up")
    ap.add_argument(
        "--workers",
        type=int,
        default=2,
        help="agent-loop worker processes (verl runs several; default: one per core of this 2-core machine)",
    )
    ap.add_argument(
        "--concurrency",
        type=int,
        default=1,
        help="trajectories in flight per worker (the scripted policy answers at once, so there is no "
        "generation latency to overlap; more only adds thread contention: 32 costs ~35%% more CPU)",
    )
    ap.add_argument("--extra-calls", type=int, default=7, help="searches before the gold path, per stage")
    ap.add_argument("--index-dir", default=None)
    ap.add_argument(
        "--breakdown",
        action="store_true",
        help="also run one step sequentially in one worker and split its time: environment vs token work",
    )
    args = ap.parse_args()

    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    ready = ctx.Queue()
    t0 = time.perf_counter()
    with ctx.Pool(args.workers, initializer=_setup, initargs=(args, ready)) as pool:
        n_tasks = [ready.get(timeout=900) for _ in range(args.workers)][0]
        print(
            f"setup {time.perf_counter() - t0:.1f} s: {args.workers} worker(s), {n_tasks} tasks, index and memory ready"
        )
        rows = [(ti, s) for ti in range(n_tasks) for s in (1, 2)][: args.prompts]
        jobs = [(ti, s, r) for ti, s in rows for r in range(args.rollouts)]
        shares = [jobs[w :: args.workers] for w in range(args.workers)]
        walls, cpus = [], []
        for k in range(args.steps):
            t = time.perf_counter()
            parts = pool.map(_run_share, [(k, sh) for sh in shares], chunksize=1)
            wall = time.perf_counter() - t
            out = [o for _, _, share in parts for o in share]
            cpu = sum(p[1] for p in parts)
            walls.append(wall)
            cpus.append(cpu)
            print(
                f"step {k}: {len(out)} trajectories in {wall:.2f} s wall, {cpu:.2f} CPU s over all threads of the "
                f"workers "
                f"(env summed over trajectories {sum(o[0] for o in out):.1f} s, scripted policy {sum(o[3] for o in out):.2f} s), "
                f"tool calls per trained trajectory median {statistics.median(o[1] for o in out)}, "
                f"mean R_tool {statistics.mean(o[2] for o in out):.3f}"
            )
        if args.breakdown:
            b = pool.apply(_breakdown, (jobs,))
            other = b["total"] - b["env"] - b["render"] - b["encode"] - b["decode"]
            print(
                f"sequential breakdown of one step ({len(jobs)} trajectories, one worker): total {b['total']:.2f} s = "
                f"environment {b['env']:.2f} s (tools, parsing, simulator, judge, rubric) + token work "
                f"{b['render'] + b['encode'] + b['decode']:.2f} s (render {b['render']:.2f}, encode {b['encode']:.2f}, "
                f"decode {b['decode']:.2f}; {b['token_cpu']:.2f} CPU s of the worker's thread) + other {other:.2f} s "
                "(scripted policy, bookkeeping)"
            )
    later = walls[1:] or walls
    print(
        f"median environment wall time per GRPO step ({len(rows)} prompts x {args.rollouts} rollouts, "
        f"{args.workers} worker process(es)): {statistics.median(walls):.2f} s over all {len(walls)} steps, "
        f"{statistics.median(later):.2f} s without step 0 (the JVM's first queries) (target <= 2 s); "
        f"median CPU {statistics.median(cpus):.2f} s per step = {statistics.median(cpus) / args.workers:.2f} s of wall "
        f"on {args.workers} otherwise idle core(s)"
    )


if __name__ == "__main__":
    main()
