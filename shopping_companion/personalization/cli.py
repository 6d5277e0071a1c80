"""`shopcomp personalize build|run|eval` — the personalised multi-agent RAG benchmark.

The lead wires :data:`app` into the main CLI as the ``personalize`` sub-command.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from shopping_companion.errors import ConfigError

app = typer.Typer(help="Personalised multi-agent RAG over Amazon Reviews 2023 (Personalization Matters).",
                  no_args_is_help=True, add_completion=False)


def _fail(msg: str) -> None:
    typer.secho(f"error: {msg}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code=2)


def _backend(model: Optional[str], base_url: Optional[str], api_key_env: str, timeout_s: float = 120.0,
             max_retries: int = 3, option: str = "--base-url", ping: bool = True):
    """An OpenAI-compatible backend; with ``ping`` an endpoint that cannot be reached fails here,
    naming ``option``, not after minutes of per-request retries."""
    from shopping_companion.llm.base import BackendError
    from shopping_companion.llm.openai_backend import OpenAIBackend

    backend = OpenAIBackend(model=model or "", base_url=base_url, api_key_env=api_key_env, timeout_s=timeout_s,
                            max_retries=max_retries, send_top_k=False)
    if ping:
        try:
            backend.ping()
        except BackendError as e:
            _fail(f"{option}: {e}")
    return backend


def _run_section(config: Optional[Path]) -> dict:
    import yaml

    p = config or Path(__file__).resolve().parents[2] / "configs" / "personalization" / "default.yaml"
    if not p.is_file():
        return {}
    return (yaml.safe_load(p.read_text()) or {}).get("run", {}) or {}


@app.command()
def build(
    out: Path = typer.Option(..., help="Output dataset directory."),
    config: Optional[Path] = typer.Option(None, help="YAML config (default configs/personalization/default.yaml)."),
    data_dir: Optional[Path] = typer.Option(None, help="Data directory (default ../shared/data or $SHOPCOMP_DATA_DIR)."),
    users_per_category: Optional[int] = typer.Option(None, min=1, help="Override selection.users_per_category."),
    profile_builder: str = typer.Option("rule", help="rule (offline, default) | llm"),
    query_generator: str = typer.Option("template", help="template (offline, default) | llm"),
    llm_model: Optional[str] = typer.Option(None, help="Model for --profile-builder/--query-generator llm."),
    llm_base_url: Optional[str] = typer.Option(None, help="OpenAI-compatible endpoint of --llm-model."),
    llm_api_key_env: str = typer.Option("OPENAI_API_KEY", help="Variable holding the LLM's API key."),
    vlm_model: Optional[str] = typer.Option(None, help="Vision-language model for image descriptions (e^d)."),
    vlm_base_url: Optional[str] = typer.Option(None, help="Endpoint of --vlm-model."),
    download: Optional[str] = typer.Option(None, help="Comma-separated categories to fetch (reviews + meta) from "
                                           "the McAuley Lab release and add as sources (needs network)."),
) -> None:
    """Select users and targets, build profiles, query trajectories and candidate pools."""
    from shopping_companion.paths import resolve_data_dir
    from shopping_companion.personalization.build import SourceConfig, build_dataset, load_build_config
    from shopping_companion.personalization.llmjson import JSONAsker
    from shopping_companion.personalization.profiles import LLMProfileBuilder, RuleProfileBuilder
    from shopping_companion.personalization.queries import LLMQueryGenerator, TemplateQueryGenerator

    try:
        cfg = load_build_config(config)
        if users_per_category:
            cfg.selection.users_per_category = users_per_category
        if download:
            from shopping_companion.personalization.data import fetch_category_files

            for cat in [c.strip() for c in download.split(",") if c.strip()]:
                files = fetch_category_files(cat)
                cfg.sources.append(SourceConfig(kind="reviews", path=str(files["reviews"]), category=cat,
                                                meta=str(files["meta"])))
        data = resolve_data_dir(data_dir)
        if profile_builder not in ("rule", "llm") or query_generator not in ("template", "llm"):
            raise ConfigError("profile_builder: rule|llm; query_generator: template|llm")
        asker = None
        if "llm" in (profile_builder, query_generator):
            if not llm_model:
                raise ConfigError("llm_model: required with --profile-builder llm or --query-generator llm")
            asker = JSONAsker(_backend(llm_model, llm_base_url, llm_api_key_env, option="--llm-base-url"))
        pb = LLMProfileBuilder(asker) if profile_builder == "llm" else RuleProfileBuilder()
        qg = LLMQueryGenerator(asker) if query_generator == "llm" else TemplateQueryGenerator(cfg.seed)
        describe = None
        if vlm_model:
            from shopping_companion.personalization.vision import describe_images

            vb = _backend(vlm_model, vlm_base_url, llm_api_key_env, option="--vlm-base-url")
            describe = lambda items: describe_images(items, vb)  # noqa: E731
        man = build_dataset(cfg, data, out, profile_builder=pb, query_generator=qg, describe=describe,
                            progress=lambda s: typer.echo(s))
    except (ConfigError, FileNotFoundError) as e:
        _fail(str(e))
        return
    typer.echo(f"{man['n_cases']} cases in {out} ({len(man['categories'])} categories, {man['build_s']} s)")


@app.command()
def run(
    dataset: Path = typer.Option(..., help="Dataset directory written by `personalize build`."),
    out: Path = typer.Option(..., help="Run directory (dialogues.jsonl, run.json)."),
    config: Optional[Path] = typer.Option(None, help="YAML config whose `run:` section gives defaults."),
    variants: Optional[str] = typer.Option(None, help="all or comma list of baseline,textrag,norev,single,full."),
    memory: Optional[str] = typer.Option(None, help="Memory modes for the Full variant: all or comma list of "
                                         "full,none,summary,top1."),
    roles: str = typer.Option("extractive", help="extractive (offline rule-based baseline, not an LLM) | llm"),
    model: Optional[str] = typer.Option(None, help="Model of the role agents (--roles llm)."),
    base_url: Optional[str] = typer.Option(None, help="OpenAI-compatible endpoint (--roles llm)."),
    api_key_env: str = typer.Option("OPENAI_API_KEY", help="Variable holding the API key."),
    embedder: Optional[str] = typer.Option(None, help="minilm | openai:<model> (then --embed-base-url)."),
    embed_base_url: Optional[str] = typer.Option(None, help="Embeddings endpoint for openai:<model>."),
    categories: Optional[str] = typer.Option(None, help="Only these categories (comma list)."),
    max_cases: Optional[int] = typer.Option(None, min=1, help="Only the first N cases."),
    concurrency: int = typer.Option(1, min=1, help="Dialogues in flight (threads)."),
) -> None:
    """Run the assistant variants over every case (resumable)."""
    from shopping_companion.personalization.agents import ExtractiveRoles, LLMRoles, parse_memory_modes, parse_variants
    from shopping_companion.personalization.retrieval import make_text_embedder
    from shopping_companion.personalization.runner import run_dialogues

    sect = _run_section(config)
    try:
        vs = parse_variants(variants or sect.get("variants") or "all")
        ms = parse_memory_modes(memory or sect.get("memory") or "full")
        if roles == "llm":
            if not model:
                raise ConfigError("model: required with --roles llm")
            engine = LLMRoles(_backend(model, base_url, api_key_env))
        elif roles == "extractive":
            engine = ExtractiveRoles()
        else:
            raise ConfigError(f"roles: {roles!r}; allowed extractive, llm")
        spec = embedder or sect.get("embedder") or "minilm"
        emb = make_text_embedder(spec, embed_base_url, api_key_env)
        n = [0]

        def prog(rec: dict) -> None:
            n[0] += 1
            if n[0] % 25 == 0 or rec.get("error"):
                typer.echo(f"{n[0]} dialogues; last {rec['case_id']} {rec['variant']}/{rec['memory']}"
                           + (f" ERROR {rec['error']}" if rec.get("error") else ""))

        path = run_dialogues(dataset, out, engine, emb, variants=vs, memory_modes=ms, embedder_name=spec,
                             k_d=int(sect.get("k_d", 1)), k_p=int(sect.get("k_p", 5)), k_r=int(sect.get("k_r", 5)),
                             categories=[c for c in (categories or "").split(",") if c] or None, max_cases=max_cases,
                             concurrency=concurrency, progress=prog)
    except ConfigError as e:
        _fail(str(e))
        return
    typer.echo(f"dialogues in {path}")


@app.command("eval")
def eval_cmd(
    run_dir: Path = typer.Option(..., "--run", help="Run directory of `personalize run`."),
    dataset: Path = typer.Option(..., help="Dataset directory."),
    judge_model: Optional[str] = typer.Option(None, help="Judge model (OpenAI-compatible endpoint); omitted: the "
                                              "judge is reported as not run."),
    judge_base_url: Optional[str] = typer.Option(None, help="Judge endpoint."),
    second_judge_model: Optional[str] = typer.Option(None, help="A second judge for agreement (Table 10)."),
    second_judge_base_url: Optional[str] = typer.Option(None, help="Endpoint of the second judge."),
    api_key_env: str = typer.Option("OPENAI_API_KEY", help="Variable holding the API key."),
    concurrency: int = typer.Option(4, min=1, help="Judge calls in flight."),
) -> None:
    """Judge the dialogues (when an endpoint is given) and write report.md, parquet and PNGs."""
    from shopping_companion.personalization.judge import TrajectoryJudge
    from shopping_companion.personalization.llmjson import JSONAsker
    from shopping_companion.personalization.report import judge_run, read_judgments, write_report
    from shopping_companion.llm.base import BackendError
    from shopping_companion.paths import cache_dir

    paths = []
    try:
        for m, u, option in ((judge_model, judge_base_url, "--judge-base-url"),
                             (second_judge_model, second_judge_base_url, "--second-judge-base-url")):
            if not m:
                continue
            asker = JSONAsker(_backend(m, u, api_key_env, ping=False), cache_path=cache_dir() / "personalization_judge.sqlite")
            try:
                jp = judge_run(run_dir, dataset, TrajectoryJudge(asker), tag=m, concurrency=concurrency)
            except BackendError as e:  # judge_run checks the endpoint only when dialogues are left to judge
                _fail(f"{option}: {e}")
            js = list(read_judgments(jp).values())
            if js and all(j.get("error") for j in js):
                raise ConfigError(f"judge {m}: all {len(js)} judgments failed (first: {str(js[0]['error'])[:300]}); "
                                  f"check --judge-base-url / the API key; a rerun retries them")
            paths.append(jp)
        rp = write_report(run_dir, dataset, paths or None)
    except ConfigError as e:
        _fail(str(e))
        return
    typer.echo(f"report: {rp}")
