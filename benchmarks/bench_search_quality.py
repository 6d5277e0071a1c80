"""Product search relevance on attribute queries over the real catalog: recall@10 and recall@50.

For ``--n`` products sampled (seeded) from the real catalog, a query is made of 3-5 words taken
from the product's own attributes -- never from its title field -- and ``product_search`` (BM25,
k=50, no filters) must return the product. Target: recall@50 >= 0.90.

How the words are picked (deterministic from ``--seed``):

1. The product's attribute words: lower-cased words as the index tokenizes them (2+ characters, not English
   stop words, not ``na``) of its brand, its attribute values (not the attribute names), its
   option values (sizes, colours) and its category path levels, in that order, distinct. When
   these give fewer than 3 words (e.g. BigBasket and Amazon 2018 products carry only a brand and
   a category), the pool is topped up with words of the features, then of the description.
   Products whose pool still has fewer than 3 words are skipped (the next sampled one is used).
2. The query length L is drawn uniformly from 3..5 (at most the pool size).
3. ``--mode distinct`` (the quality figure; a known-item search: the shopper names the product
   by the attributes that set it apart): L words are chosen greedily, each time the pool word
   that leaves the fewest catalog products containing every chosen word (word containment as
   in the indexed text; ties broken at random).
   ``--mode idf``: L words drawn at random without replacement, with probability proportional
   to ``log(N / df)`` (df: catalog products whose indexed text contains the word).
   ``--mode uniform``: L words drawn uniformly. These two also produce queries that many
   products satisfy as fully as the target (e.g. "uk8 uk9 uk10": 3,168 products contain all
   three words); no ranking can put the target in the top 50 then. The script reports how many
   queries are such ambiguous ones (> 50 products contain all their words).
4. The words are joined in pool order (brand, attributes, options, category).

Prints recall@10, recall@50, per-source recall@50, the ambiguous-query count, mean query length
and the misses (``-v``: all of them).

    python benchmarks/bench_search_quality.py [--index-dir DIR] [--n 200] [--seed 0] [--mode distinct|idf|uniform] [-v]
"""

from __future__ import annotations

import argparse
import math
import random
import re
import time
from collections import defaultdict
from pathlib import Path

from shopping_companion.catalog.index import contents_text, open_or_build
from shopping_companion.catalog.loader import load_products
from shopping_companion.catalog.search import ProductSearch
from shopping_companion.paths import cache_dir, resolve_data_dir
from shopping_companion.types import Product

STOP = set(
    "a an and are as at be but by for if in into is it no not of on or such that the their then there these "
    "they this to was will with na nan none".split()
)
#: Words as Lucene's standard tokenizer cuts them for these texts: letters/digits, keeping inner
#: dots, commas and apostrophes between them ("us8.5", "1,299", "men's" stay one word).
_WORD = re.compile(r"[a-z0-9]+(?:[.,'’][a-z0-9]+)*")


def words(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.lower()) if len(w) >= 2 and w not in STOP]


def attribute_pool(p: Product) -> list[str]:
    """Step 1 of the module docstring."""
    parts = [p.brand or ""] + list(p.attributes.values())
    parts += [v for vals in p.options.values() for v in vals]
    parts += p.category_path
    pool = list(dict.fromkeys(w for part in parts for w in words(part)))
    if len(pool) < 3:
        for extra in [*p.features, p.description or ""]:
            for w in words(extra):
                if w not in pool:
                    pool.append(w)
            if len(pool) >= 3:
                break
    return pool


class WordIndex:
    """Which catalog products contain a word in their indexed text (:func:`contents_text`)."""

    def __init__(self, products: list[Product]) -> None:
        self.n = len(products)
        self.postings: dict[str, set[int]] = defaultdict(set)
        for i, p in enumerate(products):
            for w in set(words(contents_text(p))):
                self.postings[w].add(i)

    def df(self, w: str) -> int:
        return len(self.postings.get(w, ()))

    def containing_all(self, ws: list[str]) -> int:
        sets = sorted((self.postings.get(w, set()) for w in ws), key=len)
        return len(set.intersection(*sets)) if sets else self.n


