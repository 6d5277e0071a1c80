"""The ``Generator`` interface and the offline template generator (Shopping Companion §4 steps 2–3).

A generator turns a sampled task (:class:`TaskSpec`: products, wanted and does-not-matter features,
voucher, budget) into text:

* :meth:`Generator.instruction` — the shopping request: names the product types (in slot order),
  their number and, for an add-on deal, the shop, voucher and budget; never the preferences;
* :meth:`Generator.dialogues` — the preference ("needle") sessions, as lists of turns, that reveal
  every wanted feature indirectly across several user turns: most statements come from the
  paraphrase lexicon (:mod:`shopping_companion.benchmark.data.paraphrases`) and never use the
  catalog's words; numeric wishes are said as situations, often in other units; every statement
  stays resolvable by :func:`~.verify.how_stated`;
* :meth:`Generator.distractors` — sessions on the same product type or domain that state no
  preference (care, history, buying advice), so that the bare instruction matches several sessions
  of the history, as in LongMemEval's haystacks;
* :meth:`Generator.revision`, :meth:`Generator.temporal_reference`, :meth:`Generator.abstention_request`
  — the pieces of memory-ability tasks (:mod:`.abilities`): a session revising an earlier value with
  a reason, a sentence pointing to a dated conversation, a sentence inviting an unstated preference;
* :meth:`Generator.find_conflicts` — extra conflict checks of haystack sessions against the wanted
  and does-not-matter features (the rule detector always runs; the LLM generator adds its own).

Two implementations: :class:`TemplateGenerator` (here; deterministic from the task's RNG) and
:class:`~.llm_generator.LLMGenerator` (any OpenAI-compatible endpoint). Both raise
:class:`~.common.GenerationError` when they cannot produce valid output for a task attempt.
"""

from __future__ import annotations

import functools
import math
import random
import re
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from shopping_companion.benchmark import templates as T
from shopping_companion.benchmark.data.paraphrases import ParaphraseLexicon, Phrase, direction_of, load_paraphrases
from shopping_companion.benchmark.synthesis.catalog_view import Feature, is_wearable_size, with_article
from shopping_companion.benchmark.synthesis.conflicts import Conflict, ConflictDetector
from shopping_companion.benchmark.synthesis.verify import _gold, evidence_text, gold_constraint, how_stated
from shopping_companion.judges.matching import default_matcher
from shopping_companion.judges.matching.quantity import UNIT_ALIASES, Constraint, unit_info
from shopping_companion.judges.rule import normalize_tokens
from shopping_companion.types import Product, Session, Turn, Voucher

__all__ = ["Generator", "SlotSpec", "TaskSpec", "TemplateGenerator", "format_money", "spoken_limit"]


@dataclass
class SlotSpec:
    """One requested product: the reference, how it is named, and its features.

    ``product``: the reference product (None for an open slot of an imported task);
    ``product_type``: e.g. ``"men's t-shirt"``; ``synonyms``: plural references for dialogue;
    ``domain``: coarse domain of the product (needle topics); ``wanted`` / ``dont_care``: real
    features of the reference (wanted ones are the gold preferences of this slot).
    """

    index: int
    product: Product | None
    product_type: str
    synonyms: list[str]
    domain: str
    wanted: list[Feature]
    dont_care: list[Feature]


@dataclass
class TaskSpec:
    """Everything a generator needs for one task.

    ``task_type``: ``single`` or ``addon``; ``voucher`` / ``budget`` / ``currency`` /
    ``shop_name`` are set for add-on deals; ``n_needles``: how many needle sessions to write;
    ``index``: the task's position in the build (LLM endpoint round-robin); ``seed``: a per-task
    integer (sent as the sampling seed to an LLM).
    """

    task_id: str
    index: int
    task_type: str
    slots: list[SlotSpec]
    n_needles: int
    seed: int
    voucher: Voucher | None = None
    budget: float | None = None
    currency: str | None = None
    shop_name: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def wanted(self) -> list[tuple[int, Feature]]:
        return [(s.index, f) for s in self.slots for f in s.wanted]


def format_money(amount: float, currency: str | None) -> str:
    """``₹1,299`` / ``$45.50`` / ``SAR 120`` (whole amounts without decimals)."""
    sign = T.CURRENCY_SIGNS.get(currency or "", (currency + " ") if currency else "")
    if abs(amount - round(amount)) < 1e-9:
        return f"{sign}{int(round(amount)):,}"
    return f"{sign}{amount:,.2f}"


