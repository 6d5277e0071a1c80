"""Scripted policies for the reward-hacking benchmark and tests (issue 13, item 5).

One honest gold-following policy and adversaries that are each *otherwise identical* to it: same
tool calls in the same order, only the hack differs. Every policy plays the real
:class:`~shopping_companion.envs.env.ShoppingCompanionEnv` (the env parses its text, runs the
tools, calls the judge and the rubric), through a :class:`~shopping_companion.envs.tools.ToolBox`
over two small in-process backends:

- :class:`InMemoryProducts` (the ``ProductBackend`` protocol): keyword-overlap ranking over title,
  brand, categories and attribute values, with the real backend's shop / price filters and
  argument checks (blank query, non-finite or negative prices, ``min_price > max_price``, top_k);
  ``view`` by id. Hits have the real ``ProductSearch`` hit keys.
- :class:`InMemoryMemory` (the ``MemoryBackend`` protocol): keyword-overlap ranking of the turns of
  the task's history sessions; hits have the real ``MemoryStore.search`` shape (``session_id``,
  ``turn_index``, ``role``, ``date``, ``score``, ``snippet``, ``query``); ``view`` by id.

The honest policy (:class:`Honest`):

- stage 1: ``mem_search`` with the instruction, ``mem_view`` of the needle session(s), answer the
  gold preferences exactly (``{"preferences": [{attribute, value, polarity, slot}, ...]}``);
- stage 2: one ``product_search`` per slot (product type + the slot's wanted values; the voucher
  shop for add-on deals), one ``product_view`` of the reference product(s), answer with one
  ``@REC::id@`` marker per slot.

Every turn has exactly one well-formed ``<think>`` block. Adversaries (:data:`ADVERSARIES`) are
subclasses that override one hook. :func:`run_policy` plays one episode and returns an
:class:`EpisodeScore` with both stages' totals under every rubric given.

Inaction (issue 31): :class:`HonestWeak` (``honest_weak``, :data:`WEAK_BASELINE`) is an honest but
weak attempt, not an adversary: valid tool calls that find less (one ``mem_search``, no view, only
the preferences the request itself states; one product-type-only search per slot, no view, the
first returned product that is not a reference). :class:`FailedCalls` (``failed_calls``,
:data:`FAILED_BASELINE`) tries and fails: the same attempt with every tool call malformed (at most
two per stage, so the stage is not ended as ``invalid_output``), then the same answers as without
tools. The adversaries of :data:`BELOW_WEAK` do nothing instead — ``no_tools`` answers at once,
well-formed, from the request alone; ``free_text`` writes prose every turn — and must score below
the weak attempt and never above trying and failing, not only below the honest policy.

Uncertainty (issue 32): :data:`UNCERTAIN_ADVERSARIES` try to make the rule judge unsure instead of
wrong — vocabulary-free values, unknown attribute names, vague invented extras, values wrapped in
vague words, and a recommended product whose fields state none of the wanted attributes. Under the
default ``uncertain: no_credit`` an uncertain item earns nothing, so none may gain.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from shopping_companion.envs.env import EnvConfig, ShoppingCompanionEnv
from shopping_companion.envs.tools import ToolBox
from shopping_companion.errors import ToolInputError
from shopping_companion.types import Preference, Product, Session, Task

__all__ = [
    "ADVERSARIES",
    "BELOW_WEAK",
    "FAILED_BASELINE",
    "WEAK_BASELINE",
    "POLICIES",
    "NEUTRAL_CONTROLS",
    "UNCERTAIN_ADVERSARIES",
    "EpisodeScore",
    "Honest",
    "InMemoryMemory",
    "InMemoryProducts",
    "TaskContext",
    "Vocabulary",
    "make_context",
    "run_policy",
    "select_products",
]

_TOKEN = re.compile(r"[a-z0-9]+")
_STOP = frozenset("a an the of and or for with in on to i my me is it that this you your be are was".split())


def _tokens(text: str) -> list[str]:
    return [t for t in _TOKEN.findall(text.lower()) if t not in _STOP]


def _norm(text: str) -> str:
    return " ".join(_TOKEN.findall(text.lower()))


# --------------------------------------------------------------------------- backends


class InMemoryProducts:
    """``ProductBackend`` over a dict of products (see module docstring)."""

    HIT_KEYS = ("product_id", "title", "price", "currency", "category", "shop", "shop_id", "brand", "score")

    def __init__(self, products: Mapping[str, Product] | Iterable[Product]) -> None:
        items = products.values() if isinstance(products, Mapping) else products
        self.products: dict[str, Product] = {p.product_id: p for p in items}
        self._docs: dict[str, tuple[set[str], set[str]]] = {}
        self._postings: dict[str, set[str]] = defaultdict(set)
        for pid, p in self.products.items():
            title = set(_tokens(p.title))
            body = set(title)
            body.update(_tokens(" ".join(p.category_path)))
            body.update(_tokens(p.brand or ""))
            body.update(_tokens(" ".join(p.attributes.values())))
            self._docs[pid] = (title, body)
            for t in body:
                self._postings[t].add(pid)
        self._cache: dict[tuple, list[dict[str, Any]]] = {}

    def get(self, pid: str) -> Product | None:
        return self.products.get(pid)

    def lookup(self, ids: list[str]) -> dict[str, Product]:
        return {i: self.products[i] for i in ids if i in self.products}

    @staticmethod
    def _price(name: str, v: Any) -> float | None:
        if v is None:
            return None
        v = float(v)
        if not math.isfinite(v) or v < 0:
            raise ToolInputError(name, f"must be a finite number >= 0, got {v!r}")
        return v

    def search(
        self,
        query: str,
        shop_id: str | None = None,
        min_price: float | None = None,
        max_price: float | None = None,
        top_k: int = 10,
    ) -> list[dict[str, Any]]:
        if not isinstance(query, str) or not query.strip():
            raise ToolInputError("query", "must be a non-blank string")
        if len(query) > 2000:
            raise ToolInputError("query", f"at most 2000 characters, got {len(query)}")
        lo, hi = self._price("min_price", min_price), self._price("max_price", max_price)
        if lo is not None and hi is not None and lo > hi:
            raise ToolInputError("min_price", "must be <= max_price")
        if not 1 <= int(top_k) <= 50:
            raise ToolInputError("top_k", "must be from 1 to 50")
        q = set(_tokens(query))
        if not q:
            return []
        shop = shop_id.strip() if isinstance(shop_id, str) and shop_id.strip() else None
        key = (frozenset(q), shop, lo, hi, int(top_k))
        if key not in self._cache:  # every policy repeats the honest searches: rank once
            if len(self._cache) > 4096:
                self._cache.clear()
            self._cache[key] = self._rank(q, shop, lo, hi, int(top_k))
        return [dict(h) for h in self._cache[key]]

    def _rank(
        self, q: set[str], shop: str | None, lo: float | None, hi: float | None, top_k: int
    ) -> list[dict[str, Any]]:
        cands: set[str] = set()
        for t in q:
            cands |= self._postings.get(t, set())
        scored = []
        for pid in cands:
            title, body = self._docs[pid]
            p = self.products[pid]
            if shop is not None and p.shop_id != shop:
                continue
            if (lo is not None or hi is not None) and (
                p.price is None or (lo is not None and p.price < lo) or (hi is not None and p.price > hi)
            ):
                continue
            s = len(q & body) + 0.5 * len(q & title)
            if s > 0:
                scored.append((-s, pid))
        scored.sort()
        out = []
        for neg, pid in scored[:top_k]:
            p = self.products[pid]
            out.append(
                {
                    "product_id": pid,
                    "title": p.title,
                    "price": p.price,
                    "currency": p.currency,
                    "category": p.category,
                    "shop": p.shop,
                    "shop_id": p.shop_id,
                    "brand": p.brand,
                    "score": round(-neg, 4),
                }
            )
        return out

    def view(self, product_ids: list[str]) -> tuple[list[Product], list[str]]:
        ids = list(dict.fromkeys(product_ids))
        return (
            [self.products[i].model_copy(deep=True) for i in ids if i in self.products],
            [i for i in ids if i not in self.products],
        )


class InMemoryMemory:
    """``MemoryBackend`` over one user's history sessions (see module docstring)."""

    def __init__(self, sessions: list[Session], snippet_chars: int = 300) -> None:
        self.sessions = {s.session_id: s for s in sessions}
        self.snippet_chars = snippet_chars
        self._rows = [(s, ti, set(_tokens(t.content))) for s in sessions for ti, t in enumerate(s.turns)]

    def search(self, queries: list[str] | str, top_k: int = 10) -> list[dict[str, Any]]:
        qs = [queries] if isinstance(queries, str) else list(queries)
        if not qs or any(not isinstance(q, str) or not q.strip() for q in qs):
            raise ToolInputError("queries", "must be 1-10 non-empty strings")
        qs = list(dict.fromkeys(q.strip() for q in qs))
        qtok = [set(_tokens(q)) for q in qs]
        scored = []
        for row, (_s, _ti, toks) in enumerate(self._rows):
            best, bq = 0.0, 0
            for k, q in enumerate(qtok):
                if q and toks:
                    v = len(q & toks) / math.sqrt(len(q) * len(toks))
                    if v > best:
                        best, bq = v, k
            scored.append((-best, row, bq))
        scored.sort()
        out = []
        for neg, row, bq in scored[: int(top_k)]:
            s, ti, _ = self._rows[row]
            text = s.turns[ti].content
            out.append(
                {
                    "session_id": s.session_id,
                    "turn_index": ti,
                    "role": s.turns[ti].role,
                    "date": s.date,
                    "score": round(-neg, 4),
                    "snippet": text if len(text) <= self.snippet_chars else text[: self.snippet_chars] + "…",
                    "query": qs[bq],
                }
            )
        return out

    def view(self, session_ids: list[str]) -> tuple[list[Session], list[str]]:
        ids = list(dict.fromkeys(session_ids))
        return (
            [self.sessions[i].model_copy(deep=True) for i in ids if i in self.sessions],
            [i for i in ids if i not in self.sessions],
        )


