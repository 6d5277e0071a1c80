"""The evaluation run: an :class:`~shopping_companion.benchmark.run_config.EvalConfig` in, a
results directory out (docs/architecture.md, the data flow of one run).

:func:`run_benchmark` builds the run's kit (:func:`~shopping_companion.benchmark.kit.build_kit`:
the builders and the run identity), writes ``config.yaml``, runs the episodes
(:func:`~shopping_companion.benchmark.evaluate.run_evaluation`, which knows nothing of configs;
on Ray episode workers with ``cfg.ray``), then classifies failures and writes ``report.md``,
``summary.json``, the parquet tables and ``taxonomy.jsonl``.

Nothing here parses command lines or prints errors: problems are raised as
:class:`~shopping_companion.errors.ShopCompError` subclasses (the CLI prints them once). Progress
and notes go to the ``console`` passed in (a ``rich`` console; ``None``: stderr).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from shopping_companion.assembly.endpoints import scrub_url
from shopping_companion.benchmark.kit import build_kit
from shopping_companion.benchmark.run_config import EvalConfig
from shopping_companion.console import console as _stderr
from shopping_companion.errors import CircuitOpenError, ConfigError
from shopping_companion.phases import phase

__all__ = [
    "REFERENCE_NOTE",
    "RunOutcome",
    "attribute_failures",
    "record_run_config",
    "run_benchmark",
    "write_run_report",
]

REFERENCE_NOTE = (
    "Policy: the scripted reference policy, a rule-based baseline and smoke test (not an LLM). "
    "Its numbers show the pipeline works; they are not a model result."
)


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
    from shopping_companion.runs import scan_jsonl

    cached: dict[tuple, dict] = {}
    for d in scan_jsonl(path, json.loads).records:  # unreadable lines are skipped
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


def _refuse_rescored(results_path: Path, identity: dict[str, Any]) -> None:
    """Raise :class:`ConfigError` when ``results_path`` holds a run written by ``shopcomp rescore``
    (its identity names ``rescored_from``) and ``identity`` is not such a run: evaluating there
    would move the re-scored results aside (``resume.archive_stale``) or refuse them later."""
    from shopping_companion.runs import identity_path, read_json

    stored = read_json(identity_path(results_path))
    if isinstance(stored, dict) and stored.get("rescored_from") and not identity.get("rescored_from"):
        raise ConfigError(
            f"{results_path.parent}: holds a run re-scored by `shopcomp rescore` (from "
            f"{stored['rescored_from']}); `shopcomp eval` does not run a policy into it: evaluate under "
            "another output name (output.name / --name), or rerun `shopcomp rescore` to resume it"
        )


def record_run_config(cfg: EvalConfig, identity: dict[str, Any], how_to_resume: str) -> None:
    """Write ``config.yaml`` into ``cfg.output.run_dir``: the resolved ``cfg`` under a header naming
    the run and its ``config_sha256`` (from ``identity``), then ``how_to_resume`` (the header's rest).
    A foreign results file there is refused first (:class:`~shopping_companion.errors.RunIdentityError`,
    unless ``cfg.resume.force``), before config.yaml, the record of what ran there, is replaced."""
    from shopping_companion.config import dump_yaml
    from shopping_companion.runs import check_identity

    run_dir = cfg.output.run_dir
    check_identity(run_dir / "results.jsonl", identity, cfg.resume.force)
    name, sha = cfg.output.name, identity["config_sha256"]
    dump_yaml(
        cfg,
        run_dir / "config.yaml",
        header=f"The resolved configuration of run {name} (config_sha256 {sha}){how_to_resume}",
    )


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
    from shopping_companion.benchmark.report import scan_results
    from shopping_companion.runs import archive_stale

    console = console or _stderr
    if cfg.ray is not None and _episodes is None:  # connect, launch the workers, run here, stop them
        with _ray_episodes(cfg, console) as episodes:
            return run_benchmark(cfg, console, progress, _episodes=episodes)
    strats = parse_strategies(",".join(cfg.strategies))
    run_dir = cfg.output.run_dir
    kit = build_kit(cfg, run_dir, console)
    res, policy, judge, settings, identity = kit.resources, kit.policy, kit.judge, kit.settings, kit.identity
    results_path = run_dir / "results.jsonl"
    _refuse_rescored(results_path, identity)
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
    record_run_config(cfg, identity, f".\nRerun or resume it with: shopcomp eval --config {run_dir / 'config.yaml'}")
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
                **cfg.resume.evaluation_options(),
                identity=identity,
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
    summary = write_run_report(cfg, kit, policy, strats, results, results_path, wall, console)
    return RunOutcome(summary, run_dir, results_path, wall)


def write_run_report(
    cfg: EvalConfig,
    kit: Any,
    policy: Any,
    strats: list,
    results: list,
    results_path: Path,
    wall: float,
    console: Console | None = None,
    **meta_extra: Any,
) -> dict[str, Any]:
    """Write the report files of a run beside ``results_path`` from its final ``results``:
    ``report.md``, ``summary.json`` (``meta_extra`` added to its ``meta``), the parquet tables and
    ``taxonomy.jsonl`` (with the LLM attribution when ``cfg.attribution.model``). ``kit``: the
    run's :class:`~shopping_companion.benchmark.kit.EpisodeKit` (or any object with its
    ``resources``, ``judge_desc`` and ``identity``); ``policy``: has the policy's ``name``.
    Unreadable lines and results the run did not request are noted on ``console``. Returns the
    report's summary."""
    from shopping_companion.assembly.data import write_json
    from shopping_companion.benchmark.report import left_out_results, scan_results, write_parquet, write_report
    from shopping_companion.benchmark.taxonomy import classify_failures

    console = console or _stderr
    res, identity, run_dir = kit.resources, kit.identity, results_path.parent
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
        meta.update(meta_extra)
        summary = write_report(
            results, run_dir / "report.md", meta, tasks=tasks_by_id, ks=cfg.pass_k, lookup=res.lookup, taxonomy=items
        )
        write_parquet(results, run_dir, tasks_by_id)
        with open(run_dir / "taxonomy.jsonl", "w", encoding="utf-8") as f:
            for it in items:
                f.write(json.dumps(it.to_dict()) + "\n")
        write_json(run_dir / "summary.json", {"summary": summary, "meta": meta, "eval_wall_s": round(wall, 2)})
    return summary


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
        from shopping_companion.assembly.cluster import connect, worker_runtime_env
        from shopping_companion.benchmark.distributed import RayEpisodeExecutor

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
