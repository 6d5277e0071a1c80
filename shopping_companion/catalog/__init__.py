"""The product catalog: loading, indexing and searching.

* :mod:`~shopping_companion.catalog.loader`: our ``products.jsonl.gz`` -> :class:`~shopping_companion.types.Product`
  (shop ids, size and colour options, :class:`~shopping_companion.catalog.loader.LoadReport`).
* :mod:`~shopping_companion.catalog.sources`: Amazon Reviews 2023 / 2018 metadata, CSV / JSON lines /
  Parquet with a field mapping, and :func:`~shopping_companion.catalog.sources.load_catalog_file`
  for any of them.
* :mod:`~shopping_companion.catalog.cache`: :func:`~shopping_companion.catalog.cache.load_catalog`,
  the one way commands read a whole catalog: parsed once per process, cached on disk by content hash.
* :mod:`~shopping_companion.catalog.download`: Amazon Reviews 2023 categories from the Hugging Face
  hub (progress, SHA-256 check, cache); :mod:`~shopping_companion.catalog.fallback`: the catalog
  used when no data directory exists.
* :mod:`~shopping_companion.catalog.index`: the Lucene BM25 index (manifest, atomic builds);
  :mod:`~shopping_companion.catalog.search`: thread-safe :class:`~shopping_companion.catalog.search.ProductSearch`
  (no torch import) and pools for concurrent episodes.

Submodules are imported on demand; importing this package starts nothing.
"""
