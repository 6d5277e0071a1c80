"""``shopcomp rescore``: the stored trajectories of an evaluation run judged and rewarded again under
another reward spec (rubric, judge, what uncertain items earn), without running the policy again,
into a new run with its own identity (docs/evaluation.md, "Re-scoring a run").

:func:`rescore_run` reads the source run's ``config.yaml`` (the
:class:`~shopping_companion.benchmark.run_config.EvalConfig` that wrote it) and ``results.jsonl``,
sets ``rubric``, the run name and, when given, the judge (a reward spec that names a judge brings
its own; otherwise the source's judge is kept), and hands the episodes to the evaluation runner
(:func:`~shopping_companion.benchmark.evaluate.run_evaluation`) with a :class:`RescoreExecutor` in
place of the policy. So the new run is written as ``shopcomp eval`` writes one: a verified line per
episode as soon as it is re-scored, under the run's lock, with ``results.identity.json`` (the
source's identity with the new rubric and judge, plus ``rescored_from``: the source directory and
its ``config_sha256``) and resumable (rerunning the command re-scores only what is missing); then
the same report files.

Per stored episode (:func:`rescore_result`) every stage trajectory is judged and rewarded by
:func:`~shopping_companion.envs.env.score_episode_stage`, what the environment does when a stage
ends, and Acc / Succ follow by :func:`~shopping_companion.envs.env.episode_scores`; everything
else (trajectories, seeds, simulator feedback, wall time) is the source's. An episode that ended
with a backend or episode error has no complete trajectory to judge: it is copied as it is (still
an error, not scored). One that ended with a judge error is judged again.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from shopping_companion.benchmark.evaluate import EvalSettings, Strategy, derive_seed, error_record
from shopping_companion.benchmark.report import error_kind, final_results, result_key, scan_results
from shopping_companion.benchmark.run import RunOutcome, record_run_config, write_run_report
from shopping_companion.console import console as _stderr
from shopping_companion.envs.env import episode_scores, score_episode_stage
from shopping_companion.errors import ConfigError, DataError
from shopping_companion.types import EpisodeResult, Task

__all__ = ["RescoreExecutor", "rescore_config", "rescore_result", "rescore_run"]


def rescore_result(result: EpisodeResult, task: Task, judge: Any, reward_fn: Any) -> EpisodeResult:
    """``result`` with every stage judged by ``judge`` and rewarded by ``reward_fn`` again (module
    docstring); a result with a backend or episode error is returned unchanged. Raises
    ``CircuitOpenError`` when an LLM judge's endpoint is down."""
    if result.error is not None and error_kind(result) != "judge":
        return result
    stages, pref, error = [], None, None
    for stage in result.stages:
        scored = score_episode_stage(judge, reward_fn, task, stage.trajectory, result.mode)
        stages.append(scored.result)
        pref = scored.preference_verdict or pref
        error = scored.error or error
    acc, succ = episode_scores(result.mode, stages, pref, task)
    return result.model_copy(
        update={"stages": stages, "acc": acc, "succ": succ, "error": error, "preference_verdict": pref}
    )


class RescoreExecutor:
    """An :class:`~shopping_companion.benchmark.evaluate.EpisodeExecutor` that, instead of running an
    episode, re-scores the stored result of its key (:func:`rescore_result`, in a worker thread).
    ``stored``: the source run's final results by ``(task_id, trial, mode, hint)``; ``source``:
    how messages name the source run; ``policy`` and ``seed``: the policy name and base seed of
    the error record (``no stored trajectory: ...``, retried by a rerun like a backend error) that
    a key without a stored result gets."""

    def __init__(
        self,
        stored: dict[tuple[str, int, str, str], EpisodeResult],
        judge: Any,
        reward_fn: Any,
        source: str,
        policy: str = "unknown policy",
        seed: int = 0,
    ):
        self.stored, self.judge, self.reward_fn, self.source = stored, judge, reward_fn, source
        self.policy, self.seed = policy, seed

    async def run(self, strategy: Strategy, task: Task, trial: int) -> EpisodeResult:
        key = (task.task_id, trial, strategy.mode, strategy.hint)
        stored = self.stored.get(key)
        if stored is None:  # an error record a rerun retries (not an episode error: the source may be completed)
            return error_record(
                task,
                trial,
                strategy,
                self.policy,
                derive_seed(self.seed, task.task_id, trial),
                0.0,
                f"no stored trajectory: {self.source} has no result for this episode",
                prefix="",
            )
        return await asyncio.to_thread(rescore_result, stored, task, self.judge, self.reward_fn)


