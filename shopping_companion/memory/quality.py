"""Retrieval-quality measurements for storage and precision choices of the memory index."""

from __future__ import annotations

import numpy as np

__all__ = ["topk_recall"]


def topk_recall(
    queries: np.ndarray, reference: np.ndarray, candidate: np.ndarray, k: int = 10,
    candidate_queries: np.ndarray | None = None,
) -> np.ndarray:
    """Per-query recall of the reference top-``k`` when ranking with the candidate vectors.

    ``queries``: float32 ``[q, d]`` unit rows; ``reference`` and ``candidate``: ``[n, d]`` unit
    rows of the same ``n`` items (e.g. float32 vectors and their float16-rounded copies);
    ``candidate_queries``: optional ``[q, d]`` query vectors for the candidate ranking (e.g.
    bf16-encoded queries), default ``queries``. For each query, the candidate's top ``k`` items
    (``k`` clipped to ``n``) are compared with the reference ranking: an item counts as found when
    its reference score is at least the ``k``-th best reference score (so exact ties in the
    reference, e.g. repeated turn texts, are not counted as misses). Returns float64 ``[q]`` in
    [0, 1]; ``1 - mean`` is the recall loss. Raises ``ValueError`` for mismatched shapes or
    ``k < 1``.
    """
    q = np.asarray(queries, dtype=np.float32)
    a = np.asarray(reference, dtype=np.float32)
    b = np.asarray(candidate, dtype=np.float32)
    qb = q if candidate_queries is None else np.asarray(candidate_queries, dtype=np.float32)
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if a.shape != b.shape or a.ndim != 2 or q.ndim != 2 or q.shape[1] != a.shape[1] or qb.shape != q.shape:
        raise ValueError(
            f"shapes do not match: queries {q.shape}, candidate queries {qb.shape}, "
            f"reference {a.shape}, candidate {b.shape}"
        )
    n = a.shape[0]
    if n == 0 or q.shape[0] == 0:
        return np.ones(q.shape[0], dtype=np.float64)
    k = min(k, n)
    ref = q @ a.T  # [q, n]
    cand = qb @ b.T
    kth = -np.partition(-ref, k - 1, axis=1)[:, k - 1]  # k-th best reference score per query
    top_c = np.argpartition(-cand, k - 1, axis=1)[:, :k]
    found = np.take_along_axis(ref, top_c, axis=1) >= kth[:, None]
    return found.sum(axis=1) / k
