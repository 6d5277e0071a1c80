"""The assistant side: Dialogue, Recommend, Reason and Reply agents and the five variants
(paper §3.1-3.6, Eqs. 1-5, Table 2, Table 7; memory ablation of Table 11).

One turn t of the multi-agent pipeline (Eqs. 2-5)::

    K^d_t = R_d(q_t)  K^p_t = R_p(q_t)  K^r_t = R_r(q_t)            (retrieval, no LLM call)
    c_t = Dialogue(q_t, summaries c_1..c_{t-1}, K^d_t)                -> "[Round t] ..." summary
    a_t = Recommend(q_t, c_t, K^p_t, K^r_t)                           -> {"ranking": [ids], "rationale"}
    e_t = Reason(q_t, c_t, a_t, K^r_t)                                -> preference-aware explanation
    y_t = Reply(q_t, c_t, a_t, e_t, K^r_t)                            -> the only visible output

Variants (:data:`VARIANTS`, Table 2): ``baseline`` (no retrieval; one Reply call seeing only q_t —
Table 7 reports one role call for it), ``textrag`` (all retrieval, product views e^m, e^r),
``norev`` (no R_r, views e^m, e^r, e^d), ``single`` (all retrieval and views, one call doing every
role), ``full`` (all retrieval and views, four calls). Memory modes (:data:`MEMORY_MODES`, Table 11)
change what the Dialogue agent sees: ``full`` (running summaries + top-1 prior turn), ``none``,
``summary`` (summaries only), ``top1`` (top-1 prior turn only). ``single`` has no Dialogue agent:
it sees the top-1 prior turn under ``full``/``top1``.

Role engines: :class:`LLMRoles` sends each role's messages (prompts of our own wording) to a
:class:`~shopping_companion.llm.base.ChatBackend` (any OpenAI-compatible endpoint).
:class:`ExtractiveRoles` is a deterministic rule-based baseline for offline runs: it composes each
role's output from the same structured evidence (retrieval scores, review affinities, shared
words); it is not a language model and reports say so. Both receive the same prompts, which are
always built and can be recorded (``record_messages``) — the leakage tests assert on every one.

The Recommend agent's JSON is validated against the candidate ids; an invalid reply falls back to
the retrieval order (``fallback=True`` in the call record). Recommended ids of ``single`` and
``baseline`` are the candidate ASINs their reply mentions, in order.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from shopping_companion.errors import ConfigError
from shopping_companion.llm.base import ChatBackend, Sampling
from shopping_companion.personalization.data import ItemRecord, Review
from shopping_companion.personalization.retrieval import (
    DialogueMemory,
    ProductIndex,
    ReviewIndex,
    TextEmbedder,
    cosine,
    encode_query,
)
from shopping_companion.personalization.text import content_tokens

__all__ = [
    "Assistant",
    "ExtractiveRoles",
    "LLMRoles",
    "MEMORY_MODES",
    "RoleCall",
    "RoleEngine",
    "TurnRecord",
    "VARIANTS",
    "VariantSpec",
    "parse_memory_modes",
    "parse_variants",
]

ROLES = ("dialogue", "recommend", "reason", "reply", "single", "baseline")
MEMORY_MODES: tuple[str, ...] = ("full", "none", "summary", "top1")


class VariantSpec(BaseModel):
    """One assistant configuration of Table 2."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    dialogue_retrieval: bool
    product_retrieval: bool
    review_retrieval: bool
    views: tuple[str, ...]
    pipeline: Literal["multi", "single", "reply_only"]


_VIEWS = ("meta", "review", "image")

#: Table 2's variants by name.
VARIANTS: dict[str, VariantSpec] = {
    name: VariantSpec(
        name=name,
        dialogue_retrieval=dialogue,
        product_retrieval=product,
        review_retrieval=review,
        views=views,
        pipeline=pipeline,
    )
    # name, R_d, R_p, R_r, product views, pipeline
    for name, dialogue, product, review, views, pipeline in [
        ("baseline", False, False, False, (), "reply_only"),
        ("textrag", True, True, True, ("meta", "review"), "multi"),
        ("norev", True, True, False, _VIEWS, "multi"),
        ("single", True, True, True, _VIEWS, "single"),
        ("full", True, True, True, _VIEWS, "multi"),
    ]
}


