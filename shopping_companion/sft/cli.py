"""``shopcomp sft``: rejection-sample SFT data from a teacher, export it for LLaMA-Factory.

    shopcomp sft collect --bench B --out runs/sft/collect --backend reference --trials 4 --temperature 0.6
    shopcomp sft export --collect runs/sft/collect --out runs/sft/export [--base-model ...] [--set key=value]
    shopcomp sft stats --collect runs/sft/collect
    llamafactory-cli train runs/sft/export/train_lora.yaml      # or scripts/run_sft.sh

Backends and flags mirror ``shopcomp eval`` (the same helpers build them).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="SFT (paper §6.1, App. D): rejection sampling, step-level examples, LLaMA-Factory export.")
console = Console(stderr=True)


def _fail(msg: str) -> None:
    """The main CLI's error printer (plain text, exit 2); imported late: that module imports this one."""
    from shopping_companion.cli import _fail as fail

    fail(msg)


def _policy(keep: str, min_acc: float, stages: str):
    from shopping_companion.errors import ConfigError
    from shopping_companion.sft.collect import KeepPolicy

    try:
        return KeepPolicy.parse(keep, min_acc, stages)
    except ConfigError as e:
        _fail(str(e))


@app.command()
def collect(
    bench: Path = typer.Option(..., help="Benchmark directory written by `shopcomp synth`."),
    out: Path = typer.Option(Path("runs/sft/collect"), help="Collect directory (rollouts.jsonl, kept.jsonl, collect.json)."),
    backend: str = typer.Option("reference", help="Teacher: reference | openai | local"),
    base_url: Optional[str] = typer.Option(None, help="OpenAI-compatible endpoint (--backend openai)."),
    model: Optional[str] = typer.Option(None, help="Model name served by the endpoint (--backend openai)."),
    api_key_env: str = typer.Option("OPENAI_API_KEY", help="Environment variable holding the API key."),
    timeout_s: float = typer.Option(120.0, min=0.001, help="Per-request HTTP timeout (--backend openai)."),
    max_retries: int = typer.Option(3, min=0, help="Retries per request (--backend openai)."),
    model_path: Optional[Path] = typer.Option(None, help="Checkpoint directory (--backend local)."),
    adapter: Optional[Path] = typer.Option(None, help="LoRA adapter directory (--backend local)."),
    device: str = typer.Option("cpu", help="cpu | cuda | cuda:N | auto (--backend local)."),
    dtype: str = typer.Option("auto", help="auto | float32 | bfloat16 | float16 (--backend local)."),
    trials: int = typer.Option(1, "--trials", "-n", min=1, help="Samples (episodes) per task."),
    temperature: float = typer.Option(0.6, min=0.0, help="Teacher sampling temperature."),
    top_p: float = typer.Option(0.95, min=0.0, max=1.0),
    top_k: int = typer.Option(20, min=0, help="0: not sent."),
    max_tokens: int = typer.Option(4096, min=1, help="Max new tokens per assistant turn."),
    seed: int = typer.Option(0, help="Base seed (episode and sampling seeds derive from it)."),
    concurrency: int = typer.Option(8, min=1, help="Episodes in flight at once."),
    split: str = typer.Option("train", help="Only train: test tasks never become training data."),
    limit: Optional[int] = typer.Option(None, min=1, help="Only the first N train tasks."),
    max_turns: int = typer.Option(20, min=1, help="Max assistant turns per stage (paper: 20)."),
    strategies: str = typer.Option("two_stage:none", help="Environment mode[:hint] (paper trains with two_stage:none)."),
    keep: str = typer.Option("succ", help="succ (episode Succ) | stage (each stage's own success) | pref_acc."),
    min_acc: float = typer.Option(1.0, min=0.0, max=1.0, help="Stage-1 Acc threshold of --keep pref_acc."),
    stages: str = typer.Option("1,2", help="Stages to keep, e.g. 1,2 or 2."),
    judge: str = typer.Option("rule", help="rule | llm"),
    judge_model: Optional[str] = typer.Option(None, help="Judge model (--judge llm)."),
    judge_base_url: Optional[str] = typer.Option(None, help="Judge endpoint (--judge llm)."),
    judge_api_key_env: str = typer.Option("OPENAI_API_KEY", help="Variable holding the judge's API key."),
    data_dir: Optional[Path] = typer.Option(None, help="Data directory."),
    index_dir: Optional[Path] = typer.Option(None, help="BM25 index directory."),
) -> None:
    """Run a teacher on the train split, judge every trajectory, keep the successful stages.
    Resumable: rerun the same command to continue (a different teacher/judge/sampling is refused)."""
    from shopping_companion.benchmark.evaluate import EvalSettings, RunIdentityError, RunLockedError
    from shopping_companion.benchmark.report import scrub_url
    from shopping_companion.benchmark.synth import load_benchmark
    from shopping_companion.cli import _check_judge_options, _lookup, _make_backend, _make_judge
    from shopping_companion.envs.env import EnvConfig
    from shopping_companion.errors import ConfigError
    from shopping_companion.llm.base import Sampling
    from shopping_companion.pipeline import make_embedder, memory_factory, open_product_search, prewarm_memory, resolve_sources
    from shopping_companion.sft.collect import collect as run_collect

    if split != "train":
        _fail(f"--split must be train (SFT data never comes from the test split); got {split!r}")
    policy = _policy(keep, min_acc, stages)
    _check_judge_options(judge, judge_model, judge_base_url, judge_api_key_env)
    sampling = Sampling(temperature=temperature, top_p=top_p, top_k=top_k or None, max_tokens=max_tokens, seed=seed)
    try:
        b = load_benchmark(bench)
        tasks = [t for t in b.tasks if t.split == "train"][:limit]
        if not tasks:
            _fail(f"{bench} has no train-split task")
        sources = resolve_sources(data_dir, console=console)
        search = open_product_search(index_dir=index_dir, console=console, sources=sources)
        teacher = _make_backend(backend, base_url, model, api_key_env,
                                sources.catalog_path if backend == "reference" else None, model_path=model_path,
                                adapter=adapter, device=device, dtype=dtype, timeout_s=timeout_s,
                                max_retries=max_retries)
        embedder = make_embedder()
        prewarm_memory(tasks, b.sessions, embedder, console)
    except typer.Exit:  # a helper already printed its error (click's Exit is a RuntimeError)
        raise
    except (FileNotFoundError, RuntimeError, ValueError) as e:
        _fail(str(e))
    out.mkdir(parents=True, exist_ok=True)
    judge_obj, judge_desc = _make_judge(judge, _lookup(search), judge_model, judge_base_url, judge_api_key_env, out,
                                        sessions=b.sessions, embedder=embedder)
    from shopping_companion.judges.rule import RULE_JUDGE_VERSION
    from shopping_companion.memory.store import MEMORY_INDEX_VERSION

    settings = EvalSettings(trials=trials, sampling=sampling, env=EnvConfig(max_turns=max_turns), seed=seed)
    identity = {"teacher": teacher.name, "backend": backend, "model": model,
                "endpoint": scrub_url(base_url) if backend == "openai" else None,
                "model_path": str(model_path) if model_path else None, "adapter": str(adapter) if adapter else None,
                "judge": judge_desc, "bench": str(Path(bench).resolve()), "split": "train",
                "env": settings.env.model_dump(mode="json"), "memory_index_version": MEMORY_INDEX_VERSION}
    if judge == "rule":
        identity["rule_judge_version"] = RULE_JUDGE_VERSION
    from shopping_companion.llm.base import CircuitOpenError

    try:
        summary = run_collect(tasks, teacher, search, memory_factory(b.sessions, embedder), judge_obj, out, settings,
                              policy=policy, concurrency=concurrency, strategies=strategies, identity=identity)
    except (RunLockedError, RunIdentityError, ConfigError) as e:
        _fail(str(e).replace("use another --name", "use another --out"))
    except CircuitOpenError as e:  # exit 2, like eval: everything finished so far is kept
        _fail(f"collection stopped: {e}; the episodes finished so far are kept in {out}, "
              "rerun the same command to resume")
    console.print(f"{summary.episodes} episodes ({summary.new_episodes} new, {summary.errors} errors), "
                  f"Succ {summary.succ_rate:.3f}; kept {summary.kept} stage trajectories "
                  f"{summary.kept_by_stage} → {escape(str(out))} ({summary.wall_s:.1f}s, {summary.episodes_per_s:.3f} episodes/s)")


