"""``shopcomp judge-agreement``: re-judge finished episodes with several judges and report their
agreement (per-field agreement, Cohen's κ, OPC)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from shopping_companion.cli.common import app, console, data_dir_option, index_dir_option


@app.command("judge-agreement")
def judge_agreement(
    bench: Path = typer.Option(..., metavar="DIR", help="Benchmark directory the results were evaluated on."),
    results: list[Path] = typer.Option(
        ..., "--results", metavar="FILE", help="results.jsonl of a run; repeat for several systems."
    ),
    judges: list[str] = typer.Option(
        ["recorded", "rule"],
        "--judge",
        metavar="SPEC",
        help="Judges to compare (repeat): recorded (verdicts stored at evaluation time), rule, llm:MODEL[@BASE_URL].",
    ),
    judge_base_url: Optional[str] = typer.Option(
        None, metavar="URL", help="Endpoint for llm:MODEL judges given without @BASE_URL."
    ),
    judge_api_key_env: str = typer.Option(
        "OPENAI_API_KEY", metavar="VAR", help="Variable holding the LLM judges' API key."
    ),
    concurrency: int = typer.Option(8, min=1, metavar="N", help="LLM judge requests in flight."),
    stage: str = typer.Option("all", metavar="1|2|all", help="Which stages' verdicts to compare."),
    opc_by: str = typer.Option(
        "system", metavar="BY", help="system (the paper's OPC over systems' success rates) | item | none."
    ),
    out: Optional[Path] = typer.Option(
        None, metavar="DIR", help="Output directory (default: the first results file's directory)."
    ),
    data_dir: Optional[Path] = data_dir_option(),
    index_dir: Optional[Path] = index_dir_option(),
) -> None:
    """Re-judge finished episodes with several judges; write per-field agreement, Cohen's κ and OPC.

    OPC is the mean pairwise Pearson correlation of the judges' score vectors (Shopping Companion,
    App. E). Failed verdicts are excluded and counted, never scored 0. Writes agreement.md and
    agreement.json (LLM verdicts are cached in judge_cache.sqlite there).
    """
    from shopping_companion.benchmark.agreement import parse_judge_specs, run_agreement

    rep, out_dir = run_agreement(
        bench,
        results,
        parse_judge_specs(judges, judge_base_url),
        stage=stage,
        opc_by=opc_by,
        out=out,
        api_key_env=judge_api_key_env,
        concurrency=concurrency,
        data_dir=data_dir,
        index_dir=index_dir,
        console=console,
    )
    console.print(rep.to_markdown(), markup=False, highlight=False)
    console.print(f"→ {escape(str(out_dir / 'agreement.md'))}")
