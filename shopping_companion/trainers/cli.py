"""``shopcomp grpo``: prepare verl GRPO datasets and print/run the verl launch command.

    shopcomp grpo prepare --benchmark runs/bench --out runs/grpo/data
    shopcomp grpo launch --variant outcome_tool --model /path/to/sft-merged [--check] [--run] [-- extra=overrides]
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import List, Optional

import typer

app = typer.Typer(help="GRPO with verl (cluster) — datasets, configs and launch (docs/grpo.md).",
                  no_args_is_help=True)

#: configs/grpo/<name>.yaml a launch can use: the paper's two variants and the one-GPU smoke run
VARIANTS = ("outcome_tool", "outcome_only", "gpu_smoke")
_REPO = Path(__file__).resolve().parents[2]


@app.command()
def prepare(
    benchmark: Path = typer.Option(..., help="Benchmark directory (shopcomp synth --out)."),
    out: Path = typer.Option(Path("runs/grpo/data"), help="Output directory for train.parquet / test.parquet."),
    stages: str = typer.Option("1,2", help="Stages to make rows for: '1,2' (paper), '1' or '2'."),
    stage1: str = typer.Option("gold", help="Who plays stage 1 of a stage-2 row: gold | policy."),
    hint: str = typer.Option("none", help="User-simulator hint between the stages: none | low | high (paper trains with none)."),
    max_turns: int = typer.Option(20, min=1, help="Max assistant turns per stage (shown in the prompts)."),
    limit: Optional[int] = typer.Option(None, min=1, help="Keep the first N tasks of each split (smoke runs)."),
) -> None:
    """One verl parquet row per (task, stage): 800 train tasks → 1,600 rows, 200 test → 400."""
    from shopping_companion.trainers.rows import prepare_datasets

    try:
        st = [int(s) for s in stages.split(",") if s.strip()]
    except ValueError:
        typer.echo(f"--stages: expected a comma-separated list of 1 and 2, got {stages!r}", err=True)
        raise typer.Exit(2)
    try:
        summary = prepare_datasets(benchmark, out, stages=st, stage1=stage1, hint=hint, max_turns=max_turns, limit=limit)
    except (FileNotFoundError, ValueError) as e:
        typer.echo(str(e), err=True)
        raise typer.Exit(2)
    typer.echo(json.dumps(summary, indent=2))


def _hydra_value(value: object) -> str:
    """A path as a Hydra override value: as is when it has only ASCII path characters, else
    single-quoted by Hydra's rules (``\\'`` for a quote; backslashes doubled only where they
    precede a quote or ``${`` or end the value; ``\\${`` so a ``${`` in a path is not an
    interpolation)."""
    text = str(value)
    if re.fullmatch(r"[A-Za-z0-9_./+@%-]+", text):
        return text
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        if text[i] == "\\":
            j = i
            while j < n and text[j] == "\\":
                j += 1
            run = text[i:j]
            out.append(run * 2 if j == n or text[j] == "'" or text.startswith("${", j) else run)
            i = j
        elif text[i] == "'":
            out.append("\\'")
            i += 1
        elif text.startswith("${", i):
            out.append("\\${")
            i += 2
        else:
            out.append(text[i])
            i += 1
    return "'" + "".join(out) + "'"


def launch_command(variant: str, model: Optional[str], data_dir: Path, extra: List[str]) -> list[str]:
    """The verl command for ``variant`` (one of :data:`VARIANTS`) with our config dir.

    verl runs under this interpreter (``sys.executable``: the environment that has this package and
    verl, also when it is not the ``python`` on PATH), and the data files are absolute paths (verl
    reads them inside Ray actors, whose working directory is not necessarily this one); so is a
    ``model`` that exists as a local path (anything else is passed on, e.g. a hub id)."""
    if variant not in VARIANTS:
        raise ValueError(f"variant: must be one of {VARIANTS}, got {variant!r}")
    data_dir = Path(data_dir).expanduser().absolute()
    cmd = [sys.executable, "-m", "verl.trainer.main_ppo", f"--config-path={_REPO / 'configs' / 'grpo'}",
           f"--config-name={variant}", f"data.train_files={_hydra_value(data_dir / 'train.parquet')}",
           f"data.val_files={_hydra_value(data_dir / 'test.parquet')}",
           f"actor_rollout_ref.rollout.agent.agent_loop_config_path={_hydra_value(_REPO / 'configs' / 'grpo' / 'agent_loop.yaml')}"]
    if model:
        local = Path(model).expanduser()
        if local.exists():  # a local directory: absolute, as Ray actors may run elsewhere
            model = str(local.absolute())
        cmd.append(f"actor_rollout_ref.model.path={_hydra_value(model)}")
    return cmd + list(extra)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def launch(
    ctx: typer.Context,
    variant: str = typer.Option("outcome_tool", help="outcome_tool (R_z + R_tool + R_fmt) | outcome_only (R_z + R_fmt) | gpu_smoke (outcome_tool on one GPU, 3 steps)."),
    model: Optional[str] = typer.Option(None, help="Policy checkpoint (merged SFT model, or base + LoRA adapter override)."),
    data_dir: Path = typer.Option(Path("runs/grpo/data"), help="Directory with train.parquet / test.parquet."),
    run: bool = typer.Option(False, "--run", help="Run it (needs GPUs, verl and vLLM); default: print it."),
    check: bool = typer.Option(False, "--check", help="First compose the config and check it on CPU (verl's "
                               "validate_config, data, model, agent loop, reward, estimator); exit 2 on problems."),
) -> None:
    """Print (or run) the verl GRPO command; extra arguments are Hydra overrides."""
    try:
        cmd = launch_command(variant, model, data_dir, list(ctx.args))
    except ValueError as e:
        typer.echo(str(e), err=True)
        raise typer.Exit(2)
    typer.echo(shlex.join(cmd))
    if check:
        from shopping_companion.trainers.launch_check import check_launch

        try:
            problems, summary = check_launch(cmd)
        except RuntimeError as e:
            typer.echo(str(e), err=True)
            raise typer.Exit(2)
        if problems:
            typer.echo(f"launch check: {len(problems)} problem(s):", err=True)
            for p in problems:
                typer.echo(f"  - {p}", err=True)
            raise typer.Exit(2)
        for note in summary.get("notes") or []:
            typer.echo(f"warning: {note}", err=True)
        typer.echo("launch check passed: " + json.dumps(summary, default=str))
    if run:
        raise typer.Exit(subprocess.call(cmd))


if __name__ == "__main__":  # scripts/run_grpo.sh runs `python -m shopping_companion.trainers.cli launch ...`
    app()