def make_query(p: Product, rng: random.Random, wi: WordIndex, mode: str) -> str | None:
    """Steps 1-4 of the module docstring; None when the pool has fewer than 3 words."""
    pool = attribute_pool(p)
    if len(pool) < 3:
        return None
    k = min(rng.randint(3, 5), len(pool))
    if mode == "distinct":
        chosen_words: list[str] = []
        cand: set[int] | None = None
        for _ in range(k):
            options = [w for w in pool if w not in chosen_words]
            rng.shuffle(options)
            best = None
            for w in options:
                c = wi.postings.get(w, set()) if cand is None else cand & wi.postings.get(w, set())
                if best is None or len(c) < len(best[1]):
                    best = (w, c)
            chosen_words.append(best[0])
            cand = best[1]
        return " ".join(w for w in pool if w in chosen_words)
    weights = [1.0 if mode == "uniform" else math.log(wi.n / max(1, wi.df(w))) + 1e-3 for w in pool]
    chosen: set[int] = set()
    while len(chosen) < k:  # weighted sampling without replacement
        r = rng.random() * sum(w for i, w in enumerate(weights) if i not in chosen)
        for i, w in enumerate(weights):
            if i in chosen:
                continue
            r -= w
            if r <= 0:
                chosen.add(i)
                break
        else:
            chosen.add(max(set(range(len(pool))) - chosen))
    return " ".join(pool[i] for i in sorted(chosen))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--index-dir", default=None, help="default: <cache>/indexes/products-bm25 (the CLI's)")
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--mode",
        choices=("distinct", "idf", "uniform"),
        default="distinct",
        help="how query words are picked (see the module docstring)",
    )
    ap.add_argument("-v", "--verbose", action="store_true", help="print every miss")
    a = ap.parse_args()

    catalog = resolve_data_dir(a.data_dir) / "catalog" / "products.jsonl.gz"
    index_dir = Path(a.index_dir) if a.index_dir else cache_dir() / "indexes" / "products-bm25"
    products, _ = load_products(catalog)
    manifest = open_or_build(catalog, index_dir)
    wi = WordIndex(products)
    rng = random.Random(a.seed)
    sample = []
    for p in rng.sample(products, len(products)):
        q = make_query(p, rng, wi, a.mode)
        if q is not None:
            sample.append((p, q))
        if len(sample) == a.n:
            break

    hit10 = hit50 = ambiguous = 0
    by_source: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    misses = []
    t = time.perf_counter()
    with ProductSearch(index_dir) as s:
        for p, q in sample:
            ids = [h["product_id"] for h in s.search(q, top_k=50)]
            rank = ids.index(p.product_id) + 1 if p.product_id in ids else None
            hit10 += rank is not None and rank <= 10
            hit50 += rank is not None
            by_source[p.source][0] += rank is not None
            by_source[p.source][1] += 1
            ambiguous += wi.containing_all(words(q)) > 50
            if rank is None:
                misses.append((p, q))
    wall = time.perf_counter() - t
    n = len(sample)
    print(
        f"index: {manifest.n_docs} products, format v{manifest.format_version}; {n} queries "
        f"(mode {a.mode}, mean {sum(len(q.split()) for _, q in sample) / n:.2f} words, {ambiguous} ambiguous: "
        f"> 50 products contain all their words), {1000 * wall / n:.1f} ms/query"
    )
    print(f"recall@10 = {hit10 / n:.3f}   recall@50 = {hit50 / n:.3f}   (target recall@50 >= 0.90)")
    print(
        "recall@50 by source: "
        + ", ".join(f"{src} {h}/{t}" for src, (h, t) in sorted(by_source.items(), key=lambda x: -x[1][1]))
    )
    for p, q in misses if a.verbose else misses[:5]:
        print(
            f"  miss: {q!r:45} ({wi.containing_all(words(q))} products contain all words) -> "
            f"{p.product_id} {p.title[:50]!r}"
        )


if __name__ == "__main__":
    main()
