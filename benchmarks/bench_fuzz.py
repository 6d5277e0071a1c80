"""Hostile model output through the evaluation path: the fuzz figures of issue 14.

Runs the seeded generator of ``tests/hostile_outputs.py`` (the same cases as
``tests/benchmark/test_eval_fuzz.py``) through the real evaluation runner: each hostile turn is
served by the scripted OpenAI-compatible server on 127.0.0.1 inside an otherwise valid oracle
episode, through the real ``OpenAIBackend``, environment, BM25 product index, MiniLM memory, rule
judge and paper rewards; each is compared with its control episode (the same oracle episode
without the hostile turn). Definitions of every check are in the docstring of ``tests/hostile_outputs.py``.

Prints: the number of distinct hostile outputs (distinct by SHA-256 of the reply), the count per
category, then crashes, hangs, silent drops, reward increases (and the other failure kinds:
``recorded``, ``utf8``, ``range``, ``observation``) with the wall time, per category and in total;
``--show N`` lists up to N failures per (kind, category). Exit status 0 (no asserts); ``--strict``
exits 1 when any check failed.

    python benchmarks/bench_fuzz.py [--seed 20260] [--concurrency 4] [--categories a,b]
                                    [--per-category N] [--episode-bound-s 60] [--show 3] [--strict]

Needs the data directory (``$SHOPCOMP_DATA_DIR`` or ``../shared/data``); the BM25 index is built on
first use (about a minute on 2 cores) and cached.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from tests.hostile_outputs import CATEGORIES, FAILURE_KINDS, generate_cases, run_fuzz  # noqa: E402


def setup(seed: int):
    from shopping_companion.judges.rule import RuleJudge
    from shopping_companion.memory.loaders import load_sgd
    from shopping_companion.memory.store import MemoryStore
    from shopping_companion.paths import resolve_data_dir
    from shopping_companion.pipeline import SGD_RELPATH, catalog_file, load_catalog, make_embedder, open_product_search
    from tests.env_support import make_single_tasks

    search = open_product_search()
    products, _ = load_catalog(catalog_file())
    sgd = list(load_sgd(resolve_data_dir() / SGD_RELPATH))
    embedder = make_embedder()
    tasks, pool = make_single_tasks(products, sgd, n=3, seed=seed, haystack_size=15)
    stores: dict[str, MemoryStore] = {}
    lock = threading.Lock()

    def make_memory(task):
        with lock:
            if task.task_id not in stores:
                stores[task.task_id] = MemoryStore.from_pool(pool, task.history, embedder)
            return stores[task.task_id]

    for t in tasks:
        make_memory(t)
    judge = RuleJudge(lambda ids: {p: search.get(p) for p in ids if search.get(p) is not None})
    return tasks, search, make_memory, judge


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=20260, help="generator and task seed (default: the test's)")
    ap.add_argument("--concurrency", type=int, default=4, help="episodes in flight (>= 1)")
    ap.add_argument("--categories", default="all", help=f"comma-separated subset of: {', '.join(CATEGORIES)}")
    ap.add_argument("--per-category", type=int, default=0, help="at most N cases per category (0: all)")
    ap.add_argument(
        "--episode-bound-s",
        type=float,
        default=60.0,
        help="an episode longer than this and than 10 times its batch's median episode is a hang",
    )
    ap.add_argument("--batch-timeout-s", type=float, default=600.0, help="a category batch longer than this is a hang")
    ap.add_argument("--show", type=int, default=3, help="failures listed per (kind, category)")
    ap.add_argument("--strict", action="store_true", help="exit 1 when any check failed")
    args = ap.parse_args(argv)
    if args.concurrency < 1:
        ap.error("--concurrency: must be >= 1")
    cats = None if args.categories == "all" else [c.strip() for c in args.categories.split(",") if c.strip()]
    unknown = sorted(set(cats or ()) - set(CATEGORIES))
    if unknown:
        ap.error(f"--categories: unknown {unknown}; allowed: {', '.join(CATEGORIES)}")

    t0 = time.perf_counter()
    tasks, search, make_memory, judge = setup(args.seed)
    t_setup = time.perf_counter() - t0
    cases = generate_cases(tasks, seed=args.seed)
    n_all = len(cases)
    picked, seen = [], Counter()
    for c in cases:
        if cats is not None and c.category not in cats:
            continue
        if args.per_category and seen[c.category] >= args.per_category:
            continue
        seen[c.category] += 1
        picked.append(c)
    print(f"generator: {n_all} distinct hostile outputs (seed {args.seed}); running {len(picked)}")
    for cat in CATEGORIES:
        if seen[cat]:
            print(f"  {cat:24s} {seen[cat]:5d}")
    with tempfile.TemporaryDirectory(prefix="bench-fuzz-") as d:
        report = run_fuzz(
            picked,
            tasks,
            search,
            make_memory,
            judge,
            Path(d),
            concurrency=args.concurrency,
            episode_bound_s=args.episode_bound_s,
            batch_timeout_s=args.batch_timeout_s,
        )
    print()
    print(f"crashes:          {report.count('crash')}")
    print(f"hangs:            {report.count('hang')}  (episode bound {args.episode_bound_s:.0f} s)")
    print(f"silent drops:     {report.count('silent_drop')}")
    print(f"reward increases: {report.count('reward_increase')}")
    for kind in FAILURE_KINDS:
        if kind not in ("crash", "hang", "silent_drop", "reward_increase"):
            print(f"{kind + ':':18s}{report.count(kind)}")
    print(
        f"time:             {report.seconds:.1f} s for {len(picked) + report.control_episodes} episodes "
        f"({len(picked)} hostile + {report.control_episodes} control), "
        f"setup {t_setup:.1f} s"
    )
    print()
    print(report.summary())
    if args.show:
        shown: Counter = Counter()
        for f in report.failures:
            k = (f.kind, f.category)
            shown[k] += 1
            if shown[k] <= args.show:
                print(f"  {f.kind:15s} {f.category:24s} {f.label[:48]!r}: {f.detail[:200]}")
    return 1 if (args.strict and report.failures) else 0


if __name__ == "__main__":
    raise SystemExit(main())
