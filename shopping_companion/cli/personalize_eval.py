"""``shopcomp personalize eval``: judge the dialogues of a personalization run and write its report
(:mod:`~shopping_companion.cli.personalize` registers it; docs/personalization.md). Errors are
raised, never printed here (the group's one handler prints them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from shopping_companion.cli.common import option
from shopping_companion.personalization.llmjson import openai_chat

__all__ = ["eval_cmd"]


def eval_cmd(
    run_dir: Path = typer.Option(..., "--run", metavar="DIR", help="Run directory of `personalize run`."),
    dataset: Path = typer.Option(..., metavar="DIR", help="Dataset directory."),
    judge_model: Optional[str] = typer.Option(
        None,
        metavar="NAME",
        help="Judge model (OpenAI-compatible endpoint); omitted: the judge is reported as not run.",
    ),
    judge_base_url: Optional[str] = typer.Option(None, metavar="URL", help="Judge endpoint."),
    second_judge_model: Optional[str] = typer.Option(
        None, metavar="NAME", help="A second judge for agreement (Table 10)."
    ),
    second_judge_base_url: Optional[str] = typer.Option(None, metavar="URL", help="Endpoint of the second judge."),
    api_key_env: str = option(
        "OPENAI_API_KEY", metavar="VAR", help="Variable holding the API key (default OPENAI_API_KEY)."
    ),
    concurrency: int = option(4, min=1, metavar="N", help="Judge calls in flight (default 4)."),
) -> None:
    """Judge the dialogues (when an endpoint is given) and write report.md, parquet and PNGs."""
    from shopping_companion.errors import BackendError, JudgeFailedError
    from shopping_companion.paths import cache_dir
    from shopping_companion.personalization.judge import TrajectoryJudge
    from shopping_companion.personalization.llmjson import JSONAsker
    from shopping_companion.personalization.report import judge_run, read_judgments, write_report

    paths = []
    for m, u, url_flag in (
        (judge_model, judge_base_url, "--judge-base-url"),
        (second_judge_model, second_judge_base_url, "--second-judge-base-url"),
    ):
        if not m:
            continue
        asker = JSONAsker(
            openai_chat(m, u, api_key_env, url_flag, ping=False),
            cache_path=cache_dir() / "personalization_judge.sqlite",
        )
        try:
            jp = judge_run(run_dir, dataset, TrajectoryJudge(asker), tag=m, concurrency=concurrency)
        except BackendError as e:  # judge_run pings the endpoint only when dialogues are left to judge
            raise BackendError(f"{url_flag}: {e}") from None
        js = list(read_judgments(jp).values())
        if js and all(j.get("error") for j in js):
            raise JudgeFailedError(
                f"judge {m}: all {len(js)} judgments failed (first: {str(js[0]['error'])[:300]}); "
                f"check {url_flag} / the API key; a rerun retries them"
            )
        paths.append(jp)
    rp = write_report(run_dir, dataset, paths or None)
    typer.echo(f"report: {rp}")
