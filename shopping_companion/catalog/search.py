"""BM25 product search over an index built by :mod:`shopping_companion.catalog.index`.

:class:`ProductSearch` backs the ``product_search`` and ``product_view`` tools. It opens the index
with Anserini's ``SimpleSearcher`` through ``pyserini.pyclass.autoclass`` (the light path: no torch,
~1 s start), ranks with BM25 (k1/b from the manifest, Anserini's defaults 0.9/0.4) and applies the
shop and price filters inside Lucene as non-scoring FILTER clauses, so a selective filter still
returns the best ``top_k`` matching products.

Hits are ordered exactly as Anserini's ``SimpleSearcher.search`` orders them (score, then product
id), but found faster: the index is sorted by product id, so Lucene's own top-k collector (score,
then document id) yields the same order while skipping documents that cannot reach the top k
(block-max WAND), where Anserini's field sort scores every matching document. A hit's fields come
from the index's ``hits.jsonl`` (mapped into memory, one line per document in document order), so a
hit costs no JNI call and no stored-document decompression; ``view`` reads the full stored JSON.

User text is never parsed as Lucene query syntax: it is analysed with the index's English analyzer
and searched as a bag of words, so ``title:(x AND``, ``*``, ``~``, quotes or backslashes are just
text.

Thread safety: one instance may be shared by many threads. The Lucene search and the stored-JSON
reads run concurrently (pyjnius releases the GIL while Java runs) through wrapper classes private
to the instance; the short query-building glue is serialised by
:data:`~shopping_companion.catalog.jvm.JNI_LOCK`, because pyjnius method objects are shared by all
objects of a class (see :mod:`shopping_companion.catalog.jvm`). A worker thread that used the
searcher should call :func:`shopping_companion.catalog.jvm.detach_thread` before it exits;
:class:`SearchThreadPool` does this for its workers and is the way to serve concurrent episodes
from one process. For a process pool, start workers with the ``spawn`` method (a JVM does not
survive ``fork``) and open one :class:`ProductSearch` per worker process (see
:func:`process_pool_initializer`). In a process forked after the JVM started, every method (and the
constructor) raises :class:`~shopping_companion.catalog.jvm.JVMForkError` naming that fix instead of
hanging forever in Java; :meth:`ProductSearch.close` there only releases the Python side.
"""

from __future__ import annotations

import json
import math
import mmap
import os
import struct
import threading
from concurrent.futures import ThreadPoolExecutor
from numbers import Real
from pathlib import Path
from typing import Any

from shopping_companion.catalog.index import (
    FIELD_CONTENTS,
    FIELD_PRICE,
    FIELD_SHOP,
    HITS_FILE,
    HITS_OFFSETS_FILE,
    ID_ORDER,
    IndexManifest,
    verify_index,
)
from shopping_companion.catalog.jvm import JNI_LOCK, check_not_forked, ensure_jvm, forked_from_jvm, private_class
from shopping_companion.errors import ProductIndexError, ToolInputError, check_tool_text
from shopping_companion.resources import Closeable
from shopping_companion.tool_args import MAX_QUERY_CHARS, MAX_VIEW_IDS, check_id_list, check_top_k
from shopping_companion.types import Product


_LONG_MAX = 2**63 - 1
_OFFSETS = struct.Struct("<2q")  # start and end of one hits.jsonl line
#: Lucene's per-query clause limit we need (JVM-wide setting; only ever raised).
_MAX_CLAUSES = 4096

#: Keys of one ``search`` hit, in order.
HIT_KEYS = ("product_id", "title", "price", "currency", "category", "shop", "shop_id", "brand", "score")


# --------------------------------------------------------------------------- validation