def rescore_config(
    source: Path,
    reward_config: str,
    name: str,
    runs_dir: Path | None = None,
    judge: dict[str, Any] | None = None,
    bench: Path | None = None,
) -> Any:
    """The :class:`EvalConfig` of the rescored run: ``source/config.yaml`` with ``rubric`` =
    ``reward_config``, ``output.name`` = ``name`` and ``output.runs_dir`` = ``runs_dir`` (default:
    the source's parent), the tools local and no Ray. ``judge``: ``judge.*`` keys to set (None
    values ignored); without them the judge is the reward spec's when it names one, else the
    source's. ``bench``: the benchmark directory, instead of the source's ``bench.path`` (which,
    when relative, is relative to the directory ``shopcomp eval`` ran in). Raises
    :class:`DataError` when the source has no ``config.yaml`` or its relative ``bench.path`` is
    no directory from here, and :class:`ConfigError` for a bad value."""
    from shopping_companion.assembly.reward_spec import load_reward_spec
    from shopping_companion.benchmark.run_config import EvalConfig
    from shopping_companion.config import load_config, load_model

    path = source / "config.yaml"
    if not path.is_file():
        raise DataError(f"{source} is not an evaluation run: it has no config.yaml (written by shopcomp eval)")
    data = load_config(path)
    flags = {f"judge.{k}": v for k, v in (judge or {}).items() if v is not None}
    try:
        names_judge = "judge" in load_reward_spec(reward_config).model_fields_set
    except ConfigError as e:
        raise ConfigError(f"--reward-config {reward_config}: {e}") from None
    if not flags and names_judge:
        data.pop("judge", None)  # the spec's judge replaces the source's
    if bench is not None:
        flags["bench.path"] = str(bench)
    else:
        given = (data.get("bench") or {}).get("path") if isinstance(data.get("bench"), dict) else None
        if isinstance(given, str) and not Path(given).expanduser().is_absolute() and not Path(given).is_dir():
            raise DataError(
                f"bench.path {given!r} of {path} is relative to the directory `shopcomp eval` ran in, and from "
                f"here ({Path.cwd()}) it is no directory: run rescore from that directory, or give the "
                "benchmark with --bench DIR"
            )
    flags |= {
        "rubric": reward_config,
        "output.name": name,
        "output.runs_dir": str(runs_dir if runs_dir is not None else source.parent),
        "tools": "local",
    }
    data["ray"] = None
    return load_model(EvalConfig, data, [], flags)


@dataclass
class _Kit:
    """What :func:`write_run_report` reads of a kit: the resources, the judge's description and
    the identity."""

    resources: Any
    judge_desc: str
    identity: dict[str, Any]


@dataclass
class _Policy:
    name: str