def _parse_names(spec: str | list[str], allowed: Collection[str], field: str) -> list[str]:
    """``"all"`` (every name of ``allowed``) or comma-separated names -> the names, in the order
    given; an unknown or empty one raises :class:`ConfigError` naming ``field`` and the allowed ones."""
    names = (
        list(allowed)
        if spec in ("all", ["all"])
        else [s.strip() for s in (spec.split(",") if isinstance(spec, str) else spec) if s.strip()]
    )
    bad = [n for n in names if n not in allowed]
    if bad or not names:
        raise ConfigError(f"{field}: unknown {bad or names!r}; allowed: all or {', '.join(allowed)}")
    return names


def parse_variants(spec: str | list[str]) -> list[str]:
    """``"all"`` or comma-separated names of :data:`VARIANTS` -> names; :class:`ConfigError` names the allowed ones."""
    return _parse_names(spec, VARIANTS, "variants")


def parse_memory_modes(spec: str | list[str]) -> list[str]:
    """``"all"`` or comma-separated :data:`MEMORY_MODES` -> modes; :class:`ConfigError` names the allowed ones."""
    return _parse_names(spec, MEMORY_MODES, "memory")


class RoleCall(BaseModel):
    """One role call of a turn: role name, wall seconds, prompt size in characters, output text,
    whether the output was unusable and replaced (``fallback``), and optionally the messages."""

    model_config = ConfigDict(extra="forbid")
    role: str
    latency_s: float
    prompt_chars: int
    output: str
    fallback: bool = False
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    messages: list[dict[str, Any]] | None = None


class TurnRecord(BaseModel):
    """Everything about turn t (Eq. 1: q_t, c_t, a_t, e_t, y_t plus the retrieved evidence).

    ``retrieved``: K^p_t ASINs (best first); ``recommended``: a_t ASINs; ``user_reviews``: K^r_t
    review ids; ``prior_turn``: the 1-based turn R_d returned; ``latency_s``: wall time of the whole
    turn (retrieval and every role call).
    """

    model_config = ConfigDict(extra="forbid")
    turn: int
    query: str
    reply: str
    summary: str | None = None
    rationale: str | None = None
    explanation: str | None = None
    retrieved: list[str] = Field(default_factory=list)
    retrieved_scores: list[float] = Field(default_factory=list)
    recommended: list[str] = Field(default_factory=list)
    user_reviews: list[str] = Field(default_factory=list)
    prior_turn: int | None = None
    calls: list[RoleCall] = Field(default_factory=list)
    latency_s: float = 0.0


@dataclass
class Candidate:
    """A retrieved product with its Eq. 7 score and its affinities to the user's retrieved reviews
    (mean cosine) and to the turn's dialogue summary (cosine)."""

    item: ItemRecord
    score: float
    review_affinity: float = 0.0
    context_affinity: float = 0.0

    def line(self) -> str:
        it = self.item
        bits = [f"id {it.asin}", it.title]
        if it.brand:
            bits.append(f"brand {it.brand}")
        if it.price is not None:
            bits.append(f"${it.price:.2f}")
        if it.average_rating is not None:
            bits.append(f"rated {it.average_rating:g}/5")
        extra = " ".join(it.features)[:200] or (it.description or "")[:200]
        if it.image_description:
            extra += f" Looks: {it.image_description[:160]}"
        return " | ".join(bits) + (f" | {extra}" if extra else "") + f" | match {self.score:.3f}"


@dataclass
class RoleContext:
    """Structured inputs of a role call (what :class:`ExtractiveRoles` reads)."""

    round: int
    query: str
    summaries: list[str] = field(default_factory=list)
    prior: dict[str, Any] | None = None
    summary: str | None = None
    candidates: list[Candidate] = field(default_factory=list)
    reviews: list[tuple[Review, float]] = field(default_factory=list)
    ranking: list[str] = field(default_factory=list)
    rationale: str | None = None
    explanation: str | None = None


class RoleEngine(Protocol):
    """``run(role, messages, ctx) -> (text, usage)``; ``kind`` is ``"llm"`` or ``"extractive"``."""

    name: str
    kind: str

    def run(self, role: str, messages: list[dict[str, Any]], ctx: RoleContext) -> tuple[str, dict[str, Any]]: ...


class LLMRoles:
    """Role engine over a chat backend; each call is one ``backend.chat`` with the role's messages."""

    kind = "llm"

    def __init__(self, backend: ChatBackend, sampling: Sampling | None = None) -> None:
        self.backend = backend
        self.sampling = sampling or Sampling(temperature=0.7, top_p=0.95, top_k=None, max_tokens=1024)
        self.name = f"llm:{getattr(backend, 'model', None) or backend.name}"

    def run(self, role: str, messages: list[dict[str, Any]], ctx: RoleContext) -> tuple[str, dict[str, Any]]:
        m = self.backend.chat(messages, None, self.sampling)
        return m.content or "", {"prompt_tokens": m.prompt_tokens, "completion_tokens": m.completion_tokens}


