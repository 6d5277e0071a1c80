"""Text normalisation shared by every comparison of the value-matching layer.

:func:`tokens` turns a text into comparable tokens:

1. Unicode NFKD, accents removed, lower case; ``&`` read as *and*; a ``+`` glued to a word or a
   number read as *plus* (``"7+"`` → ``7 plus``, ``"S9+"`` → ``s 9 plus``); the possessive ``'s``
   dropped.
2. Split into runs of letters and runs of digits (a decimal such as ``1.5`` stays one token; a
   number glued to letters is split: ``"32GB"`` → ``32 gb``). Hyphens, slashes, underscores and
   other punctuation separate tokens, so ``lace-up`` = ``lace up``.
3. Stop words dropped (a, an, the, of, and, or, for, with, in, on, to); number words up to twenty
   read as digits (``three`` → ``3``); simple singularisation (``dresses`` → ``dress``, ``batteries``
   → ``battery``, ``shoes`` → ``shoe``; pair nouns such as *jeans*, *trousers* kept); a few
   spelling variants unified (gray → grey, color → colour, colored → coloured).

Joined forms are compared through :func:`compact` (tokens concatenated): ``crewneck`` =
``crew neck``. Results are memoised (bounded LRU caches): catalog fields recur across
trajectories.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

__all__ = [
    "tokens",
    "phrase",
    "padded",
    "compact",
    "NUMBER_WORDS",
    "STOP_WORDS",
    "contains_phrase",
    "negated_positions",
    "phrase_occurs",
    "distribute_negation",
    "split_denials",
    "denied_in",
    "unit_marks",
]

STOP_WORDS = frozenset({"a", "an", "the", "of", "and", "or", "for", "with", "in", "on", "to"})

NUMBER_WORDS = {
    "zero": "0",
    "one": "1",
    "two": "2",
    "three": "3",
    "four": "4",
    "five": "5",
    "six": "6",
    "seven": "7",
    "eight": "8",
    "nine": "9",
    "ten": "10",
    "eleven": "11",
    "twelve": "12",
    "thirteen": "13",
    "fourteen": "14",
    "fifteen": "15",
    "sixteen": "16",
    "seventeen": "17",
    "eighteen": "18",
    "nineteen": "19",
    "twenty": "20",
    "single": "1",
    "double": "2",
    "triple": "3",
}

#: British / American spellings read as one (the left form becomes the right one)
_VARIANTS = {
    "gray": "grey",
    "color": "colour",
    "colored": "coloured",
    "colors": "colour",
    "centre": "center",
    "analogue": "analog",
    "aluminium": "aluminum",
    "jewellery": "jewelry",
    "sulphate": "sulfate",
    "sulphates": "sulfate",
    "sulfates": "sulfate",
    "metre": "meter",
    "metres": "meter",
    "litre": "liter",
    "litres": "liter",
    "favourite": "favorite",
    "flavor": "flavour",
    "flavors": "flavour",
    "moisturizer": "moisturiser",
    "moisturizing": "moisturising",
    "organiser": "organizer",
    "pyjamas": "pajamas",
    "tyre": "tire",
    "tyres": "tire",
    "mould": "mold",
    "fibre": "fiber",
    "fibres": "fiber",
}
_NO_SINGULAR = frozenset(
    {
        "jeans",
        "glasses",
        "trousers",
        "shorts",
        "pants",
        "leggings",
        "sunglasses",
        "jeggings",
        "tights",
        "pyjamas",
        "pajamas",
        "briefs",
        "boxers",
        "trunks",
        "capris",
        "joggers",
        "chinos",
        "overalls",
        "dungarees",
        "goggles",
        "scissors",
        "earphones",
        "headphones",
        "earbuds",
        "news",
        "series",
        "species",
        "chassis",
        "lens",
        "canvas",
        "bus",
        "gas",
        "dress",
        "less",
        "plus",
        "class",
        "glass",
        "cross",
        "gloss",
        "boss",
        "mattress",
        "yes",
        "this",
        "its",
        "us",
        "is",
        "was",
        "has",
        "his",
    }
)
_OS_WORDS = frozenset({"kudos", "chaos", "cosmos", "ethos", "pathos", "thermos", "atlas", "bathos"})
_WORD_RE = re.compile(r"[a-z]+|\d+(?:\.\d+)?")
_POSSESSIVE_RE = re.compile(r"['’]s\b")
_PLUS_RE = re.compile(r"(?<=[A-Za-z0-9])\+")


def _singular(t: str) -> str:
    if len(t) <= 3 or t[0].isdigit() or t in _NO_SINGULAR:
        return t
    if t.endswith("ies") and len(t) > 4:
        return t[:-3] + "y"
    if t.endswith(("sses", "shes", "ches", "xes", "zes")):
        return t[:-2]
    if t.endswith("s") and not t.endswith(("ss", "us", "is")) and t not in _OS_WORDS:
        return t[:-1]
    return t


#: a quote mark right after a number is a unit: double (``10"``, ``10''``, curly ``10”``, ``10″``)
#: inches, single (``10'``, ``10’``, ``10′``; not ``90's``) feet — read before Unicode folding, which
#: turns ``″`` into two primes
_INCH_MARK = re.compile(r"(?<![\d.\"“”‘])(\d+(?:\.\d+)?)\s?(?:''|’’|′′|\"|”|″)")
_FOOT_MARK = re.compile(r"(?<![\d.\"“”‘])(\d+(?:\.\d+)?)\s?['’′](?![A-Za-z])")
_MARKS = frozenset("'\"’′″”")


def unit_marks(text: str) -> str:
    """``text`` with a quote mark right after a number written as its unit word (``10"`` → ``10 inch``,
    ``10'`` → ``10 ft``), as :func:`tokens` reads it."""
    if not _MARKS.intersection(text):
        return text
    return _FOOT_MARK.sub(r"\1 ft ", _INCH_MARK.sub(r"\1 inch ", text))


def _tokens(text: str) -> tuple[str, ...]:
    text = unit_marks(text)
    if text.isascii():
        s = text.lower()
    else:
        s = unicodedata.normalize("NFKD", text)
        s = "".join(ch for ch in s if not unicodedata.combining(ch)).lower()
    if "&" in s:
        s = s.replace("&", " and ")
    if "+" in s:
        s = _PLUS_RE.sub(" plus ", s)
    s = _POSSESSIVE_RE.sub("", s)
    out: list[str] = []
    for t in _WORD_RE.findall(s):
        if t in STOP_WORDS:
            continue
        t = NUMBER_WORDS.get(t, t)
        t = _singular(t)
        out.append(_VARIANTS.get(t, t))
    return tuple(out)


#: Texts up to this many characters have their tokens cached in the short-text cache.
SHORT_TEXT_CHARS = 512
#: Longer texts up to this many characters (a tool observation, a needle session) have their tokens
#: cached in a small cache; longer ones are tokenised every time. The bound keeps the memory of a
#: long-running process (a GRPO rollout worker, ``shopcomp view`` classifying thousands of long
#: trajectories) at about 256 x 32k characters' tokens (~100 MB) at worst; it was 8,192 texts of any
#: length, which grew past 2 GB on long trajectories.
LONG_TEXT_CHARS = 32_768

_tokens_short = lru_cache(maxsize=262144)(_tokens)
_tokens_long = lru_cache(maxsize=256)(_tokens)


def tokens(text: str | None) -> tuple[str, ...]:
    """Normalised tokens of ``text`` in order (module docstring); ``()`` for None or empty."""
    if not text:
        return ()
    if len(text) <= SHORT_TEXT_CHARS:
        return _tokens_short(text)
    return _tokens_long(text) if len(text) <= LONG_TEXT_CHARS else _tokens(text)


@lru_cache(maxsize=262144)
def _phrase_short(text: str) -> str:
    return " ".join(tokens(text))


def phrase(text: str | None) -> str:
    """The normalised tokens joined by single spaces (``"Lace-Ups"`` → ``"lace up"``)."""
    if not text:
        return ""
    return _phrase_short(text) if len(text) <= SHORT_TEXT_CHARS else " ".join(tokens(text))


@lru_cache(maxsize=131072)
def _padded_short(text: str) -> str:
    return f" {phrase(text)} "


@lru_cache(maxsize=1024)
def _padded_long(text: str) -> str:
    return f" {phrase(text)} "


def padded(text: str | None) -> str:
    """``" tok tok … "``: the normalised phrase padded with spaces, so that whole-token phrase
    containment is a substring test (``padded(a).strip() and padded(a) in padded(b)``)."""
    if not text:
        return "  "
    if len(text) <= SHORT_TEXT_CHARS:
        return _padded_short(text)
    return _padded_long(text) if len(text) <= LONG_TEXT_CHARS else f" {phrase(text)} "


@lru_cache(maxsize=131072)
def compact(text: str | None) -> str:
    """The normalised tokens concatenated without spaces: ``crew neck`` and ``crewneck`` agree."""
    return "".join(tokens(text)) if text else ""


def contains_phrase(needle: str, haystack: str) -> bool:
    """The normalised tokens of ``needle`` occur contiguously in ``haystack`` (non-empty needle)."""
    n = padded(needle)
    return n.strip() != "" and n in padded(haystack)


_NEGATORS = frozenset({"not", "no", "non", "without", "never", "nor", "free"})


def negated_positions(toks: tuple[str, ...]) -> frozenset[int]:
    """Token positions a negation covers in prose: the token right after *not* / *no* / *non* /
    *without* / *never* / *nor* ("non leather", "no polyester"), and the token before *free*
    ("polyester free", "leather-free")."""
    out: set[int] = set()
    for k, t in enumerate(toks):
        if t == "free" and k > 0:
            out.add(k - 1)
        elif t in _NEGATORS and t != "free":
            out.add(k + 1)
    return frozenset(out)


_W = r"[A-Za-z][\w'-]*"
#: "SLS & Paraben Free", "gluten and sugar free" (not a comma list: "Cookies, Sugar Free")
_FREE_AFTER = re.compile(rf"\b((?:{_W}\s*(?:&|\band\b|\bor\b)\s*)+)({_W})[\s-]+free\b", re.IGNORECASE)
#: "free from latex and powder", "free of SLS"
_FREE_BEFORE = re.compile(rf"\bfree\s+(?:from|of)\s+({_W}(?:\s*(?:&|\band\b|\bor\b)\s*{_W})*)", re.IGNORECASE)
#: "without latex or powder"; "no sugar or salt" (after *no* only *or*: "no pockets and a zip")
_NEG_LIST = re.compile(rf"\b(without|no)\s+({_W}(?:\s*(?:&|\band\b|\bor\b|\bnor\b)\s*{_W})+)", re.IGNORECASE)
_JOIN = re.compile(r"\s*(?:&|\band\b|\bor\b|\bnor\b)\s*", re.IGNORECASE)


def _free_list(m: re.Match) -> str:
    words = [w for w in _JOIN.split(m.group(1)) if w.strip()] + [m.group(2)]
    return " and ".join(f"{w.strip()} free" for w in words)


def _free_from(m: re.Match) -> str:
    return " and ".join(f"{w.strip()} free" for w in _JOIN.split(m.group(1)) if w.strip())


def _neg_list(m: re.Match) -> str:
    neg = m.group(1)
    parts = re.split(r"(\s*(?:&|\band\b|\bor\b|\bnor\b)\s*)", m.group(2), flags=re.IGNORECASE)
    out = [f"{neg} {parts[0]}"]
    for sep, word in zip(parts[1::2], parts[2::2], strict=True):
        if neg.lower() == "no" and sep.strip().lower() not in ("or", "nor"):
            out.append(f"{sep}{word}")
            neg = ""  # "no pockets and a zip": the negation stops at *and*
        else:
            out.append(f"{sep}{neg} {word}" if neg else f"{sep}{word}")
    return "".join(out)


def distribute_negation(text: str) -> str:
    """``text`` with a negation repeated over the words it covers through *and* / *or* / ``&``, so
    that :func:`negated_positions` sees each: "SLS & Paraben Free" → "SLS free and Paraben free",
    "free from latex and powder" → "latex free and powder free", "without latex or powder" →
    "without latex or without powder" (after *no*, only over *or* / *nor*). Single words only."""
    low = text.lower()
    if "free" not in low and "without" not in low and "no " not in low:
        return text
    if "free" in low:
        text = _FREE_AFTER.sub(_free_list, text)
        text = _FREE_BEFORE.sub(_free_from, text)
    return _NEG_LIST.sub(_neg_list, text)


_NEG = r"(?:not|never|cannot|(?:can|won|don|doesn|isn|aren|wouldn|didn|shouldn)['’]?t)"
#: a product denying that it goes with what follows: "Not compatible with Xbox", "does not work
#: with", "won't fit", "not suitable / recommended for", "do not use on", "not for use with",
#: "incompatible with", "except"
_DENIAL = re.compile(
    rf"\b{_NEG}\s+(?:be\s+|been\s+)?(?:compatible|suitable|recommended|designed|intended|meant|made|"
    r"appropriate|safe|approved|usable|used|for\s+use)\s+(?:(?:for|with|on|in|by|to|into)\b|w/)"
    rf"|\b{_NEG}\s+(?:work|fit|support|connect|pair|suit)s?\b(?:\s+(?:(?:with|on|in|into|for)\b|w/))?"
    r"|\bno\s+(?:compatibility|support)\s+(?:for|with)\b"
    rf"|\b(?:{_NEG}|avoid)\s+(?:use|using)\b(?:\s+(?:it|this|them))?\s+(?:on|for|with|in)\b"
    r"|\bnot\s+for\b(?!\s+(?:only|just)\b)"
    r"|\b(?:incompatible|unsuitable|unfit)\s+(?:for|with|on|in)\b"
    r"|\bexcept(?:\s+for)?\b|\bexcluding\b",
    re.IGNORECASE,
)
#: a denial after what it denies: "USB-C not supported", "Induction: not suitable"
_DENIAL_AFTER = re.compile(
    r"(?:\s*[:–-]\s*|\s+)(?:is\s+|are\s+)?(?:not|never)\s+(?:supported|compatible|suitable|recommended)\b"
    r"(?!\s+(?:with|for|on|in|by|to|into)\b)",
    re.IGNORECASE,
)
#: where a denial's scope ends: a sentence or clause mark, or a turn ("but", "however", "only")
_DENIAL_END = re.compile(r"[.;:!?|()\[\]\n]|\b(?:but|however|only|instead)\b", re.IGNORECASE)
_DENIAL_START = re.compile(r"[.;!?|()\[\],\n]")
_DENIAL_CUES = ("not", "never", "n't", "n’t", "incompat", "unsuit", "unfit", "except", "excluding", "cannot", "no ")


@lru_cache(maxsize=8192)
def split_denials(text: str) -> tuple[str, tuple[tuple[str, bool], ...]]:
    """``text`` with every denial cut out — "Not compatible with Xbox One or PS4." (:data:`_DENIAL`,
    up to the end of its clause) or "USB-C not supported" (:data:`_DENIAL_AFTER`, back to the start
    of its clause) — and the denied scopes as ``(words, firm)``; ``firm`` is false for the part of a
    forward scope after a first comma ("Not compatible with Xbox, works with PS5": only Xbox is
    firmly denied). What a product denies is neither stated nor stated absent."""
    low = text.lower()
    if not any(c in low for c in _DENIAL_CUES):
        return text, ()
    cuts: list[tuple[int, int]] = []
    scopes: list[tuple[str, bool]] = []
    for m in _DENIAL.finditer(text):
        end = _DENIAL_END.search(text, m.end())
        stop = end.start() if end else len(text)
        firm, _, loose = text[m.end() : stop].partition(",")
        scopes.append((firm, True))
        if loose.strip():
            scopes.append((loose, False))
        cuts.append((m.start(), stop))
    for m in _DENIAL_AFTER.finditer(text):
        start = max((b.end() for b in _DENIAL_START.finditer(text, 0, m.start())), default=0)
        if text[start : m.start()].strip():
            scopes.append((text[start : m.start()], True))
            cuts.append((start, m.end()))
    if not scopes:
        return text, ()
    out: list[str] = []
    pos = 0
    for a, b in sorted(cuts):
        if a >= pos:
            out.append(text[pos:a])
            out.append(" ; ")
        pos = max(pos, b)
    out.append(text[pos:])
    return "".join(out), tuple(scopes)


def denied_in(value: str | None, text: str | None) -> bool | None:
    """Whether ``text`` denies going with ``value`` (:func:`split_denials`): True when a firm
    scope names it, False when only a loose one does (after a comma), None when none does."""
    if not value or not text:
        return None
    loose = False
    for scope, firm in split_denials(text)[1]:
        if phrase_occurs(value, scope):
            if firm:
                return True
            loose = True
    return False if loose else None


def phrase_occurs(value: str | None, text: str | None) -> bool | None:
    """Whether prose ``text`` states ``value`` (normalised tokens as a contiguous phrase): True
    when some occurrence is not negated, False when every occurrence is ("latex-free", "no latex",
    "without latex"), None when it does not occur (or ``value`` has no tokens). An occurrence
    inside a denial ("not compatible with …", :func:`split_denials`) is no occurrence."""
    if text and len(text) > 2:
        text = split_denials(text)[0]
    v, t = tokens(value or ""), tokens(distribute_negation(text or ""))
    n = len(v)
    if not n or n > len(t):
        return None
    neg = negated_positions(t)
    seen = False
    for i in range(len(t) - n + 1):
        if t[i : i + n] == v:
            if i not in neg and (i + n - 1) not in neg:
                return True
            seen = True
    return False if seen else None
