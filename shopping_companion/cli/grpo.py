"""``shopcomp grpo``: prepare verl GRPO datasets and print / check / run the verl launch command.

    shopcomp grpo prepare --bench runs/bench --out runs/grpo/data [--reward-config X]
    shopcomp grpo launch --variant outcome_tool --model /path/to/sft-merged --rows-dir runs/grpo/data \\
        [--reward-config X] [--check] [--run] [extra Hydra overrides]
    shopcomp grpo submit --address http://127.0.0.1:8265 --model ... --rows-dir ... [--smoke] [overrides]

The rows are built by :func:`~shopping_companion.trainers.rows.prepare_datasets`, the command by
:func:`~shopping_companion.trainers.launch.launch_command`, checked by
:func:`~shopping_companion.trainers.launch_check.check_launch` and submitted to a Ray cluster by
:mod:`shopping_companion.trainers.submit`. Errors are raised, never printed
here (the group's one handler prints them). ``python -m shopping_companion.cli.grpo`` runs this
group alone (``scripts/run_grpo.sh``, ``scripts/gpu_smoke.sh``: verl needs this interpreter).
``launch`` and ``submit`` live in :mod:`~shopping_companion.cli.grpo_launch`, ``trl`` in
:mod:`~shopping_companion.cli.grpo_trl`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from shopping_companion.cli.common import console, deprecated_alias, flag_command, new_app, option
from shopping_companion.errors import ConfigError

app = new_app(help="GRPO with verl (cluster): datasets, configs and launch (docs/grpo.md).")


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
    reward_config: Optional[str] = typer.Option(
        None,
        "--reward-config",
        metavar="SPEC",
        help="Reward spec to record with the rows (reward_config.json; `grpo launch` uses it): "
        "paper | outcome_only | a YAML file | package.module:attr (docs/rewards.md).",
    ),
) -> None:
    """One verl parquet row per (task, stage): 800 train tasks → 1,600 rows, 200 test → 400."""
    from shopping_companion.trainers.launch import RECORDED_SPEC, record_reward_spec
    from shopping_companion.trainers.rows import prepare_datasets

    bench = deprecated_alias(bench, benchmark, "--bench", "--benchmark")
    if bench is None:
        raise ConfigError("--bench is required: the benchmark directory written by `shopcomp synth`")
    try:
        st = [int(s) for s in stages.split(",") if s.strip()]
    except ValueError:
        raise ConfigError(f"--stages: expected a comma-separated list of 1 and 2, got {stages!r}") from None
    spec = None
    if reward_config is not None:  # resolved (and its rubric built) before any row is written
        from shopping_companion.assembly.reward_spec import load_reward_spec

        spec = load_reward_spec(reward_config)
        spec.component_keys()
    summary = prepare_datasets(bench, out, stages=st, stage1=stage1, hint=hint, max_turns=max_turns, limit=limit)
    if spec is not None:
        summary["reward_config"] = [str(p) for p in record_reward_spec(spec, out)]
    else:
        for stale in (Path(out) / RECORDED_SPEC, Path(out) / "reward_config.yaml"):
            if stale.is_file():  # a spec recorded with earlier rows no longer describes these
                stale.unlink()
                console.print(f"note: removed {stale} (recorded by an earlier prepare)", soft_wrap=True, markup=False)
    typer.echo(json.dumps(summary, indent=2))


from shopping_companion.cli.grpo_launch import launch, submit  # noqa: E402 - the verl command: print, check, run, submit
from shopping_companion.cli.grpo_trl import TRL_FLAGS, TRL_HELP, trl  # noqa: E402 - TRL on one node (imports TRL lazily)

_EXTRA_ARGS = {"allow_extra_args": True, "ignore_unknown_options": True}
app.command(context_settings=_EXTRA_ARGS)(launch)
app.command(context_settings=_EXTRA_ARGS)(submit)
flag_command(
    app, "trl", TRL_FLAGS, trl, help=TRL_HELP, config_what="the TRL GRPO run (configs/grpo/trl_cpu.yaml, trl_gpu.yaml)"
)


if __name__ == "__main__":  # scripts/run_grpo.sh: `python -m shopping_companion.cli.grpo launch ...`
    app()
