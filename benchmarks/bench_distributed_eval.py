"""Benchmark distributed evaluation (``shopcomp eval --ray``): episode throughput with 1 and 2 Ray
episode workers, and the in-process runner for reference.

Setup: a private local Ray cluster (``--cpus`` CPUs, default 2), the benchmark at ``--bench``
(default ``runs/quickstart/bench``, written by ``shopcomp quickstart``), the scripted reference
policy (deterministic, rule-based), the rule judge, the paper's rewards, local tools. The driver
builds its kit once (tasks, run identity); each worker count starts its workers once
(:class:`~shopping_companion.benchmark.distributed.RayEpisodeExecutor`; they build their kits, not
timed), then runs the whole benchmark ``--repeats`` times into fresh results files through the real
runner (:func:`~shopping_companion.benchmark.evaluate.run_evaluation`: single writer, fsync per
line), after ``--warmup`` untimed runs (the JIT of the index, the caches). Throughput = episodes /
wall time of one run (the driver's CPU time per episode is printed too); printed: the median over the repeats per
setting and the ratio 2 workers / 1 worker. Every run is checked to have every episode without an
error and the same results (except wall times and latencies) as the first local run.

    .venv-rl/bin/python benchmarks/bench_distributed_eval.py [--bench DIR] [--limit N] [--trials 2]
        [--concurrency 4] [--repeats 3] [--cpus 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from shopping_companion.benchmark.evaluate import parse_strategies, run_evaluation  # noqa: E402
from shopping_companion.benchmark.report import result_key  # noqa: E402


def normalized(results) -> dict:
    out = {}
    for r in results:
        d = r.model_dump(mode="json")
        d.pop("wall_s")
        for st in d["stages"]:
            for s in st["trajectory"]["steps"]:
                s.pop("latency_s")
        out[result_key(r)] = d
    return dict(sorted(out.items()))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bench", type=Path, default=ROOT / "runs" / "quickstart" / "bench")
    ap.add_argument("--limit", type=int, default=None, help="first N tasks (default: all)")
    ap.add_argument("--trials", type=int, default=2)
    ap.add_argument("--strategies", default="two_stage:none")
    ap.add_argument("--concurrency", type=int, default=4, help="episodes in flight, all workers together")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1, help="untimed runs first, per setting (JIT, caches)")
    ap.add_argument("--cpus", type=int, default=2, help="CPUs of the private local Ray cluster")
    ap.add_argument("--workers", default="1,2", help="worker counts to measure")
    args = ap.parse_args(argv)
    if not (args.bench / "tasks.jsonl").is_file():
        ap.error(f"--bench {args.bench}: no benchmark there (run `shopcomp quickstart` first)")

    from rich.console import Console

    from shopping_companion.assembly.cluster import connect
    from shopping_companion.benchmark.distributed import RayEpisodeExecutor
    from shopping_companion.benchmark.kit import build_kit
    from shopping_companion.benchmark.run_config import EvalConfig

    scratch = Path(tempfile.mkdtemp(prefix="bench-dist-eval-"))
    cfg = EvalConfig.model_validate(
        {
            "bench": {"path": str(args.bench.resolve()), "limit": args.limit},
            "output": {"name": "bench", "runs_dir": str(scratch)},
            "trials": args.trials,
            "strategies": args.strategies.split(","),
            "concurrency": args.concurrency,
        }
    )
    quiet = Console(stderr=True, quiet=True)
    conn = connect("local", num_cpus=args.cpus)  # before the JVM starts in this process
    t = time.perf_counter()
    kit = build_kit(cfg, scratch / "driver", quiet)
    print(f"driver kit: {time.perf_counter() - t:.1f} s", flush=True)
    strats = parse_strategies(cfg.strategies)
    n_episodes = len(kit.resources.tasks) * args.trials * len(strats)
    reference: dict | None = None
    rows: dict[str, list[float]] = {}

    def measure(label: str, executor) -> None:
        nonlocal reference
        rates = []
        for i in range(-args.warmup, args.repeats):
            path = scratch / f"{label.replace(' ', '_')}-{i}.jsonl"
            t0, c0 = time.perf_counter(), time.process_time()
            res = run_evaluation(
                kit.resources.tasks,
                kit.policy,
                kit.resources.search,
                kit.memory(),
                kit.judge,
                path,
                kit.settings,
                progress=False,
                concurrency=args.concurrency,
                strategies=strats,
                identity=kit.identity,
                executor=executor,
            )
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            assert len(res) == n_episodes and all(r.error is None for r in res), label
            norm = normalized(res)
            reference = reference or norm
            assert norm == reference, f"{label}: results differ from the local run"
            what = "warm-up" if i < 0 else f"run {i}"
            print(
                f"  {label} {what}: {n_episodes} episodes in {wall:.2f} s = {n_episodes / wall:.2f} episodes/s "
                f"(driver CPU {1000 * cpu / n_episodes:.1f} ms/episode)",
                flush=True,
            )
            if i >= 0:
                rates.append(n_episodes / wall)
        rows[label] = rates

    try:
        measure("local (in-process)", None)
        for n in [int(x) for x in args.workers.split(",")]:
            ex = RayEpisodeExecutor(cfg, kit.identity, workers=n)
            t = time.perf_counter()
            ex.start()
            print(f"{n} worker(s) ready in {time.perf_counter() - t:.1f} s ({ex.describe()})", flush=True)
            try:
                measure(f"{n} worker(s)", ex)
            finally:
                ex.shutdown()
    finally:
        conn.close()

    print(
        f"\n{n_episodes} episodes per run ({len(kit.resources.tasks)} tasks x {args.trials} trials x "
        f"{len(strats)} strategies), concurrency {args.concurrency}, {args.repeats} runs, {args.cpus} CPUs"
    )
    med = {k: statistics.median(v) for k, v in rows.items()}
    for k, v in med.items():
        print(f"{k:>20}: median {v:.2f} episodes/s")
    one, two = med.get("1 worker(s)"), med.get("2 worker(s)")
    summary = {"episodes_per_run": n_episodes, "median_episodes_per_s": med}
    if one and two:
        summary["ratio_2_over_1"] = round(two / one, 3)
        print(f"ratio 2 workers / 1 worker: {two / one:.2f}")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
