"""Embeddings and the three retrieval functions R_d, R_p, R_r (paper §3.5-3.6, Eqs. 6-9).

All vectors are L2-normalised float32 rows, so cosine similarity is a dot product.

* :func:`cosine` — ``(d,) x (n, d) -> (n,)`` cosine similarities in [-1, 1].
* :func:`top_k` — indices of the k largest scores, ties broken by lower index (stable).
* :class:`DialogueMemory` — R_d (Eq. 6): prior user queries of this dialogue with their turn text;
  returns the top-``k_d`` prior turns (paper: 1) by cos(e_q_t, e_q_i).
* :class:`ProductIndex` — R_p (Eqs. 7-8): per item the metadata embedding e^m, the mean of its
  review embeddings e^r, and the image-description embedding e^d; s(p|q) is the mean of the
  cosines over the views the variant uses (``("meta", "review", "image")``; text-only:
  ``("meta", "review")``). An item lacking a view (no visible review, no image description)
  averages over the views it has; a view no item has is dropped and recorded in ``views_used``.
* :class:`ReviewIndex` — R_r (Eq. 9): the user's visible reviews, top-``k_r`` (paper: 5).

Embedders: anything with ``encode(list[str]) -> (n, d)`` normalised array. The default is the
project's cached MiniLM (:func:`shopping_companion.assembly.data.make_embedder`); :class:`OpenAIEmbedder`
calls any OpenAI-compatible ``/v1/embeddings`` endpoint (e.g. vLLM serving Qwen3-Embedding-8B, the
paper's model) and normalises the vectors.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence

import numpy as np

from shopping_companion.errors import ConfigError
from shopping_companion.personalization.data import ItemRecord, Review

__all__ = [
    "DialogueMemory",
    "OpenAIEmbedder",
    "ProductIndex",
    "ReviewIndex",
    "TextEmbedder",
    "VIEWS",
    "cosine",
    "encode_query",
    "make_text_embedder",
    "normalize",
    "top_k",
]

#: Product embedding views of Eq. 7: metadata, review mean, image description.
VIEWS: tuple[str, ...] = ("meta", "review", "image")


class TextEmbedder(Protocol):
    """``encode(texts) -> float32 (len(texts), dim)`` with unit-norm rows."""

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...


def encode_query(embedder: TextEmbedder, text: str) -> np.ndarray:
    """One query vector (d,): the embedder's low-latency ``encode_queries`` path when it has one
    (MiniLM: in-process LRU, never written to disk), else ``encode``."""
    fn = getattr(embedder, "encode_queries", None)
    return normalize((fn or embedder.encode)([text])[0])


def normalize(m: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm (zero rows stay zero); float32."""
    m = np.asarray(m, dtype=np.float32)
    if m.ndim == 1:
        n = float(np.linalg.norm(m))
        return m / n if n > 0 else m
    n = np.linalg.norm(m, axis=1, keepdims=True)
    return np.divide(m, n, out=np.zeros_like(m), where=n > 0)


def cosine(q: np.ndarray, m: np.ndarray) -> np.ndarray:
    """Cosine similarity of query ``q`` (d,) with every row of ``m`` (n, d) -> (n,)."""
    m = np.asarray(m, dtype=np.float32)
    if m.size == 0:
        return np.zeros(0, dtype=np.float32)
    return normalize(m) @ normalize(np.asarray(q, dtype=np.float32))


def top_k(scores: np.ndarray, k: int) -> list[int]:
    """Indices of the ``k`` highest scores, best first; equal scores keep index order."""
    if k <= 0 or len(scores) == 0:
        return []
    order = np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")
    return [int(i) for i in order[:k]]


