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
"""

from __future__ import annotations

import sys
import types
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
