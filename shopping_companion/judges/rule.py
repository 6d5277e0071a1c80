"""The rule judge: deterministic, offline, free (DESIGN.md §8).

It fills the same :class:`~shopping_companion.types.Verdict` fields as the paper's LLM judge
(App. C.1) from exact checks after text normalisation, so rewards (Eqs. 6–7), Acc and Succ can be
computed without any model. Alternatives are accepted: a recommended product is judged on its own
attributes, never by comparison with the reference product.

Normalisation (:func:`normalize_tokens`)
    lowercase; accents removed; possessive ``'s`` dropped; split into runs of letters and runs of
    digits (``"32GB"`` → ``32 gb``); the stop words a/an/the/of/and/or/for/with/in/on/to dropped;
    simple singularisation (``dresses`` → ``dress``, ``batteries`` → ``battery``, ``shoes`` →
    ``shoe``, ``mens`` → ``men``); synonyms gray→grey, colour→color, fabric→material,
    man→men, woman→women.

Value match (:func:`value_matches`)
    gold value tokens ⊆ candidate value tokens (so gold "navy" matches "Navy Blue", gold "grey"
    matches "Gray", but gold "navy blue" does not match "navy"). An empty gold value never matches.

Attribute-key match (:func:`key_matches`)
    normalised key tokens of one ⊆ those of the other ("colour" ~ "base_colour" ~ "primary_color"
    ~ "colour1"; "size" ~ "sizes"; "fabric" ~ "material").

Stage 1 — gold preference matched by an identified preference
    the values match (above) and the polarities are equal; attribute names and slots are *not*
    compared. Matching is one-to-one (a maximum bipartite matching), so one identified preference
    never counts for two gold ones.

Stage 2 — gold preference satisfied by a product
    the product's *candidate values* are the values of its attributes, options and brand whose key
    matches the gold attribute. If there is at least one, the preference is satisfied iff one of
    them value-matches (the structured attribute is authoritative: a description that merely
    mentions "navy" does not make a black shirt navy). If there is none, it is satisfied iff the
    gold value's normalised tokens occur as a contiguous phrase in one field of the product: title,
    brand, description, a feature, an attribute value, an option value or a category name. An
    ``avoid`` preference is satisfied iff the corresponding ``want`` test fails.

Performance
    Normalisation results are memoised per distinct text (token tuples, token sets, padded phrase
    strings, attribute-key matches; bounded LRU caches, thread-safe), since catalog fields recur
    across trajectories. ``benchmarks/bench_judge.py`` measures throughput (target ≥ 5,000
    trajectories/s).
"""

from __future__ import annotations

import itertools
import math
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from functools import lru_cache

from shopping_companion.registry import JUDGES
from shopping_companion.types import Preference, Product, ProductSlot, Session, Task, Trajectory, Verdict

__all__ = [
    "RuleJudge",
    "normalize_tokens",
    "value_matches",
    "key_matches",
    "phrase_in",
    "match_identified",
    "product_satisfies",
    "is_relevant",
    "bundle_cost",
]

PRODUCT_TOOLS = frozenset({"product_search", "product_view"})

_STOP = frozenset({"a", "an", "the", "of", "and", "or", "for", "with", "in", "on", "to"})
_SYNONYMS = {
    "gray": "grey",
    "colour": "color",
    "fabric": "material",
    "man": "men",
    "woman": "women",
}
_NO_SINGULAR = frozenset({"jeans", "glasses", "trousers", "shorts", "pants", "leggings", "sunglasses"})


def _singular(t: str) -> str:
    if len(t) <= 3 or t.isdigit() or t in _NO_SINGULAR:
        return t
    if t.endswith("ies") and len(t) > 4:
        return t[:-3] + "y"
    if t.endswith(("sses", "shes", "ches", "xes")):
        return t[:-2]
    if t.endswith("s") and not t.endswith(("ss", "us", "is", "os")):
        return t[:-1]
    return t


_WORD_RE = re.compile(r"[a-z]+|[0-9]+")
_POSSESSIVE_RE = re.compile(r"['’]s\b")


def _tokens(text: str) -> tuple[str, ...]:
    if text.isascii():
        s = text.lower()
    else:
        s = unicodedata.normalize("NFKD", text)
        s = "".join(ch for ch in s if not unicodedata.combining(ch)).lower()
    s = _POSSESSIVE_RE.sub("", s)
    out: list[str] = []
    for t in _WORD_RE.findall(s):
        if t in _STOP:
            continue
        t = _singular(t)
        out.append(_SYNONYMS.get(t, t))
    return tuple(out)


# Caches keyed by the text itself (catalog fields repeat across trajectories): short texts in a
# large cache, long ones (descriptions) in a smaller one, so memory stays bounded (tens of MB).
_tokens_short = lru_cache(maxsize=131072)(_tokens)
_tokens_long = lru_cache(maxsize=8192)(_tokens)


