"""Small text utilities: tokenisation, aspect lexicon, product-type extraction.

The aspect lexicon is ours (shopping aspects that reviews praise or criticise); it drives the
offline rule-based profile builder and the template query generator.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Iterable

__all__ = [
    "ASPECTS",
    "GENERIC_ASPECTS",
    "STOPWORDS",
    "content_tokens",
    "product_type",
    "singular",
    "tokens",
    "with_article",
]

_TOKEN = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")

STOPWORDS = frozenset(
    """a an the and or of for to in on with by at from as is are was were be been it its this that these those
    i me my we our you your he she they them their his her not no but so if then than too very just
    can will would should could do does did have has had about into over under up out more most
    some any all each other such only own same also s t don doesn didn isn wasn get got one two
    """.split()
)

#: aspect name -> trigger words (lower case). Order matters only for ties.
ASPECTS: dict[str, tuple[str, ...]] = {
    "quality": ("quality", "well made", "sturdy", "cheap", "flimsy", "poorly made", "craftsmanship"),
    "durability": ("durable", "lasts", "lasted", "broke", "broken", "fell apart", "wear out", "long lasting"),
    "value": ("price", "value", "worth", "expensive", "overpriced", "affordable", "money", "deal"),
    "size and fit": ("size", "fit", "fits", "small", "large", "tight", "loose", "big", "tiny", "length"),
    "comfort": ("comfortable", "comfort", "soft", "itchy", "scratchy", "gentle"),
    "scent": ("scent", "smell", "smells", "fragrance", "odor"),
    "texture": ("texture", "greasy", "sticky", "smooth", "thick", "thin", "creamy"),
    "appearance": ("color", "colour", "pretty", "beautiful", "cute", "looks", "design", "style", "gorgeous"),
    "ease of use": ("easy", "easy to use", "difficult", "hard to", "simple", "instructions", "setup"),
    "effectiveness": ("works", "worked", "effective", "results", "does not work", "didn't work", "useless"),
    "packaging": ("packaging", "package", "box", "packaged", "arrived", "damaged", "shipping"),
    "taste": ("taste", "tastes", "flavor", "flavour", "delicious", "bland"),
    "variety": ("variety", "selection", "assortment", "different", "surprise"),
    "sound": ("sound", "audio", "volume", "noise", "loud", "quiet"),
    "battery and power": ("battery", "charge", "charging", "power"),
    "skin sensitivity": ("sensitive", "irritation", "breakout", "rash", "allergic", "hypoallergenic"),
    "material": ("material", "fabric", "plastic", "metal", "cotton", "leather", "wood", "glass"),
}

#: aspects that apply to almost any product (questions may always ask about them)
GENERIC_ASPECTS = ("quality", "durability", "value", "appearance", "ease of use", "packaging")

STYLE_WORDS = (
    "casual",
    "elegant",
    "minimalist",
    "vintage",
    "cute",
    "classic",
    "modern",
    "bold",
    "natural",
    "colorful",
    "simple",
    "luxurious",
    "playful",
    "sleek",
    "rustic",
    "professional",
    "sporty",
    "girly",
    "retro",
    "fun",
    "organic",
    "practical",
)

_COLOURS = {
    "black",
    "white",
    "red",
    "blue",
    "green",
    "pink",
    "purple",
    "gold",
    "silver",
    "brown",
    "grey",
    "gray",
    "yellow",
    "orange",
    "beige",
    "navy",
    "rose",
    "clear",
    "multicolor",
    "multi",
}
_NOT_TYPE = (
    STOPWORDS
    | _COLOURS
    | {
        "pack",
        "set",
        "pcs",
        "piece",
        "pieces",
        "count",
        "new",
        "women",
        "men",
        "girls",
        "boys",
        "kids",
        "adults",
        "oz",
        "ml",
        "inch",
        "inches",
        "size",
        "large",
        "small",
        "mini",
        "premium",
        "professional",
        "best",
        "gift",
        "gifts",
        "free",
        "natural",
        "perfect",
        "great",
        "high",
        "quality",
        "x",
        "ft",
        "lb",
        "lbs",
        "item",
        "edition",
    }
)


def tokens(text: str) -> list[str]:
    """Lower-case alphanumeric tokens (apostrophe suffixes kept: ``didn't``)."""
    return _TOKEN.findall((text or "").lower())


def content_tokens(text: str) -> list[str]:
    """:func:`tokens` without stop words and one-character tokens."""
    return [t for t in tokens(text) if t not in STOPWORDS and len(t) > 1]


def aspects_in(text: str) -> Counter:
    """``Counter(aspect -> number of trigger hits)`` in ``text``."""
    low = f" {' '.join(tokens(text))} "
    c: Counter = Counter()
    for name, words in ASPECTS.items():
        for w in words:
            n = low.count(f" {w} ")
            if n:
                c[name] += n
    return c


def product_type(title: str, category: str, corpus_titles: Iterable[str] = (), brand: str | None = None) -> str:
    """A generic product type for ``title`` that does not name the product.

    The title's first segment (before ``, - | ( [``) is split into candidate unigrams and
    bigrams; each is scored by how many titles of the category contain it (``corpus_titles``),
    ignoring brand words, colours, numbers and marketing words; the best bigram wins when it is at
    least half as frequent as the best unigram. Falls back to the category name in lower case
    (``"Subscription_Boxes"`` -> ``"subscription boxes"``) when the title has no candidate.
    """
    fallback = singular(category.replace("_", " ").lower())
    first = re.split(r"[,|(\[]| - | – ", title or "", maxsplit=1)[0]
    brand_toks = set(tokens(brand or ""))
    toks = [t for t in tokens(first) if t not in _NOT_TYPE and t not in brand_toks and not t.isdigit() and len(t) > 2]
    if not toks:
        return fallback
    df: Counter = Counter()
    for t in corpus_titles:
        seg = set(tokens(re.split(r"[,|(\[]| - ", t or "", maxsplit=1)[0]))
        df.update(seg)
    uni = max(toks, key=lambda t: (df[t], toks.index(t)))
    i = toks.index(uni)
    pairs = []
    if i + 1 < len(toks):
        pairs.append((df[toks[i + 1]], f"{uni} {toks[i + 1]}"))
    if i > 0:
        pairs.append((df[toks[i - 1]], f"{toks[i - 1]} {uni}"))
    pairs = [p for p in pairs if p[0] >= 2]
    return singular(max(pairs)[1] if pairs else uni)


def singular(phrase: str) -> str:
    """Naive singular of the last word (``boxes`` -> ``box``, ``accessories`` -> ``accessory``,
    ``crowns`` -> ``crown``; ``glass``, ``series`` kept)."""
    words = phrase.split()
    if not words:
        return phrase
    w = words[-1]
    if w.endswith("ies") and len(w) > 4:
        w = w[:-3] + "y"
    elif w.endswith(("xes", "ches", "shes", "sses")):
        w = w[:-2]
    elif w.endswith("s") and not w.endswith(("ss", "us", "is", "series")) and len(w) > 3:
        w = w[:-1]
    return " ".join(words[:-1] + [w])


def with_article(phrase: str) -> str:
    """``"an iron"``, ``"a hair mask"``."""
    return ("an " if phrase[:1].lower() in "aeiou" else "a ") + phrase