def _check_query(query: Any) -> str:
    if not isinstance(query, str):
        raise ToolInputError(
            "query", f"must be a string of 1..{MAX_QUERY_CHARS} characters, got {type(query).__name__}"
        )
    if not query.strip():
        raise ToolInputError("query", "must not be empty or only whitespace; describe the product to find")
    if len(query) > MAX_QUERY_CHARS:
        raise ToolInputError("query", f"is {len(query)} characters long; at most {MAX_QUERY_CHARS} are allowed")
    return check_tool_text("query", query)


def _check_price(field: str, value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, Real):
        raise ToolInputError(field, f"must be a non-negative number or null, got {value!r}")
    v = float(value)
    if not math.isfinite(v):
        raise ToolInputError(field, f"must be a finite non-negative number, got {value!r}")
    if v < 0:
        raise ToolInputError(field, f"must be >= 0, got {value!r}")
    return v


def _check_shop(shop_id: Any) -> str | None:
    if shop_id is None:
        return None
    if not isinstance(shop_id, str):
        raise ToolInputError(
            "shop_id",
            f"must be a shop id string (e.g. 'myntra-india/brand-nike') or null, got {type(shop_id).__name__}",
        )
    s = check_tool_text("shop_id", shop_id.strip())
    return s or None


def _check_ids(product_ids: Any) -> list[str]:
    product_ids = check_id_list("product_ids", product_ids, MAX_VIEW_IDS, "product")
    bad = [x for x in product_ids if not isinstance(x, str) or not x.strip()]
    if bad:
        raise ToolInputError("product_ids", f"every id must be a non-empty string, got {bad[0]!r}")
    return list(dict.fromkeys(check_tool_text("product_ids", x.strip(), i) for i, x in enumerate(product_ids)))


def _cents_floor(v: float) -> int:
    """``v`` (a finite price >= 0) in whole cents, rounded down; prices past what a Java long
    holds in cents (about 9.2e16) are the largest long: no product costs that much."""
    if v >= _LONG_MAX / 100:  # v * 100 could even overflow to infinity (v > ~1.8e306)
        return _LONG_MAX
    return min(_LONG_MAX, math.floor(round(v * 100, 6)))


def _cents_ceil(v: float) -> int:
    """``v`` in whole cents, rounded up; capped as :func:`_cents_floor`."""
    if v >= _LONG_MAX / 100:
        return _LONG_MAX
    return min(_LONG_MAX, math.ceil(round(v * 100, 6)))


# --------------------------------------------------------------------------- searcher