def normalize_tokens(text: str | None) -> tuple[str, ...]:
    """Normalised tokens of ``text`` (module docstring), in order."""
    if not text:
        return ()
    return _tokens_short(text) if len(text) <= 512 else _tokens_long(text)


@lru_cache(maxsize=131072)
def _token_set(text: str) -> frozenset[str]:
    return frozenset(normalize_tokens(text))


def _padded_uncached(text: str) -> str:
    return f" {' '.join(normalize_tokens(text))} "


_padded_short = lru_cache(maxsize=65536)(_padded_uncached)
_padded_long = lru_cache(maxsize=4096)(_padded_uncached)


def _padded(text: str) -> str:
    """``" tok tok … "``: the normalised text, padded so phrase containment is a substring test."""
    return _padded_short(text) if len(text) <= 512 else _padded_long(text)


def value_matches(gold: str, candidate: str | None) -> bool:
    """Gold value tokens ⊆ candidate tokens (non-empty gold)."""
    if not gold or not candidate:
        return False
    g = _token_set(gold)
    return bool(g) and g <= _token_set(candidate)


def _phrase_in(gold: str, field: str | None) -> bool:
    if not gold or not field:
        return False
    g = _padded(gold)
    return g != "  " and g in _padded(field)


def phrase_in(gold: str, field: str | None) -> bool:
    """The normalised tokens of ``gold`` occur as a contiguous phrase in ``field`` (non-empty gold)."""
    return _phrase_in(gold, field)


@lru_cache(maxsize=65536)
def key_matches(a: str, b: str) -> bool:
    """Attribute keys match when one's normalised tokens ⊆ the other's (both non-empty)."""
    ta, tb = _token_set(a.replace("_", " ")), _token_set(b.replace("_", " "))
    return bool(ta) and bool(tb) and (ta <= tb or tb <= ta)


# --------------------------------------------------------------------------- stage 1


def match_identified(gold: list[Preference], identified: list[Preference]) -> list[int | None]:
    """For each gold preference, the index of the identified preference matched to it (or None).

    One-to-one maximum matching on (value match and equal polarity); among candidates, those with
    the same slot and a matching attribute key are tried first.
    """
    adj: list[list[int]] = []
    for g in gold:
        cands = [j for j, q in enumerate(identified) if q.polarity == g.polarity and value_matches(g.value, q.value)]
        cands.sort(key=lambda j: (identified[j].slot != g.slot, not key_matches(g.attribute, identified[j].attribute), j))
        adj.append(cands)
    owner: dict[int, int] = {}  # identified index -> gold index

    def augment(i: int, seen: set[int]) -> bool:
        for j in adj[i]:
            if j in seen:
                continue
            seen.add(j)
            if j not in owner or augment(owner[j], seen):
                owner[j] = i
                return True
        return False

    for i in range(len(gold)):
        augment(i, set())
    result: list[int | None] = [None] * len(gold)
    for j, i in owner.items():
        result[i] = j
    return result


# --------------------------------------------------------------------------- stage 2


def _candidate_values(product: Product, attribute: str) -> list[str]:
    vals = [v for k, v in product.attributes.items() if key_matches(attribute, k)]
    for k, opts in product.options.items():
        if key_matches(attribute, k):
            vals.extend(opts)
    if product.brand and key_matches(attribute, "brand"):
        vals.append(product.brand)
    return vals


def _text_fields(product: Product) -> Iterable[str | None]:
    yield product.title
    yield product.brand
    yield product.description
    yield from product.features
    yield from product.attributes.values()
    for opts in product.options.values():
        yield from opts
    yield from product.category_path


def product_satisfies(product: Product, pref: Preference) -> bool:
    """Whether ``product`` satisfies the gold preference ``pref`` (module docstring, Stage 2)."""
    cands = _candidate_values(product, pref.attribute)
    if cands:
        has = any(value_matches(pref.value, c) for c in cands)
    else:
        has = any(_phrase_in(pref.value, f) for f in _text_fields(product))
    return has if pref.polarity == "want" else not has


