"""The Ray cluster a run uses (docs/cluster.md): :func:`connect` this process to it, and what a
job or an actor started there takes along — this package's directory and the reward spec's
plug-in directories (:func:`worker_runtime_env`), the environment variables that travel
(:func:`worker_env_vars`: settings, never secrets unless named). Shared by ``shopcomp eval --ray``
(the episode workers), ``shopcomp serve`` and ``shopcomp grpo submit``."""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from shopping_companion.errors import ConfigError, ShopCompError

__all__ = [
    "EXCLUDES",
    "FORWARDED",
    "PACKAGE_DIR",
    "PLUGIN_MODULE",
    "RAY_INSTALL_HINT",
    "RayConnection",
    "connect",
    "import_ray",
    "worker_env_vars",
    "worker_runtime_env",
]

RAY_INSTALL_HINT = 'pip install -e ".[serve]" (or use .venv-rl, which has ray)'
#: this package's directory: the ``py_modules`` entry that ships this checkout to a cluster
PACKAGE_DIR = Path(__file__).resolve().parents[1]
#: what is never shipped from it
EXCLUDES = ["__pycache__/", "*.pyc", "*.pyo"]


#: the module that registers ``grpo_judged`` (imported by ``import verl`` through VERL_USE_EXTERNAL_MODULES)
PLUGIN_MODULE = "shopping_companion.trainers.verl_plugin"


#: environment variables of this process passed to the job when set (settings, never secrets)
FORWARDED = (
    "VERL_USE_EXTERNAL_PLUGINS",
    "WANDB_MODE",
    "WANDB_PROJECT",
    "WANDB_ENTITY",
    "WANDB_BASE_URL",
    "HF_HUB_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "HF_ENDPOINT",
)


_SECRET = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?)$", re.IGNORECASE)


def worker_env_vars(secrets: Sequence[str]) -> tuple[dict[str, str], list[str]]:
    """``(env_vars, names)`` for a Ray job's ``runtime_env``: verl's settings, the
    ``VERL_USE_EXTERNAL_MODULES`` that loads :data:`PLUGIN_MODULE`, the :data:`FORWARDED` variables
    and ``SHOPCOMP_*`` settings set here (never one whose name looks secret), and the variables named
    in ``secrets`` (``names``: those, in order). Raises :class:`ConfigError` for a name that is not a
    variable name or not set here."""
    env = {"HYDRA_FULL_ERROR": "1", "VLLM_USE_V1": "1"}
    theirs = [m for m in os.environ.get("VERL_USE_EXTERNAL_MODULES", "").split(",") if m.strip()]
    env["VERL_USE_EXTERNAL_MODULES"] = ",".join(dict.fromkeys([*theirs, PLUGIN_MODULE]))
    for k in FORWARDED:
        if os.environ.get(k):
            env[k] = os.environ[k]
    for k, v in os.environ.items():
        if k.startswith("SHOPCOMP_") and v and not _SECRET.search(k):
            env[k] = v
    names: list[str] = []
    for name in secrets:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name or ""):
            raise ConfigError(f"--env-var: {name!r} is not an environment variable name")
        if not os.environ.get(name):
            raise ConfigError(f"--env-var {name}: not set in this environment (nothing to pass to the job)")
        env[name] = os.environ[name]
        names.append(name)
    return env, names


def import_ray() -> Any:
    """The ``ray`` module; raises :class:`ConfigError` with the install hint when Ray is missing."""
    try:
        import ray
    except ImportError as e:
        raise ConfigError(f"ray: --ray needs Ray in this environment ({e}); install it: {RAY_INSTALL_HINT}") from None
    return ray


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
            import_ray().shutdown()


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


def local_cpus(num_cpus: int | None = None) -> int:
    """CPUs of a private cluster (``--ray local``): ``num_cpus`` (an integer >= 1, as Ray counts
    a node's CPUs), default every CPU of this machine. Raises :class:`ConfigError` for a value
    below 1 or not a whole number."""
    if num_cpus is None:
        return os.cpu_count() or 1
    if isinstance(num_cpus, bool) or float(num_cpus) != int(num_cpus) or int(num_cpus) < 1:
        raise ConfigError(f"num_cpus (--num-cpus): a whole number of CPUs >= 1, got {num_cpus!r}")
    return int(num_cpus)


def connect(address: str, num_cpus: int | None = None, runtime_env: dict[str, Any] | None = None) -> RayConnection:
    """Connect this process to Ray. ``address``: ``local`` (start a private cluster on this
    machine with ``num_cpus`` CPUs, default all of them), ``auto`` (the cluster this machine
    belongs to), ``HOST:PORT`` (a running cluster's head) or ``ray://HOST:PORT`` (Ray client).
    ``runtime_env``: the job's runtime env (:func:`worker_runtime_env`; Ray uploads local
    ``py_modules`` only at this level). A process already connected (``ray.is_initialized()``)
    keeps its connection and its job's runtime env, whatever the address. Raises
    :class:`ConfigError` (exit 2) when Ray is not installed or nothing answers at the address.

    Ray's own failure signal handler is not installed in this process: the driver runs the JVM
    (the product index), which handles ``SIGSEGV`` itself and crashes under Ray's handler."""
    ray = import_ray()
    address = (address or "").strip()
    if ray.is_initialized():
        return RayConnection(address, False, address == "local", float(ray.cluster_resources().get("CPU", 0)))
    import ray._private.ray_constants as ray_constants

    ray_constants.RAY_DISABLE_FAILURE_SIGNAL_HANDLER = True  # read when ray.init builds the core worker
    opts: dict[str, Any] = {"include_dashboard": False, "log_to_driver": True, "configure_logging": False}
    if runtime_env:
        opts["runtime_env"] = runtime_env
    if address == "local":
        opts.update(address="local", num_cpus=local_cpus(num_cpus))
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
    """The job's ``runtime_env`` (for :func:`connect`) on a cluster this process does not start:
    ``py_modules`` (this package's directory and the reward spec's ``python_path``
    directories), ``excludes`` and ``env_vars`` (:func:`worker_env_vars` with the API-key variables
    of ``cfg`` that are set here). Raises :class:`ConfigError` for a reward spec that cannot be
    read."""
    from shopping_companion.assembly.reward_spec import load_reward_spec

    secrets = [
        name
        for name in (cfg.backend.api_key_env, cfg.judge.api_key_env, getattr(cfg.service, "token_env", None))
        if name and os.environ.get(name)
    ]
    env, _ = worker_env_vars(list(dict.fromkeys(secrets)))
    modules = [str(PACKAGE_DIR)]
    try:
        extra = load_reward_spec(cfg.rubric).py_modules()
    except (ShopCompError, OSError, ValueError) as e:
        raise ConfigError(f"rubric: {e}") from None
    modules += [m for m in extra if Path(m).is_dir()]  # single-file modules: on every node's python_path
    return {"py_modules": modules, "excludes": list(EXCLUDES), "env_vars": env}
