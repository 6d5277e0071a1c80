"""Memory benchmark: one user with ~56 real sessions (~100k tokens) from SGD + ShareGPT.

Measures
- cold encode throughput: every turn embedded with a fresh on-disk cache (sentences/s, and
  tokens/s counting only the tokens the model processes; model load excluded, printed apart),
- rebuild: a new Embedder on the same cache file builds the same store (cache hit rate, seconds),
- ``mem_search`` latency including query encoding: single query with an uncached query (the model
  runs), single query again (query vector cached), three queries per call (uncached).

Tokens are counted with the MiniLM word-piece tokenizer over each turn's full text (no
truncation, no special tokens); the model itself truncates a turn to 256 word pieces.

Usage: python benchmarks/bench_memory.py [--sessions 56] [--tokens 100000] [--seed 0]
Prints medians (and p95 for latencies); no asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from shopping_companion.memory.embedder import Embedder, default_model_path
from shopping_companion.memory.loaders import load_sgd, load_sharegpt
from shopping_companion.memory.store import MemoryStore
from shopping_companion.types import Session

QUERIES = [
    "what colours does the user like for clothes",
    "fabrics the user avoids",
    "user's shoe size",
    "brands the user dislikes",
    "does the user have any allergies",
    "preferred price range for electronics",
    "what kind of food does the user enjoy",
    "user's favourite restaurant cuisine",
    "where does the user live",
    "does the user have pets",
    "user's budget for furniture",
    "materials the user prefers for furniture",
    "what phone does the user own",
    "laptop preferences of the user",
    "user's skin type and skincare products",
    "does the user prefer organic groceries",
    "what sports does the user play",
    "user's taste in music",
    "favourite movie genres",
    "travel destinations the user mentioned",
    "user's clothing size",
    "does the user like bright or muted colours",
    "kitchen appliances the user bought before",
    "coffee preferences",
    "user's dietary restrictions vegetarian vegan",
    "gift ideas the user considered",
    "user's hobbies",
    "what the user said about delivery speed",
    "which stores the user likes to shop at",
    "user complaints about a previous purchase",
    "preferred fit for jeans",
    "does the user wear glasses",
    "user's car model",
    "office supplies the user needs",
    "user's opinion on synthetic materials",
    "children's ages and toys",
    "home decor style the user likes",
    "user's favourite snacks",
    "sleep and mattress preferences",
    "user's running shoes experience",
]


def pick_user(
    sgd: list[Session], sharegpt: list[Session], tok, n_sessions: int, target_tokens: int,
    seed: int,
) -> tuple[list[Session], int, dict[str, int]]:
    """~n_sessions real sessions (2/3 SGD, 1/3 ShareGPT) summing to ~target_tokens."""
    rng = random.Random(seed)

    def ntok(s: Session) -> int:
        return sum(len(tok.tokenize(t.content)) for t in s.turns)

    n_sgd = round(n_sessions * 2 / 3)
    picked = rng.sample(sgd, n_sgd)
    total = sum(ntok(s) for s in picked)
    per_src = {"sgd": total, "sharegpt": 0}
    n_sg = n_sessions - n_sgd
    order = list(range(len(sharegpt)))
    rng.shuffle(order)
    counts: dict[int, int] = {}
    chosen: list[int] = []
    for i in order:  # n_sg - 1 sessions near the running mean the remaining budget asks for
        if len(chosen) >= n_sg - 1:
            break
        want = (target_tokens - total - sum(counts[j] for j in chosen)) / (n_sg - len(chosen))
        counts[i] = ntok(sharegpt[i])
        if 0.5 * want <= counts[i] <= 1.5 * want:
            chosen.append(i)
    left = target_tokens - total - sum(counts[i] for i in chosen)
    if n_sg >= 1:  # the last one: the examined session that best fills the remaining budget
        last = min((i for i in counts if i not in chosen),
                   key=lambda i: abs(counts[i] - left), default=None)
        if last is not None:
            chosen.append(last)
    for i in chosen:
        picked.append(sharegpt[i])
        total += counts[i]
        per_src["sharegpt"] += counts[i]
    rng.shuffle(picked)
    return [s.model_copy(update={"date": f"2024-{1 + i // 28:02d}-{1 + i % 28:02d}"})
            for i, s in enumerate(picked)], total, per_src


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs), q))


def time_searches(store: MemoryStore, calls: list[list[str]]) -> list[float]:
    out = []
    for qs in calls:
        t0 = time.perf_counter()
        store.search(qs, top_k=10)
        out.append((time.perf_counter() - t0) * 1000)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sessions", type=int, default=56)
    ap.add_argument("--tokens", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3, help="cold builds (fresh cache each)")
    args = ap.parse_args()

    import torch
    from transformers import AutoTokenizer

    print(f"machine: {os.cpu_count()} CPUs, torch threads {torch.get_num_threads()}, "
          f"load average {os.getloadavg()[0]:.2f} (other jobs on a shared machine skew timings)")
    t0 = time.perf_counter()
    sgd = load_sgd()
    sharegpt, report = load_sharegpt()
    print(f"loaders: SGD {len(sgd)} sessions; ShareGPT parsed {report.parsed}, kept {report.kept}, "
          f"dropped {report.dropped}; {time.perf_counter() - t0:.1f} s")

    tok = AutoTokenizer.from_pretrained(str(default_model_path()), local_files_only=True)
    tok.model_max_length = 1 << 30  # we count full turns; silence the "longer than 512" warning
    sessions, total_tokens, per_src = pick_user(
        sgd, sharegpt, tok, args.sessions, args.tokens, args.seed
    )
    turns = [t.content for s in sessions for t in s.turns]
    turn_tokens = [len(tok.tokenize(x)) for x in turns]
    n_trunc = sum(1 for n in turn_tokens if n > 254)
    seen_tokens = sum(min(n + 2, 256) for n in turn_tokens)  # what the model processes ([CLS]/[SEP])
    n_words = sum(len(x.split()) for x in turns)
    print(f"user: {len(sessions)} sessions ({sum(s.source == 'sgd' for s in sessions)} SGD, "
          f"{sum(s.source == 'sharegpt' for s in sessions)} ShareGPT), {len(turns)} turns, "
          f"{total_tokens} MiniLM word-piece tokens ({per_src}; {n_words} whitespace words); "
          f"{n_trunc} turns longer than the model's 256-token window; {seen_tokens} tokens "
          f"reach the model")

    with tempfile.TemporaryDirectory(prefix="bench_memory_") as tmp:
        cold_runs = []
        for r in range(max(1, args.repeats)):
            cache = Path(tmp) / f"emb{r}.sqlite"
            emb = Embedder(cache_path=cache, batch_size=args.batch_size)
            emb.encode(["warm-up sentence that loads the model"])
            if r == 0:
                print(f"model load: {emb.stats.load_s:.2f} s")
            emb.reset_stats()
            t0 = time.perf_counter()
            store = MemoryStore(sessions, emb)
            cold_runs.append(time.perf_counter() - t0)
            print(f"  cold build {r + 1}: {emb.stats.misses} texts encoded in {cold_runs[-1]:.2f} s"
                  f" (load average {os.getloadavg()[0]:.2f})")
        cold_s = statistics.median(cold_runs)
        sps = emb.stats.misses / cold_s
        print(f"cold build (median of {len(cold_runs)}): {store.n_turns} turns, "
              f"{emb.stats.misses} distinct texts encoded in {cold_s:.2f} s -> {sps:.0f} "
              f"sentences/s, {seen_tokens / cold_s:.0f} model tokens/s (batch {args.batch_size})")

        # rebuild: a new embedder (new process's view) on the same cache file
        emb2 = Embedder(cache_path=cache, batch_size=args.batch_size)
        t0 = time.perf_counter()
        store2 = MemoryStore(sessions, emb2)
        rebuild_s = time.perf_counter() - t0
        print(f"rebuild: hit rate {emb2.stats.hit_rate:.3f} ({emb2.stats.hits} hits, "
              f"{emb2.stats.misses} misses), {rebuild_s * 1000:.1f} ms, model loaded: "
              f"{emb2.stats.load_s > 0}")

        same = np.array_equal(store._matrix, store2._matrix)  # noqa: SLF001 - a benchmark check
        print(f"rebuilt index identical to the cold one: {same}")

        # searches on the first store (its embedder has the model loaded)
        rng = random.Random(args.seed)
        uncached = time_searches(store, [[q] for q in QUERIES])
        cached = time_searches(store, [[q] for q in QUERIES] * 3)
        triples = []
        for i in range(40):
            qs = rng.sample(QUERIES, 3)
            triples.append([f"{q} (variant {i})" for q in qs])  # distinct texts: uncached
        multi = time_searches(store, triples)

    rows = {
        "search_1q_uncached_ms": uncached,
        "search_1q_cached_ms": cached,
        "search_3q_uncached_ms": multi,
    }
    for name, xs in rows.items():
        print(f"{name}: p50 {statistics.median(xs):.2f} ms, p95 {pct(xs, 95):.2f} ms (n={len(xs)})")
    summary = {
        "sessions": len(sessions), "turns": len(turns), "tokens_minilm": total_tokens,
        "whitespace_words": n_words,
        "sharegpt_parsed": report.parsed, "sharegpt_kept": report.kept,
        "cold_encode_sentences_per_s": round(sps, 1),
        "cold_encode_model_tokens_per_s": round(seen_tokens / cold_s, 1),
        "rebuild_hit_rate": round(emb2.stats.hit_rate, 4), "rebuild_ms": round(rebuild_s * 1000, 1),
        **{k.replace("_ms", "_p50_ms"): round(statistics.median(v), 2) for k, v in rows.items()},
        **{k.replace("_ms", "_p95_ms"): round(pct(v, 95), 2) for k, v in rows.items()},
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