@dataclass
class DialogueMemory:
    """R_d over one dialogue's prior turns (module docstring)."""

    embedder: TextEmbedder
    queries: list[str] = field(default_factory=list)
    replies: list[str] = field(default_factory=list)
    _vecs: list[np.ndarray] = field(default_factory=list)

    def add(self, query: str, reply: str, query_vec: np.ndarray | None = None) -> None:
        """Store a finished turn (its query embedding is computed unless given)."""
        v = query_vec if query_vec is not None else self.embedder.encode([query])[0]
        self.queries.append(query)
        self.replies.append(reply)
        self._vecs.append(normalize(v))

    def retrieve(self, query_vec: np.ndarray, k: int = 1) -> list[dict[str, Any]]:
        """Top-``k`` prior turns: ``[{"turn": 1-based, "query", "reply", "score"}]``."""
        if not self._vecs:
            return []
        s = cosine(query_vec, np.stack(self._vecs))
        return [
            {"turn": i + 1, "query": self.queries[i], "reply": self.replies[i], "score": float(s[i])}
            for i in top_k(s, k)
        ]


class ProductIndex:
    """R_p over a category's items (module docstring).

    Args:
        asins: item ids, length n.
        views: ``{"meta"|"review"|"image": (n, d) array}``; rows of items lacking a view are
            ignored through ``masks``.
        masks: ``{view: (n,) bool}`` — which items have that view (default: all).
    """

    def __init__(self, asins: list[str], views: dict[str, np.ndarray], masks: dict[str, np.ndarray] | None = None):
        bad = set(views) - set(VIEWS)
        if bad:
            raise ConfigError(f"views: unknown {sorted(bad)}; allowed {list(VIEWS)}")
        self.asins = list(asins)
        self.views = {k: normalize(v) for k, v in views.items()}
        for k, v in self.views.items():
            if v.shape[0] != len(self.asins):
                raise ConfigError(f"views[{k!r}]: {v.shape[0]} rows for {len(self.asins)} items")
        masks = masks or {}
        self.masks = {k: np.asarray(masks.get(k, np.ones(len(self.asins), bool)), bool) for k in self.views}

    def scores(self, query_vec: np.ndarray, use: Sequence[str]) -> tuple[np.ndarray, list[str]]:
        """Eq. 7: ``(s, views_used)`` with ``s[i]`` the mean cosine over the views in ``use`` that
        item i has. Raises :class:`ConfigError` for an unknown view name."""
        for u in use:
            if u not in VIEWS:
                raise ConfigError(f"use: unknown view {u!r}; allowed {list(VIEWS)}")
        used = [u for u in use if u in self.views and self.masks[u].any()]
        n = len(self.asins)
        total = np.zeros(n, dtype=np.float64)
        count = np.zeros(n, dtype=np.float64)
        for u in used:
            c = cosine(query_vec, self.views[u]).astype(np.float64)
            m = self.masks[u]
            total[m] += c[m]
            count[m] += 1
        s = np.divide(total, count, out=np.full(n, -np.inf), where=count > 0)
        return s, used

    def retrieve(self, query_vec: np.ndarray, use: Sequence[str], k: int = 5) -> list[dict[str, Any]]:
        """Eq. 8: top-``k`` items ``[{"asin", "score"}]`` (items without any used view excluded)."""
        s, _ = self.scores(query_vec, use)
        return [{"asin": self.asins[i], "score": float(s[i])} for i in top_k(s, k) if np.isfinite(s[i])]

    def vector(self, asin: str, view: str = "meta") -> np.ndarray:
        """An item's vector for one view."""
        return self.views[view][self.asins.index(asin)]


class ReviewIndex:
    """R_r over one user's visible reviews."""

    def __init__(self, reviews: list[Review], vecs: np.ndarray):
        if len(reviews) != len(vecs):
            raise ConfigError(f"vecs: {len(vecs)} rows for {len(reviews)} reviews")
        self.reviews = list(reviews)
        self.vecs = normalize(vecs) if len(reviews) else np.zeros((0, 1), np.float32)
        self.position = {r.review_id: i for i, r in enumerate(self.reviews)}

    def retrieve(self, query_vec: np.ndarray, k: int = 5) -> list[tuple[Review, float]]:
        """Top-``k`` reviews with their cosine scores."""
        if not self.reviews:
            return []
        s = cosine(query_vec, self.vecs)
        return [(self.reviews[i], float(s[i])) for i in top_k(s, k)]


def review_text(r: Review, max_chars: int = 800) -> str:
    """The text a review is embedded as."""
    return r.content[:max_chars]


