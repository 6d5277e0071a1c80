"""`shopcomp view` at scale: page latency and server memory over a 10,000-episode run.

Writes a synthetic eval run (benchmarks/viewer_synth.py: ``--episodes`` realistic EpisodeResult
lines, about 100 kB each, so 10,000 episodes are about 1 GB, plus its benchmark) and a run of one
large episode (``--large-turns`` turns per stage, several MB), starts the real ``shopcomp view``
server on them (a child process on 127.0.0.1, port 0: the free port it prints), and measures:

- startup: seconds from spawning the server until it answers ``/healthz`` (imports, run discovery,
  the runs' summaries), and until the first episodes page of the 10k run was served (its index
  built, however lazily the store builds it): the time to index;
- per page, the median over ``--repeats`` GETs (after one warm-up GET whose time is reported as
  ``cold``): TTFB (request sent until the first body byte arrived) and full load (until the body is
  read), in ms, and the body size. Pages: the runs page, the episodes page of the 10k run (first
  page; filtered: failed only + add-on tasks + a text search; sorted by Acc descending; a deep page
  near the end), one ordinary episode page and the large episode's page;
- the server's RSS after indexing (after startup) and after every page was served, and its peak
  (VmHWM), in MB (psutil when installed, else /proc/<pid>/status).

Prints medians and the ratios filtered/first, deep/first and full load/TTFB. ``--check`` exits 1
when the median TTFB of an episodes page of the 10k run is above 500 ms or the server's RSS is above
1.5 GB (the targets in docs/viewer.md). ``--out FILE`` writes everything as JSON.

The synthetic runs are kept in ``--work-dir`` (default: a directory under the system temp dir
named after the settings) and reused when the settings match, so reruns start in seconds.

    python benchmarks/bench_viewer.py [--episodes 10000] [--turns 10] [--result-chars 1500]
        [--large-turns 200] [--repeats 7] [--work-dir DIR] [--check] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.viewer_synth import _GENERATOR, write_large_episode, write_synthetic_run  # noqa: E402

#: --check targets (docs/viewer.md, "Figures").
TARGET_TTFB_MS = 500.0
TARGET_RSS_MB = 1536.0
URL = re.compile(r"http://[^\s/]+:\d+/")


def rss_mb(pid: int) -> tuple[float, float]:
    """``(RSS, peak RSS)`` of process ``pid`` in MB (2^20 bytes): RSS from psutil when installed,
    else ``/proc/<pid>/status`` VmRSS; the peak is VmHWM (the RSS when /proc has none). Raises
    ProcessLookupError (or psutil.NoSuchProcess) when the process is gone."""
    fields: dict[str, float] = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                fields[key] = int(value.split()[0]) / 1024  # kB -> MB
    except FileNotFoundError:
        pass
    try:
        import psutil
    except ImportError:
        if "VmRSS" not in fields:
            raise ProcessLookupError(pid) from None
        rss = fields["VmRSS"]
    else:
        rss = psutil.Process(pid).memory_info().rss / 2**20
    return rss, fields.get("VmHWM", rss)


def prepare(args: argparse.Namespace) -> tuple[Path, dict[str, Any]]:
    """The runs directory holding ``big/`` (the N-episode run) and ``large/`` (one large episode),
    written once per setting; returns it and the settings with the file sizes."""
    settings = {
        "generator": _GENERATOR,
        "episodes": args.episodes,
        "turns": args.turns,
        "result_chars": args.result_chars,
        "large_turns": args.large_turns,
        "seed": args.seed,
    }
    tag = "-".join(str(settings[k]) for k in ("episodes", "turns", "result_chars", "large_turns", "seed"))
    work = args.work_dir or Path(tempfile.gettempdir()) / f"bench-viewer-{tag}"
    runs = work / "runs"
    stamp = work / "settings.json"
    if stamp.is_file() and json.loads(stamp.read_text()).get("settings") == settings:
        sizes = json.loads(stamp.read_text())["sizes"]
        print(f"reusing the synthetic runs in {runs}")
        return runs, {**settings, **sizes, "generate_s": None}
    stamp.unlink(missing_ok=True)
    t0 = time.perf_counter()
    print(f"writing {args.episodes} synthetic episodes to {runs / 'big'} ...", flush=True)
    big = write_synthetic_run(
        runs / "big",
        args.episodes,
        seed=args.seed,
        turns=args.turns,
        result_chars=args.result_chars,
        trials=2,
        strategies=("two_stage:none", "two_stage:high"),
        bench_dir=work / "bench",
    )
    large = write_large_episode(runs / "large", seed=args.seed, turns=args.large_turns, bench_dir=work / "bench-large")
    gen_s = time.perf_counter() - t0
    sizes = {"big_mb": big.bytes / 2**20, "large_mb": large.bytes / 2**20}
    stamp.write_text(json.dumps({"settings": settings, "sizes": sizes}, indent=2))
    return runs, {**settings, **sizes, "generate_s": gen_s}


class ViewServer:
    """``shopcomp view RUNS --port 0`` as a child process; ``base``: its URL; ``startup_s``: spawn
    until ``/healthz`` answered."""

    def __init__(self, runs: Path, timeout_s: float) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.t0 = t0 = time.perf_counter()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "shopping_companion.cli", "view", str(runs), "--port", "0"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.output: list[str] = []
        found = threading.Event()

        def drain() -> None:
            for line in self.proc.stdout:
                self.output.append(line)
                if URL.search(line):
                    found.set()

        threading.Thread(target=drain, daemon=True).start()
        deadline = time.monotonic() + timeout_s
        while not found.is_set() and self.proc.poll() is None and time.monotonic() < deadline:
            found.wait(0.05)
        if not found.is_set():
            self.stop()
            raise RuntimeError("shopcomp view did not print its URL; output:\n" + "".join(self.output)[-3000:])
        self.base = next(URL.search(x).group(0) for x in self.output if URL.search(x))
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.base + "healthz", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.05)
        self.startup_s = time.perf_counter() - t0

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def fetch(client: httpx.Client, url: str) -> tuple[float, float, int, int]:
    """One GET: ``(ttfb_ms, full_ms, status, body_bytes)``; TTFB is the time until the first body
    chunk arrived (the server renders a page before sending it, so it is the render time)."""
    t0 = time.perf_counter()
    ttfb = None
    n = 0
    with client.stream("GET", url) as r:
        for chunk in r.iter_raw():
            if ttfb is None:
                ttfb = time.perf_counter() - t0
            n += len(chunk)
    full = time.perf_counter() - t0
    return 1000 * (ttfb if ttfb is not None else full), 1000 * full, r.status_code, n


def measure(client: httpx.Client, base: str, pages: dict[str, str], repeats: int) -> dict[str, dict[str, float]]:
    """Per page: ``cold_ms`` (first GET, full load), median ``ttfb_ms`` / ``full_ms`` over ``repeats``
    GETs, ``kb`` (body size). Raises RuntimeError for a page that does not answer 200."""
    out = {}
    for name, path in pages.items():
        _, cold, status, size = fetch(client, base + path)
        if status != 200:
            raise RuntimeError(f"{path}: HTTP {status}")
        ttfbs, fulls = [], []
        for _ in range(repeats):
            t, f, _, _ = fetch(client, base + path)
            ttfbs.append(t)
            fulls.append(f)
        out[name] = {
            "path": path,
            "cold_ms": cold,
            "ttfb_ms": statistics.median(ttfbs),
            "full_ms": statistics.median(fulls),
            "kb": size / 1024,
        }
        print(
            f"  {name:<18} ttfb {out[name]['ttfb_ms']:8.1f} ms   full {out[name]['full_ms']:8.1f} ms   "
            f"cold {cold:8.1f} ms   {size / 1024:8.1f} kB",
            flush=True,
        )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=10_000, help="episodes of the big run (>= 100)")
    ap.add_argument("--turns", type=int, default=10, help="assistant turns per stage of each episode")
    ap.add_argument("--result-chars", type=int, default=1500, help="approximate size of each tool result")
    ap.add_argument("--large-turns", type=int, default=200, help="turns per stage of the large episode")
    ap.add_argument("--repeats", type=int, default=7, help="timed GETs per page (median)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work-dir", type=Path, default=None, help="where the synthetic runs are kept")
    ap.add_argument("--startup-timeout-s", type=float, default=900.0)
    ap.add_argument("--classify-timeout-s", type=float, default=900.0, help="longest wait for the background taxonomy")
    ap.add_argument("--check", action="store_true", help="exit 1 when a target of docs/viewer.md is missed")
    ap.add_argument("--out", "--json", dest="out", type=Path, default=None, help="write the figures as JSON here")
    args = ap.parse_args(argv)
    if args.episodes < 100 or args.repeats < 1:
        ap.error("--episodes must be >= 100 and --repeats >= 1")

    runs, settings = prepare(args)
    print(f"big run: {settings['big_mb']:.0f} MB, large episode: {settings['large_mb']:.1f} MB", flush=True)
    server = ViewServer(runs, args.startup_timeout_s)
    try:
        rss_indexed, _ = rss_mb(server.proc.pid)
        print(f"server ready in {server.startup_s:.1f} s (index of both runs), RSS {rss_indexed:.0f} MB", flush=True)
        deep = max(1, args.episodes // 50 - 2)
        pages = {
            "runs": "",
            "episodes_first": "runs/big/episodes",
            "episodes_filtered": "runs/big/episodes?failed=1&task_type=addon&q=brother",
            "episodes_sorted": "runs/big/episodes?sort=acc&desc=1",
            "episodes_deep": f"runs/big/episodes?page={deep}",
            "episode": "runs/big/episodes/2",
            "episode_large": "runs/large/episodes/1",
        }
        with httpx.Client(timeout=300) as client:
            home = client.get(server.base).text
            for rid in ("big", "large"):
                if f"/runs/{rid}/episodes" not in home:
                    raise RuntimeError(f"the runs page does not link run {rid!r}; is the run id another?")
            client.get(server.base + pages["episodes_first"]).raise_for_status()
            browse_s = time.perf_counter() - server.t0
            print(f"first episodes page of the big run served {browse_s:.1f} s after the spawn", flush=True)
            timings = measure(client, server.base, pages, args.repeats)
            rss_after, peak = rss_mb(server.proc.pid)
            # the background taxonomy classifier works through every failure of the big run
            # (tens of ms each): wait for it, then read the memory of a viewer that has seen it all
            t_cls = time.perf_counter()
            api = server.base + "api/runs/big/rows?after=1000000000"
            while (left := client.get(api).json().get("unclassified", 0)) and (
                time.perf_counter() - t_cls < args.classify_timeout_s
            ):
                time.sleep(2.0)
            classify_s = time.perf_counter() - t_cls
            rss_classified, peak = rss_mb(server.proc.pid)
            print(
                f"background taxonomy: {'done' if not left else f'{left} failures still pending'} "
                f"{classify_s:.0f} s after the pages; RSS then {rss_classified:.0f} MB",
                flush=True,
            )
    finally:
        server.stop()

    first = timings["episodes_first"]
    ratios = {
        "filtered/first (ttfb)": timings["episodes_filtered"]["ttfb_ms"] / first["ttfb_ms"],
        "sorted/first (ttfb)": timings["episodes_sorted"]["ttfb_ms"] / first["ttfb_ms"],
        "deep/first (ttfb)": timings["episodes_deep"]["ttfb_ms"] / first["ttfb_ms"],
        "episodes full/ttfb": first["full_ms"] / first["ttfb_ms"],
        "large episode full/ttfb": timings["episode_large"]["full_ms"] / timings["episode_large"]["ttfb_ms"],
    }
    memory = {
        "rss_indexed_mb": rss_indexed,
        "rss_after_mb": rss_after,
        "rss_classified_mb": rss_classified,
        "rss_peak_mb": peak,
        "classify_wait_s": classify_s,
        "unclassified_left": left,
    }
    print(
        f"server RSS: {rss_indexed:.0f} MB after indexing, {rss_after:.0f} MB after the pages, "
        f"{rss_classified:.0f} MB after classifying the failures, peak {peak:.0f} MB"
    )
    for k, v in ratios.items():
        print(f"  ratio {k:<26} {v:6.2f}")
    result = {
        "settings": settings,
        "startup_s": server.startup_s,
        "first_episodes_page_s": browse_s,
        "pages": timings,
        "memory": memory,
        "ratios": ratios,
        "targets": {"ttfb_ms": TARGET_TTFB_MS, "rss_mb": TARGET_RSS_MB},
    }
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    failures = [
        f"{name}: median TTFB {t['ttfb_ms']:.0f} ms > {TARGET_TTFB_MS:.0f} ms"
        for name, t in timings.items()
        if name.startswith("episodes_") and t["ttfb_ms"] > TARGET_TTFB_MS
    ]
    worst = max(rss_after, rss_classified, peak)
    if worst > TARGET_RSS_MB:
        failures.append(f"server RSS {worst:.0f} MB > {TARGET_RSS_MB:.0f} MB")
    if args.check and failures:
        print("FAIL: " + "; ".join(failures))
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
