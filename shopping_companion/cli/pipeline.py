"""``shopcomp pipeline``: benchmark → SFT collection → SFT → GRPO arms → evaluation → report, one
resumable command (:mod:`shopping_companion.train_pipeline`; docs/pipeline.md).

    shopcomp pipeline --config configs/pipeline/cpu_nano.yaml
    shopcomp pipeline --config configs/pipeline/paper.yaml --check
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from shopping_companion.cli.common import app, config_option, console, set_option, sets_of

__all__ = ["pipeline"]

_NAMES = {"name": "--name", "runs_dir": "--runs-dir", "model.path": "--model"}


@app.command("pipeline")
def pipeline(
    config: Optional[Path] = config_option("the pipeline (configs/pipeline/cpu_nano.yaml, paper.yaml)"),
    set_: Optional[list[str]] = set_option(),
    name: Optional[str] = typer.Option(None, "--name", metavar="NAME", help="Run name: outputs in RUNS_DIR/NAME/."),
    runs_dir: Optional[Path] = typer.Option(None, "--runs-dir", metavar="DIR", help="Parent of run directories."),
    model: Optional[str] = typer.Option(
        None, "--model", metavar="PATH", help="Base policy: a local model directory or hub id (model.path)."
    ),
    fresh: Optional[list[str]] = typer.Option(
        None,
        "--fresh",
        metavar="PHASE",
        help="Recompute PHASE (bench, collect, model, sft, grpo, grpo:ARM, eval, ...) and every later phase; "
        "old outputs are moved aside. Repeatable.",
    ),
    check: bool = typer.Option(
        False, "--check", help="Check the config and every phase's settings up to where a GPU is needed; run nothing."
    ),
) -> None:
    """Run the paper's training chain: benchmark, rejection-sampled SFT data from a teacher,
    SFT with LLaMA-Factory, GRPO arms (TRL or verl), evaluation of base, SFT and every arm on
    the test and train splits, and a report with weight hashes, the results table and learning
    curves.

    Every phase is skipped when its output exists with the same identity; rerun the command to
    resume. Exit status: 0 done; 2 a configuration or data error (also a phase made with other
    settings: use --fresh PHASE or another --name); 3 a broken hand-off or a training run that
    cannot be trusted (the report says which); 4 an endpoint down; 5 another process holds the run
    directory; 1 a bug."""
    from shopping_companion.config import load_model
    from shopping_companion.train_pipeline.config import PipelineConfig

    flags = {"name": name, "runs_dir": str(runs_dir) if runs_dir else None, "model.path": model}
    cfg = load_model(PipelineConfig, config, sets_of(set_), flags, names=_NAMES)
    if check:
        from shopping_companion.train_pipeline.check import check_pipeline

        check_pipeline(cfg, console)
        return
    from shopping_companion.train_pipeline.run import Pipeline

    Pipeline(cfg, console, fresh=list(fresh or [])).run()
