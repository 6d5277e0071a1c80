"""The ``Generator`` interface and the offline template generator (Shopping Companion §4 steps 2–3).

A generator turns a sampled task (:class:`TaskSpec`: products, wanted and does-not-matter features,
voucher, budget) into text:

* :meth:`Generator.instruction` — the shopping request: names the product types (in slot order),
  their number and, for an add-on deal, the shop, voucher and budget; never the preferences;
* :meth:`Generator.dialogues` — the preference ("needle") sessions, as lists of turns, that reveal
  every wanted feature indirectly across several user turns;
* :meth:`Generator.find_conflicts` — extra conflict checks of haystack sessions against the wanted
  and does-not-matter features (the rule detector always runs; the LLM generator adds its own).

Two implementations: :class:`TemplateGenerator` (here; deterministic from the task's RNG) and
:class:`~.llm_generator.LLMGenerator` (any OpenAI-compatible endpoint). Both raise
:class:`~.common.GenerationError` when they cannot produce valid output for a task attempt.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from shopping_companion.benchmark import templates as T
from shopping_companion.benchmark.synthesis.catalog_view import Feature, is_wearable_size, with_article
from shopping_companion.benchmark.synthesis.conflicts import Conflict
from shopping_companion.types import Product, Session, Turn, Voucher

__all__ = ["Generator", "SlotSpec", "TaskSpec", "TemplateGenerator", "format_money"]


@dataclass
class SlotSpec:
    """One requested product: the reference, how it is named, and its features.

    ``product_type``: e.g. ``"men's t-shirt"``; ``synonyms``: plural references for dialogue;
    ``domain``: coarse domain of the product (needle topics); ``wanted`` / ``dont_care``: real
    features of the reference (wanted ones are the gold preferences of this slot).
    """

    index: int
    product: Product
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


def _spoken_value(f: Feature) -> str:
    """The value as said in a sentence: lowercase words, except acronyms, brands and sizes."""
    v = f.value.strip()
    if f.label in ("brand", "size"):
        return v.title() if (f.label == "brand" and v.isupper() and len(v) > 4) else v
    words = v.split()
    return " ".join(w if (w.isupper() and len(w) <= 4) else w.lower() for w in words)


def _cap_first(s: str) -> str:
    return s[:1].upper() + s[1:] if s else s


_SENTENCE_START = re.compile(r"([.!?]\s+|^)([a-z])")


def _sentence_case(s: str) -> str:
    """Capitalise the first letter of every sentence (values are spoken in lower case)."""
    return _SENTENCE_START.sub(lambda m: m.group(1) + m.group(2).upper(), s)


class TemplateGenerator:
    """Offline generator from the phrasing banks of :mod:`shopping_companion.benchmark.templates`.

    Deterministic given the task RNG. Needles: an opener on the product's domain, optional small
    talk, one user statement per wanted feature (sometimes two in one turn, sometimes answering an
    assistant question, scoped to the product type for add-on deals and sometimes for single
    tasks), sometimes a does-not-matter remark, and a closing exchange.
    """

    name = "template"

    def describe(self) -> dict[str, Any]:
        return {"kind": "template"}

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

    def _statement(self, f: Feature, rng: random.Random) -> str:
        bank = T.PREFERENCE_BANK.get(f.label)
        if f.label == "size" and not is_wearable_size(f.value):
            bank = None  # "12 Ounces" is a size, but nobody says "I'm a size 12 ounces"
        if bank:
            text = rng.choice(bank).format(v=_spoken_value(f))
        else:
            text = rng.choice(T.GENERIC_BANK).format(v=_spoken_value(f), label=f.spoken_label)
        return _cap_first(text)

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

    def _session(
        self, pairs: list[tuple[SlotSpec, Feature]], slots: list[SlotSpec], scope_p: float, rng: random.Random
    ) -> list[Turn]:
        domain = slots[0].domain
        opener = rng.choice(T.OPENERS.get(domain, []) + T.OPENERS["generic"])
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

    def find_conflicts(self, spec: TaskSpec, sessions: list[Session]) -> list[Conflict]:
        return []
