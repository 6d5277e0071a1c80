"""The rule judge: deterministic, offline, free; the default judge of evaluation, SFT rejection
sampling and GRPO rewards.

It fills the same :class:`~shopping_companion.types.Verdict` fields as the paper's LLM judge
(Shopping Companion App. C.1) with rules a careful shopper would sign, every value comparison going
through the value-matching layer (:mod:`shopping_companion.judges.matching`). ``docs/judge.md`` is
the judge card: every field, every rule, every deviation from the paper.

Stage 1 — judged per (slot, attribute, value, polarity) (:func:`match_preferences`)
    A gold preference is matched by at most one identified preference (one-to-one, maximum
    bipartite matching) of the same slot (ignored for single-product tasks), a compatible
    attribute (same canonical key; an unknown key only when its value is a value of the gold
    key's vocabulary), an equivalent value (synonyms, families, units, joined forms) and the same
    polarity. ``m1`` counts matched gold preferences; ``c1`` counts slots with at least one matched
    preference. An unmatched identified preference is **spurious** (``h1``) when it names a slot
    that does not exist, is not an attribute value (a sentence), belongs to another product of
    the task, is a second value on an attribute the user has a preference about, contradicts
    another identified preference, is on an attribute the user does not care about, or is stated
    in no user turn of the history (semantic grounding, not verbatim words). Other unmatched
    preferences (grounded, on an attribute outside the request) are harmless extras.
    ``q1`` = 1 iff at least one preference is identified and none is spurious (the paper's "relevant
    to the request" plus our precision rule); success = ``m1 == F`` and ``h1 == 0``.
    R1 (Eq. 6, :func:`~shopping_companion.rewards.outcome.stage1_reward`) subtracts ``h1`` from
    ``m1``, so adding spurious preferences never raises it.

Stage 2 — read the product like a person (:class:`~shopping_companion.judges.matching.ProductReader`)
    ``p2``: exactly N distinct ids, all in the catalog, all returned by this trajectory's product
    tools. ``q2``: every assigned product is of the slot's product type. ``m2``: gold preferences
    satisfied by their slot's product (structured fields first, then title/text; unknown does not
    satisfy a want and does not violate an avoid). Add-on: ``n2`` slots fully satisfied by a
    relevant product, ``u2`` one shop, all priced, total − discount ≤ budget (discount when every
    product is in the voucher's shop and total ≥ min_spend). Success (Eq. 5) = p2 ∧ q2 ∧ m2 = F
    (∧ n2 = N ∧ u2 for add-on).

No answer: a stage that ended without a final answer is not read at all; it gets
:func:`~shopping_companion.judges.base.no_answer_verdict` (every score 0, success False, Acc 0), the
same verdict the LLM judge gives.

Selective verdicts: every decision above is a :class:`~shopping_companion.types.VerdictItem` of the
verdict, *confident* (explicit evidence) or *uncertain* with a reason (an unknown key, a value
outside the vocabularies, an indirect statement, nothing stated, a field/text conflict, an adjacent
or unknown type); the fields are computed from the items by
:mod:`~shopping_companion.judges.selective` under the judge's ``uncertain`` policy (default
``no_credit``: an uncertain item earns nothing). ``docs/judge.md``, "Selective verdicts".

Performance: values, keys, text mentions and product types are memoised (bounded caches); the
embedding fallback (optional, ``similarity=``) is called only for pairs the lexicon cannot
decide, and cached. ``benchmarks/bench_judge.py`` measures throughput.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Mapping

from shopping_companion.judges.base import no_answer_verdict
from shopping_companion.judges.matching import ProductReader, ValueMatcher, default_matcher, default_reader
from shopping_companion.judges.matching.normalize import padded, tokens
from shopping_companion.judges.matching.values import split_gloss
from shopping_companion.judges.selective import check_uncertain_policy, stage1_fields, stage2_fields
from shopping_companion.judges.stage1_match import (
    _OTHER_PERSON,
    Stage1Match,
    match_identified,
    match_preferences,
    structural_spurious,
)
from shopping_companion.envs.tools import PRODUCT_TOOLS
from shopping_companion.registry import JUDGES
from shopping_companion.types import Preference, Product, ProductSlot, Session, Task, Trajectory, Verdict, VerdictItem

__all__ = [
    "RuleJudge",
    "Stage1Match",
    "match_preferences",
    "structural_spurious",
    "normalize_tokens",
    "value_matches",
    "key_matches",
    "phrase_in",
    "match_identified",
    "product_satisfies",
    "is_relevant",
    "bundle_cost",
    "identified_preferences",
    "recommended_ids",
    "shown_product_ids",
]

#: Version of the rule judge's verdicts: bumped whenever the same task and trajectory can get a
#: different verdict (it is part of an evaluation's run identity, so results of two versions are
#: never mixed in one results file). 2: the value-matching layer and the spurious-preference count.
#: 3: a stage without a final answer gets the no-answer verdict (stage-1 success False, Acc 0).
#: 4: selective verdicts: every decision is an item, confident or uncertain; uncertain items earn
#: what the judge's ``uncertain`` policy says (default no_credit: nothing). 5: polarity inside a
#: value, glossed values, negated phrases in product text, field/text conflicts of avoids, food groups;
#: uncertain where the evidence is not explicit: a gloss that is another value, a value said only of
#: another person or only as a gloss, an avoided food group no member of which is named, a value named
#: only in an "X/Y" pair, a gold value under a misnamed or unknown answer key. 6: values with an
#: abbreviation's full stop ("U.S. Polo Assn.") are values; comparative bounds after the number ("2 m
#: or longer") and negated before it ("no shorter than"); one quantity in two units and a colour with
#: kinds of it ("purple / lilac") are no hedges; uncertain where not explicit: a unit the table does
#: not read ("10 bar"), a gold concept named under another known key; "laces: none" read as no laces.
#: 7: a negation carries over "and" / "or" ("SLS & Paraben Free"); a wish written as an absence
#: ("latex-free") is met by the page saying so; counts of a part ("2 USB Ports"); a gold value that
#: lists names of one thing is matched by one of them. 8: docs/judge.md's "Version 8" (bounds without
#: operator, feet, chat clauses, run-together text, prose phrases, purposes, counts, sizes, glosses).
#: 9: a product text denying the wish ("Not compatible with Xbox", "not suitable for …") is no
#: statement of it; inch and foot marks are units; a count of another thing ("Pack of 2", "3 pockets
#: each") is no count of the wished part.
RULE_JUDGE_VERSION = 9


# --------------------------------------------------------------------------- what a trajectory says


def identified_preferences(traj: Trajectory) -> tuple[list[Preference], str | None]:
    """The stage-1 preferences a trajectory identified: ``traj.identified_preferences`` when the
    environment filled it, else its final answer parsed by
    :func:`~shopping_companion.envs.parsing.parse_preferences`. Returns ``(preferences, reason)``:
    ``reason`` (for the verdict's reasons) is set when there was no answer (``[]``) or it did not
    parse (``[]``), else None."""
    if traj.identified_preferences is not None:
        return traj.identified_preferences, None
    if traj.final_answer is None:
        return [], f"the stage ended without an answer ({traj.termination})"
    from shopping_companion.envs.parsing import parse_preferences

    prefs, err = parse_preferences(traj.final_answer)
    return prefs, (f"answer not parsable as preferences: {err}" if err else None)


def recommended_ids(traj: Trajectory) -> list[str]:
    """The stage-2 recommendation, distinct ids in order: ``traj.recommended_ids``, else the
    ``@REC::id@`` markers of the final answer
    (:func:`~shopping_companion.envs.parsing.extract_rec_ids`)."""
    ids = list(dict.fromkeys(traj.recommended_ids))
    if not ids and traj.final_answer:
        from shopping_companion.envs.parsing import extract_rec_ids

        ids = extract_rec_ids(traj.final_answer)[0]
    return ids


def shown_product_ids(traj: Trajectory) -> set[str]:
    """Ids returned by the trajectory's successful product-tool calls (what the agent was shown;
    a recommended id outside this set is fabricated)."""
    return {i for r in traj.tool_results if r.name in PRODUCT_TOOLS and r.error is None for i in r.returned_ids}


def _item(
    kind: str, label: str, slot: int, ok: bool, reason: str | None, answer: list[int] | None = None, detail: str = ""
) -> VerdictItem:
    """A rule-decided :class:`VerdictItem` (confident iff ``reason`` is None)."""
    return {
        "kind": kind,  # type: ignore[typeddict-item]
        "label": label,
        "slot": slot,
        "ok": ok,
        "confident": reason is None,
        "reason": reason,  # type: ignore[typeddict-item]
        "decided_by": "rule",
        "answer": _answer(answer),
        "detail": detail,
    }


#: ``(j,)`` for the answer indexes of most items, made once: an item then holds only values the
#: garbage collector does not track (a fresh tuple would make every item dict a tracked container)
_ONE = tuple((j,) for j in range(256))


def _answer(answer: list[int] | None) -> tuple[int, ...]:
    if not answer:
        return ()
    if len(answer) == 1 and 0 <= answer[0] < len(_ONE):
        return _ONE[answer[0]]
    return tuple(answer)


# --------------------------------------------------------------------------- compatibility API


def normalize_tokens(text: str | None) -> tuple[str, ...]:
    """Normalised tokens of ``text`` (:func:`shopping_companion.judges.matching.tokens`)."""
    return tokens(text)


def phrase_in(gold: str, field: str | None) -> bool:
    """The normalised tokens of ``gold`` occur as a contiguous phrase in ``field`` (non-empty gold)."""
    if not gold or not field:
        return False
    g = padded(gold)
    return g.strip() != "" and g in padded(field)


def key_matches(a: str, b: str, matcher: ValueMatcher | None = None) -> bool:
    """Attribute names ``a`` and ``b`` name the same property (exact canonical-key resolution)."""
    m = matcher or default_matcher()
    return m.key(a).same_key(m.key(b))


def value_matches(
    gold: str, candidate: str | None, attribute: str | None = None, matcher: ValueMatcher | None = None
) -> bool:
    """A product value ``candidate`` meets the wanted ``gold`` value of ``attribute``."""
    if not gold or not candidate:
        return False
    m = matcher or default_matcher()
    return m.satisfies(m.key(attribute or ""), gold, candidate)


def product_satisfies(product: Product, pref: Preference, reader: ProductReader | None = None) -> bool:
    """Whether ``product`` satisfies the gold preference ``pref`` (module docstring, stage 2)."""
    return (reader or default_reader()).check(product, pref).satisfied


def is_relevant(product: Product, slot: ProductSlot, reader: ProductReader | None = None) -> bool:
    """The product is of the slot's product type (q2)."""
    return (reader or default_reader()).is_relevant(product, slot)


