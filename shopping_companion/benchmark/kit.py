"""The eval's builders: the groups of an :class:`~shopping_companion.benchmark.run_config.EpisodeConfig`
in, an :class:`EpisodeKit` out — everything the episodes of one run share (docs/architecture.md,
the data flow of one run). Used by :func:`~shopping_companion.benchmark.run.run_benchmark`, the
Ray episode workers and ``shopcomp sft collect``.

Each builder turns one group of the config into objects: :func:`build_backend` (the policy),
:func:`build_sampling`, :func:`check_simulator`, :func:`build_env_config`, :func:`build_resources`
(data sources, BM25 index, benchmark tasks, MiniLM embedder); the judge and the rubric come from
the assembly layer (:func:`~shopping_companion.assembly.judging.build_judge`,
:func:`~shopping_companion.assembly.reward_spec.build_rubric`). :func:`run_identity` is what a
results file must match to be resumed. Nothing here parses command lines or prints errors:
problems are raised as :class:`~shopping_companion.errors.ShopCompError` subclasses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from rich.console import Console
from rich.markup import escape

from shopping_companion.assembly.data import benchmark_tasks_sha256, load_catalog, product_lookup
from shopping_companion.assembly.endpoints import check_reachable, endpoint_time_options
from shopping_companion.assembly.judging import build_judge, ping_judge
from shopping_companion.assembly.reward_spec import build_rubric, load_reward_spec
from shopping_companion.assembly.settings import BackendConfig
from shopping_companion.benchmark.run_config import EpisodeConfig
from shopping_companion.console import console as _stderr
from shopping_companion.errors import ConfigError, DataError
from shopping_companion.phases import phase

__all__ = [
    "EpisodeKit",
    "Resources",
    "build_backend",
    "build_env_config",
    "build_kit",
    "build_resources",
    "build_sampling",
    "build_scoring",
    "check_simulator",
    "run_identity",
]


def build_backend(cfg: BackendConfig, catalog_path: Path | None = None, console: Console | None = None) -> Any:
    """The policy :class:`~shopping_companion.llm.base.ChatBackend` of ``cfg``: the reference policy
    (its attribute vocabulary built from the catalog at ``catalog_path``), an OpenAI-compatible
    client (pinged first; raises ``BackendError`` when unreachable) or a local checkpoint."""
    console = console or _stderr
    if cfg.kind == "reference":
        from shopping_companion.llm.reference import ReferencePolicy, build_attribute_vocabulary

        if catalog_path is None:
            raise ConfigError("backend.kind=reference needs the catalog (no data directory was resolved)")
        with console.status("building the reference policy's attribute vocabulary from the catalog"):
            prods, _ = load_catalog(catalog_path)
            vocab = build_attribute_vocabulary(prods)
        return ReferencePolicy(vocab)
    if cfg.kind == "openai":
        from shopping_companion.llm.openai_backend import OpenAIBackend

        try:
            policy = OpenAIBackend(
                model=cfg.model,
                base_url=cfg.base_url,
                api_key_env=cfg.api_key_env,
                timeout_s=cfg.timeout_s,
                max_retries=cfg.max_retries,
                **endpoint_time_options(cfg.deadline_s, cfg.breaker_threshold),
            )
        except ConfigError as e:
            raise ConfigError(f"backend (openai): {e}") from None
        return check_reachable(policy, "backend.base_url (--base-url)")
    from shopping_companion.llm.local_transformers import LocalTransformersBackend

    with console.status(f"loading {cfg.model_path} on {cfg.device}"):
        return LocalTransformersBackend(
            cfg.model_path, device=cfg.device, dtype=cfg.dtype, adapter_path=cfg.adapter, batch_size=cfg.batch_size
        )


def build_sampling(cfg: EpisodeConfig) -> Any:
    """The backend's :class:`~shopping_companion.llm.base.Sampling` (``seed`` = the run's base seed
    when ``backend.sampling.send_seed``; the runner derives the per-episode seed from it)."""
    from shopping_companion.llm.base import Sampling

    s = cfg.backend.sampling
    return Sampling(
        temperature=s.temperature,
        top_p=s.top_p,
        top_k=s.top_k or None,
        max_tokens=s.max_tokens,
        seed=cfg.seed if s.send_seed else None,
    )


def check_simulator(cfg: EpisodeConfig) -> None:
    """Build ``cfg.simulator`` once (a registered name or ``module:attr``, seeded with ``cfg.seed``)
    so that an unknown or unbuildable simulator is a :class:`ConfigError` before any episode,
    not an error in every one. From a config only simulators that build from a seed work (the
    ``llm`` simulator needs a backend object: pass it to the runner from Python)."""
    from shopping_companion.envs.simulator import make_simulator

    try:
        make_simulator(cfg.simulator, seed=cfg.seed)
    except ValueError as e:  # ConfigError (unknown name) or "cannot construct"
        raise ConfigError(f"simulator (--simulator): {e}") from None


def build_env_config(cfg: EpisodeConfig) -> Any:
    """``cfg.env`` with the run's user simulator and its seed."""
    return cfg.env.model_copy(update={"simulator": cfg.simulator, "simulator_seed": cfg.seed})


