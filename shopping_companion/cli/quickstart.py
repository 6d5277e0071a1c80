"""``shopcomp quickstart``: the main job — index, synthesis, evaluation of the reference policy,
report — from one :class:`~shopping_companion.benchmark.run_config.QuickstartConfig`."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Optional

from rich.markup import escape

from shopping_companion.cli.common import Flag, app, console, flag_command, flag_names, pick
from shopping_companion.cli.eval import EVAL_FLAGS, exit_for, print_summary
from shopping_companion.cli.synth import print_build

QUICKSTART_FLAGS = [
    Flag("--name NAME", "name", str, "Run name: outputs go to RUNS_DIR/NAME/ (default quickstart)."),
    Flag("--n-tasks N", "synth.n_tasks", int, "Tasks to synthesise and evaluate (default 50)."),
    Flag("--seed N", "synth.seed", int, "Synthesis seed (default 0)."),
    *pick(EVAL_FLAGS, "backend.kind", "backend.base_url", "backend.model", "backend.api_key_env", prefix="eval."),
    *pick(EVAL_FLAGS, "data.data_dir", "output.runs_dir"),
]
#: the quickstart's runs directory is a top-level key (its eval section gets it from there)
QUICKSTART_FLAGS[-1] = Flag("--runs-dir DIR", "runs_dir", Path, QUICKSTART_FLAGS[-1].help)


def _reusable(bench: Path, cfg: Any) -> bool:
    """A complete benchmark already at ``bench`` built with the same synthesis settings
    (:func:`~shopping_companion.benchmark.synth.finished_build`; an inconsistent one is noted and rebuilt)."""
    from shopping_companion.benchmark.synth import finished_build

    return finished_build(bench, cfg, console) is not None


def _calibrate(bench: Path, results: Path) -> None:
    """Record the reference policy's Succ by source and task type in the benchmark's stats.md."""
    from shopping_companion.benchmark.calibrate import calibrate_benchmark
    from shopping_companion.errors import DataError

    try:
        cal = calibrate_benchmark(bench, results, policy="reference")
    except DataError as e:
        console.print(f"[yellow]note:[/] no difficulty calibration: {escape(str(e))}", soft_wrap=True)
        return
    rows = cal["by_source"]
    parts = [f"{s} {100 * r['all']['succ']:.0f}%" for s, r in rows.items() if s != "all" and r["all"]["n"]]
    console.print(f"reference-policy Succ by source: {', '.join(parts)} (in {bench / 'stats.md'})", soft_wrap=True)


def _quickstart(config: Optional[Path], sets: list[str], overrides: dict[str, Any]) -> None:
    from shopping_companion.phases import show_phases

    t0 = time.perf_counter()
    with show_phases(lambda line: console.print(escape(line), soft_wrap=True)) as clock:
        outcome = _run_quickstart(config, sets, overrides)
    console.print(f"quickstart finished in {time.perf_counter() - t0:.1f}s ({escape(clock.summary())})", soft_wrap=True)
    exit_for(outcome)


def _run_quickstart(config: Optional[Path], sets: list[str], overrides: dict[str, Any]) -> Any:
    """The quickstart's steps; each phase prints its wall time as it ends
    (:mod:`shopping_companion.phases`)."""
    from shopping_companion.benchmark.run import run_benchmark
    from shopping_companion.benchmark.run_config import QuickstartConfig
    from shopping_companion.benchmark.synth import build_from_data
    from shopping_companion.config import load_model
    from shopping_companion.phases import phase

    with phase("start-up"):
        qs = load_model(QuickstartConfig, config, sets, overrides, names=flag_names(QUICKSTART_FLAGS))
        eval_cfg = qs.eval_config()
        reusable = _reusable(qs.bench_dir, qs.synth)
    if reusable:
        console.print(f"reusing benchmark {escape(str(qs.bench_dir))}")
    else:
        result = build_from_data(
            qs.bench_dir,
            qs.synth,
            data_dir=qs.data.data_dir,
            index_dir=qs.data.index_dir,
            sharegpt=qs.sharegpt,
            relax_min_attributes=True,
            console=console,
        )
        print_build(qs.bench_dir, result)
    outcome = run_benchmark(eval_cfg, console)
    print_summary(outcome)
    if eval_cfg.backend.kind == "reference":
        with phase("calibration"):
            _calibrate(qs.bench_dir, outcome.results_path)
    return outcome


flag_command(
    app,
    "quickstart",
    QUICKSTART_FLAGS,
    _quickstart,
    help="""The main job: build the index (cached),
    synthesise tasks, evaluate the reference policy, write the report.

    Settings: --config (e.g. configs/quickstart.yaml), then the flags, then --set key=value (keys:
    name, runs_dir, sharegpt, data.*, synth.* as in configs/benchmark/*.yaml, eval.* as in
    `shopcomp eval`'s config). Rerun to resume; results of another configuration are moved aside.""",
)
