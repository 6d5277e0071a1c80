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
from typing import Any, Optional

import typer

from shopping_companion.cli.common import Flag, console

__all__ = ["TRL_FLAGS", "TRL_HELP", "trl"]

# fmt: off
#: Every ``grpo trl`` flag and the :class:`~shopping_companion.trainers.trl_train.TrlGrpoConfig` key
#: it overrides (registered by :mod:`shopping_companion.cli.grpo` with ``flag_command``).
TRL_FLAGS: list[Flag] = [
    Flag("--model PATH", "model", str, "Policy model: a local directory or a hub id (config key model)."),
    Flag("--bench DIR", "bench", Path, "Benchmark directory written by `shopcomp synth` (config key bench)."),
    Flag("--output-dir DIR", "trainer.output_dir", Path, "Checkpoints, logs, config.yaml, summary.json (trainer.output_dir)."),
    Flag("--max-steps N", "trainer.max_steps", int, "Optimizer steps to train to (trainer.max_steps).", min=1),
    Flag("--reward-config SPEC", "reward_config", str, "Reward spec: paper | outcome_only | a spec/rubric YAML | module:attr (config key reward_config)."),
    Flag("--resume/--no-resume", "resume", bool, "Resume from the latest checkpoint in the output directory (one must exist) / start afresh; default: the config's resume (auto: resume when a checkpoint exists)."),
]
# fmt: on
#: How the flags are named in error messages (the on/off pair in full).
_NAMES = {f.key: f.usage.split()[0] for f in TRL_FLAGS}

TRL_HELP = """GRPO on one node with TRL: same tools, user simulator, judge and rubric as verl.

    Writes checkpoints, config.yaml and summary.json to trainer.output_dir and prints the summary
    (steps, wall time, the last logged reward components) as JSON. Exit status: 0 trained; 2 a bad
    config, a missing TRL or bad data."""


def trl(config: Optional[Path], sets: list[str], overrides: dict[str, Any]) -> None:
    """The ``grpo trl`` command (:data:`TRL_HELP`): ``overrides`` are the given flags by config key."""
    from shopping_companion.config import load_model
    from shopping_companion.trainers.trl_train import TrlGrpoConfig, require_trl, run_trl

    flags = {k: str(v) if isinstance(v, Path) else v for k, v in overrides.items()}  # the config's paths are strings
    cfg = load_model(TrlGrpoConfig, config, sets, flags, names=_NAMES)
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