@dataclass
class Resources:
    """What episodes share: data ``sources``, the product ``search`` index and its ``lookup``, the
    loaded ``benchmark``, the selected ``tasks``, the MiniLM ``embedder``; ``skipped`` maps task ids
    left out by ``skip_missing_gold`` to their missing gold product ids. With ``tools: serve:URL``
    (``remote``: the :class:`~shopping_companion.serve.remote.RemoteService`), ``search`` is its
    :class:`~shopping_companion.serve.remote.RemoteProducts`, ``lookup`` reads products through it,
    and ``sources`` / ``embedder`` are None (nothing of the catalog is loaded here)."""

    sources: Any
    search: Any
    lookup: Callable
    benchmark: Any
    tasks: list[Any]
    embedder: Any
    skipped: dict[str, list[str]] = field(default_factory=dict)
    remote: Any = None


def build_resources(cfg: EpisodeConfig, console: Console | None = None, *, embed: bool = True) -> Resources:
    """Load ``cfg.bench``'s benchmark (``cfg`` an :class:`EvalConfig`, a ``CollectConfig`` or any
    :class:`EpisodeConfig` with a ``bench`` selection), select its tasks (split, limit), resolve the data, open the BM25 index,
    check that every gold product is in the catalog, and (``embed``) warm the MiniLM memory cache.

    With ``cfg.tools`` ``serve:URL`` no index, embedder or memory is loaded here: the service is
    checked (:func:`~shopping_companion.serve.remote.connect`: ready, has this benchmark, scores
    with ``cfg.rubric`` and ``cfg.judge``) and the gold products are looked up through it.

    Raises :class:`DataError` when no task is selected or gold products are missing (unless
    ``bench.skip_missing_gold``), or what loading the data raises (all :class:`ShopCompError`);
    with a service, what :func:`~shopping_companion.serve.remote.connect` raises
    (:class:`ConfigError`, :class:`~shopping_companion.errors.ToolServiceError`)."""
    from shopping_companion.assembly.data import (
        load_benchmark,
        make_embedder,
        missing_gold_products,
        open_product_search,
        prewarm_memory,
        resolve_sources,
    )

    console = console or _stderr
    sel = cfg.bench
    bench = load_benchmark(sel.path)
    tasks = [t for t in bench.tasks if sel.split is None or t.split == sel.split][: sel.limit]
    if not tasks:
        raise DataError(f"bench: no tasks selected from {sel.path} (split={sel.split}, limit={sel.limit})")
    remote = sources = None
    if cfg.tools != "local":
        from shopping_companion.serve.remote import connect

        with console.status(f"connecting to the tool service ({cfg.tools})"):
            remote = connect(
                cfg.tools,
                cfg.service,
                benchmark_dir=sel.path,
                reward_spec=cfg.rubric,
                tasks_sha256=benchmark_tasks_sha256(bench.tasks),
                judge=cfg.judge,
            )
        search = remote.products
        lookup = search.lookup
        catalog = f"of the service at {remote.url}"
    else:
        sources = resolve_sources(cfg.data.data_dir, console=console)
        with phase("evaluation: BM25 index"):
            search = open_product_search(index_dir=cfg.data.index_dir, console=console, sources=sources)
        lookup = product_lookup(search)
        catalog = str(sources.catalog_path)
    missing = missing_gold_products(tasks, lookup)
    if missing:
        detail = "; ".join(f"{tid}: {', '.join(ids)}" for tid, ids in list(missing.items())[:10])
        more = f"; … {len(missing) - 10} more task(s)" if len(missing) > 10 else ""
        if not sel.skip_missing_gold:
            raise DataError(
                f"{len(missing)} task(s) of {sel.path} have gold products that are not in the catalog "
                f"{catalog} ({detail}{more}), so they cannot be scored correctly; use the catalog the "
                "benchmark was built from, or set bench.skip_missing_gold (--skip-missing-gold) to leave them out"
            )
        console.print(
            f"[yellow]warning:[/] skipping {len(missing)} task(s) whose gold products are not in the "
            f"catalog ({escape(detail)}{more})"
        )
        tasks = [t for t in tasks if t.task_id not in missing]
        if not tasks:
            raise DataError("bench: no task left after skip_missing_gold")
    if remote is not None:
        return Resources(None, search, lookup, bench, tasks, None, missing, remote)
    embedder = make_embedder()
    if embed:
        with phase("evaluation: memory embeddings (MiniLM, cached)"):
            prewarm_memory(tasks, bench.sessions, embedder, console)
    return Resources(sources, search, lookup, bench, tasks, embedder, missing)


