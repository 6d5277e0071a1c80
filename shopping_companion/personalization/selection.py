"""Target-user and target-item selection with leakage control (paper §3.3, §4.1).

Per category: rank users by review count (ties by user id), keep the ``top_n_active`` most active
(paper: 100) with at least ``min_reviews`` reviews (paper: 2), draw ``users_per_category`` of them
(paper: 10; all when fewer qualify) with a seeded RNG, and give each one target: a positively rated
(``rating >= min_target_rating``, paper: 4) purchased item. A drawn user without such an item is
skipped and the next user in draw order is taken.

Leakage control (pre-purchase setting): the user's visible reviews are those written before the
target review (``before_target_only``), and every review the target user wrote about the target item
is removed from them (profile construction, user-review retrieval R_r), and
the target reviews of *all* selected users of the category are removed from the item review corpus
(product review embeddings, placeholder descriptions). :func:`visible_corpus` returns that corpus and
:func:`assert_no_leak` checks any text against a case's hidden review.
"""

from __future__ import annotations

import hashlib
import random
from collections import defaultdict
from typing import Iterable, Literal

from pydantic import BaseModel, ConfigDict, Field

from shopping_companion.errors import ConfigError
from shopping_companion.personalization.data import Review
from shopping_companion.errors import LeakageError  # noqa: F401 - re-exported

__all__ = ["LeakageError", "SelectionConfig", "UserCase", "assert_no_leak", "select_cases", "visible_corpus"]


class SelectionConfig(BaseModel):
    """User / target selection settings (paper defaults).

    ``target_strategy``: ``"latest"`` (the most recent positively rated review; ties by ASIN) or
    ``"random"`` (seeded draw among them). ``before_target_only`` (default True): the user's visible
    reviews are those written before the target review (at the moment of the purchase the later ones
    do not exist yet); False keeps every review except those of the target item.
    """

    model_config = ConfigDict(extra="forbid")
    top_n_active: int = Field(default=100, ge=1)
    min_reviews: int = Field(default=2, ge=2)
    users_per_category: int = Field(default=10, ge=1)
    min_target_rating: float = Field(default=4.0, ge=1, le=5)
    target_strategy: Literal["latest", "random"] = "latest"
    before_target_only: bool = True
    seed: int = 0


class UserCase(BaseModel):
    """One target user of a category: ``visible_reviews`` are what the assistant may see (the
    target review removed); ``target_review`` is hidden from the assistant (used by query
    generation only through the target's product record, and by metrics)."""

    model_config = ConfigDict(extra="forbid")
    case_id: str
    category: str
    user_id: str
    target_asin: str
    target_review: Review
    visible_reviews: list[Review]


def _rng(seed: int, category: str) -> random.Random:
    h = hashlib.sha256(f"{seed}:{category}".encode()).digest()
    return random.Random(int.from_bytes(h[:8], "big"))


def select_cases(reviews: Iterable[Review], category: str, config: SelectionConfig | None = None) -> list[UserCase]:
    """Select the target users of ``category`` from its reviews (module docstring).

    Returns cases in draw order (deterministic for a seed). Raises :class:`ConfigError` when the
    category has no review at all.
    """
    cfg = config or SelectionConfig()
    by_user: dict[str, list[Review]] = defaultdict(list)
    for r in reviews:
        if r.category == category:
            by_user[r.user_id].append(r)
    if not by_user:
        raise ConfigError(f"category: no reviews for {category!r}")
    ranked = sorted(by_user, key=lambda u: (-len(by_user[u]), u))[: cfg.top_n_active]
    eligible = [u for u in ranked if len(by_user[u]) >= cfg.min_reviews]
    rng = _rng(cfg.seed, category)
    order = eligible[:]
    rng.shuffle(order)
    cases: list[UserCase] = []
    for uid in order:
        if len(cases) >= cfg.users_per_category:
            break
        revs = sorted(by_user[uid], key=lambda r: (r.timestamp, r.parent_asin))
        pos = [r for r in revs if r.rating >= cfg.min_target_rating]
        if not pos:
            continue
        if cfg.target_strategy == "latest":
            target = pos[-1]
        else:
            target = pos[rng.randrange(len(pos))]
        visible = [
            r
            for r in revs
            if r.parent_asin != target.parent_asin
            and (not cfg.before_target_only or (r.timestamp, r.parent_asin) < (target.timestamp, target.parent_asin))
        ]
        if not visible:
            continue  # nothing left to personalise from (every review was about the target)
        cases.append(
            UserCase(
                case_id=f"{category}:{uid}",
                category=category,
                user_id=uid,
                target_asin=target.parent_asin,
                target_review=target,
                visible_reviews=visible,
            )
        )
    return cases


def visible_corpus(reviews: Iterable[Review], cases: Iterable[UserCase]) -> list[Review]:
    """``reviews`` without any selected user's reviews of their target item (module docstring)."""
    hidden = {(c.user_id, c.target_asin) for c in cases}
    return [r for r in reviews if (r.user_id, r.parent_asin) not in hidden]


def _grams(text: str, n: int) -> set[tuple[str, ...]]:
    w = text.split()
    return {tuple(w[i : i + n]) for i in range(len(w) - n + 1)}


def assert_no_leak(case: UserCase, texts: Iterable[str], n: int = 12) -> None:
    """Raise :class:`LeakageError` if any text contains the hidden review's body or any run of
    ``n`` consecutive words of it (whitespace-separated; bodies shorter than ``n`` words are
    checked whole when they have at least 6 words: "Great product" is no leak)."""
    body = " ".join(case.target_review.text.split())
    words = body.split()
    probes = _grams(body, n) if len(words) >= n else set()
    whole = body if 6 <= len(words) < n else None
    for t in texts:
        if whole and whole in " ".join(t.split()):
            raise LeakageError(f"{case.case_id}: hidden target review text reached the assistant: {whole[:80]!r}")
        if probes:
            hit = probes & _grams(t, n)
            if hit:
                raise LeakageError(
                    f"{case.case_id}: hidden target review text reached the assistant: {' '.join(next(iter(hit)))[:80]!r}"
                )