# --------------------------------------------------------------------------- prompts (our wording)

_SYS = {
    "dialogue": (
        "You are the conversation tracker of a shopping assistant. Write a short running note (two to four sentences) "
        "about what the shopper wants so far. The note must begin with the round marker you are given, e.g. "
        "'[Round 3]'. Use earlier round notes and the related earlier exchange when they are provided; keep "
        "preferences, constraints and open questions, drop small talk."
    ),
    "recommend": (
        "You are the product selector of a shopping assistant. You get the shopper's question, the conversation note, "
        "candidate products found for the question and the shopper's own past reviews that relate to it. Learn from "
        "those reviews what the shopper likes (features, brands, styles, price level, fit) and what put them off, then "
        "order the candidates from best to worst fit for this shopper, using the conversation note to drop or demote "
        "items that clash with what was said. Use only the information given. Reply with one JSON object: "
        '{"ranking": ["<candidate id>", ...], "rationale": "<one or two sentences on how the reviews changed the order>"}.'
    ),
    "reason": (
        "You are the explainer of a shopping assistant. For the products selected in this round, explain why they suit "
        "this shopper: name the patterns in the shopper's past reviews (what they praised, what they criticised) and tie "
        "each selected product to them and to the current question. Only use what is given; if something is missing, say "
        "that it is missing."
    ),
    "reply": (
        "You are the voice of a shopping assistant and write the message the shopper reads. If the round is 1, open "
        "with a short friendly greeting; in later rounds do not greet again, continue naturally from the conversation. "
        "Never print the round marker. Present three to five of the selected products (fewer only if fewer were "
        "selected), each with its id in parentheses, and connect each one to what the shopper showed they like or "
        "dislike in their own reviews. Be warm, concise and concrete, and end by offering further help."
    ),
    "single": (
        "You are a shopping assistant. In one reply, do everything: keep track of the conversation, choose the best "
        "products among the candidates for this shopper using their past reviews, explain briefly why, and answer. If "
        "the round is 1, greet the shopper briefly; otherwise do not greet again. Present three to five candidates "
        "(fewer only if fewer exist), each with its id in parentheses, linked to the shopper's reviews, and end by "
        "offering further help."
    ),
    "baseline": "You are a friendly shopping assistant. Answer the shopper's question helpfully and concisely.",
}


def _reviews_block(reviews: list[tuple[Review, float]], max_chars: int = 400) -> str:
    if not reviews:
        return "(none)"
    return "\n".join(f"- {r.rating:g} stars, {r.title.strip() or 'untitled'}: {r.text[:max_chars]}" for r, _ in reviews)


def _cands_block(cands: list[Candidate]) -> str:
    return "\n".join(f"- {c.line()}" for c in cands) if cands else "(none)"


def _selected(ctx: RoleContext) -> list[Candidate]:
    """The candidates of ``ctx.ranking``, in its order."""
    return [c for a in ctx.ranking for c in ctx.candidates if c.item.asin == a]


#: The sections of a role's user message, by name (our wording).
_SECTIONS: dict[str, Callable[[RoleContext], str]] = {
    "round": lambda ctx: f"Round: {ctx.round}",
    "question": lambda ctx: f"Shopper's question: {ctx.query}",
    "note": lambda ctx: f"Conversation note: {ctx.summary}",
    "candidates": lambda ctx: "Candidate products:\n" + _cands_block(ctx.candidates),
    "selected": lambda ctx: "Selected products, best first:\n" + _cands_block(_selected(ctx)),
    "rationale": lambda ctx: f"Selector's rationale: {ctx.rationale}",
    "why": lambda ctx: f"Why they fit: {ctx.explanation}",
    "reviews": lambda ctx: "Shopper's related past reviews:\n" + _reviews_block(ctx.reviews),
    "short reviews": lambda ctx: "Shopper's related past reviews:\n" + _reviews_block(ctx.reviews, 250),
}
#: The sections of each role's user message after its role-specific opening, in order.
_ROLE_SECTIONS: dict[str, tuple[str, ...]] = {
    "recommend": ("question", "note", "candidates", "reviews"),
    "reason": ("question", "note", "selected", "rationale", "reviews"),
    "reply": ("round", "note", "question", "selected", "why", "short reviews"),
    "single": ("candidates", "reviews", "question"),
}