def _items_list(slots: list[SlotSpec]) -> str:
    names = [with_article(s.product_type) for s in slots]
    if len(names) == 1:
        return names[0]
    return ", ".join(names[:-1]) + " and " + names[-1]


@runtime_checkable
class Generator(Protocol):
    """Writes the instruction and preference dialogues of a task (module docstring)."""

    name: str

    def describe(self) -> dict[str, Any]:
        """What the manifest records about the generator (never keys)."""
        ...

    def instruction(self, spec: TaskSpec, rng: random.Random) -> str:
        """The shopping request (one to four sentences)."""
        ...

    def dialogues(self, spec: TaskSpec, rng: random.Random) -> list[list[Turn]]:
        """``spec.n_needles`` preference sessions, each alternating user/assistant, user first."""
        ...

    def find_conflicts(self, spec: TaskSpec, sessions: list[Session]) -> list[Conflict]:
        """Conflicts this generator finds beyond the rule detector (may be empty)."""
        ...

    def revision(self, spec: TaskSpec, slot: SlotSpec, old: Feature, new: Feature, rng: random.Random) -> list[Turn]:
        """A session, alternating user/assistant and user first, in which the user says they no
        longer want ``old`` (said with a past cue: "used to", "not anymore", ...), gives a reason a
        person would give, and states ``new`` so that :func:`~.verify.how_stated` reads it."""
        ...

    def temporal_reference(self, spec: TaskSpec, when: str, rng: random.Random) -> str:
        """One sentence for the end of the request asking to go by what the user said in the
        conversation of ``when`` (e.g. ``"March 2023"``, written exactly); it states no preference."""
        ...

    def abstention_request(self, spec: TaskSpec, slot: SlotSpec, label: str, rng: random.Random) -> str:
        """One sentence for the end of the request asking for the user's usual ``label`` (e.g.
        ``"colour"``, written exactly) of the slot's product, naming no value."""
        ...

    def distractors(self, spec: TaskSpec, rng: random.Random, n: int = 2) -> list[list[Turn]]:
        """Up to ``n`` (≥ 0) short topic sessions, each alternating user/assistant, user first,
        about the product type or domain of the task's slots that state no preference of the user:
        no user sentence is a first-person preference statement for the rule conflict detector, and
        no turn states a wanted value (:func:`~.verify.how_stated`). Fewer than ``n`` when the
        banks have fewer fitting sessions. Raises ``ValueError`` for a negative ``n``."""
        ...


def _spoken_value(f: Feature) -> str:
    """The value as said in a sentence: lowercase words, except acronyms, brands, sizes and names
    with inner capitals ("iPhone 6", "AT&T", "Galaxy S7" keep their case); trademark signs
    dropped."""
    v = re.sub(r"\s*[®™©]\s*", " ", f.value).strip()
    v = re.sub(r"\s+", " ", v)
    if f.label in ("brand", "size"):
        return v.title() if (f.label == "brand" and v.isupper() and len(v) > 4) else v
    words = v.split()
    if any(re.search(r"[a-z][A-Z]|[A-Z]\d|\d[A-Z]|&", w) for w in words):
        return v  # a model or company name
    return " ".join(w if (w.isupper() and len(w) <= 4) else w.lower() for w in words)


def _cap_first(s: str) -> str:
    return s[:1].upper() + s[1:] if s else s


_SENTENCE_START = re.compile(r"([.!?]\s+|^)([a-z])")


def _sentence_case(s: str) -> str:
    """Capitalise the first letter of every sentence (values are spoken in lower case)."""
    return _SENTENCE_START.sub(lambda m: m.group(1) + m.group(2).upper(), s)


#: Units a limit may be said in, per pint dimensionality: (alias parsed by the quantity layer,
#: singular spoken form, plural spoken form).
_SPOKEN_UNITS: dict[str, list[tuple[str, str, str]]] = {
    "[length]": [
        ("cm", "centimetre", "cm"),
        ("m", "metre", "metres"),
        ("mm", "millimetre", "mm"),
        ("inch", "inch", "inches"),
        ("feet", "foot", "feet"),
    ],
    "[mass]": [("g", "gram", "grams"), ("kg", "kilo", "kg"), ("kg", "kilo", "kilos")],
    "[length] ** 3": [("ml", "millilitre", "ml"), ("l", "litre", "litres")],
    "[information]": [("gb", "GB", "GB"), ("tb", "TB", "TB"), ("mb", "MB", "MB")],
}
_NUMBER_WORDS = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
    "twenty",
]
#: Largest relative rounding error accepted when a limit is said in another unit (the quantity
#: layer's bound tolerance is 0.5 %).
_MAX_ROUNDING = 0.004
_NO_DETECTOR_VOCAB: dict[str, set[tuple[str, ...]]] = {}