def _load_examples(collect_dir: Path, keep: Optional[str], min_acc: float, stages: str, drop_malformed: bool,
                   drop_error_calls: bool):
    from shopping_companion.sft.collect import read_kept, reselect
    from shopping_companion.sft.examples import step_examples

    try:
        # re-selection is read-only: kept.jsonl keeps the rule collect.json records
        kept = reselect(collect_dir, _policy(keep, min_acc, stages), write=False) if keep else read_kept(collect_dir)
    except FileNotFoundError as e:
        _fail(str(e))
    return kept, step_examples(kept, drop_malformed=drop_malformed, drop_error_calls=drop_error_calls)


@app.command()
def stats(
    collect_dir: Path = typer.Option(..., "--collect", help="Collect directory."),
    keep: Optional[str] = typer.Option(None, help="Re-select with this rule first (succ | stage | pref_acc)."),
    min_acc: float = typer.Option(1.0, min=0.0, max=1.0),
    stages: str = typer.Option("1,2"),
    drop_malformed: bool = typer.Option(True, help="Malformed turns are not targets."),
    drop_error_calls: bool = typer.Option(False, help="Turns with a rejected tool call are not targets."),
) -> None:
    """Print step-level example counts by stage, tool and turn (JSON on stdout)."""
    from shopping_companion.sft.examples import example_stats

    kept, examples = _load_examples(collect_dir, keep, min_acc, stages, drop_malformed, drop_error_calls)
    print(json.dumps({"kept_stages": len(kept), "examples": example_stats(examples)}, indent=2))


