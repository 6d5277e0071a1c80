"""Episodes on a Ray cluster (``shopcomp eval --ray ADDRESS``; issue 19 part 3).

The driver (the process running :func:`~shopping_companion.benchmark.run.run_benchmark`) keeps
everything that makes a run resumable: the todo list, the one writer of the results file, its
lock, the run identity, the progress bar and the circuit-open handling
(:func:`~shopping_companion.benchmark.evaluate.arun_evaluation`). What moves to the cluster is only
the body of one episode: :class:`RayEpisodeExecutor` is the runner's
:class:`~shopping_companion.benchmark.evaluate.EpisodeExecutor`, and it sends each
``(task_id, trial, mode, hint)`` to one of its *episode workers*.

Episode workers
    :class:`EpisodeWorker` is a Ray actor (one process, ``num_cpus`` CPUs reserved). It builds the
    episode kit ONCE, from the run's :class:`~shopping_companion.benchmark.run_config.EvalConfig`
    sent as JSON: :func:`~shopping_companion.benchmark.kit.build_kit` (policy backend, product
    index or tool service, memory factory, judge, rubric, runner settings), with a private scratch
    directory as its ``run_dir`` (e.g. an LLM judge's cache), so no worker ever writes the driver's
    run files. It then runs episodes with :func:`~shopping_companion.benchmark.evaluate.arun_episode`
    (the same seeds as a local run: :func:`~shopping_companion.benchmark.evaluate.derive_seed`),
    several at once (asyncio actor), and returns each result as JSON. So results for the same
    seeds equal a local run's (everything except wall times and latencies). Relative paths of the
    config resolve against the driver's working directory when it exists on the worker's node
    (always on one machine); on other nodes the benchmark, data and index paths must exist too.

    A worker checks that its kit has the driver's run identity (``config_sha256``: same config,
    benchmark tasks, rubric) before it gets any episode; a node whose files differ is refused.

Failures
    An episode that raises in a worker comes back as
    :class:`~shopping_companion.benchmark.evaluate.RemoteEpisodeError` (type, message, traceback)
    and the driver records it exactly as the local runner records an exception (``error`` =
    ``"episode error: <Type>: <message>"``; the traceback, the worker's, in the driver's
    ``results.errors.log``). A :class:`~shopping_companion.errors.CircuitOpenError` in a worker is
    raised in the driver: the run stops as a local one would. A worker that dies (process killed,
    OOM, node lost) fails the episodes it had in flight; each is resubmitted to another live
    worker, and the dead one is restarted by Ray (``max_restarts``; it builds its kit again) and
    put back once it answers. An episode whose worker died ``episode_retries`` times is recorded
    as an episode error (``WorkerLostError``); when no worker is left at all the run stops with
    :class:`WorkersLostError` (a ``CircuitOpenError``: everything finished is in the results file,
    rerun to resume).

Shipping the code
    On a cluster this process did not start, the workers run this checkout's package: the job's
    ``runtime_env`` (:func:`~shopping_companion.assembly.cluster.worker_runtime_env`, given to
    :func:`~shopping_companion.assembly.cluster.connect`) has ``py_modules`` = this package's directory (plus directories of the reward
    spec's ``python_path``) and ``env_vars`` = the harmless settings of this environment and the
    API-key variables the config names (as ``shopcomp grpo submit`` does,
    :mod:`shopping_companion.trainers.submit`). A private local cluster (``--ray local``) sees the
    installed package and this environment already.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from shopping_companion.assembly.cluster import import_ray
from shopping_companion.benchmark.evaluate import RemoteEpisodeError, Strategy
from shopping_companion.errors import CircuitOpenError, ConfigError, ShopCompError
from shopping_companion.types import EpisodeResult, Task

__all__ = ["EpisodeWorker", "RayEpisodeExecutor", "WorkerLostError", "WorkersLostError"]

#: name prefix of the episode workers (named actors; ``ray.util.list_named_actors`` lists them)
WORKER_NAME_PREFIX = "shopcomp-eval-worker"


class WorkerLostError(RuntimeError):
    """An episode's worker died ``episode_retries`` times while running it (recorded as that
    episode's error; usually the episode itself kills its worker, e.g. out of memory)."""


class WorkersLostError(CircuitOpenError):
    """No episode worker is left (all died and Ray could not restart them): the run stops
    (exit 4); everything finished is in the results file, rerun to resume."""


