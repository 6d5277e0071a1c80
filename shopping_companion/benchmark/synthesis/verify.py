"""Automatic verification of a synthesised task (Shopping Companion §4 step 5).

The paper had two e-commerce experts check each instance; we check the same properties by program
and record every result in :class:`~shopping_companion.types.Verification`:

resolvable
    every wanted feature is *stated* in one user turn of a needle session, and the instruction
    states none of them. A text states a wanted value (:func:`how_stated`, tried in this order):

    ``verbatim``
        the normalised tokens of the value (the rule judge's
        :func:`~shopping_companion.judges.rule.normalize_tokens`; ``"size M"`` for a short size,
        see :func:`evidence_text`) occur as a contiguous phrase;
    ``vocabulary``
        the value names concepts of its key's vocabulary (the shared value matcher,
        :mod:`shopping_companion.judges.matching`) and the text mentions, for each of them, that
        concept or a narrower one (``"half sleeves"`` states ``Short Sleeves``; ``"navy"`` states
        ``Blue``; negated mentions such as ``"no polyester"`` do not count; a one-letter size
        is never read from prose, since ``"I'm"`` and ``"1.5 m"`` hold the letter);
    ``paraphrase``
        the text carries a statement of the paraphrase lexicon
        (:mod:`shopping_companion.benchmark.data.paraphrases`) of the same key whose concept is the
        value's concept or a narrower one: the lookup goes gold value → matcher concept → lexicon
        statements, re-derived from the text, so a hand-written needle is checked the same way;
    ``quantity``
        the value is a numeric constraint (``"at most 150 cm"``) and a sentence of the text states
        the same constraint through the matcher's quantity layer
        (:func:`~shopping_companion.judges.matching.parse_constraint`: same direction, bound equal
        after unit conversion within 2 %; ``"no more than 1.5 m"`` states ``at most 150 cm``).

    :func:`needle_verbatim` and :func:`verbatim_share` measure how often needles state a gold
    value verbatim (the benchmark wants most needles to be indirect).
searchable
    every reference product is among the BM25 top-k (k = 50) for :func:`searchable_query` of its
    slot (product type + that slot's wanted values), searched with the voucher's shop filter for an
    add-on deal.
conflict-free
    no haystack statement contradicts a wanted feature (see :mod:`.conflicts`).
gold accepted
    the rule judge (:class:`~shopping_companion.judges.rule.RuleJudge`, stage 2) scores a
    recommendation of exactly the reference product(s) as a success.
alternatives
    *single*: the number of catalog products other than the reference for which the rule judge's
    stage-2 tests hold: ``is_relevant`` to the slot and ``product_satisfies`` every wanted feature.
    *add-on*: the number of bundles other than the reference bundle that the rule judge accepts:
    one product per slot, all in the voucher's shop, each relevant to its slot and satisfying its
    slot's wanted features, all priced, and paying ``total − discount`` (discount only when
    ``total ≥ min_spend``) within the budget. A slot set is only used when no product fits two
    slots, so every such combination is a valid distinct bundle and the count is exact.
    Both counts stop at ``cap`` (``alternatives_capped``).

Counting uses the judge's own functions (``is_relevant``, ``product_satisfies``) and so its value
matcher. A cheap exact pre-filter skips products that cannot satisfy a free-text ``want`` feature
(a value outside every vocabulary and without a number): the judge accepts such a value only if all
its normalised tokens occur in one of the product's text fields, so a product whose token set over
all those fields (a superset, computed word by word) lacks one of them is skipped without calling
the judge. Relevance candidates come the same way from an index of title and category
words; ``is_relevant`` then decides.
"""

from __future__ import annotations

import bisect
import re
import unicodedata
from itertools import chain
from collections.abc import Iterable, Sequence

from collections.abc import Mapping
from functools import lru_cache
from typing import NamedTuple

