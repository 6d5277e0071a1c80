"""Needle difficulty: how often does ``mem_search`` with the task instruction itself surface a
needle session?

For each synthesised task, the user's memory is built (MiniLM over every turn, as ``mem_search``
does) and searched with the instruction as the only query, top 10 turns. Reported per task and
as fractions:

- **top-10**: some needle session is among the sessions of the top-10 turns,
- **top-1**: the best turn belongs to a needle session,
- the rank of the best needle turn among all the user's turns (1 = first),

for MiniLM and for a plain turn-level BM25 (numpy; k1=0.9, b=0.4 as Anserini's defaults,
lower-cased word tokens, Lucene's English stop words, no stemming). A high top-10 fraction means
the instruction alone already leads to the preferences (an easy benchmark); this is the
difficulty knob of the generator. Also printed: the same with the gold preference values
appended to the instruction (what an agent that already knew them would find, an upper
reference), and how long building the 50 users' stores takes warm (SQLite cache vs MemoryBank).

    python benchmarks/bench_needle_difficulty.py --bench runs/quickstart/bench
    python benchmarks/bench_needle_difficulty.py --synth 50 --seed 0     # build with synth first
    python benchmarks/bench_needle_difficulty.py --synth 50 --n-tasks 15 # measure the first 15

Embeddings go to the shared cache (``$SHOPCOMP_CACHE_DIR``), so a rerun encodes nothing. Prints
a per-task table and a JSON summary; ``--json PATH`` also writes it. No asserts.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from shopping_companion.memory.bank import MemoryBank
from shopping_companion.memory.embedder import Embedder, default_cache_path
from shopping_companion.memory.store import MemoryStore
from shopping_companion.types import Session, Task

_STOP = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then "
    "there these they this to was will with".split()
)
_WORD = re.compile(r"[a-z0-9]+")


def bm25_tokens(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.lower()) if w not in _STOP]


def bm25_scores(query: str, docs: list[list[str]], k1: float = 0.9, b: float = 0.4) -> np.ndarray:
    """BM25 score of every doc (token lists) for ``query`` (Lucene's idf form)."""
    n = len(docs)
    if n == 0:
        return np.zeros(0)
    lens = np.array([len(d) for d in docs], dtype=np.float64)
    avg = max(lens.mean(), 1e-9)
    tfs = [Counter(d) for d in docs]
    df: Counter[str] = Counter()
    for tf in tfs:
        df.update(tf.keys())
    scores = np.zeros(n)
    for term in set(bm25_tokens(query)):
        if not df[term]:
            continue
        idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
        tf = np.array([c.get(term, 0) for c in tfs], dtype=np.float64)
        scores += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * lens / avg))
    return scores


def rank_stats(scores: np.ndarray, row_sessions: list[str], needles: set[str], k: int = 10) -> dict[str, Any]:
    """Top-k / top-1 needle hits and the 1-based rank of the best needle row (ties: earlier row
    first, as ``mem_search`` breaks them)."""
    order = np.argsort(-scores, kind="stable")
    top_sessions = {row_sessions[i] for i in order[:k]}
    needle_rows = [r for r, i in enumerate(order) if row_sessions[i] in needles]
    return {
        "top10": bool(top_sessions & needles),
        "top1": bool(len(order)) and row_sessions[order[0]] in needles,
        "rank": (needle_rows[0] + 1) if needle_rows else None,
    }