class ProductSearch(Closeable):
    """Search and view products of one index directory.

    ``ProductSearch(index_dir)`` checks the index (manifest, files, document count) and raises
    :class:`ProductIndexError` with a rebuild hint when it is missing or corrupted. Use as a context
    manager or call :meth:`close` to release the Lucene reader. Every method raises
    :class:`~shopping_companion.catalog.jvm.JVMForkError` in a process forked after the JVM
    started (open the searcher in a ``spawn`` worker instead).
    """

    def __init__(self, index_dir: str | os.PathLike[str]) -> None:
        self.index_dir = Path(index_dir)
        self.manifest: IndexManifest = verify_index(self.index_dir)
        if self.manifest.id_order != ID_ORDER:
            raise ProductIndexError(
                f"index {str(self.index_dir)!r} is not sorted by product id; rebuild it "
                "(open_or_build(..., rebuild=True) or shopcomp build-index --rebuild)"
            )
        ensure_jvm()
        from pyserini.pyclass import autoclass

        # Wrapper classes of our own for the searcher and its IndexSearcher: the Lucene search and
        # the stored-document reads run outside any lock, concurrently, and no other thread can
        # redirect them (see catalog.jvm).
        searcher_cls = private_class(
            "io.anserini.search.SimpleSearcher",
            "(Ljava/lang/String;)V",
            {"set_bm25": "(FF)V", "get_total_num_docs": "()I", "close": "()V"},
            fields={"searcher": "Lorg/apache/lucene/search/IndexSearcher;"},
        )
        index_searcher_cls = private_class(
            "org.apache.lucene.search.IndexSearcher",
            None,
            {"search": "(Lorg/apache/lucene/search/Query;I)Lorg/apache/lucene/search/TopDocs;"},
        )
        try:
            self._searcher = searcher_cls(str(self.index_dir.resolve()))
        except Exception as e:  # jnius.JavaException
            raise ProductIndexError(f"cannot open product index {str(self.index_dir)!r}: {e}") from e
        # set_bm25 (re)creates the searcher's IndexSearcher with BM25(k1, b) over its reader.
        self._searcher.set_bm25(float(self.manifest.bm25_k1), float(self.manifest.bm25_b))
        self._n_docs = int(self._searcher.get_total_num_docs())
        from jnius import cast

        # doc_raw is overloaded (lucene docid / product id); one single-signature class per
        # overload avoids pyjnius' per-call overload resolution (~30% of a stored-JSON read).
        raw_by_docid_cls = private_class(
            "io.anserini.search.SimpleSearcher", None, {"doc_raw": "(I)Ljava/lang/String;"}
        )
        raw_by_id_cls = private_class(
            "io.anserini.search.SimpleSearcher", None, {"doc_raw": "(Ljava/lang/String;)Ljava/lang/String;"}
        )
        with JNI_LOCK:
            self._raw_by_docid = cast(raw_by_docid_cls, self._searcher)
            self._raw_by_id = cast(raw_by_id_cls, self._searcher)
            self._index_searcher = cast(index_searcher_cls, self._searcher.searcher)
            self._analyzer = autoclass("io.anserini.analysis.DefaultEnglishAnalyzer").newDefaultInstance()
            self._qgen = autoclass("io.anserini.search.query.BagOfWordsQueryGenerator")()
            self._Builder = autoclass("org.apache.lucene.search.BooleanQuery$Builder")
            occur = autoclass("org.apache.lucene.search.BooleanClause$Occur")
            self._MUST, self._FILTER = occur.MUST, occur.FILTER
            self._KeywordField = autoclass("org.apache.lucene.document.KeywordField")
            self._LongField = autoclass("org.apache.lucene.document.LongField")
            # One clause per distinct query term: a 2,000-character query can hold up to 2,000
            # terms (CJK text is one term per character), above Lucene's default limit of 1,024.
            index_searcher = autoclass("org.apache.lucene.search.IndexSearcher")
            if index_searcher.getMaxClauseCount() < _MAX_CLAUSES:
                index_searcher.setMaxClauseCount(_MAX_CLAUSES)
        self._open_hits()
        self._closed = False
        self._close_lock = threading.Lock()

    def _open_hits(self) -> None:
        """Map ``hits.jsonl`` / ``hits.offsets`` and check they describe this index's documents."""
        try:
            self._hits_fh = open(self.index_dir / HITS_FILE, "rb")
            self._offsets_fh = open(self.index_dir / HITS_OFFSETS_FILE, "rb")
            self._hits = mmap.mmap(self._hits_fh.fileno(), 0, access=mmap.ACCESS_READ)
            self._offsets = mmap.mmap(self._offsets_fh.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as e:
            self._searcher.close()
            raise ProductIndexError(
                f"index {str(self.index_dir)!r} is corrupted: cannot map its hit files ({e}); rebuild it"
            ) from e
        ok = len(self._offsets) == 8 * (self._n_docs + 1)
        try:
            for docid in {0, self._n_docs // 2, self._n_docs - 1} if ok else ():
                stored = json.loads(self._raw_by_docid.doc_raw(docid))["product_id"]
                ok = ok and self._hit_row(docid)[0] == stored
        except (ValueError, IndexError, struct.error):
            ok = False
        if not ok:
            self._close_hits()
            self._searcher.close()
            raise ProductIndexError(
                f"index {str(self.index_dir)!r} is corrupted: {HITS_FILE} does not match its documents; rebuild it"
            )

    def _hit_row(self, docid: int) -> list:
        start, end = _OFFSETS.unpack_from(self._offsets, 8 * docid)
        return json.loads(self._hits[start:end])

    def _close_hits(self) -> None:
        for name in ("_hits", "_offsets", "_hits_fh", "_offsets_fh"):
            obj = getattr(self, name, None)
            if obj is not None:
                obj.close()

    # ------------------------------------------------------------------ tools

    def search(
        self,
        query: str,
        shop_id: str | None = None,
        min_price: float | None = None,
        max_price: float | None = None,
        top_k: int = 10,
    ) -> list[dict[str, Any]]:
        """BM25 search with optional exact shop and inclusive price-range filters.

        ``query``: free text, 1..2,000 characters, not blank (Lucene syntax is treated as text;
        a query with no indexable word, e.g. only stop words or punctuation, returns ``[]``).
        ``shop_id``: exact shop id string (unknown ids simply match nothing; blank means no
        filter). ``min_price`` / ``max_price``: finite numbers >= 0 in the product's currency,
        inclusive, ``min_price <= max_price``; products without a price never match a price
        filter. ``top_k``: integer 1..50.

        Returns up to ``top_k`` dicts, best first, with keys ``product_id, title, price``
        (float or None), ``currency, category`` (finest category level, '' if none), ``shop,
        shop_id, brand, score`` (BM25, rounded to 4 decimals). Raises :class:`ToolInputError`
        naming the field for invalid arguments.
        """
        q = _check_query(query)
        shop = _check_shop(shop_id)
        lo = _check_price("min_price", min_price)
        hi = _check_price("max_price", max_price)
        if lo is not None and hi is not None and lo > hi:
            raise ToolInputError(
                "min_price", f"must be <= max_price (got min_price={min_price}, max_price={max_price})"
            )
        k = check_top_k(top_k, integral_float=True)
        self._check_open()

        with JNI_LOCK:  # short JNI glue on shared wrapper classes
            lucene_query = self._qgen.buildQuery(FIELD_CONTENTS, self._analyzer, q)
            if shop is not None or lo is not None or hi is not None:
                b = self._Builder()
                b.add(lucene_query, self._MUST)
                if shop is not None:
                    b.add(self._KeywordField.newExactQuery(FIELD_SHOP, shop), self._FILTER)
                if lo is not None or hi is not None:
                    lo_c = _cents_ceil(lo) if lo is not None else 0
                    hi_c = _cents_floor(hi) if hi is not None else _LONG_MAX
                    b.add(self._LongField.newRangeQuery(FIELD_PRICE, lo_c, hi_c), self._FILTER)
                lucene_query = b.build()
        # The Lucene work, concurrent and lock-free: top k by (score, docid) == (score, product
        # id) on an id-sorted index, as Anserini's SimpleSearcher.search ranks; then the stored
        # JSON of each hit.
        top = self._index_searcher.search(lucene_query, k)
        rows = [(d.doc, d.score) for d in top.scoreDocs]
        # Each hit's fields from hits.jsonl (docid order == product id order): no JNI per hit.
        hits, offsets, unpack = self._hits, self._offsets, _OFFSETS.unpack_from
        out: list[dict[str, Any]] = []
        for docid, score in rows:
            start, end = unpack(offsets, 8 * docid)
            pid, title, price, currency, category, shop, shop_id, brand = json.loads(hits[start:end])
            out.append(
                {
                    "product_id": pid,
                    "title": title,
                    "price": price,
                    "currency": currency,
                    "category": category,
                    "shop": shop,
                    "shop_id": shop_id,
                    "brand": brand,
                    "score": round(float(score), 4),
                }
            )
        return out

    def view(self, product_ids: list[str]) -> tuple[list[Product], list[str]]:
        """Full records of 1..20 product ids.

        Returns ``(products, unknown_ids)``: the known products in the order asked (duplicates
        collapsed) and the ids not in the index. Raises :class:`ToolInputError` (field
        ``product_ids``) unless given a list of 1..20 non-empty strings.
        """
        ids = _check_ids(product_ids)
        self._check_open()
        found: list[Product] = []
        unknown: list[str] = []
        for pid in ids:
            raw = self._raw_by_id.doc_raw(pid)
            if raw is None:
                unknown.append(pid)
            else:
                found.append(Product.model_validate_json(raw))
        return found, unknown

    def get(self, product_id: str) -> Product | None:
        """The product with this id, or None. Raises :class:`ToolInputError` for a non-string id."""
        if not isinstance(product_id, str):
            raise ToolInputError("product_id", f"must be a string, got {type(product_id).__name__}")
        check_tool_text("product_id", product_id)
        self._check_open()
        raw = self._raw_by_id.doc_raw(product_id)
        return None if raw is None else Product.model_validate_json(raw)

    def __len__(self) -> int:
        """Number of indexed products."""
        return self._n_docs

    # ------------------------------------------------------------------ lifecycle

    def _check_open(self) -> None:
        check_not_forked(f"ProductSearch({str(self.index_dir)!r})")
        if self._closed:
            raise ProductIndexError(f"ProductSearch({str(self.index_dir)!r}) is closed")

    def close(self) -> None:
        """Release the Lucene reader (idempotent). Later calls raise :class:`ProductIndexError`.

        In a process forked after the JVM started, only the Python side (the mapped hit files) is
        released: the Lucene reader belongs to the parent, and a Java call here would hang."""
        with self._close_lock:
            if not self._closed:
                self._closed = True
                if not forked_from_jvm():
                    self._searcher.close()
                self._close_hits()

    def __repr__(self) -> str:
        return f"ProductSearch({str(self.index_dir)!r}, n_docs={self._n_docs})"


# --------------------------------------------------------------------------- pools


class SearchThreadPool(ThreadPoolExecutor):
    """A :class:`~concurrent.futures.ThreadPoolExecutor` for running searches (or whole episodes
    that search) concurrently on shared :class:`ProductSearch` instances.

    ``max_workers``: number of threads (>= 1). On :meth:`shutdown` (or leaving a ``with`` block)
    every worker thread detaches from the JVM before it ends, as pyjnius requires of threads
    that called Java. Results equal a sequential run; throughput grows with cores (searches
    release the GIL while Lucene runs).
    """

    def __init__(self, max_workers: int, thread_name_prefix: str = "product-search") -> None:
        if not isinstance(max_workers, int) or max_workers < 1:
            raise ValueError(f"max_workers: must be an integer >= 1, got {max_workers!r}")
        super().__init__(max_workers=max_workers, thread_name_prefix=thread_name_prefix)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Detach every started worker from the JVM, then shut the pool down."""
        with self._shutdown_lock:
            n = len(self._threads)
            closed = self._shutdown
        if n and not closed:
            barrier = threading.Barrier(n)

            def detach() -> None:
                # the barrier makes each worker take exactly one of the n detach tasks
                try:
                    barrier.wait(timeout=60)
                finally:
                    from shopping_companion.catalog.jvm import detach_thread

                    detach_thread()

            for _ in range(n):
                self.submit(detach)
        super().shutdown(wait=wait, cancel_futures=cancel_futures)


_process_search: ProductSearch | None = None


def process_pool_initializer(index_dir: str) -> None:
    """``initializer`` for a ``ProcessPoolExecutor`` (``mp_context=multiprocessing.get_context("spawn")``):
    opens one :class:`ProductSearch` of ``index_dir`` per worker process, available through
    :func:`process_search`."""
    global _process_search
    _process_search = ProductSearch(index_dir)


def process_search() -> ProductSearch:
    """The worker process's :class:`ProductSearch` (see :func:`process_pool_initializer`);
    raises :class:`ProductIndexError` outside such a worker."""
    if _process_search is None:
        raise ProductIndexError("no ProductSearch in this process: start the pool with process_pool_initializer")
    return _process_search
