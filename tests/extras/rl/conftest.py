"""Fixtures for the RL extras (verl 0.9.1, TRL 1.16.0): run in ``.venv-rl`` with
``.venv-rl/bin/python -m pytest -q tests/extras/rl`` (``scripts/install_rl.sh`` builds it).

Shadowing fix: verl's wheel installs a top-level REGULAR package named ``tests`` into
site-packages. Our ``tests/`` directory has no ``__init__.py`` (a namespace package, importable
because pytest puts the repository root on ``sys.path``), and Python's import system lets a
regular package anywhere on ``sys.path`` win over a namespace portion — so ``import tests.tiny_model``
would look inside verl's ``tests``. Before anything imports our helpers, this conftest binds
``sys.modules["tests"]`` to a namespace module whose ``__path__`` is exactly our ``tests/``
directory (and drops any ``tests.*`` submodules already loaded from elsewhere). Nothing outside
this directory changes, and verl's own test package stays untouched on disk.

Missing stacks: each test module calls :func:`require` for the packages it needs; it skips when
they are missing, and FAILS when ``SHOPCOMP_REQUIRE_EXTRAS=1`` (CI sets it).

Ray: one local cluster per test session (:func:`ray_cluster`: 2 CPUs, dashboard and job API on,
token authentication off), started the first time a module asks for it and stopped at the end of
the session; a module connects this process to it with :func:`ray_connection` (disconnected at the
module's end, so modules that do not use Ray never see it initialised) and a CLI subprocess joins
it by address. Ray Serve's health checks of its HTTP proxy are given more time than Ray's defaults
(5 s readiness check, 3 tries), and ray.init more time for the dashboard to start (60 s), which an
overloaded 2-core machine misses while those processes are still importing: the settings below are
inherited by every cluster a test starts.
"""

from __future__ import annotations

import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import types
from dataclasses import dataclass
from pathlib import Path

import pytest

_OUR_TESTS = Path(__file__).resolve().parents[2]


def _bind_our_tests_package() -> None:
    mod = sys.modules.get("tests")
    if mod is not None and [str(p) for p in getattr(mod, "__path__", [])] == [str(_OUR_TESTS)]:
        return
    pkg = types.ModuleType("tests")
    pkg.__path__ = [str(_OUR_TESTS)]  # a namespace-style package rooted at our tests/ only
    pkg.__package__ = "tests"
    sys.modules["tests"] = pkg
    for name in [n for n in sys.modules if n.startswith("tests.")]:
        f = getattr(sys.modules[name], "__file__", None) or ""
        if not f.startswith(str(_OUR_TESTS)):
            del sys.modules[name]


_bind_our_tests_package()

from tests.extras_support import require_modules  # noqa: E402  (after the binding above)

# Ray Serve reads these when its controller and proxies start (every Ray cluster started from this
# session inherits them: the shared one, and the private one of `shopcomp serve` run as a subprocess)
for _k, _v in {
    "RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S": "30",
    "RAY_SERVE_PROXY_HEALTH_CHECK_TIMEOUT_S": "30",
    "RAY_SERVE_PROXY_HEALTH_CHECK_PERIOD_S": "10",
    "RAY_DASHBOARD_STARTUP_TIMEOUT_S": "180",  # ray.init's wait for the dashboard (60 s by default)
}.items():
    os.environ.setdefault(_k, _v)


def require(*modules: str) -> None:
    """Import ``modules`` or skip (fail under ``SHOPCOMP_REQUIRE_EXTRAS=1``): :func:`~tests.extras_support.require_modules`."""
    require_modules("scripts/install_rl.sh and use .venv-rl", *modules)


@pytest.fixture(scope="session")
def tool_model_dir() -> Path:
    """The tiny tool-calling model (overfit once, cached under the session's cache dir)."""
    from tests.tiny_model import build_tool_calling_model

    return build_tool_calling_model()


@pytest.fixture(scope="session")
def rl_kit(catalog_products, sgd_sessions, product_search, embedder):
    """Real tasks (2 single + 1 add-on) over the real index and memory, as EnvResources."""
    from tests.env_support import EnvKit, make_addon_task, make_single_tasks

    from shopping_companion.rewards.rubric import load_rubric
    from shopping_companion.trainers.resources import EnvResources

    tasks, pool = make_single_tasks(catalog_products, sgd_sessions, n=2, seed=7, haystack_size=15)
    addon = make_addon_task(catalog_products, sgd_sessions, seed=7, haystack_size=15)
    pool.update(addon.pool)
    tasks = tasks + [addon.task]
    kit = EnvKit(product_search, embedder, pool)
    return EnvResources(
        tasks={t.task_id: t for t in tasks},
        sessions=pool,
        products=product_search,
        embedder=embedder,
        judge=kit.judge,
        reward_fn=load_rubric("paper", resources={"lookup": kit.lookup}),
    )


