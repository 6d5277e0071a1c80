"""Shared fixtures: real data from ../shared/data, built once per test session.

The full-catalog BM25 index is built once into the session's cache directory (about a minute on
two cores) and shared by every test that needs product search; under ``scripts/test.sh`` the extras
suites reuse the main suite's (``session_dir``).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def session_dir(tmp_path_factory, name: str) -> Path:
    """A directory of this test session: its own numbered temporary directory, or, under
    pytest-xdist (``-n N``), one directory shared by the session's workers (each worker is a
    process with its own base temporary directory, all under one parent), so what a session fixture
    builds into it (the catalog cache, the BM25 index, the MiniLM encodings) is built once and
    reused by the other workers. With ``$SHOPCOMP_TEST_SHARED_DIR`` set (``scripts/test.sh`` sets
    it to a fresh directory per run), ``<that dir>/<name>``: shared by every session of the run,
    so the extras suites reuse what the main suite built. The builders are safe across processes:
    the index build holds a file lock, the catalog cache is written to a temporary file and
    renamed, the encodings are an SQLite database; the index and the catalog cache are keyed by
    the catalog's content hash and the code's versions, so a stale entry is rebuilt, never used."""
    shared = os.environ.get("SHOPCOMP_TEST_SHARED_DIR")
    if shared:
        d = Path(shared) / name
        d.mkdir(parents=True, exist_ok=True)
        return d
    if os.environ.get("PYTEST_XDIST_WORKER"):
        d = tmp_path_factory.getbasetemp().parent / name
        d.mkdir(exist_ok=True)
        return d
    return tmp_path_factory.mktemp(name)


@pytest.fixture(scope="session", autouse=True)
def shopcomp_cache_dir(tmp_path_factory) -> Path:
    """Every test session gets its own cache directory (indexes, embeddings, the parsed catalog),
    shared by its xdist workers (and by the run's sessions under ``$SHOPCOMP_TEST_SHARED_DIR``:
    :func:`session_dir`); never ~/.cache."""
    d = session_dir(tmp_path_factory, "shopcomp-cache")
    os.environ["SHOPCOMP_CACHE_DIR"] = str(d)
    return d


@pytest.fixture(scope="session")
def data_dir() -> Path:
    from shopping_companion.paths import resolve_data_dir

    return resolve_data_dir()


@pytest.fixture(scope="session")
def catalog_path(data_dir: Path) -> Path:
    return data_dir / "catalog" / "products.jsonl.gz"


@pytest.fixture(scope="session")
def catalog_products(catalog_path: Path):
    """The real catalog, parsed once per process (shared with the index build and every command run
    in-process; read-only) and cached in the session's cache directory."""
    from shopping_companion.catalog.cache import load_catalog

    products, _report = load_catalog(catalog_path)
    return products


@pytest.fixture(scope="session")
def catalog_index_dir(catalog_path: Path, shopcomp_cache_dir: Path) -> Path:
    """The full real catalog indexed once per test session (once for all its xdist workers), at
    the commands' default index location in the session's cache directory, so a command run
    without ``--index-dir`` (in-process or as a subprocess) uses this index instead of building
    another."""
    from shopping_companion.assembly.data import default_index_dir
    from shopping_companion.catalog.index import open_or_build

    d = default_index_dir()
    assert d.is_relative_to(shopcomp_cache_dir), (d, shopcomp_cache_dir)
    open_or_build(catalog_path, d)
    return d


@pytest.fixture(scope="session")
def product_search(catalog_index_dir: Path):
    from shopping_companion.catalog.search import ProductSearch

    return ProductSearch(catalog_index_dir)


@pytest.fixture(scope="session")
def embedder(shopcomp_cache_dir: Path):
    """The embedder the CLI would use (same cache file), so CLI tests hit the warm cache."""
    from shopping_companion.pipeline import make_embedder

    return make_embedder()


@pytest.fixture(scope="session")
def sgd_sessions(data_dir: Path):
    from shopping_companion.memory.loaders import load_sgd

    return load_sgd(data_dir / "conversations" / "sgd_dialogues.jsonl.gz")


@pytest.fixture(scope="session")
def synth_bench(catalog_products, sgd_sessions, product_search):
    """``synth_bench(n_tasks, seed, sessions_per_user=40, **config)``: a small single-product
    benchmark synthesised in memory from the real catalog and SGD sessions, with the BM25
    searchable check (each integration module builds its own, with its own seed)."""
    from shopping_companion.benchmark.synth import SynthConfig, synthesize

    def searcher(q, k):
        return [h["product_id"] for h in product_search.search(q, top_k=k)]

    def make(n_tasks: int, seed: int, sessions_per_user: int = 40, **config):
        cfg = SynthConfig(addon_share=0.0, n_tasks=n_tasks, seed=seed, sessions_per_user=sessions_per_user, **config)
        return synthesize(catalog_products, sgd_sessions, cfg, searcher=searcher)

    return make
