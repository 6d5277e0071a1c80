"""Settings of a benchmark build (Shopping Companion §4, App. A.1), as one validated pydantic model.

A YAML file (``configs/benchmark/*.yaml``) holds the same keys; :func:`load_synth_config` reads it.
The defaults are a small, fast build (the quickstart); ``configs/benchmark/shopping_companion.yaml``
holds the paper-scale settings (1,000 tasks, ~56 sessions and ~106k tokens per user).
"""

from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from shopping_companion.benchmark.synthesis.common import SynthError
from shopping_companion.types import ABILITIES, Ability

__all__ = ["GeneratorConfig", "LLMEndpoint", "SynthConfig", "load_synth_config", "resolve_abilities"]


def resolve_abilities(value: Any) -> list[Ability]:
    """``"all"`` → every ability; a list (or comma-separated text) of ability names → those, in
    :data:`~shopping_companion.types.ABILITIES` order. Raises ``ValueError`` naming the field and the
    allowed values for an unknown name or an empty list."""
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",") if v.strip()]
    names = [str(v) for v in (value or [])]
    if names == ["all"]:
        return list(ABILITIES)
    bad = [v for v in names if v not in ABILITIES]
    if bad or not names:
        what = f"unknown {bad}" if bad else "empty"
        raise ValueError(f"abilities: {what}; allowed: 'all' or a list of {', '.join(ABILITIES)}")
    return [a for a in ABILITIES if a in names]


