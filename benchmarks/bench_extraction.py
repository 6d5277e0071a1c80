"""Attribute extraction (``shopping_companion/catalog/extract.py``): precision, recall, speed, coverage.

(a) **Precision** on hand labels: ``benchmarks/data/extraction_labels.jsonl`` holds one line per
    labelled extraction, ``{product_id, key, value, correct, note}`` (ids, keys, short values and
    the label only; no product text). The benchmark recomputes every extraction of the catalog,
    joins them with the labels on ``(product_id, key, value)`` and prints precision overall and per
    source. Extractions of the labelling sample (:func:`label_sample`: deterministic, stratified,
    ``--per-source`` per source) that have no label are listed: a changed extractor is relabelled,
    never silently scored. Labels whose extraction no longer happens are counted as stale.
(b) **Recall** against structured fields: for products that HAVE a structured field, the field is
    hidden (removed from ``attributes``) and the extractor run again; per key: recall = share of
    products where the key is extracted, agreement = share of those where the extracted value is
    equivalent to the hidden one by the value matcher (``ValueMatcher.equivalent``; for
    quantities equal within 2 %).
(c) **Time and coverage**: wall-clock and CPU seconds of extraction over the whole catalog (loading
    excluded; median of ``--runs``), and the share of products per source with ≥ 1 / ≥ 2 extracted
    attributes.

Usage::

    python benchmarks/bench_extraction.py [--runs 3] [--per-source 35] [--show-unlabelled 50]
    python benchmarks/bench_extraction.py --dump-sample SOURCE   # the sample to label, with text
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

from shopping_companion.catalog.extract import extract_attributes
from shopping_companion.catalog.loader import load_products
from shopping_companion.judges.matching.values import default_matcher
from shopping_companion.paths import resolve_data_dir
from shopping_companion.types import Product

LABELS = Path(__file__).parent / "data" / "extraction_labels.jsonl"

#: (source, structured field hidden, canonical key it resolves to) for the recall table
RECALL_FIELDS: list[tuple[str, str]] = [
    ("myntra_styles", "base_colour"),
    ("myntra_styles", "Fabric"),
    ("myntra_styles", "Sleeve Length"),
    ("myntra_styles", "Neck"),
    ("myntra_styles", "Pattern"),
    ("myntra_styles", "Fit"),
    ("myntra_catalog", "primary_color"),
    ("adidas_us", "color"),
    ("ikea_sa", "width_cm"),
    ("ikea_sa", "height_cm"),
    ("ikea_sa", "depth_cm"),
]


def _h(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()


def label_sample(results: list[tuple[Product, dict]], per_source: int) -> list[tuple[Product, str, str, object]]:
    """Deterministic stratified sample of extractions to label: per source, the ``per_source``
    extractions with the smallest SHA-256 of ``(product_id, key)``, taking at most 2 keys of any
    one product and spreading keys (round-robin over the keys the source extracts)."""
    by_src: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for p, found in results:
        for k, (v, s) in found.items():
            by_src[p.source][k].append((_h(p.product_id, k), p, k, v, s))
    out = []
    for src in sorted(by_src):
        queues = {k: sorted(lst, key=lambda x: x[0]) for k, lst in sorted(by_src[src].items())}
        taken: list = []
        per_product: Counter[str] = Counter()
        while len(taken) < per_source and any(queues.values()):
            for k in list(queues):
                while queues[k]:
                    _, p, kk, v, s = queues[k].pop(0)
                    if per_product[p.product_id] < 2:
                        per_product[p.product_id] += 1
                        taken.append((p, kk, v, s))
                        break
                if len(taken) >= per_source:
                    break
        out += taken
    return out


def _load_labels() -> dict[tuple[str, str, str], dict]:
    labels: dict[tuple[str, str, str], dict] = {}
    if LABELS.exists():
        for line in LABELS.read_text(encoding="utf-8").splitlines():
            if line.strip():
                r = json.loads(line)
                labels[(r["product_id"], r["key"], r["value"])] = r
    return labels


def precision(results: list[tuple[Product, dict]], per_source: int, show: int) -> None:
    labels = _load_labels()
    current = {(p.product_id, k, v): p.source for p, found in results for k, (v, _) in found.items()}
    by_src: dict[str, list[bool]] = defaultdict(list)
    for key, lab in labels.items():
        src = current.get(key)
        if src is not None:
            by_src[src].append(bool(lab["correct"]))
    stale = [k for k in labels if k not in current]
    n = sum(len(v) for v in by_src.values())
    ok = sum(sum(v) for v in by_src.values())
    print(f"(a) precision on hand labels: {ok}/{n} = {ok / max(n, 1):.3f} ({len(stale)} stale labels)")
    for src in sorted(by_src):
        v = by_src[src]
        print(f"    {src:24s} {sum(v):4d}/{len(v):4d} = {sum(v) / len(v):.3f}")
    wrong = Counter(k[1] for k, lab in labels.items() if k in current and not lab["correct"])
    if wrong:
        print(f"    wrong by key: {dict(wrong.most_common())}")
    sample = label_sample(results, per_source)
    missing = [(p, k, v, s) for p, k, v, s in sample if (p.product_id, k, v) not in labels]
    print(f"    sample of {len(sample)} extractions ({per_source}/source): {len(missing)} not labelled yet")
    for p, k, v, s in missing[:show]:
        print(f"      UNLABELLED {p.product_id} {k}={v!r} [{s.source}: {s.span!r}]")


def recall(products: list[Product]) -> None:
    m = default_matcher()
    print("(b) recall against hidden structured fields (agreement = matcher-equivalent values):")
    for src, field in RECALL_FIELDS:
        rk = m.key(field)
        key = rk.spec.name if rk.spec else field
        n = got = agree = 0
        for p in products:
            if p.source != src or field not in p.attributes or p.extracted(field):
                continue
            truth = p.attributes[field]
            # hide every structured field of the key (base_colour and colour1 alike)
            hidden = {k: v for k, v in p.attributes.items() if m.key(k).spec is None or m.key(k).spec.name != key}
            q = p.model_copy(update={"attributes": hidden, "attribute_sources": {}, "options": {}})
            n += 1
            found = extract_attributes(q, m)
            if key in found:
                got += 1
                val = found[key][0]
                if m.equivalent(rk, truth, val) or m.satisfies(rk, truth, val, fallback=False):
                    agree += 1
        print(
            f"    {src:15s} {field:14s} -> {key:14s} n={n:6d} recall={got / max(n, 1):.3f} "
            f"agreement={agree / max(got, 1):.3f} ({agree}/{got})"
        )


def speed_and_coverage(products: list[Product], runs: int) -> list[tuple[Product, dict]]:
    m = default_matcher()
    walls, cpus = [], []
    results: list[tuple[Product, dict]] = []
    for _ in range(runs):
        t0, c0 = time.perf_counter(), time.process_time()
        results = [(p, extract_attributes(p, m)) for p in products]
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    print(
        f"(c) extraction over {len(products):,} products: median {statistics.median(walls):.1f} s wall, "
        f"{statistics.median(cpus):.1f} s CPU over {runs} runs (first run {walls[0]:.1f} s, cold caches)"
    )
    cov: dict[str, list[int]] = defaultdict(list)
    for p, found in results:
        cov[p.source].append(len(found))
    for src in sorted(cov):
        v = cov[src]
        keys = Counter(k for p, f in results if p.source == src for k in f)
        print(
            f"    {src:24s} n={len(v):6d} >=1: {sum(x >= 1 for x in v) / len(v):.3f} "
            f">=2: {sum(x >= 2 for x in v) / len(v):.3f}  top keys: "
            + ", ".join(f"{k} {c}" for k, c in keys.most_common(6))
        )
    return results


def dump_sample(results: list[tuple[Product, dict]], source: str, per_source: int) -> None:
    """Print the labelling sample of one source with the text the labeller needs."""
    for p, k, v, s in label_sample(results, per_source):
        if p.source != source:
            continue
        print(
            json.dumps(
                {
                    "id": p.product_id,
                    "key": k,
                    "value": v,
                    "src": s.source,
                    "span": s.span,
                    "title": p.title,
                    "cat": " > ".join(p.category_path),
                    "desc": (p.description or "")[:260],
                },
                ensure_ascii=False,
            )
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--per-source", type=int, default=35)
    ap.add_argument("--show-unlabelled", type=int, default=50)
    ap.add_argument("--dump-sample", metavar="SOURCE", default=None)
    ap.add_argument("--catalog", default=None, help="catalog file (default: <data dir>/catalog/products.jsonl.gz)")
    args = ap.parse_args()
    path = Path(args.catalog) if args.catalog else resolve_data_dir() / "catalog" / "products.jsonl.gz"
    products, _ = load_products(path, extract=False)
    default_matcher()  # lexicon loaded outside the timed runs
    if args.dump_sample:
        results = [(p, extract_attributes(p)) for p in products]
        dump_sample(results, args.dump_sample, args.per_source)
        return
    results = speed_and_coverage(products, max(1, args.runs))
    precision(results, args.per_source, args.show_unlabelled)
    recall(products)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