def build_messages(role: str, ctx: RoleContext, memory: str) -> list[dict[str, Any]]:
    """The role's chat messages for this turn (what an LLM engine sends)."""
    if role not in ROLES:
        raise ConfigError(f"role: {role!r} not in {ROLES}")
    parts: list[str] = []
    if role == "dialogue":
        parts.append(f"Round marker to start with: [Round {ctx.round}]")
        if memory in ("full", "summary"):
            parts.append(
                "Notes of earlier rounds:\n"
                + ("\n".join(ctx.summaries) if ctx.summaries else "(none, this is the first round)")
            )
        if memory in ("full", "top1"):
            parts.append(
                "Most related earlier exchange:\n"
                + (f"Shopper: {ctx.prior['query']}\nAssistant: {ctx.prior['reply'][:800]}" if ctx.prior else "(none)")
            )
        parts.append(f"Shopper's new question: {ctx.query}")
    elif role == "single":
        parts.append(f"Round: {ctx.round}")
        if ctx.prior:
            parts.append(
                f"Most related earlier exchange:\nShopper: {ctx.prior['query']}\nAssistant: {ctx.prior['reply'][:800]}"
            )
    elif role == "baseline":
        parts.append(ctx.query)
    parts += [_SECTIONS[name](ctx) for name in _ROLE_SECTIONS.get(role, ())]
    return [{"role": "system", "content": _SYS[role]}, {"role": "user", "content": "\n\n".join(parts)}]


# --------------------------------------------------------------------------- extractive baseline engine


def _shared_words(a: str, b: str, n: int = 3) -> list[str]:
    ta = set(content_tokens(a))
    out: list[str] = []
    for t in content_tokens(b):
        if t in ta and t not in out and len(t) > 3:
            out.append(t)
    return out[:n]


class ExtractiveRoles:
    """Deterministic rule-based role engine (a baseline, not a language model; module docstring).

    Recommend orders candidates by ``score + review_weight * review_affinity + context_weight *
    context_affinity`` (ties by retrieval order); the other roles fill fixed sentence patterns with
    the evidence.
    """

    kind = "extractive"
    name = "extractive-baseline"

    def __init__(self, review_weight: float = 0.5, context_weight: float = 0.25) -> None:
        self.review_weight = review_weight
        self.context_weight = context_weight

    def _rank(self, ctx: RoleContext) -> list[Candidate]:
        idx = {id(c): i for i, c in enumerate(ctx.candidates)}
        return sorted(
            ctx.candidates,
            key=lambda c: (
                -(c.score + self.review_weight * c.review_affinity + self.context_weight * c.context_affinity),
                idx[id(c)],
            ),
        )

    def _why(self, c: Candidate, ctx: RoleContext) -> str:
        best = max(
            ctx.reviews, key=lambda rv: (cosine_words(c.item.metadata_text(), rv[0].content), rv[1]), default=None
        )
        if best is None:
            return f"it matches your question (match {c.score:.2f})"
        r = best[0]
        words = _shared_words(c.item.metadata_text(), r.content)
        tie = f", sharing {', '.join(words)}" if words else ""
        mood = "you liked" if r.rating >= 4 else "you were unhappy with"
        return f'it is close to the item {mood} in your {r.rating:g}-star review "{r.title.strip()[:60]}"{tie}'

    def run(self, role: str, messages: list[dict[str, Any]], ctx: RoleContext) -> tuple[str, dict[str, Any]]:
        if role == "dialogue":
            s = f'[Round {ctx.round}] The shopper asks: "{ctx.query}".'
            earlier = [
                re.sub(r"^\[Round \d+\] The shopper asks: ", "", x).split('" ')[0].strip('".') for x in ctx.summaries
            ]
            if earlier and any("Notes of earlier rounds" in m["content"] for m in messages):
                s += " Earlier they asked: " + "; ".join(f'"{e[:70]}"' for e in earlier[-4:]) + "."
            if ctx.prior and any("Most related earlier exchange" in m["content"] for m in messages):
                s += f' Most related earlier question (round {ctx.prior["turn"]}): "{ctx.prior["query"][:80]}".'
            return s, {}
        if role == "recommend":
            ranked = self._rank(ctx)
            rat = "Ordered by match to the question"
            if ctx.reviews:
                r = ctx.reviews[0][0]
                rat += f' and by closeness to your own reviews, led by your {r.rating:g}-star review "{r.title.strip()[:60]}"'
            return json.dumps({"ranking": [c.item.asin for c in ranked], "rationale": rat + "."}), {}
        if role == "reason":
            chosen = [c for a in ctx.ranking for c in ctx.candidates if c.item.asin == a][:5]
            lines = [f"{c.item.title[:80]} ({c.item.asin}): {self._why(c, ctx)}." for c in chosen]
            if not ctx.reviews:
                lines.append("No past reviews of the shopper were available for this round.")
            return " ".join(lines) or "No products were selected.", {}
        if role in ("reply", "single"):
            cands = (
                self._rank(ctx)
                if role == "single"
                else [c for a in ctx.ranking for c in ctx.candidates if c.item.asin == a]
            )
            cands = cands[:5]
            head = "Hi there! " if ctx.round == 1 else "Following up on what we discussed, "
            if not cands:
                return head + "I could not find matching products for that yet. Could you tell me a bit more?", {}
            body = [f"{i}. {c.item.title[:100]} ({c.item.asin}) - {self._why(c, ctx)}." for i, c in enumerate(cands, 1)]
            return (
                head
                + f'here are {len(cands)} picks for "{ctx.query}":\n'
                + "\n".join(body)
                + "\nWould you like more options or details on any of these?"
            ), {}
        # baseline: no evidence, no memory
        words = [
            w for w in content_tokens(ctx.query) if w not in {"recommend", "would", "suggest", "think", "which", "what"}
        ]
        return (
            "Hi there! For " + (" ".join(words[:6]) or "that") + ", compare a few well-reviewed options, check the "
            "product details and the return policy, and pick what fits your needs. Let me know if you'd like more help!"
        ), {}