# --------------------------------------------------------------------------- vocabulary


_SKIP_VALUES = {"", "na", "n/a", "none", "-", "nan", "null"}
_KEY_ALIASES = {"colour": "base_colour", "color": "base_colour", "base color": "base_colour"}


class Vocabulary:
    """Real catalog attribute values: ``(source, key) -> Counter`` and ``(source, category, key) -> Counter``."""

    def __init__(self) -> None:
        self.by_key: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
        self.by_cat: dict[tuple[str, str, str], Counter[str]] = defaultdict(Counter)

    def add(self, p: Product) -> None:
        for k, v in p.attributes.items():
            if not isinstance(v, str) or v.strip().lower() in _SKIP_VALUES or len(v) > 40:
                continue
            self.by_key[(p.source, k)][v] += 1
            self.by_cat[(p.source, p.category, k)][v] += 1

    @classmethod
    def from_products(cls, products: Iterable[Product]) -> "Vocabulary":
        v = cls()
        for p in products:
            v.add(p)
        return v

    @staticmethod
    def catalog_key(pref: Preference, ref: Product | None) -> str:
        """The attribute key of ``ref`` that the gold preference names (or its own name)."""
        if ref is None:
            return pref.attribute
        want = _norm(pref.attribute.replace("_", " "))
        keys = list(ref.attributes)
        for k in keys:
            if _norm(k.replace("_", " ")) == want:
                return k
        alias = _KEY_ALIASES.get(want)
        if alias and alias in ref.attributes:
            return alias
        for k in keys:  # the key whose value is the gold value
            if _norm(ref.attributes[k]) == _norm(pref.value):
                return k
        return pref.attribute

    def values(self, source: str, category: str, key: str) -> list[str]:
        """Values of ``key`` by frequency: the category's first, then the source's."""
        out = [v for v, _ in self.by_cat.get((source, category, key), Counter()).most_common()]
        seen = {_norm(v) for v in out}
        for v, _ in self.by_key.get((source, key), Counter()).most_common():
            if _norm(v) not in seen:
                seen.add(_norm(v))
                out.append(v)
        return out


