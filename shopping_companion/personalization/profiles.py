"""Structured user profiles from a user's visible reviews (paper §3.3, App. A.5 Figure 3).

:class:`UserProfile` has the paper's fields: ``style``, ``budget``, ``size``,
``quality_priorities``, ``dislikes``, ``pain_points``, ``additional_notes``. A field the reviews
give no evidence for is ``None`` (shown as "Not specified"), never invented.

Builders (both rating-aware: 4-5 stars show what the user values, 1-3 stars what they avoid):

* :class:`RuleProfileBuilder` (offline default, deterministic): counts aspect mentions
  (:data:`~shopping_companion.personalization.text.ASPECTS`) in high- and low-rated reviews,
  style words in high-rated ones, price words and item prices for the budget, sentences about size
  and fit for ``size``, and quotes short evidence with its star rating.
* :class:`LLMProfileBuilder`: asks any OpenAI-compatible endpoint (through a
  :class:`~shopping_companion.llm.base.ChatBackend`) with a prompt of our own wording for one JSON
  object with exactly these fields (strict schema, retries, cache: :class:`.llmjson.JSONAsker`).
"""

from __future__ import annotations

import statistics
from collections import Counter
from typing import Protocol

from pydantic import BaseModel, ConfigDict, field_validator

from shopping_companion.personalization.data import ItemRecord, Review
from shopping_companion.personalization.llmjson import JSONAsker
from shopping_companion.personalization.text import STYLE_WORDS, aspects_in, tokens
from shopping_companion.sentences import split_sentences

__all__ = ["LLMProfileBuilder", "ProfileBuilder", "RuleProfileBuilder", "UserProfile", "PROFILE_FIELDS"]

PROFILE_FIELDS = ("style", "budget", "size", "quality_priorities", "dislikes", "pain_points", "additional_notes")
_MISSING = {"", "none", "null", "n/a", "not specified", "no clear pattern", "unknown"}


