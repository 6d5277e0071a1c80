"""Benchmark ``shopcomp serve`` (docs/cluster.md): tool-call latency through the service versus in
process, ``mem_search`` throughput under concurrency with and without batching, and the RSS of a
rollout worker with local versus remote resources.

Setup: a private local Ray cluster (``--cpus``, default 2) runs the service (one replica per
deployment) over the benchmark ``--bench`` (default ``runs/quickstart/bench``, written by
``shopcomp quickstart``) and the catalog index (``--data-dir`` / ``--index-dir``; default: as
``shopcomp eval`` finds them). The client is the product's own
(:class:`~shopping_companion.serve.client.ServiceClient` behind
:class:`~shopping_companion.serve.remote.RemoteProducts` / ``RemoteMemory``) over loopback.

1. Latency: ``--calls`` sequential calls per tool (product_search, product_view, mem_search,
   mem_view) with varied arguments, after ``--warmup`` calls, once in process
   (``ProductSearch``, ``MemoryStore.from_pool``) and once through the service; printed: p50 and
   p99 in ms and the p50 overhead (service - in process; target <= 2 ms).
2. Throughput: ``--concurrency`` (64) concurrent single-query ``mem_search`` requests
   (``httpx.AsyncClient``), ``--rounds`` rounds, with batching on (the default settings) and off
   (``batch.enabled: false``, redeployed); printed: requests/s (median over rounds), the ratio,
   and the replica's batch counters.
3. RSS (``--rss``): a fresh subprocess builds what a GRPO rollout worker builds
   (:func:`~shopping_companion.trainers.resources.get_resources`) with ``tools=local`` and with
   ``tools=serve:URL``, then runs one product_search and one mem_search for each of ``--users``
   tasks; printed: its peak RSS (MiB; the JVM runs inside the process, so it is counted).

    .venv-rl/bin/python benchmarks/bench_serve.py [--bench DIR] [--index-dir DIR --data-dir DIR]
        [--perturbed-index DIR] [--calls 200] [--concurrency 64] [--rounds 5] [--rss] [--users 50]
        [--json OUT]

Measured (2 CPUs; full tables in docs/cluster.md "Figures"): ``--calls 200 --no-throughput`` on
the quickstart benchmark with no other job: p50 overhead through the direct endpoints 0.84-1.37 ms
(product_search 1.18, product_view 0.84, mem_search 1.37, mem_view 1.03; target <= 2 ms), through
Serve's proxy and ingress 14-20 ms. At the issue's scale, earlier, with the httpx client and test
jobs sharing the machine (load 0.2 -> 6.2): direct 2.7-10.7 ms, via Serve 25-88 ms; 64 concurrent
mem_search via the direct endpoint batched 150.1 vs unbatched 77.6 req/s (1.94), via Serve 30.0 vs
28.1 (1.07); peak RSS after 996 users local 2,519 MiB vs remote 165 MiB.

At the issue's scale: the 1.3M-product index of ``benchmarks/bench_product_search.py
--build-only 1.3m --work-dir W --threads 1`` (``--perturbed-index W/perturbed-1300000-s0``) and a
1,000-user memory bank (``shopcomp synth --config configs/benchmark/shopping_companion.yaml --out
B``; ``--bench B --users 1000``). The first run encodes every history window with MiniLM (about
70,000 windows for 1,000 users, cached on disk afterwards); budget an hour on 2 CPUs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))]


def _timed(fn, args_list, warmup: int) -> list[float]:
    for a in args_list[:warmup]:
        fn(*a)
    out = []
    for a in args_list:
        t0 = time.perf_counter()
        fn(*a)
        out.append((time.perf_counter() - t0) * 1000.0)
    return out


def _serve_cfg(args, port: int, batching: bool):
    from shopping_companion.serve.config import load_serve_config

    one = {"num_replicas": 1, "num_cpus": 0.1, "max_ongoing_requests": 128}
    return load_serve_config(
        {
            "benchmarks": {"bench": str(args.bench)},
            "data": {"data_dir": args.data_dir, "index_dir": args.index_dir},
            "port": port,
            "batch": {"enabled": batching},
            "deployments": {k: one for k in ("products", "memory", "scoring", "ingress")},
        }
    )


def _calls(bench, search, n: int):
    """Varied arguments per tool: queries from the tasks' preferences and product types."""
    tasks = bench.tasks
    words = [p.value for t in tasks for p in t.preferences] + [s.product_type for t in tasks for s in t.slots]
    words = [w for w in words if isinstance(w, str) and w.strip()] or ["shoes"]
    ps = [(words[i % len(words)],) for i in range(n)]
    ids = [h["product_id"] for w in words[:20] for h in search.search(w, top_k=5)] or ["x"]
    pv = [([ids[i % len(ids)], ids[(i * 7 + 3) % len(ids)]],) for i in range(n)]
    ms = [(tasks[i % len(tasks)], [words[(i * 3) % len(words)]]) for i in range(n)]
    return ps, pv, ms


