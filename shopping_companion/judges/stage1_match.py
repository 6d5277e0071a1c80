"""Stage 1 of the rule judge: matching identified preferences to the gold ones and finding the
spurious ones (the rules are in :mod:`shopping_companion.judges.rule`'s docstring and
``docs/judge.md``). :func:`match_preferences` is the one-to-one (slot, attribute, value,
polarity) matching; :func:`structural_spurious` the checks that need no judgement of meaning."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from shopping_companion.judges.assignment import max_matching
from shopping_companion.judges.matching import ResolvedKey, ValueMatcher, default_matcher
from shopping_companion.judges.matching.lexicon import counted_part
from shopping_companion.judges.matching.normalize import padded, tokens
from shopping_companion.judges.matching.quantity import parse_constraint
from shopping_companion.judges.matching.values import split_gloss, split_negation, yes_no
from shopping_companion.sentences import ends_sentence, split_sentences
from shopping_companion.types import Preference, ProductSlot, Task


__all__ = ["MAX_VALUE_WORDS", "Stage1Match", "match_identified", "match_preferences", "structural_spurious"]

#: An identified "value" with more words than this, or with sentence punctuation, is not an
#: attribute value (e.g. a quoted sentence of the user).
MAX_VALUE_WORDS = 6


#: A value opening with a person as subject and two more words ("I swim lengths three mornings a
#: week", "my nani swore by it"): a quoted chat clause, not an attribute value.
_CLAUSE = re.compile(
    r"(?i)^(?:i|i'm|i've|i'd|i'll|we|we're|we've|we'd|she|she's|he|he's|they|they're|they've|you|you're|my|our)"
    r"(?=[\s,])(?:[\s,]+[\w'’-]+){2,}"
)


#: Dimensions (keys.yaml names → pint's) a product has one property of: a quantity of one, under an
#: answer key that cannot hold it, names the request's attribute of that dimension.
_ONE_PROPERTY_DIMS = {"volume": "[length] ** 3", "mass": "[mass]", "information": "[information]"}


#: A user turn about another person's wish ("My husband wants …", "Dad needs …", "my brother is
#: after …"): a value said there may be that person's, not the user's.
_OTHER_PERSON = re.compile(
    r"\b(?:husband|wife|son|daughter|brother|sister|dad|daddy|father|mum|mom|mother|parents?|"
    r"grand(?:ma|pa|mother|father|son|daughter)|uncle|aunt|cousin|nephew|niece|friend|colleague|"
    r"co-?worker|boss|partner|boyfriend|girlfriend|fianc[eé]e?|flatmate|roommate|housemate|neighbou?r|"
    r"kids?|child|children)s?\s+(?:\w+\s+){0,2}?(?:wants?|needs?|is after|are after|is looking|are looking|"
    r"likes?|loves?|prefers?|asked for|would like)\b",
    re.IGNORECASE,
)


@dataclass
class Stage1Match:
    """The stage-1 comparison of identified with gold preferences.

    ``matches[i]``: index of the identified preference matched to gold preference ``i`` (or None).
    ``spurious``: ``(identified index, reason)`` for every spurious identified preference (h1).
    ``extras``: indices of unmatched, harmless identified preferences. ``slots_hit``: slots with at
    least one matched gold preference (c1). Where a decision rests on no explicit evidence
    (docs/judge.md, "Selective verdicts"): ``unsure_gold`` maps a gold index to the reason its match
    (by the embedding fallback) or its miss (an answer preference may state it in other words:
    ``candidates`` lists those) is uncertain; ``unsure_answer`` maps an unmatched identified index
    to the reason its spurious-or-harmless decision is uncertain.
    """

    matches: list[int | None]
    spurious: list[tuple[int, str]] = field(default_factory=list)
    extras: list[int] = field(default_factory=list)
    slots_hit: set[int] = field(default_factory=set)
    unsure_gold: dict[int, str] = field(default_factory=dict)
    candidates: dict[int, list[int]] = field(default_factory=dict)
    unsure_answer: dict[int, str] = field(default_factory=dict)

    @property
    def m1(self) -> int:
        return sum(j is not None for j in self.matches)

    @property
    def h1(self) -> int:
        return len(self.spurious)


def _is_attribute_value(value: str) -> bool:
    """A short value, one sentence at most, not closing one, no clause of a person (:data:`_CLAUSE`):
    "U.S. Polo Assn.", "Dr. Martens" are values; "Nice. Good.", "Love it!", "I swim daily" are not."""
    v = value.strip()
    short = len(tokens(v)) <= MAX_VALUE_WORDS and len(split_sentences(v, semicolons=True)) <= 1
    return short and not ends_sentence(v) and not _CLAUSE.match(v.replace("’", "'"))


def _uncertain_misses(
    out: Stage1Match,
    gold: list[Preference],
    identified: list[Preference],
    owner: dict[int, int],
    slot: Callable[[Preference], int],
    eq3: Callable[[int, int], tuple[bool, str | None]],
) -> None:
    """Mark in ``out`` each missed gold preference that an unmatched, not confidently spurious answer
    of its slot may state (``eq3`` gives a doubt): ``unsure_gold`` and ``candidates``."""
    # a gold preference missed while an answer preference the lexicon could not compare with it
    # (an unknown key, a value outside the vocabulary) may state it: an uncertain miss
    confident_spurious = {j for j, _ in out.spurious if j not in out.unsure_answer}
    open_answers = [(j, slot(q)) for j, q in enumerate(identified) if j not in owner and j not in confident_spurious]
    for i, g in enumerate(gold):
        if out.matches[i] is not None or not open_answers:
            continue
        cands = []
        gs = slot(g)
        for j, qs in open_answers:
            if qs != gs:
                continue
            doubt = eq3(i, j)[1]
            if doubt is not None:
                cands.append(j)
                out.unsure_gold.setdefault(i, doubt)
        if cands:
            out.candidates[i] = cands


def _names_one_quantity(
    m: ValueMatcher, gold: list[Preference], gkeys: list[ResolvedKey], i: int, value: str, single: bool
) -> bool:
    """``value`` is a quantity of a dimension that names one property (a volume, a mass, a
    storage size) and gold preference ``i`` (of ``gold``, keys ``gkeys``) is the only one of its
    slot on a quantity key of that dimension (every preference is slot 0 when ``single``)."""
    spec = gkeys[i].spec
    if spec is None or spec.kind != "quantity":
        return False
    c = m.parse(gkeys[i], value).constraint
    if c is None:
        return False
    dim = next((d for d in spec.dimension or () if _ONE_PROPERTY_DIMS.get(d) == c.dim), None)
    if dim is None:
        return False
    return not any(
        k != i
        and (single or gold[k].slot == gold[i].slot)
        and gkeys[k].spec is not None
        and gkeys[k].spec.kind == "quantity"
        and dim in (gkeys[k].spec.dimension or ())
        for k in range(len(gold))
    )


def _same_dimension_narrower_key(
    m: ValueMatcher, gk: ResolvedKey, gold_value: str, qk: ResolvedKey, value: str
) -> bool:
    """The answer key ``qk`` names the gold key ``gk`` and more ("cable length" for "length") and
    both values are quantities of one dimension: whether it is the same property is not explicit."""
    g_words, q_words = set(tokens(gk.name)), set(tokens(qk.name))
    if not g_words or not g_words < q_words:
        return False
    a, b = m.parse(gk, gold_value).constraint, m.parse(qk, value).constraint
    return a is not None and b is not None and a.dim == b.dim


def _compat(
    m: ValueMatcher, gold: list[Preference], gkeys: list[ResolvedKey], qk: ResolvedKey, value: str, i: int, single: bool
) -> tuple[bool, str | None]:
    """(same attribute, doubt): doubt ``unknown_key`` when a key the lexicon does not know
    keeps the answer (key ``qk``, ``value``) from being read as a value of gold preference ``i``."""
    gk = gkeys[i]
    if gk.same_key(qk):
        return True, None
    vocab = m.vocab_for(gk)
    if qk.known:
        own = m.vocab_for(qk)
        if (
            qk.kind != "quantity"
            and not (own is not None and own.find(value))
            and _names_one_quantity(m, gold, gkeys, i, value, single)
        ):
            return True, None  # "size: max 0.5 oz" for capacity: the unit names the property
        if _same_dimension_narrower_key(m, gk, gold[i].value, qk, value):
            return False, "unknown_key"  # "cable length: 6.5 ft or longer" for length: perhaps the same
        if (
            vocab is not None
            and (vocab.lookup(value) is not None or vocab.find(value))
            and (own is None or not own.find(value))
        ):
            # "finish: white", "strap: non-leather" for strap material, "type: loafers / slip-ons"
            # for fastening: a value its own key cannot hold (or has no vocabulary to say) that
            # names one of the gold's concepts — a misnamed attribute or another property: not for
            # the rules to say
            return False, "value_outside_vocabulary"
        return False, None if gk.known else "unknown_key"
    if vocab is not None:
        if vocab.lookup(value) is not None or ("(" in value and vocab.lookup(split_gloss(value)[0]) is not None):
            return True, None  # "upper: suede (brushed leather)" for material: the value names the key
        if not vocab.find(value) and m.names_other_property(gk, value):
            return False, None  # exactly a value of another vocabulary or another dimension
    if _counts_one_part(m, gk, gold[i].value, qk, value):
        return True, None  # "drawers: four" for "number of drawers: 4"
    return False, "unknown_key"


def _counts_one_part(m: ValueMatcher, gk: ResolvedKey, gold_value: str, qk: ResolvedKey, value: str) -> bool:
    """Both keys count one part, named with or without count words ("drawers", "number of
    drawers", "drawer count"), and both values are counts: the same attribute."""
    if gk.known or qk.known:
        return False
    part = counted_part(gk.name)
    if not part or part != counted_part(qk.name):
        return False
    a, b = parse_constraint(gold_value), parse_constraint(value)
    return a is not None and b is not None and a.dim == "" and b.dim == ""


#: first words of an attribute name that are a bound on it ("max width: 32 in")
_KEY_BOUNDS = {"max": "at most", "maximum": "at most", "min": "at least", "minimum": "at least"}


def _bound_from_key(m: ValueMatcher, q: Preference) -> Preference:
    """A bound written in the attribute's name read into its value: "max width: 32 in" is "width:
    at most 32 in" (a quantity key the lexicon knows, a value with no bound of its own)."""
    first, _, rest = q.attribute.strip().partition(" ")
    bound = _KEY_BOUNDS.get(first.lower().rstrip("."))
    if bound is None or not rest.strip():
        return q
    k = m.key(rest)
    if not k.known or k.kind != "quantity":
        return q
    c = m.parse(k, q.value).constraint
    if c is None or not c.dim:
        return q
    value = q.value if c.op != "=" else f"{bound} {q.value}"
    return q.model_copy(update={"attribute": rest.strip(), "value": value})


def match_preferences(
    task: Task,
    identified: list[Preference],
    matcher: ValueMatcher | None = None,
    grounded: Callable[[Preference], bool | None] | None = None,
) -> Stage1Match:
    """Compare ``identified`` with ``task.preferences`` (module docstring, stage 1), marking the
    decisions that rest on no explicit evidence (:class:`Stage1Match`).

    ``grounded(q)`` says whether a user turn of the history states ``q`` (None: not explicitly,
    so ``q`` is an uncertain extra); without it the grounding rule is not applied (the other
    precision rules still are).
    """
    m = matcher or default_matcher()
    N = task.n_products
    single = N == 1
    gold = [_bound_from_key(m, _denegate(m, g)) for g in task.preferences]
    identified = [_bound_from_key(m, _denegate(m, q)) for q in identified]

    def slot(p: Preference) -> int:
        return 0 if single else p.slot

    gkeys = [m.key(g.attribute) for g in gold]
    ikeys = [m.key(q.attribute) for q in identified]

    eq_cache: dict[tuple[int, int], tuple[bool, str | None]] = {}

    def eq3(i: int, j: int) -> tuple[bool, str | None]:
        """(equal, doubt): doubt ``value_outside_vocabulary`` when the lexicon could not read the
        values and only words or embeddings compared them."""
        k = (i, j)
        hit = eq_cache.get(k)
        if hit is None:
            ok, doubt = _compat(m, gold, gkeys, ikeys[j], identified[j].value, i, single)
            if ok:
                d = m.compare(gkeys[i], gold[i].value, identified[j].value)
                hit = (d.holds, None if d.explicit else "value_outside_vocabulary")
            else:
                hit = (False, doubt)
            eq_cache[k] = hit
        return hit

    def eq(i: int, j: int) -> bool:
        return eq3(i, j)[0]

    adj: list[list[int]] = []
    for i, g in enumerate(gold):
        adj.append(
            [j for j, q in enumerate(identified) if slot(q) == slot(g) and q.polarity == g.polarity and eq(i, j)]
        )
    owner = max_matching(adj)
    matches: list[int | None] = [None] * len(gold)
    for j, i in owner.items():
        matches[i] = j
    out = Stage1Match(matches=matches, slots_hit={slot(gold[i]) for i, j in enumerate(matches) if j is not None})
    for j, i in owner.items():
        doubt = eq3(i, j)[1]
        if doubt is not None:
            out.unsure_gold[i] = doubt  # matched by the embedding fallback only

    gold_keys = {(slot(g), i) for i, g in enumerate(gold)}
    dont_care_keys = [(slot(d), m.key(d.attribute)) for d in task.dont_care]
    for j, q in enumerate(identified):
        if j in owner:
            continue
        qk = ikeys[j]
        reason = None
        doubt = None
        if not single and not 0 <= q.slot < N:
            reason = f"names product {q.slot + 1} but the request has {N}"
        elif not _is_attribute_value(q.value):
            reason = "is not an attribute value (a sentence or a long quote)"
        elif (
            other := next(
                (i for i, g in enumerate(gold) if slot(g) != slot(q) and g.polarity == q.polarity and eq(i, j)), None
            )
        ) is not None:
            reason = "belongs to another product of the request"
            doubt = eq3(other, j)[1]
        elif (
            same := next(
                (
                    i
                    for s, i in sorted(gold_keys)
                    if s == slot(q)
                    and (gkeys[i].same_key(qk) or (not qk.known and _compat(m, gold, gkeys, qk, q.value, i, single)[0]))
                    and (
                        q.polarity == "want"
                        or gold[i].polarity == "avoid"
                        or m.equivalent(gkeys[i], gold[i].value, q.value)
                    )
                ),
                None,
            )
        ) is not None:
            # a second wanted value, a wrong value, or avoiding what the user wants; an avoid next to
            # a wanted value ("glass, not plastic") is left to the grounding rule
            reason = "is a wrong or extra value on an attribute the user has a preference about"
            doubt = eq3(same, j)[1]
        elif (contra := _contradicts(m, identified, ikeys, j, slot)) is not None:
            reason = "contradicts another identified preference"
            doubt = contra or None
        elif any(s == slot(q) and dk.same_key(qk) for s, dk in dont_care_keys):
            reason = "is on an attribute the user does not care about"
        elif grounded is not None and (said := grounded(q)) is not True:
            if said is None:
                doubt = "indirect_statement"  # said only where another person's wishes are spoken of
            else:
                reason = "is stated in no user turn of the history"
                if not m.readable(m.reading_key(qk, q.value), q.value):
                    doubt = "indirect_statement"  # the user may have said it in words the lexicon does not read
                elif not qk.known and any(
                    slot(g) == slot(q) and g.polarity == q.polarity and m.equivalent(gkeys[i], g.value, q.value)
                    for i, g in enumerate(gold)
                ):
                    # a gold value under a name the lexicon does not know ("charging: light-powered")
                    doubt = "unknown_key"
        if reason is None:
            out.extras.append(j)
            if doubt is not None:
                out.unsure_answer[j] = doubt
        else:
            out.spurious.append((j, reason))
            if doubt is not None:
                out.unsure_answer[j] = doubt

    _uncertain_misses(out, gold, identified, owner, slot, eq3)
    return out


def _denegate(m: ValueMatcher, q: Preference) -> Preference:
    """Polarity written inside a value, read out of it (docs/judge.md, stage 1):

    - a bare yes / no names the attribute itself: want ``glass: no`` is avoid glass, want
      ``waterproof: yes`` is want waterproof (and the avoid is read on by the last rule: want
      ``laces: none`` is avoid laces, i.e. want "no laces");
    - a value written as its own negation flips the polarity: want "not navy" is avoid navy —
      unless the whole value is a vocabulary form of its own ("no print" is a solid pattern);
    - avoiding a thing whose absence a vocabulary names is wanting that concept: avoid laces is
      want "no laces" (slip-on), avoid sugar is want "no sugar" (sugar free).

    Applied alike to gold and answer preferences, so the readings agree."""
    flip = "avoid" if q.polarity == "want" else "want"
    yn = yes_no(q.value)
    if yn is not None and tokens(q.attribute):
        q = q.model_copy(update={"value": q.attribute, "polarity": q.polarity if yn else flip})
        if q.polarity == "want":
            return q
        negated, rest = False, q.value  # "laces: none" is avoid laces, read on as an absence below
    else:
        negated, rest = split_negation(q.value)
    key = m.key(q.attribute)
    vocab = m.vocab_for(key)
    if negated and not (vocab is not None and vocab.lookup(q.value) is not None):
        q = q.model_copy(update={"value": rest, "polarity": flip})
    if q.polarity == "avoid" and len(tokens(q.value)) <= 3:
        absent = _absence_concept(
            m, vocab if vocab is not None else m.vocab_for(m.reading_key(key, f"no {q.value}")), q.value
        )
        if absent is not None:
            return q.model_copy(update={"value": absent, "polarity": "want"})
    return q


def _absence_concept(m: ValueMatcher, vocab, value: str) -> str | None:
    """``"no <form>"`` when ``vocab`` names it as a concept, for ``value`` or any form of the
    concept ``value`` names ("Printed" → "no prints", a solid pattern); else None."""
    if vocab is None:
        return None
    forms = [value]
    c = vocab.lookup(value)
    if c is not None:
        forms += list(vocab.concepts[c].forms)
    for f in forms:
        if vocab.lookup(f"no {f}") is not None:
            return f"no {f}"
    return None


def _contradicts(
    m: ValueMatcher, identified: list[Preference], keys: list, j: int, slot: Callable[[Preference], int]
) -> str | None:
    """None when ``identified[j]`` contradicts no other identified preference; otherwise the
    doubt of that decision ("" when explicit, ``value_outside_vocabulary`` when the two values were
    compared by words or embeddings only)."""
    q, qk = identified[j], keys[j]
    for k, o in enumerate(identified):
        if k == j or slot(o) != slot(q) or not keys[k].same_key(qk):
            continue
        d = m.compare(qk, q.value, o.value)
        doubt = "" if d.explicit else "value_outside_vocabulary"
        if d.holds and o.polarity != q.polarity:
            return doubt
        single_valued = qk.spec is not None and not qk.spec.multi_valued  # unknown keys: not judged
        if not d.holds and q.polarity == o.polarity == "want" and single_valued:
            return doubt
    return None


def structural_spurious(
    task: Task, identified: list[Preference], matcher: ValueMatcher | None = None
) -> list[tuple[Preference, str]]:
    """The spurious identified preferences that need no judgement of meaning (the LLM judge's
    post-check): a product slot that does not exist; a sentence instead of a value; wanting and
    avoiding the same value; more *want* values on one (slot, attribute) than the annotation has
    (the extras beyond that count, in answer order)."""
    m = matcher or default_matcher()
    N = task.n_products
    single = N == 1
    out: list[tuple[Preference, str]] = []
    gold_count: dict[tuple[int, str], int] = {}
    for g in task.preferences:
        if g.polarity == "want":
            k = (0 if single else g.slot, m.key(g.attribute).name)
            gold_count[k] = gold_count.get(k, 0) + 1
    seen: dict[tuple[int, str], int] = {}
    wants = {
        (0 if single else q.slot, m.key(q.attribute).name, padded(q.value)) for q in identified if q.polarity == "want"
    }
    for q in identified:
        s = 0 if single else q.slot
        name = m.key(q.attribute).name
        if not single and not 0 <= q.slot < N:
            out.append((q, f"names product {q.slot + 1} but the request has {N}"))
        elif not _is_attribute_value(q.value):
            out.append((q, "is not an attribute value (a sentence or a long quote)"))
        elif q.polarity == "avoid" and (s, name, padded(q.value)) in wants:
            out.append((q, "is both wanted and avoided"))
        elif q.polarity == "want":
            seen[(s, name)] = seen.get((s, name), 0) + 1
            if seen[(s, name)] > max(1, gold_count.get((s, name), 0)):
                out.append((q, f"is value #{seen[(s, name)]} on {q.attribute!r}, more than the user stated"))
    return out


def match_identified(
    gold: list[Preference],
    identified: list[Preference],
    n_products: int | None = None,
    matcher: ValueMatcher | None = None,
) -> list[int | None]:
    """For each gold preference, the index of the identified preference matched to it (or None):
    the stage-1 matching of :func:`match_preferences` (slot, attribute, value, polarity)."""
    n = n_products if n_products is not None else (max([g.slot for g in gold] + [0]) + 1)
    task = Task(
        task_id="_",
        instruction="",
        user_id="_",
        history=[],
        needle_session_ids=[],
        preferences=list(gold),
        slots=[ProductSlot(product_type="item", reference_product_id="_") for _ in range(max(1, n))],
    )
    return match_preferences(task, identified, matcher).matches
