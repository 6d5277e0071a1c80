"""``shopcomp grpo trl``: GRPO on one node (CPU or one GPU) with TRL's ``GRPOTrainer`` over the
Shopping Companion environment (:mod:`shopping_companion.trainers.trl_train`; docs/grpo.md).

    shopcomp grpo trl --config configs/grpo/trl_cpu.yaml --set model=/path/model --set bench=runs/bench
    shopcomp grpo trl --config configs/grpo/trl_gpu.yaml --model /path/sft-merged --bench runs/bench --resume

TRL lives in the RL environment (``scripts/install_rl.sh`` → ``.venv-rl``); this module imports
nothing heavy, so ``--help`` works everywhere, and without TRL the command stops with a
:class:`~shopping_companion.errors.ConfigError` saying where to run it. Errors are raised, never
printed here (the group's one handler prints them).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from shopping_companion.cli.common import config_option, console, set_option, sets_of

__all__ = ["trl"]

_NAMES = {
    "model": "--model",
    "bench": "--bench",
    "trainer.output_dir": "--output-dir",
    "trainer.max_steps": "--max-steps",
    "reward_config": "--reward-config",
    "resume": "--resume/--no-resume",
}


def trl(
    config: Optional[Path] = config_option("the TRL GRPO run (configs/grpo/trl_cpu.yaml, trl_gpu.yaml)"),
    set_: Optional[list[str]] = set_option(),
    model: Optional[str] = typer.Option(
        None, "--model", metavar="PATH", help="Policy model: a local directory or a hub id (config key model)."
    ),
    bench: Optional[Path] = typer.Option(
        None, "--bench", metavar="DIR", help="Benchmark directory written by `shopcomp synth` (config key bench)."
    ),
    output_dir: Optional[Path] = typer.Option(
        None, "--output-dir", metavar="DIR", help="Checkpoints, logs, config.yaml, summary.json (trainer.output_dir)."
    ),
    max_steps: Optional[int] = typer.Option(
        None, "--max-steps", min=1, metavar="N", help="Optimizer steps to train to (trainer.max_steps)."
    ),
    reward_config: Optional[str] = typer.Option(
        None,
        "--reward-config",
        metavar="SPEC",
        help="Reward spec: paper | outcome_only | a spec/rubric YAML | module:attr (config key reward_config).",
    ),
    resume: Optional[bool] = typer.Option(
        None,
        "--resume/--no-resume",
        help="Resume from the latest checkpoint in the output directory (one must exist) / start afresh; "
        "default: the config's resume (auto: resume when a checkpoint exists).",
        show_default=False,
    ),
) -> None:
    """GRPO on one node with TRL: same tools, user simulator, judge and rubric as verl.

    Writes checkpoints, config.yaml and summary.json to trainer.output_dir and prints the summary
    (steps, wall time, the last logged reward components) as JSON. Exit status: 0 trained; 2 a bad
    config, a missing TRL or bad data."""
    from shopping_companion.config import load_model
    from shopping_companion.trainers.trl_train import TrlGrpoConfig, require_trl, run_trl

    flags = {
        "model": model,
        "bench": str(bench) if bench is not None else None,
        "trainer.output_dir": str(output_dir) if output_dir is not None else None,
        "trainer.max_steps": max_steps,
        "reward_config": reward_config,
        "resume": resume,
    }
    cfg = load_model(TrlGrpoConfig, config, sets_of(set_), flags, names=_NAMES)
    require_trl()
    summary = run_trl(cfg, console=console)
    last = summary.get("last") or {}
    comps = ", ".join(f"{k[8:-5]} {v:.4g}" for k, v in last.items() if k.startswith("rewards/") and k.endswith("/mean"))
    console.print(
        f"done: {summary['steps']} steps in {summary['wall_s']:.1f} s (setup {summary['setup_s']:.1f} s); "
        f"last logged: {comps or 'nothing'}; summary in {Path(summary['output_dir']) / 'summary.json'}",
        soft_wrap=True,
        markup=False,
    )
    typer.echo(json.dumps({k: v for k, v in summary.items() if k != "logged"}, indent=2, sort_keys=True))