from shopping_companion.benchmark.data.paraphrases import load_paraphrases
from shopping_companion.benchmark.synthesis.catalog_view import is_wearable_size
from shopping_companion.judges.matching import Constraint, ResolvedKey, default_matcher, parse_constraint
from shopping_companion.judges.matching.quantity import HAS_UNIT_OR_OP
from shopping_companion.judges.matching.normalize import unit_marks
from shopping_companion.judges.rule import RuleJudge, is_relevant, normalize_tokens, product_satisfies
from shopping_companion.sentences import split_sentences
from shopping_companion.types import Preference, Product, ProductSlot, Session, Step, Task, ToolResult, Trajectory

__all__ = [
    "CatalogMatcher",
    "VerbatimShare",
    "count_bundles",
    "gold_accepted",
    "gold_constraint",
    "how_stated",
    "leaked_values",
    "needle_verbatim",
    "stated_in",
    "states_value",
    "unstated_features",
    "verbatim_share",
]

_EPS = 1e-6
_WORD = re.compile(r"[a-z]+|\d+(?:\.\d+)?")  # the judge's token pattern (decimals stay one token)
_COMBINING = re.compile("[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]")
_NON_ASCII = re.compile(r"[^\x00-\x7f]")


def _contains(hay: tuple[str, ...], needle: tuple[str, ...]) -> bool:
    if not needle or len(needle) > len(hay):
        return False
    n = len(needle)
    first = needle[0]
    for i, t in enumerate(hay[: len(hay) - n + 1]):
        if t == first and hay[i : i + n] == needle:
            return True
    return False


def evidence_text(attribute: str, value: str) -> str:
    """What a dialogue must say for a wanted feature: the value itself, or ``"size <value>"`` for a
    worn size (``"M"``, ``"32"``, ``"UK8"``), whose bare tokens occur in unrelated words (I'm)."""
    v = value.strip()
    if normalize_tokens(attribute) == ("size",) and is_wearable_size(v):
        return f"size {v}"
    return v


def stated_in(value: str, text: str) -> bool:
    """The normalised tokens of ``value`` occur contiguously in ``text`` (non-empty value)."""
    return _contains(normalize_tokens(text), normalize_tokens(value))


_ONE_LETTER = re.compile(r"(?<![A-Za-z0-9])[A-Za-z](?![A-Za-z0-9])")


class _Gold(NamedTuple):
    key: ResolvedKey
    evidence: tuple[str, ...]
    concepts: tuple[str, ...]
    constraint: Constraint | None
    volume: bool


@lru_cache(maxsize=65536)
def _gold(attribute: str, value: str) -> _Gold:
    m = default_matcher()
    key = m.key(attribute)
    v = m.parse(key, value)
    concepts = v.concepts if (v.concepts and not v.partial) else ()
    constraint = gold_constraint(attribute, value)
    volume = bool(key.spec and key.spec.dimension and "volume" in key.spec.dimension)
    return _Gold(key, normalize_tokens(evidence_text(attribute, value)), concepts, constraint, volume)


def gold_constraint(attribute: str, value: str) -> Constraint | None:
    """The numeric constraint a wanted value states (``"at most 150 cm"`` for ``width``), read by
    the matcher as the judge reads it, or None for a value that is not numeric (a number inside a
    category value such as ``"Galaxy S3"`` is not a constraint)."""
    m = default_matcher()
    key = m.key(attribute)
    c = m.parse(key, value).constraint
    if c is None:
        return None
    if key.kind == "quantity" or c.op != "=" or HAS_UNIT_OR_OP.search(value):
        return c
    return None


#: Token sequences (the judge's normalised tokens) that negate what follows them: "no leather",
#: "not black", "never brown", "I don't want ...", "anything but ...".
_NEGATIONS: tuple[tuple[str, ...], ...] = tuple(
    normalize_tokens(x)
    for x in (
        "no", "not", "never", "without", "avoid", "hate", "dislike", "don't", "dont", "doesn't", "won't",
        "can't stand", "cannot stand", "anything but", "nothing", "except", "rather than", "instead of",
        "stay away from", "allergic",
    )
)  # fmt: skip
#: How many tokens before a mention a negation reaches ("no real leather", "never anything black").
_NEGATION_REACH = 4


