"""Fixtures of the agent-framework adapters' suite (verifiers 0.4.0, skyrl-gym 0.4.0): run in
``.venv-agents`` with ``.venv-agents/bin/python -m pytest -q tests/extras/agents``
(``scripts/install_agents.sh`` builds it).

Each test module calls :func:`require` for the packages it needs: it skips when they are missing,
and FAILS when ``SHOPCOMP_REQUIRE_EXTRAS=1`` (scripts/test.sh and CI set it). The benchmark is the
small one every suite synthesises offline from the real catalog and SGD sessions
(``synth_bench`` of tests/conftest.py), written to disk once for the run and shared with
tests/extras/inspect, which plays the same one (:func:`~tests.extras_support.shared_benchmark`);
the reference run is ``shopcomp eval`` on it with the scripted policy server (:func:`eval_results`).
"""

from __future__ import annotations


import pytest

from tests.extras_support import require_modules, shared_benchmark
import yaml

#: tasks of the suite's benchmark and the strategies every parity test plays
N_TASKS = 10
STRATEGIES = ["two_stage:none", "two_stage:high", "one_stage", "oracle"]
#: the environment limits of every run of the suite (short episodes)
ENV = {"max_turns": 6}


def require(*modules: str) -> None:
    """Import ``modules`` or skip (fail under ``SHOPCOMP_REQUIRE_EXTRAS=1``): :func:`~tests.extras_support.require_modules`."""
    require_modules("scripts/install_agents.sh and use .venv-agents", *modules)


@pytest.fixture(scope="session")
def agents_bench_and_dir(request):
    """The suite's benchmark and its directory: the one tests/extras/inspect plays too (same
    arguments), synthesised once for both (:func:`~tests.extras_support.shared_benchmark`)."""
    return shared_benchmark(request, N_TASKS, seed=36, sessions_per_user=30)


@pytest.fixture(scope="session")
def agents_bench(agents_bench_and_dir):
    return agents_bench_and_dir[0]


@pytest.fixture(scope="session")
def agents_bench_dir(agents_bench_and_dir):
    return agents_bench_and_dir[1]


@pytest.fixture(scope="session")
def source_settings(agents_bench_dir, catalog_index_dir, tmp_path_factory) -> dict:
    """The :func:`~shopping_companion.integrations.episodes.load_source` settings of the suite's runs."""
    return {
        "bench": str(agents_bench_dir),
        "env": dict(ENV),
        "index_dir": str(catalog_index_dir),
        "run_dir": str(tmp_path_factory.mktemp("agentsjudge") / "run"),
    }


@pytest.fixture(scope="session")
def eval_results(agents_bench, agents_bench_dir, catalog_index_dir, tmp_path_factory):
    """``shopcomp eval`` of the suite's benchmark under :data:`STRATEGIES` with the scripted policy
    server: ``{(task_id, strategy name): EpisodeResult}``."""
    from typer.testing import CliRunner

    from shopping_companion.benchmark.metrics import strategy_name
    from shopping_companion.benchmark.report import read_results
    from shopping_companion.cli import app
    from tests.openai_server import ScriptedOpenAIServer
    from tests.scripted_policy import policy_script

    runs = tmp_path_factory.mktemp("agentsruns")
    with ScriptedOpenAIServer(policy_script(agents_bench.tasks)) as policy:
        cfg = {
            "bench": {"path": str(agents_bench_dir)},
            "output": {"name": "eval", "runs_dir": str(runs)},
            "backend": {"kind": "openai", "model": "m", "base_url": policy.base_url, "max_retries": 0},
            "strategies": STRATEGIES,
            "env": dict(ENV),
            "concurrency": 2,
            "data": {"index_dir": str(catalog_index_dir)},
        }
        path = runs / "run.yaml"
        path.write_text(yaml.safe_dump(cfg))
        out = CliRunner().invoke(app, ["eval", "--config", str(path)])
        assert out.exit_code == 0, out.output
    results = read_results(runs / "eval" / "results.jsonl")
    assert len(results) == N_TASKS * len(STRATEGIES)
    return {(r.task_id, strategy_name(r.mode, r.hint)): r for r in results}
