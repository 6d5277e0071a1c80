"""Index lifecycle and serving: interrupted builds (a build process killed midway), foreign and stale
indexes, leftovers of dead builds, streaming builds, id-sorted ranking equal to bare Anserini,
the torch-free searcher start-up, and concurrent searches from thread and process pools."""

from __future__ import annotations

import gzip
import json
import multiprocessing
import os
import random
import signal
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

import pytest

from shopping_companion.catalog.index import (
    ANALYZER,
    INDEX_FORMAT_VERSION,
    MANIFEST_NAME,
    build_index,
    open_or_build,
    read_manifest,
    verify_index,
    write_manifest,
)
from shopping_companion.catalog.jvm import detach_thread
from shopping_companion.catalog.search import ProductSearch, SearchThreadPool, process_pool_initializer, process_search
from shopping_companion.errors import ProductIndexError
from shopping_companion.types import Product

pytestmark = pytest.mark.slow

WORDS = [
    "kettle",
    "toaster",
    "blender",
    "mixer",
    "grinder",
    "juicer",
    "steel",
    "glass",
    "red",
    "black",
    "compact",
    "cordless",
    "ceramic",
    "bamboo",
    "travel",
    "deluxe",
]


def _records(n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        words = rng.sample(WORDS, 4)
        out.append(
            {
                "uid": f"t:{i:06d}",
                "source": "t",
                "shop": "Test Shop",
                "id": str(i),
                "title": " ".join(words).title() + f" {i}",
                "brand": f"Brand{i % 7}",
                "seller": None,
                "price": round(5 + (i * 37 % 500) / 3, 2),
                "currency": "USD",
                "category_path": ["Home", "Kitchen", words[0]],
                "description": " ".join(rng.choices(WORDS, k=12)),
                "features": [],
                "attributes": {"colour": rng.choice(["Red", "Black", "White"])},
            }
        )
    return out


def _write(path: Path, records: list[dict]) -> Path:
    path.write_bytes(gzip.compress(("\n".join(json.dumps(r) for r in records) + "\n").encode()))
    return path


def _products(n: int, seed: int = 0) -> list[Product]:
    from shopping_companion.catalog.loader import record_to_product

    return [record_to_product(r)[0] for r in _records(n, seed)]


def _run(code: str, timeout: float = 180) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "OPENAI_API_KEY")}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env=env)


# --------------------------------------------------------------------------- interrupted builds

_KILLABLE_BUILD = """
import sys, time
from pathlib import Path
from shopping_companion.catalog import index

marker = Path(sys.argv[1])
orig = index._Feeder.add

def add_then_hang(self, items):
    orig(self, items)
    # make the half-built temporary index as real as possible: committed Lucene segments on disk
    self.writer.commit()
    marker.write_text("half")
    time.sleep(600)

index._Feeder.add = add_then_hang
index.open_or_build(sys.argv[2], sys.argv[3], threads=1)
"""


