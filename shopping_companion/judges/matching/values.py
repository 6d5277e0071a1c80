"""Value comparison: what the rule judge, the tool-wise fallback, synthesis verification and the
LLM judge's post-checks use to decide that two attribute values mean the same, or that a product's
value meets a wish.

A value is read once (:meth:`ValueMatcher.parse`, cached) into a :class:`Value`: its normalised
phrase, the concepts of its key's vocabulary it names (``"Navy Blue"`` → navy), a numeric
:class:`~shopping_companion.judges.matching.quantity.Constraint` when it states a number with a
unit or an operator (or its key is a quantity), and for materials the composition with
percentages (``"60% polyester 40% cotton"``).

Three questions, each a documented rule:

:meth:`ValueMatcher.equivalent` — *same meaning* (stage 1: gold vs identified)
    1. equal normalised or joined phrases (``crewneck`` = ``crew neck``);
    2. both numeric: the same operator and bounds after unit conversion (``1.5 m`` = ``150 cm``,
       ``three`` = ``3``; ``<= 150`` ≠ ``>= 150``);
    3. both name concepts of the vocabulary: the same concept set (``half sleeves`` = ``Short
       Sleeves``; ``navy`` ≠ ``blue``; ``dark navy`` = ``navy``: modifiers are ignored);
    4. equal token sets;
    5. otherwise undecided: the embedding fallback decides when configured (cosine of MiniLM
       embeddings of ``"<key>: <value>"`` ≥ the calibrated threshold), else not equivalent.

:meth:`ValueMatcher.satisfies` — *a product value meets a wanted value* (stage 2)
    numeric: a quantity in the product value is admitted by the constraint (``146 cm`` meets
    ``at most 150 cm``); vocabulary: every gold concept is met by a concept of the product value
    that is it or a narrower one (``Navy Blue`` meets ``blue``; ``Blue`` does not meet ``navy``);
    a material wish needs the material to be the main one (sole material, ≥ 50 % of a blend, or
    first-named without percentages); free text: the gold phrase occurs in the product value;
    values outside the vocabulary on both sides: the embedding fallback.

:meth:`ValueMatcher.present` — *a product value has an avoided value at all* (stage 2, avoid)
    as :meth:`satisfies` but any share of a blend counts.

Every answer is ``True``/``False``. :meth:`ValueMatcher.compare`, :meth:`ValueMatcher.satisfaction`
and :meth:`ValueMatcher.presence` also say whether the answer rests on explicit evidence
(:class:`Decision`): ``explicit`` is False when the lexicon could not read one side (a value
outside every vocabulary, no quantity) and the answer came from the embedding fallback or from
"not found" — the rule judge's *uncertain* items (``docs/judge.md``, "Selective verdicts").
``None`` from the lower-level ``_decide`` helpers means "undecided" and never leaves this module.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

from shopping_companion.judges.matching.lexicon import Lexicon, ResolvedKey, Vocabulary, load_lexicon
from shopping_companion.judges.matching.normalize import compact, padded, phrase, tokens
from shopping_companion.judges.matching.quantity import HAS_UNIT_OR_OP as _HAS_UNIT_OR_OP
from shopping_companion.judges.matching.quantity import (
    REL_TOL,
    UNIT_ALIASES,
    Constraint,
    parse_constraint,
    parse_quantities,
)

__all__ = [
    "Decision",
    "Value",
    "ValueMatcher",
    "Similarity",
    "default_matcher",
    "readings",
    "split_gloss",
    "split_negation",
    "listed_names",
    "purpose_head",
    "yes_no",
]

#: ``similarity(a, b) -> cosine in [-1, 1]`` (e.g. MiniLM embeddings, see :mod:`.similarity`).
Similarity = Callable[[str, str], float]

_HEDGE = re.compile(
    r"\s+(?:or|and/or)\s+(?!(?:less|more|above|below|under|over|smaller|bigger|larger|longer|shorter|taller|"
    r"wider|narrower|higher|lower|greater|fewer|heavier|lighter|deeper|thicker|thinner|so)\b)"
    r"|[,;|]|(?<!\d)/(?!\d)",
    re.IGNORECASE,
)
#: a number followed by a word of letters: a unit, when the table reads it
_NUMBER_WORD = re.compile(r"\d\s*([a-z]+)\b", re.IGNORECASE)
#: words after a number that are not units
_NOT_UNITS = frozenset({"x", "by", "or", "and", "to", "plus", "per", "max", "min", "pack", "pcs", "pieces", "set"})


def _unread_unit(text: str) -> bool:
    """``text`` has a number followed by a word the unit table does not read ("10 bar", "10 ATM")."""
    return any(w.lower() not in UNIT_ALIASES and w.lower() not in _NOT_UNITS for w in _NUMBER_WORD.findall(text or ""))


#: "not navy", "no cotton", "anything but Nike", "cotton-free" — but not "no wider than 150 cm"
_NEGATION = re.compile(
    r"^\s*(?:not|no|non|never|without|anything\s+but|anything\s+except|except|avoid|avoiding|"
    r"none\s+of)\b(?!\s+(?:\w+er|more|less|fewer|over|under|above|below)\s+than\b)"
    r"(?!\s+(?:more|less|over|under|above|below)\b)[\s-]*|[\s-]+free\s*$",
    re.IGNORECASE,
)
_PCT_BEFORE = re.compile(r"(\d+(?:\.\d+)?)\s*%\s*([A-Za-z][A-Za-z \-]{1,40})")
_PCT_AFTER = re.compile(r"([A-Za-z][A-Za-z \-]{1,40}?)\s*[-:]?\s*(\d+(?:\.\d+)?)\s*%")


class Decision(NamedTuple):
    """One value decision: ``holds`` (equivalent / satisfied / present) and ``explicit`` (the lexicon
    read both values and decided; False: one side is outside the vocabularies and no quantity,
    so the answer is the embedding fallback's or a default "no")."""

    holds: bool
    explicit: bool


@dataclass(frozen=True)
class Value:
    """A parsed attribute value (module docstring)."""

    text: str
    phrase: str
    concepts: tuple[str, ...]
    vocabulary: str | None
    constraint: Constraint | None
    shares: tuple[tuple[str, float | None], ...] = ()
    #: the value says more than its concepts ("Galaxy S3" names only the Galaxy family): as a wish
    #: or an identified value it is then compared by its words, never by the broader concept
    partial: bool = False

    @property
    def empty(self) -> bool:
        return not self.phrase and self.constraint is None


class ValueMatcher:
    """The value rules over one :class:`~shopping_companion.judges.matching.lexicon.Lexicon`.

    Args:
        lexicon: defaults to the package lexicon.
        similarity: optional ``(a, b) -> cosine`` for the embedding fallback.
        threshold: the cosine at or above which undecided values count as equal; default the
            calibrated value shipped with the lexicon (``data/calibration.yaml``).
    """

    def __init__(
        self, lexicon: Lexicon | None = None, similarity: Similarity | None = None, threshold: float | None = None
    ) -> None:
        self.lexicon = lexicon or load_lexicon()
        self.similarity = similarity
        self.threshold = float(threshold if threshold is not None else calibrated_threshold())
        self._parse = lru_cache(maxsize=262144)(self._parse_uncached)
        self._other_property = lru_cache(maxsize=65536)(self._other_property_uncached)
        self._reading_key = lru_cache(maxsize=65536)(self._reading_key_uncached)
        self._same_anywhere = lru_cache(maxsize=65536)(self._same_anywhere_uncached)
        self._sim_cache: dict[tuple[str, str], bool] = {}
        self._sim_lock = threading.Lock()
        self.stats = {"similarity_calls": 0}

    def __copy__(self) -> ValueMatcher:
        return self

    def __deepcopy__(self, memo: dict) -> ValueMatcher:
        """Shared, read-only rules and thread-safe caches: copies are the same matcher
        (``gymnasium.make`` deep-copies an environment's judge)."""
        return self

    # ------------------------------------------------------------------ keys
    def key(self, name: str | None) -> ResolvedKey:
        return self.lexicon.resolve_key(name)

    def vocab_for(self, key: ResolvedKey) -> Vocabulary | None:
        return self.lexicon.vocabulary(key)

    # ------------------------------------------------------------------ parsing
    def parse(self, key: ResolvedKey, text: str | None) -> Value:
        """The :class:`Value` of ``text`` read as a value of ``key`` (cached)."""
        return self._parse(key, text or "")

    def _parse_uncached(self, key: ResolvedKey, text: str) -> Value:
        vocab = self.vocab_for(key)
        concepts: tuple[str, ...] = ()
        partial = False
        if vocab is not None:
            exact = vocab.lookup(text)
            concepts = (exact,) if exact else vocab.find(text)
            if concepts and not exact:
                own = set(tokens(key.name))
                rest = [t for t in vocab.uncovered(text) if t not in own and not ("%" in text and t[0].isdigit())]
                partial = bool(rest)
        constraint = None
        if key.kind == "quantity" or _HAS_UNIT_OR_OP.search(text):
            constraint = parse_constraint(text, key.unit, _is_volume(key))
        shares: tuple[tuple[str, float | None], ...] = ()
        if vocab is not None and vocab.name == "material" and concepts:
            shares = _composition(vocab, text, concepts)
        return Value(
            text,
            phrase(text),
            tuple(dict.fromkeys(concepts)),
            vocab.name if vocab else None,
            constraint,
            shares,
            partial,
        )

    def readable(self, key: ResolvedKey, text: str | None) -> bool:
        """The lexicon reads ``text`` as a value of ``key``: a name of a free-text key (brand, model
        number), a quantity, or concepts of the key's vocabulary that account for the whole value
        (so a statement of it in other words would be found through the vocabulary's forms)."""
        if key.spec is not None and key.spec.kind == "text":
            return True  # a name (brand, model number) is stated by its name
        v = self.parse(key, text)
        return v.constraint is not None or (bool(v.concepts) and not v.partial)

    def reading_key(self, key: ResolvedKey, text: str | None) -> ResolvedKey:
        """The key to read ``text`` by: ``key`` when it has a vocabulary, else the canonical key of
        the first vocabulary that names ``text`` exactly (``x: slim fit`` is read as a fit), else
        ``key`` (cached)."""
        if self.vocab_for(key) is not None or not text:
            return key
        return self._reading_key(text) or key

    def _reading_key_uncached(self, text: str) -> ResolvedKey | None:
        for vname, vocab in self.lexicon.vocabularies.items():
            if vocab.lookup(text) is not None:
                spec = next((k for k in self.lexicon.keys.values() if k.vocabulary == vname), None)
                if spec is not None:
                    return ResolvedKey(name=spec.name, spec=spec, unit=spec.unit)
        return None

    def names_other_property(self, key: ResolvedKey, text: str | None) -> bool:
        """``text`` is exactly a concept of a vocabulary other than ``key``'s, or a quantity with a
        unit while ``key`` is not a quantity (``"red"`` is no material; ``"2 years"`` no colour)."""
        own = key.spec.vocabulary if key.spec is not None else None
        return self._other_property(own, key.kind, text or "")

    def _other_property_uncached(self, own: str | None, kind: str, text: str) -> bool:
        for name, vocab in self.lexicon.vocabularies.items():
            if name != own and vocab.lookup(text) is not None:
                return True
        return kind != "quantity" and bool(_HAS_UNIT_OR_OP.search(text)) and bool(parse_quantities(text))

    # ------------------------------------------------------------------ equivalence (stage 1)
    def equivalent(self, key: ResolvedKey, a: str, b: str) -> bool:
        """``a`` and ``b`` mean the same value of ``key`` (module docstring)."""
        return self.compare(key, a, b).holds

    def compare(self, key: ResolvedKey, a: str, b: str) -> Decision:
        """:meth:`equivalent` with whether explicit evidence decided it (rules 1–4 and a value both
        name exactly in one vocabulary are explicit; rule 5, the embedding fallback or "not
        equivalent" for lack of a rule, is not). Values with a gloss in parentheses ("solar
        (light-powered)") are also compared by each of their :func:`readings`: equivalent when one
        pair is and every glossed value is :meth:`gloss_consistent` (else not equivalent, and not
        explicitly), explicitly "no" only when every pair is explicitly not. A plain quantity with its unit (or
        a bare count) equal to the single bound of ``a`` ("100 m" for "at least 100 m", "2" for "at
        least 2" ports) is equivalent: people state a rating or a minimum without its "at least";
        the other way round (a bound for a plain ``a``) is not known (not explicit)."""
        d = self._compare(key, a, b)
        if d.holds or ("(" not in a and "(" not in b):
            return d
        explicit = d.explicit
        for alt_a in readings(a):
            for alt_b in readings(b):
                if alt_a is a and alt_b is b:
                    continue
                da = self._compare(key, alt_a, alt_b)
                if da.holds:
                    if self.gloss_consistent(key, a) and self.gloss_consistent(key, b):
                        return da
                    return Decision(False, False)  # "navy (black)", "leather (faux)": not for the rules
                explicit = explicit and da.explicit
        return Decision(False, explicit)

    def gloss_consistent(self, key: ResolvedKey, text: str) -> bool:
        """The gloss of ``text`` (:func:`split_gloss`) may restate its head: False when the lexicon
        says explicitly that the gloss is another value ("navy (black)": a hedge) or that the head
        qualified by the gloss is ("leather (faux)": faux leather). True without a gloss read alone."""
        head, gloss = split_gloss(text)
        if gloss is None or not head:
            return True
        others = [gloss] if any(ch.isdigit() for ch in gloss) else [gloss, f"{gloss} {head}"]
        for other in others:
            d = self._compare(key, head, other)
            if d.holds:
                return True
            if d.explicit:
                return False
        return True

    def _compare(self, key: ResolvedKey, a: str, b: str) -> Decision:
        va, vb = self.parse(key, a), self.parse(key, b)
        d = self._equivalent(key, va, vb)
        if d is None:
            d = self._same_in_any_vocabulary(a, b)
        if d is None:
            return _fallback(key, self._similar(key, a, b))
        return Decision(d, True)

    def _equivalent(self, key: ResolvedKey, va: Value, vb: Value) -> bool | None:
        if va.empty or vb.empty:
            return False
        if va.phrase == vb.phrase or (va.phrase and compact(va.text) == compact(vb.text)):
            return True
        if (h := purpose_head(va.text) or purpose_head(vb.text)) is not None and phrase(h) in (va.phrase, vb.phrase):
            return True  # "grippy outsole" for "grippy outsole for wet ground": the purpose is the shopper's
        if (
            va.concepts
            and not (va.partial or vb.partial)
            and vb.concepts
            and (named := self._part_concepts(key, vb.text))
        ):
            vocab = self.vocab_for(key)
            assert vocab is not None
            if set(va.concepts) <= named and all(any(vocab.is_a(x, g) for g in va.concepts) for x in named):
                return True  # "purple / lilac" for purple: the value and kinds of it, no alternative
        hedge_b = self.is_hedge(key, vb.text)
        if hedge_b is False and self._one_of_names(key, va.text, vb.text):
            return True  # "sulphate-free" for "SLS / sulphate-free": one of the names the gold lists
        if hedge_b is not False and self.is_hedge(key, va.text) is False:
            # "Nike or Adidas", "navy, blue", "at most 150 cm or at least 200 cm": a hedge; None:
            # quantities in a unit the table does not read ("100 m / 10 ATM"), not known
            return False if hedge_b else None
        if (
            va.constraint is not None
            and vb.constraint is None
            and va.constraint.dim == ""
            and va.constraint.op in (">=", "<=")
            and _bare_count(vb.text) == va.constraint.lo
        ):
            return True  # "2" ports for "at least 2": the gold's bound without its operator (below)
        if va.constraint is not None and vb.constraint is not None:
            same = va.constraint.same_as(vb.constraint)
            if same and va.constraint.dim == "" and not _counts_alike(va.text, vb.text, key.name):
                return None  # "pack of 2" or "2 pockets" for 2 shelves: a count of something else, not known
            if not same and va.constraint.dim and (_unread_unit(va.text) or _unread_unit(vb.text)):
                return None  # "10 bar" for "100 m": a unit the table does not read (the number got the key's unit)
            if not same and _bound_without_operator(va.constraint, vb.constraint):
                if vb.constraint.op == "=" and va.constraint.dim == "" and not _counts_alike(va.text, vb.text):
                    return None  # "2 adults" for "at most 2 kids": another thing counted, not known
                if (
                    vb.constraint.op == "="
                    and va.constraint.op in (">=", "<=")
                    and (vb.constraint.dim == "" or _HAS_UNIT_OR_OP.search(vb.text))
                ):
                    # the gold's inclusive bound stated without its operator ("100 m" for "at least
                    # 100 m", "2" ports for "at least 2"): people state a minimum or a rating so. A
                    # strict bound ("under 4 kg") excludes its own value: not known (below)
                    return True
                plain = va if va.constraint.op == "=" else vb
                if _HAS_UNIT_OR_OP.search(plain.text):
                    return None  # a gold plain quantity answered as a bound: not known
            return same
        if va.concepts and vb.concepts and not (va.partial or vb.partial):
            ga, gb = set(va.concepts), set(vb.concepts)
            if ga == gb:
                return True
            vocab = self.vocab_for(key)
            # "brown amber" for amber: every gold concept named, the extra words only restate it
            return ga < gb and vocab is not None and all(any(vocab.related(x, g) for g in ga) for x in gb - ga)
        ta, tb = set(tokens(va.text)), set(tokens(vb.text))
        if ta == tb:
            return True
        if not key.known and _bare_count(va.text) is not None and _bare_count(vb.text) is not None:
            return False  # "number of drawers": 6 is not 4 (equal counts have equal words)
        if (da := _dimensions(va.text)) is not None and (db := _dimensions(vb.text)) is not None:
            (na, ua), (nb, ub) = da, db
            if ua == ub or not ua or not ub:
                # "140x200" for "140x200 cm": one size written with and without its unit; "90x200"
                # is another size
                return na == nb
        if (
            ta
            and ta <= tb
            and len(tb - ta) <= 1
            and va.constraint is None
            and (not (va.concepts and vb.concepts) or va.partial or vb.partial)
            and (_bare_count(va.text) is None or _counts_alike(va.text, vb.text, key.name))
        ):
            return True  # free text: one extra word naming the same thing ("Brother TN 660" for TN660)
        kt = set(tokens(key.name))
        if kt and (ta - kt) and (ta - kt) == (tb - kt):
            return True  # the attribute's own word repeated or dropped: yield "High Yield" = "high"
        return None

    def _same_in_any_vocabulary(self, a: str, b: str) -> bool | None:
        """For keys without a vocabulary: both values named exactly in one vocabulary decide (cached)."""
        return self._same_anywhere(a, b)

    def _same_anywhere_uncached(self, a: str, b: str) -> bool | None:
        for vocab in self.lexicon.vocabularies.values():
            ca, cb = vocab.lookup(a), vocab.lookup(b)
            if ca and cb:
                return ca == cb
        return None

    def is_hedge(self, key: ResolvedKey, text: str) -> bool | None:
        """The value offers alternatives ("navy or blue", "Nike, Adidas", "500 g or 1 kg",
        "iPhone 7, iPhone 8"): several parts naming different concepts, several different
        quantities, or — without a vocabulary — several parts. Synonyms ("wallet/folio"), negated
        elaborations ("step-in, no straps"), "15 ml or less" and one quantity in two units
        ("max 81 cm / 32\"", within 2 %) are not hedges. None: several quantities, one of them in a
        unit the table does not read ("100 m / 10 ATM"), so whether they differ is not known."""
        if not text or not _HEDGE.search(text):
            return False
        parts = [p.strip() for p in _HEDGE.split(text) if p and p.strip()]
        parts = [p for p in parts if not _NEGATION.match(p)]
        if len(parts) < 2:
            return False
        numeric = [p for p in parts if any(ch.isdigit() for ch in p)]
        if len(numeric) >= 2:
            return self._several_quantities(key, numeric)
        named = self._part_concepts(key, text)
        if named:
            return len(named) >= 2
        return True

    def _one_of_names(self, key: ResolvedKey, gold: str, other: str) -> bool:
        """``gold`` lists names of one thing outside every concept of the key's vocabulary ("SLS /
        sulphate", "cabin / carry-on") and ``other`` is exactly one of them (normalised words): a
        list whose parts name different concepts ("navy or black") stays a hedge."""
        parts = listed_names(gold)
        if not parts or self._part_concepts(key, gold):
            return False
        o = tokens(other)
        return bool(o) and any(tokens(p) == o for p in parts)

    def _part_concepts(self, key: ResolvedKey, text: str) -> set[str]:
        """The concepts the parts of a listed value name (:data:`_HEDGE` splits it; negated parts
        left out), one per part; empty without a vocabulary, a list or a named concept."""
        vocab = self.vocab_for(key)
        if vocab is None or not _HEDGE.search(text):
            return set()
        parts = [p.strip() for p in _HEDGE.split(text) if p and p.strip() and not _NEGATION.match(p.strip())]
        return {c for p in parts for c in ((vocab.lookup(p),) if vocab.lookup(p) else vocab.find(p)[:1])}

    def _several_quantities(self, key: ResolvedKey, parts: list[str]) -> bool | None:
        """Whether the parts with numbers of one value are different values (:meth:`is_hedge`):
        False when each is a quantity in a unit the table reads and all are one magnitude within
        2 %, None when a number is followed by a word the unit table does not read ("10 ATM")."""
        if any(_unread_unit(p) for p in parts):
            return None
        if not all(any(q.dim for q in parse_quantities(p)) for p in parts):
            return True  # "iPhone 7, iPhone 8": numbers, not quantities
        cs = [self.parse(key, p).constraint for p in parts]
        if any(c is None or c.hi is not None for c in cs):
            return True
        first = cs[0]
        assert first is not None
        same = all(c is not None and c.dim == first.dim and abs(c.lo - first.lo) <= REL_TOL * abs(first.lo) for c in cs)
        return not same

    # ------------------------------------------------------------------ satisfaction (stage 2)
    def satisfies(self, key: ResolvedKey, gold: str, product_value: str, *, fallback: bool = True) -> bool:
        """The product value meets the wanted ``gold`` value (module docstring)."""
        return self.satisfaction(key, gold, product_value, fallback=fallback).holds

    def satisfaction(self, key: ResolvedKey, gold: str, product_value: str, *, fallback: bool = True) -> Decision:
        """:meth:`satisfies` with whether explicit evidence decided it (not explicit: a value
        outside the vocabulary on one side, decided by the embedding fallback or as "no")."""
        d = self._decide(key, gold, product_value, main_only=True)
        if d is None:
            return _fallback(key, fallback and self._similar(key, gold, product_value))
        return d

    def present(self, key: ResolvedKey, gold: str, product_value: str) -> bool:
        """The product value has ``gold`` at all (avoid preferences; any share of a blend)."""
        return self.presence(key, gold, product_value).holds

    def presence(self, key: ResolvedKey, gold: str, product_value: str) -> Decision:
        """:meth:`present` with whether explicit evidence decided it."""
        d = self._decide(key, gold, product_value, main_only=False)
        return d if d is not None else _fallback(key, self._similar(key, gold, product_value))

    def _decide(self, key: ResolvedKey, gold: str, value: str, *, main_only: bool) -> Decision | None:
        vg = self.parse(key, gold)
        if vg.empty:
            return _NO
        vp = self.parse(key, value)
        if vg.constraint is not None and (
            key.kind == "quantity" or vg.constraint.op != "=" or _HAS_UNIT_OR_OP.search(gold)
        ):
            qs = parse_quantities(value, key.unit, _is_volume(key))
            if qs:
                return Decision(vg.constraint.admits_product(qs, per_item=not is_amount(key)), True)
            if key.kind == "quantity":
                return None if not vp.phrase else _NO_UNREAD  # a quantity key whose value states no quantity
        vocab = self.vocab_for(key)
        if vocab is not None and vg.concepts and not vg.partial:
            if not vp.concepts:
                # the product names no concept of this vocabulary: the phrase itself may still match
                return _YES if padded(gold) in padded(value) else _NO_UNREAD
            if main_only and vp.shares:
                return Decision(all(_main_share(vocab, vp.shares, g) for g in vg.concepts), True)
            if main_only:
                return Decision(all(any(vocab.is_a(c, g) for c in vp.concepts) for g in vg.concepts), True)
            return Decision(any(vocab.has(c, g) for c in vp.concepts for g in vg.concepts), True)
        if vp.phrase and padded(gold) in padded(value):
            return _YES
        if vp.phrase and set(tokens(gold)) <= set(tokens(value)):
            return _YES
        if vocab is not None and vp.concepts:
            return _NO_UNREAD  # the product value is a known concept, the gold is outside the vocabulary
        return None

    # ------------------------------------------------------------------ mentions in free text
    def concepts_in(self, key: ResolvedKey, text: str | None) -> tuple[str, ...]:
        """Concepts of ``key``'s vocabulary that ``text`` mentions (empty without a vocabulary)."""
        vocab = self.vocab_for(key)
        return vocab.find(text, prose=True) if vocab is not None and text else ()

    def mentions(self, key: ResolvedKey, value: str, text: str | None) -> bool:
        """``text`` states ``value``: a concept it is (or a narrower one), an equal quantity, or
        the normalised phrase itself."""
        if not text:
            return False
        v = self.parse(key, value)
        if v.empty:
            return False
        if v.phrase and padded(value) in padded(text):
            return True
        vocab = self.vocab_for(key)
        if vocab is not None and v.concepts and not v.partial:
            found = vocab.find(text, prose=True)
            if all(any(vocab.is_a(c, g) for c in found) for g in v.concepts):
                return True
        if v.constraint is not None:
            for q in parse_quantities(text, None, _is_volume(key)):
                if v.constraint.op == "=" and v.constraint.admits(q):
                    return True
                if (
                    v.constraint.op != "="
                    and q.dim == v.constraint.dim
                    and abs(q.value - v.constraint.lo) <= REL_TOL * abs(v.constraint.lo or 1)
                ):
                    return True  # the user named the bound ("nothing over 150 cm")
        return False

    # ------------------------------------------------------------------ embedding fallback
    def _similar(self, key: ResolvedKey, a: str, b: str) -> bool:
        if self.similarity is None or not a or not b:
            return False
        label = key.name or "value"
        pair = (f"{label}: {a.strip().lower()}", f"{label}: {b.strip().lower()}")
        with self._sim_lock:
            hit = self._sim_cache.get(pair)
        if hit is not None:
            return hit
        self.stats["similarity_calls"] += 1
        ok = float(self.similarity(*pair)) >= self.threshold
        with self._sim_lock:
            if len(self._sim_cache) > 200_000:
                self._sim_cache.clear()
            self._sim_cache[pair] = ok
        return ok


_YES = Decision(True, True)
_NO = Decision(False, True)
_NO_UNREAD = Decision(False, False)  # "no" only because one side is outside what the lexicon reads


def _fallback(key: ResolvedKey, similar: bool) -> Decision:
    """A decision the rules left open: the embedding fallback's (not explicit) — except "different"
    on a known free-text key (brand, model number, designer): names compared by their words."""
    return Decision(similar, not similar and key.spec is not None and key.spec.kind == "text")


def _bound_without_operator(a: Constraint, b: Constraint) -> bool:
    """One constraint is a plain quantity ("100 m") equal to the other's single bound ("at least
    100 m")."""
    if a.dim != b.dim or (a.op == "=") == (b.op == "=") or a.hi is not None or b.hi is not None:
        return False
    return abs(a.lo - b.lo) <= REL_TOL * max(abs(a.lo), abs(b.lo), 1e-12)


_PAREN = re.compile(r"\s*\(([^()]*)\)\s*")
_GLOSS_SKIP = re.compile(r"^(?:for|with|e\.?g\.?|i\.?e\.?|like|such as|incl\w*|not|no|any|or)\b", re.IGNORECASE)


def split_gloss(text: str) -> tuple[str, str | None]:
    """``(head, gloss)`` of a value with a parenthetical gloss: ``head`` is the text without the
    parentheses ("genuine (animal) leather" → "genuine leather", "Lightning (for iPhone)" →
    "Lightning"); ``gloss`` is a final gloss that may restate the value, with the head's leading
    words before its number ("solar (light-powered)" → "light-powered"; "at most 81 cm (32 inches)"
    → "at most 32 inches"), else None. A gloss opening with *for*, *with*, *e.g.*, *like*, *not*, …
    qualifies the value and is never read alone. Without parentheses: ``(text, None)``."""
    if "(" not in (text or ""):
        return text, None
    head = _PAREN.sub(" ", text).strip()
    m = _PAREN.search(text)
    if m is not None and m.end() >= len(text.rstrip()) and len(_PAREN.findall(text)) == 1:
        gloss = m.group(1).strip()
        if gloss and not _GLOSS_SKIP.match(gloss):
            lead = re.match(r"^\D*?(?=\d)", head) if any(ch.isdigit() for ch in head) else None
            return head, ((lead.group(0) if lead else "") + gloss).strip()
    return head, None


def readings(text: str) -> tuple[str, ...]:
    """The ways a value with a parenthetical gloss reads: ``text`` itself, then its
    :func:`split_gloss` head and gloss (duplicates and empty readings dropped). Without
    parentheses: ``(text,)``."""
    if "(" not in (text or ""):
        return (text,)
    head, gloss = split_gloss(text)
    return tuple(dict.fromkeys(o for o in (text, head, gloss) if o))


_AFFIRM = frozenset({"yes", "y", "true", "required", "needed", "wanted", "must", "must have", "please", "yes please"})
_DENY = frozenset({"no", "none", "nope", "false", "not needed", "not wanted", "not required", "no thanks", "nil"})


#: words of a count's value that say how it bounds, not what it counts
_BOUND_WORDS = frozenset(
    "at least most up to under over more less than fewer no max min maximum minimum exactly about".split()
)


def _counts_alike(gold: str, answer: str, key: str | None = None) -> bool:
    """The answer's count names nothing the gold's (or its attribute's name ``key``) does not ("2"
    or "2 kids" for "at most 2 kids"; "2 shelves" for number of shelves: 2; not "2 adults", "pack
    of 2", "3 each")."""
    words = {t for t in tokens(answer) if not t.isdigit() and t not in _BOUND_WORDS}
    return words <= set(tokens(gold)) | set(tokens(key))


def _bare_count(text: str) -> int | None:
    """The whole number ``text`` is ("4", "four"), else None."""
    t = tokens(text)
    return int(t[0]) if len(t) == 1 and t[0].isdigit() else None


_DIMENSIONS = re.compile(
    r"^\s*(\d+(?:\.\d+)?)\s*(?:x|×|\*|by)\s*(\d+(?:\.\d+)?)(?:\s*(?:x|×|\*|by)\s*(\d+(?:\.\d+)?))?"
    r"\s*(cm|mm|m|in|inch|inches|\")?\s*$",
    re.IGNORECASE,
)


def _dimensions(text: str) -> tuple[tuple[float, ...], str] | None:
    """``((140.0, 200.0), "cm")`` for a value that is only a size of two or three numbers
    ("140x200 cm", "140 x 200", "90 by 200"); the unit is "" when not written; None otherwise."""
    m = _DIMENSIONS.match(text or "")
    if m is None:
        return None
    unit = (m.group(4) or "").lower()
    unit = {"inch": "in", "inches": "in", '"': "in"}.get(unit, unit)
    return tuple(float(g) for g in m.groups()[:3] if g is not None), unit


def listed_names(text: str | None) -> tuple[str, ...]:
    """The parts of a value that lists two or more names ("SLS / sulphate", "cabin / carry-on",
    "wallet or folio"); empty when it lists none, or a part has a number or is negated."""
    if not text or not _HEDGE.search(text) or any(ch.isdigit() for ch in text):
        return ()
    parts = tuple(p.strip() for p in _HEDGE.split(text) if p and p.strip())
    if len(parts) < 2 or any(_NEGATION.match(p) for p in parts):
        return ()
    return parts


_PURPOSE = re.compile(r"^(.+?)\s+for\s+([a-z][a-z\s-]*)$")
#: a value and what it should go with: "white to match the cot", "black to go with the dashboard"
_MATCHES = re.compile(r"^(.+?)\s+to\s+(?:match|go\s+with|suit|blend\s+(?:in\s+)?with)\b", re.IGNORECASE)


def purpose_head(value: str) -> str | None:
    """The feature of a value that names it and then a purpose in plain words ("grippy outsole for
    wet ground" → "grippy outsole"; "white to match the cot" → "white"); None for a *for* purpose
    unless the feature has two or more words and the purpose names no model, number or proper name
    ("case for iPhone 7", "charger for Galaxy": the *for* part is the wish itself)."""
    if (m := _MATCHES.match(value.strip())) is not None:
        return m.group(1)  # "white to match the cot"
    m = _PURPOSE.match(value.strip())
    if m is None or len(tokens(m.group(1))) < 2:
        return None
    return m.group(1)


def yes_no(text: str | None) -> bool | None:
    """True when ``text`` is a bare affirmation ("yes", "required"), False when it is a bare
    denial ("no", "none", "not needed"), None otherwise: ``glass: no`` says glass is avoided."""
    p = " ".join(tokens(text or ""))
    if p in _AFFIRM:
        return True
    if p in _DENY:
        return False
    return None


def split_negation(text: str) -> tuple[bool, str]:
    """``(negated, rest)``: a value written as its own negation — ``"not navy"``, ``"no cotton"``,
    ``"anything but Nike"``, ``"cotton-free"`` — says the opposite polarity of ``rest``."""
    m = _NEGATION.search(text or "")
    if m is None:
        return False, text
    rest = (text[: m.start()] + text[m.end() :]).strip()
    return (True, rest) if rest else (False, text)


def is_amount(key: ResolvedKey) -> bool:
    """The key is the amount bought (pack size, net quantity, pack count): multipack and combo
    totals count for it; other quantities (capacity, width, weight of one item) are per item."""
    name = key.spec.name if key.spec else key.name
    return any(w in name for w in ("pack", "net", "quantity", "count"))


def _is_volume(key: ResolvedKey) -> bool:
    return bool(key.spec and key.spec.dimension and "volume" in key.spec.dimension)


def _composition(vocab: Vocabulary, text: str, concepts: Sequence[str]) -> tuple[tuple[str, float | None], ...]:
    shares: list[tuple[str, float | None]] = []
    for pct, words in _PCT_BEFORE.findall(text):
        found = vocab.find(words)
        if found:
            shares.append((found[0], float(pct)))
    if not shares:
        for words, pct in _PCT_AFTER.findall(text):
            found = vocab.find(words)
            if found:
                shares.append((found[-1], float(pct)))
    if not shares:
        return tuple((c, None) for c in concepts)
    seen = {c for c, _ in shares}
    return tuple(shares) + tuple((c, 0.0) for c in concepts if c not in seen)


def _main_share(vocab: Vocabulary, shares: Sequence[tuple[str, float | None]], g: str) -> bool:
    """``g`` (or a narrower material) is the main material: the only one, ≥ 50 % of a blend, or the
    first named when no percentage is given."""
    if all(p is None for _, p in shares):
        return vocab.is_a(shares[0][0], g)
    total = sum(p or 0.0 for c, p in shares if vocab.is_a(c, g))
    return total >= 50.0


@lru_cache(maxsize=1)
def calibrated_threshold() -> float:
    """The embedding-fallback threshold shipped in ``data/calibration.yaml`` (0.9 when absent)."""
    from importlib import resources

    import yaml

    p = resources.files("shopping_companion.judges.matching") / "data" / "calibration.yaml"
    try:
        doc = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
        return float(doc.get("threshold", 0.9))
    except FileNotFoundError:
        return 0.9


_DEFAULT: ValueMatcher | None = None
_DEFAULT_LOCK = threading.Lock()


def default_matcher() -> ValueMatcher:
    """The process-wide matcher over the package lexicon, without the embedding fallback."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None:
            _DEFAULT = ValueMatcher()
        return _DEFAULT