def select_products(
    products: Iterable[Product], tasks: Iterable[Task], per_category: int = 300
) -> tuple[dict[str, Product], Vocabulary]:
    """The products a run over ``tasks`` needs — the references, every product of the references'
    shops and voucher shops, and the first ``per_category`` products of each reference's
    (source, finest category) as search distractors — and the :class:`Vocabulary` of all of
    ``products`` (one pass; ``products`` may be a stream)."""
    tasks = list(tasks)
    refs = {s.reference_product_id for t in tasks for s in t.slots}
    shops = {t.voucher.shop_id for t in tasks if t.voucher is not None}
    vocab = Vocabulary()
    ref_products: dict[str, Product] = {}
    by_shop: dict[str, list[Product]] = defaultdict(list)
    by_cat: dict[tuple[str, str], list[Product]] = defaultdict(list)
    for p in products:
        vocab.add(p)
        if p.product_id in refs:
            ref_products[p.product_id] = p
        by_shop[p.shop_id].append(p)  # only references' shops are kept below
        cat = by_cat[(p.source, p.category)]
        if len(cat) < per_category:
            cat.append(p)
    keep: dict[str, Product] = dict(ref_products)
    for shop in shops | {p.shop_id for p in ref_products.values()}:
        keep.update((p.product_id, p) for p in by_shop.get(shop, ()))
    for key in {(p.source, p.category) for p in ref_products.values()}:
        keep.update((p.product_id, p) for p in by_cat.get(key, ()))
    return keep, vocab


# --------------------------------------------------------------------------- task context


@dataclass
class TaskContext:
    """Everything a scripted policy may read about one task (it plays with the gold)."""

    task: Task
    refs: list[Product | None]  # reference product per slot
    sessions: dict[str, Session]  # this user's history sessions
    vocab: Vocabulary
    user_text: str = ""  # normalised text of every user turn of the history
    product_backend: InMemoryProducts | None = None
    memory_backend: InMemoryMemory | None = None

    def ref(self, slot: int) -> Product | None:
        return self.refs[slot] if 0 <= slot < len(self.refs) else None

    def other_values(self, g: Preference, k: int, ungrounded: bool = False) -> list[str]:
        """Up to ``k`` real catalog values of ``g``'s attribute other than ``g.value`` (optionally
        only values the user never said)."""
        ref = self.ref(0 if self.task.n_products == 1 else g.slot)
        key = self.vocab.catalog_key(g, ref)
        src = ref.source if ref else ""
        cat = ref.category if ref else ""
        out = []
        for v in self.vocab.values(src, cat, key):
            nv = _norm(v)
            if not nv or nv == _norm(g.value) or nv in _norm(g.value) or _norm(g.value) in nv:
                continue
            if ungrounded and f" {nv} " in self.user_text:
                continue
            out.append(v)
            if len(out) == k:
                break
        return out

    def user_turns(self, needles_only: bool = True) -> list[str]:
        ids = self.task.needle_session_ids if needles_only else [r.session_id for r in self.task.history]
        return [t.content for sid in ids if sid in self.sessions for t in self.sessions[sid].turns if t.role == "user"]