def _number_text(x: float, rng: random.Random, words_ok: bool) -> str | None:
    """``x`` as people write it: an integer, one decimal, or a number word up to twenty."""
    for r in (round(x), round(x, 1)):
        if x and abs(r - x) / abs(x) <= _MAX_ROUNDING:
            if float(r).is_integer():
                k = int(r)
                if words_ok and 0 < k <= 20 and rng.random() < 0.35:
                    return _NUMBER_WORDS[k]
                return str(k) if k < 10000 else None  # no thousands separator: "5,000" reads as 5.0
            return f"{r:g}"
    return None


def spoken_limit(constraint: Constraint, gold_unit: str | None, rng: random.Random, other_unit_p: float = 0.7) -> str:
    """The bound of a numeric constraint as said in a sentence (``"1.5 metres"``, ``"59 inches"``,
    ``"two kilos"``, ``"64 GB"``): with probability ``other_unit_p`` in another unit of the same
    dimension than the gold value's (when its rounding error stays ≤ 0.4 %), else in the gold's
    unit. Every result is read back to the same magnitude by the quantity layer
    (:func:`~shopping_companion.judges.matching.parse_quantities`). A dimensionless bound is a
    plain number."""
    units = _SPOKEN_UNITS.get(constraint.dim)
    if not units:
        text = _number_text(constraint.lo, rng, words_ok=True)
        return text if text is not None else f"{constraint.lo:g}"
    options = []
    for alias, singular, plural in units:
        factor, _dim = unit_info(alias)
        x = constraint.lo / factor
        if not (0.1 <= x < 10000):
            continue
        same = gold_unit is not None and UNIT_ALIASES.get(gold_unit.lower()) == UNIT_ALIASES[alias]
        options.append((same, x, singular, plural))
    others = [o for o in options if not o[0]]
    pool = others if (others and rng.random() < other_unit_p) else [o for o in options if o[0]] or options
    rng.shuffle(pool)
    for _same, x, singular, plural in pool:
        num = _number_text(x, rng, words_ok=plural not in ("cm", "mm", "kg", "ml", "GB", "TB", "MB"))
        if num is not None:
            unit = singular if num in ("1", "one") else plural
            return f"{num} {unit}"
    return constraint.text


