"""``shopcomp``: build indexes, synthesise a benchmark, evaluate a policy, write reports."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape

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
    from rich.text import Text

    # the message as plain text: no Rich markup or emoji codes (a model named "x" made ":x:" an emoji)
    console.print(Text.assemble(("error: ", "bold red"), str(msg)))
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


def _endpoint_time_options(deadline_s: Optional[float] = None, breaker_threshold: Optional[int] = None) -> dict:
    """``deadline_s`` / ``breaker_threshold`` for an OpenAI-compatible backend: the values given, else
    ``SHOPCOMP_DEADLINE_S`` / ``SHOPCOMP_BREAKER_THRESHOLD``, else the backend's defaults (omitted).
    A value that is not a number > 0 (or an integer >= 1) exits 2 naming the variable."""
    import os

    from shopping_companion.errors import ConfigError
    from shopping_companion.llm.breaker import ENV_BREAKER_THRESHOLD, positive_int, positive_seconds
    from shopping_companion.llm.openai_backend import ENV_DEADLINE_S

    out: dict = {}
    for key, value, var, conv, check in (("deadline_s", deadline_s, ENV_DEADLINE_S, float, positive_seconds),
                                         ("breaker_threshold", breaker_threshold, ENV_BREAKER_THRESHOLD, int,
                                          positive_int)):
        name = key
        if value is None and os.environ.get(var, "").strip():
            name, raw = var, os.environ[var].strip()
            try:
                value = conv(raw)
            except ValueError:
                _fail(f"{var}: must be a number, got {raw!r}")
        if value is not None:
            try:
                out[key] = check(name, value)
            except ConfigError as e:
                _fail(str(e))
    return out


def _make_backend(backend: str, base_url: Optional[str], model: Optional[str], api_key_env: str, products,
                  *, model_path: Optional[Path] = None, adapter: Optional[Path] = None, device: str = "cpu",
                  dtype: str = "auto", timeout_s: float = 120.0, max_retries: int = 3,
                  deadline_s: Optional[float] = None, breaker_threshold: Optional[int] = None):
    """The policy backend. For ``openai``: ``timeout_s`` bounds one attempt and ``deadline_s`` the
    whole request (seconds of wall clock; default from ``SHOPCOMP_DEADLINE_S`` or the backend's),
    ``breaker_threshold`` consecutive connection failures / timeouts stop the run (default from
    ``SHOPCOMP_BREAKER_THRESHOLD``, else 5); a bad value exits 2 naming it."""
    if backend == "reference":
        from shopping_companion.llm.reference import ReferencePolicy, build_attribute_vocabulary
        from shopping_companion.pipeline import load_catalog

        with console.status("building the reference policy's attribute vocabulary from the catalog"):
            prods, _ = load_catalog(products)
            vocab = build_attribute_vocabulary(prods)
        return ReferencePolicy(vocab)
    if backend == "openai":
        from shopping_companion.llm.openai_backend import OpenAIBackend

        from shopping_companion.errors import ConfigError

        if not model:
            _fail("--model is required with --backend openai (e.g. --model Qwen/Qwen3-4B-Thinking-2507)")
        try:
            policy = OpenAIBackend(model=model, base_url=base_url, api_key_env=api_key_env, timeout_s=timeout_s,
                                   max_retries=max_retries, **_endpoint_time_options(deadline_s, breaker_threshold))
        except ConfigError as e:
            _fail(f"--backend openai: {e}")
        return _reachable(policy, "--base-url")
    if backend == "local":
        from shopping_companion.llm.local_transformers import LocalTransformersBackend

        if not model_path:
            _fail("--model-path is required with --backend local (a Hugging Face checkpoint directory)")
        with console.status(f"loading {model_path} on {device}"):
            return LocalTransformersBackend(model_path, device=device, dtype=dtype, adapter_path=adapter)
    _fail(f"--backend must be one of: reference, openai, local (got {backend!r})")


@app.command()
def version() -> None:
    """Print the package version."""
    print(__version__)


@app.command("build-index")
def build_index(
    data_dir: Optional[Path] = typer.Option(None, help="Data directory (default: ../shared/data or $SHOPCOMP_DATA_DIR)."),
    index_dir: Optional[Path] = typer.Option(None, help="Where the index lives (default: cache dir)."),
    rebuild: bool = typer.Option(False, "--rebuild", help="Rebuild even a fresh index (replaces a foreign one)."),
) -> None:
    """Build (or verify) the BM25 product index. Without a data directory (none passed or found),
    a small Amazon Reviews 2023 category is downloaded once into the cache and indexed instead."""
    from shopping_companion.pipeline import open_product_search, resolve_sources

    t0 = time.perf_counter()
    try:
        sources = resolve_sources(data_dir, console=console)
        search = open_product_search(index_dir=index_dir, console=console, sources=sources, rebuild=rebuild)
    except (FileNotFoundError, RuntimeError, ValueError) as e:
        _fail(str(e))
    console.print(f"index ready: {len(search)} products from {escape(sources.catalog_path.name)} "
                  f"({time.perf_counter() - t0:.1f}s)")


@app.command()
def synth(
    out: Optional[Path] = typer.Option(None, help="Output benchmark directory (default: the config's `out`, else runs/bench)."),
    config: Optional[Path] = typer.Option(
        None, "--config", help="Benchmark config YAML, e.g. configs/benchmark/shopping_companion.yaml (paper scale)."),
    n_tasks: Optional[int] = typer.Option(None, min=1, help="Number of tasks (overrides the config; default 50)."),
    seed: Optional[int] = typer.Option(None, help="Random seed (same seed, same files)."),
    sessions_per_user: Optional[int] = typer.Option(None, min=1, help="Real haystack sessions per user (mean)."),
    addon_share: Optional[float] = typer.Option(None, min=0.0, max=1.0, help="Share of add-on deals (default 0.5)."),
    llm_model: Optional[str] = typer.Option(None, help="Write texts with this LLM instead of the templates."),
    llm_base_url: Optional[str] = typer.Option(None, help="OpenAI-compatible endpoint of --llm-model."),
    llm_api_key_env: str = typer.Option("OPENAI_API_KEY", help="Variable holding the LLM's API key."),
    fresh: bool = typer.Option(False, "--fresh", help="Discard an unfinished build in OUT instead of resuming it."),
    data_dir: Optional[Path] = typer.Option(None, help="Data directory."),
    index_dir: Optional[Path] = typer.Option(None, help="BM25 index directory."),
    sharegpt: bool = typer.Option(True, help="Use ShareGPT conversations in the haystack."),
) -> None:
    """Build a benchmark (§4: products and vouchers, instructions, preference dialogues with
    denoising, injection into real conversation histories, verification) and its statistics.
    Resumable: rerun the same command after an interruption."""
    llm = {"model": llm_model, "base_url": llm_base_url, "api_key_env": llm_api_key_env} if llm_model else None
    _synth(out, n_tasks, seed, sessions_per_user, data_dir, index_dir, sharegpt, config=config,
           addon_share=addon_share, fresh=fresh, llm=llm)


def _synth(out, n_tasks, seed, sessions_per_user, data_dir, index_dir, sharegpt, *, config=None,
           addon_share=None, fresh=False, llm=None):
    from rich.progress import Progress

    from shopping_companion.benchmark.synth import SynthConfig, SynthError, build_benchmark, load_synth_config
    from shopping_companion.pipeline import file_sha256, load_catalog, load_pool, make_embedder, open_product_search, resolve_sources

    overrides = {"n_tasks": n_tasks, "seed": seed, "sessions_per_user": sessions_per_user, "addon_share": addon_share}
    try:
        if config is not None:
            cfg, extras = load_synth_config(config, overrides)
            out = out or (Path(extras["out"]) if extras.get("out") else None)
        else:
            base = {"n_tasks": 50, "addon_share": 0.5, "allow_shortfall": True}
            base.update({k: v for k, v in overrides.items() if v is not None})
            cfg = SynthConfig(**base)
        if llm:
            cfg = cfg.model_copy(update={"generator": cfg.generator.model_copy(update={"kind": "llm", "endpoints": [llm]})})
            cfg = SynthConfig.model_validate(cfg.model_dump())
        out = Path(out) if out else Path("runs") / "bench"
        sources = resolve_sources(data_dir, console=console)
        search = open_product_search(index_dir=index_dir, console=console, sources=sources)
        with console.status("loading catalog"):
            products, report = load_catalog(sources.catalog_path, sources.catalog_format)
        pool, pool_info = load_pool(sharegpt=sharegpt, console=console, sources=sources)
        prov = {"catalog": {"path": str(sources.catalog_path), "format": sources.catalog_format,
                            "sha256": file_sha256(sources.catalog_path), "products": len(products),
                            "bad_records": report.n_bad}, "conversations": pool_info}
        if sharegpt and isinstance(pool_info.get("sharegpt"), dict):
            from shopping_companion.memory.loaders import sharegpt_default_path

            sg_path = sharegpt_default_path()
            pool_info["sharegpt"].update({"path": str(sg_path), "sha256": file_sha256(sg_path)})
        embedder = make_embedder() if cfg.minilm_tasks != 0 else None
        with Progress(console=console, transient=False) as bar:
            job = bar.add_task(f"synthesising {cfg.n_tasks} tasks → {out}", total=cfg.n_tasks)

            def progress(done: int, total: int, rec: dict) -> None:
                bar.update(job, completed=done)

            try:
                result = build_benchmark(out, products, pool, cfg, searcher=search, sources=prov, embedder=embedder,
                                         fresh=fresh, progress=progress)
            except SynthError as e:
                # Without a config, an attribute-poor catalog (e.g. one Amazon category) may still give
                # tasks with one phrasable attribute per reference product: say so and go on.
                if config is not None or cfg.min_attributes == 1 or not str(e).startswith("no product can be"):
                    raise
                console.print(f"[yellow]note:[/] {e}; retrying with min_attributes=1")
                cfg = cfg.model_copy(update={"min_attributes": 1})
                result = build_benchmark(out, products, pool, cfg, searcher=search, sources=prov, embedder=embedder,
                                         fresh=True, progress=progress)
    except (FileNotFoundError, SynthError, RuntimeError, ValueError) as e:
        _fail(str(e))
    c, v, st = result.manifest["counts"], result.manifest["verification"], result.manifest["stats_summary"]
    console.print(f"benchmark written to {escape(str(out))}: {c['tasks']} of {c['requested']} tasks ({c['single']} single, "
                  f"{c['addon']} add-on; {c['train']} train / {c['test']} test), {c['sessions']} sessions")
    console.print(f"verification: {v['attempts']} attempts, failed checks {v['failed_attempts_by_check'] or 'none'}, "
                  f"{v['dropped_tasks']} task(s) dropped")
    if v.get("shortfall"):
        console.print(f"[yellow]shortfall:[/] {v['shortfall']}")
    console.print(f"wanted attributes per task {st['attributes_per_task']}, sessions/user {st['sessions_per_user']}, "
                  f"tokens/user {st['tokens_per_user']}; needle top-1 share BM25 {st['needle_top1_bm25']}, "
                  f"MiniLM {st['needle_top1_minilm']}; statistics in {out / 'stats.md'} "
                  f"(build {result.build_log['timings'].get('total_s')}s)")
    return result


def _list_strategies(value: bool) -> None:
    if value:
        from shopping_companion.benchmark.evaluate import supported_strategies

        print("\n".join(supported_strategies()))
        raise typer.Exit()


@app.command("eval")
def eval_cmd(
    bench: Path = typer.Option(..., help="Benchmark directory written by `shopcomp synth`."),
    run_name: str = typer.Option(..., "--run-name", "--name", help="Results go to runs/<name>/."),
    backend: str = typer.Option("reference", help="reference | openai | local"),
    base_url: Optional[str] = typer.Option(None, help="OpenAI-compatible endpoint, e.g. http://localhost:8000/v1"),
    model: Optional[str] = typer.Option(None, help="Model name served by the endpoint (--backend openai)."),
    api_key_env: str = typer.Option("OPENAI_API_KEY", help="Environment variable holding the API key (never written anywhere)."),
    timeout_s: float = typer.Option(120.0, min=0.001, help="Wall-clock limit of one HTTP attempt, seconds (--backend openai)."),
    max_retries: int = typer.Option(3, min=0, help="Retries per request after timeouts, 5xx, 429 and invalid JSON."),
    deadline_s: Optional[float] = typer.Option(None, help="Wall-clock limit of one request over all attempts and backoff, "
                                               "seconds (default: min(600, (retries+1) x timeout); env SHOPCOMP_DEADLINE_S)."),
    breaker_threshold: Optional[int] = typer.Option(None, help="Consecutive connection failures or timeouts across the run "
                                                    "that stop it with exit 2 (default 5; env SHOPCOMP_BREAKER_THRESHOLD)."),
    max_invalid_turns: int = typer.Option(3, min=1, help="Consecutive invalid turns (no executable call, no answer, or "
                                          "truncated output) that end a stage as invalid_output / length."),
    model_path: Optional[Path] = typer.Option(None, help="Checkpoint directory (--backend local)."),
    adapter: Optional[Path] = typer.Option(None, help="LoRA adapter directory (--backend local; needs peft)."),
    device: str = typer.Option("cpu", help="cpu | cuda | cuda:N | auto (--backend local)."),
    dtype: str = typer.Option("auto", help="auto | float32 | bfloat16 | float16 (--backend local)."),
    strategies: str = typer.Option(
        "two_stage:none", help="Comma-separated strategies (Table 3): oracle, one_stage, two_stage:none|low|high, or all."
    ),
    list_strategies: bool = typer.Option(False, "--list-strategies", callback=_list_strategies, is_eager=True,
                                         help="Print the strategies this release supports and exit."),
    trials: int = typer.Option(1, min=1, help="Trials per task and strategy (for pass@k / pass^k)."),
    pass_k: Optional[str] = typer.Option(None, help="k values for pass@k / pass^k, e.g. 1,2,4 (default: 1..trials)."),
    concurrency: int = typer.Option(8, min=1, help="Episodes in flight at once."),
    retry_errors: bool = typer.Option(True, help="On resume, rerun episodes that ended with a backend or judge error."),
    retry_failed: bool = typer.Option(
        False, "--retry-failed",
        help="On resume, also rerun episodes that ended with an episode error (an unexpected exception; "
             "skipped by default, traceback in results.errors.log)."),
    force: bool = typer.Option(
        False, "--force",
        help="Adopt this configuration for an existing results file whose results.identity.json is missing or corrupt."),
    skip_missing_gold: bool = typer.Option(
        False, "--skip-missing-gold",
        help="Skip tasks whose gold products are not in the catalog (default: refuse to run, naming them)."),
    simulator: str = typer.Option("scripted", help="User simulator (registered name or module:attr)."),
    judge: str = typer.Option("rule", help="rule (deterministic, offline) | llm (OpenAI-compatible endpoint)."),
    reward_config: Optional[str] = typer.Option(
        None, help="Reward rubric: paper (default) | outcome_only | a YAML file of {name|path, weight} entries."),
    judge_model: Optional[str] = typer.Option(None, help="Judge model name (--judge llm)."),
    judge_base_url: Optional[str] = typer.Option(None, help="Judge endpoint (--judge llm)."),
    judge_api_key_env: str = typer.Option("OPENAI_API_KEY", help="Variable holding the judge's API key."),
    attribution_model: Optional[str] = typer.Option(
        None, help="Also attribute each failure with this LLM (error taxonomy, App. F.2)."),
    attribution_base_url: Optional[str] = typer.Option(None, help="Endpoint of the attribution LLM."),
    attribution_api_key_env: str = typer.Option("OPENAI_API_KEY", help="Variable holding its API key."),
    split: Optional[str] = typer.Option(None, help="train | test (default: all tasks)."),
    limit: Optional[int] = typer.Option(None, min=1, help="Evaluate only the first N tasks."),
    max_turns: int = typer.Option(20, min=1, help="Max assistant turns per stage."),
    temperature: float = typer.Option(0.6, min=0.0),
    top_p: float = typer.Option(0.95, min=0.0, max=1.0),
    top_k: int = typer.Option(20, min=0, help="0: not sent."),
    max_tokens: int = typer.Option(4096, min=1, help="Max new tokens per assistant turn."),
    seed: int = typer.Option(0, help="Base seed: per-episode seeds derive from (seed, task id, trial)."),
    sampling_seed: bool = typer.Option(True, help="Send a per-episode sampling seed to the backend."),
    data_dir: Optional[Path] = typer.Option(None, help="Data directory."),
    index_dir: Optional[Path] = typer.Option(None, help="BM25 index directory."),
    runs_dir: Path = typer.Option(Path("runs"), help="Parent directory of run outputs."),
) -> None:
    """Evaluate a policy on a benchmark; resumable (rerun the same command to continue).

    Exit status: 0 every requested episode has a result without error; 3 some episodes ended with a
    backend, judge or episode error (everything is written; rerun to retry, see --retry-errors /
    --retry-failed); 2 a usage or configuration error, or the run stopped because the endpoint is
    down (circuit breaker; results so far are kept, rerun to resume); 1 an unexpected crash.
    """
    summary = _eval(bench, run_name, backend=backend, base_url=base_url, model=model, api_key_env=api_key_env,
          timeout_s=timeout_s, max_retries=max_retries, deadline_s=deadline_s, breaker_threshold=breaker_threshold,
          max_invalid_turns=max_invalid_turns, model_path=model_path, adapter=adapter, device=device,
          dtype=dtype, strategies=strategies, trials=trials, pass_k=pass_k, concurrency=concurrency,
          retry_errors=retry_errors, retry_failed=retry_failed, force=force, skip_missing_gold=skip_missing_gold,
          simulator=simulator, judge=judge, reward_config=reward_config,
          judge_model=judge_model,
          judge_base_url=judge_base_url, judge_api_key_env=judge_api_key_env, attribution_model=attribution_model,
          attribution_base_url=attribution_base_url, attribution_api_key_env=attribution_api_key_env, split=split,
          limit=limit, max_turns=max_turns, temperature=temperature, top_p=top_p, top_k=top_k,
          max_tokens=max_tokens, seed=seed, sampling_seed=sampling_seed, data_dir=data_dir, index_dir=index_dir,
          runs_dir=runs_dir)
    _exit_for(summary)


#: ``shopcomp eval`` exit status when some episodes ended with an error (all results written).
EXIT_EPISODE_ERRORS = 3
#: Exit status when the run stopped because the endpoint is considered down (circuit breaker).
EXIT_ENDPOINT_DOWN = 2


def _archive_if_stale(results_path: Path, identity: dict) -> None:
    """Quickstart only: results of a run with another identity (e.g. written by an older release
    whose judge scored differently), or with a missing or corrupt identity, are moved aside to
    ``<file>.stale-<UTC time>`` — kept, never deleted — so the main job starts a fresh run instead
    of refusing or mixing them."""
    from shopping_companion.benchmark.evaluate import errors_log_path, identity_path

    ip = identity_path(results_path)
    if not results_path.exists() and not ip.exists():
        return
    try:
        old = json.loads(ip.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        old = None
    if old == json.loads(json.dumps(identity, sort_keys=True, default=str)):
        return
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    moved = []
    for p in (results_path, ip, errors_log_path(results_path)):
        if p.exists():
            target = p.with_name(f"{p.name}.stale-{stamp}")
            p.replace(target)
            moved.append(target.name)
    console.print(f"[yellow]note:[/] {escape(str(results_path))} holds results of another run configuration "
                  f"(an older release or other settings); moved aside to {escape(', '.join(moved))}, starting afresh")


def _exit_for(summary: dict) -> None:
    """Exit :data:`EXIT_EPISODE_ERRORS` when any requested episode's final result is an error."""
    if summary and summary.get("n_errors"):
        raise typer.Exit(code=EXIT_EPISODE_ERRORS)


def _parse_ks(text: Optional[str]) -> Optional[list[int]]:
    if not text:
        return None
    try:
        ks = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        _fail(f"--pass-k must be comma-separated integers, e.g. 1,2,4 (got {text!r})")
    if not ks or ks[0] < 1:
        _fail(f"--pass-k values must be >= 1 (got {text!r})")
    return ks


def _reachable(backend, option: str):
    """``backend`` when its OpenAI-compatible endpoint answers (:meth:`OpenAIBackend.ping`); else
    exit 2 at once naming ``option``, instead of minutes of per-request retries into the run."""
    from shopping_companion.llm.base import BackendError

    try:
        backend.ping()
    except BackendError as e:
        _fail(f"{option}: {e}")
    return backend


def _check_judge_options(judge: str, judge_model, judge_base_url=None, judge_api_key_env: str = "OPENAI_API_KEY") -> None:
    """Refuse bad judge options, and an LLM judge endpoint that cannot be reached, before anything
    slow (catalog, index, embeddings) is loaded or any run directory is made."""
    if judge not in ("rule", "llm"):
        _fail(f"--judge must be rule or llm (got {judge!r})")
    if judge == "llm" and not judge_model:
        _fail("--judge-model is required with --judge llm")
    if judge == "llm":
        from shopping_companion.llm.openai_backend import OpenAIBackend

        with OpenAIBackend(judge_model, base_url=judge_base_url, api_key_env=judge_api_key_env,
                           name=f"judge:{judge_model}") as probe:
            _reachable(probe, "--judge-base-url")


def _make_judge(judge: str, lookup, judge_model, judge_base_url, judge_api_key_env, run_dir: Path, sessions=None,
                embedder=None):
    from shopping_companion.pipeline import make_rule_judge

    if judge == "rule":
        return make_rule_judge(lookup, sessions, embedder), "rule (deterministic, offline)"
    if judge == "llm":
        if not judge_model:
            _fail("--judge-model is required with --judge llm")
        from shopping_companion.judges.llm import LLMJudge
        from shopping_companion.benchmark.report import scrub_url

        times = _endpoint_time_options()
        j = LLMJudge.from_openai(judge_model, judge_base_url, api_key_env=judge_api_key_env, lookup=lookup,
                                 cache_path=run_dir / "judge_cache.sqlite", http_deadline_s=times.get("deadline_s"),
                                 breaker_threshold=times.get("breaker_threshold"))
        return j, f"llm: {judge_model} at {scrub_url(judge_base_url) or 'the provider default endpoint'}"
    _fail(f"--judge must be rule or llm (got {judge!r})")


def _attribute_failures(items, results, tasks_by_id, run_dir: Path, model, base_url, api_key_env, concurrency):
    """LLM attribution of each failure, cached in runs/<name>/taxonomy_llm.jsonl (reruns only ask
    for failures not attributed yet)."""
    from concurrent.futures import ThreadPoolExecutor

    from shopping_companion.benchmark.metrics import strategy_of
    from shopping_companion.benchmark.taxonomy import llm_attribute
    from shopping_companion.llm.openai_backend import OpenAIBackend

    cache_path = run_dir / "taxonomy_llm.jsonl"
    cached: dict[tuple, dict] = {}
    if cache_path.exists():
        for line in cache_path.read_text(encoding="utf-8").splitlines():
            try:
                d = json.loads(line)
            except ValueError:
                continue
            if d.get("model") == f"attribution:{model}" and d.get("category"):
                cached[(d["task_id"], d["trial"], d["strategy"])] = d
    by_key = {(r.task_id, r.trial, strategy_of(r)): r for r in results}
    todo = [it for it in items if (it.task_id, it.trial, it.strategy) not in cached]
    if todo:
        backend = OpenAIBackend(model=model, base_url=base_url, api_key_env=api_key_env, send_top_k=False,
                                name=f"attribution:{model}")

        def work(it):
            return it, llm_attribute(by_key[(it.task_id, it.trial, it.strategy)], backend, tasks_by_id.get(it.task_id))

        from shopping_companion.llm.base import CircuitOpenError

        try:
            with console.status(f"LLM attribution of {len(todo)} failure(s) with {model}"), \
                    ThreadPoolExecutor(max(1, min(concurrency, 16))) as ex, \
                    open(cache_path, "a", encoding="utf-8") as f:
                for it, att in ex.map(work, todo):
                    d = {"task_id": it.task_id, "trial": it.trial, "strategy": it.strategy, **att.to_dict()}
                    f.write(json.dumps(d) + "\n")
                    cached[(it.task_id, it.trial, it.strategy)] = d
        except CircuitOpenError as e:  # the results are written; attribution is an extra, left partial
            console.print(f"[yellow]warning:[/] LLM attribution stopped, the endpoint is down: {escape(str(e))}; "
                          f"{len(cached)} of {len(items)} failures attributed (a rerun asks for the rest)")
    for it in items:
        d = cached.get((it.task_id, it.trial, it.strategy))
        if d is not None:
            it.llm = {k: v for k, v in d.items() if k not in ("task_id", "trial", "strategy")}
    return items


def _eval(bench, run_name, *, backend="reference", base_url=None, model=None, api_key_env="OPENAI_API_KEY",
          timeout_s=120.0, max_retries=3, deadline_s=None, breaker_threshold=None, max_invalid_turns=3,
          model_path=None, adapter=None, device="cpu", dtype="auto", strategies="two_stage:none", trials=1, pass_k=None, concurrency=8, retry_errors=True,
          retry_failed=False, force=False, skip_missing_gold=False, simulator="scripted", judge="rule",
          reward_config=None, judge_model=None, judge_base_url=None,
          judge_api_key_env="OPENAI_API_KEY", attribution_model=None, attribution_base_url=None,
          attribution_api_key_env="OPENAI_API_KEY", split=None, limit=None, max_turns=20, temperature=0.6,
          top_p=0.95, top_k=20, max_tokens=4096, seed=0, sampling_seed=True, data_dir=None, index_dir=None,
          runs_dir=Path("runs"), baseline_note=None, archive_stale=False):
    import hashlib

    from shopping_companion.benchmark.evaluate import (EvalSettings, RunIdentityError, RunLockedError, derive_seed,
                                                       describe, errors_log_path, parse_strategies, run_evaluation)
    from shopping_companion.benchmark.report import (errors_by_kind, left_out_results, scan_results, scrub_url,
                                                     write_parquet, write_report)
    from shopping_companion.benchmark.synth import load_benchmark, missing_gold_products
    from shopping_companion.llm.base import CircuitOpenError
    from shopping_companion.benchmark.taxonomy import classify_failures
    from shopping_companion.envs.env import EnvConfig
    from shopping_companion.errors import ConfigError
    from shopping_companion.judges.rule import RULE_JUDGE_VERSION
    from shopping_companion.llm.base import Sampling
    from shopping_companion.memory.store import MEMORY_INDEX_VERSION
    from shopping_companion.pipeline import (make_embedder, memory_factory, open_product_search, prewarm_memory,
                                             resolve_sources, write_json)

    if split not in (None, "train", "test"):
        _fail(f"--split must be train or test (got {split!r})")
    _check_judge_options(judge, judge_model, judge_base_url, judge_api_key_env)
    try:
        strats = parse_strategies(strategies)
    except ConfigError as e:
        _fail(str(e))
    ks = _parse_ks(pass_k)
    sampling = Sampling(temperature=temperature, top_p=top_p, top_k=top_k or None, max_tokens=max_tokens,
                        seed=seed if sampling_seed else None)
    env_kwargs: dict = {"max_turns": max_turns, "max_invalid_turns": max_invalid_turns}
    if "simulator" in EnvConfig.model_fields:
        env_kwargs.update(simulator=simulator, simulator_seed=seed)
    elif simulator != "scripted":
        _fail("--simulator: this release's environment has no user simulator setting")
    try:
        env_cfg = EnvConfig(**env_kwargs)
        b = load_benchmark(bench)
        tasks = [t for t in b.tasks if split is None or t.split == split][:limit]
        if not tasks:
            _fail(f"no tasks selected from {bench} (split={split}, limit={limit})")
        sources = resolve_sources(data_dir, console=console)
        search = open_product_search(index_dir=index_dir, console=console, sources=sources)
        policy = _make_backend(backend, base_url, model, api_key_env, sources.catalog_path if backend == "reference" else None,
                               model_path=model_path, adapter=adapter, device=device, dtype=dtype,
                               timeout_s=timeout_s, max_retries=max_retries, deadline_s=deadline_s,
                               breaker_threshold=breaker_threshold)
        embedder = make_embedder()
        prewarm_memory(tasks, b.sessions, embedder, console)
    except typer.Exit:  # a helper already printed its error (click's Exit is a RuntimeError)
        raise
    except (FileNotFoundError, RuntimeError, ValueError) as e:
        _fail(str(e))
    lookup = _lookup(search)
    missing_gold = missing_gold_products(tasks, lookup)
    if missing_gold:
        detail = "; ".join(f"{tid}: {', '.join(ids)}" for tid, ids in list(missing_gold.items())[:10])
        more = f"; … {len(missing_gold) - 10} more task(s)" if len(missing_gold) > 10 else ""
        if not skip_missing_gold:
            _fail(f"{len(missing_gold)} task(s) of {bench} have gold products that are not in the catalog "
                  f"{sources.catalog_path} ({detail}{more}), so they cannot be scored correctly; use the catalog the "
                  "benchmark was built from, or pass --skip-missing-gold to leave these tasks out")
        console.print(f"[yellow]warning:[/] skipping {len(missing_gold)} task(s) whose gold products are not in the "
                      f"catalog ({escape(detail)}{more})")
        tasks = [t for t in tasks if t.task_id not in missing_gold]
        if not tasks:
            _fail("no task left after --skip-missing-gold")
    run_dir = Path(runs_dir) / run_name
    run_dir.mkdir(parents=True, exist_ok=True)
    judge_obj, judge_desc = _make_judge(judge, lookup, judge_model, judge_base_url, judge_api_key_env, run_dir,
                                        sessions=b.sessions, embedder=embedder)
    from shopping_companion.rewards.rubric import load_rubric

    try:
        rubric = load_rubric(reward_config, resources={"lookup": lookup})
    except (FileNotFoundError, ValueError, KeyError, ImportError) as e:
        _fail(f"--reward-config: {e}")
    settings = EvalSettings(trials=trials, sampling=sampling, env=env_cfg, seed=seed, reward_fn=rubric)
    bench_hash = hashlib.sha256("\n".join(t.model_dump_json() for t in b.tasks).encode()).hexdigest()[:16]
    identity = {
        "policy": policy.name, "backend": backend, "model": model,
        "model_path": str(model_path) if model_path else None, "adapter": str(adapter) if adapter else None,
        "benchmark_tasks_sha256": bench_hash, "judge": judge_desc, "simulator": simulator,
        "reward_config": reward_config or "paper",
        "sampling": sampling.model_dump(), "seed": seed, "max_turns": max_turns,
        "max_observation_chars": env_cfg.max_observation_chars,
        # every environment setting and the versions of what scores an episode: results produced
        # under other limits, another rule judge or another memory index are a different run
        "env": env_cfg.model_dump(mode="json"), "memory_index_version": MEMORY_INDEX_VERSION,
    }
    if judge == "rule":
        identity["rule_judge_version"] = RULE_JUDGE_VERSION
    t0 = time.perf_counter()
    results_path = run_dir / "results.jsonl"
    if archive_stale:
        _archive_if_stale(results_path, identity)
    try:
        results = run_evaluation(tasks, policy, search, memory_factory(b.sessions, embedder), judge_obj,
                                 results_path, settings, concurrency=concurrency, strategies=strats,
                                 retry_errors=retry_errors, retry_failed=retry_failed, identity=identity, force=force)
    except (RunLockedError, RunIdentityError) as e:
        _fail(str(e))
    except CircuitOpenError as e:
        from rich.text import Text

        n_written = len(scan_results(results_path).results)
        console.print(Text.assemble(("error: ", "bold red"), f"the run stopped: the endpoint is considered down ({e}). "
                                    f"{n_written} result line(s) are in {results_path}; nothing is lost — rerun the "
                                    "same command to resume once the endpoint is back."))
        raise typer.Exit(code=EXIT_ENDPOINT_DOWN)
    wall = time.perf_counter() - t0
    scan = scan_results(results_path)
    requested = {(t.task_id, k, s.mode, s.hint) for s in strats for t in tasks for k in range(trials)}
    left_out = left_out_results(scan.results, [t.task_id for t in b.tasks], requested)
    results_file = {
        "path": str(results_path), "lines": len(scan.results) + len(scan.unreadable),
        "unreadable_lines": len(scan.unreadable),
        "unreadable_line_numbers": [n for n, _ in scan.unreadable[:50]],
        "left_out": left_out,
        "errors_by_kind": errors_by_kind(results),
        "errors_log": str(errors_log_path(results_path)) if errors_log_path(results_path).exists() else None,
        "skipped_missing_gold": sorted(missing_gold) if missing_gold else [],
    }
    if scan.unreadable:
        console.print(f"[yellow]warning:[/] {escape(str(results_path))}: {escape(scan.describe_unreadable())} cannot "
                      "be read back; left out of every metric (their episodes were run again)")
    for why, text in (("not_in_benchmark", "tasks not in the benchmark"),
                      ("not_requested", "tasks, strategies or trials this run did not request")):
        if left_out[why]["count"]:
            console.print(f"[yellow]note:[/] {left_out[why]['count']} result(s) in {escape(str(results_path))} are for "
                          f"{text} (e.g. {escape(', '.join(left_out[why]['examples']))}); left out of the metrics")
    if baseline_note is None and backend == "reference":
        baseline_note = REFERENCE_NOTE
    tasks_by_id = {t.task_id: t for t in b.tasks}
    items = classify_failures(results, tasks_by_id, lookup)
    if attribution_model:
        items = _attribute_failures(items, results, tasks_by_id, run_dir, attribution_model, attribution_base_url,
                                    attribution_api_key_env, concurrency)
    example = tasks[0].task_id
    meta = {
        "run_name": run_name,
        "policy": policy.name,
        "model": model,
        "endpoint": scrub_url(base_url) if backend == "openai" else None,
        "model_path": str(model_path) if backend == "local" and model_path else None,
        "adapter": str(adapter) if backend == "local" and adapter else None,
        "benchmark": str(bench),
        "judge": judge_desc,
        "simulator": f"{simulator} (seed {seed})" if "simulator" in EnvConfig.model_fields else None,
        "strategies": ", ".join(s.name for s in strats),
        "trials": trials,
        "seeds": (f"base {seed}; episode seed = derive_seed({seed}, task_id, trial) "
                  f"(e.g. {example} trial 0 → {derive_seed(seed, example, 0)})"
                  + (f"; sampling seed = derive_seed({seed}, task_id, trial)" if sampling_seed else "; no sampling seed")),
        "baseline_note": baseline_note,
        "results_file": results_file,
        "config": {"eval": describe(settings), "backend": backend, "base_url": scrub_url(base_url), "model": model,
                   "api_key_env": api_key_env if backend == "openai" else None,
                   "timeout_s": timeout_s, "max_retries": max_retries, "deadline_s": deadline_s,
                   "breaker_threshold": breaker_threshold, "device": device, "dtype": dtype,
                   "strategies": [s.name for s in strats], "concurrency": concurrency, "retry_errors": retry_errors,
                   "retry_failed": retry_failed,
                   "judge": judge_desc, "attribution_model": attribution_model,
                   "attribution_base_url": scrub_url(attribution_base_url),
                   "split": split, "limit": limit, "n_tasks": len(tasks), "benchmark_tasks_sha256": bench_hash,
                   "benchmark_manifest": b.manifest.get("counts"), "generator": b.manifest.get("generator")},
    }
    summary = write_report(results, run_dir / "report.md", meta, tasks=tasks_by_id, ks=ks, lookup=lookup,
                           taxonomy=items)
    write_parquet(results, run_dir)
    with open(run_dir / "taxonomy.jsonl", "w", encoding="utf-8") as f:
        for it in items:
            f.write(json.dumps(it.to_dict()) + "\n")
    write_json(run_dir / "summary.json", {"summary": summary, "meta": meta, "eval_wall_s": round(wall, 2)})
    for name, st in summary["strategies"].items():
        acc = st["all"]["acc"]
        succ = st["all"]["succ"]
        console.print(f"[bold]{name}[/]  Acc {'–' if acc is None else f'{acc:.3f}'}  "
                      f"Succ {'–' if succ is None else f'{succ:.3f}'}  ({st['all']['n']} scored)")
    console.print(f"{summary['n_scored']} scored, {summary['n_errors']} errors → {escape(str(run_dir / 'report.md'))}")
    if summary["n_errors"]:
        kinds = summary.get("errors_by_kind") or {}
        console.print(
            f"[yellow]{summary['n_errors']} episode(s) ended with an error[/] ("
            + ", ".join(f"{v} {k}" for k, v in kinds.items()) + "): not scored. Rerunning the same command retries "
            "backend and judge errors (--no-retry-errors skips them)"
            + ("; episode errors (tracebacks in " + escape(str(errors_log_path(results_path))) + ") are retried only "
               "with --retry-failed" if kinds.get("episode") else "") + f". Exit status {EXIT_EPISODE_ERRORS}.")
    return summary


def _parse_judge_specs(specs: list[str], default_base_url: Optional[str]) -> list[tuple[str, Optional[str], Optional[str]]]:
    """``rule`` | ``recorded`` | ``llm:MODEL`` | ``llm:MODEL@BASE_URL`` → (kind, model, base_url)."""
    out = []
    for spec in specs:
        s = spec.strip()
        if s in ("rule", "recorded"):
            out.append((s, None, None))
        elif s.startswith("llm:") and len(s) > 4:
            model, _, url = s[4:].partition("@")
            if not model:
                _fail(f"--judge {spec!r}: the model name after 'llm:' is empty")
            out.append(("llm", model, url or default_base_url))
        else:
            _fail(f"--judge {spec!r}: allowed values are rule, recorded, llm:MODEL or llm:MODEL@BASE_URL")
    kinds = [(k, m) for k, m, _ in out]
    if len(set(kinds)) != len(kinds):
        _fail(f"--judge: each judge may be named once (got {', '.join(specs)})")
    if len(out) < 2:
        _fail("--judge: agreement needs at least two judges, e.g. --judge recorded --judge rule")
    return out


@app.command("judge-agreement")
def judge_agreement(
    bench: Path = typer.Option(..., help="Benchmark directory the results were evaluated on."),
    results: list[Path] = typer.Option(..., "--results", help="results.jsonl of a run; repeat for several systems."),
    judges: list[str] = typer.Option(
        ["recorded", "rule"], "--judge",
        help="Judges to compare (repeat): recorded (verdicts stored at evaluation time), rule, llm:MODEL[@BASE_URL]."),
    judge_base_url: Optional[str] = typer.Option(None, help="Endpoint for llm:MODEL judges given without @BASE_URL."),
    judge_api_key_env: str = typer.Option("OPENAI_API_KEY", help="Variable holding the LLM judges' API key."),
    concurrency: int = typer.Option(8, min=1, help="LLM judge requests in flight."),
    stage: str = typer.Option("all", help="1 | 2 | all: which stages' verdicts to compare."),
    opc_by: str = typer.Option("system", help="system (the paper's OPC over systems' success rates) | item | none."),
    out: Optional[Path] = typer.Option(None, help="Output directory (default: the first results file's directory)."),
    data_dir: Optional[Path] = typer.Option(None, help="Data directory."),
    index_dir: Optional[Path] = typer.Option(None, help="BM25 index directory."),
) -> None:
    """Re-judge finished episodes with several judges; write per-field agreement, Cohen's κ and OPC.

    OPC is the mean pairwise Pearson correlation of the judges' score vectors (Shopping Companion,
    App. E). Failed verdicts are excluded and counted, never scored 0. Writes ``agreement.md`` and
    ``agreement.json`` (LLM verdicts are cached in ``judge_cache.sqlite`` there).
    """
    from shopping_companion.benchmark.report import read_results
    from shopping_companion.benchmark.synth import load_benchmark
    from shopping_companion.judges.agreement import agreement_report, items_from_results, judge_all
    from shopping_companion.pipeline import open_product_search, resolve_sources, write_json

    stages = {"1": (1,), "2": (2,), "all": (1, 2)}.get(stage)
    if stages is None:
        _fail(f"--stage must be 1, 2 or all (got {stage!r})")
    if opc_by not in ("system", "item", "none"):
        _fail(f"--opc-by must be system, item or none (got {opc_by!r})")
    specs = _parse_judge_specs(judges, judge_base_url)
    try:
        b = load_benchmark(bench)
    except (FileNotFoundError, ValueError) as e:
        _fail(str(e))
    import hashlib

    from shopping_companion.benchmark.evaluate import identity_path

    bench_hash = hashlib.sha256("\n".join(t.model_dump_json() for t in b.tasks).encode()).hexdigest()[:16]
    eps = []
    for path in results:
        if not Path(path).is_file():
            _fail(f"--results {path}: no such file")
        # task ids repeat across benchmarks (sc-<seed>-NNNNN): the hash the eval recorded tells them apart
        try:
            recorded_hash = json.loads(identity_path(path).read_text()).get("benchmark_tasks_sha256")
        except (OSError, ValueError, AttributeError):
            recorded_hash = None
        if recorded_hash and recorded_hash != bench_hash:
            _fail(f"--results {path} do not belong to --bench {bench}: they were evaluated on a benchmark whose tasks "
                  f"hash to {recorded_hash} ({identity_path(path).name}), --bench's tasks hash to {bench_hash}")
        eps += [r for r in read_results(path) if r.error is None]
    tasks = {t.task_id: t for t in b.tasks}
    try:
        items, recorded = items_from_results(eps, tasks, stages=stages)
    except KeyError as e:
        _fail(f"--results do not belong to --bench {bench}: {e.args[0]}")
    if not items:
        _fail("no judged stages in the results given (episodes that ended with an error are left out)")
    out_dir = Path(out) if out else Path(results[0]).parent
    out_dir.mkdir(parents=True, exist_ok=True)
    lookup = None
    if any(k != "recorded" for k, _, _ in specs):
        try:
            search = open_product_search(index_dir=index_dir, console=console, sources=resolve_sources(data_dir, console=console))
        except (FileNotFoundError, RuntimeError, ValueError) as e:
            _fail(str(e))
        lookup = _lookup(search)
    table: dict = {}
    judge_objs = []
    for kind, model, url in specs:
        if kind == "recorded":
            table["recorded"] = recorded
        elif kind == "rule":
            from shopping_companion.pipeline import make_rule_judge

            judge_objs.append(make_rule_judge(lookup, b.sessions))
        else:
            from shopping_companion.judges.llm import LLMJudge

            judge_objs.append(LLMJudge.from_openai(model, url, api_key_env=judge_api_key_env, lookup=lookup,
                                                   concurrency=concurrency, cache_path=out_dir / "judge_cache.sqlite"))
    t0 = time.perf_counter()
    with console.status(f"judging {len(items)} stage trajectories with {len(judge_objs)} judge(s)"):
        table.update(judge_all(judge_objs, items))
    wall = time.perf_counter() - t0
    for name, verdicts in table.items():
        if verdicts and all(v.failed for v in verdicts.values()):
            first = next(iter(verdicts.values()))
            _fail(f"--judge {name}: all {len(verdicts)} verdicts failed, nothing to compare (first: "
                  f"{'; '.join(first.reasons[:1]) or 'no reason given'}); check the judge's endpoint "
                  "(llm:MODEL@BASE_URL or --judge-base-url) and --judge-api-key-env")
    try:
        rep = agreement_report(table, opc_by=None if opc_by == "none" else opc_by,  # type: ignore[arg-type]
                               opc_stage=2 if 2 in stages else 1)
    except ValueError as e:
        _fail(str(e))
    md = rep.to_markdown()
    header = (f"# Judge agreement\n\nBenchmark: `{bench}` · results: {', '.join(f'`{p}`' for p in results)} · "
              f"stages: {stage} · judging wall time {wall:.1f}s\n\n")
    (out_dir / "agreement.md").write_text(header + md, encoding="utf-8")
    write_json(out_dir / "agreement.json", {**rep.to_dict(), "stages": list(stages), "judging_wall_s": round(wall, 3)})
    console.print(md)
    console.print(f"→ {escape(str(out_dir / 'agreement.md'))}")


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
        reuse = (existing.manifest.get("config", {}).get("n_tasks") == n_tasks
                 and existing.manifest.get("config", {}).get("seed") == seed
                 and existing.manifest.get("format_version") == 2)
    except FileNotFoundError:
        reuse = False
    except ValueError as e:  # BenchmarkError: a changed or inconsistent directory is rebuilt
        console.print(f"[yellow]note:[/] {escape(str(e))}; rebuilding the benchmark")
        reuse = False
    if reuse:
        console.print(f"reusing benchmark {escape(str(bench))}")
    else:
        _synth(bench, n_tasks, seed, 42, data_dir, None, True)
    summary = _eval(bench, name, backend=backend, base_url=base_url, model=model, api_key_env=api_key_env,
                    data_dir=data_dir, runs_dir=runs_dir, archive_stale=True)
    console.print(f"quickstart finished in {time.perf_counter() - t0:.1f}s")
    _exit_for(summary)


def _add_subcommands() -> None:
    """Training and second-benchmark command groups (their modules import heavy stacks lazily)."""
    from shopping_companion.personalization.cli import app as personalize_app
    from shopping_companion.sft.cli import app as sft_app
    from shopping_companion.trainers.cli import app as grpo_app

    app.add_typer(sft_app, name="sft", help="SFT: rejection sampling, step-level examples, LLaMA-Factory export.")
    app.add_typer(grpo_app, name="grpo", help="GRPO: verl parquet datasets and launch (cluster), TRL on one node.")
    app.add_typer(personalize_app, name="personalize",
                  help="Second benchmark: multi-agent personalised RAG over Amazon Reviews 2023 (build, run, eval).")


_add_subcommands()


def main() -> None:  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