def is_relevant(product: Product, slot: ProductSlot) -> bool:
    """The product is what the slot asks for.

    True when the product's finest category equals the slot's finest category (normalised tokens
    equal), or when the slot's ``product_type`` tokens ⊆ the tokens of the product title and
    category path.
    """
    if slot.category_path and product.category_path:
        a, b = normalize_tokens(product.category), normalize_tokens(slot.category_path[-1])
        if a and a == b:
            return True
    pt = set(normalize_tokens(slot.product_type))
    if not pt:
        return False
    have = set(normalize_tokens(product.title))
    for c in product.category_path:
        have.update(normalize_tokens(c))
    return pt <= have


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
    """Deterministic judge. ``lookup(ids) -> {id: Product}`` returns the catalog records it knows
    (unknown ids are simply absent). ``judge(task, trajectory)`` returns a stage-1 or stage-2
    :class:`Verdict` (``judge="rule"``); if ``lookup`` raises, the verdict has ``failed=True``.

    ``sessions`` (session id -> :class:`Session`, e.g. the benchmark's sessions) lets the stage-1
    judgement check that identified preferences are grounded in what the user said; without it
    q1 only checks that preferences were identified.
    """

    name = "rule"

    def __init__(
        self,
        lookup: Callable[[list[str]], dict[str, Product]],
        sessions: Mapping[str, Session] | None = None,
    ) -> None:
        self.lookup = lookup
        self.sessions = sessions
        self._user_text: dict[str, str] = {}

    def _history_user_text(self, task: Task) -> str | None:
        """All user turns of the task's history, joined and normalised (cached per task)."""
        if self.sessions is None:
            return None
        text = self._user_text.get(task.task_id)
        if text is None:
            parts = []
            for ref in task.history:
                s = self.sessions.get(ref.session_id)
                if s is not None:
                    parts.extend(t.content for t in s.turns if t.role == "user")
            text = _padded_uncached("\n".join(parts))
            if len(self._user_text) > 4096:
                self._user_text.clear()
            self._user_text[task.task_id] = text
        return text

    def judge(self, task: Task, trajectory: Trajectory, stage: int | None = None) -> Verdict:
        """Judge one stage trajectory. ``stage``, if given, must equal ``trajectory.stage``."""
        if stage is not None and stage != trajectory.stage:
            raise ValueError(f"asked to judge stage {stage} but the trajectory is stage {trajectory.stage}")
        if trajectory.stage == 1:
            return self._stage1(task, trajectory)
        return self._stage2(task, trajectory)

    __call__ = judge

    # ------------------------------------------------------------------ stage 1

    def _base(self, task: Task, stage: int) -> dict:
        return {
            "judge": self.name,
            "stage": stage,
            "F": len(task.preferences),
            "N": task.n_products,
            "b": 1 if task.task_type == "addon" else 0,
        }

    def _stage1(self, task: Task, traj: Trajectory) -> Verdict:
        """q1 = 1 iff ≥1 preference identified and, when the judge knows the sessions, at least half
        of the identified preference values occur in the user's own turns of the history (a list of
        guessed or hallucinated values is not a relevant answer); m1 = gold preferences matched
        (one-to-one); c1 (add-on) = slots 0..N-1 with ≥1 identified preference of that slot;
        success = m1 == F."""
        base = self._base(task, 1)
        reasons: list[str] = []
        identified = traj.identified_preferences
        if identified is None:
            from shopping_companion.envs.parsing import parse_preferences

            if traj.final_answer is None:
                identified = []
                reasons.append(f"the stage ended without an answer ({traj.termination})")
            else:
                identified, err = parse_preferences(traj.final_answer)
                if err:
                    reasons.append(f"answer not parsable as preferences: {err}")
        q1 = 1 if identified else 0
        reasons.append(f"{len(identified)} preference(s) identified" if identified else "no preference identified")
        user_text = self._history_user_text(task)
        if identified and user_text is not None:
            ungrounded = [q for q in identified if _padded(q.value).strip() == "" or _padded(q.value) not in user_text]
            if ungrounded:
                reasons.append(
                    f"{len(ungrounded)} of {len(identified)} identified value(s) never said by the user: "
                    + ", ".join(q.value for q in ungrounded[:5]) + (" …" if len(ungrounded) > 5 else "")
                )
            if 2 * len(ungrounded) > len(identified):
                q1 = 0
        matches = match_identified(task.preferences, identified)
        matched: list[str] = []
        for g, j in zip(task.preferences, matches):
            label = f"{g.attribute}={g.value}"
            if j is None:
                reasons.append(f"missing: {label}" + (f" (slot {g.slot})" if base["b"] else ""))
            else:
                matched.append(label)
        m1 = len(matched)
        c1 = None
        if base["b"]:
            slots_hit = {q.slot for q in identified if 0 <= q.slot < task.n_products}
            c1 = min(len(slots_hit), task.n_products)
            reasons.append(f"preferences identified for {c1} of {task.n_products} product(s)")
        return Verdict(
            **base, q1=q1, m1=m1, c1=c1, success=m1 == len(task.preferences), matched=matched, reasons=reasons
        )

    # ------------------------------------------------------------------ stage 2

    def _stage2(self, task: Task, traj: Trajectory) -> Verdict:
        """Stage-2 fields (matching rules in the module docstring):

        p2 = 1 iff exactly N distinct ids were recommended, each exists in the catalog and each
        was returned by a successful product_search/product_view call of this trajectory.
        The first N ids are assigned to slots (single: the first id; add-on: the assignment of
        products to slots maximising, in order, fully-satisfied relevant slots, relevant slots,
        satisfied preferences). q2 = 1 iff ≥1 id and every assigned product is relevant to its
        slot. m2 = gold preferences satisfied by their slot's product. Add-on: n2 = slots whose
        product is relevant and satisfies all of the slot's preferences; u2 = 1 iff N products are
        found, all in one shop, all priced, and total − discount ≤ budget (discount when the shop is
        the voucher's and total ≥ min_spend; no budget → only the same-shop test).
        success = p2 ∧ q2 ∧ m2 = F (∧ n2 = N ∧ u2 for add-on).
        """
        base = self._base(task, 2)
        N, addon = task.n_products, bool(base["b"])
        reasons: list[str] = []
        ids = list(dict.fromkeys(traj.recommended_ids))
        if not ids and traj.final_answer:
            from shopping_companion.envs.parsing import extract_rec_ids

            ids = extract_rec_ids(traj.final_answer)[0]
        try:
            found = dict(self.lookup(list(ids))) if ids else {}
        except Exception as e:  # a catalog failure is a judge failure, never a 0 reward
            return Verdict(**base, failed=True, reasons=[f"catalog lookup failed: {type(e).__name__}: {e}"])

        returned: set[str] = set()
        for r in traj.tool_results:
            if r.name in PRODUCT_TOOLS and r.error is None:
                returned.update(r.returned_ids)

        # p2: product validity
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

        # assignment of the first N recommended products to slots
        bundle = ids[:N]
        slot_prefs: list[list[Preference]] = [[] for _ in range(N)]
        for g in task.preferences:
            s = 0 if N == 1 else g.slot
            if 0 <= s < N:
                slot_prefs[s].append(g)
            else:
                reasons.append(f"gold preference {g.attribute}={g.value} names slot {g.slot} of {N}")
        rel = [[False] * len(bundle) for _ in range(N)]
        sat: list[list[list[bool]]] = [[[] for _ in bundle] for _ in range(N)]
        for s in range(N):
            for j, pid in enumerate(bundle):
                prod = found.get(pid)
                if prod is None:
                    sat[s][j] = [False] * len(slot_prefs[s])
                    continue
                rel[s][j] = is_relevant(prod, task.slots[s])
                sat[s][j] = [product_satisfies(prod, g) for g in slot_prefs[s]]
        assign = self._assign(rel, sat, N, len(bundle))  # slot -> bundle index or None

        q2 = 1 if bundle else 0
        m2 = 0
        n2 = 0
        matched: list[str] = []
        for s in range(N):
            j = assign[s]
            slot = task.slots[s]
            if j is None:
                if addon:
                    reasons.append(f"slot {s} ({slot.product_type}): no product recommended")
                continue
            pid = bundle[j]
            prod = found.get(pid)
            if prod is None:
                q2 = 0
                continue
            if not rel[s][j]:
                q2 = 0
                want = slot.category_path[-1] if slot.category_path else slot.product_type
                reasons.append(f"{pid}: category {prod.category or '(none)'!r} does not fit {want!r}")
            ok = sat[s][j]
            m2 += sum(ok)
            for g, hit in zip(slot_prefs[s], ok):
                label = f"{g.attribute}={g.value}"
                if hit:
                    matched.append(label)
                else:
                    verb = "lacks" if g.polarity == "want" else "has avoided"
                    reasons.append(f"{pid} {verb} {label}")
            if rel[s][j] and all(ok):
                n2 += 1

        u2: int | None = None
        if addon:
            prods = [found[p] for p in bundle if p in found]
            u2 = 0
            if len(prods) != N:
                reasons.append("budget not checkable: the bundle is incomplete")
            else:
                total, discount, same_shop = bundle_cost(prods, task)
                if not same_shop:
                    reasons.append("products are from different shops: " + ", ".join(sorted({p.shop_id for p in prods})))
                elif total is None:
                    reasons.append("budget not checkable: a product has no price")
                else:
                    pay = total - discount
                    if task.budget is not None and pay > task.budget + 1e-6:
                        reasons.append(f"total {total:g} - discount {discount:g} = {pay:g} exceeds budget {task.budget:g}")
                    else:
                        u2 = 1
                        reasons.append(f"total {total:g} - discount {discount:g} = {pay:g} within budget")

        success = bool(p2 and q2 and m2 == len(task.preferences))
        if addon:
            success = success and n2 == N and u2 == 1
        return Verdict(
            **base,
            p2=p2,
            q2=q2,
            m2=m2,
            n2=n2 if addon else None,
            u2=u2,
            success=success,
            matched=matched,
            reasons=reasons or ["all checks passed"],
        )

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
