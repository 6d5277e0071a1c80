"""Reading a product like a person: does it satisfy a preference, and is it the kind of product a
slot asks for?

:meth:`ProductReader.check` decides one (product, preference) pair and says why:

1. **Structured fields first.** The product's attributes and options whose key resolves to the
   preference's canonical key (exact key resolution: ``Fabric`` and ``Fabric 2`` are different
   fields; ``base_colour`` is ``colour``), and the brand for ``brand``. Multi-valued fields are
   split (``sizes: "S,M,L"``); a key's unit applies to bare numbers (``width_cm: 146``). Values
   such as ``NA`` or ``-`` are ignored. Secondary fields (``colour1``, ``Fabric 2``) count only
   when the product has no primary field for the key — and always for *avoid*.
2. **Text when no field exists.** Title first, then features, options and description: the
   concepts of the key's vocabulary they mention (title ``"… Flip-Flops"`` settles fastening =
   slip-on; ``"Navy Blue"`` in a title settles the colour), quantities of the right dimension
   next to the key's word or alone in the title (``"500 g"``), or the gold phrase itself for keys
   without a vocabulary.
3. **Nothing settles it** = unknown.

*want*: satisfied iff the evidence states the value (or a narrower one); unknown is not
satisfied. *avoid*: violated iff the evidence states the avoided value (any share of a blend);
satisfied otherwise, unknown included — a shopper takes a product page at its word — except for
a ``group`` concept (dairy), which a page that names none of its members leaves uncertain.

Every decision says whether it rests on explicit evidence (:attr:`Evidence.confident`, with a
``reason`` from :data:`~shopping_companion.types.UncertainReason` when not): unknown
(``not_stated``), a field or wish outside the vocabularies (``value_outside_vocabulary``,
``unknown_key``), or a structured field that denies a wish the title states (``field_text_conflict``).
:meth:`ProductReader.relevance` does the same for q2 (``adjacent_type``, ``unknown_type``).

:meth:`ProductReader.is_relevant` (q2) compares product types, never loose category words:
the slot's type (its ``product_type``, e.g. ``"pair of men's casual shoes"`` → casual shoe) with
the product's own type — the last product-type noun of its title before *for* / *with*
(``"Octane Case for Galaxy Note 4 Cell Phones"`` → case), else its finest category when that
names one type. Types match when one is the other or a kind of it; a title type broader than the
slot's (a plain "shoe" for "casual shoe") needs the same finest category as the slot. Without a
known type on either side: the finest categories are equal, or the slot's product-type words all
occur in the title.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from shopping_companion.judges.matching.lexicon import ResolvedKey, Vocabulary, counted_part
from shopping_companion.judges.matching.normalize import STOP_WORDS, phrase, phrase_occurs, split_denials, tokens
from shopping_companion.judges.matching.quantity import UNIT_ALIASES, Constraint, Quantity, parse_quantities
from shopping_companion.sentences import separate_run_together, split_sentences
from shopping_companion.judges.matching.values import (
    Value,
    ValueMatcher,
    default_matcher,
    is_amount,
    listed_names,
    purpose_head,
    readings,
    split_gloss,
    split_negation,
)
from shopping_companion.types import Preference, Product, ProductSlot

__all__ = ["Evidence", "ProductReader", "default_reader", "UNINFORMATIVE"]


UNINFORMATIVE = frozenset(
    {
        "",
        "na",
        "n a",
        "none",
        "nan",
        "null",
        "not applicable",
        "no",
        "other",
        "others",
        "unknown",
        "not specified",
        "default",
    }
)
_SPLIT_MULTI = re.compile(r"\s*[,;|/]\s*")
_TITLE_HEAD_SPLIT = re.compile(r"\s+(?:for|compatible\s+with|with|fits|designed\s+for)\s+", re.IGNORECASE)
_TYPE_FILLER = frozenset({"pair", "set", "pack", "men", "women", "boy", "girl", "kid", "unisex", "baby", "adult"})
_COMPOUND_CAT = re.compile(r"\s*(?:&|\band\b|,|/)\s*", re.IGNORECASE)


@dataclass(slots=True)
class Evidence:
    """Why a (product, preference) pair was decided: ``satisfied``; ``source`` is ``attribute``,
    ``option``, ``brand``, ``title``, ``features``, ``description`` or ``none`` (unknown);
    ``detail`` quotes the field (``"Neck='Round Neck'"``); ``confident``: explicit evidence decided
    it, else ``reason`` (an :data:`~shopping_companion.types.UncertainReason`) says why not."""

    satisfied: bool
    source: str
    detail: str = ""
    confident: bool = True
    reason: str | None = None

    @property
    def known(self) -> bool:
        return self.source != "none"


class ProductReader:
    """Product-side rules over a :class:`~shopping_companion.judges.matching.values.ValueMatcher`."""

    def __init__(self, matcher: ValueMatcher | None = None) -> None:
        self.m = matcher or default_matcher()

    def __copy__(self) -> ProductReader:
        return self

    def __deepcopy__(self, memo: dict) -> ProductReader:
        return self

    # ------------------------------------------------------------------ structured fields
    def fields(self, product: Product, key: ResolvedKey) -> tuple[tuple[str, str, str, ResolvedKey], ...]:
        """``(value, role, label, field key)`` of every structured field of ``key``; ``label`` is
        ``"<source> <field>=<value>"`` with source ``attribute``, ``option`` or ``brand``."""
        out: list[tuple[str, str, str, ResolvedKey]] = []
        multi = bool(key.spec and key.spec.multi_valued)

        def add(k: str, v: object, source: str, role: str | None = None) -> None:
            rk = self.m.key(k)
            if not rk.same_key(key):
                return
            text = str(v).strip()
            if phrase(text) in UNINFORMATIVE:
                return
            parts = [p for p in _SPLIT_MULTI.split(text) if p] if multi and "%" not in text else [text]
            for p in parts:
                if phrase(p) not in UNINFORMATIVE:
                    out.append((p, role or rk.role, f"{source} {k}={text!r}", rk))

        for k, v in product.attributes.items():
            add(k, v, "attribute")
        for k, opts in product.options.items():
            for o in opts:
                add(k, o, "option", "primary")
        if product.brand and key.spec is not None and key.spec.name == "brand":
            out.append((product.brand, "primary", f"brand brand={product.brand!r}", key))
        return tuple(out)

    # ------------------------------------------------------------------ one preference
    def check(self, product: Product, pref: Preference) -> Evidence:
        """Whether ``product`` satisfies ``pref`` (module docstring), with the evidence used and
        whether it is explicit. A value with a gloss in parentheses is read by each of its
        :func:`~shopping_companion.judges.matching.values.readings`: a want is met when one reading
        is met, an avoid violated when one reading is present; the answer is explicit only when
        the deciding reading (or, for a miss, every reading) is, and a met want also only when no
        other reading is explicitly unmet and the gloss may restate the value
        (:meth:`~shopping_companion.judges.matching.values.ValueMatcher.gloss_consistent`)."""
        if "(" not in pref.value:
            return self._check(product, pref)
        evs = [self._check(product, pref.model_copy(update={"value": r})) for r in readings(pref.value)]
        want = pref.polarity == "want"
        deciding = [e for e in evs if e.satisfied == want]
        if deciding:
            best = next((e for e in deciding if e.confident), deciding[0])
            key = self.m.key(pref.attribute)
            if (
                want
                and best.confident
                and (
                    not self.m.gloss_consistent(key, pref.value)
                    or any(e.confident and not e.satisfied for e in evs[1:])
                )
            ):
                # a reading is met while the value's other reading is explicitly not ("rubber
                # (non-slip)" on a rubber sole said to slip): the gloss may add to the wish
                detail = f"{best.detail}; another reading of the value is not met"
                return Evidence(True, best.source, detail, False, "value_outside_vocabulary")
            return best
        _, gloss = split_gloss(pref.value)
        if want and gloss is None and len(evs) > 1 and evs[1].confident:
            # a qualifying gloss ("Lightning (for iPhone)") narrows the wish: its head explicitly
            # not met ("connectivity: Micro USB") is the wish not met
            return evs[1]
        confident = all(e.confident for e in evs)
        first = evs[0]
        if confident or not first.confident:
            return first
        return Evidence(first.satisfied, first.source, first.detail, False, next(e.reason for e in evs if e.reason))

    def _check(self, product: Product, pref: Preference) -> Evidence:
        key = self.m.key(pref.attribute)
        want = pref.polarity == "want"
        fields = self.fields(product, key)
        if not fields:
            return self._from_text(product, key, pref, want)
        if want:
            primary = [f for f in fields if f[1] == "primary"] or list(fields)
            doubt = False
            for value, _, label, rk in primary:
                d = self.m.satisfaction(rk, pref.value, value)
                if d.holds:
                    ev = Evidence(True, label.split(" ", 1)[0], label)  # attribute | option | brand
                    return self._title_agrees(product, key, pref, ev) if d.explicit else _unsure(ev, key)
                doubt = doubt or not d.explicit
            if self._broader_field(key, pref.value, primary):
                # the field names only the family ("Blue" for a navy wish): the text may settle it
                text = self._from_text(product, key, pref, want)
                if text.satisfied and text.known:
                    return text
            ev = Evidence(False, "attribute", "; ".join(f[2] for f in primary[:3]))
            return _unsure(ev, key) if doubt else self._title_agrees(product, key, pref, ev)
        doubt = False
        for value, _, label, rk in fields:
            d = self.m.presence(rk, pref.value, value)
            if d.holds:
                ev = Evidence(False, "attribute", label)
                return self._title_agrees(product, key, pref, ev) if d.explicit else _unsure(ev, key)
            doubt = doubt or not d.explicit
        ev = Evidence(True, "attribute", "; ".join(f[2] for f in fields[:3]))
        if doubt:
            return _unsure(ev, key)
        ev = self._text_agrees(product, key, pref, ev)
        if ev.confident and self._avoids_group(key, pref):
            return Evidence(True, ev.source, f"{ev.detail}; no member of the group is named", False, "not_stated")
        return ev

    def _avoids_group(self, key: ResolvedKey, pref: Preference) -> bool:
        """``pref`` avoids a concept its vocabulary marks as a ``group`` (dairy): products carry
        it without naming it, so only a named member decides."""
        if pref.polarity != "avoid":
            return False
        vocab = self.m.vocab_for(key)
        if vocab is None:
            return False
        return any(vocab.concepts[c].group for c in self.m.parse(key, pref.value).concepts if c in vocab.concepts)

    def _text_agrees(self, product: Product, key: ResolvedKey, pref: Preference, ev: Evidence) -> Evidence:
        """``ev`` (an avoid its structured fields leave unviolated), made uncertain
        (``field_text_conflict``) when the title, features or description state the avoided value
        (not negated: "leather-free" does not state leather)."""
        vocab = self.m.vocab_for(key)
        gold = self.m.parse(key, pref.value)
        for source, text in self._text_fields(product)[:-1]:  # the category path names no material
            if source == "options":
                continue
            if vocab is not None and gold.concepts and not gold.partial:
                found = vocab.find(text, prose=True)
                hit = any(vocab.has(c, g) for c in found for g in gold.concepts)
            else:
                hit = bool(phrase_occurs(pref.value, text))
            if hit:
                return Evidence(
                    True, ev.source, f"{ev.detail}; but the {source} mentions it", False, "field_text_conflict"
                )
        return self._denial_of_avoid(product, key, pref, ev)

    def _title_agrees(self, product: Product, key: ResolvedKey, pref: Preference, ev: Evidence) -> Evidence:
        """``ev`` (decided by a structured field), made uncertain (``field_text_conflict``) when a
        structured field denies a wish that the title states outright (``colour: Red`` on a
        "… Navy Polo"). Titles name accents and second colours ("Silver-Toned", "Off White"), so a
        title that merely names other concepts does not make an accepted field uncertain."""
        if ev.satisfied or pref.polarity != "want":
            return ev
        vocab = self.m.vocab_for(key)
        if vocab is None:
            return ev
        found = vocab.find(product.title, prose=True)
        if not found:
            return ev
        gold = self.m.parse(key, pref.value)
        if not gold.concepts or gold.partial:
            return ev
        if not all(any(vocab.is_a(c, g) for c in found) for g in gold.concepts):
            return ev
        names = ", ".join(dict.fromkeys(found))
        return Evidence(False, ev.source, f"{ev.detail}; but the title mentions {names}", False, "field_text_conflict")

    def _broader_field(self, key: ResolvedKey, gold: str, fields: list) -> bool:
        """Some field value is a broader concept of the gold value (the gold is a kind of it)."""
        vocab = self.m.vocab_for(key)
        g = self.m.parse(key, gold)
        if vocab is None or not g.concepts or g.partial:
            return False
        for value, _, _, rk in fields:
            for c in self.m.parse(rk, value).concepts:
                if any(gc != c and vocab.is_a(gc, c) for gc in g.concepts):
                    return True
        return False

    def _text_fields(self, product: Product) -> list[tuple[str, str]]:
        out = [("title", product.title)]
        if product.features:
            out.append(("features", separate_run_together(" | ".join(product.features))))
        opts = [o for vs in product.options.values() for o in vs]
        if opts:
            out.append(("options", ", ".join(opts)))
        if product.description:
            out.append(("description", separate_run_together(product.description)))
        if product.category_path:
            out.append(("category", " > ".join(product.category_path)))
        return out

    def _from_text(self, product: Product, key: ResolvedKey, pref: Preference, want: bool) -> Evidence:
        """What the title, features, options and description say of ``pref`` (module docstring). A
        wish the text denies ("Not compatible with Xbox", "not suitable for induction hobs") is
        explicitly not met when nothing else states it, uncertain when the text also states it
        (``field_text_conflict``) or the denial is loose (after a comma), never met."""
        ev = self._read_text(product, key, pref, want)
        if not want:
            return self._denial_of_avoid(product, key, pref, ev)
        if ev.known and not ev.satisfied:
            return ev
        if ev.satisfied and ev.confident and not split_negation(pref.value)[0]:
            negated = next(
                (src for src, text in self._text_fields(product)[:-1] if phrase_occurs(pref.value, text) is False), None
            )
            if negated is not None:
                # "Induction-ready" in the title, "Not induction compatible" in the description
                detail = f"{ev.detail}; but the {negated} negates it"
                return Evidence(True, ev.source, detail, False, "field_text_conflict")
        denied = self._denied(product, key, pref.value)
        if denied is None:
            return ev
        source, firm = denied
        detail = f"{source} says it does not go with {pref.value!r}"
        if ev.satisfied:
            return Evidence(False, ev.source, f"{ev.detail}; but the {detail}", False, "field_text_conflict")
        if firm and not ev.known:
            return Evidence(False, source, f"the {detail}")
        return Evidence(False, source, f"the {detail}", False, ev.reason or "not_stated")

    def _denial_of_avoid(self, product: Product, key: ResolvedKey, pref: Preference, ev: Evidence) -> Evidence:
        """``ev`` (an avoid), made uncertain (``field_text_conflict``) when it is satisfied while the
        text names the avoided thing inside a denial: "Not suitable for people with latex allergy"
        says nothing is latex-free, it may say the opposite."""
        if not (ev.satisfied and ev.confident) or (denied := self._denied(product, key, pref.value)) is None:
            return ev
        detail = f"{ev.detail}; but the {denied[0]} names it in a denial"
        return Evidence(True, ev.source, detail, False, "field_text_conflict")

    def _denied(self, product: Product, key: ResolvedKey, value: str) -> tuple[str, bool] | None:
        """``(source, firm)`` of the first text field that denies going with ``value``
        (:func:`~shopping_companion.judges.matching.normalize.split_denials`), else None."""
        vocab = self.m.vocab_for(key)
        gold = self.m.parse(key, value) if vocab is not None else None
        loose = None
        for source, text in self._text_fields(product):
            if source in ("options", "category"):
                continue
            for scope, firm in split_denials(text)[1]:
                if gold is not None and gold.concepts and not gold.partial:
                    found = vocab.find(scope, prose=True)
                    hit = bool(found) and all(any(vocab.is_a(c, g) for c in found) for g in gold.concepts)
                else:
                    hit = phrase_occurs(value, scope) is True
                if hit and firm:
                    return source, True
                if hit and loose is None:
                    loose = source
        return (loose, False) if loose is not None else None

    def _read_text(self, product: Product, key: ResolvedKey, pref: Preference, want: bool) -> Evidence:
        vocab = self.m.vocab_for(key)
        gold = self.m.parse(key, pref.value)
        fields = self._text_fields(product)
        counts_parts = vocab is None and _counts_parts(key)
        if counts_parts and (counted := self._parts_counted(key, gold, fields)) is not None:
            if not want:
                counted = Evidence(
                    not counted.satisfied, counted.source, counted.detail, counted.confident, counted.reason
                )
            return counted
        if counts_parts and _names_part(key) and _is_count(pref.value):
            # a count of a part no sentence states: a bare number elsewhere ("Set of 3 bags with
            # wheels", "Pack of 2", "3 pockets each" for 3 shelves) counts something else
            return _unknown(want, "no count of this part stated", "unknown_key")
        if gold.constraint is not None and (key.kind == "quantity" or gold.constraint.op != "="):
            for source, text in fields:
                qs = self._quantities_for(
                    key,
                    text,
                    gold.constraint.dim,
                    title=source == "title",
                    volume=bool(key.spec and key.spec.dimension and "volume" in key.spec.dimension),
                )
                if qs:
                    ok = gold.constraint.admits_product(qs, per_item=not is_amount(key))
                    return Evidence(ok if want else not ok, source, f"{source} states {qs[0].text!r}")
            return _unknown(want, "no quantity of this kind stated", "not_stated")
        if vocab is not None and gold.concepts and not gold.partial:
            group = self._avoids_group(key, pref)
            for source, text in fields:
                found = vocab.find(text, prose=True)
                if not found:
                    continue
                names = ", ".join(dict.fromkeys(found))
                if want:
                    has = all(any(vocab.is_a(c, g) for c in found) for g in gold.concepts)
                    return Evidence(has, source, f"{source} mentions {names}")
                has = any(vocab.has(c, g) for c in found for g in gold.concepts)
                if has or (source == "title" and not group):
                    return Evidence(not has, source, f"{source} mentions {names}")
            if not want:
                # another property's field naming the avoided value ("colour: White frosted glass"
                # for an avoided glass): the page may state it, not as this property
                for k, v in product.attributes.items():
                    if any(vocab.has(c, g) for c in vocab.find(str(v), prose=True) for g in gold.concepts):
                        return Evidence(
                            True, "attribute", f"attribute {k}={v!r} mentions it", False, "field_text_conflict"
                        )
                if group:
                    return Evidence(True, "none", "no member of the group is named", False, "not_stated")
            return _unknown(want, "no field or text states it", "not_stated")
        # free-text key: the gold phrase itself, not negated ("latex-free", "no latex" do not state latex)
        if want:
            free, rest = split_negation(pref.value)
            if free:
                return self._free_of(key, rest, fields, vocab is not None)
        negated = None
        parts = listed_names(pref.value)
        head = purpose_head(pref.value)
        for source, text in fields:
            said = phrase_occurs(pref.value, text)
            value = pref.value
            if said is None and parts:
                # "SLS / sulphate": a list of names of one thing, stated by any of them
                found = [phrase_occurs(p, text) for p in parts]
                said = True if True in found else (False if False in found else None)
            if said is None and head is not None and phrase_occurs(head, text):
                # "grippy outsole for wet ground": the page states the feature; the purpose is the shopper's
                said, value = True, head
            if said:
                ev = Evidence(want, source, f"{source} mentions {value!r}")
                if not key.known and source in ("description", "features") and not _named_outright(value, text):
                    # an unknown property's value somewhere in prose ("blue" in "black or blue ink
                    # versions"): what the prose says it of is not explicit unless it is a phrase
                    # of its own (below)
                    return _unsure(ev, key)
                if _only_in_slash_pairs(pref.value, text):
                    # "Blue/Black": a two-tone, an assortment or a choice — not the value alone
                    return Evidence(
                        want,
                        source,
                        f"{source} names {pref.value!r} only beside another",
                        False,
                        _unread_reason(key, vocab is not None),
                    )
                return ev
            if said is False and negated is None:
                negated = source
        if negated is not None:
            return Evidence(not want, negated, f"{negated} states it is free of {pref.value!r}")
        return _unknown(want, "no field or text states it", _unread_reason(key, vocab is not None))

    def _parts_counted(self, key: ResolvedKey, gold: Value, fields: list[tuple[str, str]]) -> Evidence | None:
        """How many of a part a page states, for a wish on the number of that part ("number of
        wheels: 4", "USB ports: at least 2"): a number right before the key's part noun ("2 USB
        Ports", "four wheels", "4-drawer") in the first of the title, features and description that
        states one; counts there that disagree leave it uncertain. None when the key names no part,
        the wish is no count or the page states none."""
        part = counted_part(key.name)
        if not part:
            return None
        c = gold.constraint
        n = tokens(gold.text)
        if len(n) == 1 and n[0].isdigit():
            c = Constraint("=", float(n[0]), None, "", gold.text)
        elif c is None or c.dim != "" or c.op == "=":
            return None
        L = len(part)
        for source, text in fields:
            if source in ("options", "category"):
                continue
            t = tokens(text)
            at = [i for i in range(len(t) - L) if t[i].isdigit() and t[i + 1 : i + 1 + L] == part]
            counts = {float(t[i]) for i in at}
            if any(i + 1 + L < len(t) and t[i + 1 + L] in ("each", "per") for i in at):
                # "3 pockets each": a count per item of a set, not the wish's count stated
                detail = f"{source} states {', '.join(f'{n:g}' for n in sorted(counts))} {' '.join(part)} per item"
                return Evidence(False, source, detail, False, _unread_reason(key, False))
            if not counts:
                # a count with modifiers before the part's noun, in one sentence
                for sentence in split_sentences(text):
                    w = _words(sentence)
                    for i in range(1, len(w) - L + 1):
                        if w[i : i + L] == part and (n := _count_before(w, i)) is not None:
                            counts.add(n)
            if counts:
                ok = {c.admits(Quantity(n, "")) for n in counts}
                detail = f"{source} states {', '.join(f'{n:g}' for n in sorted(counts))} {' '.join(part)}"
                if len(ok) > 1:
                    return Evidence(False, source, detail, False, "field_text_conflict")
                return Evidence(ok.pop(), source, detail)
        return None

    def _free_of(self, key: ResolvedKey, rest: str, fields: list[tuple[str, str]], has_vocab: bool) -> Evidence:
        """A wish written as an absence ("latex-free", "SLS / sulphate-free", "no glass") on a key
        without a vocabulary: met when the page says so ("Latex Free", "SLS & Paraben Free", "free
        from SLS"); not met when the title names the thing without a negation (uncertain when only
        the prose does, or the page says both); unknown otherwise (a wish, so not met)."""
        names = listed_names(rest) or (rest,)
        free = present = None
        for source, text in fields:
            if source in ("options", "category"):
                continue
            found = [phrase_occurs(n, text) for n in names]
            if False in found and free is None:
                free = source
            if True in found and present is None:
                present = source
        if free is not None and present is None:
            return Evidence(True, free, f"{free} states it is free of {rest!r}")
        if present is not None:
            ev = Evidence(False, present, f"{present} mentions {rest!r}")
            return ev if present == "title" and free is None else _unsure(ev, key)
        return _unknown(True, "no field or text states it", _unread_reason(key, has_vocab))

    def _quantities_for(self, key: ResolvedKey, text: str, dim: str, *, title: bool, volume: bool = False) -> list:
        qs = [q for q in parse_quantities(text, None, volume) if q.dim == dim]
        if not qs:
            return []
        words = tokens(key.name) if key.name else ()
        if words:
            t = text.lower()
            near = []
            for q in qs:
                i = t.find(q.text)
                window = t[max(0, i - 30) : i + len(q.text) + 20] if i >= 0 else ""
                if any(w[:4] in window for w in words if len(w) >= 3) or re.search(
                    r"\b(wide|high|tall|deep|long)\b", window
                ):
                    near.append(q)
            if near:
                return near
        if title and dim != "[length]":
            return qs  # pack sizes, capacities, weights in a title describe the product
        if title and len(qs) == 1:
            return qs
        return []

    def satisfies(self, product: Product, pref: Preference) -> bool:
        return self.check(product, pref).satisfied

    # ------------------------------------------------------------------ product type (q2)
    @property
    def types(self) -> Vocabulary:
        return self.m.lexicon.product_types

    def title_type(self, product: Product) -> str | None:
        """The product type its title names (the last type noun before *for*/*with* of the first
        `` - ``-separated part naming one), or None."""
        found = _title_types(self.types, product.title, product.brand)
        return found[-1] if found else None

    def slot_type(self, slot: ProductSlot) -> str | None:
        head = _TITLE_HEAD_SPLIT.split(slot.product_type, maxsplit=1)[0]
        words = [t for t in tokens(head) if t not in _TYPE_FILLER]
        found = self.types.find(" ".join(words))
        if found:
            return found[-1]
        if slot.category_path:
            cat = self.types.find(_COMPOUND_CAT.split(slot.category_path[-1])[0])
            if cat:
                return cat[-1]
        return None

    def is_relevant(self, product: Product, slot: ProductSlot) -> bool:
        """The product is the kind of product the slot asks for (module docstring)."""
        return self.relevance(product, slot)[0]

    def relevance(self, product: Product, slot: ProductSlot) -> tuple[bool, str | None]:
        """``(relevant, reason)``: :meth:`is_relevant` and why it is not explicit (None when it is):
        ``adjacent_type`` — the title's type is a broader one than the slot's outside the slot's
        category, or only the category names a type, of the slot type's family; ``unknown_type`` —
        the slot or the product names no type the type vocabulary knows (decided by a compound
        category or by title words)."""
        v = self.types
        same_cat = bool(
            slot.category_path
            and product.category_path
            and phrase(product.category)
            and phrase(product.category) == phrase(slot.category_path[-1])
        )
        parts = [p for p in _COMPOUND_CAT.split(product.category) if p.strip()]
        compound = len(parts) > 1
        cat_types = [t for p in parts for t in v.find(p, prose=True)[-1:]]
        want = self.slot_type(slot)
        names_want = want is not None and any(v.is_a(c, want) for c in cat_types)
        found = _title_types(v, product.title, product.brand)
        have = found[-1] if found else None
        if want is not None and have is not None:
            if v.is_a(have, want):
                return True, None
            if same_cat and any(v.is_a(t, want) for t in found):
                return True, None  # a title naming several types ("… Bottle, Euro Dropper Cap") in the slot's category
            if v.is_a(want, have):
                # a broader title type ("shoe" for casual shoe): the slot's own category settles it
                return same_cat, None if same_cat else "adjacent_type"
            # another type of the same family filed by the retailer under the slot's own single-type
            # category (Myntra's "Flip Flops" holding "Women Slippers"): the retailer's filing decides
            return same_cat and not compound and names_want and _siblings(v, have, want), None
        if want is not None and cat_types:
            if names_want:
                return (same_cat or not compound), None if (same_cat or not compound) else "unknown_type"
            return False, "adjacent_type" if any(_siblings(v, c, want) for c in cat_types) else None
        if want is None and same_cat and not compound:
            return True, None
        words = {t for t in tokens(slot.product_type) if t not in _TYPE_FILLER}
        return bool(words) and words <= set(tokens(product.title)), "unknown_type"


def _siblings(v: Vocabulary, a: str, b: str) -> bool:
    """``a`` and ``b`` share a direct broader type (slippers and flip flops are both footwear)."""
    ca, cb = v.concepts.get(a), v.concepts.get(b)
    return bool(ca and cb and set(ca.broader) & set(cb.broader))


_TITLE_PARTS = re.compile(r"\s+[-–|]\s+")


def _title_types(vocab: Vocabulary, title: str, brand: str | None = None) -> tuple[str, ...]:
    """Product types named by the first part of the title that names any (parts split at `` - ``;
    in each part only the words before *for* / *with*), the brand's own words left out ("Toner
    Kingdom … Toner Cartridges" is a cartridge)."""
    title = title or ""
    if brand and brand.strip() and len(brand) < len(title):
        title = re.sub(re.escape(brand.strip()), " ", title, count=1, flags=re.IGNORECASE)
    for part in _TITLE_PARTS.split(title):
        head = _TITLE_HEAD_SPLIT.split(part, maxsplit=1)[0]
        found = vocab.find(head, prose=True)
        if found:
            return found
    return vocab.find(title, prose=True)


def _only_in_slash_pairs(value: str, text: str) -> bool:
    """Every occurrence of ``value`` in ``text`` is joined by a slash to another word ("Blue/Black",
    "Black / Blue"); False when ``value`` does not occur as written."""
    words = value.split()
    if not words:
        return False
    pat = re.compile(r"(?<!\w)" + r"[\s_-]+".join(map(re.escape, words)) + r"(?!\w)", re.IGNORECASE)
    seen = False
    for m in pat.finditer(text):
        seen = True
        if not (text[: m.start()].rstrip().endswith("/") or text[m.end() :].lstrip().startswith("/")):
            return False
    return seen


#: words after a number that make it a measure, not a count of the part that follows ("360
#: degree wheels", "15 inch laptop sleeve")
_MEASURE_WORDS = frozenset(UNIT_ALIASES) | {"degree", "x", "by", "percent", "pct", "year", "month", "day", "hour"}
#: at most this many words between a count and its part ("four corner mounted inline skate wheels")
_COUNT_GAP = 4


def _names_part(key: ResolvedKey) -> bool:
    """``key`` names a part that can be counted ("number of wheels", "USB ports")."""
    return bool(counted_part(key.name))


def _counts_parts(key: ResolvedKey) -> bool:
    """A bare number of ``key`` counts a part: the key is unknown ("shelves"), or known with no unit
    and no dimension but a count ("pockets", "number of pockets"), not a measure ("screen size")."""
    if not key.known:
        return True
    spec = key.spec
    return spec is not None and spec.unit is None and spec.dimension in (None, ("dimensionless",))


def _is_count(value: str) -> bool:
    """``value`` is a bare whole number ("4", "four")."""
    t = tokens(value)
    return len(t) == 1 and t[0].isdigit()


def _words(sentence: str) -> tuple[str, ...]:
    """The words of ``sentence`` normalised one by one like :func:`tokens` ("Wheels" → "wheel",
    "four" → "4"), stop words kept as they are: they end a count's modifiers (below)."""
    out: list[str] = []
    for w in re.findall(r"[A-Za-z]+|\d+(?:\.\d+)?", sentence.lower()):
        t = tokens(w)
        out.append(t[0] if len(t) == 1 else w)
    return tuple(out)


def _count_before(w: tuple[str, ...], i: int) -> float | None:
    """The count of the part whose noun starts at word ``i`` of :func:`_words`: the nearest number
    at most :data:`_COUNT_GAP` words before it, none of the words between a stop word ("3 bags
    with wheels" counts no wheels) or a number, the number no measure (:data:`_MEASURE_WORDS` after
    it: "4 corner mounted 360 degree wheels" → 4); None when there is none."""
    for j in range(i - 1, max(-1, i - 2 - _COUNT_GAP), -1):
        if w[j] in STOP_WORDS:
            return None
        if w[j].replace(".", "", 1).isdigit():
            if j + 1 < i and w[j + 1] in _MEASURE_WORDS:
                continue
            return float(w[j]) if w[j].isdigit() else None
    return None


def _named_outright(value: str, text: str) -> bool:
    """``value`` is a phrase of two or more words ("hard-sided", "TSA lock", "card slot") that
    ``text`` states, not negated, somewhere outside a choice: not joined by ``/`` or *or* to
    another word ("black or blue ink", "Blue/Black"). A single word ("blue", "4") is never named
    outright in prose: what the prose says it of is not explicit."""
    words = tokens(value)
    if len(words) < 2 or phrase_occurs(value, text) is not True:
        return False
    raw = value.split()
    pat = re.compile(r"(?<!\w)" + r"[\s_-]+".join(map(re.escape, raw)) + r"(?!\w)", re.IGNORECASE)
    for m in pat.finditer(text):
        before, after = text[: m.start()].rstrip(), text[m.end() :].lstrip()
        if before.endswith("/") or after.startswith("/"):
            continue
        if re.search(r"\bor$", before, re.IGNORECASE) or re.match(r"or\b", after, re.IGNORECASE):
            continue
        return True
    return False


def _unknown(want: bool, detail: str, reason: str) -> Evidence:
    """Nothing settles the preference: a want is not satisfied, uncertainly (``reason``: the text
    may say it in words the reader does not know); an avoid is satisfied by the page's word — our
    documented convention, confident."""
    return Evidence(False, "none", detail, False, reason) if want else Evidence(True, "none", detail)


def _unsure(ev: Evidence, key: ResolvedKey) -> Evidence:
    """``ev`` made uncertain: a value of ``key`` the lexicon could not read."""
    return Evidence(ev.satisfied, ev.source, ev.detail, False, _unread_reason(key))


def _unread_reason(key: ResolvedKey, has_vocabulary: bool = True) -> str:
    """Why a value of ``key`` could not be read explicitly: the key is unknown, or the value is
    outside its vocabulary; a known key without a vocabulary whose value is not found: not stated."""
    if not key.known:
        return "unknown_key"
    return "value_outside_vocabulary" if has_vocabulary else "not_stated"


@functools.cache
def default_reader() -> ProductReader:
    """The process-wide reader over :func:`~shopping_companion.judges.matching.values.default_matcher`
    (built on first use)."""
    return ProductReader()
