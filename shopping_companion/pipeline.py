"""Compatibility shim: only re-exports. What this module held lives in
:mod:`shopping_companion.assembly.data` (the data directory, catalog, index, embedder, memory
stores) and :mod:`shopping_companion.assembly.judging` (``make_rule_judge``); docs/architecture.md,
layers. Kept because scripts, benchmarks and docs import this path; code inside the package
imports the new homes."""

from shopping_companion.assembly.data import (
    CATALOG_RELPATH,
    ENV_FALLBACK_CATEGORY,
    ENV_NO_DOWNLOAD,
    SGD_RELPATH,
    DataSources,
    catalog_file,
    default_index_dir,
    file_sha256,
    load_catalog,
    load_pool,
    make_embedder,
    memory_factory,
    open_product_search,
    prewarm_memory,
    product_lookup,
    resolve_sources,
    write_json,
)
from shopping_companion.assembly.judging import make_rule_judge

__all__ = [
    "CATALOG_RELPATH",
    "ENV_FALLBACK_CATEGORY",
    "ENV_NO_DOWNLOAD",
    "SGD_RELPATH",
    "DataSources",
    "catalog_file",
    "default_index_dir",
    "file_sha256",
    "load_catalog",
    "load_pool",
    "make_embedder",
    "make_rule_judge",
    "memory_factory",
    "open_product_search",
    "prewarm_memory",
    "product_lookup",
    "resolve_sources",
    "write_json",
]
