"""The judge of a run, configured once and built once (docs/architecture.md, judges): the judge
settings (:class:`JudgeSpec`, and :class:`RewardJudge` for a reward spec, which adds how a training
process reaches an LLM judge), :func:`ping_judge` before anything slow is loaded, and
:func:`build_judge`: the rule judge, an LLM judge, or both in a cascade, the classes taken from
the :data:`~shopping_companion.registry.JUDGES` registry. Used by ``shopcomp eval``, ``shopcomp
sft collect``, the tool service and the GRPO reward workers alike."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Callable, ClassVar, Literal

from pydantic import Field, PrivateAttr, model_validator

from shopping_companion.assembly.endpoints import Endpoint, check_reachable, endpoint_time_options, scrub_url
from shopping_companion.errors import ConfigError
from shopping_companion.registry import JUDGES
from shopping_companion.types import Session

__all__ = [
    "DEFAULT_MAX_IN_FLIGHT",
    "BoundedJudge",
    "JudgeSpec",
    "RewardJudge",
    "build_judge",
    "make_rule_judge",
    "ping_judge",
]

#: Default bound on concurrent LLM-judge requests per process (one rollout worker).
DEFAULT_MAX_IN_FLIGHT = 16


class JudgeSpec(Endpoint):
    """Who scores a stage: ``rule`` (deterministic, offline; the default reward) or ``llm``
    (an OpenAI-compatible ``model`` at ``base_url``, key in the environment variable
    ``api_key_env``, never in a file). ``cascade`` (``llm`` only; default true): the rule judge
    decides every stage and only stages with an uncertain item go to the LLM, which decides just
    those items (docs/judge.md, "Cascade"); false: every stage goes to the LLM (the paper's
    protocol). An evaluation's ``judge`` group; an LLM judge built from it uses the endpoint time
    limits of :func:`~shopping_companion.assembly.endpoints.endpoint_time_options` and caches its
    verdicts in the run directory."""

    kind: Literal["rule", "llm"] = "rule"
    cascade: bool = True
    #: the reward spec this judge came from (set by ``EpisodeConfig``), None: given directly
    _from_spec: str | None = PrivateAttr(default=None)
    #: what a missing ``model`` message suggests
    _MODEL_HINT: ClassVar[str] = "--judge-model"

    @property
    def base_url_field(self) -> str:
        """Where ``base_url`` was set, for error messages: ``judge.base_url (--judge-base-url)``, or
        the reward spec's ``judge.base_url`` when the judge came from a reward spec file."""
        if self._from_spec:
            return f"judge.base_url of the reward config {self._from_spec}"
        return "judge.base_url (--judge-base-url)"

    @model_validator(mode="after")
    def _llm_needs_model(self) -> JudgeSpec:
        if self.kind == "llm" and not self.model:
            raise ValueError(f"judge.model is required with judge.kind=llm ({self._MODEL_HINT})")
        return self

    def describe(self, uncertain: str | None = None) -> str:
        """One line for logs and reports (no key, the URL without credentials); ``uncertain``:
        what the rule judge's uncertain items earn, named for a rule judge when given."""
        if self.kind == "rule":
            return (
                f"rule (deterministic, offline; uncertain items: {uncertain})"
                if uncertain
                else "rule (deterministic, offline)"
            )
        where = f"{self.model} at {scrub_url(self.base_url) or 'the provider default endpoint'}"
        return f"rule, uncertain stages to llm: {where}" if self.cascade else f"llm: {where}"

    def client_options(self, cache_path: str | Path | None) -> dict[str, Any]:
        """Keyword arguments of the LLM judge's ``from_openai`` beyond model, endpoint and lookup:
        the verdict cache at ``cache_path`` and the environment's time limits."""
        times = endpoint_time_options()
        return {
            "cache_path": cache_path,
            "http_deadline_s": times.get("deadline_s"),
            "breaker_threshold": times.get("breaker_threshold"),
        }

    def in_flight_bound(self) -> int | None:
        """At most this many concurrent LLM-judge calls per process (None: no bound)."""
        return None


class RewardJudge(JudgeSpec):
    """The judge of a reward spec: a :class:`JudgeSpec` plus how a training process's many
    concurrent trajectories reach an LLM judge.

    ``max_in_flight`` (>= 1): judge requests one process sends at the same time (the others wait;
    rollout workers run many trajectories concurrently). ``timeout_s`` (> 0): seconds of one HTTP
    attempt; ``max_retries`` (>= 0): re-asks after an invalid reply, a timeout or a retryable
    error. ``cache_path``: an SQLite file for the reply cache, shared by processes (put it on
    shared storage to share it between nodes); ``None``: an in-memory cache per process. Replies
    are cached under the hash of (model, sampling, prompt), so a repeated trajectory is judged once.
    """

    max_in_flight: int = Field(default=DEFAULT_MAX_IN_FLIGHT, ge=1)
    timeout_s: float = Field(default=60.0, gt=0.0)
    max_retries: int = Field(default=2, ge=0)
    cache_path: str | None = None
    _MODEL_HINT: ClassVar[str] = "the judge model's served name"

    def client_options(self, cache_path: str | Path | None = None) -> dict[str, Any]:
        """As :meth:`JudgeSpec.client_options`, from this spec's fields: one HTTP attempt of
        ``timeout_s`` (the judge re-asks itself, ``max_retries`` times, with backoff) and the
        reply cache at ``cache_path`` of the spec (its directory made), ``cache_path`` given here
        ignored."""
        path = None
        if self.cache_path:
            path = Path(self.cache_path).expanduser()
            path.parent.mkdir(parents=True, exist_ok=True)
        return {
            "http_timeout_s": self.timeout_s,
            "http_retries": 0,
            "cache_path": str(path) if path else None,
            "max_retries": self.max_retries,
            "timeout_s": self.timeout_s,
        }

    def in_flight_bound(self) -> int | None:
        return self.max_in_flight


