"""Benchmark the product index and ProductSearch on the full real catalog.

Prints: load and build time, index size, search latency percentiles (k=10 and k=50; no filter,
shop filter, price filter, both), ``view`` latency, the ratio of our ``search`` to a bare Anserini
``SimpleSearcher.search`` of the same query in the same run, and two-thread throughput.
Queries are drawn (seeded) from real product titles and attributes. No asserts.

    python benchmarks/bench_product_search.py [--index-dir DIR] [--rebuild] [--queries 400] [--seed 0]
"""

from __future__ import annotations

import argparse
import random
import threading
import time
from pathlib import Path

from shopping_companion.catalog.index import index_size_bytes, open_or_build, read_manifest
from shopping_companion.catalog.jvm import detach_thread
from shopping_companion.catalog.loader import load_products
from shopping_companion.catalog.search import ProductSearch
from shopping_companion.paths import cache_dir, resolve_data_dir
from shopping_companion.types import Product

_ATTR_KEYS = ("base_colour", "usage", "Fabric", "Pattern", "color", "primary_color", "Material", "season")


def make_queries(products: list[Product], n: int, seed: int) -> list[tuple[str, Product]]:
    """``n`` (query, source product) pairs: 2-4 title words, sometimes plus an attribute value."""
    rng = random.Random(seed)
    out = []
    for p in rng.sample(products, n):
        words = [w for w in p.title.split() if any(c.isalnum() for c in w)]
        q = words[:] if len(words) <= 2 else rng.sample(words, rng.randint(2, min(4, len(words))))
        vals = [p.attributes[k] for k in _ATTR_KEYS if k in p.attributes]
        if vals and rng.random() < 0.5:
            q.append(rng.choice(vals))
        out.append((" ".join(q), p))
    return out


def price_range(p: Product) -> tuple[float, float]:
    """A range around the product's own price (half to 1.5x), or 0..1000 when it has none."""
    return (round(p.price * 0.5, 2), round(p.price * 1.5, 2)) if p.price else (0.0, 1000.0)


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))]


def timed(fn, args_list) -> list[float]:
    out = []
    for args in args_list:
        t = time.perf_counter()
        fn(*args)
        out.append((time.perf_counter() - t) * 1000)
    return out


