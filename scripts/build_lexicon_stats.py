#!/usr/bin/env python
"""Read-only coverage report of the matching lexicons against the real catalog.

For every product attribute field of the catalog, prints the canonical key it resolves to (via
``keys.yaml`` aliases / secondary names) and, for keys with a vocabulary, how many of the field's
distinct values (and products) resolve to a concept, with the unresolved values. Also lists fields that
resolve to no key. Nothing is written.

    python scripts/build_lexicon_stats.py [--catalog ../shared/data/catalog/products.jsonl.gz] [--all]

The resolver is deliberately the same small one as tests/judges/test_lexicon_data.py (exact normalised
form, then the form with the vocabulary's modifier words removed), not the matcher's, so the data can
be reviewed on its own.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "judges"))

import test_lexicon_data as L  # noqa: E402  (the test's loader and normaliser)

ABSENT = {"na", "n a", "", "none", "other", "others"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--catalog", type=Path, default=ROOT.parent / "shared" / "data" / "catalog" / "products.jsonl.gz")
    ap.add_argument("--all", action="store_true", help="also list fields with a resolution rate of 100%%")
    ap.add_argument("--top", type=int, default=40, help="unresolved values listed per field (most frequent first)")
    args = ap.parse_args()
    keys = L._load(L.DATA / "keys.yaml")
    vocabs = {p.stem: L._load(p) for p in sorted((L.DATA / "values").glob("*.yaml"))}
    vocabs["product_type"] = L._load(L.DATA / "product_types.yaml")
    resolve = L._resolver(keys, vocabs)

    n_alias = sum(len(d["aliases"]) + len(d.get("secondary", [])) for d in keys["keys"].values())
    print(f"keys.yaml v{keys['version']}: {len(keys['keys'])} keys, {n_alias} aliases/secondary names")
    for stem, v in sorted(vocabs.items()):
        n_forms = sum(len(c["forms"]) for c in v["concepts"].values())
        n_broader = sum(len(c.get("broader", [])) for c in v["concepts"].values())
        print(
            f"  {stem:18s} v{v['version']}: {len(v['concepts']):4d} concepts, {n_forms:5d} forms, {n_broader:4d} broader links"
        )

    values: dict[tuple[str, str], Counter] = defaultdict(Counter)
    with gzip.open(args.catalog, "rt", encoding="utf-8") as f:
        for line in f:
            p = json.loads(line)
            for k, v in (p.get("attributes") or {}).items():
                key, _ = resolve(k, "")
                multi = bool(key and keys["keys"][key].get("multi_valued"))
                for part in str(v).split(",") if multi else [str(v)]:
                    if L.norm(part) not in ABSENT:
                        values[(p["source"], k)][part.strip()] += 1
            if p["source"] == "bestbuy_algolia" and (p.get("title") or "").count(" - ") >= 2:
                suffix = re.sub(r"\s*\(.*\)$", "", p["title"].split(" - ")[-1]).strip()
                for part in re.split(r"\s*[/,&]\s*", suffix):
                    if part:
                        values[("bestbuy_algolia", "title colour suffix -> colour")][part] += 1

    print("\nfield -> key: value coverage (distinct values, products)")
    unmapped = []
    for (src, field), c in sorted(values.items(), key=lambda x: (x[0][0], -sum(x[1].values()))):
        key, _ = resolve("colour" if field.startswith("title colour") else field, "")
        if key is None:
            unmapped.append(f"{src}/{field} ({sum(c.values())})")
            continue
        voc = keys["keys"][key].get("vocabulary")
        if voc is None:
            continue
        fname = "colour" if field.startswith("title colour") else field
        ok = {v for v in c if resolve(fname, v)[1] is not None}
        prod_ok, prod = sum(c[v] for v in ok), sum(c.values())
        if len(ok) == len(c) and not args.all:
            continue
        miss = ", ".join(f"{v} ({c[v]})" for v, _ in c.most_common(args.top) if v not in ok)
        print(
            f"  {src}/{field} -> {key} [{voc}]: {len(ok)}/{len(c)} values, {prod_ok}/{prod} products "
            f"({100 * prod_ok / prod:.1f}%)" + (f"; unresolved: {miss}" if miss else "")
        )
    print("\nfields resolving to no key (ignored by the matcher):")
    print("  " + "; ".join(unmapped))


if __name__ == "__main__":
    main()