def latency(args, url: str, bench, search, embedder) -> dict:
    """p50 / p99 of each tool in process, through the replicas' direct endpoints (the client's
    default) and through Ray Serve's proxy and ingress (``direct: false``)."""
    from shopping_companion.benchmark.run_config import ServiceConfig
    from shopping_companion.memory.store import MemoryStore
    from shopping_companion.serve.remote import connect

    paths = {
        p: connect(f"serve:{url}", ServiceConfig(direct=p == "direct"), benchmark_dir=args.bench, reward_spec="paper")
        for p in ("direct", "serve")
    }
    n = args.calls
    ps, pv, ms = _calls(bench, search, n)
    tasks = sorted({t.task_id: t for t, _ in ms}.values(), key=lambda t: t.task_id)
    local_mem = {t.task_id: MemoryStore.from_pool(bench.sessions, t.history, embedder) for t in tasks}
    remote_mem = {p: {t.task_id: svc.memory(t) for t in tasks} for p, svc in paths.items()}
    for t in tasks:  # the service builds each store on first use: not timed
        remote_mem["serve"][t.task_id].search(["warm up"], top_k=3)
    mv = [(t, local_mem[t.task_id].session_ids[:2]) for t, _ in ms]

    def fns(p: str) -> dict:
        svc, mem = paths[p], remote_mem[p]
        return {
            "product_search": lambda q: svc.products.search(q, top_k=10),
            "product_view": svc.products.view,
            "mem_search": lambda t, q: mem[t.task_id].search(q, top_k=10),
            "mem_view": lambda t, s: mem[t.task_id].view(s),
        }

    local = {
        "product_search": (lambda q: search.search(q, top_k=10), ps),
        "product_view": (search.view, pv),
        "mem_search": (lambda t, q: local_mem[t.task_id].search(q, top_k=10), ms),
        "mem_view": (lambda t, s: local_mem[t.task_id].view(s), mv),
    }
    remote = {p: fns(p) for p in paths}
    out = {}
    for name, (local_fn, arglist) in local.items():
        lo = _timed(local_fn, arglist, args.warmup)
        f = {"local_p50_ms": statistics.median(lo), "local_p99_ms": _pct(lo, 0.99)}
        for p in paths:
            xs = _timed(remote[p][name], arglist, args.warmup)
            f[f"{p}_p50_ms"] = statistics.median(xs)
            f[f"{p}_p99_ms"] = _pct(xs, 0.99)
            f[f"{p}_overhead_p50_ms"] = statistics.median(xs) - f["local_p50_ms"]
        out[name] = f
    direct_calls = paths["direct"].client.direct_requests
    for svc in paths.values():
        svc.close()
    out["_direct_requests"] = direct_calls
    return out


def direct_url(url: str, deployment: str) -> str:
    """The first direct endpoint of ``deployment`` the service at ``url`` lists."""
    import httpx

    eps = httpx.get(f"{url}/v1/endpoints", timeout=30).json()["endpoints"]
    return next(e["url"] for e in eps if e["deployment"] == deployment)


def throughput(args, url: str, bench) -> dict:
    """``mem_search`` requests/s with ``--concurrency`` requests in flight, sent to ``url``
    (the service, or a MemoryTools replica's direct endpoint)."""
    import httpx

    task = bench.tasks[0]
    words = [p.value for t in bench.tasks for p in t.preferences if isinstance(p.value, str)] or ["shoes"]
    bodies = [
        {"benchmark": "bench", "task_id": task.task_id, "queries": [f"{words[i % len(words)]} {i}"], "top_k": 10}
        for i in range(args.concurrency)
    ]

    async def one_round(c) -> float:
        t0 = time.perf_counter()
        rs = await asyncio.gather(*(c.post("/mem_search", json=b) for b in bodies))
        dt = time.perf_counter() - t0
        assert all(r.status_code == 200 for r in rs), [r.text for r in rs if r.status_code != 200][:1]
        return len(bodies) / dt

    async def run() -> list[float]:
        limits = httpx.Limits(max_connections=args.concurrency, max_keepalive_connections=args.concurrency)
        async with httpx.AsyncClient(base_url=url + "/v1", timeout=120, limits=limits) as c:
            await c.post("/mem_search", json=bodies[0])  # the store is built
            await one_round(c)  # warm-up round
            return [await one_round(c) for _ in range(args.rounds)]

    return {"rps": asyncio.run(run())}