def load_tasks(args: argparse.Namespace) -> tuple[list[Task], dict[str, Session], str]:
    if args.bench:
        from shopping_companion.benchmark.synth import load_benchmark

        b = load_benchmark(args.bench)
        return b.tasks[: args.n_tasks], b.sessions, f"benchmark {args.bench}"
    from shopping_companion.benchmark.synth import SynthConfig, synthesize
    from shopping_companion.pipeline import catalog_file, load_catalog, load_pool

    t0 = time.perf_counter()
    products, _ = load_catalog(catalog_file(args.data_dir))
    pool, _info = load_pool(args.data_dir)
    print(f"inputs: {len(products)} products, {len(pool)} pool sessions ({time.perf_counter() - t0:.1f} s)")
    t0 = time.perf_counter()
    out = synthesize(products, pool, SynthConfig(addon_share=0.0, n_tasks=args.n_synth, seed=args.seed))
    print(f"synthesised {len(out.tasks)} tasks in {time.perf_counter() - t0:.1f} s (no BM25 searchable check)")
    return (
        out.tasks[: args.n_tasks],
        out.sessions,
        f"synthesize(n_tasks={args.n_synth}, seed={args.seed}), first {args.n_tasks}",
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--bench", help="an existing benchmark directory (load_benchmark)")
    src.add_argument(
        "--synth", dest="n_synth", type=int, default=None, help="synthesise this many tasks with the current generator"
    )
    ap.add_argument(
        "--n-tasks",
        type=int,
        default=None,
        help="tasks to measure: the first N (default: 50, or all that --synth builds)",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--cache", default=None, help="embedding cache file (default: the shared one)")
    ap.add_argument("--json", default=None, help="also write the summary here")
    ap.add_argument("--quiet", action="store_true", help="no per-task table")
    args = ap.parse_args()
    if args.n_tasks is None:
        args.n_tasks = args.n_synth if args.n_synth is not None else 50
    if not args.bench and args.n_synth is None:
        args.bench = "runs/quickstart/bench" if Path("runs/quickstart/bench/manifest.json").is_file() else None
        if args.bench is None:
            args.n_synth = args.n_tasks

    tasks, sessions, where = load_tasks(args)
    print(f"{len(tasks)} tasks from {where}; load average {os.getloadavg()[0]:.2f}")

    emb = Embedder(cache_path=args.cache or default_cache_path())
    bank = MemoryBank(sessions, emb)
    used = list(dict.fromkeys(r.session_id for t in tasks for r in t.history))
    t0 = time.perf_counter()
    n_texts = bank.prewarm(used)
    print(
        f"embedded {len(used)} sessions / {n_texts} distinct turn texts in "
        f"{time.perf_counter() - t0:.1f} s (cache hit rate {emb.stats.hit_rate:.3f}, "
        f"{emb.stats.misses} encoded)"
    )

    # warm store builds for every user: through the SQLite cache (new embedder) and the bank
    e_sql = Embedder(cache_path=args.cache or default_cache_path())
    t0 = time.perf_counter()
    for t in tasks:
        MemoryStore.from_pool(sessions, t.history, e_sql)
    sql_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    stores = [bank.for_task(t) for t in tasks]
    bank_s = time.perf_counter() - t0
    print(
        f"warm store build for {len(tasks)} users: from_pool via SQLite {sql_s:.2f} s "
        f"(hit rate {e_sql.stats.hit_rate:.3f}), MemoryBank {bank_s:.3f} s"
    )
    e_sql.close()

    rows = []
    for t, st in zip(tasks, stores):
        needles = set(t.needle_session_ids)
        row_sessions = [sid for sid, _ in st.turn_ids]
        hits = st.search(t.instruction, top_k=10)
        qv = emb.encode_queries(t.instruction)[0]
        mini = rank_stats(st.embeddings @ qv, row_sessions, needles)
        # the tool's own answer must agree with the full ranking
        assert mini["top10"] == bool({h["session_id"] for h in hits} & needles)
        assert mini["top1"] == (hits[0]["session_id"] in needles)
        docs = [bm25_tokens(sessions[sid].turns[ti].content) for sid, ti in st.turn_ids]
        bm = rank_stats(bm25_scores(t.instruction, docs), row_sessions, needles)
        values = " ".join(p.value for p in t.preferences)
        oracle_q = f"{t.instruction} {values}"
        oracle = rank_stats(st.embeddings @ emb.encode_queries(oracle_q)[0], row_sessions, needles)
        rows.append(
            {
                "task_id": t.task_id,
                "task_type": t.task_type,
                "sessions": len(t.history),
                "turns": st.n_turns,
                "needles": len(needles),
                "minilm": mini,
                "bm25": bm,
                "minilm_with_values": oracle,
                "instruction": t.instruction,
            }
        )

    if not args.quiet:
        print(
            f"\n{'task':<16} {'type':<6} {'sess':>4} {'turns':>5}  MiniLM top10/top1/rank   "
            f"BM25 top10/top1/rank   +values top10"
        )
        for r in rows:
            m, b, o = r["minilm"], r["bm25"], r["minilm_with_values"]
            print(
                f"{r['task_id']:<16} {r['task_type']:<6} {r['sessions']:>4} {r['turns']:>5}  "
                f"{int(m['top10']):>5} {int(m['top1']):>4} {m['rank'] or '-':>6}   "
                f"{int(b['top10']):>6} {int(b['top1']):>4} {b['rank'] or '-':>6}   {int(o['top10']):>6}"
            )

    def frac(key: str, field: str, subset: list[dict[str, Any]] | None = None) -> float:
        rs = rows if subset is None else subset
        return round(sum(bool(r[key][field]) for r in rs) / len(rs), 4) if rs else float("nan")

    def med_rank(key: str) -> float | None:
        ranks = [r[key]["rank"] for r in rows if r[key]["rank"] is not None]
        return statistics.median(ranks) if ranks else None

    summary: dict[str, Any] = {
        "source": where,
        "tasks": len(rows),
        "by_type": dict(Counter(r["task_type"] for r in rows)),
        "history_sessions_mean": round(statistics.mean(r["sessions"] for r in rows), 1),
        "history_turns_mean": round(statistics.mean(r["turns"] for r in rows), 1),
        "needle_sessions_mean": round(statistics.mean(r["needles"] for r in rows), 2),
        "minilm_top10_fraction": frac("minilm", "top10"),
        "minilm_top1_fraction": frac("minilm", "top1"),
        "minilm_median_best_needle_rank": med_rank("minilm"),
        "bm25_top10_fraction": frac("bm25", "top10"),
        "bm25_top1_fraction": frac("bm25", "top1"),
        "bm25_median_best_needle_rank": med_rank("bm25"),
        "minilm_with_values_top10_fraction": frac("minilm_with_values", "top10"),
        "minilm_with_values_top1_fraction": frac("minilm_with_values", "top1"),
        "warm_store_build_s": {"from_pool_sqlite": round(sql_s, 3), "memory_bank": round(bank_s, 3)},
    }
    for tt in sorted(summary["by_type"]):
        sub = [r for r in rows if r["task_type"] == tt]
        summary[f"minilm_top10_fraction_{tt}"] = frac("minilm", "top10", sub)
        summary[f"minilm_top1_fraction_{tt}"] = frac("minilm", "top1", sub)
    print("\n" + json.dumps(summary, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": summary, "tasks": rows}, indent=2))
    emb.close()


if __name__ == "__main__":
    main()
