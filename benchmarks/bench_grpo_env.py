"""Environment time per GRPO step (issue figure): 16 prompts × 8 rollouts = 128 trajectories,
each a full row episode of ~9 tool calls, with a scripted policy in place of the model, on CPU.

What is timed: everything :func:`~shopping_companion.trainers.episode.run_row_episode` does
outside generation — environment steps (tool calls on the real BM25 index and MiniLM memory,
parsing, the rule judge and the Eq. 12 rubric at stage ends, the user simulator), stage 1 played by
the gold policy for stage-2 rows, and the token work of the episode (chat-template rendering and
tokenisation of prompts and observations with a real tokenizer). The scripted policy answers with
the token ids of a gold-knowing agent that makes extra searches first; its own time is excluded (it is the
model's share). With ``--extra-calls 7`` (default) a trajectory makes 9 tool calls (7 searches + the
gold path's search/view). Trajectories run concurrently on one event loop (tools in worker threads), as in a
verl agent-loop worker.

    python benchmarks/bench_grpo_env.py [--prompts 16] [--rollouts 8] [--steps 3] [--concurrency 32]

Prints per step: wall seconds for the 128 trajectories, summed env seconds, tool calls per
trajectory; then the median over steps. Target (issue): <= 3 s of environment time per step on 2 cores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--rollouts", type=int, default=8)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--extra-calls", type=int, default=7, help="searches before the gold path, per stage")
    ap.add_argument("--index-dir", default=None)
    args = ap.parse_args()

    from transformers import AutoTokenizer

    from shopping_companion.catalog.loader import load_products
    from shopping_companion.envs.scripted import GoldPolicy
    from shopping_companion.envs.tools import MEMORY_TOOLS, PRODUCT_TOOLS, tool_schema
    from shopping_companion.memory.loaders import load_sgd
    from shopping_companion.paths import resolve_data_dir
    from shopping_companion.pipeline import make_embedder, open_product_search
    from shopping_companion.rewards.rubric import load_rubric
    from shopping_companion.trainers.episode import ChatTokens, Generation, run_row_episode
    from shopping_companion.trainers.resources import EnvResources
    from tests.env_support import EnvKit, make_single_tasks
    from tests.tiny_model import build_tiny_model

    data = resolve_data_dir()
    t0 = time.perf_counter()
    products, _ = load_products(data / "catalog" / "products.jsonl.gz")
    sgd = load_sgd(data / "conversations" / "sgd_dialogues.jsonl.gz")
    search = open_product_search(index_dir=args.index_dir)
    embedder = make_embedder()
    n_tasks = max(1, args.prompts // 2)
    tasks, pool = make_single_tasks(products, sgd, n=n_tasks, seed=3, haystack_size=40)
    kit = EnvKit(search, embedder, pool)
    res = EnvResources(tasks={t.task_id: t for t in tasks}, sessions=pool, products=search, embedder=embedder,
                       judge=kit.judge, reward_fn=load_rubric("paper", resources={"lookup": kit.lookup}))
    tokdir = build_tiny_model(Path(tempfile.mkdtemp()) / "tok")
    tok = AutoTokenizer.from_pretrained(tokdir)
    chat = ChatTokens(tok)
    for t in tasks:  # warm the memory stores (built once per user in a real worker too)
        res.memory(t)
    print(f"setup {time.perf_counter() - t0:.1f} s: {len(tasks)} tasks, index and memory ready")

    def scripted(task):
        """Gold-knowing agent with 3 extra searches per stage; returns a GenerateFn and a timer."""
        policy = GoldPolicy(task)
        spent = [0.0]

        async def generate(ids, sp):
            t = time.perf_counter()
            text = chat.decode(ids)
            stage_text = text[text.rfind("<|im_start|>system"):]
            turn = stage_text.count("<|im_start|>assistant") - 1
            mem = '"name": "mem_search"' in stage_text.split("</tools>")[0]
            if turn < args.extra_calls:
                q = ["what do I like", "my usual style", "things I avoid", "colours I wear", "fabric I prefer",
                     "my budget", "brands I trust", "what I bought before"][turn % 8] + f" {turn}"
                call = {"name": "mem_search", "arguments": {"queries": [q, task.instruction], "top_k": 10}} if mem else \
                    {"name": "product_search", "arguments": {"query": f"{task.slots[0].product_type} {q}", "top_k": 10}}
                reply = "<think>look around</think>\n<tool_call>" + json.dumps(call) + "</tool_call>"
            else:
                names = MEMORY_TOOLS if mem else PRODUCT_TOOLS
                reply = policy.chat([{"role": "assistant", "content": ""}] * (turn - args.extra_calls), [tool_schema(n) for n in names]).content
            out = Generation(tok.encode(reply, add_special_tokens=False) + [tok.eos_token_id])
            spent[0] += time.perf_counter() - t
            return out

        return generate, spent

    rows = [(t, s) for t in tasks for s in (1, 2)][: args.prompts]
    async def one(task, stage, sem):
        async with sem:
            gen, spent = scripted(task)
            env = res.make_env(task)
            t = time.perf_counter()
            ep = await run_row_episode(env, stage, chat, gen, {}, 32768, stage1="gold")
            wall = time.perf_counter() - t
            stage1_calls = 2 if stage == 2 else 0
            calls = sum(len(s.tool_calls) for r in env.results if r.trajectory.stage == stage for s in r.trajectory.steps)
            return wall - spent[0], calls, ep.reward.components.get("R_tool", 0.0), stage1_calls

    async def step():
        sem = asyncio.Semaphore(args.concurrency)  # bound to this step's event loop
        jobs = [one(t, s, sem) for t, s in rows for _ in range(args.rollouts)]
        t = time.perf_counter()
        out = await asyncio.gather(*jobs)
        return time.perf_counter() - t, out

    walls = []
    for k in range(args.steps):
        wall, out = asyncio.run(step())
        env_sum = sum(o[0] for o in out)
        calls = [o[1] for o in out]
        walls.append(wall)
        print(f"step {k}: {len(out)} trajectories in {wall:.2f} s wall (env summed over trajectories {env_sum:.1f} s), "
              f"tool calls per trained trajectory median {statistics.median(calls)}, "
              f"mean R_tool {statistics.mean(o[2] for o in out):.3f}")
    print(f"median environment wall time per GRPO step ({len(rows)} prompts x {args.rollouts} rollouts): "
          f"{statistics.median(walls):.2f} s")


if __name__ == "__main__":
    main()