# --------------------------------------------------------------------------- connecting


# --------------------------------------------------------------------------- the worker


def _failure(e: BaseException) -> dict[str, str]:
    return {
        "type": type(e).__name__,
        "message": str(e),
        "traceback": "".join(traceback.format_exception(type(e), e, e.__traceback__)),
        "module": type(e).__module__,
    }


class EpisodeWorker:
    """One episode worker (module docstring); a Ray actor through :class:`RayEpisodeExecutor`.

    ``cfg_json``: the run's :class:`EvalConfig` as JSON; ``cwd``: the driver's working directory
    (entered when it exists here, so relative paths mean what they mean for the driver). A
    failure to build the kit is kept and reported by :meth:`ready` (never raised from the
    constructor, so Ray does not restart a worker that cannot work)."""

    def __init__(self, cfg_json: str, cwd: str | None = None) -> None:
        self.kit: Any = None
        self.error: dict[str, str] | None = None
        self.scratch = tempfile.mkdtemp(prefix="shopcomp-eval-worker-")
        try:
            if cwd and Path(cwd).is_dir():
                os.chdir(cwd)
            from rich.console import Console

            from shopping_companion.benchmark.kit import build_kit
            from shopping_companion.benchmark.run_config import EvalConfig

            cfg = EvalConfig.model_validate_json(cfg_json)
            self.kit = build_kit(cfg, Path(self.scratch), Console(stderr=True, quiet=True))
            self.tasks = {t.task_id: t for t in self.kit.resources.tasks}
            self.make_memory = self.kit.memory()
        except (Exception, SystemExit) as e:  # noqa: BLE001 - reported to the driver by ready()
            self.error = _failure(e)

    def ready(self) -> dict[str, Any]:
        """``{pid, node, config_sha256, policy, tasks}``, or ``{error: {type, message, traceback}}``
        when the kit could not be built."""
        import ray

        where = {"pid": os.getpid(), "node": ray.get_runtime_context().get_node_id()}
        if self.error is not None:
            return {**where, "error": self.error}
        return {
            **where,
            "config_sha256": self.kit.identity["config_sha256"],
            "policy": str(getattr(self.kit.policy, "name", "")),
            "tasks": len(self.tasks),
        }

    async def run(self, task_id: str, trial: int, mode: str, hint: str) -> dict[str, Any]:
        """One episode: ``{"result": EpisodeResult JSON}``, ``{"error": {type, message,
        traceback}}`` when it raised (as the local runner catches: any ``Exception`` or
        ``SystemExit``), or ``{"circuit_open": message}`` (the run must stop)."""
        from shopping_companion.benchmark.evaluate import arun_episode

        if self.kit is None:
            return {"error": self.error or {"type": "RuntimeError", "message": "no kit", "traceback": ""}}
        kit = self.kit
        try:
            task = self.tasks[task_id]
        except KeyError:
            return {"error": _failure(KeyError(f"task {task_id!r} is not in this worker's benchmark"))}
        try:
            memory = await asyncio.to_thread(self.make_memory, task)
            res = await arun_episode(
                task, kit.policy, kit.resources.search, memory, kit.judge, kit.settings, trial, Strategy(mode, hint)
            )
        except CircuitOpenError as e:
            return {"circuit_open": str(e)}
        except (Exception, SystemExit) as e:  # noqa: BLE001 - recorded by the driver as an episode error
            return {"error": _failure(e)}
        return {"result": res.model_dump_json()}


# --------------------------------------------------------------------------- the executor


def _rebuild(err: dict[str, str], prefix: str) -> Exception:
    """A worker's kit failure as the same :class:`ShopCompError` class (same exit status) when it
    is one, else a :class:`ConfigError`."""
    from shopping_companion import errors

    cls = getattr(errors, err.get("type", ""), None)
    if not (isinstance(cls, type) and issubclass(cls, ShopCompError)):
        cls = ConfigError
    try:
        return cls(f"{prefix}{err.get('type')}: {err.get('message')}")
    except TypeError:  # pragma: no cover - a class with another constructor
        return ConfigError(f"{prefix}{err.get('type')}: {err.get('message')}")


