"""Class shares of the error taxonomy (App. F, Table 7) over one results file, re-measurable.

Reads ``RESULTS.jsonl`` (the newest line per episode key, as the reports do), classifies every
scored failure with :func:`shopping_companion.benchmark.taxonomy.classify_failures` and prints,
per category, the failures whose primary category it is (count and share) and the failures it
labels at all (primary or secondary), then ``--examples`` evidence strings per primary category.

``--bench DIR`` (a ``shopcomp synth`` directory) gives the rules the tasks: gold preferences,
needle sessions, voucher and number of products; without it the rules that need them fall back to
the verdict counts. ``--catalog`` also loads the product catalog of the data directory as the
lookup (shops and unknown ids the trajectory does not show; slow: the whole catalog is read).
``--module FILE`` classifies with another copy of the taxonomy module (e.g. an older release, to
measure before -> after). ``--json OUT`` writes the figures as JSON. Usage::

    python benchmarks/bench_taxonomy.py RESULTS.jsonl [--bench DIR] [--strategy two_stage:none]
        [--catalog] [--module FILE] [--examples 2] [--json OUT]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from shopping_companion.benchmark import taxonomy as default_taxonomy
from shopping_companion.benchmark.metrics import scored, strategy_of
from shopping_companion.benchmark.report import final_results, read_results


def _load_module(path: str) -> Any:
    spec = importlib.util.spec_from_file_location("taxonomy_under_test", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"--module {path}: not a Python file")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up while the class is built
    spec.loader.exec_module(mod)
    return mod


def _catalog_lookup() -> Any:
    from shopping_companion.catalog.loader import iter_products
    from shopping_companion.paths import resolve_data_dir

    products = {p.product_id: p for p in iter_products(resolve_data_dir() / "catalog" / "products.jsonl.gz")}
    return lambda ids: {i: products[i] for i in ids if i in products}


def measure(
    results_path: str | Path,
    bench: str | Path | None = None,
    strategy: str | None = None,
    module: Any = None,
    lookup: Any = None,
    n_examples: int = 2,
) -> dict[str, Any]:
    """The taxonomy figures of one results file.

    Returns ``{"results", "n_episodes", "n_scored", "n_failures", "primary": {category: {"n",
    "share"}}, "labels": {category: n}, "examples": {category: [evidence, ...]}}``; shares are of
    the failures (None when there are none). ``module``: the taxonomy module (default: the
    installed one).
    """
    T = module or default_taxonomy
    results = final_results(read_results(results_path))
    if strategy:
        results = [r for r in results if strategy_of(r) == strategy]
    tasks = None
    if bench is not None:
        from shopping_companion.benchmark.synth import load_benchmark

        tasks = {t.task_id: t for t in load_benchmark(bench).tasks}
    items = T.classify_failures(results, tasks, lookup)
    n = len(items)
    prim = Counter(it.primary for it in items)
    labs = Counter(c for it in items for c in (it.labels or ["other"]))
    examples: dict[str, list[str]] = {}
    for it in items:
        ev = it.evidence.get(it.primary, []) if isinstance(it.evidence, dict) else []
        ex = examples.setdefault(it.primary, [])
        if ev and len(ex) < n_examples:
            ex.append(f"{it.task_id}: {ev[0]}")
    return {
        "results": str(results_path),
        "n_episodes": len(results),
        "n_scored": len(scored(results)),
        "n_failures": n,
        "primary": {c: {"n": k, "share": k / n if n else None} for c, k in prim.most_common()},
        "labels": dict(labs.most_common()),
        "examples": examples,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", help="results.jsonl of a `shopcomp eval` run")
    ap.add_argument("--bench", help="benchmark directory (tasks: gold preferences, needles, voucher)")
    ap.add_argument("--strategy", help="only episodes of this strategy, e.g. two_stage:none")
    ap.add_argument("--catalog", action="store_true", help="load the product catalog as the lookup (slow)")
    ap.add_argument("--module", help="classify with this copy of taxonomy.py instead of the installed one")
    ap.add_argument("--examples", type=int, default=2, help="evidence strings shown per primary category")
    ap.add_argument("--json", help="also write the figures to this JSON file")
    a = ap.parse_args(argv)
    mod = _load_module(a.module) if a.module else None
    lookup = _catalog_lookup() if a.catalog else None
    m = measure(a.results, a.bench, a.strategy, mod, lookup, a.examples)
    labels = getattr(mod or default_taxonomy, "CATEGORY_LABELS", {})
    print(f"{m['results']}: {m['n_episodes']} episodes, {m['n_scored']} scored, {m['n_failures']} failed")
    print(f"{'category':<30} {'primary':>8} {'share':>7} {'labels':>7}")
    cats = list(m["primary"]) + [c for c in m["labels"] if c not in m["primary"]]
    for c in cats:
        p = m["primary"].get(c, {"n": 0, "share": 0.0})
        share = f"{100 * p['share']:.1f}%" if p["share"] is not None else "-"
        print(f"{labels.get(c, c):<30} {p['n']:>8} {share:>7} {m['labels'].get(c, 0):>7}")
    for c, ex in m["examples"].items():
        for e in ex:
            print(f"  [{c}] {e}")
    if a.json:
        Path(a.json).write_text(json.dumps(m, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
