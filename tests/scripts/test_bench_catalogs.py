"""The synthetic 1.3M catalog and the attribute queries of the benchmark scripts behave as their
docstrings say (deterministic, counts, which fields change), on real products."""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def sample(catalog_products):
    rng = random.Random(11)
    return rng.sample(catalog_products, 300)


def test_perturbed_catalog(sample):
    bench = _load("bench_product_search")
    n_total = 300 * 13 + 17
    a = list(bench.perturbed_catalog(sample, n_total, seed=3))
    b = list(bench.perturbed_catalog(sample, n_total, seed=3))
    assert a == b and len(a) == n_total  # deterministic, exact size
    assert len({p.product_id for p in a}) == n_total
    assert list(bench.perturbed_catalog(sample, n_total, seed=4)) != a
    by_id = {p.product_id: p for p in sample}
    originals = [p for p in a if p.product_id in by_id]
    assert originals == sample  # every real product kept unchanged, in order
    clones = [p for p in a if "~" in p.product_id]
    assert len(clones) == n_total - 300
    counts = {}
    for c in clones:
        base = by_id[c.product_id.rsplit("~", 1)[0]]
        counts[base.product_id] = counts.get(base.product_id, 0) + 1
        for field in ("brand", "category_path", "attributes", "options", "features", "currency", "shop", "source"):
            assert getattr(c, field) == getattr(base, field), field
        if base.price is None:
            assert c.price is None
        else:
            assert 0.85 * base.price - 0.01 <= c.price <= 1.20 * base.price + 0.01
        assert c.shop_id != base.shop_id and "-partner-" in c.shop_id and c.seller.endswith(tuple("0123456789"))
        assert sorted((c.description or "").split(". ")) == sorted((base.description or "").split(". "))
        assert len(c.title.split()) == len(base.title.split())
    assert sorted(set(counts.values())) == [12, 13] and sum(v == 13 for v in counts.values()) == 17
    changed = sum(c.title != by_id[c.product_id.rsplit("~", 1)[0]].title for c in clones)
    assert changed > 0.6 * len(clones)  # most titles are perturbed
    with pytest.raises(ValueError):
        next(bench.perturbed_catalog(sample, 10))


def test_attribute_queries(catalog_products, sample):
    q = _load("bench_search_quality")
    wi = q.WordIndex(catalog_products)
    rng = random.Random(0)
    made = 0
    for p in sample:
        pool = q.attribute_pool(p)
        for mode in ("distinct", "idf", "uniform"):
            query = q.make_query(p, rng, wi, mode)
            if len(pool) < 3:
                assert query is None
                continue
            made += 1
            ws = query.split()
            assert 3 <= len(ws) <= 5 and len(set(ws)) == len(ws) and set(ws) <= set(pool)
            assert wi.containing_all(ws) >= 1  # the product itself contains them
    assert made > 600
    # "distinct" narrows: its queries are matched in full by few products
    ds = [q.make_query(p, random.Random(2), wi, "distinct") for p in sample]
    ds = [x.split() for x in ds if x]
    assert sum(wi.containing_all(x) <= 50 for x in ds) > 0.8 * len(ds)