def run_identity(cfg: EpisodeConfig, policy_name: str, rubric: Any, tasks_sha256: str, **extra: Any) -> dict[str, Any]:
    """The run identity stored beside the results (``results.identity.json``): ``config_sha256`` is
    the hash (:func:`~shopping_companion.config.config_hash`) of everything else in it — the
    result-changing config (:meth:`EvalConfig.identity`), the policy's name, the benchmark's tasks,
    the rubric as resolved (members and weights, so a changed weight in a rubric file counts), what
    the reward spec's uncertain items earn (``uncertain``), the rule judge's (also behind a
    cascade) and memory index's versions, and the JSON-able ``extra`` entries (``rescored_from``:
    the run whose trajectories a rescored run re-judged)."""
    from shopping_companion.config import config_hash
    from shopping_companion.judges.rule import RULE_JUDGE_VERSION
    from shopping_companion.memory.store import MEMORY_INDEX_VERSION

    body = {
        "config": cfg.identity(),
        "policy": policy_name,
        "benchmark_tasks_sha256": tasks_sha256,
        "rubric": rubric.describe() if hasattr(rubric, "describe") else str(rubric),
        "uncertain": load_reward_spec(cfg.rubric).uncertain,
        "memory_index_version": MEMORY_INDEX_VERSION,
        "rule_judge_version": RULE_JUDGE_VERSION if cfg.judge.kind == "rule" or cfg.judge.cascade else None,
        **extra,
    }
    return {"config_sha256": config_hash(body), **body}


def build_scoring(cfg: EpisodeConfig, res: Resources, run_dir: Path) -> tuple[Any, str, Any]:
    """``(judge, judge description, rubric)`` of ``cfg`` over the loaded ``res``: the judge of
    ``cfg.judge`` (its cache in ``run_dir/judge_cache.sqlite``; the uncertain items earn what
    ``cfg.rubric``'s spec says) and the rubric of ``cfg.rubric``; with a tool service, the
    service's. Raises what :func:`build_judge` / :func:`build_rubric` raise (ConfigError)."""
    if res.remote is not None:
        return res.remote.judge, res.remote.describe(), res.remote.rubric
    uncertain = load_reward_spec(cfg.rubric).uncertain
    judge, judge_desc = build_judge(
        cfg.judge,
        res.lookup,
        res.benchmark.sessions,
        res.embedder,
        uncertain,
        cache_path=Path(run_dir) / "judge_cache.sqlite",
    )
    return judge, judge_desc, build_rubric(cfg.rubric, res.lookup)


@dataclass
class EpisodeKit:
    """Everything the episodes of one run share, built from an :class:`EpisodeConfig` by
    :func:`build_kit`: the ``resources``, the ``policy`` backend, the ``judge`` (and its
    ``judge_desc`` for reports), the ``rubric``, the runner's ``settings`` and the run ``identity``."""

    resources: Resources
    policy: Any
    judge: Any
    judge_desc: str
    rubric: Any
    settings: Any
    identity: dict[str, Any]

    def memory(self) -> Callable[[Any], Any]:
        """``task -> MemoryStore`` over the task's user history (with a tool service: ``task ->
        RemoteMemory``, the service's store of that task)."""
        from shopping_companion.assembly.data import memory_factory

        if self.resources.remote is not None:
            return self.resources.remote.memory_factory()
        return memory_factory(self.resources.benchmark.sessions, self.resources.embedder)


def build_kit(cfg: EpisodeConfig, run_dir: Path, console: Console | None = None) -> EpisodeKit:
    """Build what ``cfg``'s episodes need, in the order that fails fastest: ping an LLM judge, load
    the resources (:func:`build_resources`), build the policy, make ``run_dir`` (the LLM judge's
    cache lives there), the judge, the rubric, the runner settings and the run identity. Used by
    :func:`run_benchmark` and ``shopcomp sft collect``. Raises what the builders raise.

    With ``cfg.tools`` ``serve:URL`` the judge and the rubric are the service's
    (:class:`~shopping_companion.serve.remote.RemoteJudge`, :class:`~shopping_companion.serve.remote.RemoteRubric`),
    checked to be ``cfg.judge`` and ``cfg.rubric``; the run identity is the one a local run has."""
    from shopping_companion.benchmark.evaluate import EvalSettings

    console = console or _stderr
    build_rubric(cfg.rubric)  # a bad rubric file or plug-in is refused before anything slow loads
    check_simulator(cfg)
    if cfg.tools == "local":
        ping_judge(cfg.judge)  # a service pings its own judge
    res = build_resources(cfg, console)
    catalog_path = None
    if cfg.backend.kind == "reference":  # the reference policy reads the catalog's vocabulary here
        if res.sources is None:
            from shopping_companion.assembly.data import resolve_sources

            res.sources = resolve_sources(cfg.data.data_dir, console=console)
        catalog_path = res.sources.catalog_path
    with phase(f"evaluation: policy ({cfg.backend.kind})"):
        policy = build_backend(cfg.backend, catalog_path, console)
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    judge, judge_desc, rubric = build_scoring(cfg, res, run_dir)
    settings = EvalSettings(
        trials=cfg.trials, sampling=build_sampling(cfg), env=build_env_config(cfg), seed=cfg.seed, reward_fn=rubric
    )
    identity = run_identity(cfg, policy.name, rubric, benchmark_tasks_sha256(res.benchmark.tasks))
    return EpisodeKit(res, policy, judge, judge_desc, rubric, settings, identity)
