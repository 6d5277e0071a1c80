"""``shopcomp build-index`` and ``shopcomp synth``: the BM25 product index and a benchmark."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Optional

import typer
from rich.markup import escape

from shopping_companion.cli.common import (
    app,
    config_option,
    console,
    data_dir_option,
    index_dir_option,
    set_option,
    sets_of,
)


@app.command("build-index")
def build_index(
    data_dir: Optional[Path] = data_dir_option(),
    index_dir: Optional[Path] = typer.Option(None, metavar="DIR", help="Where the index lives (default: the cache)."),
    rebuild: bool = typer.Option(False, "--rebuild", help="Rebuild even a fresh index (replaces a foreign one)."),
) -> None:
    """Build (or verify) the BM25 product index. Without a data directory (none passed or found),
    a small Amazon Reviews 2023 category is downloaded once into the cache and indexed instead."""
    from shopping_companion.assembly.data import open_product_search, resolve_sources

    t0 = time.perf_counter()
    sources = resolve_sources(data_dir, console=console)
    search = open_product_search(index_dir=index_dir, console=console, sources=sources, rebuild=rebuild)
    console.print(
        f"index ready: {len(search)} products from {escape(sources.catalog_path.name)} "
        f"({time.perf_counter() - t0:.1f}s)"
    )


def print_build(out: Path, result: Any) -> None:
    """What a build made: counts, verification, the needle statistics and where stats.md is."""
    c, v, st = result.manifest["counts"], result.manifest["verification"], result.manifest["stats_summary"]
    console.print(
        f"benchmark written to {escape(str(out))}: {c['tasks']} of {c['requested']} tasks ({c['single']} "
        f"single, {c['addon']} add-on; {c['train']} train / {c['test']} test), {c['sessions']} sessions",
        soft_wrap=True,
    )
    console.print(
        f"verification: {v['attempts']} attempts, failed checks {v['failed_attempts_by_check'] or 'none'}, "
        f"{v['dropped_tasks']} task(s) dropped",
        soft_wrap=True,
    )
    if v.get("shortfall"):
        console.print(f"[yellow]shortfall:[/] {escape(str(v['shortfall']))}", soft_wrap=True)
    console.print(
        f"wanted attributes per task {st['attributes_per_task']}, sessions/user {st['sessions_per_user']}, "
        f"tokens/user {st['tokens_per_user']}; needle top-1 share BM25 {st['needle_top1_bm25']}, "
        f"MiniLM {st['needle_top1_minilm']}; statistics in {escape(str(out / 'stats.md'))} "
        f"(build {result.build_log['timings'].get('total_s')}s)",
        soft_wrap=True,
    )
    if "sources_used" in st:
        console.print(
            f"breadth: {st['sources_used']} sources (largest {_pct(st['max_source_share'])} of tasks), "
            f"{st['departments']} departments; extracted attributes {_pct(st['extracted_share'])}, numeric "
            f"limits {_pct(st['numeric_share'])} of wanted preferences; needles stating a gold value verbatim "
            f"{_pct(st['needle_verbatim_share'])}; MiniLM topic-query top-10 {_pct(st['needle_topic_top10_minilm'])}",
            soft_wrap=True,
        )


def _pct(x: Any) -> str:
    return "–" if x is None else f"{100 * x:.0f}%"


@app.command()
def calibrate(
    bench: Path = typer.Argument(..., metavar="BENCH", help="Benchmark directory (from shopcomp synth)."),
    results: Path = typer.Argument(..., metavar="RESULTS", help="results.jsonl of a run on that benchmark."),
    policy: str = typer.Option("reference", metavar="NAME", help="Name of the policy, shown in stats.md."),
) -> None:
    """Record a policy's Succ by source and task type (difficulty calibration) in the benchmark's
    stats.md and stats.json, from the results of a `shopcomp eval` run on it."""
    from shopping_companion.benchmark.calibrate import calibrate_benchmark

    cal = calibrate_benchmark(bench, results, policy=policy)
    for name, row in cal["by_source"].items():
        cells = [f"{k} {_pct(v['succ'])} (n={v['n']})" for k, v in row.items() if v["n"]]
        console.print(f"{escape(name)}: {', '.join(cells)}", soft_wrap=True)
    console.print(f"calibration written to {escape(str(bench / 'stats.md'))}")


@app.command()
def synth(
    config: Optional[Path] = config_option(
        "the benchmark, e.g. configs/benchmark/shopping_companion.yaml (paper scale)"
    ),
    set_: Optional[list[str]] = set_option(),
    out: Optional[Path] = typer.Option(
        None, metavar="DIR", help="Output directory (default: the config's `out`, else runs/bench)."
    ),
    n_tasks: Optional[int] = typer.Option(None, min=1, metavar="N", help="Number of tasks (default 50)."),
    seed: Optional[int] = typer.Option(None, metavar="N", help="Random seed; same seed, same files (default 0)."),
    sessions_per_user: Optional[int] = typer.Option(
        None, min=1, metavar="N", help="Real haystack sessions per user, mean (default 42)."
    ),
    addon_share: Optional[float] = typer.Option(
        None, min=0.0, max=1.0, metavar="SHARE", help="Share of add-on deals (default 0.5)."
    ),
    abilities: Optional[str] = typer.Option(
        None,
        metavar="LIST",
        help="Memory abilities the tasks test: 'all' or a comma list of extraction, knowledge_update, "
        "multi_session, temporal, abstention (default extraction).",
    ),
    stress: Optional[Path] = typer.Option(
        None,
        metavar="DIR",
        help="Also write the benchmark with the stress variants of its tasks (needle removed, a stale "
        "contradicting session before the needle, needle moved to the oldest session) to DIR.",
    ),
    llm_model: Optional[str] = typer.Option(
        None, metavar="NAME", help="Write texts with this LLM instead of the templates."
    ),
    llm_base_url: Optional[str] = typer.Option(None, metavar="URL", help="OpenAI-compatible endpoint of --llm-model."),
    llm_api_key_env: str = typer.Option("OPENAI_API_KEY", metavar="VAR", help="Variable holding the LLM's API key."),
    fresh: bool = typer.Option(
        False,
        "--fresh",
        help="Build from scratch: discard an unfinished build in OUT, or replace a finished one (a rerun "
        "without it leaves a finished build with the same settings as it is).",
    ),
    data_dir: Optional[Path] = data_dir_option(),
    index_dir: Optional[Path] = index_dir_option(),
    sharegpt: bool = typer.Option(True, help="Use ShareGPT conversations in the haystack."),
) -> None:
    """Build a benchmark (§4: products and vouchers, instructions, preference dialogues with
    denoising, injection into real conversation histories, verification) and its statistics.
    Resumable: rerun the same command after an interruption."""
    from shopping_companion.benchmark.synth import build_from_data, load_synth_config

    flags = {
        "n_tasks": n_tasks,
        "seed": seed,
        "sessions_per_user": sessions_per_user,
        "addon_share": addon_share,
        "abilities": abilities,
    }
    sets = sets_of(set_)
    if llm_model:
        sets += [
            "generator.kind=llm",
            "generator.endpoints="
            + _yaml_list({"model": llm_model, "base_url": llm_base_url, "api_key_env": llm_api_key_env}),
        ]
    cfg, extras = load_synth_config(config, flags, sets)
    target = Path(out or extras.get("out") or Path("runs") / "bench")
    if stress is not None:  # a stress directory that would be refused is refused before the build
        from shopping_companion.benchmark.stress import check_stress_target

        check_stress_target(target, stress)
    if stress is not None and not fresh and _imported(target):
        # tasks written by hand (shopcomp import-tasks) are stressed as they are, never rebuilt
        console.print(f"{escape(str(target))} holds an imported benchmark: writing its stress variants", soft_wrap=True)
    else:
        result = build_from_data(
            target,
            cfg,
            data_dir=data_dir,
            index_dir=index_dir,
            sharegpt=sharegpt,
            fresh=fresh,
            relax_min_attributes=config is None,
            keep_other_finished=not fresh,
            console=console,
        )
        print_build(target, result)
    if stress is not None:
        from shopping_companion.benchmark.stress import write_stress_benchmark

        st = write_stress_benchmark(target, stress).manifest["stress"]
        console.print(
            f"stress benchmark written to {escape(str(stress))}: variants {st['variants']}, skipped {st['skipped']}",
            soft_wrap=True,
        )


def _imported(target: Path) -> bool:
    """Whether ``target`` is a complete benchmark written by ``shopcomp import-tasks``."""
    from shopping_companion.assembly.data import load_benchmark
    from shopping_companion.benchmark.import_tasks import GENERATOR_KIND
    from shopping_companion.errors import BenchmarkError

    try:
        manifest = load_benchmark(target).manifest
    except (FileNotFoundError, BenchmarkError):
        return False
    return (manifest.get("generator") or {}).get("kind") == GENERATOR_KIND


def _yaml_list(item: dict[str, Any]) -> str:
    import json

    return json.dumps([item])  # JSON is YAML: the --set value parser reads it as a list of one mapping