class RayEpisodeExecutor:
    """Episodes on ``workers`` Ray actors (module docstring); an
    :class:`~shopping_companion.benchmark.evaluate.EpisodeExecutor`.

    Args:
        cfg: the run's :class:`EvalConfig` (sent to each worker as JSON).
        identity: the driver's run identity; every worker's kit must have its ``config_sha256``
            (None: given to :meth:`wait_ready` instead).
        workers: number of episode workers (>= 1; None: one per ``num_cpus`` of the cluster's CPUs).
        num_cpus: CPUs each worker reserves (> 0).
        runtime_env: the workers' own runtime env (None: the job's, :func:`connect`; an actor's
            runtime env can name only URIs, no local paths to upload).
        max_restarts: times Ray restarts a dead worker (>= 0).
        episode_retries: worker deaths one episode may see before it is recorded as an episode
            error (>= 1).
        ready_timeout_s: seconds the workers may take to start and build their kits (> 0).

    Use :meth:`start` (= :meth:`launch`, which returns at once, then :meth:`wait_ready`, which
    blocks until the kits are built and raises what a worker's kit build raised, as the same error
    class, or :class:`ConfigError` for an identity mismatch or workers that never start), then
    ``await run(...)`` from the runner, then :meth:`shutdown`. Ray must be connected
    (:func:`connect`).
    """

    def __init__(
        self,
        cfg: Any,
        identity: dict[str, Any] | None = None,
        workers: int | None = None,
        *,
        num_cpus: float = 1.0,
        runtime_env: dict[str, Any] | None = None,
        max_restarts: int = 2,
        episode_retries: int = 3,
        ready_timeout_s: float = 900.0,
    ) -> None:
        if workers is not None and workers < 1:
            raise ConfigError(f"ray.workers: must be >= 1, got {workers}")
        if num_cpus <= 0:
            raise ConfigError(f"ray.num_cpus: must be > 0, got {num_cpus}")
        if episode_retries < 1 or max_restarts < 0:
            raise ConfigError("episode_retries must be >= 1 and max_restarts >= 0")
        self.cfg, self.identity = cfg, identity
        self.n_workers, self.num_cpus, self.runtime_env = workers, num_cpus, runtime_env
        self.max_restarts, self.episode_retries, self.ready_timeout_s = max_restarts, episode_retries, ready_timeout_s
        self.handles: list[Any] = []
        self.names: list[str] = []
        self.info: list[dict[str, Any]] = []
        self._inflight: list[int] = []
        self._probes: dict[int, asyncio.Future] = {}
        self._dead: set[int] = set()
        self.deaths = 0  # worker failures seen by episodes (for reports and tests)

    # ----------------------------------------------------------------- lifecycle

    def start(self) -> list[dict[str, Any]]:
        """:meth:`launch` then :meth:`wait_ready`."""
        self.launch()
        return self.wait_ready()

    def launch(self) -> None:
        """Create the worker actors (they start building their kits); returns at once."""
        ray = import_ray()
        n = self.n_workers or max(1, int(float(ray.cluster_resources().get("CPU", 1)) // self.num_cpus))
        self.n_workers = n
        opts: dict[str, Any] = {
            "num_cpus": self.num_cpus,
            "max_restarts": self.max_restarts,
            "max_task_retries": 0,  # the executor resubmits an episode itself (to another worker)
            "max_concurrency": max(8, self.cfg.concurrency * 2),
        }
        if self.runtime_env:
            opts["runtime_env"] = self.runtime_env
        actor_cls = ray.remote(EpisodeWorker)
        token = f"{os.getpid()}-{time.time_ns():x}"
        cfg_json, cwd = self.cfg.model_dump_json(), os.getcwd()
        for i in range(n):
            name = f"{WORKER_NAME_PREFIX}-{token}-{i}"
            self.handles.append(actor_cls.options(name=name, **opts).remote(cfg_json, cwd))
            self.names.append(name)
        self._inflight = [0] * n

    def wait_ready(self, identity: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """Wait until every worker has built its kit and check it against ``identity`` (default:
        the constructor's); returns their :meth:`EpisodeWorker.ready` answers. Raises (after
        stopping the workers) when one cannot work (class docstring)."""
        ray = import_ray()
        self.identity = identity or self.identity or {}
        n = len(self.handles)
        refs = [h.ready.remote() for h in self.handles]
        try:
            done, pending = ray.wait(refs, num_returns=len(refs), timeout=self.ready_timeout_s)
            if pending:
                have = ray.cluster_resources().get("CPU", 0)
                raise ConfigError(
                    f"ray: {len(pending)} of {n} episode worker(s) did not start within {self.ready_timeout_s:.0f} s "
                    f"(each reserves ray.num_cpus={self.num_cpus} CPUs; the cluster has {have:g}); use fewer "
                    "--ray-workers or a smaller ray.num_cpus"
                )
            try:
                self.info = ray.get(refs)
            except Exception as e:  # noqa: BLE001 - a worker died while building (OOM, a crash)
                raise ConfigError(
                    f"ray: an episode worker died while building its kit: {type(e).__name__}: {e}"
                ) from None
            want = self.identity.get("config_sha256")
            for i, info in enumerate(self.info):
                if "error" in info:
                    raise _rebuild(info["error"], f"episode worker {i} (node {info.get('node')}): ")
                if info.get("config_sha256") != want:
                    raise ConfigError(
                        f"episode worker {i} (node {info.get('node')}) built a different run (config_sha256 "
                        f"{info.get('config_sha256')}, the driver's is {want}): its benchmark, data or rubric files "
                        "differ from this machine's"
                    )
        except BaseException:
            self.shutdown()
            raise
        return self.info

    def shutdown(self) -> None:
        """Stop every worker (idempotent)."""
        if not self.handles:
            return
        ray = import_ray()
        for h in self.handles:
            try:
                ray.kill(h, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
        self.handles = []

    def describe(self) -> str:
        """Where episodes run, for the run's header: e.g. ``2 Ray episode workers (1 CPU each)``."""
        n = self.n_workers
        nodes = len({i.get("node") for i in self.info}) if self.info else None
        return (
            f"{n if n is not None else 'one per CPU of the'} Ray episode worker{'s' if n != 1 else ''} "
            f"({self.num_cpus:g} CPU each" + (f", on {nodes} node{'s' if nodes != 1 else ''})" if nodes else ")")
        )

    # ----------------------------------------------------------------- episodes

    async def _probe(self, w: int) -> None:
        """Wait for worker ``w`` to answer again (Ray restarts it), or mark it dead."""
        try:
            info = await self.handles[w].ready.remote()
            if "error" in info or info.get("config_sha256") != self.identity.get("config_sha256"):
                self._dead.add(w)
        except Exception:  # noqa: BLE001 - restarts exhausted, or the actor is gone for good
            self._dead.add(w)
        finally:
            self._probes.pop(w, None)

    async def _pick(self) -> int:
        """The live worker with the fewest episodes in flight (waits while all are restarting)."""
        while True:
            live = [i for i in range(len(self._inflight)) if i not in self._dead and i not in self._probes]
            if live:
                return min(live, key=lambda i: (self._inflight[i], i))
            if not self._probes:
                raise WorkersLostError(
                    f"every episode worker died and Ray could not restart them (max_restarts={self.max_restarts}); "
                    "the run stopped"
                )
            await asyncio.wait(list(self._probes.values()), return_when=asyncio.FIRST_COMPLETED)

    async def run(self, strategy: Strategy, task: Task, trial: int) -> EpisodeResult:
        """Run one episode on a worker (class docstring); see
        :class:`~shopping_companion.benchmark.evaluate.EpisodeExecutor`."""
        ray = import_ray()
        lost = (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError)
        lost += (ray.exceptions.OutOfMemoryError, ray.exceptions.ObjectLostError)
        failures: list[str] = []
        while True:
            w = await self._pick()
            handle = self.handles[w]
            self._inflight[w] += 1
            try:
                out = await handle.run.remote(task.task_id, trial, strategy.mode, strategy.hint)
            except lost as e:
                self.deaths += 1
                failures.append(f"worker {w}: {type(e).__name__}")
                if w not in self._probes and w not in self._dead:
                    self._probes[w] = asyncio.ensure_future(self._probe(w))
                if len(failures) >= self.episode_retries:
                    raise WorkerLostError(
                        f"the episode's worker died {len(failures)} times ({'; '.join(failures)}): "
                        f"{' '.join(str(e).split())[:200]}"
                    ) from None
                continue
            finally:
                self._inflight[w] -= 1
            if "circuit_open" in out:
                raise CircuitOpenError(out["circuit_open"])
            if "error" in out:
                err = out["error"]
                raise RemoteEpisodeError(err["type"], err["message"], err.get("traceback", ""))
            return EpisodeResult.model_validate_json(out["result"])
