"""``shopcomp personalize build|run|eval``: the personalised multi-agent RAG benchmark
("Personalization Matters", Gao et al. 2026; docs/personalization.md).

    shopcomp personalize build --out runs/pers/ds [--config configs/personalization/smoke.yaml] [--set seed=1]
    shopcomp personalize run --dataset runs/pers/ds --out runs/pers/run [--config run.yaml] [--set k_p=3]
    shopcomp personalize eval --run runs/pers/run --dataset runs/pers/ds [--judge-model M --judge-base-url URL]

``build`` reads the ``build:`` section of the config
(:class:`~shopping_companion.personalization.build.BuildConfig`), ``run`` its ``run:`` section
(:class:`~shopping_companion.personalization.config.PersonalizeRunConfig`); flags and ``--set``
override them (:func:`shopping_companion.config.load_model`). ``--data-dir`` is the raw data
directory, as everywhere. Errors are raised, never printed here (the group's one handler prints them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from shopping_companion.cli.common import Flag, console, data_dir_option, flag_command, flag_names, new_app, option
from shopping_companion.errors import ConfigError
from shopping_companion.personalization.llmjson import openai_chat

app = new_app(help="Personalised multi-agent RAG over Amazon Reviews 2023 (Personalization Matters).")


# --------------------------------------------------------------------------- build

BUILD_FLAGS = [
    Flag("--users-per-category N", "selection.users_per_category", int, "Target users per category (paper: 10)."),
    Flag("--seed N", "seed", int, "Seed of the selection and the template queries (default 0)."),
]

_BUILD_EXTRA = [
    ("out", Path, typer.Option(..., "--out", metavar="DIR", help="Output dataset directory.")),
    ("data_dir", Optional[Path], data_dir_option()),
    ("profile_builder", str, option("rule", metavar="KIND", help="rule (offline, default) | llm.")),
    ("query_generator", str, option("template", metavar="KIND", help="template (offline, default) | llm.")),
    (
        "llm_model",
        Optional[str],
        typer.Option(None, metavar="NAME", help="Model of the llm profile builder / query generator."),
    ),
    (
        "llm_base_url",
        Optional[str],
        typer.Option(None, metavar="URL", help="OpenAI-compatible endpoint of --llm-model."),
    ),
    (
        "llm_api_key_env",
        str,
        option("OPENAI_API_KEY", metavar="VAR", help="Variable holding its API key (default OPENAI_API_KEY)."),
    ),
    (
        "vlm_model",
        Optional[str],
        typer.Option(None, metavar="NAME", help="Vision-language model for image descriptions (e^d)."),
    ),
    ("vlm_base_url", Optional[str], typer.Option(None, metavar="URL", help="Endpoint of --vlm-model.")),
    (
        "download",
        Optional[str],
        typer.Option(
            None,
            metavar="LIST",
            help="Categories to fetch (reviews + meta) "
            "from the McAuley Lab release and add as sources (needs network).",
        ),
    ),
]


def _build(
    config: Optional[Path],
    sets: list[str],
    overrides: dict[str, Any],
    *,
    out: Path,
    data_dir: Optional[Path],
    profile_builder: str,
    query_generator: str,
    llm_model: Optional[str],
    llm_base_url: Optional[str],
    llm_api_key_env: str,
    vlm_model: Optional[str],
    vlm_base_url: Optional[str],
    download: Optional[str],
) -> None:
    from shopping_companion.paths import resolve_data_dir
    from shopping_companion.personalization.build import SourceConfig, build_dataset, load_build_config
    from shopping_companion.personalization.llmjson import JSONAsker
    from shopping_companion.personalization.profiles import LLMProfileBuilder, RuleProfileBuilder
    from shopping_companion.personalization.queries import LLMQueryGenerator, TemplateQueryGenerator

    if profile_builder not in ("rule", "llm"):
        raise ConfigError(f"--profile-builder: must be rule or llm, got {profile_builder!r}")
    if query_generator not in ("template", "llm"):
        raise ConfigError(f"--query-generator: must be template or llm, got {query_generator!r}")
    cfg = load_build_config(config, sets, overrides, names=flag_names(BUILD_FLAGS))
    if download:
        from shopping_companion.personalization.data import fetch_category_files

        for cat in [c.strip() for c in download.split(",") if c.strip()]:
            files = fetch_category_files(cat)
            cfg.sources.append(
                SourceConfig(kind="reviews", path=str(files["reviews"]), category=cat, meta=str(files["meta"]))
            )
    data = resolve_data_dir(data_dir)
    asker = None
    if "llm" in (profile_builder, query_generator):
        if not llm_model:
            raise ConfigError("--llm-model: required with --profile-builder llm or --query-generator llm")
        asker = JSONAsker(openai_chat(llm_model, llm_base_url, llm_api_key_env, "--llm-base-url"))
    pb = LLMProfileBuilder(asker) if profile_builder == "llm" else RuleProfileBuilder()
    qg = LLMQueryGenerator(asker) if query_generator == "llm" else TemplateQueryGenerator(cfg.seed)
    describe = None
    if vlm_model:
        from shopping_companion.personalization.vision import describe_images

        vb = openai_chat(vlm_model, vlm_base_url, llm_api_key_env, "--vlm-base-url")
        describe = lambda items: describe_images(items, vb)  # noqa: E731
    man = build_dataset(
        cfg, data, out, profile_builder=pb, query_generator=qg, describe=describe, progress=lambda s: typer.echo(s)
    )
    typer.echo(f"{man['n_cases']} cases in {out} ({len(man['categories'])} categories, {man['build_s']} s)")


flag_command(
    app,
    "build",
    BUILD_FLAGS,
    _build,
    extra_params=_BUILD_EXTRA,
    help="""Select users and targets,
    build profiles, query trajectories and candidate pools.

    Settings come from the build: section of --config (default configs/personalization/default.yaml),
    then the flags, then --set key=value (keys of that section, e.g. selection.users_per_category=3).""",
)


# --------------------------------------------------------------------------- run

# fmt: off
#: Every ``personalize run`` flag and the :class:`PersonalizeRunConfig` key it overrides.
RUN_FLAGS = [
    Flag("--dataset DIR", "dataset", Path, "Dataset directory written by `personalize build` (required)."),
    Flag("--out DIR", "out", Path, "Run directory: dialogues.jsonl, run.json, config.yaml (required)."),
    Flag("--variants LIST", "variants", str, "all (default) or a comma list of baseline,textrag,norev,single,full."),
    Flag("--memory LIST", "memory", str, "Memory of Full: all or comma list: full,none,summary,top1 (default full)."),
    Flag("--roles KIND", "roles", str, "extractive (offline rule-based baseline, not an LLM; default) | llm."),
    Flag("--model NAME", "model", str, "Model of the role agents (--roles llm)."),
    Flag("--base-url URL", "base_url", str, "OpenAI-compatible endpoint (--roles llm)."),
    Flag("--api-key-env VAR", "api_key_env", str, "Variable holding the API key (roles and embeddings)."),
    Flag("--embedder NAME", "embedder", str, "minilm (default) | openai:MODEL (an embeddings endpoint: --embed-base-url)."),
    Flag("--embed-base-url URL", "embed_base_url", str, "Embeddings endpoint of openai:<model>."),
    Flag("--categories LIST", "categories", str, "Only these categories (comma list)."),
    Flag("--max-cases N", "max_cases", int, "Only the first N cases."),
    Flag("--concurrency N", "concurrency", int, "Dialogues in flight (threads; default 1)."),
    Flag("--force", "force", bool, "Adopt this configuration for dialogues whose run.json is missing or corrupt."),
]
# fmt: on


#: :class:`PersonalizeRunConfig` fields passed to :func:`~shopping_companion.personalization.runner.run_dialogues`
#: as the keywords of the same name
_RUN_KEYWORDS = {"variants", "k_d", "k_p", "k_r", "categories", "max_cases", "concurrency", "force"}


def _run(config: Optional[Path], sets: list[str], overrides: dict[str, Any]) -> None:
    from shopping_companion.config import dump_yaml
    from shopping_companion.personalization.agents import ExtractiveRoles, LLMRoles
    from shopping_companion.personalization.config import load_run_config
    from shopping_companion.personalization.retrieval import make_text_embedder
    from shopping_companion.personalization.runner import run_dialogues

    cfg = load_run_config(config, sets, overrides, names=flag_names(RUN_FLAGS))
    if cfg.roles == "llm":
        engine: Any = LLMRoles(
            openai_chat(
                cfg.model,
                cfg.base_url,
                cfg.api_key_env,
                "--base-url",
                timeout_s=cfg.timeout_s,
                max_retries=cfg.max_retries,
            )
        )
    else:
        engine = ExtractiveRoles()
    emb = make_text_embedder(cfg.embedder, cfg.embed_base_url, cfg.api_key_env)
    n = [0]

    def progress(rec: dict) -> None:
        n[0] += 1
        if n[0] % 25 == 0 or rec.get("error"):
            console.print(
                f"{n[0]} dialogues; last {rec['case_id']} {rec['variant']}/{rec['memory']}"
                + (f" ERROR {rec['error']}" if rec.get("error") else ""),
                markup=False,
                soft_wrap=True,
            )

    same_name = cfg.model_dump(include=_RUN_KEYWORDS)  # config fields that are run_dialogues keywords
    path = run_dialogues(
        cfg.dataset,
        cfg.out,
        engine,
        emb,
        memory_modes=cfg.memory,
        embedder_name=cfg.embedder,
        progress=progress,
        **same_name,
    )
    dump_yaml(
        cfg,
        Path(cfg.out) / "config.yaml",
        header=(
            f"The resolved configuration of the personalization run in {cfg.out}.\n"
            f"Resume it with: shopcomp personalize run --config {Path(cfg.out) / 'config.yaml'}"
        ),
    )
    typer.echo(f"dialogues in {path}")


flag_command(
    app,
    "run",
    RUN_FLAGS,
    _run,
    help="""Run the assistant variants over every case (resumable).

    Settings come from --config (its run: section, or a file of run keys; default
    configs/personalization/default.yaml), then the flags, then --set key=value (e.g. k_p=3). The
    resolved configuration is written to OUT/config.yaml; resuming with another role engine,
    embedder or retrieval depth is refused (use another --out).""",
)


from shopping_companion.cli.personalize_eval import eval_cmd  # noqa: E402 - judge the dialogues, write the report

app.command("eval")(eval_cmd)