def _rss_child(spec_json: str, users: int) -> None:
    """Build a rollout worker's resources, touch ``users`` tasks, print peak RSS (MiB)."""
    from shopping_companion.trainers.resources import ResourceSpec, get_resources

    spec = ResourceSpec(**json.loads(spec_json))
    res = get_resources(spec)
    tasks = list(res.tasks.values())[:users]
    for t in tasks:
        res.products.search(t.slots[0].product_type or "shoes", top_k=10)
        res.memory(t).search([p.value for p in t.preferences][:1] or ["price"], top_k=10)
    status = dict(
        line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line
    )  # VmHWM: this process image's peak (ru_maxrss would include the forking parent's)
    mib = {k: int(status[k].split()[0]) / 1024 for k in ("VmHWM", "VmRSS")}
    print(json.dumps({"peak_rss_mib": mib["VmHWM"], "rss_mib": mib["VmRSS"], "tasks": len(tasks)}))


def rss(args, url: str) -> dict:
    out = {}
    for tools in ("local", f"serve:{url}"):
        spec = {"benchmark": str(args.bench), "data_dir": args.data_dir, "index_dir": args.index_dir, "tools": tools}
        r = subprocess.run(
            [sys.executable, __file__, "--_rss-child", json.dumps(spec), "--users", str(args.users)],
            capture_output=True,
            text=True,
            env={**os.environ},
        )
        if r.returncode != 0:
            raise RuntimeError(f"rss child ({tools}) failed: {r.stderr[-2000:]}")
        out["local" if tools == "local" else "remote"] = json.loads(r.stdout.strip().splitlines()[-1])
    return out


