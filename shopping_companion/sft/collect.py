"""Rejection sampling for SFT (Shopping Companion §6.1, App. D: "successful trajectories via
GPT-4.1 rejection sampling").

A teacher policy (any :class:`~shopping_companion.llm.base.ChatBackend`: an OpenAI-compatible
endpoint, a local checkpoint or the reference policy) runs ``trials`` episodes per train task
through the evaluation runner (:func:`~shopping_companion.benchmark.evaluate.run_evaluation`), so
collection uses exactly the environment, judge and rewards of evaluation. Every episode is
appended to ``<out>/rollouts.jsonl`` as it finishes; rerunning resumes (finished episodes are
skipped) and a run identity (teacher, judge, sampling, environment) refuses to mix rollouts of a
different configuration into the same directory.

Which stage trajectories are kept is decided afterwards by a :class:`KeepPolicy`, so changing
the rule never needs new rollouts:

``succ`` (default)
    every stage (in ``stages``) of an episode whose stage-2 outcome is a success (Succ, Eq. 5):
    the whole successful trajectory, as in the paper.
``stage``
    each stage trajectory on its own verdict: stage 1 when all gold preferences were identified
    (the stage-1 verdict's ``success``), stage 2 when Succ.
``pref_acc``
    stage 1 when its preference accuracy Acc = m1/F (paper §4) is at least ``min_acc``; stage 2
    when Succ.

Episodes that ended with a backend or judge error and verdicts marked ``failed`` are never kept.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Literal, Sequence

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from shopping_companion.benchmark.evaluate import EvalSettings, describe, run_evaluation
from shopping_companion.benchmark.report import final_results, read_results
from shopping_companion.errors import ConfigError, DataDirError, DataError
from shopping_companion.runs import write_lines_atomic, write_text_atomic
from shopping_companion.types import EpisodeResult, Task, Trajectory, Verdict

__all__ = [
    "collect_with_config",
    "KEEP_RULES",
    "KeepPolicy",
    "KeptStage",
    "select_kept",
    "CollectSummary",
    "collect",
    "read_kept",
    "reselect",
    "ROLLOUTS",
    "KEPT",
    "MANIFEST",
]

KEEP_RULES = ("succ", "stage", "pref_acc")
ROLLOUTS = "rollouts.jsonl"
KEPT = "kept.jsonl"
MANIFEST = "collect.json"


class KeepPolicy(BaseModel):
    """Which judged stage trajectories become SFT data (module docstring).

    ``rule``: ``succ`` | ``stage`` | ``pref_acc``. ``min_acc``: the stage-1 Acc threshold of
    ``pref_acc``, in [0, 1]. ``stages``: the stages to keep, a non-empty subset of {1, 2}.
    """

    model_config = ConfigDict(extra="forbid")
    rule: Literal["succ", "stage", "pref_acc"] = "succ"
    min_acc: float = Field(default=1.0, ge=0.0, le=1.0)
    stages: list[int] = Field(default_factory=lambda: [1, 2])

    @field_validator("stages")
    @classmethod
    def _stages(cls, v: list[int]) -> list[int]:
        if not v or any(s not in (1, 2) for s in v):
            raise ValueError(f"stages: must be a non-empty subset of [1, 2], got {v}")
        return sorted(set(v))

    @classmethod
    def parse(cls, rule: str, min_acc: float = 1.0, stages: str | Sequence[int] = (1, 2)) -> "KeepPolicy":
        """Build from command-line strings; raises :class:`ConfigError` naming the field."""
        if rule not in KEEP_RULES:
            raise ConfigError(f"keep: must be one of {', '.join(KEEP_RULES)}, got {rule!r}")
        if isinstance(stages, str):
            try:
                stages = [int(s) for s in stages.split(",") if s.strip()]
            except ValueError:
                raise ConfigError(f"stages: comma-separated stage numbers from 1,2, got {stages!r}") from None
        if not 0.0 <= float(min_acc) <= 1.0:
            raise ConfigError(f"min_acc: must be in [0, 1], got {min_acc}")
        if not stages or any(s not in (1, 2) for s in stages):
            raise ConfigError(f"stages: must be a non-empty subset of 1,2, got {list(stages)}")
        return cls(rule=rule, min_acc=float(min_acc), stages=list(stages))


class KeptStage(BaseModel):
    """One kept stage trajectory: one line of ``kept.jsonl``.

    ``acc`` is the episode's stage-1 Acc (m1/F, [0, 1]), ``succ`` its Succ; ``reason`` says
    which rule kept it.
    """

    model_config = ConfigDict(extra="forbid")
    task_id: str
    trial: int
    mode: str
    hint: str
    stage: int
    policy: str
    reason: str
    acc: float
    succ: bool
    trajectory: Trajectory
    verdict: Verdict

    @property
    def key(self) -> str:
        """A stable id: ``task_id/trial/mode:hint/s<stage>``."""
        return f"{self.task_id}/t{self.trial}/{self.mode}:{self.hint}/s{self.stage}"


#: The fields a :class:`KeptStage` copies from its episode's :class:`EpisodeResult`.
_EPISODE_FIELDS = {"task_id", "trial", "mode", "hint", "policy", "acc", "succ"}


def _keep_reason(res: EpisodeResult, stage: int, verdict: Verdict, policy: KeepPolicy) -> str | None:
    if policy.rule == "succ":
        return "episode Succ" if res.succ else None
    if stage == 2:
        return "stage-2 Succ" if verdict.success else None
    if policy.rule == "stage":
        return "stage-1 success (all preferences found)" if verdict.success else None
    return f"stage-1 Acc {res.acc:.3f} >= {policy.min_acc}" if res.acc >= policy.min_acc - 1e-12 else None


def select_kept(results: Iterable[EpisodeResult], policy: KeepPolicy | None = None) -> list[KeptStage]:
    """The stage trajectories of ``results`` that ``policy`` keeps, in result order.

    Only the final result of each (task, trial, mode, hint) counts (a resumed run may hold an
    errored attempt before its retry). Errored episodes and failed verdicts are skipped.
    """
    policy = policy or KeepPolicy()
    out: list[KeptStage] = []
    for res in final_results(list(results)):
        if res.error is not None:
            continue
        for sr in res.stages:
            stage = int(sr.trajectory.stage)
            if stage not in policy.stages or sr.verdict.failed:
                continue
            reason = _keep_reason(res, stage, sr.verdict, policy)
            if reason is None:
                continue
            episode = res.model_dump(include=_EPISODE_FIELDS)
            out.append(KeptStage(**episode, stage=stage, reason=reason, trajectory=sr.trajectory, verdict=sr.verdict))
    return out


def read_kept(path: str | Path) -> list[KeptStage]:
    """Read a ``kept.jsonl`` (or a collect directory holding one)."""
    p = Path(path)
    if p.is_dir():
        p = p / KEPT
    if not p.is_file():
        raise DataDirError(f"{p}: no kept trajectories file (run `shopcomp sft collect` first)")
    out = []
    for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(KeptStage.model_validate_json(line))
        except ValidationError as e:
            first = e.errors()[0]
            raise DataError(
                f"{p}:{n}: not a kept stage trajectory ({first['msg']}); re-select it from rollouts.jsonl "
                "with `shopcomp sft export --keep succ` (or stage / pref_acc), or rerun `shopcomp sft collect`"
            ) from None
    return out


@dataclass
class CollectSummary:
    """What :func:`collect` did. ``episodes``: finished episodes in the rollouts file (all runs);
    ``new_episodes``: run by this call; ``wall_s``: this call's runner wall time (s);
    ``episodes_per_s``: ``new_episodes / wall_s`` (0 when nothing ran); ``kept``: kept stage
    trajectories; ``kept_by_stage``: {stage: count}; ``succ_rate``: Succ over scored episodes."""

    out_dir: Path
    episodes: int
    new_episodes: int
    errors: int
    succ_rate: float
    kept: int
    kept_by_stage: dict[int, int]
    wall_s: float
    episodes_per_s: float

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["out_dir"] = str(self.out_dir)
        d["kept_by_stage"] = {str(k): v for k, v in self.kept_by_stage.items()}
        return d


def collect(
    tasks: Sequence[Task],
    teacher: Any,
    products: Any,
    make_memory: Callable[[Task], Any],
    judge: Any,
    out_dir: str | Path,
    settings: EvalSettings | None = None,
    *,
    policy: KeepPolicy | None = None,
    concurrency: int = 1,
    strategies: str | Sequence[str] | None = None,
    identity: dict[str, Any] | None = None,
    progress: bool = True,
    simulator: Any = None,
) -> CollectSummary:
    """Rejection-sample ``settings.trials`` episodes per task with ``teacher`` into ``out_dir``.

    Args:
        tasks: train-split tasks (a test-split task raises :class:`ConfigError`: test tasks must
            never become training data).
        teacher: the policy (ChatBackend); ``settings.sampling`` carries temperature etc.
        products / make_memory / judge: as for :func:`~shopping_companion.benchmark.evaluate.run_evaluation`.
        policy: the keep rule (default ``succ``).
        identity: the run identity (teacher, judge, sampling, ...); ``settings`` are added. A
            rerun with a different identity raises
            :class:`~shopping_companion.benchmark.evaluate.RunIdentityError`; a rerun with other
            tasks (e.g. another ``--limit``) adds to the same collection.

    Writes ``rollouts.jsonl`` (every episode, appended as it finishes; resumable), ``kept.jsonl``
    (the kept stage trajectories of every episode in ``rollouts.jsonl``, rewritten: a rerun on fewer
    tasks never drops data collected before) and ``collect.json`` (identity, keep policy, counts,
    throughput). Returns a :class:`CollectSummary`.
    """
    settings = settings or EvalSettings()
    policy = policy or KeepPolicy()
    tasks = list(tasks)
    if not tasks:
        raise ConfigError("tasks: no train-split task to collect from")
    bad = [t.task_id for t in tasks if t.split != "train"]
    if bad:
        raise ConfigError(f"tasks: SFT data is collected on the train split only; test-split task(s) given: {bad[:5]}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rollouts = out / ROLLOUTS
    ident = dict(identity or {})
    ident.setdefault("teacher", getattr(teacher, "name", type(teacher).__name__))
    ident.setdefault("judge", getattr(judge, "name", type(judge).__name__))
    ident["settings"] = describe(settings)
    ident["strategies"] = strategies if isinstance(strategies, str) or strategies is None else list(strategies)
    before = len(final_results(read_results(rollouts))) if rollouts.exists() else 0
    t0 = time.perf_counter()
    results = run_evaluation(
        tasks,
        teacher,
        products,
        make_memory,
        judge,
        rollouts,
        settings,
        progress,
        concurrency=concurrency,
        strategies=strategies,
        identity=ident,
        simulator=simulator,
    )
    wall = time.perf_counter() - t0
    results = final_results(read_results(rollouts))  # the whole collection, earlier runs' tasks included
    kept = select_kept(results, policy)
    write_lines_atomic(out / KEPT, (k.model_dump_json() for k in kept))
    scored = [r for r in results if r.error is None]
    new = max(0, len(final_results(read_results(rollouts))) - before)
    by_stage: dict[int, int] = {}
    for k in kept:
        by_stage[k.stage] = by_stage.get(k.stage, 0) + 1
    summary = CollectSummary(
        out_dir=out,
        episodes=len(results),
        new_episodes=new,
        errors=len(results) - len(scored),
        succ_rate=(sum(r.succ for r in scored) / len(scored)) if scored else 0.0,
        kept=len(kept),
        kept_by_stage=dict(sorted(by_stage.items())),
        wall_s=round(wall, 3),
        episodes_per_s=round(new / wall, 4) if new and wall > 0 else 0.0,
    )
    manifest = {
        "identity": json.loads(json.dumps(ident, default=str)),
        "keep": policy.model_dump(),
        "tasks": len({r.task_id for r in results}),
        "summary": summary.to_dict(),
    }
    write_text_atomic(out / MANIFEST, json.dumps(manifest, indent=2, sort_keys=True))
    return summary


def reselect(out_dir: str | Path, policy: KeepPolicy, *, write: bool = True) -> list[KeptStage]:
    """Re-apply a keep policy to an existing collect directory's rollouts (no new episodes);
    with ``write`` rewrite its ``kept.jsonl`` (``sft stats`` / ``sft export --keep`` do not: the
    file stays what ``collect.json`` says). Raises FileNotFoundError when there are no rollouts."""
    out = Path(out_dir)
    if not (out / ROLLOUTS).is_file():
        raise FileNotFoundError(f"{out / ROLLOUTS}: no rollouts (run `shopcomp sft collect` first)")
    kept = select_kept(read_results(out / ROLLOUTS), policy)
    if write:
        write_lines_atomic(out / KEPT, (k.model_dump_json() for k in kept))
    return kept


def collect_with_config(cfg: Any, console: Any = None) -> CollectSummary:
    """``shopcomp sft collect``: build the teacher, judge, rubric and resources of ``cfg`` (a
    :class:`~shopping_companion.sft.config.CollectConfig`) with the evaluation's builders
    (:func:`shopping_companion.benchmark.kit.build_kit`), then :func:`collect` into ``cfg.out``.
    ``<out>/config.yaml`` records the resolved config: written before the first episode, and again
    only after the run identity was accepted (a refused resume leaves it as it was).

    Raises what the builders and :func:`collect` raise (:class:`~shopping_companion.errors.ShopCompError`
    subclasses; a refused or locked resume names ``--out``; ``CircuitOpenError`` says the episodes
    so far are kept)."""
    from shopping_companion.benchmark.kit import build_kit
    from shopping_companion.config import dump_yaml
    from shopping_companion.errors import CircuitOpenError, RunIdentityError, RunLockedError

    out = Path(cfg.out)
    kit = build_kit(cfg, out, console)
    header = (
        f"The resolved configuration of the collection in {out} (config_sha256 {kit.identity['config_sha256']}).\n"
        f"Resume it with: shopcomp sft collect --config {out / 'config.yaml'}"
    )
    rollouts = out / ROLLOUTS
    if not rollouts.exists() or rollouts.stat().st_size == 0:  # nothing to protect: record what will run
        dump_yaml(cfg, out / "config.yaml", header=header)
    try:
        summary = collect(
            kit.resources.tasks,
            kit.policy,
            kit.resources.search,
            kit.memory(),
            kit.judge,
            out,
            kit.settings,
            policy=cfg.keep,
            concurrency=cfg.concurrency,
            strategies=",".join(cfg.strategies),
            identity=kit.identity,
        )
    except (RunIdentityError, RunLockedError) as e:  # the runner words its hint for `eval --name`
        raise type(e)(str(e).replace("another --name", "another --out")) from None
    except CircuitOpenError as e:
        dump_yaml(cfg, out / "config.yaml", header=header)
        raise CircuitOpenError(
            f"collection stopped: {e}; the episodes finished so far are kept in {out}, rerun the same command to resume"
        ) from None
    dump_yaml(cfg, out / "config.yaml", header=header)  # the identity was accepted: this config ran here
    return summary