def row(name: str, ms: list[float]) -> str:
    return f"  {name:<34} p50 {pct(ms, 50):6.2f}  p95 {pct(ms, 95):6.2f}  p99 {pct(ms, 99):6.2f} ms"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--index-dir", default=None, help="default: <cache>/indexes/products-bm25 (the CLI's)")
    ap.add_argument("--rebuild", action="store_true", help="rebuild even if a fresh index exists")
    ap.add_argument("--threads", type=int, default=2, help="indexing threads")
    ap.add_argument("--queries", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()

    catalog = resolve_data_dir(a.data_dir) / "catalog" / "products.jsonl.gz"
    index_dir = Path(a.index_dir) if a.index_dir else cache_dir() / "indexes" / "products-bm25"

    t = time.perf_counter()
    products, report = load_products(catalog)
    load_s = time.perf_counter() - t
    print(f"catalog: {report.summary()}")
    print(f"load: {load_s:.2f} s")

    before = read_manifest(index_dir) if index_dir.is_dir() else None
    t = time.perf_counter()
    manifest = open_or_build(catalog, index_dir, threads=a.threads, rebuild=a.rebuild)
    wall = time.perf_counter() - t
    rebuilt = before is None or before.built_at != manifest.built_at or a.rebuild
    phases = ", ".join(f"{k} {v:.2f}" for k, v in manifest.phase_seconds.items())
    print(
        f"index: {manifest.n_docs} docs, {index_size_bytes(index_dir) / 2**20:.1f} MB at {index_dir}\n"
        f"build: {manifest.build_seconds:.2f} s ({phases}; {manifest.threads} threads)"
        + (f", open_or_build wall {wall:.2f} s incl. loading" if rebuilt else " [reused; time from manifest]")
    )

    t = time.perf_counter()
    s = ProductSearch(index_dir)
    print(f"open ProductSearch: {time.perf_counter() - t:.2f} s")
    from pyserini.pyclass import autoclass

    bare = autoclass("io.anserini.search.SimpleSearcher")(str(index_dir.resolve()))

    qs = make_queries(products, a.queries, a.seed)
    for q, _ in qs[:100]:  # warm up JIT and caches
        s.search(q, top_k=50)
        bare.search(q, 50)

    def bare_search(q: str, k: int) -> list[tuple[str, float]]:
        """What Pyserini's LuceneSearcher.search returns: ids and scores."""
        return [(h.docid, h.score) for h in bare.search(q, k)]

    def bare_search_raw(q: str, k: int) -> list[tuple[str, float, str]]:
        """The same plus each hit's stored product JSON (the information our search returns)."""
        return [(h.docid, h.score, h.lucene_document.get("raw")) for h in bare.search(q, k)]

    print(f"\nsearch latency over {len(qs)} queries from real titles/attributes (ms):")
    medians = {}
    for k in (10, 50):
        cases = {
            "no filter": [(q, None, None, None, k) for q, p in qs],
            "shop filter": [(q, p.shop_id, None, None, k) for q, p in qs],
            "price filter": [(q, None, *price_range(p), k) for q, p in qs],
            "shop + price filter": [(q, p.shop_id, *price_range(p), k) for q, p in qs],
        }
        for name, args in cases.items():
            ms = timed(s.search, args)
            medians[(k, name)] = pct(ms, 50)
            print(row(f"k={k} {name}", ms))
        ms_bare = timed(bare_search, [(q, k) for q, _ in qs])
        medians[(k, "bare")] = pct(ms_bare, 50)
        print(row(f"k={k} bare Anserini (ids, scores)", ms_bare))
        ms_bare_raw = timed(bare_search_raw, [(q, k) for q, _ in qs])
        medians[(k, "bare+raw")] = pct(ms_bare_raw, 50)
        print(row(f"k={k} bare Anserini + raw per hit", ms_bare_raw))
        print(
            f"  ratio ours/bare, no filter, median: {medians[(k, 'no filter')] / medians[(k, 'bare')]:.2f} "
            f"(vs bare + raw: {medians[(k, 'no filter')] / medians[(k, 'bare+raw')]:.2f})"
        )

    rng = random.Random(a.seed + 1)
    ids = [p.product_id for p in products]
    v1 = timed(s.view, [([rng.choice(ids)],) for _ in range(len(qs))])
    v10 = timed(s.view, [([rng.choice(ids) for _ in range(10)],) for _ in range(len(qs) // 4)])
    print("\nview latency (ms):")
    print(row("1 id", v1))
    print(row("10 ids", v10))

    def throughput(n_threads: int, seconds: float = 3.0) -> float:
        stop = time.perf_counter() + seconds
        counts = [0] * n_threads

        def work(i: int) -> None:
            try:
                j = i
                while time.perf_counter() < stop:
                    s.search(qs[j % len(qs)][0], top_k=10)
                    counts[i] += 1
                    j += n_threads
            finally:
                detach_thread()

        ths = [threading.Thread(target=work, args=(i,)) for i in range(n_threads)]
        for th in ths:
            th.start()
        for th in ths:
            th.join()
        return sum(counts) / seconds

    t1, t2 = throughput(1), throughput(2)
    print(f"\nthroughput k=10 no filter: 1 thread {t1:.0f} q/s, 2 threads {t2:.0f} q/s ({t2 / t1:.2f}x)")
    print("\nsummary (medians, ms): " + ", ".join(
        f"k={k} {n}: {v:.2f}" for (k, n), v in medians.items()
    ))
    bare.close()
    s.close()


if __name__ == "__main__":
    main()