def _find(hay: tuple[str, ...], needle: tuple[str, ...]) -> int | None:
    """Start of the first contiguous occurrence of ``needle`` in ``hay``, or None."""
    n = len(needle)
    if not n:
        return None
    for i in range(len(hay) - n + 1):
        if hay[i : i + n] == needle:
            return i
    return None


def _negated_at(toks: tuple[str, ...], start: int) -> bool:
    """A negation (:data:`_NEGATIONS`) ends within :data:`_NEGATION_REACH` tokens before ``start``."""
    window = toks[max(0, start - _NEGATION_REACH - 2) : start]
    for neg in _NEGATIONS:
        for j in range(len(window) - len(neg) + 1):
            if window[j : j + len(neg)] == neg and len(window) - (j + len(neg)) <= _NEGATION_REACH:
                return True
    return False


def _negated_anywhere(toks: tuple[str, ...]) -> bool:
    """The sentence holds a negation (a vocabulary mention's position is not known)."""
    return any(_find(toks, neg) is not None for neg in _NEGATIONS)


def how_stated(attribute: str, value: str, text: str) -> str | None:
    """How ``text`` states the wanted ``attribute = value`` (module docstring, *resolvable*):
    ``"verbatim"``, ``"vocabulary"``, ``"paraphrase"``, ``"quantity"``, or None when it does not.
    Sentence by sentence; a mention that a negation precedes ("no leather", "anything but black";
    for a vocabulary mention, any negation in its sentence) does not state the value."""
    if not text or not value.strip():
        return None
    g = _gold(attribute, value)
    sentences = split_sentences(text, value, semicolons=True)
    for sent in sentences:
        toks = normalize_tokens(sent)
        at = _find(toks, g.evidence)
        if at is not None and not _negated_at(toks, at):
            return "verbatim"
    m = default_matcher()
    if g.concepts:
        vocab = m.vocab_for(g.key)
        assert vocab is not None
        for sent in sentences:
            toks = normalize_tokens(sent)
            # a one-letter size ("M") is never read from prose: "I'm" and "1.5 m" hold the letter
            prose = _ONE_LETTER.sub(" ", sent) if g.key.name == "size" else sent
            found = m.concepts_in(g.key, prose)
            if (
                found
                and not _negated_anywhere(toks)
                and all(any(vocab.is_a(c, want) for c in found) for want in g.concepts)
            ):
                return "vocabulary"
            for ph in load_paraphrases().find(g.key.name, toks):
                start = _find(toks, ph.tokens)
                if start is not None and _negated_at(toks, start):
                    continue
                if all(vocab.is_a(ph.concept, want) for want in g.concepts):
                    return "paraphrase"
    if g.constraint is not None:
        for sent in sentences:
            c = parse_constraint(sent, None, g.volume)
            if c is not None and c.same_as(g.constraint):
                return "quantity"
    return None


def states_value(attribute: str, value: str, text: str) -> bool:
    """``text`` states the wanted ``attribute = value`` in one of the ways of :func:`how_stated`."""
    return how_stated(attribute, value, text) is not None


def unstated_features(preferences: Iterable[Preference], needles: Sequence[Session]) -> list[Preference]:
    """The wanted features that no user turn of ``needles`` states (:func:`how_stated`; empty
    list = resolvable)."""
    user_turns = [t.content for s in needles for t in s.turns if t.role == "user"]
    return [p for p in preferences if not any(states_value(p.attribute, p.value, u) for u in user_turns)]


