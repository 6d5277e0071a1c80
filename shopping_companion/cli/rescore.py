"""``shopcomp rescore``: re-judge and re-reward the stored trajectories of an evaluation run under
another reward spec (:func:`shopping_companion.benchmark.rescore.rescore_run`), print the headline."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from shopping_companion.cli.common import app, console, option
from shopping_companion.cli.eval import exit_for, print_summary

__all__ = ["rescore_cmd"]


@app.command("rescore")
def rescore_cmd(
    run: str = typer.Argument(..., metavar="RUN", hidden=True, show_default=False),
    reward_config: str = option(
        ...,
        "--reward-config",
        "--rubric",
        metavar="SPEC",
        help="The reward spec to score with: paper | outcome_only | spec/rubric YAML | module:attr (docs/rewards.md).",
    ),
    name: str = option(..., "--name", metavar="NAME", help="Name of the new run: it goes to RUNS_DIR/NAME/."),
    runs_dir: Optional[Path] = option(
        None, "--runs-dir", metavar="DIR", help="Parent of the new run (default: the source run's parent)."
    ),
    bench: Optional[Path] = option(
        None,
        "--bench",
        metavar="DIR",
        help="The benchmark directory (default: the source run's bench.path, relative to where it ran).",
    ),
    judge: Optional[str] = option(
        None, "--judge", metavar="KIND", help="rule | llm (default: the spec's judge, else the source run's)."
    ),
    judge_model: Optional[str] = option(None, "--judge-model", metavar="NAME", help="Judge model (--judge llm)."),
    judge_base_url: Optional[str] = option(None, "--judge-base-url", metavar="URL", help="Judge endpoint."),
    judge_api_key_env: Optional[str] = option(
        None, "--judge-api-key-env", metavar="VAR", help="Variable holding the judge's API key."
    ),
) -> None:
    """Score the finished run RUN (a `shopcomp eval` run directory, runs/NAME) again with another
    rubric or judge, without running the policy: every stored trajectory is judged and rewarded
    anew into a new run (its own identity, report and parquet files; compare the two in `shopcomp
    view`). Resumable: rerun the same command. Exit status as for `shopcomp eval`."""
    from shopping_companion.benchmark.rescore import rescore_run

    judge_keys = {"kind": judge, "model": judge_model, "base_url": judge_base_url, "api_key_env": judge_api_key_env}
    console.print(f"[bold]rescore[/] {escape(str(run))} under {escape(reward_config)} → {escape(name)}")
    outcome = rescore_run(
        Path(run), reward_config, name, runs_dir=runs_dir, judge=judge_keys, bench=bench, console=console
    )
    print_summary(
        outcome,
        retry="Rerunning the same rescore command judges judge errors again; backend and episode errors "
        f"come from the source run: rerun `shopcomp eval --config {escape(str(Path(run) / 'config.yaml'))}` "
        "(add --retry-failed for episode errors), then this rescore command",
    )
    exit_for(outcome)