class TemplateGenerator:
    """Offline generator from the phrasing banks of :mod:`shopping_companion.benchmark.templates`
    and the paraphrase lexicon.

    Deterministic given the task RNG. Needles: an opener (a life event or situation with
    probability ``situation_p``, else one on the product's domain), optional small talk, one user
    statement per wanted feature (sometimes two in one turn, sometimes answering an assistant
    question, scoped to the product type for add-on deals and sometimes for single tasks),
    sometimes a does-not-matter remark, and a closing exchange.

    A wanted value whose matcher concept has lexicon statements is said indirectly with
    probability ``paraphrase_p`` (style drawn uniformly among the concept's styles, then a
    statement); other values (brands, sizes, values outside every vocabulary) are said verbatim
    in a habit sentence. A numeric wish is said with a lexicon bank for its label or dimension,
    its limit in another unit with probability ``other_unit_p``. Every statement is checked with
    :func:`~.verify.how_stated` before use (a lexicon statement that fails falls back to the
    verbatim banks), so needles are resolvable by construction.

    Raises ``ValueError`` for a probability outside [0, 1].
    """

    name = "template"

    def __init__(
        self,
        paraphrase_p: float = 0.95,
        situation_p: float = 0.5,
        other_unit_p: float = 0.7,
        lexicon: ParaphraseLexicon | None = None,
    ) -> None:
        for field_name, v in (
            ("paraphrase_p", paraphrase_p),
            ("situation_p", situation_p),
            ("other_unit_p", other_unit_p),
        ):
            if not 0.0 <= float(v) <= 1.0:
                raise ValueError(f"TemplateGenerator.{field_name} must be in [0, 1], got {v!r}")
        self.paraphrase_p = float(paraphrase_p)
        self.situation_p = float(situation_p)
        self.other_unit_p = float(other_unit_p)
        self.lexicon = lexicon or load_paraphrases()
        self._detector = ConflictDetector(_NO_DETECTOR_VOCAB)

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "template",
            "paraphrase_p": self.paraphrase_p,
            "situation_p": self.situation_p,
            "other_unit_p": self.other_unit_p,
        }

    # ------------------------------------------------------------------ step 2

    def instruction(self, spec: TaskSpec, rng: random.Random) -> str:
        if spec.task_type == "single":
            return rng.choice(T.SINGLE_INSTRUCTIONS).format(item=with_article(spec.slots[0].product_type))
        assert spec.voucher is not None and spec.budget is not None
        cur = spec.currency
        v = rng.choice(T.ADDON_VOUCHER).format(
            shop=spec.shop_name or spec.voucher.shop_id,
            shop_id=spec.voucher.shop_id,
            discount=format_money(spec.voucher.discount, cur),
            min_spend=format_money(spec.voucher.min_spend, cur),
        )
        budget = rng.choice(T.ADDON_BUDGET).format(budget=format_money(spec.budget, cur))
        close = rng.choice(T.ADDON_CLOSE)
        shape = rng.randrange(3)
        if shape == 1:  # items first: the item sentence must not refer back to the shop
            items = rng.choice(T.ADDON_ITEMS_LEAD).format(items=_items_list(spec.slots))
            order = (items, v, budget, close)
        else:
            items = rng.choice(T.ADDON_ITEMS).format(items=_items_list(spec.slots))
            order = (v, items, budget, close) if shape == 0 else (v, items, close, budget)
        return " ".join(_cap_first(x) for x in order if x)

    # ------------------------------------------------------------------ step 3

    def _verbatim_statement(self, f: Feature, rng: random.Random) -> str:
        bank = T.PREFERENCE_BANK.get(f.label)
        if f.label == "size" and not is_wearable_size(f.value):
            bank = None  # "12 Ounces" is a size, but nobody says "I'm a size 12 ounces"
        if bank:
            text = rng.choice(bank).format(v=_spoken_value(f))
        else:
            text = rng.choice(T.GENERIC_BANK).format(v=_spoken_value(f), label=f.spoken_label)
        return _cap_first(text)

    def _numeric_statement(self, f: Feature, rng: random.Random) -> str | None:
        """A situation sentence for a numeric wish whose limit the quantity layer reads back as the
        same constraint and that does not repeat the gold value verbatim (up to 8 draws of
        template and unit), or None."""
        c = gold_constraint(f.label, f.value)
        if c is None or c.op == "range":
            return None
        g = _gold(f.label, f.value)
        templates = self.lexicon.numeric_templates(f.label, c.dim, direction_of(c.op))
        if not templates:
            return None
        m = re.search(r"[a-zA-Z\"]+\s*$", f.value.strip())
        gold_unit = m.group(0).strip() if m and m.group(0).strip().lower() in UNIT_ALIASES else g.key.unit
        for _ in range(8):
            text = rng.choice(templates).format(limit=spoken_limit(c, gold_unit, rng, self.other_unit_p))
            if how_stated(f.label, f.value, text) == "quantity":
                return text
        return None

    def _statement(self, f: Feature, rng: random.Random) -> str:
        """One user statement revealing ``f`` (class docstring)."""
        if f.kind == "numeric":
            text = self._numeric_statement(f, rng) if rng.random() < self.paraphrase_p else None
            return _cap_first(text) if text else self._verbatim_statement(f, rng)
        phrases = self._indirect_phrases(f.label, f.value)
        if phrases and rng.random() < self.paraphrase_p:
            style = rng.choice(sorted({p.style for p in phrases}))
            return _cap_first(rng.choice([p for p in phrases if p.style == style]).text)
        return self._verbatim_statement(f, rng)

    @functools.lru_cache(maxsize=8192)  # noqa: B019 (the generator lives as long as the build)
    def _indirect_phrases(self, label: str, value: str) -> tuple[Phrase, ...]:
        """The lexicon statements that state ``value`` of ``label`` indirectly and that verification
        reads back as it (empty when the value has none: brands, rare values)."""
        g = _gold(label, value)
        if len(g.concepts) != 1:
            return ()
        ev = normalize_tokens(evidence_text(label, value))
        vocab = default_matcher().vocab_for(g.key)
        gold_toks = set(normalize_tokens(value))

        def fits(text: str) -> bool:
            # a broader value named in a family statement ("blue" for navy) must be part of the
            # gold value's own words ("Navy Blue"), or the conflict detector reads another value
            return vocab is None or all(
                c == g.concepts[0] or set(normalize_tokens(c)) <= gold_toks for c in vocab.find(text, prose=True)
            )

        return tuple(
            p
            for p in self.lexicon.phrases(g.key.name, g.concepts[0])
            if not _contains_tokens(p.tokens, ev) and fits(p.text) and how_stated(label, value, p.text)
        )

    def can_paraphrase(self, f: Feature) -> bool:
        """Whether this generator can state ``f`` without its verbatim value: a lexicon statement
        for a category value, a numeric template for a limit. Synthesis favours such features when
        it samples the wanted ones (``SynthConfig.verbatim_weight``)."""
        if f.kind == "numeric":
            c = gold_constraint(f.label, f.value)
            return bool(
                c is not None and c.op != "range" and self.lexicon.numeric_templates(f.label, c.dim, direction_of(c.op))
            )
        return bool(self._indirect_phrases(f.label, f.value))

    def _scoped(self, statement: str, slot: SlotSpec, rng: random.Random) -> str:
        item = rng.choice(slot.synonyms) if slot.synonyms else slot.product_type
        return _cap_first(rng.choice(T.SCOPE_TEMPLATES).format(item=item, s=statement))

    def _groups(self, spec: TaskSpec, rng: random.Random) -> list[list[SlotSpec]]:
        if spec.task_type == "single":
            return [spec.slots]
        slots = list(spec.slots)
        rng.shuffle(slots)
        n = max(1, min(spec.n_needles, len(slots)))
        size = math.ceil(len(slots) / n)
        return [slots[i : i + size] for i in range(0, len(slots), size)]

    def dialogues(self, spec: TaskSpec, rng: random.Random) -> list[list[Turn]]:
        out: list[list[Turn]] = []
        if spec.task_type == "single":
            slot = spec.slots[0]
            feats = list(slot.wanted)
            rng.shuffle(feats)
            n = max(1, min(spec.n_needles, len(feats)))
            for j in range(n):
                out.append(self._session([(slot, f) for f in feats[j::n]], [slot], scope_p=0.3, rng=rng))
            return out
        for group in self._groups(spec, rng):
            pairs = [(slot, f) for slot in group for f in slot.wanted]
            rng.shuffle(pairs)
            out.append(self._session(pairs, group, scope_p=1.0, rng=rng))
        return out

    def _opener(self, domain: str, rng: random.Random) -> tuple[str, str]:
        if rng.random() < self.situation_p:
            return rng.choice(T.SITUATION_OPENERS)
        return rng.choice(T.OPENERS.get(domain, []) + T.OPENERS["generic"])

    def _session(
        self, pairs: list[tuple[SlotSpec, Feature]], slots: list[SlotSpec], scope_p: float, rng: random.Random
    ) -> list[Turn]:
        opener = self._opener(slots[0].domain, rng)
        turns = [Turn(role="user", content=opener[0]), Turn(role="assistant", content=opener[1])]
        if rng.random() < 0.4:
            u, a = rng.choice(T.FILLERS)
            turns += [Turn(role="user", content=u), Turn(role="assistant", content=a)]
        acks = list(T.ASSISTANT_ACKS)
        rng.shuffle(acks)
        i = 0
        while i < len(pairs):
            slot, f = pairs[i]
            text = self._statement(f, rng)
            if rng.random() < scope_p:
                text = self._scoped(text, slot, rng)
            # sometimes two statements about the same product share a turn
            if i + 1 < len(pairs) and pairs[i + 1][0] is slot and rng.random() < 0.25:
                nf = pairs[i + 1][1]
                second = self._statement(nf, rng)
                first_word = second.split()[0]
                if first_word not in ("I", "I'm", "I've", "I'd") and not _spoken_value(nf).startswith(first_word):
                    second = second[:1].lower() + second[1:]
                text = rng.choice(T.CONNECTORS).format(a=text, b=second)
                i += 1
            if rng.random() < 0.35:
                asks = T.ASK_BANK.get(f.label) or T.ASK_GENERIC
                # replace the last assistant turn's text with a question inviting the statement
                turns[-1] = Turn(role="assistant", content=turns[-1].content + " " + rng.choice(asks))
            turns.append(Turn(role="user", content=_sentence_case(text)))
            turns.append(Turn(role="assistant", content=acks[i % len(acks)]))
            i += 1
        dc = [(s, f) for s in slots for f in s.dont_care]
        if dc and rng.random() < 0.5:
            s, f = rng.choice(dc)
            text = rng.choice(T.DONT_CARE_BANK).format(label=f.spoken_label)
            if len(slots) > 1:
                text = self._scoped(_cap_first(text), s, rng)
            turns += [
                Turn(role="user", content=_cap_first(text)),
                Turn(role="assistant", content=rng.choice(T.ASSISTANT_ACKS)),
            ]
        u, a = rng.choice(T.NEEDLE_CLOSERS)
        turns += [Turn(role="user", content=u), Turn(role="assistant", content=a)]
        return turns

    # ------------------------------------------------------------------ memory abilities

    def revision(self, spec: TaskSpec, slot: SlotSpec, old: Feature, new: Feature, rng: random.Random) -> list[Turn]:
        item = rng.choice(slot.synonyms) if slot.synonyms else slot.product_type
        reason = rng.choice(T.REVISION_REASONS)
        lead = rng.choice(T.REVISION_LEADS).format(
            old=_spoken_value(old), item=item, reason=reason, reason_cap=_cap_first(reason)
        )
        opener = self._opener(slot.domain, rng)
        u, a = rng.choice(T.NEEDLE_CLOSERS)
        return [
            Turn(role="user", content=opener[0]),
            Turn(role="assistant", content=opener[1]),
            Turn(role="user", content=_sentence_case(_cap_first(lead) + " " + self._statement(new, rng))),
            Turn(role="assistant", content=rng.choice(T.ASSISTANT_ACKS)),
            Turn(role="user", content=u),
            Turn(role="assistant", content=a),
        ]

    def temporal_reference(self, spec: TaskSpec, when: str, rng: random.Random) -> str:
        return _for_slot(spec, spec.slots[0], rng.choice(T.TEMPORAL_REFS).format(when=when))

    def abstention_request(self, spec: TaskSpec, slot: SlotSpec, label: str, rng: random.Random) -> str:
        return _for_slot(spec, slot, rng.choice(T.ABSTENTION_ASKS).format(label=label))

    # ------------------------------------------------------------------ topic distractors

    def distractors(self, spec: TaskSpec, rng: random.Random, n: int = 2) -> list[list[Turn]]:
        if n < 0:
            raise ValueError(f"distractors: n must be >= 0, got {n}")
        if n == 0:
            return []
        wanted = [f for _, f in spec.wanted]
        candidates: list[tuple[SlotSpec, list[tuple[str, str]]]] = []
        for slot in spec.slots:
            for sess in T.DISTRACTORS.get(slot.domain, []) + T.DISTRACTORS["generic"]:
                candidates.append((slot, sess))
        rng.shuffle(candidates)
        out: list[list[Turn]] = []
        used: set[int] = set()
        for slot, sess in candidates:
            if len(out) >= n:
                break
            if id(sess) in used:
                continue
            turns = self._fill_distractor(slot, sess, rng)
            if not self._distractor_ok(turns, wanted):
                continue
            used.add(id(sess))
            out.append(turns)
        return out

    def _fill_distractor(self, slot: SlotSpec, sess: list[tuple[str, str]], rng: random.Random) -> list[Turn]:
        item = slot.product_type
        items = rng.choice(slot.synonyms) if slot.synonyms else item
        values = {"item": item, "an_item": with_article(item), "items": items}
        turns: list[Turn] = []
        for u, a in sess:
            turns.append(Turn(role="user", content=_cap_first(u.format(**values))))
            turns.append(Turn(role="assistant", content=_cap_first(a.format(**values))))
        return turns

    def _distractor_ok(self, turns: list[Turn], wanted: list[Feature]) -> bool:
        session = Session(session_id="distractor-check", turns=turns, source="template-distractor")
        if self._detector.statements(session, cache=False):
            return False
        return not any(how_stated(f.label, f.value, t.content) for t in turns for f in wanted)

    def find_conflicts(self, spec: TaskSpec, sessions: list[Session]) -> list[Conflict]:
        return []


def _for_slot(spec: TaskSpec, slot: SlotSpec, text: str) -> str:
    """``text`` scoped to the slot's product in an add-on deal ("For the men's shirt, pick ...")."""
    return f"For the {slot.product_type}, {text[:1].lower()}{text[1:]}" if spec.task_type == "addon" else text


def _contains_tokens(hay: tuple[str, ...], needle: tuple[str, ...]) -> bool:
    n = len(needle)
    if not n or n > len(hay):
        return False
    return any(hay[i : i + n] == needle for i in range(len(hay) - n + 1))