def leaked_values(preferences: Iterable[Preference], instruction: str) -> list[Preference]:
    """The wanted features that the instruction states, verbatim or indirectly (:func:`how_stated`;
    must be empty)."""
    return [p for p in preferences if states_value(p.attribute, p.value, instruction)]


def _verbatim_in(p: Preference, session: Session) -> bool:
    ev = normalize_tokens(evidence_text(p.attribute, p.value))
    return any(_contains(normalize_tokens(t.content), ev) for t in session.turns if t.role == "user")


def needle_verbatim(task: Task, sessions: Mapping[str, Session]) -> dict[tuple[int, str, str], bool]:
    """Per wanted preference of ``task`` (key ``(slot, attribute, value)``): whether some user turn
    of its needle sessions (``task.needle_session_ids`` looked up in ``sessions``) contains the gold
    value verbatim (normalised tokens, as :func:`stated_in`). Raises ``KeyError`` naming a needle
    session id missing from ``sessions``."""
    needles = [_session(sessions, sid) for sid in task.needle_session_ids]
    return {
        (p.slot, p.attribute, p.value): any(_verbatim_in(p, s) for s in needles)
        for p in task.preferences
        if p.polarity == "want"
    }


class VerbatimShare(NamedTuple):
    """Result of :func:`verbatim_share`: ``sessions`` = share of needle sessions (in [0, 1]) in
    which a user turn contains at least one wanted gold value of the task verbatim; ``preferences``
    = share of wanted preferences stated verbatim in some needle session of their task; with the
    counts they are computed over (shares are 0.0 when a count is 0)."""

    sessions: float
    preferences: float
    n_sessions: int
    n_preferences: int


def verbatim_share(tasks: Iterable[Task], sessions: Mapping[str, Session]) -> VerbatimShare:
    """How often needles state gold values verbatim over ``tasks`` (see :class:`VerbatimShare`);
    ``sessions`` maps session ids to sessions (e.g. ``SynthOutput.sessions``). Raises ``KeyError``
    naming a needle session id missing from ``sessions``."""
    n_sess = v_sess = n_pref = v_pref = 0
    for task in tasks:
        wanted = [p for p in task.preferences if p.polarity == "want"]
        for sid in task.needle_session_ids:
            n_sess += 1
            s = _session(sessions, sid)
            v_sess += any(_verbatim_in(p, s) for p in wanted)
        flags = needle_verbatim(task, sessions)
        n_pref += len(flags)
        v_pref += sum(flags.values())
    return VerbatimShare(v_sess / n_sess if n_sess else 0.0, v_pref / n_pref if n_pref else 0.0, n_sess, n_pref)


def _session(sessions: Mapping[str, Session], sid: str) -> Session:
    try:
        return sessions[sid]
    except KeyError:
        raise KeyError(f"needle session {sid!r} is not among the sessions given") from None


def gold_accepted(task: Task, by_id: dict[str, Product]) -> tuple[bool, list[str]]:
    """Whether the rule judge (stage 2) scores recommending exactly the reference products as a
    success. Returns ``(success, reasons)``."""
    refs = task.reference_product_ids
    traj = Trajectory(
        task_id=task.task_id,
        stage=2,
        steps=[
            Step(
                assistant_text="",
                tool_results=[ToolResult(call_id="gold", name="product_view", content="", returned_ids=list(refs))],
            )
        ],
        final_answer=" ".join(f"@REC::{r}@" for r in refs),
        recommended_ids=list(refs),
        termination="answered",
    )
    judge = RuleJudge(lambda ids: {i: by_id[i] for i in ids if i in by_id})
    v = judge.judge(task, traj)
    return v.success, list(v.reasons)