def ping_judge(spec: JudgeSpec, field: str | None = None) -> str:
    """Check an LLM judge's endpoint answers (a models listing or a one-token request) before
    anything slow is loaded; returns :meth:`JudgeSpec.describe`. Raises
    :class:`~shopping_companion.errors.BackendError` naming ``field`` (default
    :attr:`JudgeSpec.base_url_field`). Nothing to check for the rule judge."""
    if spec.kind == "llm":
        from shopping_companion.llm.openai_backend import OpenAIBackend

        with OpenAIBackend(
            spec.model, base_url=spec.base_url, api_key_env=spec.api_key_env, name=f"judge:{spec.model}"
        ) as probe:
            check_reachable(probe, field or spec.base_url_field)
    return spec.describe()


def build_judge(
    spec: JudgeSpec,
    lookup: Callable[[list[str]], Mapping[str, Any]],
    sessions: Mapping[str, Any] | None,
    embedder: Any,
    uncertain: str = "no_credit",
    *,
    cache_path: str | Path | None = None,
) -> tuple[Any, str]:
    """``(judge, description)``: the rule judge (:func:`make_rule_judge`: the value matcher's
    MiniLM fallback over ``embedder``, its uncertain items scored as ``uncertain`` says), or an
    LLM judge (``spec.client_options(cache_path)``; wrapped in :class:`BoundedJudge` when the spec
    bounds calls in flight) — behind the rule judge in a
    :class:`~shopping_companion.judges.cascade.CascadeJudge` when ``spec.cascade``. An endpoint
    that fails gives failed verdicts (never a 0 reward). Raises :class:`ConfigError` for bad
    settings."""
    from shopping_companion.judges.cascade import CascadeJudge

    rule = make_rule_judge(
        lookup, sessions if sessions is None or isinstance(sessions, dict) else dict(sessions), embedder, uncertain
    )
    if spec.kind == "rule":
        return rule, spec.describe(uncertain)
    llm = JUDGES.get("llm").from_openai(
        str(spec.model), spec.base_url, api_key_env=spec.api_key_env, lookup=lookup, **spec.client_options(cache_path)
    )
    bound = spec.in_flight_bound()
    judge = BoundedJudge(llm, bound) if bound is not None else llm
    return (CascadeJudge(rule, judge) if spec.cascade else judge), spec.describe()


#: one semaphore per (process, bound): every BoundedJudge of a process with the same bound shares it
_SEMAPHORES: dict[int, threading.BoundedSemaphore] = {}
_SEM_LOCK = threading.Lock()


def _semaphore(n: int) -> threading.BoundedSemaphore:
    with _SEM_LOCK:
        if n not in _SEMAPHORES:
            _SEMAPHORES[n] = threading.BoundedSemaphore(n)
        return _SEMAPHORES[n]


class BoundedJudge:
    """A judge whose :meth:`judge` runs at most ``max_in_flight`` at a time in this process (the
    rest wait in their own threads; the environment judges in a worker thread, so the event loop
    of a rollout worker never blocks). ``in_flight`` / ``peak_in_flight``: current and highest
    number of concurrent calls seen. Other attributes are the wrapped judge's."""

    def __init__(self, judge: Any, max_in_flight: int = DEFAULT_MAX_IN_FLIGHT) -> None:
        if max_in_flight < 1:
            raise ConfigError(f"judge.max_in_flight: must be >= 1, got {max_in_flight}")
        self.inner = judge
        self.max_in_flight = int(max_in_flight)
        self.name = str(getattr(judge, "name", "judge"))
        self._sem = _semaphore(self.max_in_flight)
        self._lock = threading.Lock()
        self.in_flight = 0
        self.peak_in_flight = 0

    def judge(self, task: Any, trajectory: Any, *args: Any, **kwargs: Any) -> Any:
        with self._sem:
            with self._lock:
                self.in_flight += 1
                self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
            try:
                return self.inner.judge(task, trajectory, *args, **kwargs)
            finally:
                with self._lock:
                    self.in_flight -= 1

    def __getattr__(self, name: str) -> Any:  # stats, match_products, close, ...
        return getattr(self.inner, name)


def make_rule_judge(
    lookup: Callable[[list[str]], dict[str, Any]],
    sessions: dict[str, Session] | None = None,
    embedder: Any = None,
    uncertain: str = "no_credit",
) -> Any:
    """The rule judge over ``lookup`` (product records) and ``sessions`` (stage-1 grounding), with the
    value matcher's embedding fallback over ``embedder`` (MiniLM, cached) when one is given, scoring
    its uncertain items as ``uncertain`` says (``no_credit`` | ``credit`` | ``unscored``)."""
    from shopping_companion.judges.matching.similarity import embedding_similarity

    sim = embedding_similarity(embedder) if embedder is not None else None
    return JUDGES.get("rule")(lookup, sessions=sessions, similarity=sim, uncertain=uncertain)
