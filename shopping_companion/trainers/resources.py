"""What an RL rollout worker needs to build :class:`~shopping_companion.envs.env.ShoppingCompanionEnv`
episodes: the benchmark's tasks and sessions, the product index, the embedder, the judge and the
reward rubric — loaded once per process and shared by every trajectory of that process.

verl instantiates one agent-loop object per trajectory (and TRL calls its rollout function once per
batch), so heavy services cannot live on those objects. :func:`get_resources` caches one
:class:`EnvResources` per :class:`ResourceSpec` per process; per-trajectory state (the environment,
its token buffers) always lives in the caller's own scope.

Tests and notebooks that already hold the services build :class:`EnvResources` directly and make
it visible to agent loops with :func:`register_resources` (the loop names it in its config).

Per-sample scoring deadline: :meth:`EnvResources.make_env` with ``scoring_deadline_s`` gives the
environment a :class:`ScoringDeadline` in place of the judge and the reward function. Every judge
and reward call of that sample (both stages) then shares one budget of wall-clock seconds; a call
still running when the budget is spent is abandoned (it finishes in the background, its result is
dropped) and raises :class:`ScoringDeadlineError`, which the environment records as a judge failure,
so the sample is not scored (the trainers give it no gradient and count it as
``deadline_missed``) and the training step goes on.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping

from shopping_companion.llm.bounded import CallTimeout, call_within
from shopping_companion.llm.breaker import deadline_or_none
from shopping_companion.types import Session, Task
from shopping_companion.errors import ScoringDeadlineError  # noqa: F401 - re-exported

__all__ = [
    "DEFAULT_SCORING_DEADLINE_S",
    "ResourceSpec",
    "EnvResources",
    "ScoringDeadline",
    "ScoringDeadlineError",
    "check_scoring_deadline",
    "get_resources",
    "register_resources",
    "registered_resources",
]

#: Default per-sample budget (wall-clock seconds) for judging and rewarding one GRPO trajectory.
DEFAULT_SCORING_DEADLINE_S = 60.0


def check_scoring_deadline(value: Any, field: str = "scoring_deadline_s") -> float | None:
    """``value`` as a deadline in seconds: a finite number > 0, or None (no deadline). Raises
    ``ValueError`` naming ``field`` otherwise."""
    return deadline_or_none(value, field)


class ScoringDeadline:
    """The judge and reward function of ONE sample, sharing a budget of ``seconds`` wall-clock
    seconds (> 0) over all their calls (both stages of a stage-2 row).

    Used by the environment as its ``judge`` (``judge(task, trajectory) -> Verdict``, ``name`` of
    the wrapped judge) and ``reward_fn`` (:meth:`reward`). Each call runs in its own daemon thread;
    the caller waits at most the budget left. When it is spent, the call is abandoned (left to
    finish in the background; its result is dropped), :attr:`missed` becomes True and
    :class:`ScoringDeadlineError` is raised (a :class:`JudgeFailedError`: the environment records
    the sample as unscored, never as 0). Once missed, later calls fail at once. :attr:`used_s` is
    the budget spent so far. Exceptions of the wrapped calls propagate unchanged.
    """

    def __init__(self, judge: Any, reward_fn: Callable[..., Any], seconds: float) -> None:
        self.seconds = check_scoring_deadline(seconds, "seconds")
        if self.seconds is None:
            raise ValueError("seconds: must be a finite number of seconds > 0, got None")
        self._judge = judge
        self._reward_fn = reward_fn
        self.name = str(getattr(judge, "name", "judge"))
        self.used_s = 0.0
        self.missed = False
        self.missed_in: str | None = None  # "judge" or "reward"

    def judge(self, task: Task, trajectory: Any) -> Any:
        """The wrapped judge's verdict, within the budget left."""
        return self._call("judge", self._judge.judge, task, trajectory)

    def reward(self, task: Task, trajectory: Any, verdict: Any) -> Any:
        """The wrapped reward function's breakdown, within the budget left."""
        return self._call("reward", self._reward_fn, task, trajectory, verdict)

    __call__ = reward

    def _call(self, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        left = self.seconds - self.used_s
        if self.missed or left <= 0:
            self._miss(what)

        def work() -> Any:
            try:
                return fn(*args)
            finally:
                from shopping_companion.catalog.jvm import detach_thread

                detach_thread()  # the judge may have read products through Lucene

        t0 = time.monotonic()
        try:
            return call_within(work, left, name=f"shopcomp-{what}")
        except CallTimeout:
            self._miss(what)
        finally:
            self.used_s += time.monotonic() - t0

    def _miss(self, what: str) -> None:
        if not self.missed:
            self.missed, self.missed_in = True, what
        raise ScoringDeadlineError(
            f"scoring deadline missed: judging and rewarding this sample took more than {self.seconds:g} s "
            f"(in the {self.missed_in}); the sample is not scored (scoring_deadline_s)"
        )


@dataclass(frozen=True)
class ResourceSpec:
    """Where a worker loads its services from (all paths as strings; hashable, so it keys a cache).

    ``benchmark``: a benchmark directory (``tasks.jsonl``, ``sessions.jsonl``, ``manifest.json``,
    as written by ``shopcomp synth``). ``data_dir`` / ``index_dir``: the catalog data directory and
    the BM25 index directory (defaults as in ``shopcomp eval``). ``reward_config``: the reward spec
    (:func:`~shopping_companion.assembly.reward_spec.load_reward_spec`: ``paper``, ``outcome_only``, a YAML
    file, ``module:attr`` or the spec's JSON) that gives the judge — the rule judge, or an LLM judge
    with bounded concurrent requests and a reply cache — and the rubric. ``memory_cache``: per-user
    memory stores kept in memory (LRU), >= 1.

    Raises ``ValueError`` for a ``memory_cache`` below 1 and :class:`ConfigError` for a reward
    spec that does not load.

    ``tools``: ``local`` (the above is loaded in this process) or ``serve:URL``: the product
    index, the memory stores, the judge and the rubric of a ``shopcomp serve`` service
    (docs/cluster.md; the tasks are still read from ``benchmark`` here, and the service must hold
    the same benchmark and score with ``reward_config``). ``token_env``, ``timeout_s``,
    ``retries``, ``backoff_s``, ``deadline_s``, ``direct``: the client's settings
    (:class:`~shopping_companion.assembly.endpoints.ServiceConfig`). A bad ``tools`` value or
    client setting raises :class:`ConfigError` naming the field.
    """

    benchmark: str
    data_dir: str | None = None
    index_dir: str | None = None
    reward_config: str = "paper"
    memory_cache: int = 256
    tools: str = "local"
    token_env: str = "SHOPCOMP_SERVE_TOKEN"
    timeout_s: float = 60.0
    retries: int = 4
    backoff_s: float = 0.5
    deadline_s: float = 180.0
    direct: bool = True

    def __post_init__(self) -> None:
        from shopping_companion.assembly.endpoints import check_tools
        from shopping_companion.errors import ConfigError
        from shopping_companion.assembly.reward_spec import load_reward_spec

        if self.memory_cache < 1:
            raise ValueError(f"memory_cache: must be >= 1, got {self.memory_cache}")
        try:
            object.__setattr__(self, "tools", check_tools(self.tools))
        except ValueError as e:
            raise ConfigError(str(e)) from None
        self.service()  # bad client settings fail here
        load_reward_spec(self.reward_config)  # a bad spec fails here, before anything loads

    def service(self) -> Any:
        """The client settings as a :class:`~shopping_companion.assembly.endpoints.ServiceConfig`
        (:class:`ConfigError` naming the field when one is out of range)."""
        from pydantic import ValidationError

        from shopping_companion.assembly.endpoints import ServiceConfig
        from shopping_companion.errors import ConfigError

        try:
            return ServiceConfig(
                token_env=self.token_env,
                timeout_s=self.timeout_s,
                retries=self.retries,
                backoff_s=self.backoff_s,
                deadline_s=self.deadline_s,
                direct=self.direct,
                breaker_threshold=None,  # training goes on: a sample the service fails is not scored
            )
        except ValidationError as e:
            err = e.errors()[0]
            raise ConfigError(f"service.{'.'.join(map(str, err['loc']))}: {err['msg']}") from None


@dataclass
class EnvResources:
    """Shared, read-only services for many episodes.

    ``tasks``: task id -> :class:`Task`. ``sessions``: session id -> :class:`Session` (the memory
    pool). ``products``: a product backend (``ProductSearch``). ``embedder``: the MiniLM embedder of
    the memory stores. ``judge``: an object with ``judge(task, trajectory) -> Verdict``.
    ``reward_fn``: a rubric, ``(task, trajectory, verdict) -> RewardBreakdown``.
    Memory stores are built on first use per user history and kept in an LRU of
    ``memory_cache`` entries (thread-safe). ``memory_factory``: ``task -> MemoryBackend`` used
    instead of building stores here (a tool service's
    :class:`~shopping_companion.serve.remote.RemoteMemory`); ``remote``: the
    :class:`~shopping_companion.serve.remote.RemoteService` the services come from, or None.
    """

    tasks: Mapping[str, Task]
    sessions: Mapping[str, Session]
    products: Any
    embedder: Any
    judge: Any
    reward_fn: Callable[..., Any]
    memory_cache: int = 256
    memory_factory: Callable[[Task], Any] | None = None
    remote: Any = None
    _mem: "OrderedDict[str, Any]" = field(default_factory=OrderedDict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _rewarded: "dict[str, EnvResources]" = field(default_factory=dict, repr=False)

    def with_reward(self, reward_config: Any) -> "EnvResources":
        """These services scored by the reward spec ``reward_config`` (any
        :func:`~shopping_companion.assembly.reward_spec.load_reward_spec` form): the same tasks, index,
        embedder and memory-store cache, with the spec's judge and rubric. Built once per spec in
        this process (an LLM judge's reply cache and in-flight bound are shared by every
        trajectory). Raises :class:`ConfigError` for a spec that does not load.

        Services of a tool service (``remote``) score with the service's spec: the same spec
        returns these resources, another one raises :class:`ConfigError` naming both."""
        from shopping_companion.assembly.reward_spec import load_reward_spec

        spec = load_reward_spec(reward_config)
        key = spec.to_json()
        if self.remote is not None:
            from shopping_companion.errors import ConfigError
            from shopping_companion.serve.remote import same_reward_spec

            theirs = self.remote.info.reward.spec
            if not same_reward_spec(key, theirs):
                raise ConfigError(
                    f"reward_config: the tool service at {self.remote.url} scores with the reward spec {theirs}, "
                    f"not {key}; start the service with this spec, or train with the service's"
                )
            return self
        with self._lock:
            if key in self._rewarded:
                return self._rewarded[key]
        from shopping_companion.assembly.data import product_lookup

        lookup = product_lookup(self.products)
        judge = spec.build_judge(lookup, self.sessions, self.embedder)
        rubric = spec.build_rubric({"lookup": lookup})
        # the same services and one memory-store cache (``_mem``, ``_lock``) for both; its own specs
        new = replace(self, judge=judge, reward_fn=rubric, _rewarded={})
        with self._lock:
            return self._rewarded.setdefault(key, new)

    def task(self, task_id: str) -> Task:
        """The task ``task_id``; ``KeyError`` naming the benchmark's size when unknown."""
        try:
            return self.tasks[task_id]
        except KeyError:
            raise KeyError(
                f"task_id {task_id!r} is not in the benchmark ({len(self.tasks)} tasks); was the parquet "
                "prepared from another benchmark directory?"
            ) from None

    def memory(self, task: Task) -> Any:
        """The user's :class:`~shopping_companion.memory.store.MemoryStore` (cached per task history),
        or ``memory_factory(task)`` when set."""
        from shopping_companion.memory.store import MemoryStore

        if self.memory_factory is not None:
            return self.memory_factory(task)

        key = task.user_id + "\x00" + ",".join(r.session_id for r in task.history)
        with self._lock:
            if key in self._mem:
                self._mem.move_to_end(key)
                return self._mem[key]
        store = MemoryStore.from_pool(self.sessions, task.history, self.embedder)
        with self._lock:
            self._mem[key] = store
            while len(self._mem) > self.memory_cache:
                self._mem.popitem(last=False)
        return store

    def make_env(
        self,
        task: Task,
        *,
        hint: str = "none",
        max_turns: int = 20,
        simulator_seed: int = 0,
        max_observation_chars: int = 12_000,
        scoring_deadline_s: float | None = None,
    ) -> Any:
        """A fresh two-stage :class:`ShoppingCompanionEnv` for ``task`` (one per trajectory).

        ``scoring_deadline_s``: seconds (> 0) all judge and reward calls of this trajectory may
        take together; the environment's ``judge`` is then a :class:`ScoringDeadline` (its
        ``missed`` flag tells whether the sample ran out of time). None: no deadline. Raises
        ``ValueError`` for a deadline that is not a finite number > 0."""
        from shopping_companion.envs.env import EnvConfig, ShoppingCompanionEnv
        from shopping_companion.envs.tools import ToolBox

        deadline = check_scoring_deadline(scoring_deadline_s)
        cfg = EnvConfig(
            mode="two_stage",
            hint=hint,
            max_turns=max_turns,
            simulator_seed=simulator_seed,
            max_observation_chars=max_observation_chars,
        )
        tools = ToolBox(self.products, self.memory(task), cfg.max_observation_chars)
        if deadline is None:
            return ShoppingCompanionEnv(task, tools, self.judge, cfg, reward_fn=self.reward_fn)
        scorer = ScoringDeadline(self.judge, self.reward_fn, deadline)
        return ShoppingCompanionEnv(task, tools, scorer, cfg, reward_fn=scorer.reward)


def build_resources(spec: ResourceSpec) -> EnvResources:
    """Load everything ``spec`` names (the index is built on first use, ~1 min; embeddings cached);
    the judge and rubric come from ``spec.reward_config``. With ``spec.tools`` ``serve:URL`` only
    the benchmark's tasks are read here; products, memory, judge and rubric are the service's
    (:func:`~shopping_companion.serve.remote.connect` checks it is ready, holds this benchmark and
    scores with ``reward_config``: :class:`ConfigError` /
    :class:`~shopping_companion.errors.ToolServiceError` otherwise)."""
    from shopping_companion.assembly.data import load_benchmark
    from shopping_companion.assembly.data import make_embedder, open_product_search, product_lookup, resolve_sources
    from shopping_companion.assembly.reward_spec import load_reward_spec

    reward = load_reward_spec(spec.reward_config)
    reward.build_rubric()  # a rubric that does not import fails here, before the index loads
    bench = load_benchmark(Path(spec.benchmark))
    if spec.tools != "local":
        from shopping_companion.assembly.data import benchmark_tasks_sha256
        from shopping_companion.serve.remote import connect

        remote = connect(
            spec.tools,
            spec.service(),
            benchmark_dir=spec.benchmark,
            reward_spec=spec.reward_config,
            tasks_sha256=benchmark_tasks_sha256(bench.tasks),
        )
        return EnvResources(
            tasks={t.task_id: t for t in bench.tasks},
            sessions=bench.sessions,
            products=remote.products,
            embedder=None,
            judge=remote.judge,
            reward_fn=remote.rubric,
            memory_cache=spec.memory_cache,
            memory_factory=remote.memory,
            remote=remote,
        )
    sources = resolve_sources(spec.data_dir)
    search = open_product_search(index_dir=spec.index_dir, sources=sources)
    lookup = product_lookup(search)
    embedder = make_embedder()
    return EnvResources(
        tasks={t.task_id: t for t in bench.tasks},
        sessions=bench.sessions,
        products=search,
        embedder=embedder,
        judge=reward.build_judge(lookup, bench.sessions, embedder),
        reward_fn=reward.build_rubric({"lookup": lookup}),
        memory_cache=spec.memory_cache,
    )


_REGISTERED: dict[str, EnvResources] = {}
_BUILT: dict[ResourceSpec, EnvResources] = {}
_BUILD_LOCK = threading.Lock()


def register_resources(name: str, resources: EnvResources) -> None:
    """Make ``resources`` available to agent loops in this process under ``name``."""
    _REGISTERED[name] = resources


def registered_resources(name: str) -> EnvResources:
    """The resources registered under ``name``; ``KeyError`` listing the registered names."""
    try:
        return _REGISTERED[name]
    except KeyError:
        raise KeyError(
            f"no resources registered as {name!r} in this process (registered: {sorted(_REGISTERED)})"
        ) from None


def get_resources(spec: ResourceSpec) -> EnvResources:
    """The process-wide :class:`EnvResources` for ``spec`` (built once, then cached)."""
    with _BUILD_LOCK:
        if spec not in _BUILT:
            _BUILT[spec] = build_resources(spec)
        return _BUILT[spec]
