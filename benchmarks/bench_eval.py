"""Benchmark the evaluation runner: episodes in flight sustained against the local scripted
OpenAI-compatible server (tests/openai_server.py) with an artificial per-request latency.

Each level runs ``run_evaluation`` with ``concurrency=c`` over real tasks (template synthesis from the
real catalog and SGD conversations), the real environment, product index (Lucene BM25), memory
stores (MiniLM, cache-backed), rule judge and rewards. The "model" is the deterministic scripted
policy of tests/scripted_policy.py served over HTTP on 127.0.0.1; the server sleeps ``--latency-ms``
in each request (a stand-in for generation time) and counts requests being served.

Measured per run (window = the middle 80 % of the run's wall time, dropping ramp-up and drain):
- episodes in flight: time-weighted mean of (episodes started − finished) over the window;
- requests in flight at the server: time-weighted mean over the window;
- throughput: episodes/s and requests/s over the whole run; request latency p50/p95 as seen by
  the client (``Step.latency_s``).
Prints the median over ``--repeats`` runs per level. No asserts.

The test server is stdlib ``ThreadingHTTPServer`` (one connection per request); its default listen
backlog of 5 drops connections when more than a few clients connect at once, which a real server
(vLLM's uvicorn: 2048) does not. The benchmark raises it to ``--backlog`` (default 1024) and sends no
retries (``max_retries=0``), so any connection failure shows up as an episode error.

    python benchmarks/bench_eval.py [--concurrency 1,16,64,128] [--latency-ms 50] [--tasks 16]
                                    [--episodes-per-slot 3] [--min-episodes 24] [--repeats 3]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from shopping_companion.benchmark.evaluate import EvalSettings, run_evaluation  # noqa: E402
from shopping_companion.envs.env import EnvConfig  # noqa: E402
from shopping_companion.judges.rule import RuleJudge  # noqa: E402
from shopping_companion.llm.base import Sampling  # noqa: E402
from shopping_companion.llm.openai_backend import OpenAIBackend  # noqa: E402
from tests.openai_server import ScriptedOpenAIServer  # noqa: E402
from tests.scripted_policy import policy_script  # noqa: E402


class InFlight:
    """Step function of a counter over time: ``add(+1/-1)`` with timestamps."""

    def __init__(self) -> None:
        self.events: list[tuple[float, int]] = []
        self.lock = threading.Lock()

    def add(self, delta: int, t: float | None = None) -> None:
        with self.lock:
            self.events.append((time.monotonic() if t is None else t, delta))

    def mean(self, t0: float, t1: float) -> float:
        """Time-weighted mean level over [t0, t1]."""
        level, last, area = 0, t0, 0.0
        for t, d in sorted(self.events):
            if t > t0:
                seg_end = min(t, t1)
                if seg_end > last:
                    area += level * (seg_end - last)
                    last = seg_end
            level += d
            if t >= t1:
                break
        if t1 > last:
            area += level * (t1 - last)
        return area / (t1 - t0) if t1 > t0 else float("nan")


def setup(n_tasks: int, seed: int):
    from shopping_companion.benchmark.synth import SynthConfig, synthesize
    from shopping_companion.memory.loaders import load_sgd
    from shopping_companion.memory.store import MemoryStore
    from shopping_companion.pipeline import (
        SGD_RELPATH,
        catalog_file,
        load_catalog,
        make_embedder,
        open_product_search,
        prewarm_memory,
    )
    from shopping_companion.paths import resolve_data_dir

    t0 = time.perf_counter()
    search = open_product_search()
    products, _ = load_catalog(catalog_file())
    sessions = list(load_sgd(resolve_data_dir() / SGD_RELPATH))

    def searcher(q, k):
        return [h["product_id"] for h in search.search(q, top_k=k)]

    bench = synthesize(
        products,
        sessions,
        SynthConfig(addon_share=0.0, n_tasks=n_tasks, seed=seed, sessions_per_user=40),
        searcher=searcher,
    )
    embedder = make_embedder()
    prewarm_memory(bench.tasks, bench.sessions, embedder)
    stores: dict[str, MemoryStore] = {}
    lock = threading.Lock()

    def make_memory(task):  # one store per user, shared by that task's episodes (read-only)
        with lock:
            if task.task_id not in stores:
                stores[task.task_id] = MemoryStore.from_pool(bench.sessions, task.history, embedder)
            return stores[task.task_id]

    judge = RuleJudge(lambda ids: {p: search.get(p) for p in ids if search.get(p) is not None})
    print(
        f"setup: {len(bench.tasks)} tasks, index {len(search)} products ({time.perf_counter() - t0:.1f}s)", flush=True
    )
    return bench.tasks, search, make_memory, judge


def run_level(c: int, tasks, search, make_memory, judge, latency_s: float, n_episodes: int, max_turns: int) -> dict:
    server_inflight = InFlight()
    inner = policy_script(tasks)

    def script(body):
        server_inflight.add(+1)
        try:
            time.sleep(latency_s)
            return inner(body)
        finally:
            server_inflight.add(-1)

    trials = max(1, math.ceil(n_episodes / len(tasks)))
    episodes = InFlight()
    with tempfile.TemporaryDirectory() as d, ScriptedOpenAIServer(script) as srv:
        be = OpenAIBackend("scripted", base_url=srv.base_url, api_key="bench", timeout_s=120, max_retries=0)
        settings = EvalSettings(trials=trials, sampling=Sampling(seed=0), env=EnvConfig(max_turns=max_turns))
        t0 = time.monotonic()
        res = run_evaluation(
            tasks,
            be,
            search,
            make_memory,
            judge,
            Path(d) / "r.jsonl",
            settings,
            progress=False,
            concurrency=c,
            on_event=lambda ev, key, t: episodes.add(+1 if ev == "start" else -1, t),
        )
        t1 = time.monotonic()
        n_req = len(srv.chat_requests)
        be.close()
    wall = t1 - t0
    w0, w1 = t0 + 0.1 * wall, t1 - 0.1 * wall
    lat = sorted(s.latency_s for r in res for st in r.stages for s in st.trajectory.steps if s.latency_s is not None)
    return {
        "episodes": len(res),
        "errors": sum(1 for r in res if r.error),
        "wall_s": wall,
        "episodes_in_flight": episodes.mean(w0, w1),
        "requests_in_flight": server_inflight.mean(w0, w1),
        "episodes_per_s": len(res) / wall,
        "requests_per_s": n_req / wall,
        "latency_p50_ms": 1000 * lat[len(lat) // 2] if lat else float("nan"),
        "latency_p95_ms": 1000 * lat[int(0.95 * (len(lat) - 1))] if lat else float("nan"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--concurrency", default="1,16,64,128")
    ap.add_argument("--latency-ms", type=float, default=50.0)
    ap.add_argument("--tasks", type=int, default=16)
    ap.add_argument("--episodes-per-slot", type=int, default=3, help="episodes per level = max(min, this × c)")
    ap.add_argument("--min-episodes", type=int, default=24)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-turns", type=int, default=6)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--backlog", type=int, default=1024, help="listen backlog of the test server")
    a = ap.parse_args()
    import http.server

    http.server.ThreadingHTTPServer.request_queue_size = a.backlog
    levels = [int(x) for x in a.concurrency.split(",")]
    tasks, search, make_memory, judge = setup(a.tasks, a.seed)
    # warm-up (JIT of the JVM searcher, first MemoryStores, imports)
    run_level(4, tasks, search, make_memory, judge, a.latency_ms / 1000, len(tasks), a.max_turns)
    keys = [
        "episodes",
        "errors",
        "wall_s",
        "episodes_in_flight",
        "requests_in_flight",
        "episodes_per_s",
        "requests_per_s",
        "latency_p50_ms",
        "latency_p95_ms",
    ]
    print(f"latency {a.latency_ms:g} ms per request; medians over {a.repeats} run(s)")
    print("| concurrency | " + " | ".join(keys) + " |")
    print("|---|" + "---|" * len(keys))
    for c in levels:
        n = max(a.min_episodes, a.episodes_per_slot * c)
        runs = [
            run_level(c, tasks, search, make_memory, judge, a.latency_ms / 1000, n, a.max_turns)
            for _ in range(a.repeats)
        ]
        med = {k: statistics.median(r[k] for r in runs) for k in keys}
        print(
            f"| {c} | "
            + " | ".join(f"{med[k]:.2f}" if isinstance(med[k], float) else str(med[k]) for k in keys)
            + " |",
            flush=True,
        )


if __name__ == "__main__":
    main()