def _stamped_copy(perturbed: Path, data_dir: str | None) -> Path:
    """A hard-linked copy of a perturbed index (``bench_product_search.py``) stamped as the catalog's.

    The 1.3M-product index of ``benchmarks/bench_product_search.py --build-only 1.3m`` holds every
    real product plus perturbed clones, so the tasks' products are all in it; its manifest names
    the perturbed catalog, which the tools (rightly) refuse to open as the real one. The copy
    (``<perturbed>.as-catalog``; files hard-linked, nothing rewritten but ``manifest.json``)
    carries the real catalog's hash and path, so the service and the rollout worker open it
    through the product's normal path.
    """
    from shopping_companion.catalog.index import read_manifest, write_manifest
    from shopping_companion.catalog.sources import resolve_format, source_hash
    from shopping_companion.pipeline import resolve_sources

    src = resolve_sources(data_dir)
    m = read_manifest(perturbed)
    if m is None:
        raise SystemExit(f"--perturbed-index {perturbed}: no manifest.json (build it with bench_product_search.py)")
    out = perturbed.with_name(perturbed.name + ".as-catalog")
    out.mkdir(exist_ok=True)
    for f in perturbed.iterdir():
        if f.is_file() and f.name != "manifest.json" and not (out / f.name).exists():
            os.link(f, out / f.name)
    fmt = resolve_format(src.catalog_path, src.catalog_format or "auto", None)
    m = m.model_copy(
        update={
            "catalog_hash": source_hash(src.catalog_path, fmt, None, src.category),
            "catalog_path": str(src.catalog_path),
            "source_format": fmt,
        }
    )
    write_manifest(out, m)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bench", type=Path, default=ROOT / "runs" / "quickstart" / "bench")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--index-dir", default=None)
    ap.add_argument(
        "--perturbed-index",
        type=Path,
        default=None,
        help="the 1.3M-product index of bench_product_search.py (used through a re-stamped hard-linked copy)",
    )
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--cpus", type=int, default=2)
    ap.add_argument("--rss", action="store_true", help="also measure a rollout worker's RSS, local vs remote")
    ap.add_argument("--no-throughput", action="store_true", help="skip the concurrent mem_search phase")
    ap.add_argument("--users", type=int, default=50, help="tasks a rollout worker touches (--rss)")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--_rss-child", dest="rss_child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.rss_child:
        _rss_child(args.rss_child, args.users)
        return 0
    args.bench = args.bench.resolve()
    if args.perturbed_index:
        args.index_dir = str(_stamped_copy(args.perturbed_index.resolve(), args.data_dir))

    from shopping_companion.assembly.cluster import connect
    from shopping_companion.benchmark.synth import load_benchmark
    from shopping_companion.pipeline import make_embedder, open_product_search, resolve_sources
    from shopping_companion.serve.app import deploy, shutdown

    bench = load_benchmark(args.bench)
    conn = connect("local", num_cpus=args.cpus)  # before the JVM starts in this process
    search = open_product_search(index_dir=args.index_dir, sources=resolve_sources(args.data_dir))
    embedder = make_embedder()
    figures: dict = {"load_avg_start": os.getloadavg()[0]}
    try:
        port = _free_port()
        from ray import serve

        def stats() -> dict:
            return serve.get_deployment_handle("MemoryTools", app_name="shopcomp").stats.remote().result()

        def delta(a: dict, b: dict) -> dict:
            return {"requests": b["requests"] - a["requests"], "batches": b["batches"] - a["batches"]}

        d = deploy(_serve_cfg(args, port, batching=True))
        figures["latency"] = latency(args, d.url, bench, search, embedder)
        if not args.no_throughput:
            for path, target in (("serve", d.url), ("direct", direct_url(d.url, "MemoryTools"))):
                s0 = stats()
                figures[f"batched_{path}"] = throughput(args, target, bench)
                figures[f"batched_{path}"]["stats"] = {**delta(s0, stats()), "max_batch": stats()["max_batch"]}
        if args.rss:
            figures["rss"] = rss(args, d.url)
        shutdown(serve_too=False)
        if not args.no_throughput:
            d = deploy(_serve_cfg(args, port, batching=False))
            for path, target in (("serve", d.url), ("direct", direct_url(d.url, "MemoryTools"))):
                figures[f"unbatched_{path}"] = throughput(args, target, bench)
        shutdown()
    finally:
        conn.close()
    figures["load_avg_end"] = os.getloadavg()[0]

    print(f"\ntool-call latency, {args.calls} sequential calls per tool (ms; overhead = p50 - in-process p50)")
    print(
        f"{'tool':15} {'local p50/p99':>14} {'direct p50/p99':>15} {'overhead':>9} {'serve p50/p99':>15} {'overhead':>9}"
    )
    for name, f in figures["latency"].items():
        if name.startswith("_"):
            continue
        print(
            f"{name:15} {f['local_p50_ms']:6.2f}/{f['local_p99_ms']:7.2f} "
            f"{f['direct_p50_ms']:6.2f}/{f['direct_p99_ms']:8.2f} {f['direct_overhead_p50_ms']:9.2f} "
            f"{f['serve_p50_ms']:6.2f}/{f['serve_p99_ms']:8.2f} {f['serve_overhead_p50_ms']:9.2f}"
        )
    print(f"  (calls sent to a direct endpoint: {figures['latency']['_direct_requests']})")
    if not args.no_throughput:
        for path in ("serve", "direct"):
            b = statistics.median(figures[f"batched_{path}"]["rps"])
            u = statistics.median(figures[f"unbatched_{path}"]["rps"])
            st = figures[f"batched_{path}"]["stats"]
            print(
                f"\nmem_search via {path}, {args.concurrency} concurrent requests: batched {b:.1f} req/s, "
                f"unbatched {u:.1f} req/s, ratio {b / u:.2f}"
            )
            print(
                f"  batching counters: {st['requests']} requests in {st['batches']} encoder calls "
                f"(largest batch so far {st['max_batch']})"
            )
    if "rss" in figures:
        r = figures["rss"]
        print(
            f"\nrollout worker peak RSS ({r['local']['tasks']} tasks touched): local {r['local']['peak_rss_mib']:.0f} MiB, "
            f"remote {r['remote']['peak_rss_mib']:.0f} MiB"
        )
    print(f"load average {figures['load_avg_start']:.1f} -> {figures['load_avg_end']:.1f}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