def build_product_index(
    items: dict[str, ItemRecord],
    item_reviews: dict[str, list[Review]],
    embedder: TextEmbedder,
    max_reviews_per_item: int = 10,
) -> ProductIndex:
    """Embed a category's items: e^m of :meth:`ItemRecord.metadata_text`, e^r the mean of up to
    ``max_reviews_per_item`` most helpful visible reviews, e^d of ``image_description``."""
    asins = sorted(items)
    meta = embedder.encode([items[a].metadata_text() for a in asins])
    dim = meta.shape[1]
    texts: list[str] = []
    spans: list[tuple[int, int]] = []
    for a in asins:
        revs = sorted(item_reviews.get(a, []), key=lambda r: (-r.helpful_vote, r.review_id))[:max_reviews_per_item]
        spans.append((len(texts), len(texts) + len(revs)))
        texts.extend(review_text(r) for r in revs)
    rv = embedder.encode(texts) if texts else np.zeros((0, dim), np.float32)
    review = np.zeros((len(asins), dim), np.float32)
    rmask = np.zeros(len(asins), bool)
    for i, (a, b) in enumerate(spans):
        if b > a:
            review[i] = rv[a:b].mean(axis=0)
            rmask[i] = True
    views = {"meta": meta, "review": review}
    masks = {"meta": np.ones(len(asins), bool), "review": rmask}
    with_img = [i for i, a in enumerate(asins) if items[a].image_description]
    if with_img:
        img = np.zeros((len(asins), dim), np.float32)
        img[with_img] = embedder.encode([items[asins[i]].image_description for i in with_img])
        m = np.zeros(len(asins), bool)
        m[with_img] = True
        views["image"], masks["image"] = img, m
    return ProductIndex(asins, views, masks)


class OpenAIEmbedder:
    """Embeddings from an OpenAI-compatible ``/v1/embeddings`` endpoint, L2-normalised.

    ``batch_size`` texts per request; ``dimensions`` is sent when given (Matryoshka models).
    Raises :class:`shopping_companion.llm.base.BackendError` on a failed request.
    """

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        batch_size: int = 64,
        timeout_s: float = 120.0,
        dimensions: int | None = None,
    ) -> None:
        import os

        from openai import OpenAI

        if not model:
            raise ConfigError("model: must name the embedding model served by the endpoint")
        self.model = model
        self.batch_size = batch_size
        self.dimensions = dimensions
        self._client = OpenAI(
            api_key=os.environ.get(api_key_env) or "EMPTY", base_url=base_url, timeout=timeout_s, max_retries=2
        )

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        from shopping_companion.llm.base import BackendError

        texts = [t if t.strip() else " " for t in texts]
        out: list[list[float]] = []
        for i in range(0, len(texts), self.batch_size):
            kw: dict[str, Any] = {"model": self.model, "input": list(texts[i : i + self.batch_size])}
            if self.dimensions:
                kw["dimensions"] = self.dimensions
            try:
                resp = self._client.embeddings.create(**kw)
            except Exception as e:  # noqa: BLE001 - surfaced as a backend error with the cause
                raise BackendError(f"embeddings request to {self.model!r} failed: {e}") from e
            out.extend(d.embedding for d in sorted(resp.data, key=lambda d: d.index))
        return normalize(np.asarray(out, dtype=np.float32)) if out else np.zeros((0, 1), np.float32)


def make_text_embedder(
    spec: str = "minilm", base_url: str | None = None, api_key_env: str = "OPENAI_API_KEY"
) -> TextEmbedder:
    """``"minilm"`` (default, cached MiniLM) or ``"openai:<model>"`` (an embeddings endpoint at
    ``base_url``). Raises :class:`ConfigError` for anything else."""
    if spec == "minilm":
        from shopping_companion.assembly.data import make_embedder

        return make_embedder()
    if spec.startswith("openai:") and len(spec) > 7:
        return OpenAIEmbedder(spec[7:], base_url=base_url, api_key_env=api_key_env)
    raise ConfigError(f"embedder: {spec!r} is not 'minilm' or 'openai:<model>'")
