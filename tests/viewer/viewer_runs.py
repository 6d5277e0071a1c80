"""Real runs for the viewer's integration tests (test_viewer_store_real.py, test_viewer_browser.py),
built once per test session and shared by both modules (registered in tests/viewer/conftest.py).

One benchmark is synthesised from the real catalog and SGD conversations (4 single-product tasks, 8
haystack sessions per user: 523 memory turns to embed with MiniLM instead of the 2,200+ that 40
sessions per user cost; the rest of the pipeline does not change with the haystack's size) and
written to ``<root>/bench``. Its memory turns are embedded once, in batches, with the session's
embedder (its cache file is the one ``shopcomp eval`` opens, so the CLI runs below read cache
hits). Then:

* ``<root>/store-runs/``: ``ref-a`` (max 12 turns) and ``ref-b`` (max 4 turns), the reference
  policy over strategies ``two_stage:none`` and ``one_stage``, 2 trials, through
  :func:`~shopping_companion.benchmark.evaluate.run_evaluation` (the rule judge, BM25, memory);
  each ``config.yaml`` names the benchmark as ``bench``, relative to ``root``;
* ``<root>/runs/``: ``reference`` and ``scripted``, the real ``shopcomp eval`` command (its Typer
  app, invoked in this process: a subprocess would load the catalog and MiniLM again, 48-57 s a
  run measured on two busy cores) on strategy ``two_stage:none``, 2 trials, at most 6 turns: the
  reference policy, and the scripted LLM policy of tests/scripted_policy.py served over HTTP by
  tests/openai_server.py. With seed 67 the reference policy fails some but not all of its 8
  episodes (the browser's "failed only" filter needs both) and the scripted policy succeeds more
  often, so the compare page shows real success transitions.

The catalog is read through :func:`shopping_companion.assembly.data.load_catalog`, which caches it per
process: the CLI's reference backend then reuses that copy for its attribute vocabulary instead
of parsing the catalog a second time.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

#: The shared benchmark: tasks, seed and haystack sessions per user (see the module docstring).
N_TASKS, SEED, SESSIONS_PER_USER = 4, 67, 8
#: Trials of every run; turn limits of the store runs and of the CLI runs.
TRIALS = 2
STORE_RUNS = {"ref-a": 12, "ref-b": 4}
CLI_MAX_TURNS = 6


@dataclass(frozen=True)
class ViewerRuns:
    """The session's viewer runs.

    ``root``: the directory the runs were started from (``bench/`` is the benchmark); ``bench``:
    the :class:`~shopping_companion.benchmark.synth.Benchmark`; ``store_runs``: the directory
    holding ``ref-a`` and ``ref-b``, whose results (``list[EpisodeResult]`` in file order) are in
    ``store_results`` by run name; ``cli_runs``: the directory holding the ``shopcomp eval`` runs
    ``reference`` and ``scripted`` (nothing else: a test may add runs of its own there)."""

    root: Path
    bench: Any
    store_runs: Path
    store_results: dict[str, list[Any]]
    cli_runs: Path


@contextlib.contextmanager
def _env(**values: str) -> Iterator[None]:
    """Set environment variables for the block, restoring the previous values afterwards."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _shopcomp_eval(args: list[str]) -> None:
    """Run ``shopcomp eval ARGS`` (the real Typer app, in this process); fails the test with the
    command's output and traceback unless it exits 0."""
    import traceback

    from typer.testing import CliRunner

    from shopping_companion.cli import app

    out = CliRunner().invoke(app, ["eval", *args])
    if out.exit_code != 0:
        tb = "".join(traceback.format_exception(*out.exc_info)) if out.exc_info and out.exception else ""
        pytest.fail(f"shopcomp eval {' '.join(args)} exited {out.exit_code}:\n{out.output[-3000:]}\n{tb[-3000:]}")


@pytest.fixture(scope="session")
def viewer_runs(
    catalog_path: Path, catalog_index_dir: Path, product_search, sgd_sessions, embedder, tmp_path_factory
) -> ViewerRuns:
    """Build the session's viewer runs (module docstring; measured 63 s on two busy cores, load
    average 6, once the session's catalog index exists) and return them as :class:`ViewerRuns`."""
    from shopping_companion.benchmark.evaluate import EvalSettings, run_evaluation
    from shopping_companion.benchmark.synth import SynthConfig, synthesize, write_benchmark
    from shopping_companion.envs.env import EnvConfig
    from shopping_companion.judges.rule import RuleJudge
    from shopping_companion.llm.reference import ReferencePolicy, build_attribute_vocabulary
    from shopping_companion.pipeline import load_catalog, memory_factory, prewarm_memory, product_lookup
    from tests.openai_server import ScriptedOpenAIServer
    from tests.scripted_policy import policy_script

    products, _report = load_catalog(catalog_path)

    def searcher(q: str, k: int) -> list[str]:
        return [h["product_id"] for h in product_search.search(q, top_k=k)]

    cfg = SynthConfig(addon_share=0.0, n_tasks=N_TASKS, seed=SEED, sessions_per_user=SESSIONS_PER_USER)
    bench = synthesize(products, sgd_sessions, cfg, searcher=searcher)
    root = tmp_path_factory.mktemp("viewer-runs")
    bench_dir = write_benchmark(bench, root / "bench")
    prewarm_memory(bench.tasks, bench.sessions, embedder)

    judge = RuleJudge(product_lookup(product_search))
    policy = ReferencePolicy(build_attribute_vocabulary(products))
    make_memory = memory_factory(bench.sessions, embedder)
    store_results = {}
    for name, max_turns in STORE_RUNS.items():
        run = root / "store-runs" / name
        run.mkdir(parents=True)
        (run / "config.yaml").write_text("bench:\n  path: bench\n")  # relative to `root`, the run's cwd
        store_results[name] = run_evaluation(
            bench.tasks,
            policy,
            product_search,
            make_memory,
            judge,
            run / "results.jsonl",
            EvalSettings(trials=TRIALS, env=EnvConfig(max_turns=max_turns)),
            progress=False,
            strategies="two_stage:none,one_stage",
        )

    cli_runs = root / "runs"
    common = ["--bench", str(bench_dir), "--runs-dir", str(cli_runs), "--index-dir", str(catalog_index_dir)]
    common += ["--trials", str(TRIALS), "--max-turns", str(CLI_MAX_TURNS), "--concurrency", "2"]
    _shopcomp_eval([*common, "--name", "reference", "--backend", "reference"])
    with ScriptedOpenAIServer(policy_script(bench.tasks)) as srv, _env(SHOPCOMP_VIEWER_TEST_KEY="k"):
        _shopcomp_eval(
            [*common, "--name", "scripted", "--backend", "openai", "--model", "scripted", "--base-url", srv.base_url]
            + ["--api-key-env", "SHOPCOMP_VIEWER_TEST_KEY"]
        )
    return ViewerRuns(root, bench, root / "store-runs", store_results, cli_runs)