def tiny_grpo(rl_kit, out_dir: Path, **overrides):
    """The rows of the kit's first two tasks, our reward functions and a CPU ``GRPOConfig`` (4
    completions per step, one group, no checkpoints) with ``overrides``: ``(rows, funcs, args)``."""
    from trl import GRPOConfig

    from shopping_companion.trainers.rows import build_rows
    from shopping_companion.trainers.trl_rollout import reward_functions, trl_dataset_rows

    rows = trl_dataset_rows(build_rows(list(rl_kit.tasks.values())[:2], benchmark="(test kit)"))
    funcs, weights = reward_functions()
    settings = {
        "output_dir": str(out_dir),
        "use_cpu": True,
        "bf16": False,
        "max_steps": 2,
        "per_device_train_batch_size": 4,
        "num_generations": 4,
        "max_completion_length": 1024,
        "learning_rate": 1e-4,
        "logging_steps": 1,
        "report_to": [],
        "temperature": 0.6,
        "top_p": 0.95,
        "top_k": 20,
        "reward_weights": weights,
        "save_strategy": "no",
        "seed": 0,
        **overrides,
    }
    return rows, funcs, GRPOConfig(**settings)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# The head: ray.init (no Ray client server, which `ray start` adds and which gives up on a slow
# GCS) with the dashboard agent on the given port; ray.init has no parameter for that port, so the
# node parameters it builds get it as their default.
_HEAD = """
import sys, ray
from ray._private import parameter

_init = parameter.RayParams.__init__


def _agent_port(self, *args, **kwargs):
    kwargs.setdefault("dashboard_agent_listen_port", int(sys.argv[2]))
    _init(self, *args, **kwargs)


parameter.RayParams.__init__ = _agent_port
ray.init(num_cpus=2, include_dashboard=True, dashboard_host="127.0.0.1", dashboard_port=int(sys.argv[1]),
         _temp_dir=sys.argv[3], configure_logging=False)
print("READY", ray.get_runtime_context().gcs_address, flush=True)
sys.stdin.read()  # until the session closes stdin
ray.shutdown()
"""


@dataclass(frozen=True)
class RayCluster:
    """The session's Ray cluster: ``address`` (the head's GCS ``host:port``: ``--ray ADDRESS``,
    ``ray.init(address=...)``) and ``dashboard_url`` (``http://127.0.0.1:PORT``, the job API)."""

    address: str
    dashboard_url: str


@pytest.fixture(scope="session")
def ray_cluster(shopcomp_cache_dir) -> RayCluster:
    """One local Ray cluster for the session (2 CPUs, dashboard on, token auth off), started by a
    child process with this environment (its workers inherit ``SHOPCOMP_CACHE_DIR`` and the Serve
    settings above) and stopped at the end of the session. Its dashboard and dashboard agent
    listen on free ports, not Ray's fixed defaults (8265, 52365), which another cluster on this
    machine may hold (the agent's port serves the job API)."""
    ports = [free_port(), free_port()]  # dashboard, dashboard agent
    temp = tempfile.mkdtemp(prefix="rt", dir="/tmp")  # short: Ray's socket paths have a length limit
    # Ray 2.60's ray.init() turns token authentication on and writes ~/.ray/auth_token, which a
    # client or a later head on this machine would then need: off for the head, this process and
    # every CLI subprocess of the session
    old_mode = os.environ.get("RAY_AUTH_MODE")
    os.environ["RAY_AUTH_MODE"] = "disabled"
    proc = subprocess.Popen(
        [sys.executable, "-c", _HEAD, *map(str, ports), temp],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    t0 = time.monotonic()
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 180)
        line = proc.stdout.readline() if ready else ""
        assert line.startswith("READY "), f"the Ray head did not start (exit {proc.poll()})"
        print(f"\nray cluster ready in {time.monotonic() - t0:.1f} s")
        yield RayCluster(address=line.split()[1], dashboard_url=f"http://127.0.0.1:{ports[0]}")
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(temp, ignore_errors=True)
        if old_mode is None:
            os.environ.pop("RAY_AUTH_MODE", None)
        else:
            os.environ["RAY_AUTH_MODE"] = old_mode


@pytest.fixture(scope="module")
def ray_connection(ray_cluster: RayCluster):
    """This process connected to the session's cluster for one module (``connect``: without Ray's
    failure signal handler, which would crash the JVM of the product index); disconnected at the
    module's end. Yields the :class:`RayCluster`."""
    import ray

    from shopping_companion.assembly.cluster import connect

    if ray.is_initialized():  # left connected by an earlier module: connect() would keep that
        ray.shutdown()
    conn = connect(ray_cluster.address)
    try:
        yield ray_cluster
    finally:
        conn.close()