def bundle_cost(products: list[Product], task: Task) -> tuple[float | None, float, bool]:
    """``(total, discount, same_shop)`` for a bundle.

    ``total`` is the sum of prices (None if a price is unknown). The voucher's ``discount`` applies
    iff every product is in ``voucher.shop_id`` and ``total >= min_spend``.
    """
    shops = {p.shop_id for p in products}
    same_shop = len(shops) == 1
    if any(p.price is None for p in products):
        return None, 0.0, same_shop
    total = float(sum(p.price or 0.0 for p in products))
    v = task.voucher
    discount = 0.0
    if v is not None and products and shops == {v.shop_id} and total >= v.min_spend - 1e-9:
        discount = v.discount
    return total, discount, same_shop


# --------------------------------------------------------------------------- the judge


@JUDGES.register("rule")
class RuleJudge:
    """Deterministic judge (module docstring).

    Args:
        lookup: ``ids -> {id: Product}`` for the catalog records it knows (unknown ids absent); if
            it raises, the stage-2 verdict has ``failed=True`` (a judge failure is never a 0).
        sessions: session id → :class:`Session` (e.g. the benchmark's sessions): enables the
            grounding rule of stage 1 (identified preferences must be stated in a user turn).
        matcher: the value matcher (default: the package lexicon, no embedding fallback).
        similarity: ``(a, b) -> cosine`` for the embedding fallback (e.g.
            :func:`~shopping_companion.judges.matching.similarity.embedding_similarity`); builds a
            matcher with it when ``matcher`` is not given.
        uncertain: what items decided without explicit evidence earn (``no_credit`` | ``credit`` |
            ``unscored``; :mod:`shopping_companion.judges.selective`); :class:`ConfigError`
            naming ``uncertain`` otherwise.

    ``judge(task, trajectory)`` returns a stage-1 or stage-2 :class:`Verdict` (``judge="rule"``)
    with every decision in ``items`` (confident or uncertain, with a reason).
    """

    name = "rule"

    def __init__(
        self,
        lookup: Callable[[list[str]], dict[str, Product]],
        sessions: Mapping[str, Session] | None = None,
        *,
        matcher: ValueMatcher | None = None,
        similarity: Callable[[str, str], float] | None = None,
        uncertain: str = "no_credit",
    ) -> None:
        self.lookup = lookup
        self.uncertain = check_uncertain_policy(uncertain)
        self.sessions = sessions
        if matcher is None:
            matcher = ValueMatcher(similarity=similarity) if similarity is not None else default_matcher()
        self.matcher = matcher
        self.reader = ProductReader(matcher) if matcher is not default_matcher() else default_reader()
        self._user_turns: dict[str, tuple[str, list[frozenset[str]]]] = {}

    def _history_user_turns(self, task: Task) -> list[tuple[str, frozenset[str]]] | None:
        """``(text, token set)`` of each user turn of the task's history, cached per task; None
        without sessions."""
        if self.sessions is None:
            return None
        hit = self._user_turns.get(task.task_id)
        if hit is None:
            parts = []
            for ref in task.history:
                s = self.sessions.get(ref.session_id)
                if s is not None:
                    parts.extend(t.content for t in s.turns if t.role == "user")
            hit = [(p, frozenset(tokens(p))) for p in parts]
            if len(self._user_turns) > 4096:
                self._user_turns.clear()
            self._user_turns[task.task_id] = hit
        return hit

    def judge(self, task: Task, trajectory: Trajectory, stage: int | None = None) -> Verdict:
        """Judge one stage trajectory. A stage without a final answer gets
        :func:`~shopping_companion.judges.base.no_answer_verdict` (all scores 0). ``stage``, if
        given, must equal ``trajectory.stage`` (``ValueError``)."""
        if stage is not None and stage != trajectory.stage:
            raise ValueError(f"asked to judge stage {stage} but the trajectory is stage {trajectory.stage}")
        unanswered = no_answer_verdict(self.name, task, trajectory)
        if unanswered is not None:
            return unanswered
        if trajectory.stage == 1:
            return self._stage1(task, trajectory)
        return self._stage2(task, trajectory)

    __call__ = judge

    def _base(self, task: Task, stage: int) -> dict:
        return {
            "judge": self.name,
            "stage": stage,
            "F": len(task.preferences),
            "N": task.n_products,
            "b": 1 if task.task_type == "addon" else 0,
        }

    # ------------------------------------------------------------------ stage 1

    def grounding(self, task: Task) -> Callable[[Preference], bool | None] | None:
        """``q -> True`` when a user turn of the task's history states ``q`` (its value, or the value
        without its gloss), ``None`` when only turns about another person's wish do ("my husband
        wants waterproof boots": whose wish is not explicit) or only the gloss is said, ``False``
        when no turn states it. None without sessions."""
        turns = self._history_user_turns(task)
        if turns is None:
            return None
        m = self.matcher

        def said_in(key, value: str, k: int) -> bool:
            words = set(tokens(value))  # every word of the value said in the turn
            return (bool(words) and words <= turns[k][1]) or m.mentions(m.reading_key(key, value), value, turns[k][0])

        def grounded(q: Preference) -> bool | None:
            key = m.key(q.attribute)
            head, gloss = split_gloss(q.value)
            hits = [k for k in range(len(turns)) if any(said_in(key, v, k) for v in dict.fromkeys((q.value, head)))]
            if not hits:
                # the gloss alone said ("0.7 millimetre (medium)" where the user said "medium"): not explicit
                return None if gloss and any(said_in(key, gloss, k) for k in range(len(turns))) else False
            return None if all(_OTHER_PERSON.search(turns[k][0]) for k in hits) else True

        return grounded

    def _stage1(self, task: Task, traj: Trajectory) -> Verdict:
        """Stage-1 fields (module docstring) from one item per gold preference (``match``) and one
        per unmatched answer preference (``grounding``)."""
        base = self._base(task, 1)
        identified, why = identified_preferences(traj)
        reasons: list[str] = [why] if why else []
        res = match_preferences(task, identified, self.matcher, self.grounding(task))
        addon = bool(base["b"])
        single = task.n_products == 1
        reasons.append(f"{len(identified)} preference(s) identified" if identified else "no preference identified")
        items: list[VerdictItem] = []
        for i, (g, j) in enumerate(zip(task.preferences, res.matches)):
            doubt = res.unsure_gold.get(i)
            label = f"{g.attribute}={g.value}"
            where = f" (product {g.slot + 1})" if addon else ""
            if j is None:
                cands = res.candidates.get(i, [])
                detail = "missing" + (
                    ": perhaps stated as "
                    + ", ".join(f"{identified[k].attribute}={identified[k].value}" for k in cands)
                    if cands
                    else ""
                )
                reasons.append(f"missing: {label}{where}" + (f" (uncertain: {doubt})" if doubt else ""))
            else:
                cands = [j]
                q = identified[j]
                detail = f"matched by {q.attribute}={q.value}"
                if doubt:
                    reasons.append(f"uncertain match: {label}{where} by {q.attribute}={q.value} ({doubt})")
            items.append(_item("match", label, 0 if single else g.slot, j is not None, doubt, cands, detail))
        judged = sorted([(j, why) for j, why in res.spurious] + [(j, None) for j in res.extras])
        for j, why in judged:
            q = identified[j]
            doubt = res.unsure_answer.get(j)
            label = f"{q.attribute}={q.value}"
            if why is not None:
                reasons.append(f"spurious: {label} ({q.polarity}) {why}" + (f" (uncertain: {doubt})" if doubt else ""))
            detail = f"spurious: {why}" if why else "harmless: on no attribute of the request's preferences"
            items.append(_item("grounding", label, 0 if single else q.slot, why is None, doubt, [j], detail))
        f = stage1_fields(items, F=len(task.preferences), N=task.n_products, addon=addon, policy=self.uncertain)
        if addon:
            reasons.append(f"correct preferences for {f['c1']} of {task.n_products} product(s)")
        return self._verdict(base, items, f, reasons)

    def _verdict(self, base: dict, items: list[VerdictItem], f: dict, reasons: list[str]) -> Verdict:
        unsure = sum(not it["confident"] for it in items)
        if unsure:
            reasons.append(f"{unsure} uncertain item(s), scored {self.uncertain}")
        # built as validated by construction (tests/judges/test_selective_verdicts.py round-trips them):
        # validation would copy every item into a container the garbage collector must track
        return Verdict.model_construct(
            **base,
            **f,
            reasons=reasons,
            items=items,
            uncertain=unsure,
            uncertain_policy=self.uncertain if unsure else None,
        )

    # ------------------------------------------------------------------ stage 2

    def _stage2(self, task: Task, traj: Trajectory) -> Verdict:
        """Stage-2 fields (module docstring). The first N recommended ids are assigned to slots
        (single: the first id; add-on: the assignment maximising, in order, fully-satisfied
        relevant slots, relevant slots, satisfied preferences)."""
        base = self._base(task, 2)
        N, addon = task.n_products, bool(base["b"])
        reasons: list[str] = []
        ids = recommended_ids(traj)
        try:
            found = dict(self.lookup(list(ids))) if ids else {}
        except Exception as e:  # a catalog failure is a judge failure, never a 0 reward
            return Verdict(**base, failed=True, reasons=[f"catalog lookup failed: {type(e).__name__}: {e}"])

        returned = shown_product_ids(traj)

        p2 = 1
        if len(ids) != N:
            p2 = 0
            reasons.append(f"expected {N} product(s), got {len(ids)}")
        for pid in ids:
            if pid not in found:
                p2 = 0
                reasons.append(f"{pid}: not in the catalog")
            elif pid not in returned:
                p2 = 0
                reasons.append(f"{pid}: never returned by a product tool (fabricated id)")

        bundle = ids[:N]
        slot_prefs: list[list[Preference]] = [[] for _ in range(N)]
        for g in task.preferences:
            s = 0 if N == 1 else g.slot
            if 0 <= s < N:
                slot_prefs[s].append(g)
            else:
                reasons.append(f"gold preference {g.attribute}={g.value} names slot {g.slot} of {N}")
        credit = self.uncertain == "credit"
        rel: list[list[tuple[bool, str | None]]] = [[(False, None)] * len(bundle) for _ in range(N)]
        sat: list[list[list]] = [[[] for _ in bundle] for _ in range(N)]
        for s in range(N):
            for j, pid in enumerate(bundle):
                prod = found.get(pid)
                if prod is None:
                    sat[s][j] = [None] * len(slot_prefs[s])
                    continue
                rel[s][j] = self.reader.relevance(prod, task.slots[s])
                sat[s][j] = [self.reader.check(prod, g) for g in slot_prefs[s]]
        # the assignment maximises what counts under the policy (uncertain items count only with credit)
        rel_bits = [[r and (why is None or credit) for r, why in row] for row in rel]
        ok_bits = [
            [[bool(e and e.satisfied and (e.confident or credit)) for e in sat[s][j]] for j in range(len(bundle))]
            for s in range(N)
        ]
        assign = self._assign(rel_bits, ok_bits, N, len(bundle))

        items: list[VerdictItem] = []
        for s in range(N):
            j = assign[s]
            slot = task.slots[s]
            if j is None:
                if addon:
                    reasons.append(f"slot {s} ({slot.product_type}): no product recommended")
                continue
            pid = bundle[j]
            prod = found.get(pid)
            type_label = f"product {s + 1}: {slot.product_type}"
            if prod is None:
                items.append(_item("type", type_label, s, False, None, detail=f"{pid}: not in the catalog"))
                items += [
                    _item("attribute", f"{g.attribute}={g.value}", s, False, None, detail="no catalog record")
                    for g in slot_prefs[s]
                ]
                continue
            relevant, rel_doubt = rel[s][j]
            if relevant and not rel_doubt:
                detail = f"{pid}: a {slot.product_type}"
            else:
                have = self.reader.title_type(prod) or prod.category or "(no type)"
                detail = f"{pid}: a {have!r}"
                if not relevant:
                    reasons.append(
                        f"{pid}: a {have!r} is not a {slot.product_type!r}"
                        + (f" (uncertain: {rel_doubt})" if rel_doubt else "")
                    )
                else:
                    reasons.append(f"{pid}: uncertain type: a {have!r} for a {slot.product_type!r} ({rel_doubt})")
            items.append(_item("type", type_label, s, relevant, rel_doubt, detail=detail))
            for g, ev in zip(slot_prefs[s], sat[s][j]):
                label = f"{g.attribute}={g.value}"
                why = f" ({ev.detail})" if ev.detail else ""
                unsure = f" (uncertain: {ev.reason})" if not ev.confident else ""
                if not ev.satisfied:
                    verb = "lacks" if g.polarity == "want" else "has avoided"
                    reasons.append(f"{pid} {verb} {label}{why}{unsure}")
                elif unsure:
                    reasons.append(f"{pid} uncertain: {label}{why}{unsure}")
                items.append(_item("attribute", label, s, ev.satisfied, ev.reason, detail=f"{pid}: {ev.detail}"))

        if addon:
            prods = [found[p] for p in bundle if p in found]
            u2 = 0
            if len(prods) != N:
                why = "budget not checkable: the bundle is incomplete"
            else:
                total, discount, same_shop = bundle_cost(prods, task)
                if not same_shop:
                    why = "products are from different shops: " + ", ".join(sorted({p.shop_id for p in prods}))
                elif total is None:
                    why = "budget not checkable: a product has no price"
                else:
                    pay = total - discount
                    if task.budget is not None and pay > task.budget + 1e-6:
                        why = f"total {total:g} - discount {discount:g} = {pay:g} exceeds budget {task.budget:g}"
                    else:
                        u2 = 1
                        why = f"total {total:g} - discount {discount:g} = {pay:g} within budget"
            reasons.append(why)
            items.append(_item("bundle", "one shop, priced, within budget", 0, u2 == 1, None, detail=why))

        f = stage2_fields(items, F=len(task.preferences), N=N, addon=addon, p2=p2, policy=self.uncertain)
        if not reasons:
            reasons.append("all checks passed")
        return self._verdict({**base, "p2": p2}, items, f, reasons)

    @staticmethod
    def _assign(rel: list[list[bool]], sat: list[list[list[bool]]], N: int, k: int) -> list[int | None]:
        """Slot → bundle index. N == 1 or k == 0: in order. Otherwise the injective assignment
        maximising (fully satisfied relevant slots, relevant slots, satisfied preferences), ties
        broken by the recommendation order; beyond 8! candidates, the recommendation order."""
        if k == 0:
            return [None] * N
        if N == 1 or math.perm(max(N, k), min(N, k)) > 40320:
            return [j if j < k else None for j in range(N)]

        def score(assign: list[int | None]) -> tuple[int, int, int]:
            full = relc = sats = 0
            for s, j in enumerate(assign):
                if j is None:
                    continue
                sats += sum(sat[s][j])
                relc += rel[s][j]
                full += rel[s][j] and all(sat[s][j])
            return full, relc, sats

        best: list[int | None] | None = None
        best_score = (-1, -1, -1)
        if k >= N:
            candidates: Iterable[list[int | None]] = (list(p) for p in itertools.permutations(range(k), N))
        else:

            def gen() -> Iterable[list[int | None]]:
                for p in itertools.permutations(range(N), k):
                    a: list[int | None] = [None] * N
                    for j, s in enumerate(p):
                        a[s] = j
                    yield a

            candidates = gen()
        for a in candidates:
            sc = score(a)
            if sc > best_score:
                best, best_score = a, sc
        assert best is not None
        return best