@app.command()
def export(
    collect_dir: Path = typer.Option(..., "--collect", help="Collect directory written by `shopcomp sft collect`."),
    out: Path = typer.Option(Path("runs/sft/export"), help="Export directory (data/, train_lora.yaml, merge_lora.yaml)."),
    bench: Optional[Path] = typer.Option(None, help="Benchmark whose test split is checked (default: the collect run's)."),
    base_model: str = typer.Option("Qwen/Qwen3-4B-Thinking-2507", help="Base model (hub id or local path)."),
    template: str = typer.Option("qwen3", help="LLaMA-Factory template: qwen3 | qwen3_nothink | qwen."),
    dataset: str = typer.Option("shopcomp_sft", help="Dataset name in dataset_info.json."),
    keep: Optional[str] = typer.Option(None, help="Re-select kept stages with this rule (succ | stage | pref_acc)."),
    min_acc: float = typer.Option(1.0, min=0.0, max=1.0),
    stages: str = typer.Option("1,2"),
    drop_malformed: bool = typer.Option(True, help="Malformed turns are not targets."),
    drop_error_calls: bool = typer.Option(False, help="Turns with a rejected tool call are not targets."),
    products: str = typer.Option("assistant", help="Test reference products fail the check when in: assistant | all | none."),
    config: Optional[Path] = typer.Option(None, "--config", help="Base training YAML (default: the paper's settings, "
                                          "configs/sft/qwen3_4b_thinking_lora.yaml)."),
    set_: list[str] = typer.Option([], "--set", help="Override a training-YAML key: --set cutoff_len=8192 (repeatable)."),
) -> None:
    """Write LLaMA-Factory ShareGPT-with-tools data, dataset_info.json and LoRA YAMLs; fails when a
    test-split task appears in the data."""
    from shopping_companion.benchmark.synth import load_benchmark
    from shopping_companion.errors import ConfigError
    from shopping_companion.sft.collect import MANIFEST
    from shopping_companion.sft.decontam import ContaminationError
    from shopping_companion.sft.export import export_dataset

    if products not in ("assistant", "all", "none"):
        _fail(f"--products must be assistant, all or none; got {products!r}")
    overrides = {}
    for item in set_:
        k, sep, v = item.partition("=")
        if not sep or not k.strip():
            _fail(f"--set expects key=value, got {item!r}")
        overrides[k.strip()] = v
    base_config = None
    if config is not None:
        import yaml

        try:
            base_config = yaml.safe_load(config.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as e:
            _fail(f"--config {config}: {e}")
        if not isinstance(base_config, dict):
            _fail(f"--config {config}: expected a YAML mapping of LLaMA-Factory keys")
    if not collect_dir.is_dir():
        _fail(f"--collect {collect_dir}: no such directory (run `shopcomp sft collect --out {collect_dir}` first)")
    manifest_path = collect_dir / MANIFEST
    try:
        manifest = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {}
    except (OSError, ValueError) as e:
        _fail(f"{manifest_path}: unreadable ({e}); rerun `shopcomp sft collect` to rewrite it")
    if bench is None:
        b_path = (manifest.get("identity") or {}).get("bench")
        if not b_path:
            _fail(f"--bench is required: {manifest_path} does not name the benchmark")
        bench = Path(b_path)
    t0 = time.perf_counter()
    try:
        b = load_benchmark(bench)
    except (FileNotFoundError, ValueError) as e:  # ValueError: BenchmarkError (hash, duplicate ids, sessions)
        _fail(str(e))
    kept, examples = _load_examples(collect_dir, keep, min_acc, stages, drop_malformed, drop_error_calls)
    try:
        summary = export_dataset(examples, out, test_tasks=[t for t in b.tasks if t.split == "test"],
                                 train_tasks=[t for t in b.tasks if t.split == "train"], sessions=b.sessions, template=template, base_model=base_model, dataset=dataset,
                                 products=products, overrides=overrides, base_config=base_config,  # type: ignore[arg-type]
                                 provenance={"collect": str(collect_dir.resolve()), "bench": str(bench),
                                             "collect_identity": manifest.get("identity"),
                                             "keep": manifest.get("keep") if keep is None else
                                             {"rule": keep, "min_acc": min_acc, "stages": stages},
                                             "kept_stages": len(kept)})
    except ContaminationError as e:
        _fail(str(e))
    except ConfigError as e:
        _fail(str(e))
    except OSError as e:
        _fail(f"--out {out}: cannot write the export ({e})")
    s = summary.stats
    console.print(f"{summary.examples} step-level examples (by stage {s['by_stage']}, by tool {s['by_tool']}) from "
                  f"{len(kept)} kept stages; skipped {summary.skipped or 'none'}; decontamination: "
                  f"{summary.decontamination['test_tasks']} test tasks, 0 violations, "
                  f"{summary.decontamination['exposures']} observation-only product exposures "
                  f"→ {escape(str(summary.train_yaml))} ({time.perf_counter() - t0:.1f}s)")
