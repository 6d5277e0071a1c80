"""Scale benchmark of the product index and ProductSearch: the real catalog and a 1.3M-product one.

Two catalogs:

* ``real``: the 98,729 valid products of ``catalog/products.jsonl.gz``.
* ``1.3m``: the real catalog grown to ``--n-large`` (1,300,000) products by perturbing it
  (:func:`perturbed_catalog`; deterministic from ``--seed``). Every real product is kept and
  followed by 12 perturbed clones (13 for the first 16,523 products, so the total is exactly
  1,300,000). A clone ``j`` of product ``p`` (own RNG seeded by ``"<seed>:<product_id>:<j>"``):

  - ``product_id``: ``"<product_id>~<j>"`` (two digits);
  - ``title``: each word is replaced, with probability 0.25, by a word drawn from the titles of
    the same finest category (frequency-weighted), then one random pair of neighbouring words is
    swapped with probability 0.5;
  - ``seller`` / ``shop_id``: a reseller of the brand at the same retailer, ``"<brand or shop>
    partner <1..40>"`` (shop id ``<retailer>/<brand>-partner-<k>``), so shop filters stay
    realistic: a few dozen shops per brand;
  - ``price`` and ``list_price``: multiplied by one factor drawn from U(0.85, 1.20), rounded to
    cents (missing prices stay missing);
  - ``description``: its sentences (split on ". ") shuffled;
  - ``rating``: moved by U(-0.3, 0.3), clipped to [1, 5], one decimal;
  - everything else (brand, category, attributes, options, features, currency) unchanged.

For each catalog the script reports (each build runs in a fresh subprocess so its peak memory is
its own): build wall time and phases (``open_or_build`` for the real catalog, a streaming
``build_index`` for the 1.3M one), index size on disk, the build process's peak RSS (Python +
JVM), and then, in this process, latency percentiles p50/p95/p99 over ``--queries`` queries of

* ``product_search`` with k=10 and k=50, without filter, with the shop filter, the price filter
  and both (queries: 2-4 words of a real product's title, half of them plus one of its attribute
  values; the filters are that product's shop and a range of half to 1.5x its price);
* ``product_view`` of 1 and of 10 ids;
* the bare Pyserini call in the same run: ``LuceneSearcher.search(q, k)`` -- Pyserini's Python
  ``LuceneSearcher`` cannot be imported in our lean install (it pulls torch and more), so this
  runs exactly what it runs: Anserini's ``SimpleSearcher.search`` on the same index, then its
  Python loop over the hits (docid, de-duplication); with filters, the same Lucene query object
  is passed to it. Its ranking is score, then product id, over every matching document.

and the ratio of our tool layer to the bare call (median of per-query ratios, and the ratio of
the p50s). For reference, the Lucene top-k search that ``product_search`` runs is also timed alone
(query analysis + ``IndexSearcher.search`` + reading docids and scores): the difference to
``product_search`` is what reading and shaping the hits costs. The load average is printed because the machine may be shared. Targets (1.3M, k=50,
one thread): p50 <= 5 ms, p99 <= 30 ms, tool layer <= 1.15x the bare call, build <= 10 min.

    python benchmarks/bench_product_search.py [--scales real,1.3m] [--work-dir DIR] [--rebuild]
        [--queries 400] [--seed 0] [--threads 2] [--n-large 1300000]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Iterator

from shopping_companion.catalog.index import index_size_bytes, read_manifest
from shopping_companion.catalog.loader import catalog_hash, load_products, make_shop_id
from shopping_companion.paths import cache_dir, resolve_data_dir
from shopping_companion.types import Product

_ATTR_KEYS = ("base_colour", "usage", "Fabric", "Pattern", "color", "primary_color", "Material", "season", "colour")
PERTURB_VERSION = 1


# --------------------------------------------------------------------------- the 1.3M catalog


def perturbed_catalog(products: list[Product], n_total: int, seed: int = 0) -> Iterator[Product]:
    """The real products followed by perturbed clones, ``n_total`` in all (see the module docstring).

    Deterministic: the same ``products``, ``n_total`` and ``seed`` give the same stream. Raises
    ``ValueError`` when ``n_total`` is smaller than ``len(products)``.
    """
    n = len(products)
    if n_total < n:
        raise ValueError(f"n_total: {n_total} < {n} real products")
    per, extra = divmod(n_total - n, n)
    vocab: dict[str, list[str]] = defaultdict(list)
    for p in products:
        vocab[p.category or "?"].extend(p.title.split())
    for i, p in enumerate(products):
        yield p
        words = p.title.split()
        cat_vocab = vocab[p.category or "?"]
        for j in range(1, per + 1 + (1 if i < extra else 0)):
            rng = random.Random(f"{seed}:{p.product_id}:{j}")
            title = [rng.choice(cat_vocab) if rng.random() < 0.25 else w for w in words]
            if len(title) > 2 and rng.random() < 0.5:
                k = rng.randrange(len(title) - 1)
                title[k], title[k + 1] = title[k + 1], title[k]
            factor = rng.uniform(0.85, 1.20)
            seller = f"{p.brand or p.shop} partner {rng.randint(1, 40)}"
            desc = p.description
            if desc:
                sentences = desc.split(". ")
                rng.shuffle(sentences)
                desc = ". ".join(sentences)
            rating = None if p.rating is None else round(min(5.0, max(1.0, p.rating + rng.uniform(-0.3, 0.3))), 1)
            yield p.model_copy(
                update={
                    "product_id": f"{p.product_id}~{j:02d}",
                    "title": " ".join(title),
                    "seller": seller,
                    "shop_id": make_shop_id(p.shop, seller, p.brand),
                    "price": None if p.price is None else round(p.price * factor, 2),
                    "list_price": None if p.list_price is None else round(p.list_price * factor, 2),
                    "description": desc,
                    "rating": rating,
                }
            )


# --------------------------------------------------------------------------- builds (subprocess)


def build_only(
    scale: str, catalog: Path, index_dir: Path, threads: int, n_large: int, seed: int, rebuild: bool
) -> dict:
    """Build (or reuse) one index in this process and describe it (JSON-able)."""
    from shopping_companion.catalog.index import INDEX_FORMAT_VERSION, build_index, open_or_build

    load_before = os.getloadavg()
    t0 = time.perf_counter()
    if scale == "real":
        before = read_manifest(index_dir) if index_dir.is_dir() else None
        manifest = open_or_build(catalog, index_dir, threads=threads, rebuild=rebuild)
        rebuilt = before is None or before.built_at != manifest.built_at
    else:
        want = f"perturbed-v{PERTURB_VERSION}:{seed}:{n_large}:{catalog_hash(catalog)}"
        m = read_manifest(index_dir) if index_dir.is_dir() else None
        if m is not None and not rebuild and m.catalog_hash == want and m.format_version == INDEX_FORMAT_VERSION:
            manifest, rebuilt = m, False
        else:
            products, _ = load_products(catalog)
            manifest = build_index(
                perturbed_catalog(products, n_large, seed), index_dir, threads=threads, catalog_hash=want
            )
            rebuilt = True
    wall = time.perf_counter() - t0
    return {
        "scale": scale,
        "rebuilt": rebuilt,
        "wall_s": round(wall, 1),
        "build_seconds": manifest.build_seconds,
        "phase_seconds": manifest.phase_seconds,
        "n_docs": manifest.n_docs,
        "size_mb": round(index_size_bytes(index_dir) / 2**20, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 0),
        "threads": manifest.threads,
        "loadavg_before": [round(x, 1) for x in load_before],
        "loadavg_after": [round(x, 1) for x in os.getloadavg()],
    }


# --------------------------------------------------------------------------- latency


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
    return f"  {name:<38} p50 {pct(ms, 50):6.2f}  p95 {pct(ms, 95):6.2f}  p99 {pct(ms, 99):6.2f} ms"


def measure(index_dir: Path, products: list[Product], n_queries: int, seed: int) -> dict:
    from shopping_companion.catalog.index import FIELD_CONTENTS, FIELD_PRICE, FIELD_SHOP
    from shopping_companion.catalog.jvm import JNI_LOCK, detach_thread
    from shopping_companion.catalog.jvm import ensure_jvm
    from shopping_companion.catalog.search import ProductSearch, _cents_ceil, _cents_floor

    ensure_jvm()  # before pyserini.pyclass, which would otherwise start a JVM of its own
    from pyserini.pyclass import autoclass

    t = time.perf_counter()
    s = ProductSearch(index_dir)
    open_s = time.perf_counter() - t
    simple = autoclass("io.anserini.search.SimpleSearcher")(str(index_dir.resolve()))
    JHashMap = autoclass("java.util.HashMap")

    def lucene_query(q: str, shop: str | None, lo: float | None, hi: float | None):
        with JNI_LOCK:
            query = s._qgen.buildQuery(FIELD_CONTENTS, s._analyzer, q)
            if shop is None and lo is None:
                return query
            b = s._Builder()
            b.add(query, s._MUST)
            if shop is not None:
                b.add(s._KeywordField.newExactQuery(FIELD_SHOP, shop), s._FILTER)
            if lo is not None:
                b.add(s._LongField.newRangeQuery(FIELD_PRICE, _cents_ceil(lo), _cents_floor(hi)), s._FILTER)
            return b.build()

    def bare(q, k, jq=None):
        """What pyserini.search.lucene.LuceneSearcher.search(q, k) runs."""
        JHashMap()  # LuceneSearcher.search builds its (empty) fields map first
        hits = simple.search(q, k) if jq is None else simple.search(jq, k)
        docids, out = set(), []
        for h in hits:
            if h.docid in docids:
                continue
            docids.add(h.docid)
            out.append(h)
        return out

    qs = make_queries(products, n_queries, seed)
    for q, _ in qs[:100]:  # warm up JIT and caches
        s.search(q, top_k=50)
        bare(q, 50)
    res: dict = {"open_s": round(open_s, 2), "rows": {}}
    lines = []
    for k in (10, 50):
        cases = {
            "no filter": [(q, None, None, None) for q, p in qs],
            "shop filter": [(q, p.shop_id, None, None) for q, p in qs],
            "price filter": [(q, None, *price_range(p)) for q, p in qs],
            "shop + price filter": [(q, p.shop_id, *price_range(p)) for q, p in qs],
        }
        for name, args in cases.items():
            ours = timed(lambda q, sh, lo, hi: s.search(q, shop_id=sh, min_price=lo, max_price=hi, top_k=k), args)
            if name == "no filter":
                theirs = timed(lambda q, sh, lo, hi: bare(q, k), args)
            else:  # the bare call with the same Lucene query (built outside the timing)
                prepared = [(lucene_query(*a),) for a in args]
                theirs = timed(lambda jq: bare(None, k, jq), prepared)
            if name == "no filter":  # for reference: the same Lucene top-k search alone (ids and scores)
                lucene = timed(
                    lambda q, sh, lo, hi: [
                        (d.doc, d.score)
                        for d in s._index_searcher.search(lucene_query(q, None, None, None), k).scoreDocs
                    ],
                    args,
                )
                res["rows"][f"k={k} lucene top-k alone"] = {"ours": [round(pct(lucene, x), 2) for x in (50, 95, 99)]}
                lines.append(row(f"k={k} no filter: Lucene top-k alone", lucene))
            ratio = sorted(a / b for a, b in zip(ours, theirs))[len(ours) // 2]
            res["rows"][f"k={k} {name}"] = {
                "ours": [round(pct(ours, x), 2) for x in (50, 95, 99)],
                "bare": [round(pct(theirs, x), 2) for x in (50, 95, 99)],
                "ratio_median": round(ratio, 2),
                "ratio_p50": round(pct(ours, 50) / pct(theirs, 50), 2),
            }
            lines.append(row(f"k={k} {name}", ours))
            lines.append(row(f"k={k} {name}: bare LuceneSearcher", theirs))
            lines.append(
                f"  {'':38} tool layer / bare: median per-query ratio {ratio:.2f}, "
                f"p50 ratio {pct(ours, 50) / pct(theirs, 50):.2f}"
            )
    rng = random.Random(seed + 1)
    ids = [p.product_id for p in products]
    v1 = timed(s.view, [([rng.choice(ids)],) for _ in range(len(qs))])
    v10 = timed(s.view, [([rng.choice(ids) for _ in range(10)],) for _ in range(len(qs) // 2)])
    res["rows"]["view 1 id"] = {"ours": [round(pct(v1, x), 2) for x in (50, 95, 99)]}
    res["rows"]["view 10 ids"] = {"ours": [round(pct(v10, x), 2) for x in (50, 95, 99)]}
    lines += [row("product_view 1 id", v1), row("product_view 10 ids", v10)]

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
    res["throughput_qps"] = [round(t1), round(t2)]
    lines.append(f"  throughput k=10 no filter: 1 thread {t1:.0f} q/s, 2 threads {t2:.0f} q/s")
    res["lines"] = lines
    simple.close()
    s.close()
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--scales", default="real,1.3m", help="comma-separated: real, 1.3m")
    ap.add_argument("--work-dir", default=None, help="index parent directory (default: <cache>/indexes/bench)")
    ap.add_argument("--rebuild", action="store_true", help="rebuild even if a fresh index exists")
    ap.add_argument("--threads", type=int, default=2, help="indexing threads")
    ap.add_argument("--queries", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n-large", type=int, default=1_300_000)
    ap.add_argument("--build-only", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()

    catalog = resolve_data_dir(a.data_dir) / "catalog" / "products.jsonl.gz"
    work = Path(a.work_dir) if a.work_dir else cache_dir() / "indexes" / "bench"
    dirs = {"real": work / "real", "1.3m": work / f"perturbed-{a.n_large}-s{a.seed}"}
    if a.build_only:
        info = build_only(a.build_only, catalog, dirs[a.build_only], a.threads, a.n_large, a.seed, a.rebuild)
        print("BUILD " + json.dumps(info))
        return

    scales = [x.strip() for x in a.scales.split(",") if x.strip()]
    products, report = load_products(catalog)
    print(f"catalog: {report.summary()}")
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start")
    summary = {}
    for scale in scales:
        cmd = [
            sys.executable,
            __file__,
            "--build-only",
            scale,
            "--work-dir",
            str(work),
            "--threads",
            str(a.threads),
            "--n-large",
            str(a.n_large),
            "--seed",
            str(a.seed),
        ] + (["--rebuild"] if a.rebuild else [])
        if a.data_dir:
            cmd += ["--data-dir", a.data_dir]
        out = subprocess.run(cmd, capture_output=True, text=True)
        line = next((x for x in out.stdout.splitlines() if x.startswith("BUILD ")), None)
        if out.returncode != 0 or line is None:
            sys.exit(f"build of {scale} failed:\n{out.stderr[-3000:]}")
        b = json.loads(line[len("BUILD ") :])
        print(f"\n== {scale}: {b['n_docs']:,} products, index {b['size_mb']} MB at {dirs[scale]}")
        phases = ", ".join(f"{k} {v:.1f}" for k, v in b["phase_seconds"].items())
        state = "built now" if b["rebuilt"] else "reused; build time from its manifest"
        print(
            f"build ({state}): {b['build_seconds']:.1f} s ({phases}; {b['threads']} threads); "
            f"process wall {b['wall_s']} s incl. loading, peak RSS {b['peak_rss_mb']:.0f} MB; "
            f"load average {b['loadavg_before'][0]} -> {b['loadavg_after'][0]}"
        )
        r = measure(dirs[scale], products, a.queries, a.seed)
        print(
            f"open ProductSearch: {r['open_s']} s; latency over {a.queries} queries, one thread "
            f"(load average now {os.getloadavg()[0]:.1f}):"
        )
        print("\n".join(r["lines"]))
        summary[scale] = {"build": b, "latency": r["rows"], "throughput_qps": r["throughput_qps"]}
    print("\nSUMMARY " + json.dumps(summary))


if __name__ == "__main__":
    main()
