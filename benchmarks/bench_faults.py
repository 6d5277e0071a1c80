"""Time to fail (or succeed) of one LLM call against hostile endpoints, vs the configured deadline.

For each fault kind of tests/faults.py (hung, trickling, refused, dead-and-back, 5xx, 429 with
Retry-After, garbage body, context length, and 100 calls at concurrency 8 against a hung server
with the circuit breaker), runs it ``--runs`` times against a fresh real local server and prints
the configured ``deadline_s``, the median wall-clock time of the call(s), their ratio, the
outcome and the chat requests the server saw. Offline, CPU only, about 30 s with ``--runs 3``.

    .venv/bin/python benchmarks/bench_faults.py --runs 3
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.faults import FAULTS, run_fault  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3, help="measured runs per fault kind (median reported)")
    ap.add_argument("--only", default=None, help="run only fault kinds whose name contains this text")
    args = ap.parse_args()
    logging.basicConfig(level=logging.ERROR)
    print(f"{'fault':48s} {'deadline_s':>10s} {'median_s':>9s} {'ratio':>6s}  {'outcome':28s} requests")
    bad = 0
    for fault in FAULTS:
        if args.only and args.only not in fault.name:
            continue
        outs = [run_fault(fault) for _ in range(max(1, args.runs))]
        med = statistics.median(o.elapsed_s for o in outs)
        deadline = fault.settings["deadline_s"]
        results = sorted({r for o in outs for r in o.results})
        ok = all(o.ok for o in outs)
        bad += not ok
        label = ",".join(results) + ("" if ok else "  (UNEXPECTED)")
        reqs = statistics.median(o.requests for o in outs)
        print(f"{fault.name:48s} {deadline:10.1f} {med:9.2f} {med / deadline:6.2f}  {label:28s} {reqs:g}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