def cosine_words(a: str, b: str) -> float:
    """Jaccard overlap of content-token sets (the extractive engine's tie-in measure), in [0, 1]."""
    ta, tb = set(content_tokens(a)), set(content_tokens(b))
    return len(ta & tb) / len(ta | tb) if ta and tb else 0.0


# --------------------------------------------------------------------------- the assistant

_ROUND_RE = re.compile(r"^\s*\[Round (\d+)\]")
_ASIN_RE = re.compile(r"\b[A-Z0-9]{10}\b")


class Assistant:
    """One dialogue of one variant and memory mode (module docstring).

    Args:
        variant: a :class:`VariantSpec` (or its name).
        memory: one of :data:`MEMORY_MODES`.
        engine: role engine (LLM or extractive).
        embedder: query embedder (same space as the indexes).
        products: the category's :class:`ProductIndex`; ``items`` its records by ASIN.
        reviews: the user's :class:`ReviewIndex` (visible reviews only).
        k_d, k_p, k_r: retrieval depths (paper: 1, 5, 5).
        record_messages: keep every role's messages in the turn records.
    """

    def __init__(
        self,
        variant: VariantSpec | str,
        memory: str,
        engine: RoleEngine,
        embedder: TextEmbedder,
        products: ProductIndex,
        items: dict[str, ItemRecord],
        reviews: ReviewIndex,
        *,
        k_d: int = 1,
        k_p: int = 5,
        k_r: int = 5,
        record_messages: bool = False,
    ) -> None:
        self.variant = VARIANTS[variant] if isinstance(variant, str) else variant
        if memory not in MEMORY_MODES:
            raise ConfigError(f"memory: {memory!r} not in {MEMORY_MODES}")
        self.memory = memory
        self.engine = engine
        self.embedder = embedder
        self.products = products
        self.items = items
        self.reviews = reviews
        self.k_d, self.k_p, self.k_r = k_d, k_p, k_r
        self.record_messages = record_messages
        self.dialogue = DialogueMemory(embedder)
        self.summaries: list[str] = []
        self.turns: list[TurnRecord] = []

    def _call(self, role: str, ctx: RoleContext, rec: TurnRecord) -> str:
        msgs = build_messages(role, ctx, self.memory)
        t0 = time.perf_counter()
        text, usage = self.engine.run(role, msgs, ctx)
        rec.calls.append(
            RoleCall(
                role=role,
                latency_s=time.perf_counter() - t0,
                prompt_chars=sum(len(m["content"]) for m in msgs),
                output=text,
                prompt_tokens=usage.get("prompt_tokens"),
                completion_tokens=usage.get("completion_tokens"),
                messages=msgs if self.record_messages else None,
            )
        )
        return text

    def _candidates(self, qv: np.ndarray, reviews: list[tuple[Review, float]]) -> list[Candidate]:
        hits = self.products.retrieve(qv, self.variant.views, self.k_p)
        rv = [self.reviews.vecs[self.reviews.position[r.review_id]] for r, _ in reviews]
        out = []
        for h in hits:
            v = self.products.vector(h["asin"], "meta")
            aff = float(np.mean(cosine(v, np.stack(rv)))) if rv else 0.0
            out.append(Candidate(self.items[h["asin"]], h["score"], aff))
        return out

    def turn(self, query: str) -> TurnRecord:
        """Run one turn and return its record (also appended to :attr:`turns`)."""
        t0 = time.perf_counter()
        v = self.variant
        rnd = len(self.turns) + 1
        rec = TurnRecord(turn=rnd, query=query, reply="")
        qv = encode_query(self.embedder, query)
        ctx = RoleContext(round=rnd, query=query)
        if v.pipeline == "reply_only":
            rec.reply = self._call("baseline", ctx, rec)
            rec.recommended = [a for a in dict.fromkeys(_ASIN_RE.findall(rec.reply)) if a in self.items]
        else:
            use_prior = v.dialogue_retrieval and (self.memory in ("full", "top1") if v.pipeline == "single" else True)
            if use_prior:
                prior = self.dialogue.retrieve(qv, self.k_d)
                ctx.prior = prior[0] if prior else None
                rec.prior_turn = ctx.prior["turn"] if ctx.prior else None
            if v.review_retrieval:
                ctx.reviews = self.reviews.retrieve(qv, self.k_r)
                rec.user_reviews = [r.review_id for r, _ in ctx.reviews]
            ctx.candidates = self._candidates(qv, ctx.reviews) if v.product_retrieval else []
            rec.retrieved = [c.item.asin for c in ctx.candidates]
            rec.retrieved_scores = [round(c.score, 6) for c in ctx.candidates]
            if v.pipeline == "single":
                rec.reply = self._call("single", ctx, rec)
                rec.recommended = [a for a in dict.fromkeys(_ASIN_RE.findall(rec.reply)) if a in set(rec.retrieved)]
            else:
                ctx.summaries = list(self.summaries) if self.memory in ("full", "summary") else []
                if self.memory not in ("full", "top1"):
                    ctx.prior = None
                    rec.prior_turn = None
                summary = self._call("dialogue", ctx, rec).strip()
                m = _ROUND_RE.match(summary)
                if not m or int(m.group(1)) != rnd:
                    summary = f"[Round {rnd}] " + _ROUND_RE.sub("", summary).strip()
                    rec.calls[-1].fallback = True
                ctx.summary = rec.summary = summary
                sv = encode_query(self.embedder, summary)
                for c in ctx.candidates:
                    c.context_affinity = float(cosine(sv, self.products.vector(c.item.asin, "meta")[None, :])[0])
                raw = self._call("recommend", ctx, rec)
                ranking, rationale = self._parse_ranking(raw, rec.retrieved)
                if ranking is None:
                    ranking, rationale = list(rec.retrieved), None
                    rec.calls[-1].fallback = True
                ctx.ranking, ctx.rationale = ranking, rationale
                rec.recommended, rec.rationale = ranking, rationale
                ctx.explanation = rec.explanation = self._call("reason", ctx, rec)
                rec.reply = self._call("reply", ctx, rec)
                self.summaries.append(summary)
        self.dialogue.add(query, rec.reply, qv)
        rec.latency_s = time.perf_counter() - t0
        self.turns.append(rec)
        return rec

    @staticmethod
    def _parse_ranking(raw: str, allowed: list[str]) -> tuple[list[str] | None, str | None]:
        from shopping_companion.judges.llm import parse_json_reply

        try:
            obj = parse_json_reply(raw)
        except ValueError:
            return None, None
        rk = obj.get("ranking")
        if not isinstance(rk, list):
            return None, None
        ids = [x for x in dict.fromkeys(str(i).strip() for i in rk) if x in allowed]
        if not ids:
            return None, None
        rat = obj.get("rationale")
        return ids, rat if isinstance(rat, str) else None

    def run(self, queries: list[str]) -> list[TurnRecord]:
        """Run every query in order; returns the turn records."""
        for q in queries:
            self.turn(q)
        return self.turns

    def prompts(self) -> list[str]:
        """Every message text sent so far (needs ``record_messages=True``)."""
        return [m["content"] for t in self.turns for c in t.calls for m in (c.messages or [])]
