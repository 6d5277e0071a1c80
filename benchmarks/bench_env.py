"""Environment overhead per step, excluding the model (docs/architecture.md, the environment, issue figure "environment
overhead per step").

Runs full episodes of scripted policies (the rule-based reference policy and the gold-knowing
scripted policy) through :class:`ShoppingCompanionEnv` on tasks synthesised from the real catalog
and real conversations, and times every ``env.step`` — the policy's ``chat`` is called outside
the timed region, so the numbers are tools + parsing + rewards + judge + bookkeeping only.

Per step it separates: tool execution (``ToolBox.execute``, per tool: ``mem_search`` includes the
MiniLM query encoding; ``product_search`` / ``product_view`` the Lucene work), the judge and the
reward at stage ends, action parsing (``parse_action`` re-timed on the same text), and the rest
("env logic": message bookkeeping, validation, truncation, simulator).

Episodes run ``--reps`` times. ``mem_search`` calls are reported apart when their queries had to
be encoded by MiniLM (cold: an embedding-cache miss) and when they hit the cache (warm). Modes:
two_stage (hint none and high), one_stage, oracle.

    python benchmarks/bench_env.py [--tasks 8] [--reps 2] [--seed 0] [--index-dir DIR]

Prints medians (and p90) in milliseconds; no asserts.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict
from typing import Any

from shopping_companion.benchmark.synth import SynthConfig, synthesize
from shopping_companion.catalog.loader import load_products
from shopping_companion.envs.env import EnvConfig, ShoppingCompanionEnv
from shopping_companion.envs.parsing import parse_action
from shopping_companion.envs.scripted import GoldPolicy
from shopping_companion.envs.tools import ToolBox
from shopping_companion.judges.rule import RuleJudge
from shopping_companion.llm.reference import ReferencePolicy, build_attribute_vocabulary
from shopping_companion.memory.loaders import load_sgd
from shopping_companion.memory.store import MemoryStore
from shopping_companion.paths import resolve_data_dir
from shopping_companion.pipeline import make_embedder, open_product_search
from shopping_companion.rewards import compute_reward

MODES = [("two_stage", "none"), ("two_stage", "high"), ("one_stage", "none"), ("oracle", "none")]


class Timed:
    """Accumulates wall time per label for the current step."""

    def __init__(self) -> None:
        self.current: dict[str, float] = defaultdict(float)
        self.calls: list[tuple[str, float, int]] = []  # (tool, ms, rep)
        self.rep = 0

    def add(self, label: str, dt: float) -> None:
        self.current[label] += dt

    def take(self) -> dict[str, float]:
        out, self.current = dict(self.current), defaultdict(float)
        return out


def _misses(embedder: Any) -> int:
    st = getattr(embedder, "stats", None)
    return int(getattr(st, "misses", 0) + getattr(st, "query_misses", 0))


class TimedToolBox(ToolBox):
    """Times ``execute``; a ``mem_search`` is labelled cold when its queries had to be encoded
    (an embedding-cache miss) and warm otherwise."""

    def __init__(self, timer: Timed, embedder: Any, *a: Any, **k: Any) -> None:
        super().__init__(*a, **k)
        self.timer = timer
        self.embedder = embedder

    def execute(self, call, allowed, max_chars=None):
        m0 = _misses(self.embedder)
        t0 = time.perf_counter()
        try:
            return super().execute(call, allowed, max_chars)
        finally:
            dt = time.perf_counter() - t0
            self.timer.add("tools", dt)
            if call.name in allowed:
                name = call.name
                if name == "mem_search":
                    name += " (cold)" if _misses(self.embedder) > m0 else " (warm)"
                self.timer.calls.append((name, dt * 1e3, self.timer.rep))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=8)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--index-dir", default=None)
    args = ap.parse_args()

    t0 = time.perf_counter()
    data = resolve_data_dir()
    search = open_product_search(data, args.index_dir)
    products, _ = load_products(data / "catalog" / "products.jsonl.gz")
    sgd = load_sgd(data / "conversations" / "sgd_dialogues.jsonl.gz")
    embedder = make_embedder()

    def searcher(q: str, k: int) -> list[str]:
        return [h["product_id"] for h in search.search(q, top_k=k)]

    bench = synthesize(
        products,
        sgd,
        SynthConfig(addon_share=0.0, n_tasks=args.tasks, seed=args.seed, sessions_per_user=40),
        searcher=searcher,
    )
    reference = ReferencePolicy(build_attribute_vocabulary(products))
    memories = {t.task_id: MemoryStore.from_pool(bench.sessions, t.history, embedder) for t in bench.tasks}
    print(f"setup (index, catalog, {len(bench.tasks)} tasks, memory stores): {time.perf_counter() - t0:.1f} s")

    timer = Timed()
    judge_inner = RuleJudge(lambda ids: {p: search.get(p) for p in ids if search.get(p) is not None})

    class TimedJudge:
        name = "rule"

        def judge(self, task, traj):
            s = time.perf_counter()
            try:
                return judge_inner.judge(task, traj)
            finally:
                timer.add("judge", time.perf_counter() - s)

    def timed_reward(task, traj, verdict):
        s = time.perf_counter()
        try:
            return compute_reward(task, traj, verdict)
        finally:
            timer.add("reward", time.perf_counter() - s)

    rows: list[dict[str, Any]] = []  # one per step
    n_episodes = 0
    for rep in range(args.reps):
        timer.rep = rep
        for task in bench.tasks:
            for mode, hint in MODES:
                for policy in (reference, GoldPolicy(task)):
                    if policy is reference and mode != "two_stage":
                        continue  # the reference policy implements the two-stage protocol only
                    tools = TimedToolBox(timer, embedder, search, memories[task.task_id])
                    env = ShoppingCompanionEnv(
                        task, tools, TimedJudge(), EnvConfig(mode=mode, hint=hint), reward_fn=timed_reward
                    )
                    env.reset()
                    n_episodes += 1
                    while not env.done:
                        msg = policy.chat(env.messages, env.tool_schemas)  # the model: not timed
                        timer.take()
                        s = time.perf_counter()
                        out = env.step(msg)
                        total = time.perf_counter() - s
                        parts = timer.take()
                        s = time.perf_counter()
                        parse_action(msg.content)
                        parse_t = time.perf_counter() - s
                        rows.append(
                            {
                                "rep": rep,
                                "mode": mode,
                                "total": total,
                                "parse": parse_t,
                                "tools": parts.get("tools", 0.0),
                                "judge": parts.get("judge", 0.0),
                                "reward": parts.get("reward", 0.0),
                                "end": bool(out.info.get("stage_done")),
                            }
                        )

    def ms(xs: list[float]) -> str:
        if not xs:
            return "n=0"
        xs = sorted(xs)
        p90 = xs[min(len(xs) - 1, int(0.9 * len(xs)))]
        return f"median {statistics.median(xs) * 1e3:8.3f} ms   p90 {p90 * 1e3:8.3f} ms   n={len(xs)}"

    print(f"\n{n_episodes} episodes, {len(rows)} steps (model time excluded)\n")
    print("per tool call (ToolBox.execute, all repetitions; mem_search split by query-embedding cache):")
    for tool in ("mem_search (cold)", "mem_search (warm)", "mem_view", "product_search", "product_view"):
        xs = [c[1] / 1e3 for c in timer.calls if c[0] == tool]
        print(f"  {tool:18s} {ms(xs)}")
    print("\nper step:")
    tool_steps = [r for r in rows if not r["end"]]
    end_steps = [r for r in rows if r["end"]]
    print(f"  all steps                      {ms([r['total'] for r in rows])}")
    print(f"  tool steps                     {ms([r['total'] for r in tool_steps])}")
    print(f"  stage-ending steps             {ms([r['total'] for r in end_steps])}")
    print(f"  parse_action                   {ms([r['parse'] for r in rows])}")
    print(f"  judge (stage ends)             {ms([r['judge'] for r in end_steps])}")
    print(f"  reward Eq. 12 (stage ends)     {ms([r['reward'] for r in end_steps])}")
    rest = [r["total"] - r["tools"] - r["judge"] - r["reward"] for r in rows]
    print(f"  env logic (step - tools - judge - reward) {ms(rest)}")
    warm = [r for r in rows if r["rep"] == args.reps - 1]
    print(f"  all steps, last rep (warm caches)         {ms([r['total'] for r in warm])}")
    print("\nper mode, all steps (last rep):")
    for mode in ("two_stage", "one_stage", "oracle"):
        print(f"  {mode:10s} {ms([r['total'] for r in warm if r['mode'] == mode])}")


if __name__ == "__main__":
    main()