class UserProfile(BaseModel):
    """A user's long-term preferences; every field a short text or None (no evidence)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    style: str | None
    budget: str | None
    size: str | None
    quality_priorities: str | None
    dislikes: str | None
    pain_points: str | None
    additional_notes: str | None

    @field_validator(*PROFILE_FIELDS, mode="before")
    @classmethod
    def _none_if_missing(cls, v):
        if isinstance(v, str) and v.strip().lower().rstrip(".") in _MISSING:
            return None
        return v

    def as_text(self) -> str:
        """One ``Field: value`` line per field; missing fields read "Not specified"."""
        return "\n".join(
            f"{f.replace('_', ' ').title()}: {getattr(self, f) or 'Not specified'}" for f in PROFILE_FIELDS
        )


class ProfileBuilder(Protocol):
    """``build(reviews, items) -> UserProfile``; ``name`` is recorded in the dataset manifest."""

    name: str

    def build(self, reviews: list[Review], items: dict[str, ItemRecord]) -> UserProfile: ...


def _quote(r: Review, words: int = 14) -> str:
    text = r.title.strip() or " ".join(r.text.split()[:words])
    return f'"{text[:90]}" ({r.rating:g} stars)'


def _join(xs: list[str]) -> str:
    return xs[0] if len(xs) == 1 else ", ".join(xs[:-1]) + " and " + xs[-1]


class RuleProfileBuilder:
    """Deterministic rating-aware profile (module docstring). ``max_quotes``: evidence quotes per field."""

    name = "rule"

    def __init__(self, max_quotes: int = 2) -> None:
        self.max_quotes = max_quotes

    def build(self, reviews: list[Review], items: dict[str, ItemRecord]) -> UserProfile:
        high = [r for r in reviews if r.rating >= 4]
        low = [r for r in reviews if r.rating <= 3]
        hi_aspects: Counter = Counter()
        for r in high:
            hi_aspects.update(
                list(aspects_in(r.content))
            )  # Counter keys: unique, in ASPECTS order (no hash-order ties)
        lo_aspects: Counter = Counter()
        lo_by_aspect: dict[str, list[Review]] = {}
        for r in low:
            for a in aspects_in(r.content):
                lo_aspects[a] += 1
                lo_by_aspect.setdefault(a, []).append(r)

        styles: Counter = Counter()
        for r in high:
            toks = set(tokens(r.content))
            styles.update(w for w in STYLE_WORDS if w in toks)
        style = None
        if styles:
            top = [w for w, _ in styles.most_common(3)]
            style = f"Drawn to {_join(top)} items (words used in 4-5 star reviews)."

        prices = [items[r.parent_asin].price for r in reviews if r.parent_asin in items and items[r.parent_asin].price]
        price_words = Counter()
        for r in reviews:
            t = set(tokens(r.content))
            if t & {"expensive", "overpriced", "pricey"}:
                price_words["pricey"] += 1
            if t & {"affordable", "cheap", "inexpensive", "bargain", "deal"}:
                price_words["cheap"] += 1
            if t & {"worth", "value"}:
                price_words["value"] += 1
        budget = None
        if prices:
            med = statistics.median(prices)
            band = "Budget-friendly" if med < 15 else "Mid-range" if med < 50 else "Premium"
            budget = f"{band}: median price of reviewed items ${med:.2f} over {len(prices)} priced item(s)."
        if price_words:
            note = []
            if price_words["pricey"]:
                note.append(f"complains about high prices in {price_words['pricey']} review(s)")
            if price_words["value"]:
                note.append(f"mentions value for money in {price_words['value']} review(s)")
            if price_words["cheap"]:
                note.append(f"notes low prices or deals in {price_words['cheap']} review(s)")
            budget = ((budget + " ") if budget else "Price-conscious: ") + "; ".join(note).capitalize() + "."

        size_sents = []
        for r in reviews:
            for s in split_sentences(r.text):
                if set(tokens(s)) & {"size", "fit", "fits", "fitted", "tight", "loose", "inch", "inches", "oz"}:
                    size_sents.append(f'"{s[:100]}" ({r.rating:g} stars)')
                    break
        size = "; ".join(size_sents[: self.max_quotes]) or None

        quality = None
        if hi_aspects:
            top = [a for a, _ in hi_aspects.most_common(3)]
            ev = [_quote(r) for r in high if set(aspects_in(r.content)) & set(top)][: self.max_quotes]
            quality = f"Values {_join(top)} (praised in 4-5 star reviews, e.g. {'; '.join(ev)})."

        dislikes = pain = None
        if low:
            if lo_aspects:
                top = [a for a, _ in lo_aspects.most_common(3)]
                dislikes = (
                    f"Criticised {_join(top)} in 1-3 star reviews, e.g. "
                    + "; ".join(_quote(r) for r in low[: self.max_quotes])
                    + "."
                )
                recurring = [a for a, n in lo_aspects.most_common() if n >= 2]
                if recurring:
                    pain = f"Recurring complaints about {_join(recurring[:3])} ({', '.join(str(lo_aspects[a]) for a in recurring[:3])} low-rated reviews)."
                else:
                    a = top[0]
                    pain = f"One low-rated experience with {a}: {_quote(lo_by_aspect[a][0])}."
            else:
                dislikes = (
                    "Gave 1-3 stars without a clear reason, e.g. "
                    + "; ".join(_quote(r) for r in low[: self.max_quotes])
                    + "."
                )

        mean = statistics.fmean(r.rating for r in reviews) if reviews else None
        brands = Counter(
            items[r.parent_asin].brand for r in high if r.parent_asin in items and items[r.parent_asin].brand
        )
        notes = [
            f"{len(reviews)} visible review(s), mean rating {mean:.1f}" if mean is not None else "no visible reviews"
        ]
        if brands:
            b, n = brands.most_common(1)[0]
            if n >= 2:
                notes.append(f"rated {b} highly {n} times")
        return UserProfile(
            style=style,
            budget=budget,
            size=size,
            quality_priorities=quality,
            dislikes=dislikes,
            pain_points=pain,
            additional_notes="; ".join(notes) + ".",
        )


_PROFILE_SYSTEM = (
    "You study a shopper's own product reviews and write down their lasting shopping preferences. Star ratings "
    "carry the signal: four or five stars show what the person values, one to three stars show what they avoid. "
    "Only state what the reviews support; where they say nothing about a field, put null. Reply with a single JSON "
    "object and nothing else."
)


def profile_prompt(
    reviews: list[Review], items: dict[str, ItemRecord], category: str, max_chars: int = 600
) -> list[dict[str, str]]:
    """The LLM profile prompt (our wording) for a user's visible reviews."""
    lines = []
    for i, r in enumerate(reviews, 1):
        it = items.get(r.parent_asin)
        name = it.title if it and it.title_source != "reviews" else f"item {r.parent_asin}"
        price = f", ${it.price:.2f}" if it and it.price is not None else ""
        lines.append(f"[{i}] {r.rating:g} stars on {name}{price}: {r.title.strip()} -- {r.text[:max_chars]}")
    fields = {
        "style": "the look or kind of product they gravitate to",
        "budget": "one of Budget-friendly, Mid-range, Premium, Mixed, with a short reason",
        "size": "sizes, dimensions or fit they mention",
        "quality_priorities": "qualities that earned high ratings",
        "dislikes": "materials, features or brands behind low ratings",
        "pain_points": "problems that come back across reviews",
        "additional_notes": "anything else that helps recommend to them",
    }
    user = (
        f"Shopping category: {category.replace('_', ' ')}\nReviews written by this shopper:\n"
        + "\n".join(lines)
        + "\n\nReturn a JSON object with exactly these keys (each a string of at most three sentences, or null):\n"
        + "\n".join(f'- "{k}": {v}' for k, v in fields.items())
        + "\nMention star levels as evidence where it helps (e.g. 'five stars when ...')."
    )
    return [{"role": "system", "content": _PROFILE_SYSTEM}, {"role": "user", "content": user}]


class LLMProfileBuilder:
    """Profile by an LLM (module docstring). ``asker`` wraps the endpoint's backend."""

    name = "llm"

    def __init__(self, asker: JSONAsker, category: str = "") -> None:
        self.asker = asker
        self.category = category

    def build(self, reviews: list[Review], items: dict[str, ItemRecord]) -> UserProfile:
        cat = self.category or (reviews[0].category if reviews else "")
        return self.asker.ask(profile_prompt(reviews, items, cat), UserProfile)