class CatalogMatcher:
    """Relevance and preference matching over the catalog in memory, with caches.

    ``products``: the whole catalog (any order). Token sets of products are computed lazily and
    kept for the build (a few seconds over the whole catalog at most).
    """

    def __init__(self, products: Sequence[Product]) -> None:
        self.products = sorted(products, key=lambda p: p.product_id)
        self._title_postings: dict[str, list[int]] | None = None
        self._by_category: dict[tuple[str, ...], list[int]] | None = None
        self._tokens: dict[int, frozenset[str]] = {}
        self._relevant_cache: dict[tuple[str, tuple[str, ...]], list[int]] = {}
        self._word_cache: dict[str, tuple[str, ...]] = {}
        self.by_shop: dict[str, list[Product]] = {}
        for p in self.products:
            self.by_shop.setdefault(p.shop_id, []).append(p)

    # ------------------------------------------------------------------ indexes

    def _word_tokens(self, text: str) -> set[str]:
        """A superset of ``set(normalize_tokens(text))``: the text's raw words (lowercased, accents
        stripped) each normalised alone (cached per word). Only the possessive rule differs (it
        adds a stray ``s``), so a token missing here is missing from the judge's tokens too."""
        if not text:
            return set()
        text = unit_marks(text)  # as the judge: 10" is 10 inch
        if text.isascii():
            t = text.lower()
        else:  # as the judge: NFKD, drop combining marks, then lower-case
            t = _NON_ASCII.sub(" ", _COMBINING.sub("", unicodedata.normalize("NFKD", text)).lower())
        if "+" in t:
            t = t.replace("+", " plus ")  # as the judge reads "7+"
        cache = self._word_cache
        words = set(_WORD.findall(t))
        for w in words:
            if w not in cache:
                cache[w] = normalize_tokens(w)
        return set(chain.from_iterable(map(cache.__getitem__, words)))

    def _build_indexes(self) -> None:
        postings: dict[str, list[int]] = {}
        by_cat: dict[tuple[str, ...], list[int]] = {}
        cat_norm: dict[str, tuple[str, ...]] = {}
        for i, p in enumerate(self.products):
            toks = self._word_tokens(" ".join([p.title, *p.category_path]))
            for t in toks:
                postings.setdefault(t, []).append(i)
            if p.category_path:
                c = p.category
                if c not in cat_norm:
                    cat_norm[c] = normalize_tokens(c)
                by_cat.setdefault(cat_norm[c], []).append(i)
        self._title_postings = postings
        self._by_category = by_cat

    def token_set(self, i: int) -> frozenset[str]:
        """A superset of the normalised tokens of every text field the judge reads (title, brand,
        description, features, attribute and option values, categories) of product ``i``."""
        got = self._tokens.get(i)
        if got is None:
            p = self.products[i]
            parts = [p.title, p.brand or "", p.description or "", *p.features, *p.attributes.values(), *p.category_path]
            for opts in p.options.values():
                parts.extend(opts)
            got = self._tokens[i] = frozenset(self._word_tokens("\n".join(parts)))
        return got

    def relevant(self, slot: ProductSlot) -> list[int]:
        """Indexes of every catalog product the judge's ``is_relevant`` accepts for ``slot``."""
        key = (slot.product_type, tuple(slot.category_path))
        hit = self._relevant_cache.get(key)
        if hit is not None:
            return hit
        if self._title_postings is None:
            self._build_indexes()
        assert self._title_postings is not None and self._by_category is not None
        cand: set[int] = set()
        if slot.category_path:
            cand.update(self._by_category.get(normalize_tokens(slot.category_path[-1]), []))
        pt = set(normalize_tokens(slot.product_type))
        if pt:
            lists = sorted((self._title_postings.get(t, []) for t in pt), key=len)
            if lists and lists[0]:
                inter = set(lists[0])
                for lst in lists[1:]:
                    inter.intersection_update(lst)
                    if not inter:
                        break
                cand |= inter
        out = sorted(i for i in cand if is_relevant(self.products[i], slot))
        self._relevant_cache[key] = out
        return out

    def _may_satisfy(self, i: int, prefs: Sequence[Preference]) -> bool:
        """Cheap exact pre-filter for free-text wanted values only: the judge accepts such a value
        only when its tokens occur in a field. Values of a vocabulary (synonyms, families) or
        numbers (units, operators) go to the judge's own test."""
        toks = self.token_set(i)
        m = default_matcher()
        for g in prefs:
            if g.polarity != "want":
                continue
            v = m.parse(m.key(g.attribute), g.value)
            if v.concepts or v.constraint is not None:
                continue
            if not set(normalize_tokens(g.value)) <= toks:
                return False
        return True

    def satisfies_all(self, p: Product, prefs: Sequence[Preference]) -> bool:
        """The judge's test for every preference of a slot."""
        return all(product_satisfies(p, g) for g in prefs)

    # ------------------------------------------------------------------ counts

    def count_single(self, slot: ProductSlot, prefs: Sequence[Preference], cap: int) -> tuple[int, bool]:
        """Alternatives of a single task: products ≠ the reference, relevant, satisfying every
        preference. Returns ``(count, capped)`` with ``count <= cap``."""
        n = 0
        for i in self.relevant(slot):
            p = self.products[i]
            if p.product_id == slot.reference_product_id or not self._may_satisfy(i, prefs):
                continue
            if self.satisfies_all(p, prefs):
                n += 1
                if n >= cap:
                    return cap, True
        return n, False

    def shop_candidates(self, shop_id: str, slot: ProductSlot, prefs: Sequence[Preference]) -> list[Product]:
        """Products of ``shop_id`` with a price that the judge accepts for ``slot`` (relevant and
        satisfying ``prefs``), sorted by id."""
        out = []
        for p in self.by_shop.get(shop_id, []):
            if p.price is None or not is_relevant(p, slot):
                continue
            if self.satisfies_all(p, prefs):
                out.append(p)
        return out

    def shop_relevant(self, shop_id: str, slot: ProductSlot) -> list[Product]:
        """Priced products of ``shop_id`` relevant to ``slot`` (preferences ignored)."""
        return [p for p in self.by_shop.get(shop_id, []) if p.price is not None and is_relevant(p, slot)]


