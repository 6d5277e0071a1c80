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
    sent as JSON: :func:`~shopping_companion.benchmark.run.build_kit` (policy backend, product
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
    On a cluster this process did not start, the workers run this checkout's package: the actors'
    ``runtime_env`` has ``py_modules`` = this package's directory (plus directories of the reward
    spec's ``python_path``) and ``env_vars`` = the harmless settings of this environment and the
    API-key variables the config names (as ``shopcomp grpo submit`` does,
    :mod:`shopping_companion.trainers.submit`). A private local cluster (``--ray local``) sees the
    installed package and this environment already.
"""

from __future__ import annotations

import asyncio
import os
import socket
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from shopping_companion.benchmark.evaluate import RemoteEpisodeError, Strategy
from shopping_companion.errors import CircuitOpenError, ConfigError, ShopCompError
from shopping_companion.types import EpisodeResult, Task

__all__ = [
    "RAY_INSTALL_HINT",
    "EpisodeWorker",
    "RayConnection",
    "RayEpisodeExecutor",
    "WorkerLostError",
    "WorkersLostError",
    "connect",
    "worker_runtime_env",
]

RAY_INSTALL_HINT = 'pip install -e ".[serve]" (or use .venv-rl, which has ray)'
#: name prefix of the episode workers (named actors; ``ray.util.list_named_actors`` lists them)
WORKER_NAME_PREFIX = "shopcomp-eval-worker"


class WorkerLostError(RuntimeError):
    """An episode's worker died ``episode_retries`` times while running it (recorded as that
    episode's error; usually the episode itself kills its worker, e.g. out of memory)."""


class WorkersLostError(CircuitOpenError):
    """No episode worker is left (all died and Ray could not restart them): the run stops
    (exit 4); everything finished is in the results file, rerun to resume."""


def _ray():
    try:
        import ray
    except ImportError as e:
        raise ConfigError(f"ray: --ray needs Ray in this environment ({e}); install it: {RAY_INSTALL_HINT}") from None
    return ray


# --------------------------------------------------------------------------- connecting


@dataclass
class RayConnection:
    """This process's connection to Ray: ``address`` (as given), ``owned`` (this call started or
    connected Ray, so :meth:`close` shuts it down; False when the process was connected already),
    ``local`` (a private cluster on this machine: nothing to ship), ``cpus`` (the cluster's CPUs)."""

    address: str
    owned: bool
    local: bool
    cpus: float

    def close(self) -> None:
        """Disconnect (and stop a private local cluster) when :func:`connect` made the connection."""
        if self.owned:
            _ray().shutdown()


def _check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """A TCP connect to ``host:port`` / ``ray://host:port`` (Ray itself retries for a minute)."""
    text = address if "://" in address else f"tcp://{address}"
    try:
        parts = urlsplit(text)
        host, port = parts.hostname, parts.port
    except ValueError:
        host = port = None
    if not host or not port:
        raise ConfigError(
            f"ray.address (--ray): {address!r} is not an address; use local, auto, HOST:PORT of a running "
            "cluster's head (GCS, e.g. 10.0.0.1:6379) or ray://HOST:PORT (Ray client, port 10001)"
        )
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            pass
    except OSError as e:
        raise ConfigError(
            f"ray.address (--ray): nothing answers at {address} ({type(e).__name__}: {e}); start the cluster "
            "(`ray start --head` on the head node) or use --ray local for a private cluster on this machine"
        ) from None


def connect(address: str, num_cpus: float | None = None, runtime_env: dict[str, Any] | None = None) -> RayConnection:
    """Connect this process to Ray. ``address``: ``local`` (start a private cluster on this
    machine with ``num_cpus`` CPUs, default all of them), ``auto`` (the cluster this machine
    belongs to), ``HOST:PORT`` (a running cluster's head) or ``ray://HOST:PORT`` (Ray client).
    ``runtime_env``: the job's runtime env (:func:`worker_runtime_env`; Ray uploads local
    ``py_modules`` only at this level). A process already connected (``ray.is_initialized()``)
    keeps its connection and its job's runtime env, whatever the address. Raises
    :class:`ConfigError` (exit 2) when Ray is not installed or nothing answers at the address.

    Ray's own failure signal handler is not installed in this process: the driver runs the JVM
    (the product index), which handles ``SIGSEGV`` itself and crashes under Ray's handler."""
    ray = _ray()
    address = (address or "").strip()
    if ray.is_initialized():
        return RayConnection(address, False, address == "local", float(ray.cluster_resources().get("CPU", 0)))
    import ray._private.ray_constants as ray_constants

    ray_constants.RAY_DISABLE_FAILURE_SIGNAL_HANDLER = True  # read when ray.init builds the core worker
    opts: dict[str, Any] = {"include_dashboard": False, "log_to_driver": True, "configure_logging": False}
    if runtime_env:
        opts["runtime_env"] = runtime_env
    if address == "local":
        opts.update(address="local", num_cpus=int(num_cpus or os.cpu_count() or 1))
    else:
        if address != "auto":
            _check_reachable(address)
        opts["address"] = address
        opts.pop("include_dashboard")  # a client of an existing cluster does not start one
    try:
        ray.init(**opts)
    except (ConnectionError, RuntimeError, ValueError, TimeoutError) as e:
        raise ConfigError(
            f"ray.address (--ray): cannot connect to the Ray cluster at {address!r} ({type(e).__name__}: "
            f"{' '.join(str(e).split())[:300]}); start it (`ray start --head`) or use --ray local"
        ) from None
    return RayConnection(address, True, address == "local", float(ray.cluster_resources().get("CPU", 0)))


def worker_runtime_env(cfg: Any) -> dict[str, Any]:
    """The job's ``runtime_env`` (for :func:`connect`) on a cluster this process does not start (module
    docstring): ``py_modules`` (this package's directory and the reward spec's ``python_path``
    directories), ``excludes`` and ``env_vars`` (:func:`shopping_companion.trainers.submit._env_vars`
    with the API-key variables of ``cfg`` that are set here). Raises :class:`ConfigError` for a
    reward spec that cannot be read."""
    from shopping_companion.trainers.submit import _EXCLUDES, _PACKAGE_DIR, _env_vars

    secrets = [
        name
        for name in (cfg.backend.api_key_env, cfg.judge.api_key_env, getattr(cfg.service, "token_env", None))
        if name and os.environ.get(name)
    ]
    env, _ = _env_vars(list(dict.fromkeys(secrets)))
    modules = [str(_PACKAGE_DIR)]
    try:
        from shopping_companion.rewards.spec import load_reward_spec

        extra = load_reward_spec(cfg.rubric).py_modules()
    except (ShopCompError, OSError, ValueError) as e:
        raise ConfigError(f"rubric: {e}") from None
    modules += [m for m in extra if Path(m).is_dir()]  # single-file modules: on every node's python_path
    return {"py_modules": modules, "excludes": list(_EXCLUDES), "env_vars": env}


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

            from shopping_companion.benchmark.run import build_kit
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
        ray = _ray()
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
        ray = _ray()
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
        ray = _ray()
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
        ray = _ray()
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
