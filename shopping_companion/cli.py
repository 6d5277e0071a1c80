"""``shopcomp``: build indexes, synthesise a benchmark, evaluate a policy, write reports."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from shopping_companion import __version__

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Shopping Companion: long-horizon, preference-grounded shopping agents (benchmark, eval, training).",
)
console = Console(stderr=True)

REFERENCE_NOTE = (
    "Policy: the scripted reference policy, a rule-based baseline and smoke test (not an LLM). "
    "Its numbers show the pipeline works; they are not a model result."
)


def _fail(msg: str) -> None:
    console.print(f"[bold red]error:[/] {msg}")
    raise typer.Exit(code=2)


def _lookup(search):
    def lookup(ids: list[str]):
        out = {}
        for pid in ids:
            p = search.get(pid)
            if p is not None:
                out[pid] = p
        return out

    return lookup


def _make_backend(backend: str, base_url: Optional[str], model: Optional[str], api_key_env: str, products):
    if backend == "reference":
        from shopping_companion.llm.reference import ReferencePolicy, build_attribute_vocabulary
        from shopping_companion.pipeline import load_catalog

        with console.status("building the reference policy's attribute vocabulary from the catalog"):
            prods, _ = load_catalog(products)
            vocab = build_attribute_vocabulary(prods)
        return ReferencePolicy(vocab)
    if backend == "openai":
        from shopping_companion.llm.openai_backend import OpenAIBackend

        if not model:
            _fail("--model is required with --backend openai (e.g. --model Qwen/Qwen3-4B-Thinking-2507)")
        return OpenAIBackend(model=model, base_url=base_url, api_key_env=api_key_env)
    _fail(f"--backend must be one of: reference, openai (got {backend!r})")


@app.command()
def version() -> None:
    """Print the package version."""
    print(__version__)


@app.command("build-index")
def build_index(
    data_dir: Optional[Path] = typer.Option(None, help="Data directory (default: ../shared/data or $SHOPCOMP_DATA_DIR)."),
    index_dir: Optional[Path] = typer.Option(None, help="Where the index lives (default: cache dir)."),
) -> None:
    """Build (or verify) the BM25 product index."""
    from shopping_companion.pipeline import open_product_search

    t0 = time.perf_counter()
    try:
        search = open_product_search(data_dir, index_dir, console)
    except (FileNotFoundError, RuntimeError, ValueError) as e:
        _fail(str(e))
    console.print(f"index ready: {len(search)} products ({time.perf_counter() - t0:.1f}s)")


@app.command()
def synth(
    out: Path = typer.Option(..., help="Output benchmark directory."),
    n_tasks: int = typer.Option(50, min=1, help="Number of tasks."),
    seed: int = typer.Option(0, help="Random seed (same seed, same files)."),
    sessions_per_user: int = typer.Option(42, min=1, help="Real haystack sessions per user."),
    data_dir: Optional[Path] = typer.Option(None, help="Data directory."),
    index_dir: Optional[Path] = typer.Option(None, help="BM25 index directory."),
    sharegpt: bool = typer.Option(True, help="Use ShareGPT conversations in the haystack."),
) -> None:
    """Synthesise single-product tasks with the offline template generator."""
    _synth(out, n_tasks, seed, sessions_per_user, data_dir, index_dir, sharegpt)


def _synth(out, n_tasks, seed, sessions_per_user, data_dir, index_dir, sharegpt):
    from shopping_companion.benchmark.synth import SynthConfig, SynthError, synthesize, write_benchmark
    from shopping_companion.pipeline import catalog_file, file_sha256, load_catalog, load_pool, open_product_search

    try:
        cat = catalog_file(data_dir)
        search = open_product_search(data_dir, index_dir, console)
        with console.status("loading catalog"):
            products, report = load_catalog(cat)
        pool, pool_info = load_pool(data_dir, sharegpt=sharegpt, console=console)
        cfg = SynthConfig(n_tasks=n_tasks, seed=seed, sessions_per_user=sessions_per_user)
        sources = {"catalog": {"path": str(cat), "sha256": file_sha256(cat), "products": len(products),
                               "bad_records": report.n_bad}, "conversations": pool_info}

        def searcher(q: str, k: int) -> list[str]:
            return [h["product_id"] for h in search.search(q, top_k=k)]

        with console.status(f"synthesising {n_tasks} tasks"):
            result = synthesize(products, pool, cfg, searcher=searcher, sources=sources)
        write_benchmark(result, out)
    except (FileNotFoundError, SynthError, RuntimeError, ValueError) as e:
        _fail(str(e))
    c = result.manifest["counts"]
    console.print(f"benchmark written to {out}: {c['tasks']} tasks ({c['train']} train / {c['test']} test), "
                  f"{c['sessions']} sessions, {c['preferences_mean']} preferences per task")
    return result


@app.command("eval")
def eval_cmd(
    bench: Path = typer.Option(..., help="Benchmark directory written by `shopcomp synth`."),
    run_name: str = typer.Option(..., "--run-name", "--name", help="Results go to runs/<name>/."),
    backend: str = typer.Option("reference", help="reference | openai"),
    base_url: Optional[str] = typer.Option(None, help="OpenAI-compatible endpoint, e.g. http://localhost:8000/v1"),
    model: Optional[str] = typer.Option(None, help="Model name served by the endpoint."),
    api_key_env: str = typer.Option("OPENAI_API_KEY", help="Environment variable holding the API key."),
    split: Optional[str] = typer.Option(None, help="train | test (default: all tasks)."),
    limit: Optional[int] = typer.Option(None, min=1, help="Evaluate only the first N tasks."),
    max_turns: int = typer.Option(20, min=1, help="Max assistant turns per stage."),
    temperature: float = typer.Option(0.6, min=0.0),
    data_dir: Optional[Path] = typer.Option(None, help="Data directory."),
    index_dir: Optional[Path] = typer.Option(None, help="BM25 index directory."),
    runs_dir: Path = typer.Option(Path("runs"), help="Parent directory of run outputs."),
) -> None:
    """Evaluate a policy on a benchmark; resumable (rerun the same command to continue)."""
    _eval(bench, run_name, backend, base_url, model, api_key_env, split, limit, max_turns, temperature,
          data_dir, index_dir, runs_dir)


def _eval(bench, run_name, backend, base_url, model, api_key_env, split, limit, max_turns, temperature,
          data_dir, index_dir, runs_dir, baseline_note=None):
    from shopping_companion.benchmark.evaluate import EvalSettings, RunLockedError, describe, run_evaluation
    from shopping_companion.benchmark.report import write_report
    from shopping_companion.benchmark.synth import load_benchmark
    from shopping_companion.envs.env import EnvConfig
    from shopping_companion.judges.rule import RuleJudge
    from shopping_companion.llm.base import Sampling
    from shopping_companion.pipeline import (catalog_file, make_embedder, memory_factory, open_product_search,
                                             prewarm_memory, write_json)

    if split not in (None, "train", "test"):
        _fail(f"--split must be train or test (got {split!r})")
    try:
        b = load_benchmark(bench)
        tasks = [t for t in b.tasks if split is None or t.split == split][:limit]
        if not tasks:
            _fail(f"no tasks selected from {bench} (split={split}, limit={limit})")
        search = open_product_search(data_dir, index_dir, console)
        policy = _make_backend(backend, base_url, model, api_key_env, catalog_file(data_dir))
        embedder = make_embedder()
        prewarm_memory(tasks, b.sessions, embedder, console)
    except (FileNotFoundError, RuntimeError, ValueError) as e:
        _fail(str(e))
    run_dir = Path(runs_dir) / run_name
    run_dir.mkdir(parents=True, exist_ok=True)
    settings = EvalSettings(
        sampling=Sampling(temperature=temperature),
        env=EnvConfig(max_turns=max_turns),
    )
    judge = RuleJudge(_lookup(search))
    t0 = time.perf_counter()
    try:
        results = run_evaluation(tasks, policy, search, memory_factory(b.sessions, embedder), judge,
                                 run_dir / "results.jsonl", settings)
    except RunLockedError as e:
        _fail(str(e))
    wall = time.perf_counter() - t0
    if baseline_note is None and backend == "reference":
        baseline_note = REFERENCE_NOTE
    meta = {
        "run_name": run_name,
        "policy": policy.name,
        "benchmark": str(bench),
        "judge": "rule (deterministic, offline)",
        "baseline_note": baseline_note,
        "config": {"eval": describe(settings), "backend": backend, "base_url": base_url, "model": model,
                   "split": split, "limit": limit, "n_tasks": len(tasks),
                   "benchmark_manifest": b.manifest.get("counts"), "generator": b.manifest.get("generator")},
    }
    summary = write_report(results, run_dir / "report.md", meta)
    write_json(run_dir / "summary.json", {"summary": summary, "meta": meta, "eval_wall_s": round(wall, 2)})
    console.print(f"[bold]Acc[/] {summary['acc']:.3f}  [bold]Succ[/] {summary['succ']:.3f}  "
                  f"({summary['n_scored']} scored, {summary['n_errors']} errors) → {run_dir / 'report.md'}")
    return summary


@app.command()
def quickstart(
    name: str = typer.Option("quickstart", help="Run name: outputs go to runs/<name>/."),
    n_tasks: int = typer.Option(50, min=1, help="Tasks to synthesise and evaluate."),
    seed: int = typer.Option(0),
    backend: str = typer.Option("reference", help="reference | openai"),
    base_url: Optional[str] = typer.Option(None),
    model: Optional[str] = typer.Option(None),
    api_key_env: str = typer.Option("OPENAI_API_KEY"),
    data_dir: Optional[Path] = typer.Option(None, help="Data directory."),
    runs_dir: Path = typer.Option(Path("runs")),
) -> None:
    """The main job: build the index (cached), synthesise tasks, evaluate, write the report."""
    t0 = time.perf_counter()
    bench = Path(runs_dir) / name / "bench"
    from shopping_companion.benchmark.synth import load_benchmark

    try:
        existing = load_benchmark(bench)
        reuse = existing.manifest.get("config", {}).get("n_tasks") == n_tasks and existing.manifest.get("config", {}).get("seed") == seed
    except FileNotFoundError:
        reuse = False
    if reuse:
        console.print(f"reusing benchmark {bench}")
    else:
        _synth(bench, n_tasks, seed, 42, data_dir, None, True)
    _eval(bench, name, backend, base_url, model, api_key_env, None, None, 20, 0.6, data_dir, None, runs_dir)
    console.print(f"quickstart finished in {time.perf_counter() - t0:.1f}s")


def main() -> None:  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