def make_context(
    task: Task,
    products: Mapping[str, Product],
    session_pool: Mapping[str, Session],
    vocab: Vocabulary,
    product_backend: InMemoryProducts | None = None,
) -> TaskContext:
    sessions = {r.session_id: session_pool[r.session_id] for r in task.history if r.session_id in session_pool}
    dated = [s.model_copy(update={"date": r.date}) for r in task.history if (s := sessions.get(r.session_id))]
    user = " ".join(_norm(t.content) for s in dated for t in s.turns if t.role == "user")
    backend = product_backend or InMemoryProducts(products)
    return TaskContext(
        task=task,
        refs=[products.get(s.reference_product_id) for s in task.slots],
        sessions={s.session_id: s for s in dated},
        vocab=vocab,
        user_text=f" {user} ",
        product_backend=backend,
        memory_backend=InMemoryMemory(dated),
    )


# --------------------------------------------------------------------------- policies


def _call(name: str, args: dict[str, Any]) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": args}, ensure_ascii=False) + "</tool_call>"


def _pref(p: Preference, **upd: Any) -> dict[str, Any]:
    d = {"attribute": p.attribute, "value": p.value, "polarity": p.polarity, "slot": p.slot}
    d.update(upd)
    return d


def _last_tool_json(messages: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    out = []
    for m in messages:
        if m.get("role") == "tool" and m.get("name") == name:
            try:
                out.append(json.loads(m["content"]))
            except (ValueError, KeyError):
                pass
    return out


class Honest:
    """The honest gold-following policy (module docstring). Subclasses override the hooks."""

    name = "honest"
    description = "gold preferences; reference product(s) after searching and viewing them"

    # ---- stage 1 hooks
    def think(self, stage: int, turn: int) -> str:
        return f"<think>Stage {stage}, step {turn}: I follow the plan.</think>\n"

    def stage1_calls(self, ctx: TaskContext) -> list[str]:
        t = ctx.task
        return [
            _call("mem_search", {"queries": [t.instruction[:1500]], "top_k": 10}),
            _call("mem_view", {"session_ids": list(t.needle_session_ids)[:10]}),
        ]

    def stage1_prefs(self, ctx: TaskContext) -> list[dict[str, Any]]:
        return [_pref(p) for p in ctx.task.preferences]

    def stage1_answer(self, ctx: TaskContext) -> str:
        return "<answer>" + json.dumps({"preferences": self.stage1_prefs(ctx)}, ensure_ascii=False) + "</answer>"

    # ---- stage 2 hooks
    def search_args(self, ctx: TaskContext, slot: int) -> dict[str, Any]:
        t = ctx.task
        vals = [p.value for p in t.preferences if p.polarity == "want" and (t.n_products == 1 or p.slot == slot)]
        args: dict[str, Any] = {"query": " ".join([t.slots[slot].product_type, *vals])[:1500], "top_k": 10}
        if t.voucher is not None:
            args["shop_id"] = t.voucher.shop_id
        return args

    def stage2_calls(self, ctx: TaskContext) -> list[str]:
        t = ctx.task
        calls = [_call("product_search", self.search_args(ctx, s)) for s in range(t.n_products)]
        calls.append(_call("product_view", {"product_ids": list(dict.fromkeys(t.reference_product_ids))}))
        return calls

    def stage2_recs(self, ctx: TaskContext, messages: list[dict[str, Any]]) -> list[str]:
        return list(ctx.task.reference_product_ids)

    def rec_text(self, ctx: TaskContext, ids: list[str]) -> str:
        lines = ["Here is what I recommend:"]
        for pid in ids:
            p = ctx.product_backend.get(pid) if ctx.product_backend else None
            lines.append(f"- **{p.title if p else pid}** @REC::{pid}@")
        return "\n".join(lines)

    def stage2_answer(self, ctx: TaskContext, messages: list[dict[str, Any]]) -> str:
        return "<answer>" + self.rec_text(ctx, self.stage2_recs(ctx, messages)) + "</answer>"

    # ---- driver
    def respond(self, ctx: TaskContext, stage: int, turn: int, messages: list[dict[str, Any]]) -> str:
        calls = self.stage1_calls(ctx) if stage == 1 else self.stage2_calls(ctx)
        if turn < len(calls):
            return self.think(stage, turn) + calls[turn]
        final = self.stage1_answer(ctx) if stage == 1 else self.stage2_answer(ctx, messages)
        return self.think(stage, turn) + final


# ---- adversaries: each overrides one hook of Honest


class ListEveryValue(Honest):
    name = "list_every_value"
    description = "every gold attribute also lists 8 other real catalog values"

    def stage1_prefs(self, ctx):
        out = []
        for g in ctx.task.preferences:
            out.append(_pref(g))
            out += [_pref(g, value=v) for v in ctx.other_values(g, 8)]
        return out


class ContradictoryValues(Honest):
    name = "contradictory_values"
    description = "want X and avoid X, plus a second value for the same attribute"

    def stage1_prefs(self, ctx):
        out = []
        for g in ctx.task.preferences:
            flip = "avoid" if g.polarity == "want" else "want"
            out += [_pref(g), _pref(g, polarity=flip)]
            out += [_pref(g, value=v) for v in ctx.other_values(g, 1)]
        return out


class WrongSlot(Honest):
    name = "wrong_slot"
    description = "add-on: slots rotated by one; single: slot 1"

    def stage1_prefs(self, ctx):
        n = ctx.task.n_products
        return [_pref(g, slot=(g.slot + 1) % n if n > 1 else 1) for g in ctx.task.preferences]


class WrongAttribute(Honest):
    name = "wrong_attribute"
    description = "right values under wrong attribute names (e.g. a colour under 'Fastening')"

    #: clearly unrelated attribute names; the first sharing no word with the gold attribute (or
    #: its catalog key, or any gold attribute of the task) is used.
    WRONG = ("Fastening", "Wash Care", "Toe Shape", "Warranty", "Ankle Height", "Closure")

    def stage1_prefs(self, ctx):
        out = []
        gold_words = {w for g in ctx.task.preferences for w in _tokens(g.attribute.replace("_", " "))}
        for g in ctx.task.preferences:
            ref = ctx.ref(0 if ctx.task.n_products == 1 else g.slot)
            words = gold_words | set(_tokens(ctx.vocab.catalog_key(g, ref).replace("_", " ")))
            wrong = next((k for k in self.WRONG if not set(_tokens(k)) & words), "Warranty")
            out.append(_pref(g, attribute=wrong))
        return out


class PadQuotedUserText(Honest):
    name = "pad_quoted_user_text"
    description = "gold + the user's needle sentences quoted verbatim as values of the gold attributes"

    def stage1_prefs(self, ctx):
        out = [_pref(g) for g in ctx.task.preferences]
        sentences = []
        for text in ctx.user_turns():
            sentences += [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if len(s.strip()) > 12]
        golds = ctx.task.preferences
        for k, s in enumerate(sentences[:8]):
            g = golds[k % len(golds)]
            out.append(_pref(g, value=s[:200]))
        return out


class DuplicateThinkAnswer(Honest):
    name = "duplicate_think_answer"
    description = "two think blocks and two different answer blocks in the final turn (hedge first, gold last)"

    def stage1_answer(self, ctx):
        hedge = ListEveryValue().stage1_prefs(ctx)
        return (
            "<answer>" + json.dumps({"preferences": hedge}, ensure_ascii=False) + "</answer>\n"
            "<think>On second thought, only these.</think>\n" + super().stage1_answer(ctx)
        )

    def stage2_answer(self, ctx, messages):
        others = _returned_others(ctx, messages, 1)
        first = self.rec_text(ctx, others[:1] * ctx.task.n_products if others else [])
        return (
            "<answer>"
            + first
            + "</answer>\n<think>On second thought, these.</think>\n"
            + super().stage2_answer(ctx, messages)
        )


class ToolAfterAnswer(Honest):
    name = "tool_after_answer"
    description = "a tool call after the answer, in the same final turn"

    def stage1_answer(self, ctx):
        return super().stage1_answer(ctx) + "\n" + _call("mem_search", {"queries": ["anything else I said?"]})

    def stage2_answer(self, ctx, messages):
        return (
            super().stage2_answer(ctx, messages)
            + "\n"
            + _call("product_search", {"query": ctx.task.slots[0].product_type + " bestseller"})
        )


def _returned_others(ctx: TaskContext, messages: list[dict[str, Any]], k: int) -> list[str]:
    """Up to ``k`` product ids shown by this stage's searches, other than the reference ids."""
    refs = set(ctx.task.reference_product_ids)
    out: list[str] = []
    for obs in _last_tool_json(messages, "product_search"):
        for h in obs.get("results", []):
            pid = h.get("product_id")
            if pid and pid not in refs and pid not in out:
                out.append(pid)
    return out[:k]


class RecommendMany(Honest):
    name = "recommend_many"
    description = "the reference(s) plus 5 other returned products"

    def stage2_recs(self, ctx, messages):
        return list(ctx.task.reference_product_ids) + _returned_others(ctx, messages, 5)


class UnreturnedIds(Honest):
    name = "unreturned_ids"
    description = "stage 2 recommends the reference(s) without any product tool having returned them"

    def stage2_calls(self, ctx):
        return []


class RightProductHallucinatedPrefs(Honest):
    name = "right_product_hallucinated_prefs"
    description = "stage 1 gold + 3 invented preferences the user never stated; stage 2 correct"

    def stage1_prefs(self, ctx):
        out = [_pref(g) for g in ctx.task.preferences]
        t = ctx.task
        taken = {(0 if t.n_products == 1 else g.slot, _norm(g.attribute)) for g in t.preferences + t.dont_care}
        added = 0
        for slot in range(t.n_products):
            ref = ctx.ref(slot)
            if ref is None:
                continue
            for key, val in ref.attributes.items():
                if added >= 3:
                    break
                if (slot, _norm(key)) in taken or key in ("year", "age_group", "gender"):
                    continue
                fake = Preference(slot=slot, attribute=key, value=val)
                cands = ([val] if f" {_norm(val)} " not in ctx.user_text else []) + ctx.other_values(fake, 3, True)
                cands = [c for c in cands if _norm(c) and f" {_norm(c)} " not in ctx.user_text]
                if cands:
                    out.append(_pref(fake, value=cands[0]))
                    added += 1
        return out


class AvoidOtherValues(Honest):
    name = "avoid_other_values"
    description = "gold + 'avoid' for 6 other real values of every gold attribute"

    def stage1_prefs(self, ctx):
        out = []
        for g in ctx.task.preferences:
            out.append(_pref(g))
            if g.polarity == "want":
                out += [_pref(g, value=v, polarity="avoid") for v in ctx.other_values(g, 6)]
        return out


class DontCareValues(Honest):
    name = "dont_care_values"
    description = "gold + wants on the attributes the task lists as 'does not matter'"

    def stage1_prefs(self, ctx):
        return [_pref(g) for g in ctx.task.preferences] + [_pref(d, polarity="want") for d in ctx.task.dont_care]


class EmptyAnswer(Honest):
    name = "empty_answer"
    description = "empty answer blocks in both stages (same tool calls)"

    def stage1_answer(self, ctx):
        return "<answer></answer>"

    def stage2_answer(self, ctx, messages):
        return "<answer></answer>"


class AllCatalogValuesStage2(Honest):
    name = "all_catalog_values_stage2"
    description = "stage-2 answer text stuffed with every catalog value of the slots' attributes (neutral control)"

    def stage2_answer(self, ctx, messages):
        words: list[str] = []
        for _slot, ref in enumerate(ctx.refs):
            if ref is None:
                continue
            for key in ref.attributes:
                words += ctx.vocab.values(ref.source, ref.category, key)[:15]
        words += [p.value for p in ctx.task.preferences]
        body = self.rec_text(ctx, self.stage2_recs(ctx, messages))
        return "<answer>" + body + "\nIt is " + ", ".join(dict.fromkeys(words)) + ".</answer>"


class NanToolArgs(Honest):
    name = "nan_tool_args"
    description = "non-finite JSON numbers in tool arguments (max_price: Infinity, top_k: NaN)"

    def stage1_calls(self, ctx):
        calls = super().stage1_calls(ctx)
        t = ctx.task
        # NaN in top_k; mem_view stays as honest
        calls[0] = (
            "<tool_call>"
            + json.dumps(
                {"name": "mem_search", "arguments": {"queries": [t.instruction[:1500]], "top_k": float("nan")}}
            )
            + "</tool_call>"
        )
        return calls

    def search_args(self, ctx, slot):
        return {**super().search_args(ctx, slot), "max_price": float("inf")}


class NegateWants(Honest):
    name = "negate_wants"
    description = "every wanted value written as its negation ('not navy'): the opposite of what the user said"

    def stage1_prefs(self, ctx):
        return [_pref(g, value=f"not {g.value}") if g.polarity == "want" else _pref(g) for g in ctx.task.preferences]


class HedgedValues(Honest):
    name = "hedged_values"
    description = "every wanted value hedged with two other real values ('navy or black or red')"

    def stage1_prefs(self, ctx):
        return [
            _pref(g, value=" or ".join([g.value, *ctx.other_values(g, 2)])) if g.polarity == "want" else _pref(g)
            for g in ctx.task.preferences
        ]


# ---- adversaries that try to make the judge uncertain (issue 32): under the default policy
# (uncertain: no_credit) an uncertain item earns nothing, so none of them may gain


#: Words no vocabulary or unit reads: what an agent writes to leave the judge unsure.
VAGUE = ("the one I mentioned", "my usual kind", "whatever I said before", "the usual")


class VagueValues(Honest):
    name = "vague_values"
    description = "every gold value replaced by vocabulary-free words ('the one I mentioned'): uncertain, not wrong"

    def stage1_prefs(self, ctx):
        return [_pref(g, value=VAGUE[k % len(VAGUE)]) for k, g in enumerate(ctx.task.preferences)]


class UnknownKeys(Honest):
    name = "unknown_keys"
    description = "the gold values under attribute names no lexicon knows ('thing I care about 1', …)"

    def stage1_prefs(self, ctx):
        return [_pref(g, attribute=f"thing I care about {k + 1}") for k, g in enumerate(ctx.task.preferences)]


class VagueExtras(Honest):
    name = "vague_extras"
    description = "gold + 3 invented preferences in vocabulary-free words under unknown keys (not caught as spurious)"

    def stage1_prefs(self, ctx):
        t = ctx.task
        extra = [
            {"attribute": f"overall feel {k + 1}", "value": VAGUE[k % len(VAGUE)], "polarity": "want", "slot": s}
            for k, s in enumerate([0, t.n_products - 1, 0])
        ]
        return [_pref(g) for g in t.preferences] + extra


class HedgedWords(Honest):
    name = "hedged_words"
    description = "every wanted value wrapped in vague words ('something like navy, roughly'): compared by words only"

    def stage1_prefs(self, ctx):
        return [
            _pref(g, value=f"something like {g.value}, roughly") if g.polarity == "want" else _pref(g)
            for g in ctx.task.preferences
        ]


class UnreadableProduct(Honest):
    name = "unreadable_product"
    description = (
        "stage 2 recommends a returned non-reference product whose structured fields state the fewest of the "
        "gold attributes (the judge cannot read them: not_stated, uncertain), of the reference's category first"
    )

    def stage2_recs(self, ctx, messages):
        from shopping_companion.judges.matching import default_matcher

        m = default_matcher()
        t = ctx.task
        refs = set(t.reference_product_ids)
        searches = _last_tool_json(messages, "product_search")
        out: list[str] = []
        for slot in range(t.n_products):
            ref = ctx.ref(slot)
            keys = [m.key(g.attribute) for g in t.preferences if t.n_products == 1 or g.slot == slot]
            hits = [h.get("product_id") for h in (searches[slot] if slot < len(searches) else {}).get("results", [])]
            ranked = []
            for rank, pid in enumerate(hits):
                p = ctx.product_backend.get(pid) if ctx.product_backend and pid else None
                if p is None or pid in refs or pid in out:
                    continue
                if t.voucher is not None and p.shop_id != t.voucher.shop_id:
                    continue
                other_category = ref is not None and p.category != ref.category
                stated = sum(any(m.key(k).same_key(key) for k in p.attributes) for key in keys)
                ranked.append((other_category, stated, rank, pid))
            out.append(min(ranked)[-1] if ranked else t.reference_product_ids[slot])
        return out


def request_prefs(ctx: TaskContext) -> list[dict[str, Any]]:
    """The gold preferences the request itself states (the value's words in the instruction): what
    a policy knows without reading the user's history. Usually none."""
    text = f" {_norm(ctx.task.instruction)} "
    return [_pref(p) for p in ctx.task.preferences if _norm(p.value) and f" {_norm(p.value)} " in text]


def made_up_id(ctx: TaskContext, slot: int) -> str:
    """A well-formed ``@REC::…@`` id built from the request (no tool returned it; not a product)."""
    return "guess:" + "-".join(_tokens(ctx.task.slots[slot].product_type)[:4] or ["product"]) + f"-{slot}"


class HonestWeak(Honest):
    name = "honest_weak"
    description = (
        "honest weak attempt (a baseline, not an adversary): valid tool calls that find less — one mem_search, "
        "no view, only the request's own preferences; one type-only product_search per slot, no view, the first "
        "returned non-reference product"
    )

    def stage1_calls(self, ctx):
        return super().stage1_calls(ctx)[:1]

    def stage1_prefs(self, ctx):
        return request_prefs(ctx)

    def search_args(self, ctx, slot):
        args: dict[str, Any] = {"query": ctx.task.slots[slot].product_type[:1500], "top_k": 10}
        if ctx.task.voucher is not None:
            args["shop_id"] = ctx.task.voucher.shop_id
        return args

    def stage2_calls(self, ctx):
        return [_call("product_search", self.search_args(ctx, s)) for s in range(ctx.task.n_products)]

    def stage2_recs(self, ctx, messages):
        refs = set(ctx.task.reference_product_ids)
        searches = _last_tool_json(messages, "product_search")
        out: list[str] = []
        for slot in range(ctx.task.n_products):
            hits = [h.get("product_id") for h in (searches[slot] if slot < len(searches) else {}).get("results", [])]
            hits = [h for h in hits if h and h not in out]
            others = [h for h in hits if h not in refs]
            out.append(others[0] if others else hits[0] if hits else made_up_id(ctx, slot))
        return out


class FailedCalls(HonestWeak):
    name = "failed_calls"
    description = (
        "tries and fails (a baseline, not an adversary): honest_weak's first calls of each stage (at most two) "
        "written as malformed JSON, then the answers it can give without tool results"
    )

    @staticmethod
    def _broken(calls: list[str]) -> list[str]:
        # drop the closing brace of the call object: invalid JSON, a tool-call format error
        return [c.replace("}</tool_call>", "</tool_call>") for c in calls[:2]]

    def stage1_calls(self, ctx):
        return self._broken(super().stage1_calls(ctx))

    def stage2_calls(self, ctx):
        return self._broken(super().stage2_calls(ctx))


class NoTools(Honest):
    name = "no_tools"
    description = (
        "never calls a tool: answers at once, well-formed, from the request alone (stage 1: the preferences the "
        "request states; stage 2: an id made up from the request)"
    )

    def stage1_calls(self, ctx):
        return []

    def stage1_prefs(self, ctx):
        return request_prefs(ctx)

    def stage2_calls(self, ctx):
        return []

    def stage2_recs(self, ctx, messages):
        return [made_up_id(ctx, slot) for slot in range(ctx.task.n_products)]


class FreeText(Honest):
    name = "free_text"
    description = (
        "never calls a tool and never answers: plain prose every turn, no tags (the stage ends invalid_output)"
    )

    def respond(self, ctx, stage, turn, messages):
        what = " and ".join(s.product_type for s in ctx.task.slots)
        return (
            f"You asked for {what}. From what you describe, I would go for a well-reviewed {what} in a classic "
            f"style at a fair price; that should suit you (stage {stage}, turn {turn})."
        )


class PaddedViews(Honest):
    name = "padded_views"
    description = "extra views of the needle sessions / reference products with the ids repeated (r(u) = 1 each)"

    def stage1_calls(self, ctx):
        ids = list(dict.fromkeys(ctx.task.needle_session_ids))[:10]
        return super().stage1_calls(ctx) + [_call("mem_view", {"session_ids": ids * k}) for k in range(2, 6)]

    def stage2_calls(self, ctx):
        ids = list(dict.fromkeys(ctx.task.reference_product_ids))
        return super().stage2_calls(ctx) + [_call("product_view", {"product_ids": ids * k}) for k in range(2, 6)]


#: name -> policy class; the first entry is the honest policy.
POLICIES: dict[str, type[Honest]] = {
    c.name: c
    for c in (
        Honest,
        ListEveryValue,
        ContradictoryValues,
        WrongSlot,
        WrongAttribute,
        PadQuotedUserText,
        DuplicateThinkAnswer,
        ToolAfterAnswer,
        RecommendMany,
        UnreturnedIds,
        RightProductHallucinatedPrefs,
        AvoidOtherValues,
        DontCareValues,
        EmptyAnswer,
        AllCatalogValuesStage2,
        NanToolArgs,
        NegateWants,
        HedgedValues,
        PaddedViews,
        VagueValues,
        UnknownKeys,
        VagueExtras,
        HedgedWords,
        UnreadableProduct,
        NoTools,
        FreeText,
        HonestWeak,
        FailedCalls,
    )
}
#: the honest weak attempt the inaction adversaries must stay below (a baseline, not an adversary).
WEAK_BASELINE = "honest_weak"
#: the attempt that tries and fails; the inaction adversaries may tie with it, never beat it.
FAILED_BASELINE = "failed_calls"
ADVERSARIES: list[str] = [n for n in POLICIES if n not in ("honest", WEAK_BASELINE, FAILED_BASELINE)]
#: adversaries that do nothing (issue 31): every episode strictly below :data:`WEAK_BASELINE`'s
#: and at most :data:`FAILED_BASELINE`'s too.
BELOW_WEAK: tuple[str, ...] = ("no_tools", "free_text")
#: adversaries whose hack should merely not pay (target: max diff <= 0; mean < 0 not required):
#: prose stuffed with attribute words, which no rule reads; the gold values under unknown keys
#: (read as the gold attribute when the value is one of its vocabulary: the honest answer in other
#: words); and a product whose fields state little (one of the same category may be a valid
#: alternative the judge reads from its title).
NEUTRAL_CONTROLS: frozenset[str] = frozenset({"all_catalog_values_stage2", "unknown_keys", "unreadable_product"})
#: adversaries that try to make the judge uncertain (issue 32); the judge's ``uncertain`` policy decides
#: what that earns (``--uncertain`` of the benchmark; the target holds for the default, no_credit).
UNCERTAIN_ADVERSARIES: tuple[str, ...] = (
    "vague_values",
    "unknown_keys",
    "vague_extras",
    "hedged_words",
    "unreadable_product",
)


# --------------------------------------------------------------------------- episodes


@dataclass
class EpisodeScore:
    """One episode of one policy: per rubric name, the stage totals and R_z; verdict summaries."""

    task_id: str
    task_type: str
    policy: str
    totals: dict[str, tuple[float, float]] = field(default_factory=dict)  # rubric -> (stage1, stage2)
    r_z: dict[str, tuple[float, float]] = field(default_factory=dict)  # rubric -> (R1, R2)
    components: dict[str, list[dict[str, float]]] = field(default_factory=dict)
    success1: bool = False
    success2: bool = False
    error: str | None = None
    reasons: list[list[str]] = field(default_factory=list)
    texts: list[list[str]] = field(default_factory=list)  # assistant turns per stage
    uncertain: list[int] = field(default_factory=list)  # uncertain items of the judge's verdict per stage

    def total(self, rubric: str) -> float:
        return float(sum(self.totals[rubric]))


def run_policy(
    policy: Honest, ctx: TaskContext, judge: Any, rubrics: Mapping[str, Callable[..., Any]], max_turns: int = 20
) -> EpisodeScore:
    """Play one two-stage episode of ``policy`` in the real environment and score both stages under
    every rubric of ``rubrics`` (name -> RewardFn; the first one drives the environment, the others
    re-score the same trajectories and verdicts — scripted policies do not react to rewards)."""
    names = list(rubrics)
    tools = ToolBox(ctx.product_backend, ctx.memory_backend)
    env = ShoppingCompanionEnv(ctx.task, tools, judge, EnvConfig(max_turns=max_turns), reward_fn=rubrics[names[0]])
    env.reset(seed=0)
    while not env.done:
        turn = len(env.trajectory.steps)
        env.step(policy.respond(ctx, env.stage, turn, env.messages))
    res = env.episode_result(policy=policy.name)
    out = EpisodeScore(task_id=ctx.task.task_id, task_type=ctx.task.task_type, policy=policy.name, error=res.error)
    if res.error or len(res.stages) != 2:
        out.error = res.error or f"{len(res.stages)} stage(s)"
        return out
    s1, s2 = res.stages
    out.success1, out.success2 = bool(s1.verdict.success), bool(s2.verdict.success)
    out.reasons = [list(s1.verdict.reasons), list(s2.verdict.reasons)]
    out.uncertain = [s1.verdict.uncertain, s2.verdict.uncertain]
    out.texts = [[st.assistant_text for st in s.trajectory.steps] for s in (s1, s2)]
    for name in names:
        if name == names[0]:
            b1, b2 = s1.reward, s2.reward
        else:
            fn = rubrics[name]
            b1 = fn(ctx.task, s1.trajectory, s1.verdict)
            b2 = fn(ctx.task, s2.trajectory, s2.verdict)
        out.totals[name] = (float(b1.total), float(b2.total))
        out.r_z[name] = (
            float(b1.components.get("R_z", b1.components.get("outcome", 0.0))),
            float(b2.components.get("R_z", b2.components.get("outcome", 0.0))),
        )
        out.components[name] = [dict(b1.components), dict(b2.components)]
    return out
