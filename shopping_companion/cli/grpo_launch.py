"""``shopcomp grpo launch`` and ``shopcomp grpo submit``: print, check (on CPU) or run the verl GRPO
command, or submit it to a running Ray cluster as a Ray job (:mod:`~shopping_companion.cli.grpo`
registers both; docs/grpo.md).

The command is built by :func:`~shopping_companion.trainers.launch.launch_command`, checked by
:func:`~shopping_companion.trainers.launch_check.check_launch` and submitted by
:mod:`shopping_companion.trainers.submit`. Errors are raised, never printed here (the group's one
handler prints them).
"""

from __future__ import annotations

import json
import subprocess
import shlex
from pathlib import Path
from typing import Any, Optional

import typer

from shopping_companion.cli.common import console, deprecated_alias, option
from shopping_companion.errors import ConfigError

__all__ = ["launch", "submit"]

_REWARD_HELP = (
    "Reward spec of both verl sides (paper | outcome_only | a YAML file | package.module:attr; docs/rewards.md); "
    "default: the spec recorded in --rows-dir by `grpo prepare --reward-config`, else the variant's."
)


def _reward_spec(reward_config: Optional[str], rows: Path, extra: list[str]) -> Any:
    """The reward spec a launch passes: ``--reward-config``, else the one recorded in ``rows``
    (said so), else None (the variant's). Refuses ``--reward-config`` together with a Hydra
    override of the same key (Hydra would take the last one silently)."""
    from shopping_companion.trainers.launch import RECORDED_SPEC, REWARD_CONFIG_KEY, recorded_reward_spec

    overridden = any(a.lstrip("+~").startswith(REWARD_CONFIG_KEY + "=") for a in extra)
    if reward_config is not None:
        if overridden:
            raise ConfigError(f"--reward-config and the override {REWARD_CONFIG_KEY}=... both set; give one")
        from shopping_companion.assembly.reward_spec import load_reward_spec

        return load_reward_spec(reward_config)
    if overridden:
        return None
    spec = recorded_reward_spec(rows)
    if spec is not None:
        console.print(
            f"note: reward spec from {rows / RECORDED_SPEC} (recorded by grpo prepare): rubric "
            f"{spec.rubric if isinstance(spec.rubric, str) else 'inline'}, judge {spec.judge.describe()}",
            soft_wrap=True,
            markup=False,
        )
    return spec


def _rows_option(rows_dir: Optional[Path], data_dir: Optional[Path]) -> Path:
    return deprecated_alias(
        rows_dir,
        data_dir,
        "--rows-dir",
        "--data-dir",
        " (--data-dir means the raw data directory in every other command)",
    ) or Path("runs/grpo/data")


def _report_check(cmd: list[str], extra_problems: Any = None) -> dict[str, Any]:
    """Run --check on ``cmd``; print the problems and exit 2, or print the notes and the summary.
    ``extra_problems(summary) -> list[str]`` adds checks of the caller."""
    from shopping_companion.trainers.launch_check import check_launch

    problems, summary = check_launch(cmd)
    if extra_problems is not None and summary:
        problems = problems + list(extra_problems(summary))
    if problems:
        console.print(f"launch check: {len(problems)} problem(s):", soft_wrap=True, markup=False)
        for p in problems:
            console.print(f"  - {p}", soft_wrap=True, markup=False)
        raise typer.Exit(2)
    for note in summary.get("notes") or []:
        console.print(f"warning: {note}", soft_wrap=True, markup=False)
    typer.echo("launch check passed: " + json.dumps(summary, default=str))
    return summary


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
    reward_config: Optional[str] = typer.Option(None, "--reward-config", metavar="SPEC", help=_REWARD_HELP),
    run: bool = typer.Option(False, "--run", help="Run it (needs GPUs, verl and vLLM); default: print it."),
    check: bool = typer.Option(
        False,
        "--check",
        help="First compose the config and check it on CPU (verl's validate_config, data, model, agent loop, "
        "reward spec and judge, estimator, wandb, checkpoint dir); exit 2 on problems.",
    ),
) -> None:
    """Print (or check, or run) the verl GRPO command; extra arguments are Hydra overrides.

    Exit status: 0 printed (or run and verl exited 0); 2 a bad option or a failed --check;
    with --run, verl's own exit status."""
    from shopping_companion.trainers.launch import launch_command

    rows = _rows_option(rows_dir, data_dir)
    spec = _reward_spec(reward_config, rows, list(ctx.args))
    cmd = launch_command(variant, model, rows, list(ctx.args), reward_spec=spec)
    typer.echo(shlex.join(cmd))
    if check:
        _report_check(cmd)
    if run:
        raise typer.Exit(subprocess.call(cmd))


