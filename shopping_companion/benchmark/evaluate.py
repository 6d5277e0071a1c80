"""The evaluation runner: episodes through :class:`ShoppingCompanionEnv`, results appended to JSONL.

``results.jsonl`` gets one :class:`~shopping_companion.types.EpisodeResult` per line, written,
flushed and fsynced by a single writer as each episode finishes.

Concurrency
    :func:`run_evaluation` runs up to ``concurrency`` episodes at once on one asyncio event loop:
    each episode's backend calls go through ``asyncio.to_thread(backend.chat, ...)`` and its
    environment steps through :meth:`ShoppingCompanionEnv.astep` (tools in a worker thread), bounded
    by a semaphore. Episodes start in task order; with ``concurrency > 1`` lines are written in
    finishing order.

Determinism
    Every episode is a function of (task, trial, strategy) only: its seed is
    :func:`derive_seed` ``(settings.seed, task_id, trial)`` and, when ``settings.sampling.seed`` is
    set, the backend's sampling seed is ``derive_seed(sampling.seed, task_id, trial)``. So a
    concurrent run gives the same results as a sequential one for the same seeds (everything
    except wall times and latencies), provided the backend answers a request deterministically.

Strategies (paper §6.3, Table 3)
    ``strategies`` runs each task under several environment modes / user-simulator hint modes
    (:class:`Strategy`: ``oracle``, ``one_stage``, ``two_stage:none|low|high``) into ONE results
    file; every line carries its ``mode`` and ``hint``.

Resume
    A result's key is ``(task_id, trial, mode, hint)`` (:func:`~shopping_companion.benchmark.report.result_key`).
    Rerunning with the same results file skips keys that already have a result without an error.
    Errored keys are run again by kind (:func:`~shopping_companion.benchmark.report.error_kind`):
    backend and judge errors when ``retry_errors=True`` (the default), episode errors (an
    unexpected exception inside the episode, usually deterministic) only when
    ``retry_failed=True``; the newest line wins when reading
    (:func:`~shopping_companion.benchmark.report.final_results`). A torn last line left by a
    killed process is cut off before appending, so nothing is lost or duplicated. An exclusive
    ``flock`` on the results file itself keeps two processes from appending to one file (deleting
    any file next to it does not let a second writer in), and an optional run identity
    (``identity=``) stored in ``<results stem>.identity.json`` refuses to mix results of a different
    policy or configuration into the same file; a missing or corrupt identity beside a non-empty
    results file is refused too, unless ``force=True`` adopts the current configuration.

Failures inside one episode
    Any exception an episode raises other than :class:`~shopping_companion.llm.base.CircuitOpenError`
    (and ``KeyboardInterrupt``; a ``SystemExit`` raised by plug-in code inside an episode is an
    episode error too) is recorded as that episode's result: ``error`` =
    ``"episode error: <Type>: <message>"`` (one line, at most ~300 characters), no stages, never
    scored; the full traceback is appended to ``<results stem>.errors.log`` with the task id,
    trial, strategy and seed. Every line is serialised, encoded as UTF-8 and read back
    (``json.loads`` and :class:`~shopping_companion.types.EpisodeResult` validation, as the reader
    does) before it is written; a result that fails this is replaced by an episode-error record,
    so the file never holds a line that cannot be read back. A :class:`CircuitOpenError` stops the
    run: no new episode starts, the episodes in flight are cancelled, results that finished are
    written, and the error is raised to the caller (the CLI exits 4, EXIT_SERVICE).

Where episodes run
    By default in this process. An ``executor`` (:class:`EpisodeExecutor`, e.g.
    :class:`~shopping_companion.benchmark.distributed.RayEpisodeExecutor`) runs them elsewhere
    instead: the runner keeps the todo list, the single writer, the lock, the identity, resume,
    the progress bar and the circuit-open handling; the executor only turns ``(strategy, task,
    trial)`` into an :class:`EpisodeResult`. An episode that failed remotely comes back as a
    :class:`RemoteEpisodeError` and is recorded exactly like a local failure (its remote traceback
    goes to the errors log).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import hashlib
import logging
import threading
import time
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable, Coroutine, Iterable, ParamSpec, Protocol, Sequence, TypeVar

from shopping_companion.benchmark.metrics import STRATEGY_LABELS, strategy_name
from shopping_companion.benchmark.report import (
    EPISODE_ERROR_PREFIX,
    error_kind,
    final_results,
    read_results,
    result_key,
    scan_results,
)
from shopping_companion.envs.env import EnvConfig, Judge, ShoppingCompanionEnv
from shopping_companion.envs.tools import MemoryBackend, ProductBackend, ToolBox
from shopping_companion.errors import ConfigError, RunFileReplacedError, RunIdentityError, RunLockedError
from shopping_companion.errors import ToolServiceError
from shopping_companion.llm.base import BackendError, ChatBackend, CircuitOpenError, ContextLengthError, Sampling
from shopping_companion.runs import (
    append_error_log,
    append_line,
    check_identity,
    encode_verified_line,
    errors_log_path,
    exclusive,
    identity_path,
    repair_torn_tail,
)
from shopping_companion.types import EpisodeResult, Task

__all__ = [
    "EvalSettings",
    "EpisodeExecutor",
    "RemoteEpisodeError",
    "Strategy",
    "supported_strategies",
    "parse_strategies",
    "derive_seed",
    "error_record",
    "prepare_episode",
    "run_episode",
    "arun_episode",
    "run_evaluation",
    "arun_evaluation",
    "RunLockedError",
    "RunIdentityError",
    "RunFileReplacedError",
    "done_keys",
    "identity_path",
    "errors_log_path",
    "describe",
]

logger = logging.getLogger(__name__)
P = ParamSpec("P")
T = TypeVar("T")


@dataclass
class EvalSettings:
    """Runner settings.

    ``trials``: episodes per (task, strategy), ≥ 1 (k trials for pass@k / pass^k).
    ``sampling``: passed to the backend (``None``: the backend's defaults); its ``seed``, when
    set, is the base of the per-episode sampling seeds. ``env``: the base environment config
    (a strategy overrides its ``mode`` and ``hint``). ``seed``: base of the per-episode seeds.
    ``reward_fn``: ``(task, trajectory, verdict) -> RewardBreakdown`` used by every episode, e.g. a
    :class:`~shopping_companion.rewards.rubric.Rubric` (``None``: the paper's total, Eq. 12).
    """

    trials: int = 1
    sampling: Sampling | None = None
    env: EnvConfig | None = None
    seed: int = 0
    reward_fn: Any = None


class EpisodeExecutor(Protocol):
    """Runs episodes somewhere other than this process (module docstring, "Where episodes run").

    ``await run(strategy, task, trial)`` returns the episode's :class:`EpisodeResult` for the
    same seeds as a local run (:func:`derive_seed`); it raises :class:`CircuitOpenError` when the
    run must stop, :class:`RemoteEpisodeError` for an episode that raised remotely, and any other
    exception for an episode that could not be run (both recorded as that episode's error)."""

    async def run(self, strategy: Strategy, task: Task, trial: int) -> EpisodeResult: ...


class RemoteEpisodeError(Exception):
    """An episode raised ``type_name: message`` in another process; ``remote_traceback`` is its
    traceback text there. The runner records it as a local failure of that type would be
    (``error`` = ``"episode error: <type_name>: <message>"``), with the remote traceback in the
    errors log."""

    def __init__(self, type_name: str, message: str, remote_traceback: str = "") -> None:
        super().__init__(message)
        self.type_name = type_name
        self.message = message
        self.remote_traceback = remote_traceback
        if remote_traceback:  # printed above this error in the errors log, like concurrent.futures does
            self.__cause__ = _RemoteTraceback(remote_traceback)


class _RemoteTraceback(Exception):
    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return f'\n"""\n{self.text.rstrip()}\n"""'


# --------------------------------------------------------------------------- strategies


def _literal_values(field: str) -> tuple[str, ...] | None:
    """The allowed values of an ``EnvConfig`` Literal field, or None when it is not a Literal."""
    info = EnvConfig.model_fields.get(field)
    if info is None:
        return None
    ann = info.annotation
    if typing.get_origin(ann) is typing.Literal:
        return tuple(str(a) for a in typing.get_args(ann))
    return None


@dataclass(frozen=True)
class Strategy:
    """An environment mode plus a user-simulator hint mode (paper §6.3, App. B.3).

    ``name`` is the canonical form (:func:`~shopping_companion.benchmark.metrics.strategy_name`).
    """

    mode: str = "two_stage"
    hint: str = "none"

    @property
    def name(self) -> str:
        return strategy_name(self.mode, self.hint)

    @property
    def label(self) -> str:
        return STRATEGY_LABELS.get(self.name, self.name)

    @classmethod
    def parse(cls, text: str) -> Strategy:
        """``"mode"`` or ``"mode:hint"`` (hint defaults to ``none``), e.g. ``two_stage:high``.

        Raises :class:`ConfigError` naming the supported strategies when the mode or hint is
        not accepted by this release's :class:`EnvConfig`.
        """
        raw = (text or "").strip()
        mode, _, hint = raw.partition(":")
        mode, hint = mode.strip(), (hint.strip() or "none")
        modes, hints = _literal_values("mode"), _literal_values("hint")
        if not mode or (modes is not None and mode not in modes) or (hints is not None and hint not in hints):
            raise ConfigError(
                f"strategy {raw!r} is not supported by this environment; supported: "
                f"{', '.join(supported_strategies())} (form: mode[:hint])"
            )
        return cls(mode, hint)

    def env_config(self, base: EnvConfig | None = None) -> EnvConfig:
        """``base`` with this strategy's mode and hint (validated by :class:`EnvConfig`)."""
        data = (base or EnvConfig()).model_dump()
        data.update(mode=self.mode, hint=self.hint)
        return EnvConfig.model_validate(data)


def supported_strategies() -> list[str]:
    """Strategy names this release's :class:`EnvConfig` accepts, in the paper's Table 3 order.

    Hint modes other than ``none`` are offered for ``two_stage`` only (the user simulator sits
    between the two stages).
    """
    modes = _literal_values("mode") or ("two_stage",)
    hints = _literal_values("hint") or ("none",)
    names = []
    for m in modes:
        for h in hints:
            if m != "two_stage" and h != "none":
                continue
            names.append(strategy_name(m, h))
    order = list(STRATEGY_LABELS)
    return sorted(names, key=lambda n: (order.index(n) if n in order else len(order), n))


def parse_strategies(spec: str | Sequence[str | Strategy] | None) -> list[Strategy]:
    """Comma-separated names (or a list) → distinct strategies in the given order.

    ``"all"`` means every supported strategy. Raises :class:`ConfigError` for an unknown one.
    """
    if spec is None:
        return [Strategy()]
    items: list[str | Strategy] = [s for s in spec.split(",")] if isinstance(spec, str) else list(spec)
    out: list[Strategy] = []
    for it in items:
        if isinstance(it, str) and it.strip() == "all":
            parsed = [Strategy.parse(n) for n in supported_strategies()]
        elif isinstance(it, Strategy):
            parsed = [Strategy.parse(it.name)]
        elif isinstance(it, str) and not it.strip():
            continue
        else:
            parsed = [Strategy.parse(it)]
        for s in parsed:
            if s not in out:
                out.append(s)
    if not out:
        raise ConfigError(f"no strategy given; supported: {', '.join(supported_strategies())}")
    return out


# --------------------------------------------------------------------------- one episode


def derive_seed(base: int, task_id: str, trial: int) -> int:
    """A per-(task, trial) seed in [0, 2**31): the first 4 bytes of SHA-256 of
    ``"<base>:<task_id>:<trial>"`` (stable across processes and Python versions)."""
    h = hashlib.sha256(f"{int(base)}:{task_id}:{int(trial)}".encode()).digest()
    return int.from_bytes(h[:4], "big") & 0x7FFFFFFF


def prepare_episode(
    task: Task,
    products: ProductBackend,
    memory: MemoryBackend,
    judge: Judge,
    settings: EvalSettings,
    trial: int,
    strategy: Strategy | str | None,
    simulator: Any = None,
    hold_handover: bool = False,
) -> tuple[ShoppingCompanionEnv, Sampling | None, int]:
    """The environment of one episode, reset, as :func:`run_episode` plays it: ``(env, sampling,
    seed)`` with the strategy's mode and hint (default: ``settings.env``'s) over ``task``'s tools,
    ``settings.reward_fn``, the episode seed ``derive_seed(settings.seed, task_id, trial)`` and the
    sampling with its per-episode seed (``derive_seed(sampling.seed, task_id, trial)`` when
    ``settings.sampling.seed`` is set). ``hold_handover``: see :class:`ShoppingCompanionEnv`.
    Adapters that drive the turns themselves (shopping_companion.integrations) start their
    episodes here. Raises :class:`ConfigError` for an unknown strategy name."""
    if isinstance(strategy, str):
        strategy = Strategy.parse(strategy)
    env_cfg = strategy.env_config(settings.env) if strategy is not None else (settings.env or EnvConfig())
    extra: dict[str, Any] = {"simulator": simulator} if simulator is not None else {}
    if settings.reward_fn is not None:
        extra["reward_fn"] = settings.reward_fn
    if hold_handover:
        extra["hold_handover"] = True
    env = ShoppingCompanionEnv(task, ToolBox(products, memory, env_cfg.max_observation_chars), judge, env_cfg, **extra)
    seed = derive_seed(settings.seed, task.task_id, trial)
    env.reset(seed=seed)
    sampling = settings.sampling
    if sampling is not None and sampling.seed is not None:
        sampling = sampling.model_copy(update={"seed": derive_seed(sampling.seed, task.task_id, trial)})
    return env, sampling, seed


async def arun_episode(
    task: Task,
    backend: ChatBackend,
    products: ProductBackend,
    memory: MemoryBackend,
    judge: Judge,
    settings: EvalSettings,
    trial: int = 0,
    strategy: Strategy | str | None = None,
    simulator: Any = None,
) -> EpisodeResult:
    """Run one full episode on an event loop: backend calls in a worker thread
    (``asyncio.to_thread``), steps through :meth:`ShoppingCompanionEnv.astep`.
    :func:`run_episode` is the same call in the calling thread, without an event loop; same result.

    A :class:`BackendError` (the backend failed after its own retries) ends the episode with
    ``error`` set and termination ``backend_error``: it is recorded and never scored as 0.
    A :class:`ContextLengthError` (the server refused the prompt as longer than the model's
    context) is a *model* failure instead: the current stage ends with termination
    ``context_length`` and is scored with what it did so far
    (:meth:`ShoppingCompanionEnv.end_stage_model_failure`), and the episode goes on (stage 2
    after a failed stage 1). :class:`~shopping_companion.llm.base.CircuitOpenError` propagates.
    ``strategy`` (default: ``settings.env``'s mode and hint) selects the mode and hint;
    ``simulator`` (a user-simulator object, e.g. an LLM simulator) replaces the one the
    environment would build from ``EnvConfig.simulator``.
    """
    env, sampling, seed = prepare_episode(task, products, memory, judge, settings, trial, strategy, simulator)
    await _play(
        env, sampling, functools.partial(asyncio.to_thread, backend.chat), env.astep, env.aend_stage_model_failure
    )
    return env.episode_result(policy=backend.name, trial=trial, seed=seed)


def run_episode(
    task: Task,
    backend: ChatBackend,
    products: ProductBackend,
    memory: MemoryBackend,
    judge: Judge,
    settings: EvalSettings,
    trial: int = 0,
    strategy: Strategy | str | None = None,
    simulator: Any = None,
) -> EpisodeResult:
    """:func:`arun_episode` in the calling thread, without an event loop or worker threads: the
    same parameters, failure handling and result."""
    env, sampling, seed = prepare_episode(task, products, memory, judge, settings, trial, strategy, simulator)
    _run_inline(_play(env, sampling, _inline(backend.chat), _inline(env.step), _inline(env.end_stage_model_failure)))
    return env.episode_result(policy=backend.name, trial=trial, seed=seed)


async def _play(
    env: ShoppingCompanionEnv,
    sampling: Sampling | None,
    chat: Callable[..., Awaitable[Any]],
    step: Callable[[Any], Awaitable[Any]],
    end_stage: Callable[[Any, str], Awaitable[Any]],
) -> None:
    """The one step loop of an episode (:func:`run_episode` semantics), given how to call the
    backend (``chat(messages, tools, sampling)``), step the environment and end a stage on a model
    failure: awaitables that run in this thread (:func:`_inline`) or in worker threads."""
    while not env.done:
        try:
            msg = await chat(env.messages, env.tool_schemas, sampling)
        except ContextLengthError as e:  # a model failure: the stage ends and is scored
            await end_stage("context_length", str(e))
            continue
        except BackendError as e:
            env.abort("backend_error", str(e))
            break
        try:
            await step(msg)
        except ToolServiceError as e:  # the tool service is down: not the agent's fault, retried on resume
            env.abort("backend_error", f"tool service: {e}")
            break


def _inline(fn: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
    """``fn`` as a coroutine function that calls it right away, in this thread (never suspends)."""

    async def call(*args: Any) -> Any:
        return fn(*args)

    return call


def _run_inline(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run a coroutine that never suspends (it awaits only :func:`_inline` calls) to its end
    without an event loop; returns its value, raises what it raises."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise RuntimeError("the episode loop suspended, but it runs without an event loop")


# --------------------------------------------------------------------------- results file


def _is_result_line(raw: bytes) -> bool:
    """A complete :class:`EpisodeResult` line (the torn-tail check of :func:`repair_torn_tail`)."""
    EpisodeResult.model_validate_json(raw)
    return True


def done_keys(path: Path, retry_errors: bool = True, retry_failed: bool = False) -> set[tuple[str, int, str, str]]:
    """Keys ``(task_id, trial, mode, hint)`` already in ``path`` that a rerun skips.

    A key is skipped when its final result (:func:`final_results`) has no error; when it ended with
    a backend or judge error and ``retry_errors`` is False; or when it ended with an episode error
    (an unexpected exception, :func:`~shopping_companion.benchmark.report.error_kind` ``"episode"``)
    and ``retry_failed`` is False.
    """
    out = set()
    for r in final_results(read_results(path)):
        kind = error_kind(r)
        if kind is None or (kind == "episode" and not retry_failed) or (kind != "episode" and not retry_errors):
            out.add(result_key(r))
    return out


def _utf8(text: str) -> str:
    """``text`` with anything UTF-8 cannot encode (lone surrogates) replaced by U+FFFD."""
    return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


#: Names of the tool-service failures (:class:`ToolServiceError` and its subclasses), as an
#: episode worker in another process reports them.
_SERVICE_ERRORS = ("ToolServiceError", "ServiceRefusedError")


def _is_service_error(e: BaseException) -> bool:
    """``e`` is a failure of the tool service (here, or reported by an episode worker)."""
    if isinstance(e, RemoteEpisodeError):
        return e.type_name in _SERVICE_ERRORS
    return isinstance(e, ToolServiceError)


def error_record(
    task: Task,
    trial: int,
    strategy: Strategy,
    policy: str,
    seed: int,
    wall_s: float,
    message: str,
    prefix: str = EPISODE_ERROR_PREFIX,
) -> EpisodeResult:
    """The result line of an episode that raised: no stages, ``error`` set (``prefix`` +
    ``message``; the default prefix makes it an episode error, ``""`` a backend error), never
    scored."""
    return EpisodeResult(
        task_id=task.task_id,
        task_type=task.task_type,
        mode=strategy.mode,
        hint=strategy.hint,
        policy=policy,
        trial=trial,
        seed=seed,
        stages=[],
        acc=0.0,
        succ=False,
        wall_s=round(wall_s, 4),
        error=_one_line(prefix + message),
    )


def _log_error(log_path: Path, key: tuple[str, int, str, str], seed: int, what: str, exc: BaseException) -> None:
    """Append ``exc``'s traceback to the errors log, headed by the episode's key and seed."""
    append_error_log(
        log_path, f"task {key[0]} trial {key[1]} strategy {strategy_name(key[2], key[3])} seed {seed}: {what}", exc
    )


def _encode_line(res: EpisodeResult) -> bytes:
    """``res`` as one UTF-8 JSON line, verified to read back (``json.loads`` and EpisodeResult
    validation of the exact bytes, with the same key); raises on any failure."""

    def same_key(data: bytes) -> None:
        back = EpisodeResult.model_validate_json(data)
        if result_key(back) != result_key(res):
            raise ValueError(f"the line reads back as {result_key(back)}, not {result_key(res)}")

    return encode_verified_line(res.model_dump_json().encode("utf-8"), same_key)


# --------------------------------------------------------------------------- the runner


EventFn = Callable[[str, tuple[str, int, str, str], float], None]


async def arun_evaluation(
    tasks: Iterable[Task],
    backend: ChatBackend,
    products: ProductBackend,
    make_memory: Callable[[Task], MemoryBackend],
    judge: Judge,
    results_path: str | Path,
    settings: EvalSettings | None = None,
    progress: bool = True,
    *,
    concurrency: int = 1,
    strategies: str | Sequence[str | Strategy] | None = None,
    retry_errors: bool = True,
    retry_failed: bool = False,
    identity: dict[str, Any] | None = None,
    force: bool = False,
    on_event: EventFn | None = None,
    simulator: Any = None,
    executor: EpisodeExecutor | None = None,
) -> list[EpisodeResult]:
    """Evaluate ``backend`` on ``tasks`` × ``strategies`` × ``settings.trials``, appending to
    ``results_path``; :func:`run_evaluation` is the same call, blocking (a new event loop; in a
    worker thread when called from inside a running loop). Returns the final result of every
    requested key (earlier runs' results of those keys included), in file order. Lines of other
    keys in the file (other tasks, strategies or trials) stay in the file but are not returned.

    Args:
        make_memory: ``task -> MemoryBackend`` (the user's memory store), called in a worker thread.
        concurrency: episodes in flight at once (≥ 1).
        strategies: names like ``"oracle,one_stage,two_stage:none"`` or :class:`Strategy` objects;
            default: ``settings.env``'s mode and hint.
        retry_errors: rerun keys whose final result is a backend or judge error.
        retry_failed: rerun keys whose final result is an episode error (an unexpected exception
            inside the episode; these are usually deterministic, so they are skipped by default).
        identity: JSON-able description of the run (policy, sampling, judge, …) stored in
            ``<results stem>.identity.json``; a later run with a different one raises
            :class:`RunIdentityError` before anything is written, and so does a non-empty results
            file whose identity file is missing or corrupt, unless ``force``.
        force: adopt ``identity`` for a non-empty results file whose identity file is missing or
            corrupt (never overrides a readable, different identity).
        on_event: ``(event, key, time.monotonic())`` with event ``"start"`` / ``"end"`` per episode
            (for measuring episodes in flight).
        simulator: a user-simulator object shared by all episodes (it must be thread-safe);
            default: each environment builds one from ``EnvConfig.simulator``.
        executor: runs the episodes instead of this process (:class:`EpisodeExecutor`; module
            docstring); ``backend`` then only names the policy of error records, and
            ``products``, ``make_memory``, ``judge`` and ``simulator`` are not used.

    Raises :class:`RunLockedError` when another process holds the file, :class:`RunIdentityError`
    (a :class:`ConfigError`) for a foreign or unverifiable results file, :class:`ConfigError` for a
    bad strategy or concurrency, :class:`CircuitOpenError` when the endpoint is considered down
    (the run stopped; everything finished before is in the file — rerun to resume). Any other
    exception inside an episode is recorded as that episode's error (module docstring).

    While it runs, the loop's default executor is a thread pool of ``concurrency + 2`` workers
    (so ``asyncio.to_thread`` is not capped at Python's default pool size); the previous default
    executor is restored afterwards.
    """
    if concurrency < 1:
        raise ConfigError(f"concurrency: must be >= 1, got {concurrency}")
    settings = settings or EvalSettings()
    if settings.trials < 1:
        raise ConfigError(f"trials: must be >= 1, got {settings.trials}")
    if strategies is None:
        env = settings.env or EnvConfig()
        strats = [Strategy(env.mode, env.hint)]
    else:
        strats = parse_strategies(strategies)
    tasks = list(tasks)
    path = Path(results_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    requested = {(t.task_id, k, s.mode, s.hint) for s in strats for t in tasks for k in range(settings.trials)}
    with exclusive(path) as out:
        check_identity(path, identity, force)
        repair_torn_tail(path, _is_result_line)
        scan = scan_results(path)
        if scan.unreadable:
            logger.warning(
                "%s: %d line(s) cannot be read back and are left out (line numbers %s); the episodes they held "
                "are run again",
                path,
                len(scan.unreadable),
                ", ".join(str(n) for n, _ in scan.unreadable[:20]),
            )
        done = done_keys(path, retry_errors, retry_failed)
        todo = [
            (s, t, k)
            for s in strats
            for t in tasks
            for k in range(settings.trials)
            if (t.task_id, k, s.mode, s.hint) not in done
        ]
        loop = asyncio.get_running_loop()
        previous = getattr(loop, "_default_executor", None)
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=concurrency + 2, thread_name_prefix="shopcomp-eval")
        loop.set_default_executor(pool)
        try:
            await _run_todo(
                todo,
                backend,
                products,
                make_memory,
                judge,
                path,
                out,
                settings,
                progress,
                concurrency,
                on_event,
                simulator,
                executor,
            )
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)  # do not wait for a hung backend call
            loop._default_executor = previous  # type: ignore[attr-defined]
            raise
        await _detach_workers(loop, pool)
        loop._default_executor = previous  # type: ignore[attr-defined]
    return [r for r in final_results(read_results(path)) if result_key(r) in requested]


def _blocking(fn: Callable[P, Coroutine[Any, Any, T]]) -> Callable[P, T]:
    """``fn`` (a coroutine function) as a blocking function with the same signature and docs: it
    runs the coroutine on a new event loop, in a worker thread when called inside a running loop."""

    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> T:
        coro = fn(*args, **kwargs)
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(coro)
        with concurrent.futures.ThreadPoolExecutor(1) as ex:  # called from inside an event loop
            return ex.submit(asyncio.run, coro).result()

    return run


#: Blocking :func:`arun_evaluation` (same arguments, same result).
run_evaluation = _blocking(arun_evaluation)
run_evaluation.__name__ = run_evaluation.__qualname__ = "run_evaluation"


async def _run_todo(
    todo,
    backend,
    products,
    make_memory,
    judge,
    path: Path,
    out,
    settings: EvalSettings,
    progress: bool,
    concurrency: int,
    on_event: EventFn | None,
    simulator: Any = None,
    executor: EpisodeExecutor | None = None,
) -> None:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    sem = asyncio.Semaphore(concurrency)
    log_path = errors_log_path(path)
    policy = str(getattr(backend, "name", type(backend).__name__))

    async def one(strategy: Strategy, task: Task, trial: int) -> EpisodeResult:
        async with sem:
            key = (task.task_id, trial, strategy.mode, strategy.hint)
            if on_event:
                on_event("start", key, time.monotonic())
            t0 = time.perf_counter()
            try:
                if executor is not None:
                    res = await executor.run(strategy, task, trial)
                else:
                    memory = await asyncio.to_thread(make_memory, task)
                    res = await arun_episode(
                        task, backend, products, memory, judge, settings, trial, strategy, simulator
                    )
            except CircuitOpenError:
                raise  # the endpoint is down: the run stops
            except (Exception, SystemExit) as e:  # anything else ends this episode only (also a
                # plug-in's sys.exit(): it must not end the run with status 0 and nothing written)
                seed = derive_seed(settings.seed, task.task_id, trial)
                msg = f"{e.type_name}: {e.message}" if isinstance(e, RemoteEpisodeError) else f"{type(e).__name__}: {e}"
                if _is_service_error(e):  # the tool service failed before the episode could start
                    # (memory of the task, the first observation): a backend error, retried on resume
                    _log_error(log_path, key, seed, "tool service error", e)
                    res = error_record(
                        task, trial, strategy, policy, seed, time.perf_counter() - t0, f"tool service: {msg}", ""
                    )
                else:
                    _log_error(log_path, key, seed, "episode error", e)
                    res = error_record(task, trial, strategy, policy, seed, time.perf_counter() - t0, msg)
            if on_event:
                on_event("end", key, time.monotonic())
            return res

    def write(res: EpisodeResult) -> EpisodeResult:
        # the single writer: only this loop thread writes, one whole verified line at a time
        try:
            data = _encode_line(res)
        except Exception as e:  # noqa: BLE001 - too deep, bad unicode, NaN, a validator: never an unreadable line
            _log_error(log_path, result_key(res), res.seed, "result line could not be written", e)
            res = EpisodeResult(
                task_id=_utf8(res.task_id),
                task_type=res.task_type,
                mode=_utf8(res.mode),
                hint=_utf8(res.hint),
                policy=_utf8(res.policy),
                trial=res.trial,
                seed=res.seed,
                stages=[],
                acc=0.0,
                succ=False,
                wall_s=res.wall_s if res.wall_s == res.wall_s else 0.0,
                error=_utf8(
                    _one_line(f"{EPISODE_ERROR_PREFIX}result line could not be written: {type(e).__name__}: {e}")
                ),
            )
            try:
                data = _encode_line(res)
            except Exception as e2:  # noqa: BLE001 - cannot happen with clean strings; never stop the run
                _log_error(log_path, result_key(res), res.seed, "error record could not be written either", e2)
                return res
        append_line(out, path, data)
        return res

    cols = [
        TextColumn("[bold]eval"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[status]}"),
    ]
    succ = n = errors = 0
    stop: CircuitOpenError | None = None
    with Progress(*cols, disable=not progress, transient=False) as bar:
        job = bar.add_task("eval", total=len(todo), status="")
        pending = [asyncio.ensure_future(one(s, t, k)) for s, t, k in todo]
        order = {p: i for i, p in enumerate(pending)}
        remaining = set(pending)
        try:
            while remaining and stop is None:
                finished, remaining = await asyncio.wait(remaining, return_when=asyncio.FIRST_COMPLETED)
                for fut in sorted(finished, key=order.__getitem__):
                    exc = fut.exception()
                    if isinstance(exc, CircuitOpenError):
                        stop = stop or exc  # keep writing what else finished, start nothing new
                        continue
                    if exc is not None:
                        raise exc
                    res = write(fut.result())
                    n += 1
                    succ += int(res.succ and res.error is None)
                    errors += int(res.error is not None)
                    bar.update(job, advance=1, status=f"Succ {succ}/{n}" + (f", {errors} errors" if errors else ""))
        finally:
            for p in pending:
                p.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
    if stop is not None:
        raise stop


async def _detach_workers(loop: asyncio.AbstractEventLoop, pool: concurrent.futures.ThreadPoolExecutor) -> None:
    """Detach every worker thread from the JVM (the product index runs on it) before the pool's
    threads exit: one job per live thread, held at a barrier so each thread takes exactly one."""
    threads = len(getattr(pool, "_threads", ()))
    if threads:
        try:
            from shopping_companion.catalog.jvm import detach_thread
        except ImportError:  # pragma: no cover
            detach_thread = None  # type: ignore[assignment]
        barrier = threading.Barrier(threads)

        def job() -> None:
            try:
                barrier.wait(timeout=10)
            except threading.BrokenBarrierError:
                pass
            if detach_thread is not None:
                try:
                    detach_thread()
                except Exception:  # pragma: no cover - best effort
                    pass

        await asyncio.gather(*(loop.run_in_executor(pool, job) for _ in range(threads)), return_exceptions=True)
    pool.shutdown(wait=True)  # every worker is idle by now: this only joins the threads


def describe(settings: EvalSettings) -> dict[str, Any]:
    """The settings as JSON-able data (for reports and the run identity)."""
    return {
        "trials": settings.trials,
        "seed": settings.seed,
        "sampling": settings.sampling.model_dump() if settings.sampling else None,
        "env": (settings.env or EnvConfig()).model_dump(),
    }
