"""User-side query trajectories (paper §3.3, App. A.5 Figure 4).

Each target user gets 5-8 preference-oriented questions about the target's product type, asked
"for me": the user never names the product (no ASIN, brand or three consecutive title words) and
never states the hidden preferences (no profile phrase of four words or more). The same trajectory
is replayed for every assistant variant.

* :class:`TemplateQueryGenerator` (offline default): seeded choice among our templates, with
  decision points taken from the aspects the user's profile and the category's reviews care about.
* :class:`LLMQueryGenerator`: an LLM sees the target's metadata and the profile and returns
  ``{"product_type": ..., "questions": [...]}`` (strict JSON, retries, cache); questions that break
  the rules above are rejected with the reason and asked again.

:func:`check_queries` enforces the rules for both generators.
"""

from __future__ import annotations

import hashlib
import random
import re
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from shopping_companion.personalization.data import ItemRecord
from shopping_companion.personalization.llmjson import JSONAsker
from shopping_companion.personalization.profiles import PROFILE_FIELDS, UserProfile
from shopping_companion.personalization.text import (
    ASPECTS,
    GENERIC_ASPECTS,
    STOPWORDS,
    aspects_in,
    tokens,
    with_article,
)
from shopping_companion.errors import QueryRuleError  # noqa: F401 - re-exported

__all__ = [
    "LLMQueryGenerator",
    "QueryGenerator",
    "QueryRuleError",
    "QueryTrajectory",
    "TemplateQueryGenerator",
    "check_queries",
]

MIN_Q, MAX_Q = 5, 8


class QueryTrajectory(BaseModel):
    """The user's questions for one case, in order; ``generator`` names who wrote them."""

    model_config = ConfigDict(extra="forbid")
    case_id: str
    product_type: str
    queries: list[str] = Field(min_length=MIN_Q, max_length=MAX_Q)
    generator: str


_FIRST_PERSON = re.compile(r"\b(me|my|i|i'm|i've|mine|myself)\b", re.I)


_ASPECT_WORDS = frozenset(w for a in ASPECTS for w in a.split()) | {"values", "value", "criticised", "stars", "star"}


def _profile_phrases(profile: UserProfile | None, n: int = 4) -> set[str]:
    out: set[str] = set()
    if profile is None:
        return out
    for f in PROFILE_FIELDS:
        v = getattr(profile, f)
        if not v:
            continue
        toks = [t for t in tokens(re.sub(r'"[^"]*"', " ", v))]
        for i in range(len(toks) - n + 1):
            gram = toks[i : i + n]
            if sum(t not in STOPWORDS and t not in _ASPECT_WORDS for t in gram) >= 2:
                out.add(" ".join(gram))
    return out


def check_queries(queries: list[str], item: ItemRecord, profile: UserProfile | None = None) -> None:
    """Raise :class:`QueryRuleError` unless there are 5-8 distinct questions, each in the first
    person, none naming the target (ASIN, brand, three consecutive title content words) and none
    repeating a profile phrase of four words (module docstring)."""
    if not MIN_Q <= len(queries) <= MAX_Q:
        raise QueryRuleError(f"questions: need {MIN_Q}-{MAX_Q}, got {len(queries)}")
    if len({q.strip().lower() for q in queries}) != len(queries):
        raise QueryRuleError("questions: must be distinct")
    title_toks = [t for t in tokens(item.title) if t not in STOPWORDS]
    trigrams = (
        {" ".join(title_toks[i : i + 3]) for i in range(len(title_toks) - 2)}
        if item.title_source != "reviews"
        else set()
    )
    brand = " ".join(tokens(item.brand or ""))
    phrases = _profile_phrases(profile)
    for i, q in enumerate(queries, 1):
        qt = tokens(q)
        joined = " ".join(t for t in qt if t not in STOPWORDS)
        full = " ".join(qt)
        if not _FIRST_PERSON.search(q):
            raise QueryRuleError(f"question {i}: must ask for the user ('me', 'my', 'I'): {q!r}")
        if item.asin.lower() in q.lower():
            raise QueryRuleError(f"question {i}: names the target's ASIN: {q!r}")
        if brand and len(brand) > 2 and f" {brand} " in f" {full} ":
            raise QueryRuleError(f"question {i}: names the target's brand {item.brand!r}: {q!r}")
        hit = next((g for g in trigrams if f" {g} " in f" {joined} "), None)
        if hit:
            raise QueryRuleError(f"question {i}: repeats the target's title words {hit!r}: {q!r}")
        ph = next((p for p in phrases if f" {p} " in f" {full} "), None)
        if ph:
            raise QueryRuleError(f"question {i}: states a hidden profile phrase {ph!r}: {q!r}")


class QueryGenerator(Protocol):
    """``generate(case_id, item, profile, product_type, category_aspects) -> QueryTrajectory``."""

    name: str

    def generate(
        self, case_id: str, item: ItemRecord, profile: UserProfile, product_type: str, category_aspects: list[str]
    ) -> QueryTrajectory: ...


_OPENERS = [
    "Which {pt} would you recommend for me?",
    "I'm looking for {apt}. What would suit me?",
    "Can you suggest a few {pt} options that fit my usual taste?",
    "What {pt} do you think I would enjoy?",
]
_ASPECT_Q = [
    "How should I think about {a} when picking {apt} for myself?",
    "Which {pt} options would work best for me when it comes to {a}?",
    "Given what you know about me, what matters most about {a} in {apt}?",
    "For me, which {pt} strikes the right balance on {a}?",
    "Could you point me to {apt} that would not disappoint me on {a}?",
]
_BUDGET_Q = [
    "Which {pt} would give me the best value for my money?",
    "What price range of {pt} makes sense for someone like me?",
]
_GIFT_Q = ["If I wanted {apt} as a gift from me to a friend with tastes like mine, what would you pick?"]
_CLOSERS = [
    "Out of everything we discussed, which {pt} should I go for?",
    "Based on my usual tastes, which one would you finally pick for me?",
    "Can you narrow it down to the single {pt} that suits me best?",
]