def _kill_midway(tmp_path: Path, catalog: Path, idx: Path) -> Path:
    """Start a build of ``catalog`` at ``idx`` in a subprocess, SIGKILL it once half an index is
    committed in its temporary directory; return that temporary directory."""
    marker = tmp_path / f"marker-{time.monotonic_ns()}"
    script = tmp_path / "build.py"
    script.write_text(_KILLABLE_BUILD)
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "OPENAI_API_KEY")}
    proc = subprocess.Popen(
        [sys.executable, str(script), str(marker), str(catalog), str(idx)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 180
        while not marker.exists():
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, "the build never reached the middle"
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    temps = [d for d in idx.parent.iterdir() if d.name.startswith(f".{idx.name}.build-")]
    assert len(temps) == 1
    return temps[0]


def test_killed_build_never_leaves_a_loadable_half_index(tmp_path):
    cat = _write(tmp_path / "cat.jsonl.gz", _records(40))
    idx = tmp_path / "idx"
    old = open_or_build(cat, idx)
    with ProductSearch(idx) as s:
        before = s.search("kettle steel", top_k=10)

    # 1. killed while replacing an existing index: the old index is untouched and still serves
    _write(cat, _records(6000, seed=1))
    half = _kill_midway(tmp_path, cat, idx)
    assert any(f.name.startswith("segments_") for f in half.iterdir())  # a real, committed half index
    assert not (half / MANIFEST_NAME).exists()
    with pytest.raises(ProductIndexError, match="no manifest.json"):
        ProductSearch(half)
    assert read_manifest(idx) == old and verify_index(idx).n_docs == 40
    with ProductSearch(idx) as s:
        assert s.search("kettle steel", top_k=10) == before
    # the next build removes the dead temporary directory and builds the new catalog
    new = open_or_build(cat, idx)
    assert new.n_docs == 6000 and not half.exists()
    assert not [d for d in tmp_path.iterdir() if d.name.startswith(".idx.") and d.is_dir()]

    # 2. killed during a first build: no index at all, never a half one
    fresh = tmp_path / "fresh"
    half2 = _kill_midway(tmp_path, cat, fresh)
    assert not fresh.exists()
    with pytest.raises(ProductIndexError, match="no product index"):
        ProductSearch(fresh)
    with pytest.raises(ProductIndexError, match="no manifest.json"):
        ProductSearch(half2)
    assert open_or_build(cat, fresh).n_docs == 6000 and not half2.exists()


def test_failed_streaming_build_keeps_the_previous_index(tmp_path):
    idx = tmp_path / "idx"
    first = build_index(_products(50), idx)

    def stream():
        yield from _products(30)
        yield _products(1)[0]  # duplicate id t:000000

    with pytest.raises(ValueError, match="duplicate product_id 't:000000'"):
        build_index(stream(), idx, threads=2, batch_size=7)
    assert read_manifest(idx) == first
    with pytest.raises(ValueError, match="zero products"):
        build_index(iter(()), idx)
    assert read_manifest(idx) == first
    assert not [d for d in tmp_path.iterdir() if d.name.startswith(".idx.") and d.is_dir()]


def test_hits_file_must_match_the_documents(tmp_path):
    import shutil

    from shopping_companion.catalog.index import HITS_FILE, HITS_OFFSETS_FILE

    idx = tmp_path / "idx"
    ps = _products(120, seed=6)
    build_index(ps, idx)
    hits = (idx / HITS_FILE).read_bytes().splitlines(keepends=True)
    assert len(hits) == 120 and json.loads(hits[0])[0] == min(p.product_id for p in ps)
    assert (idx / HITS_OFFSETS_FILE).stat().st_size == 8 * 121
    with ProductSearch(idx) as s:
        h = s.search("kettle", top_k=3)[0]
        p = next(x for x in ps if x.product_id == h["product_id"])
        assert (h["title"], h["price"], h["shop_id"], h["brand"], h["category"]) == (
            p.title,
            p.price,
            p.shop_id,
            p.brand,
            p.category,
        )
    # same size, other order: detected on open
    bad = tmp_path / "bad"
    shutil.copytree(idx, bad)
    (bad / HITS_FILE).write_bytes(b"".join(reversed(hits)))
    with pytest.raises(ProductIndexError, match="does not match"):
        ProductSearch(bad)
    (bad / HITS_OFFSETS_FILE).unlink()
    with pytest.raises(ProductIndexError, match="corrupted"):
        ProductSearch(bad)


def test_dead_build_leftovers_are_removed_and_others_kept(tmp_path):
    for name in (".idx.build-dead1", ".idx.old-dead2", ".idx2.build-other", "keep"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "_0.cfs").write_bytes(b"x")
    build_index(_products(10), tmp_path / "idx")
    names = sorted(p.name for p in tmp_path.iterdir() if p.is_dir())
    assert names == [".idx2.build-other", "idx", "keep"]


# --------------------------------------------------------------------------- stale / foreign


def test_foreign_and_stale_indexes(tmp_path):
    a = _write(tmp_path / "a.jsonl.gz", _records(30, seed=1))
    b = _write(tmp_path / "b.jsonl.gz", _records(35, seed=2))
    idx = tmp_path / "idx"
    ma = open_or_build(a, idx)
    # another catalog file with other content: refused, nothing changed
    with pytest.raises(ProductIndexError, match="belongs to another catalog") as e:
        open_or_build(b, idx)
    assert "rebuild=True" in str(e.value) and str(a.resolve()) in str(e.value)
    assert read_manifest(idx) == ma
    # the same content under another path (a moved data directory) is reused
    a2 = tmp_path / "moved.jsonl.gz"
    a2.write_bytes(a.read_bytes())
    assert open_or_build(a2, idx) == ma
    # built by a newer version of the code: refused, not downgraded
    write_manifest(idx, ma.model_copy(update={"format_version": INDEX_FORMAT_VERSION + 1}))
    with pytest.raises(ProductIndexError, match="newer version"):
        open_or_build(a, idx)
    # different analyzer or BM25 parameters: stale, rebuilt (also at the same catalog hash)
    for update in ({"analyzer": "WhitespaceAnalyzer"}, {"bm25_k1": 1.2}, {"bm25_b": 0.75}, {"loader_version": 0}):
        write_manifest(idx, ma.model_copy(update=update))
        m = open_or_build(a, idx)
        assert (m.analyzer, m.bm25_k1, m.bm25_b) == (ANALYZER, 0.9, 0.4) and m.n_docs == 30
        assert verify_index(idx) == m
    # rebuild=True replaces a foreign index
    assert open_or_build(b, idx, rebuild=True).n_docs == 35


# --------------------------------------------------------------------------- ranking order


def test_id_sorted_index_ranks_exactly_like_bare_anserini(tmp_path):
    """Many exact score ties (identical texts under shuffled ids, fed by two threads): the order
    must still be (score desc, product id asc), as Anserini's SimpleSearcher.search returns it."""
    base = _products(60, seed=3)
    clones = []
    for p in base:
        for j in range(6):
            clones.append(p.model_copy(update={"product_id": f"z{random.Random(j).randint(0, 9)}:{p.product_id}-{j}"}))
    random.Random(4).shuffle(clones)
    idx = tmp_path / "ties"
    build_index(clones, idx, threads=2, batch_size=13)
    from pyserini.pyclass import autoclass

    bare = autoclass("io.anserini.search.SimpleSearcher")(str(idx))
    try:
        with ProductSearch(idx) as s:
            for q in ["kettle", "steel glass", "red compact travel", "bamboo deluxe mixer", "brand3"]:
                ours = s.search(q, top_k=50)
                theirs = bare.search(q, 50)
                assert [h["product_id"] for h in ours] == [h.docid for h in theirs]
                scores = [h["score"] for h in ours]
                for x, y in zip(ours, ours[1:]):  # ties broken by product id ascending
                    if x["score"] == y["score"]:
                        assert x["product_id"] < y["product_id"]
                assert len(set(scores)) < len(scores)  # the case really has ties
    finally:
        bare.close()


def test_generator_and_list_builds_are_identical(tmp_path):
    ps = _products(500, seed=5)
    m1 = build_index(ps, tmp_path / "list", threads=1)
    m2 = build_index((p for p in ps), tmp_path / "gen", threads=2, batch_size=17)
    assert m1.catalog_hash == m2.catalog_hash and m1.n_docs == m2.n_docs == 500
    with ProductSearch(tmp_path / "list") as a, ProductSearch(tmp_path / "gen") as b:
        for q, kw in [("kettle", {}), ("glass red", {"max_price": 80}), ("mixer", {"shop_id": ps[0].shop_id})]:
            assert a.search(q, top_k=50, **kw) == b.search(q, top_k=50, **kw)
        assert b.view([p.product_id for p in ps[:20]])[0] == ps[:20]


# --------------------------------------------------------------------------- start-up without torch


def test_catalog_stack_never_imports_torch(tmp_path):
    cat = _write(tmp_path / "cat.jsonl.gz", _records(25))
    idx = tmp_path / "idx"
    code = f"""
import sys
from shopping_companion.catalog import download, fallback, index, loader, search, sources
from shopping_companion.catalog.index import open_or_build
from shopping_companion.catalog.search import ProductSearch, SearchThreadPool
open_or_build({str(cat)!r}, {str(idx)!r})
s = ProductSearch({str(idx)!r})
hits = s.search('kettle', top_k=5, min_price=1)
found, unknown = s.view([hits[0]['product_id'], 'nope:1'])
with SearchThreadPool(2) as pool:
    assert list(pool.map(lambda q: len(s.search(q)), ['kettle', 'glass'])) != []
heavy = sorted(m for m in ('torch', 'transformers', 'sentence_transformers', 'pyarrow', 'pandas') if m in sys.modules)
print(len(hits), len(found), unknown, heavy)
"""
    r = _run(code)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip() == "5 1 ['nope:1'] []"


# --------------------------------------------------------------------------- concurrency

QUERIES = [
    "red dress",
    "steel bottle",
    "leather wallet",
    "running shoes",
    "basmati rice",
    "office chair",
    "cotton kurta",
    "usb charger",
    "wooden table",
    "face wash",
]


def _cases():
    cases = []
    for i, q in enumerate(QUERIES * 6):
        kw = {"top_k": (10, 50, 20)[i % 3]}
        if i % 4 == 1:
            kw["min_price"] = 100
        if i % 4 == 2:
            kw.update(min_price=200, max_price=2000)
        if i % 5 == 3:
            kw["shop_id"] = "myntra-india/brand-nike"
        cases.append((q, kw))
    return cases


def test_thread_pools_equal_sequential(product_search):
    cases = _cases()
    expected = [product_search.search(q, **kw) for q, kw in cases]
    with SearchThreadPool(4) as pool:
        got = list(pool.map(lambda c: product_search.search(c[0], **c[1]), cases))
        views = list(
            pool.map(lambda h: product_search.view([x["product_id"] for x in h[:5]]) if h else ([], []), expected)
        )
    assert got == expected
    assert [[p.product_id for p in v[0]] for v in views] == [[x["product_id"] for x in h[:5]] for h in expected]
    assert sum(len(h) for h in expected) > 1000

    def worker(c):  # a plain executor works too when its threads detach
        try:
            return product_search.search(c[0], **c[1])
        finally:
            detach_thread()

    with ThreadPoolExecutor(3) as ex:
        assert list(ex.map(worker, cases)) == expected
    with pytest.raises(ValueError, match="max_workers"):
        SearchThreadPool(0)


def _search_in_worker(case):
    q, kw = case
    return process_search().search(q, **kw)


def test_process_pool_equals_sequential(tmp_path):
    idx = tmp_path / "idx"
    build_index(_products(800, seed=9), idx)
    cases = [(w, {"top_k": 20}) for w in WORDS] + [(f"{a} {b}", {"max_price": 90}) for a, b in zip(WORDS, WORDS[3:])]
    with ProductSearch(idx) as s:
        expected = [s.search(q, **kw) for q, kw in cases]
    with pytest.raises(ProductIndexError, match="process_pool_initializer"):
        process_search()
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(2, mp_context=ctx, initializer=process_pool_initializer, initargs=(str(idx),)) as ex:
        got = list(ex.map(_search_in_worker, cases))
    assert got == expected
