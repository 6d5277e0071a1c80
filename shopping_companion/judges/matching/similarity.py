"""The embedding fallback of the value matcher: cosine similarity of MiniLM sentence embeddings.

:func:`embedding_similarity` wraps an embedder (anything with ``encode(list[str]) -> ndarray`` of
L2-normalised rows, such as :class:`shopping_companion.memory.embedder.Embedder`, whose SQLite
cache makes repeated texts free) into the ``(a, b) -> cosine`` callable that
:class:`~shopping_companion.judges.matching.values.ValueMatcher` takes. The matcher asks only for
pairs its lexicon cannot decide (both values outside the vocabulary, or a user's wording against a
catalog value) and compares the result with the threshold in ``data/calibration.yaml``, which
``benchmarks/calibrate_value_similarity.py`` computes from the labelled pairs in
``tests/fixtures/value_pairs.jsonl`` (the threshold maximising accuracy, ties to the higher one).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

__all__ = ["embedding_similarity"]


def embedding_similarity(embedder: Any, max_cache: int = 100_000) -> Callable[[str, str], float]:
    """``(a, b) -> cos(e(a), e(b))`` over ``embedder.encode``; vectors are memoised per text
    (bounded), so a pair costs two dictionary look-ups after the first time."""
    cache: dict[str, Any] = {}
    lock = threading.Lock()

    def vec(texts: list[str]) -> list[Any]:
        with lock:
            missing = [t for t in dict.fromkeys(texts) if t not in cache]
        if missing:
            rows = embedder.encode(missing)
            with lock:
                if len(cache) + len(missing) > max_cache:
                    cache.clear()
                for t, r in zip(missing, rows):
                    cache[t] = r
        with lock:
            return [cache.get(t) if t in cache else embedder.encode([t])[0] for t in texts]

    def similarity(a: str, b: str) -> float:
        va, vb = vec([a, b])
        return float((va * vb).sum())

    return similarity