def submit(
    ctx: typer.Context,
    variant: str = option(
        "outcome_tool", metavar="NAME", help="outcome_tool (default) | outcome_only | gpu_smoke (as for launch)."
    ),
    model: Optional[str] = typer.Option(
        None, metavar="PATH", help="Policy checkpoint; a path must exist at that path on the cluster's nodes."
    ),
    rows_dir: Optional[Path] = typer.Option(
        None, "--rows-dir", metavar="DIR", help="Rows of `grpo prepare` (default runs/grpo/data; shared storage)."
    ),
    reward_config: Optional[str] = typer.Option(None, "--reward-config", metavar="SPEC", help=_REWARD_HELP),
    address: Optional[str] = typer.Option(
        None,
        "--address",
        metavar="URL",
        help="Ray dashboard of the running cluster (default $RAY_ADDRESS if an http URL, else http://127.0.0.1:8265).",
    ),
    submission_id: Optional[str] = typer.Option(
        None, "--submission-id", metavar="ID", help="Job id (default shopcomp-<variant>-<UTC time>)."
    ),
    python: Optional[str] = typer.Option(
        None,
        "--python",
        metavar="PY",
        help="Interpreter of the entrypoint on the head node (default: this one; from another machine e.g. python).",
    ),
    env_var: list[str] = typer.Option(
        [],
        "--env-var",
        metavar="NAME",
        help="Pass this environment variable's value to the job (e.g. WANDB_API_KEY, the judge's key); "
        "repeatable; never printed.",
    ),
    check: bool = typer.Option(True, "--check/--no-check", help="Run the launch check here first (default on)."),
    smoke: bool = typer.Option(
        False, "--smoke", help="Before submitting, run a packaging check job on the cluster (every node)."
    ),
    smoke_only: bool = typer.Option(False, "--smoke-only", help="Run the packaging check job only."),
    smoke_timeout: float = typer.Option(300.0, "--smoke-timeout", min=1, metavar="S", help="Wait at most S seconds."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the job (entrypoint, runtime_env); submit nothing."),
) -> None:
    """Submit the verl GRPO run to a running Ray cluster as a Ray job; extra arguments are Hydra overrides.

    The job ships this package and the reward spec's modules (py_modules) and configs/grpo
    (working_dir); see docs/grpo.md. Exit status: 0 submitted (or printed, or smoke passed);
    2 a bad option, a failed --check or a failed smoke check; 4 no Ray dashboard answers."""
    from shopping_companion.trainers.launch import launch_command
    from shopping_companion.trainers.submit import follow_commands, plan_job, run_smoke, smoke_args, submit_job

    rows = _rows_option(rows_dir, None)
    spec = _reward_spec(reward_config, rows, list(ctx.args))
    cmd = launch_command(variant, model, rows, list(ctx.args), reward_spec=spec)
    summary: dict[str, Any] = {}
    if check:
        import os

        from shopping_companion.assembly.cluster import PLUGIN_MODULE

        if spec is not None:
            spec.activate()  # the spec's python_path on the driver, for its rubric's imports
        # as in the job: `import verl` imports the estimator's plugin without its entry point
        mods = [m for m in os.environ.get("VERL_USE_EXTERNAL_MODULES", "").split(",") if m.strip()]
        os.environ["VERL_USE_EXTERNAL_MODULES"] = ",".join(dict.fromkeys([*mods, PLUGIN_MODULE]))

        def job_problems(s: dict[str, Any]) -> list[str]:
            out = []
            d = str(s.get("checkpoint_dir") or "")
            if d and not Path(d).expanduser().is_absolute():
                out.append(
                    f"trainer.default_local_dir: {d} is relative; in a Ray job it would land in Ray's temporary "
                    "copy of the working directory on whichever node runs the trainer. Set SHOPCOMP_CKPT_DIR="
                    "/shared/ckpt (passed to the job) or trainer.default_local_dir=/shared/..."
                )
            return out

        summary = _report_check(cmd, job_problems)
        if str(summary.get("wandb", "")).startswith("online") and "WANDB_API_KEY" not in env_var:
            console.print(
                "warning: wandb is online: the trainer runs on a cluster node and needs a key there "
                "(--env-var WANDB_API_KEY, or `wandb login` on every node)",
                soft_wrap=True,
                markup=False,
            )
    plan = plan_job(cmd, spec, address=address, submission_id=submission_id, python=python, secrets=env_var)
    try:
        typer.echo("job: " + json.dumps(plan.printable()))
        if dry_run:
            return
        if smoke or smoke_only:
            model_path = str(summary.get("model") or "")
            paths = [*summary.get("data_files", []), *summary.get("benchmarks", [])]
            if model_path.startswith("/"):
                paths.append(model_path)
            ckpt = [summary["checkpoint_dir"]] if summary.get("checkpoint_dir") else []
            args = smoke_args(plan, spec, config_name=variant, paths=paths, writable=ckpt)
            res = run_smoke(plan, args, timeout_s=smoke_timeout)
            report = res["report"] or {}
            typer.echo("smoke report: " + json.dumps(report, default=str))
            for w in [report.get("driver"), *(report.get("nodes") or [])]:
                if w:
                    typer.echo(
                        f"smoke {w.get('host')}: package {w.get('package')} (shipped: {w.get('shipped')}), "
                        f"modules {w.get('modules')}, grpo_judged registered: "
                        f"{(w.get('adv_estimator') or {}).get('registered')}"
                    )
            for w in res.get("warnings") or []:
                console.print(f"warning: smoke {w}", soft_wrap=True, markup=False)
            if res["problems"]:
                console.print(f"smoke job {res['submission_id']}: {len(res['problems'])} problem(s):", markup=False)
                for p in res["problems"]:
                    console.print(f"  - {p}", soft_wrap=True, markup=False)
                console.print(res["logs_tail"], soft_wrap=True, markup=False, highlight=False)
                raise typer.Exit(2)
            typer.echo(f"smoke passed: job {res['submission_id']} ({res['status']})")
            if smoke_only:
                return
        sid = submit_job(plan)
        typer.echo(f"submitted: {sid}")
        for what, line in follow_commands(plan.address, sid).items():
            typer.echo(f"  {what + ':':8}{line}")
    finally:
        plan.cleanup()