class _Cfg(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _check_weights(v: dict[int, float], name: str, lo: int = 1) -> dict[int, float]:
    if not v:
        raise ValueError(f"{name}: needs at least one count with a weight")
    for k, w in v.items():
        if k < lo:
            raise ValueError(f"{name}: counts must be >= {lo}, got {k}")
        if w < 0:
            raise ValueError(f"{name}: weights must be >= 0, got {w} for {k}")
    if sum(v.values()) <= 0:
        raise ValueError(f"{name}: weights must not all be 0")
    return dict(sorted(v.items()))


class LLMEndpoint(_Cfg):
    """One OpenAI-compatible endpoint. The key is read from the environment variable
    ``api_key_env`` (never stored in the config or the manifest)."""

    model: str
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"


class GeneratorConfig(_Cfg):
    """Which generator writes instructions and preference dialogues (§4 steps 2–3).

    ``kind``: ``template`` (offline default, our phrasing banks) or ``llm`` (any OpenAI-compatible
    endpoint; tasks are spread round-robin over ``endpoints``, as the paper spread its synthesis
    over four models). Template settings: ``paraphrase_p``: probability that a value with a
    paraphrase in the lexicon is said indirectly (0 = every value verbatim, for an ablation);
    ``situation_p``: probability of a life-event opener; ``other_unit_p``: probability that a
    numeric limit is said in another unit. LLM settings: sampling ``temperature`` / ``top_p`` / ``max_tokens``;
    ``max_invalid``: attempts per call to obtain valid JSON (the error is fed back each time);
    ``timeout_s`` / ``http_retries``: per HTTP request; ``conflict_scope``: which haystack
    sessions the LLM checks for conflicts (``cued``: sessions holding a first-person preference
    statement, ``all``: every session as in the paper, ``none``: rules only);
    ``cache_path``: SQLite cache of every call keyed by a content hash (default
    ``<cache dir>/llm/generations.sqlite``); ``max_consecutive_failures``: stop the build when
    this many generator calls in a row failed (a broken endpoint should not burn the budget).
    """

    kind: Literal["template", "llm"] = "template"
    paraphrase_p: float = Field(default=0.95, ge=0, le=1)
    situation_p: float = Field(default=0.5, ge=0, le=1)
    other_unit_p: float = Field(default=0.7, ge=0, le=1)
    endpoints: list[LLMEndpoint] = Field(default_factory=list)
    temperature: float = Field(default=0.7, ge=0, le=2)
    top_p: float = Field(default=0.95, gt=0, le=1)
    max_tokens: int = Field(default=2048, ge=64)
    max_invalid: int = Field(default=3, ge=1, le=10)
    timeout_s: float = Field(default=120, gt=0)
    http_retries: int = Field(default=3, ge=0)
    conflict_scope: Literal["cued", "all", "none"] = "cued"
    cache_path: str | None = None
    max_consecutive_failures: int = Field(default=8, ge=1)

    @model_validator(mode="after")
    def _llm_needs_endpoint(self) -> "GeneratorConfig":
        if self.kind == "llm" and not self.endpoints:
            raise ValueError("generator.endpoints: kind 'llm' needs at least one {model, base_url} endpoint")
        return self

    def describe(self) -> dict[str, Any]:
        """What the manifest records (no keys)."""
        if self.kind == "template":
            return {"kind": "template"}
        return {
            "kind": "llm",
            "endpoints": [{"model": e.model, "base_url": e.base_url} for e in self.endpoints],
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_tokens": self.max_tokens,
            "max_invalid": self.max_invalid,
            "conflict_scope": self.conflict_scope,
        }


class SynthConfig(_Cfg):
    """Settings of a build. Units: prices in the product's currency, tokens by
    :func:`~shopping_companion.benchmark.synthesis.common.count_tokens`, dates ISO.

    Size and splits
        ``n_tasks`` tasks, of which ``round(n_tasks * addon_share)`` add-on deals, the rest
        single-product tasks (default 0.5, the paper's half-and-half; the CLI and the YAML configs use
        the same default); ``test_fraction`` of each type goes to the test split. ``seed``
        makes the build reproducible (each task's RNG is seeded from ``(seed, index)``).
    Step 1 — products and vouchers
        a reference product needs a product type and at least ``min_attributes`` phrasable real
        attributes (numeric limits such as a width count), and a price for an add-on deal (and for
        a single-product task unless ``allow_unpriced``). Reference products are spread over the
        catalog's sources: each task type is split over the sources that can host it with weights
        ``source_balance`` (``sqrt`` of the eligible count, ``uniform``, ``proportional``; ``none``
        draws product types over the whole catalog as before), each source capped at
        ``max_source_share`` of the tasks (see :func:`~.breadth.source_quotas`); ``sources``
        restricts reference products to the named sources (the whole catalog stays searchable). ``single_preferences``: weights of the number of wanted
        features of a single task (paper mean 2.1); ``addon_products``: weights of the number
        of products in a deal (2–4); ``addon_preferences``: weights of wanted features per deal
        product (paper mean 5.6 per deal); at most ``max_dont_care`` does-not-matter features
        per product. Voucher: ``discount_share`` = (min, max) discount as a share of the minimum
        spend; the budget exceeds the discounted total of the reference bundle by at most
        ``budget_slack`` of its total (and is always below the undiscounted total).
    Step 3 — preference dialogues
        ``single_needles``: weights of the number of needle sessions of a single task (an
        add-on deal gets one needle per one or two products). ``distractors_per_task``: topic
        distractor sessions per task (about the same product type or domain, stating no
        preference) written by the generator and placed in the haystack. ``verbatim_weight``
        multiplies the sampling weight of a feature the generator can only state verbatim (no
        paraphrase for it; 1 = no preference for paraphrasable features).
    Step 4 — haystack
        per user ``sessions_per_user`` real sessions on average (std ``sessions_std``; the needle
        sessions come on top, so the paper's 56.4 sessions per user is 54.6 here) and, when
        ``tokens_per_user`` is set, about that many tokens in the whole history (std
        ``tokens_std``, met within ``token_tolerance`` relative); ``sharegpt_share`` of the
        sessions come from long chats (ShareGPT), the rest from SGD. Pool sessions need at least
        ``min_session_turns`` turns and at most ``max_session_tokens`` tokens; ``pool_size``
        (None = all) draws a fixed seeded subset of the pool that all users share (bounds the
        embedding cost of evaluation). Dates start at ``start_date`` plus 0–60 days and advance
        1–``max_gap_days`` days per session.
    Step 5 — verification
        reference products must be in the BM25 top ``searchable_top_k``; alternatives are counted
        up to ``alternatives_cap``; a task is re-drawn up to ``max_attempts`` times, then dropped;
        conflicting haystack sessions are swapped for at most ``max_conflict_rounds`` rounds.
        ``allow_shortfall``: when a task type cannot be built at all from the inputs (e.g. no shop
        has enough products for add-on deals) build the rest and record the shortfall instead of
        stopping.
    Abilities
        ``abilities``: the memory abilities the tasks test (``all`` or a list of ``extraction``,
        ``knowledge_update``, ``multi_session``, ``temporal``, ``abstention``; default extraction
        only): each task gets one, as many of each as possible (:mod:`.abilities`).
    Statistics
        ``minilm_tasks``: tasks (a seeded sample) on which the MiniLM needle top-1 share is
        measured (default 10; None = all, 0 = off; needs an embedder).
    """

    n_tasks: int = Field(default=50, ge=1)
    addon_share: float = Field(default=0.5, ge=0, le=1)
    test_fraction: float = Field(default=0.2, ge=0, le=1)
    seed: int = 0
    generator: GeneratorConfig = Field(default_factory=GeneratorConfig)
    # step 1
    source_balance: Literal["sqrt", "uniform", "proportional", "none"] = "sqrt"
    max_source_share: float = Field(default=0.35, gt=0, le=1)
    sources: list[str] | None = None
    allow_unpriced: bool = True
    min_attributes: int = Field(default=2, ge=1)
    single_preferences: dict[int, float] = Field(default_factory=lambda: {1: 0.25, 2: 0.45, 3: 0.30})
    addon_products: dict[int, float] = Field(default_factory=lambda: {2: 0.3, 3: 0.4, 4: 0.3})
    addon_preferences: dict[int, float] = Field(default_factory=lambda: {1: 0.25, 2: 0.5, 3: 0.25})
    max_dont_care: int = Field(default=3, ge=0)
    discount_share: tuple[float, float] = (0.06, 0.15)
    budget_slack: float = Field(default=0.03, ge=0, le=0.5)
    # step 3
    single_needles: dict[int, float] = Field(default_factory=lambda: {1: 0.6, 2: 0.4})
    distractors_per_task: int = Field(default=2, ge=0, le=10)
    verbatim_weight: float = Field(default=0.1, ge=0, le=1)
    # step 4
    sessions_per_user: float = Field(default=42, ge=1)
    sessions_std: float = Field(default=0.0, ge=0)
    tokens_per_user: int | None = Field(default=None, ge=100)
    tokens_std: float = Field(default=0.0, ge=0)
    token_tolerance: float = Field(default=0.01, gt=0, le=0.5)
    sharegpt_share: float = Field(default=0.4, ge=0, le=1)
    max_session_tokens: int = Field(default=1500, ge=20)
    min_session_turns: int = Field(default=2, ge=1)
    pool_size: int | None = Field(default=None, ge=1)
    start_date: str = "2023-01-02"
    max_gap_days: int = Field(default=6, ge=1)
    # step 5
    searchable_top_k: int = Field(default=50, ge=1, le=50)
    alternatives_cap: int = Field(default=1000, ge=1)
    max_attempts: int = Field(default=30, ge=1)
    max_conflict_rounds: int = Field(default=5, ge=1)
    allow_shortfall: bool = False
    # abilities
    abilities: list[Ability] = Field(default_factory=lambda: ["extraction"])
    # statistics
    minilm_tasks: int | None = Field(default=10, ge=0)

    @field_validator("abilities", mode="before")
    @classmethod
    def _abilities(cls, v: Any) -> list[Ability]:
        return resolve_abilities(v)

    @field_validator("single_preferences", "addon_preferences", "single_needles")
    @classmethod
    def _w1(cls, v: dict[int, float], info) -> dict[int, float]:
        return _check_weights(v, info.field_name)

    @field_validator("addon_products")
    @classmethod
    def _w2(cls, v: dict[int, float]) -> dict[int, float]:
        out = _check_weights(v, "addon_products", lo=2)
        if max(out) > 6:
            raise ValueError("addon_products: at most 6 products per deal")
        return out

    @field_validator("discount_share")
    @classmethod
    def _disc(cls, v: tuple[float, float]) -> tuple[float, float]:
        lo, hi = v
        if not (0 < lo <= hi < 1):
            raise ValueError(f"discount_share: need 0 < min <= max < 1, got {v}")
        return v

    @field_validator("start_date")
    @classmethod
    def _date(cls, v: str) -> str:
        from datetime import date

        try:
            date.fromisoformat(v)
        except ValueError as e:
            raise ValueError(f"start_date: not an ISO date YYYY-MM-DD: {v!r}") from e
        return v

    @property
    def n_addon(self) -> int:
        return round(self.n_tasks * self.addon_share)

    @property
    def n_single(self) -> int:
        return self.n_tasks - self.n_addon


def load_synth_config(
    path: str | os.PathLike[str] | None, overrides: dict[str, Any] | None = None, sets: list[str] | None = None
) -> tuple[SynthConfig, dict[str, Any]]:
    """Read a YAML build config (``None``: the defaults) through the one config loader
    (:func:`shopping_companion.config.load_model`). Returns ``(config, extras)`` where ``extras``
    holds the keys that are not synthesis settings (``out``: the default output directory,
    ``description``).

    ``overrides`` (command-line flags; ``None`` values skipped) replace top-level keys, then
    ``sets`` (``"dotted.key=value"``) apply. Raises :class:`SynthError` (a ``DataError``) naming the
    file and each bad field with its allowed values (missing file, bad YAML, unknown or invalid keys).
    """
    from shopping_companion.config import load_config, load_model
    from shopping_companion.errors import ConfigError

    try:
        data = load_config(path) if path is not None else {}
    except ConfigError as e:
        raise SynthError(f"benchmark {e}") from None
    extras = {k: data.pop(k) for k in ("out", "description") if k in data}
    try:
        cfg = load_model(SynthConfig, data, sets or [], {k: v for k, v in (overrides or {}).items()})
    except ConfigError as e:
        where = f"benchmark config {str(path)!r}: " if path is not None else "benchmark config: "
        raise SynthError(where + str(e)) from None
    return cfg, extras
