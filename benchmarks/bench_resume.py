"""kill -9 resume: nothing lost, nothing duplicated, no unreadable line.

Starts ``shopcomp eval`` (a real child process: CLI, product index, memory stores, rule judge,
rewards) against the scripted OpenAI-compatible server of tests/openai_server.py (the deterministic
policy of tests/scripted_policy.py, served over HTTP on 127.0.0.1 with ``--delay-s`` per request),
kills it with SIGKILL at random moments ``--kills`` times (some while it starts up, most while
episodes are in flight and lines are being written), resumes it each time with the same command,
and finally lets it run to completion. Then it reads the results file and prints:

- expected: tasks × strategies × trials;
- written: distinct keys ``(task, trial, mode, hint)`` with a readable line;
- lost: expected keys without any line;
- duplicated: keys with more than one line without an error (an episode finished twice);
- unreadable: complete lines that are not a valid result; torn: an unterminated last line;
- the number of kills, lines and the final exit status.

Exits 1 when anything is lost, duplicated or unreadable, or the final run does not exit 0.

Benchmark: ``--bench`` (default ``runs/quickstart/bench``, built by ``shopcomp quickstart``), the
first ``--limit`` tasks. The catalog index and embeddings are the CLI's own (cache directory, or
``--index-dir``).

    python benchmarks/bench_resume.py [--bench runs/quickstart/bench] [--limit 10] [--trials 2]
        [--strategies two_stage:none,two_stage:low] [--kills 5] [--concurrency 4] [--delay-s 0.05]
        [--seed 0] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from shopping_companion.benchmark.report import result_key, scan_results  # noqa: E402
from shopping_companion.benchmark.synth import load_benchmark  # noqa: E402
from tests.openai_server import ScriptedOpenAIServer  # noqa: E402
from tests.scripted_policy import policy_script  # noqa: E402


def _lines(p: Path) -> int:
    try:
        return p.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bench", type=Path, default=ROOT / "runs" / "quickstart" / "bench")
    ap.add_argument("--limit", type=int, default=10, help="first N tasks of the benchmark (>= 1)")
    ap.add_argument("--trials", type=int, default=2)
    ap.add_argument("--strategies", default="two_stage:none,two_stage:low")
    ap.add_argument("--kills", type=int, default=5, help="SIGKILLs before the final run (>= 1)")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--delay-s", type=float, default=0.05, help="server delay per request, seconds")
    ap.add_argument("--max-turns", type=int, default=6)
    ap.add_argument("--seed", type=int, default=0, help="seed of the random kill moments")
    ap.add_argument("--index-dir", type=Path, default=None)
    ap.add_argument("--data-dir", type=Path, default=None)
    ap.add_argument("--work-dir", type=Path, default=None, help="runs directory (default: a temporary one)")
    ap.add_argument("--startup-timeout-s", type=float, default=600.0)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.limit < 1 or args.kills < 1 or args.trials < 1:
        ap.error("--limit, --kills and --trials must be >= 1")
    if not (args.bench / "manifest.json").is_file():
        print(f"no benchmark at {args.bench} (build one with `shopcomp quickstart`, or pass --bench)", file=sys.stderr)
        return 2
    rng = random.Random(args.seed)
    tasks = load_benchmark(args.bench).tasks[: args.limit]
    strategies = [s for s in args.strategies.split(",") if s.strip()]
    expected = len(tasks) * args.trials * len(strategies)
    runs = args.work_dir or Path(tempfile.mkdtemp(prefix="bench-resume-"))
    runs.mkdir(parents=True, exist_ok=True)
    results = runs / "resume" / "results.jsonl"
    log_path = runs / "child.log"
    kills = kills_startup = 0
    final_rc = None
    t0 = time.perf_counter()
    with ScriptedOpenAIServer(policy_script(tasks, delay_s=args.delay_s)) as srv:
        cmd = [
            sys.executable,
            "-m",
            "shopping_companion.cli",
            "eval",
            "--bench",
            str(args.bench),
            "--name",
            "resume",
            "--runs-dir",
            str(runs),
            "--backend",
            "openai",
            "--model",
            "scripted",
            "--base-url",
            srv.base_url,
            "--limit",
            str(args.limit),
            "--trials",
            str(args.trials),
            "--strategies",
            ",".join(strategies),
            "--concurrency",
            str(args.concurrency),
            "--max-turns",
            str(args.max_turns),
            "--max-retries",
            "2",
        ]
        if args.index_dir:
            cmd += ["--index-dir", str(args.index_dir)]
        if args.data_dir:
            cmd += ["--data-dir", str(args.data_dir)]
        env = dict(os.environ, OPENAI_API_KEY="k")
        for attempt in range(args.kills + 1):
            final = attempt == args.kills
            with open(log_path, "a") as log:
                log.write(f"\n===== run {attempt + 1} ({'final' if final else 'to be killed'})\n")
                log.flush()
                proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
                if final:
                    final_rc = proc.wait(timeout=args.startup_timeout_s + 1800)
                    break
                before = _lines(results)
                deadline = time.monotonic() + args.startup_timeout_s
                if rng.random() < 0.2:  # a kill while it starts up (index, embedder, identity, tail repair)
                    time.sleep(rng.uniform(0.0, 3.0))
                    kills_startup += 1
                else:  # a kill while episodes are in flight: after a new line, at a random moment
                    while _lines(results) <= before and proc.poll() is None and time.monotonic() < deadline:
                        time.sleep(0.02)
                    time.sleep(rng.uniform(0.0, 1.5))
                if proc.poll() is not None:
                    print(f"run {attempt + 1} finished before it was killed (exit {proc.returncode})")
                    continue
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
                kills += 1
                print(f"run {attempt + 1}: SIGKILL after {_lines(results)} line(s)", flush=True)
    scan = scan_results(results)
    keys = [result_key(r) for r in scan.results]
    ok_keys = Counter(result_key(r) for r in scan.results if r.error is None)
    wanted = {(t.task_id, k, *_mode_hint(s)) for s in strategies for t in tasks for k in range(args.trials)}
    written = len(set(keys) & wanted)
    out = {
        "expected": expected,
        "written": written,
        "lost": len(wanted - set(keys)),
        "duplicated": sum(1 for v in ok_keys.values() if v > 1),
        "unreadable": len(scan.unreadable),
        "torn_tail": scan.torn_tail,
        "lines": len(keys) + len(scan.unreadable),
        "errored_lines": sum(1 for r in scan.results if r.error is not None),
        "kills": kills,
        "kills_during_startup": kills_startup,
        "final_exit_status": final_rc,
        "wall_s": round(time.perf_counter() - t0, 1),
        "results": str(results),
    }
    print(
        "expected {expected} / written {written} / lost {lost} / duplicated {duplicated} / unreadable lines "
        "{unreadable} (torn tail: {torn_tail}); {lines} lines, {errored_lines} errored; {kills} SIGKILLs "
        "({kills_during_startup} during start-up); final exit status {final_exit_status}; {wall_s}s".format(**out)
    )
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    bad = out["lost"] or out["duplicated"] or out["unreadable"] or final_rc != 0
    if bad:
        print(f"FAILED (child log: {log_path})", file=sys.stderr)
    return 1 if bad else 0


def _mode_hint(strategy: str) -> tuple[str, str]:
    mode, _, hint = strategy.strip().partition(":")
    return mode, hint or "none"


if __name__ == "__main__":
    sys.exit(main())
