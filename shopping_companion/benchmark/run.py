"""The layered evaluation runner: an :class:`~shopping_companion.benchmark.run_config.EvalConfig`
in, a results directory out (docs/architecture.md, the data flow of one run).

Layers, each usable on its own:

1. ``build_*`` turn parts of the config into objects: :func:`build_backend` (the policy),
   :func:`check_judge` / :func:`build_judge`, :func:`build_rubric`, :func:`build_env_config`,
   :func:`build_resources` (data sources, BM25 index, benchmark tasks, MiniLM embedder);
2. :func:`run_identity`: what a results file must match to be resumed (the hash of the
   result-changing config, the benchmark's tasks, the rubric as resolved, the judge and memory
   index versions);
3. :func:`run_benchmark`: build, write ``config.yaml``, run the episodes
   (:func:`~shopping_companion.benchmark.evaluate.run_evaluation`, which knows nothing of configs),
   then classify failures and write ``report.md``, ``summary.json``, the parquet tables and
   ``taxonomy.jsonl``.

Nothing here parses command lines or prints errors: problems are raised as
:class:`~shopping_companion.errors.ShopCompError` subclasses (the CLI prints them once). Progress
and notes go to the ``console`` passed in (a ``rich`` console; ``None``: stderr).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from rich.console import Console
from rich.markup import escape

from shopping_companion.benchmark.run_config import BackendConfig, EpisodeConfig, EvalConfig, JudgeConfig
from shopping_companion.errors import CircuitOpenError, ConfigError, DataError
from shopping_companion.phases import phase
from shopping_companion.pipeline import product_lookup

__all__ = [
    "REFERENCE_NOTE",
    "Resources",
    "EpisodeKit",
    "RunOutcome",
    "attribute_failures",
    "benchmark_tasks_sha256",
    "build_backend",
    "build_env_config",
    "build_judge",
    "build_kit",
    "build_resources",
    "build_rubric",
    "build_sampling",
    "check_simulator",
    "check_judge",
    "check_reachable",
    "endpoint_time_options",
    "product_lookup",
    "run_benchmark",
    "run_identity",
]

REFERENCE_NOTE = (
    "Policy: the scripted reference policy, a rule-based baseline and smoke test (not an LLM). "
    "Its numbers show the pipeline works; they are not a model result."
)

_stderr = Console(stderr=True, soft_wrap=True, emoji=False)


# --------------------------------------------------------------------------- builders


def endpoint_time_options(deadline_s: float | None = None, breaker_threshold: int | None = None) -> dict[str, Any]:
    """``deadline_s`` / ``breaker_threshold`` for an OpenAI-compatible client: the values given, else
    ``$SHOPCOMP_DEADLINE_S`` / ``$SHOPCOMP_BREAKER_THRESHOLD``, else omitted (the client's defaults).
    Raises :class:`ConfigError` naming the variable when it is not a number > 0 (an integer >= 1)."""
    from shopping_companion.llm.breaker import ENV_BREAKER_THRESHOLD, positive_int, positive_seconds
    from shopping_companion.llm.openai_backend import ENV_DEADLINE_S

    out: dict[str, Any] = {}
    for key, value, var, conv, check in (
        ("deadline_s", deadline_s, ENV_DEADLINE_S, float, positive_seconds),
        ("breaker_threshold", breaker_threshold, ENV_BREAKER_THRESHOLD, int, positive_int),
    ):
        name = key
        if value is None and os.environ.get(var, "").strip():
            name, raw = var, os.environ[var].strip()
            try:
                value = conv(raw)
            except ValueError:
                raise ConfigError(f"{var}: must be a number, got {raw!r}") from None
        if value is not None:
            out[key] = check(name, value)
    return out


def check_reachable(backend: Any, option: str) -> Any:
    """``backend`` when its endpoint answers (``backend.ping()``); else raise
    :class:`~shopping_companion.errors.BackendError` naming ``option`` at once, instead of minutes
    of per-request retries inside the run."""
    from shopping_companion.errors import BackendError

    try:
        backend.ping()
    except BackendError as e:
        raise BackendError(f"{option}: {e}") from None
    return backend


def build_backend(cfg: BackendConfig, catalog_path: Path | None = None, console: Console | None = None) -> Any:
    """The policy :class:`~shopping_companion.llm.base.ChatBackend` of ``cfg``: the reference policy
    (its attribute vocabulary built from the catalog at ``catalog_path``), an OpenAI-compatible
    client (pinged first; raises ``BackendError`` when unreachable) or a local checkpoint."""
    console = console or _stderr
    if cfg.kind == "reference":
        from shopping_companion.llm.reference import ReferencePolicy, build_attribute_vocabulary
        from shopping_companion.pipeline import load_catalog

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


def check_judge(cfg: JudgeConfig) -> None:
    """Ping an LLM judge's endpoint (raises ``BackendError`` naming ``judge.base_url``) before anything
    slow is loaded; nothing to check for the rule judge."""
    if cfg.kind == "llm":
        from shopping_companion.llm.openai_backend import OpenAIBackend

        with OpenAIBackend(
            cfg.model, base_url=cfg.base_url, api_key_env=cfg.api_key_env, name=f"judge:{cfg.model}"
        ) as probe:
            check_reachable(probe, cfg.base_url_field)


def build_judge(
    cfg: JudgeConfig,
    lookup: Callable,
    sessions: dict | None,
    embedder: Any,
    run_dir: Path,
    uncertain: str = "no_credit",
) -> tuple[Any, str]:
    """``(judge, description)``: the rule judge (with the value matcher's MiniLM fallback over
    ``embedder``; its uncertain items scored as ``uncertain`` says, the reward spec's), or an LLM
    judge whose verdicts are cached in ``run_dir/judge_cache.sqlite`` — behind the rule judge in a
    :class:`~shopping_companion.judges.cascade.CascadeJudge` when ``cfg.cascade``."""
    from shopping_companion.judges.cascade import CascadeJudge
    from shopping_companion.pipeline import make_rule_judge

    rule = make_rule_judge(lookup, sessions, embedder, uncertain)
    if cfg.kind == "rule":
        return rule, f"rule (deterministic, offline; uncertain items: {uncertain})"
    from shopping_companion.benchmark.report import scrub_url
    from shopping_companion.judges.llm import LLMJudge

    times = endpoint_time_options()
    judge = LLMJudge.from_openai(
        cfg.model,
        cfg.base_url,
        api_key_env=cfg.api_key_env,
        lookup=lookup,
        cache_path=Path(run_dir) / "judge_cache.sqlite",
        http_deadline_s=times.get("deadline_s"),
        breaker_threshold=times.get("breaker_threshold"),
    )
    where = f"{cfg.model} at {scrub_url(cfg.base_url) or 'the provider default endpoint'}"
    if cfg.cascade:
        return CascadeJudge(rule, judge), f"rule, uncertain stages to llm: {where}"
    return judge, f"llm: {where}"


def build_rubric(spec: str | None, lookup: Callable | None = None) -> Any:
    """The reward :class:`~shopping_companion.rewards.rubric.Rubric` of ``spec``: a reward spec
    reference (:func:`~shopping_companion.rewards.spec.load_reward_spec`: ``paper``,
    ``outcome_only``, a rubric or reward-spec YAML, ``package.module:attr``), its ``python_path``
    put on ``sys.path`` first; raises :class:`ConfigError` prefixed ``rubric:``."""
    from shopping_companion.rewards.spec import load_reward_spec

    try:
        return load_reward_spec(spec).build_rubric({"lookup": lookup})
    except ConfigError as e:
        raise ConfigError(f"rubric: {e}") from None
    except (FileNotFoundError, ValueError, KeyError, ImportError) as e:  # a plug-in's own failure
        raise ConfigError(f"rubric {spec!r}: {e}") from None


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


def benchmark_tasks_sha256(tasks: list[Any]) -> str:
    """First 16 hex characters of SHA-256 over the tasks' JSON lines (tells benchmarks apart whose
    task ids repeat)."""
    return hashlib.sha256("\n".join(t.model_dump_json() for t in tasks).encode()).hexdigest()[:16]


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
    from shopping_companion.benchmark.synth import load_benchmark, missing_gold_products
    from shopping_companion.pipeline import make_embedder, open_product_search, prewarm_memory, resolve_sources

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


# --------------------------------------------------------------------------- identity


def run_identity(cfg: EpisodeConfig, policy_name: str, rubric: Any, tasks_sha256: str) -> dict[str, Any]:
    """The run identity stored beside the results (``results.identity.json``): ``config_sha256`` is
    the hash (:func:`~shopping_companion.config.config_hash`) of everything else in it — the
    result-changing config (:meth:`EvalConfig.identity`), the policy's name, the benchmark's tasks,
    the rubric as resolved (members and weights, so a changed weight in a rubric file counts), what
    the reward spec's uncertain items earn (``uncertain``), and the rule judge's (also behind a
    cascade) and memory index's versions."""
    from shopping_companion.config import config_hash
    from shopping_companion.judges.rule import RULE_JUDGE_VERSION
    from shopping_companion.memory.store import MEMORY_INDEX_VERSION
    from shopping_companion.rewards.spec import load_reward_spec

    body = {
        "config": cfg.identity(),
        "policy": policy_name,
        "benchmark_tasks_sha256": tasks_sha256,
        "rubric": rubric.describe() if hasattr(rubric, "describe") else str(rubric),
        "uncertain": load_reward_spec(cfg.rubric).uncertain,
        "memory_index_version": MEMORY_INDEX_VERSION,
        "rule_judge_version": RULE_JUDGE_VERSION if cfg.judge.kind == "rule" or cfg.judge.cascade else None,
    }
    return {"config_sha256": config_hash(body), **body}


# --------------------------------------------------------------------------- building a run


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
        from shopping_companion.pipeline import memory_factory

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
        check_judge(cfg.judge)  # a service pings its own judge
    res = build_resources(cfg, console)
    catalog_path = None
    if cfg.backend.kind == "reference":  # the reference policy reads the catalog's vocabulary here
        if res.sources is None:
            from shopping_companion.pipeline import resolve_sources

            res.sources = resolve_sources(cfg.data.data_dir, console=console)
        catalog_path = res.sources.catalog_path
    with phase(f"evaluation: policy ({cfg.backend.kind})"):
        policy = build_backend(cfg.backend, catalog_path, console)
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    if res.remote is not None:
        judge, judge_desc, rubric = res.remote.judge, res.remote.describe(), res.remote.rubric
    else:
        from shopping_companion.rewards.spec import load_reward_spec

        uncertain = load_reward_spec(cfg.rubric).uncertain
        judge, judge_desc = build_judge(
            cfg.judge, res.lookup, res.benchmark.sessions, res.embedder, Path(run_dir), uncertain
        )
        rubric = build_rubric(cfg.rubric, res.lookup)
    settings = EvalSettings(
        trials=cfg.trials, sampling=build_sampling(cfg), env=build_env_config(cfg), seed=cfg.seed, reward_fn=rubric
    )
    identity = run_identity(cfg, policy.name, rubric, benchmark_tasks_sha256(res.benchmark.tasks))
    return EpisodeKit(res, policy, judge, judge_desc, rubric, settings, identity)


# --------------------------------------------------------------------------- the run


@dataclass
class RunOutcome:
    """What :func:`run_benchmark` produced: the report's ``summary`` (``n_scored``, ``n_errors``,
    per-strategy Acc / Succ, ...), the ``run_dir`` and the ``results_path``."""

    summary: dict[str, Any]
    run_dir: Path
    results_path: Path
    wall_s: float

    @property
    def n_errors(self) -> int:
        return int(self.summary.get("n_errors") or 0)


def _attribution_cache(path: Path, model: str) -> dict[tuple, dict]:
    cached: dict[tuple, dict] = {}
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                d = json.loads(line)
            except ValueError:
                continue
            if isinstance(d, dict) and d.get("model") == f"attribution:{model}" and d.get("category"):
                cached[(d.get("task_id"), d.get("trial"), d.get("strategy"))] = d
    return cached


def attribute_failures(
    items: list, results: list, tasks_by_id: dict, run_dir: Path, cfg: EvalConfig, console: Console | None = None
) -> list:
    """LLM attribution of each failure (error taxonomy, paper App. F.2) with ``cfg.attribution``,
    cached in ``run_dir/taxonomy_llm.jsonl`` (a rerun asks only for failures not attributed yet).
    An endpoint that goes down leaves the attribution partial (a warning), never the run."""
    from concurrent.futures import ThreadPoolExecutor

    from shopping_companion.benchmark.metrics import strategy_of
    from shopping_companion.benchmark.taxonomy import llm_attribute
    from shopping_companion.llm.openai_backend import OpenAIBackend

    console = console or _stderr
    att_cfg = cfg.attribution
    cache_path = Path(run_dir) / "taxonomy_llm.jsonl"
    cached = _attribution_cache(cache_path, att_cfg.model)
    by_key = {(r.task_id, r.trial, strategy_of(r)): r for r in results}
    todo = [it for it in items if (it.task_id, it.trial, it.strategy) not in cached]
    if todo:
        backend = OpenAIBackend(
            model=att_cfg.model,
            base_url=att_cfg.base_url,
            api_key_env=att_cfg.api_key_env,
            send_top_k=False,
            name=f"attribution:{att_cfg.model}",
        )

        def work(it):
            return it, llm_attribute(by_key[(it.task_id, it.trial, it.strategy)], backend, tasks_by_id.get(it.task_id))

        try:
            with (
                console.status(f"LLM attribution of {len(todo)} failure(s) with {att_cfg.model}"),
                ThreadPoolExecutor(max(1, min(cfg.concurrency, 16))) as ex,
                open(cache_path, "a", encoding="utf-8") as f,
            ):
                for it, att in ex.map(work, todo):
                    d = {"task_id": it.task_id, "trial": it.trial, "strategy": it.strategy, **att.to_dict()}
                    f.write(json.dumps(d) + "\n")
                    cached[(it.task_id, it.trial, it.strategy)] = d
        except CircuitOpenError as e:  # the results are written; attribution is an extra, left partial
            console.print(
                f"[yellow]warning:[/] LLM attribution stopped, the endpoint is down: {escape(str(e))}; "
                f"{len(cached)} of {len(items)} failures attributed (a rerun asks for the rest)"
            )
    for it in items:
        d = cached.get((it.task_id, it.trial, it.strategy))
        if d is not None:
            it.llm = {k: v for k, v in d.items() if k not in ("task_id", "trial", "strategy")}
    return items


def _results_file_meta(results_path: Path, results: list, scan: Any, left_out: dict, skipped: dict) -> dict:
    from shopping_companion.benchmark.evaluate import errors_log_path
    from shopping_companion.benchmark.report import errors_by_kind

    log = errors_log_path(results_path)
    return {
        "path": str(results_path),
        "lines": len(scan.results) + len(scan.unreadable),
        "unreadable_lines": len(scan.unreadable),
        "unreadable_line_numbers": [n for n, _ in scan.unreadable[:50]],
        "left_out": left_out,
        "errors_by_kind": errors_by_kind(results),
        "errors_log": str(log) if log.exists() else None,
        "skipped_missing_gold": sorted(skipped) if skipped else [],
    }


def _meta(
    cfg: EvalConfig,
    policy: Any,
    judge_desc: str,
    strats: list,
    tasks: list,
    bench: Any,
    results_file: dict,
    identity: dict,
) -> dict[str, Any]:
    from shopping_companion.benchmark.evaluate import derive_seed
    from shopping_companion.benchmark.report import scrub_url

    b, seed = cfg.backend, cfg.seed
    example = tasks[0].task_id
    note = cfg.output.baseline_note or (REFERENCE_NOTE if b.kind == "reference" else None)
    config = cfg.model_dump(mode="json")
    for part in (config["backend"], config["judge"], config["attribution"]):
        part["base_url"] = scrub_url(part.get("base_url"))
    return {
        "run_name": cfg.output.name,
        "policy": policy.name,
        "model": b.model,
        "endpoint": scrub_url(b.base_url) if b.kind == "openai" else None,
        "model_path": str(b.model_path) if b.kind == "local" and b.model_path else None,
        "adapter": str(b.adapter) if b.kind == "local" and b.adapter else None,
        # the content hash of the weights a local policy generated with (the checkpoint it names)
        "weights_sha256": getattr(policy, "weights_sha256", None) if b.kind == "local" else None,
        "benchmark": str(cfg.bench.path),
        "judge": judge_desc,
        "simulator": f"{cfg.simulator} (seed {seed})",
        "strategies": ", ".join(s.name for s in strats),
        "trials": cfg.trials,
        "seeds": (
            f"base {seed}; episode seed = derive_seed({seed}, task_id, trial) "
            f"(e.g. {example} trial 0 → {derive_seed(seed, example, 0)})"
            + (
                f"; sampling seed = derive_seed({seed}, task_id, trial)"
                if b.sampling.send_seed
                else "; no sampling seed"
            )
        ),
        "baseline_note": note,
        "results_file": results_file,
        "config": {
            **config,
            "config_sha256": identity["config_sha256"],
            "n_tasks": len(tasks),
            "benchmark_tasks_sha256": identity["benchmark_tasks_sha256"],
            "benchmark_manifest": bench.manifest.get("counts"),
            "generator": bench.manifest.get("generator"),
        },
    }


def run_benchmark(
    cfg: EvalConfig, console: Console | None = None, progress: bool = True, *, _episodes: Any = None
) -> RunOutcome:
    """Run the evaluation ``cfg`` describes, resumably, and write its report (module docstring).

    With ``cfg.ray`` set the episodes run on Ray episode workers
    (:mod:`~shopping_companion.benchmark.distributed`): this process connects first (a bad
    address or a missing Ray is a :class:`ConfigError` before anything loads), launches the
    workers, builds its own kit too (the tasks, identity and reports need it), waits for the
    workers and stays the one writer of the results file; the workers are stopped at the end.

    Raises :class:`ConfigError` / :class:`DataError` before anything is run when the config or the
    data is wrong, :class:`~shopping_companion.errors.ServiceError` when an endpoint is unreachable
    or goes down mid-run (``CircuitOpenError``: everything finished is in the results file; rerun to
    resume), :class:`~shopping_companion.errors.RunError` when another process holds the results.
    """
    from shopping_companion.benchmark.evaluate import parse_strategies, run_evaluation
    from shopping_companion.benchmark.report import left_out_results, scan_results, write_parquet, write_report
    from shopping_companion.benchmark.taxonomy import classify_failures
    from shopping_companion.config import dump_yaml
    from shopping_companion.pipeline import write_json
    from shopping_companion.runs import archive_stale, check_identity

    console = console or _stderr
    if cfg.ray is not None and _episodes is None:  # connect, launch the workers, run here, stop them
        with _ray_episodes(cfg, console) as episodes:
            return run_benchmark(cfg, console, progress, _episodes=episodes)
    strats = parse_strategies(",".join(cfg.strategies))
    run_dir = cfg.output.run_dir
    kit = build_kit(cfg, run_dir, console)
    res, policy, judge, settings, identity = kit.resources, kit.policy, kit.judge, kit.settings, kit.identity
    results_path = run_dir / "results.jsonl"
    if cfg.resume.archive_stale:
        moved = archive_stale(results_path, identity)
        config_yaml = run_dir / "config.yaml"
        if moved and config_yaml.is_file():  # the record of what produced the moved results goes with them
            stamp = moved[0].name.rsplit(".stale-", 1)[1]
            moved.append(config_yaml.replace(config_yaml.with_name(f"config.yaml.stale-{stamp}")))
        if moved:
            console.print(
                f"[yellow]note:[/] {escape(str(results_path))} holds results of another run configuration "
                f"(an older release or other settings); moved aside to "
                f"{escape(', '.join(p.name for p in moved))}, starting afresh"
            )
    # refuse a foreign results file before config.yaml (the record of what ran there) is replaced
    check_identity(results_path, identity, cfg.resume.force)
    dump_yaml(
        cfg,
        run_dir / "config.yaml",
        header=(
            f"The resolved configuration of run {cfg.output.name} (config_sha256 {identity['config_sha256']}).\n"
            f"Rerun or resume it with: shopcomp eval --config {run_dir / 'config.yaml'}"
        ),
    )
    executor = _episodes.ready(identity) if _episodes is not None else None
    t0 = time.perf_counter()
    try:
        with phase("evaluation: episodes"):
            results = run_evaluation(
                res.tasks,
                policy,
                res.search,
                kit.memory(),
                judge,
                results_path,
                settings,
                progress,
                concurrency=cfg.concurrency,
                strategies=strats,
                retry_errors=cfg.resume.retry_errors,
                retry_failed=cfg.resume.retry_failed,
                identity=identity,
                force=cfg.resume.force,
                executor=executor,
            )
    except CircuitOpenError as e:
        n_written = len(scan_results(results_path).results)
        raise CircuitOpenError(
            f"the run stopped: the endpoint is considered down ({e}). {n_written} result "
            f"line(s) are in {results_path}; nothing is lost — rerun the same command to "
            "resume once the endpoint is back."
        ) from None
    wall = time.perf_counter() - t0
    scan = scan_results(results_path)
    requested = {(t.task_id, k, s.mode, s.hint) for s in strats for t in res.tasks for k in range(cfg.trials)}
    left_out = left_out_results(scan.results, [t.task_id for t in res.benchmark.tasks], requested)
    if scan.unreadable:
        console.print(
            f"[yellow]warning:[/] {escape(str(results_path))}: {escape(scan.describe_unreadable())} cannot "
            "be read back; left out of every metric (their episodes were run again)"
        )
    for why, text in (
        ("not_in_benchmark", "tasks not in the benchmark"),
        ("not_requested", "tasks, strategies or trials this run did not request"),
    ):
        if left_out[why]["count"]:
            console.print(
                f"[yellow]note:[/] {left_out[why]['count']} result(s) in {escape(str(results_path))} are for "
                f"{text} (e.g. {escape(', '.join(left_out[why]['examples']))}); left out of the metrics"
            )
    with phase("evaluation: report"):
        tasks_by_id = {t.task_id: t for t in res.benchmark.tasks}
        items = classify_failures(results, tasks_by_id, res.lookup)
        if cfg.attribution.model:
            items = attribute_failures(items, results, tasks_by_id, run_dir, cfg, console)
        meta = _meta(
            cfg,
            policy,
            kit.judge_desc,
            strats,
            res.tasks,
            res.benchmark,
            _results_file_meta(results_path, results, scan, left_out, res.skipped),
            identity,
        )
        summary = write_report(
            results, run_dir / "report.md", meta, tasks=tasks_by_id, ks=cfg.pass_k, lookup=res.lookup, taxonomy=items
        )
        write_parquet(results, run_dir)
        with open(run_dir / "taxonomy.jsonl", "w", encoding="utf-8") as f:
            for it in items:
                f.write(json.dumps(it.to_dict()) + "\n")
        write_json(run_dir / "summary.json", {"summary": summary, "meta": meta, "eval_wall_s": round(wall, 2)})
    return RunOutcome(summary, run_dir, results_path, wall)


# --------------------------------------------------------------------------- episodes on Ray (run_benchmark)


class _ray_episodes:
    """``with _ray_episodes(cfg, console) as episodes``: connect to ``cfg.ray.address`` and launch
    the episode workers (they build their kits while this process builds its own); on exit stop
    them and disconnect. ``episodes.ready(identity)`` waits for them and returns the executor."""

    def __init__(self, cfg: EvalConfig, console: Console) -> None:
        self.cfg, self.console = cfg, console
        self.conn: Any = None
        self.executor: Any = None

    def __enter__(self) -> "_ray_episodes":
        from shopping_companion.benchmark.distributed import RayEpisodeExecutor, connect, worker_runtime_env

        ray_cfg = self.cfg.ray
        env = None if ray_cfg.address == "local" else worker_runtime_env(self.cfg)  # ships this checkout
        self.conn = connect(ray_cfg.address, runtime_env=env)
        try:
            self.executor = RayEpisodeExecutor(self.cfg, workers=ray_cfg.workers, num_cpus=ray_cfg.num_cpus)
            self.executor.launch()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def ready(self, identity: dict[str, Any]) -> Any:
        with self.console.status("waiting for the Ray episode workers to build their kits"):
            self.executor.wait_ready(identity)
        self.console.print(f"episodes run on {self.executor.describe()}, Ray cluster {escape(self.cfg.ray.address)}")
        return self.executor

    def __exit__(self, *exc: Any) -> None:
        try:
            if self.executor is not None:
                self.executor.shutdown()
                if self.executor.deaths:
                    self.console.print(
                        f"[yellow]note:[/] {self.executor.deaths} episode attempt(s) were lost with their Ray "
                        "worker (killed, out of memory or node lost) and resubmitted to another worker"
                    )
        finally:
            if self.conn is not None:
                self.conn.close()