def _half_sums(lists: Sequence[Sequence[float]], limit: int) -> list[float] | None:
    sums = [0.0]
    for prices in lists:
        if len(sums) * len(prices) > limit:
            return None
        sums = [s + x for s in sums for x in prices]
    return sums


def count_bundles(
    slot_prices: Sequence[Sequence[float]],
    min_spend: float,
    discount: float,
    budget: float,
    cap: int,
    half_limit: int = 400_000,
) -> tuple[int, bool]:
    """Number of combinations (one price per slot) the judge's budget test accepts: with
    ``T`` the total, pay ``T − discount`` if ``T ≥ min_spend`` else ``T``, and pay ≤ budget.
    Meet-in-the-middle over the two halves of the slots. Returns ``(min(count, cap), capped)``;
    ``capped`` is also True when a half has more than ``half_limit`` combinations (count = cap)."""
    if any(len(p) == 0 for p in slot_prices):
        return 0, False
    k = (len(slot_prices) + 1) // 2
    a = _half_sums(slot_prices[:k], half_limit)
    b = _half_sums(slot_prices[k:], half_limit)
    if a is None or b is None:
        return cap, True
    b.sort()
    hi_plain = budget + _EPS  # T <= budget (no discount needed)
    lo_disc, hi_disc = min_spend - 1e-9, budget + discount + _EPS  # T >= min_spend and T - d <= budget
    total = 0
    for s in a:
        n = bisect.bisect_right(b, hi_plain - s)
        if lo_disc <= hi_plain:
            # the two ranges overlap or touch: T <= budget + discount covers both
            n = bisect.bisect_right(b, max(hi_plain, hi_disc) - s)
        else:
            n += max(0, bisect.bisect_right(b, hi_disc - s) - bisect.bisect_left(b, lo_disc - s))
        total += n
        if total >= cap:
            return cap, True
    return total, False
