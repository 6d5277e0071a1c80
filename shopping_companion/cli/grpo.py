"""``shopcomp grpo``: prepare verl GRPO datasets and print / check / run the verl launch command.

    shopcomp grpo prepare --bench runs/bench --out runs/grpo/data
    shopcomp grpo launch --variant outcome_tool --model /path/to/sft-merged --rows-dir runs/grpo/data \\
        [--check] [--run] [extra Hydra overrides]

The rows are built by :func:`~shopping_companion.trainers.rows.prepare_datasets`, the command by
:func:`~shopping_companion.trainers.launch.launch_command` and checked by
:func:`~shopping_companion.trainers.launch_check.check_launch`. Errors are raised, never printed
here (the group's one handler prints them). ``python -m shopping_companion.cli.grpo`` runs this
group alone (``scripts/run_grpo.sh``, ``scripts/gpu_smoke.sh``: verl needs this interpreter).
"""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path
from typing import Optional

import typer

from shopping_companion.cli.common import console, new_app, option
from shopping_companion.errors import ConfigError

app = new_app(help="GRPO with verl (cluster): datasets, configs and launch (docs/grpo.md).")


def _deprecated(old: str, new: str, why: str = "") -> None:
    console.print(f"[yellow]note:[/] {old} is deprecated; use {new}{why}", soft_wrap=True)


def _alias(value: Optional[Path], alias: Optional[Path], name: str, old: str, why: str = "") -> Optional[Path]:
    """``value`` of option ``name``, or the deprecated ``old`` spelling's (with a note); both given
    and different is a :class:`ConfigError`."""
    if alias is None:
        return value
    _deprecated(old, name, why)
    if value is not None and Path(value) != Path(alias):
        raise ConfigError(f"{name} {value} and {old} {alias} disagree; give {name} only")
    return alias


@app.command()
def prepare(
    bench: Optional[Path] = typer.Option(
        None, "--bench", metavar="DIR", help="Benchmark directory written by `shopcomp synth` (required)."
    ),
    benchmark: Optional[Path] = typer.Option(None, "--benchmark", hidden=True, help="Deprecated: --bench."),
    out: Path = option(
        Path("runs/grpo/data"),
        metavar="DIR",
        help="Output directory for train.parquet / test.parquet (default runs/grpo/data).",
    ),
    stages: str = option("1,2", metavar="LIST", help="Stages to make rows for: 1,2 (paper; default) | 1 | 2."),
    stage1: str = option("gold", metavar="WHO", help="Who plays stage 1 of a stage-2 row: gold (default) | policy."),
    hint: str = option(
        "none", metavar="HINT", help="User-simulator hint between the stages: none (paper; default) | low | high."
    ),
    max_turns: int = option(
        20, min=1, metavar="N", help="Max assistant turns per stage, shown in the prompts (default 20)."
    ),
    limit: Optional[int] = typer.Option(None, min=1, metavar="N", help="Only the first N tasks of each split."),
) -> None:
    """One verl parquet row per (task, stage): 800 train tasks → 1,600 rows, 200 test → 400."""
    from shopping_companion.trainers.rows import prepare_datasets

    bench = _alias(bench, benchmark, "--bench", "--benchmark")
    if bench is None:
        raise ConfigError("--bench is required: the benchmark directory written by `shopcomp synth`")
    try:
        st = [int(s) for s in stages.split(",") if s.strip()]
    except ValueError:
        raise ConfigError(f"--stages: expected a comma-separated list of 1 and 2, got {stages!r}") from None
    summary = prepare_datasets(bench, out, stages=st, stage1=stage1, hint=hint, max_turns=max_turns, limit=limit)
    typer.echo(json.dumps(summary, indent=2))


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def launch(
    ctx: typer.Context,
    variant: str = option(
        "outcome_tool",
        metavar="NAME",
        help="outcome_tool (R_z + R_tool + R_fmt; default) | outcome_only (R_z + R_fmt) | gpu_smoke (outcome_tool on one GPU, 3 steps).",
    ),
    model: Optional[str] = typer.Option(
        None, metavar="PATH", help="Policy checkpoint (merged SFT model, or base + a LoRA override)."
    ),
    rows_dir: Optional[Path] = typer.Option(
        None,
        "--rows-dir",
        metavar="DIR",
        help="train.parquet / test.parquet of `grpo prepare` (default runs/grpo/data).",
    ),
    data_dir: Optional[Path] = typer.Option(None, "--data-dir", hidden=True, help="Deprecated: --rows-dir."),
    run: bool = typer.Option(False, "--run", help="Run it (needs GPUs, verl and vLLM); default: print it."),
    check: bool = typer.Option(
        False,
        "--check",
        help="First compose the config and check it on CPU (verl's "
        "validate_config, data, model, agent loop, reward, estimator); exit 2 on problems.",
    ),
) -> None:
    """Print (or check, or run) the verl GRPO command; extra arguments are Hydra overrides.

    Exit status: 0 printed (or run and verl exited 0); 2 a bad option or a failed --check;
    with --run, verl's own exit status."""
    from shopping_companion.trainers.launch import launch_command

    rows = _alias(
        rows_dir,
        data_dir,
        "--rows-dir",
        "--data-dir",
        " (--data-dir means the raw data directory in every other command)",
    ) or Path("runs/grpo/data")
    cmd = launch_command(variant, model, rows, list(ctx.args))
    typer.echo(shlex.join(cmd))
    if check:
        from shopping_companion.trainers.launch_check import check_launch

        problems, summary = check_launch(cmd)
        if problems:
            console.print(f"launch check: {len(problems)} problem(s):", soft_wrap=True, markup=False)
            for p in problems:
                console.print(f"  - {p}", soft_wrap=True, markup=False)
            raise typer.Exit(2)
        for note in summary.get("notes") or []:
            console.print(f"warning: {note}", soft_wrap=True, markup=False)
        typer.echo("launch check passed: " + json.dumps(summary, default=str))
    if run:
        raise typer.Exit(subprocess.call(cmd))


if __name__ == "__main__":  # scripts/run_grpo.sh: `python -m shopping_companion.cli.grpo launch ...`
    app()