class TemplateQueryGenerator:
    """Offline question templates (ours; module docstring). ``seed`` fixes the choices per case."""

    name = "template"

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def generate(
        self, case_id: str, item: ItemRecord, profile: UserProfile, product_type: str, category_aspects: list[str]
    ) -> QueryTrajectory:
        h = hashlib.sha256(f"{self.seed}:{case_id}".encode()).digest()
        rng = random.Random(int.from_bytes(h[:8], "big"))
        n = rng.randint(MIN_Q, MAX_Q)
        prof_aspects = [
            a
            for a, _ in aspects_in(
                " ".join(filter(None, [profile.quality_priorities, profile.dislikes, profile.pain_points]))
            ).most_common()
        ]
        aspects = list(dict.fromkeys(prof_aspects + category_aspects + ["quality", "value", "ease of use"]))
        item_aspects = (
            set(aspects_in(item.metadata_text())) if item.title_source != "reviews" else set(category_aspects)
        )
        aspects = [a for a in aspects if a in ASPECTS and a != "value" and (a in GENERIC_ASPECTS or a in item_aspects)]
        pt = product_type
        apt = with_article(pt)
        qs = [rng.choice(_OPENERS).format(pt=pt, apt=apt)]
        templates = _ASPECT_Q[:]
        rng.shuffle(templates)
        middle: list[str] = []
        for i, a in enumerate(aspects[: n - 2]):
            middle.append(templates[i % len(templates)].format(pt=pt, apt=apt, a=a))
        extras = [rng.choice(_BUDGET_Q).format(pt=pt)] + [g.format(pt=pt, apt=apt) for g in _GIFT_Q]
        while len(middle) < n - 2 and extras:
            middle.insert(rng.randrange(len(middle) + 1), extras.pop(0))
        if not any("value" in q or "price" in q for q in middle) and len(middle) >= 3:
            middle[rng.randrange(1, len(middle))] = rng.choice(_BUDGET_Q).format(pt=pt)
        qs += middle[: n - 2]
        qs.append(rng.choice(_CLOSERS).format(pt=pt))
        qs = list(dict.fromkeys(qs))
        fill = [t.format(pt=pt, apt=apt, a=a) for t in _ASPECT_Q for a in ("quality", "durability", "appearance")]
        while len(qs) < MIN_Q:
            q = fill.pop(0)
            if q not in qs:
                qs.insert(-1, q)
        check_queries(qs, item, profile)
        return QueryTrajectory(case_id=case_id, product_type=pt, queries=qs, generator=self.name)


class _LLMQueries(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    product_type: str = Field(min_length=2, max_length=60)
    questions: list[str]

    @field_validator("questions")
    @classmethod
    def _rules(cls, v: list[str], info: ValidationInfo) -> list[str]:
        ctx = info.context or {}
        if "item" in ctx:
            try:
                check_queries(v, ctx["item"], ctx.get("profile"))
            except QueryRuleError as e:
                raise ValueError(str(e)) from None
        return v


_Q_SYSTEM = (
    "You write the questions a shopper types into a shopping assistant. The shopper is still browsing: they have not "
    "seen any specific item, and they ask the assistant to recommend things for them. Reply with one JSON object only."
)


def query_prompt(item: ItemRecord, profile: UserProfile, product_type_hint: str) -> list[dict[str, str]]:
    """The LLM question prompt (our wording)."""
    user = (
        "Hidden context (never mention it directly):\n"
        f"One item the assistant could end up recommending:\n{item.metadata_text(900)}\n\n"
        f"What we know about the shopper's long-term preferences:\n{profile.as_text()}\n\n"
        f"Write {MIN_Q} to {MAX_Q} questions, in order, that this shopper asks while looking for a "
        f"{product_type_hint} (or a better general name for this kind of product, taken from the item above).\n"
        "Rules:\n"
        "- every question asks for a recommendation or advice for the shopper personally (use 'me', 'my' or 'I');\n"
        "- never give the item's name, brand, model or id, and never copy three title words in a row;\n"
        "- do not spell out the preferences above; instead ask about the decisions where knowing them would change "
        "the answer (for example which features, materials, sizes or price level to favour);\n"
        "- only touch attributes that this kind of product actually has, judging from the item text;\n"
        "- sound natural, and let later questions build on earlier ones.\n"
        'Return {"product_type": "<short generic name>", "questions": ["...", "..."]}.'
    )
    return [{"role": "system", "content": _Q_SYSTEM}, {"role": "user", "content": user}]


class LLMQueryGenerator:
    """Questions by an LLM (module docstring)."""

    name = "llm"

    def __init__(self, asker: JSONAsker) -> None:
        self.asker = asker

    def generate(
        self, case_id: str, item: ItemRecord, profile: UserProfile, product_type: str, category_aspects: list[str]
    ) -> QueryTrajectory:
        r = self.asker.ask(
            query_prompt(item, profile, product_type), _LLMQueries, context={"item": item, "profile": profile}
        )
        return QueryTrajectory(case_id=case_id, product_type=r.product_type, queries=r.questions, generator=self.name)