def rescore_run(
    source: str | Path,
    reward_config: str,
    name: str,
    *,
    runs_dir: Path | None = None,
    judge: dict[str, Any] | None = None,
    bench: Path | None = None,
    console: Console | None = None,
    progress: bool = True,
) -> RunOutcome:
    """Re-score every stored trajectory of the run directory ``source`` under ``reward_config``
    into ``RUNS_DIR/name`` (module docstring; :func:`rescore_config` for the configuration). Lines
    of the source's ``results.jsonl`` that cannot be read back are named in a note on ``console``
    and their episodes recorded as missing.

    Raises :class:`DataError` when ``source`` is not a run (no ``config.yaml`` or
    ``results.jsonl``), is the target itself, or was run on other tasks than the benchmark's,
    :class:`~shopping_companion.errors.RunIdentityError`
    when the target holds results of another identity, what loading the benchmark and data raises,
    and ``CircuitOpenError`` when an LLM judge's endpoint goes down (rerun to resume)."""
    from shopping_companion.assembly.data import benchmark_tasks_sha256
    from shopping_companion.benchmark.evaluate import parse_strategies, run_evaluation
    from shopping_companion.benchmark.kit import build_resources, build_scoring, run_identity
    from shopping_companion.runs import identity_path, read_json

    console = console or _stderr
    src = Path(source)
    src_results = src / "results.jsonl"
    if not src_results.is_file():
        raise DataError(f"{src} is not an evaluation run: it has no results.jsonl")
    cfg = rescore_config(src, reward_config, name, runs_dir, judge, bench)
    run_dir = cfg.output.run_dir
    if run_dir.resolve() == src.resolve():
        raise DataError(f"--name {name}: that is the source run {src}; a rescored run needs a name of its own")
    scan = scan_results(src_results)
    if scan.unreadable or scan.torn_tail:
        bad = [scan.describe_unreadable()] if scan.unreadable else []
        bad += ["its last line has no newline (an interrupted write?): it counts only if it reads back whole"] * (
            scan.torn_tail
        )
        console.print(
            f"[yellow]note:[/] {escape(str(src_results))}: {escape('; '.join(bad))}; an episode with no readable "
            "line counts as missing below"
        )
    stored = {result_key(r): r for r in final_results(scan.results)}
    src_identity = read_json(identity_path(src_results))
    src_identity = src_identity if isinstance(src_identity, dict) else {}
    policy = _Policy(str(src_identity.get("policy") or next((r.policy for r in stored.values()), "unknown policy")))
    res = build_resources(cfg, console, embed=False)
    tasks_sha = benchmark_tasks_sha256(res.benchmark.tasks)
    ran_on = src_identity.get("benchmark_tasks_sha256")
    if isinstance(ran_on, str) and ran_on != tasks_sha:
        raise DataError(
            f"{cfg.bench.path}: its tasks (sha256 {tasks_sha[:16]}) are not the tasks {src} was run on (sha256 "
            f"{ran_on[:16]}, its results.identity.json); give the benchmark that run used (--bench DIR)"
        )
    created = not run_dir.exists()
    run_dir.mkdir(parents=True, exist_ok=True)
    try:
        judge_obj, judge_desc, rubric = build_scoring(cfg, res, run_dir)
    except BaseException:
        if created and all(p.name.startswith("judge_cache.sqlite") for p in run_dir.iterdir()):
            shutil.rmtree(run_dir, ignore_errors=True)  # a refused spec leaves no empty run behind
        raise
    origin = {"run": str(src.resolve()), "config_sha256": src_identity.get("config_sha256")}
    identity = run_identity(cfg, policy.name, rubric, tasks_sha, rescored_from=origin)
    results_path = run_dir / "results.jsonl"
    record_run_config(
        cfg,
        identity,
        f",\nre-scored from the stored trajectories of {src}. Resume it with:\n"
        f"shopcomp rescore {src} --reward-config {reward_config} --name {name} --runs-dir {cfg.output.runs_dir}",
    )
    strats = parse_strategies(",".join(cfg.strategies))
    requested = {(t.task_id, k, s.mode, s.hint) for s in strats for t in res.tasks for k in range(cfg.trials)}
    missing = len(requested - set(stored))
    if missing:
        console.print(
            f"[yellow]note:[/] {missing} episode(s) the source run requested have no result in "
            f"{escape(str(src_results))}; they are recorded as errors (a rerun retries them once the source has them)"
        )
    t0 = time.perf_counter()
    results = run_evaluation(
        res.tasks,
        policy,  # names the policy of error records only: the executor runs nothing
        res.search,
        lambda task: None,
        judge_obj,
        results_path,
        EvalSettings(trials=cfg.trials, seed=cfg.seed),
        progress,
        concurrency=cfg.concurrency,
        strategies=strats,
        **cfg.resume.evaluation_options(),
        identity=identity,
        executor=RescoreExecutor(stored, judge_obj, rubric, str(src), policy.name, cfg.seed),
    )
    wall = time.perf_counter() - t0
    kit = _Kit(res, judge_desc, identity)
    summary = write_run_report(cfg, kit, policy, strats, results, results_path, wall, console, rescored_from=origin)
    return RunOutcome(summary, run_dir, results_path, wall)
