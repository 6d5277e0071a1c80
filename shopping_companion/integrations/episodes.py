"""What every adapter of :mod:`shopping_companion.integrations` stands on: a benchmark loaded the way
``shopcomp eval`` loads it, and its episodes built the way the eval builds them.

:func:`load_source` turns the eval's own settings (benchmark directory, reward spec, judge, seed,
environment limits, data paths) into an :class:`EpisodeSource` through the eval's builders
(:func:`~shopping_companion.benchmark.kit.build_resources`,
:func:`~shopping_companion.benchmark.kit.build_scoring`, :class:`~shopping_companion.benchmark.run_config.EvalConfig`
validation); its episodes come from :func:`~shopping_companion.benchmark.evaluate.prepare_episode`
(the adapter drives the turns) or :func:`~shopping_companion.benchmark.evaluate.arun_episode` (the
eval's own loop over a chat backend). So a task played through an adapter sees the same tools,
limits, prompts, user simulator, judge and rubric as in ``shopcomp eval``, and
:meth:`EpisodeSource.reward_items` reads the rubric's members (R_z, R_tool, R_fmt for the paper's
spec) off the stage results, each with its weight. :func:`shared_source` keeps one source per
distinct setting in the process (environments that are built once per episode use it).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from pydantic import ValidationError

from shopping_companion.benchmark.evaluate import EvalSettings, Strategy, arun_episode, prepare_episode
from shopping_companion.benchmark.kit import (
    Resources,
    build_env_config,
    build_resources,
    build_sampling,
    build_scoring,
    check_simulator,
)
from shopping_companion.benchmark.run_config import EpisodeConfig, EvalConfig
from shopping_companion.config import validation_message
from shopping_companion.envs.env import ShoppingCompanionEnv
from shopping_companion.errors import ConfigError
from shopping_companion.llm.base import Sampling
from shopping_companion.paths import cache_dir
from shopping_companion.types import EpisodeResult, Task

__all__ = ["EpisodeSource", "load_source", "shared_source", "source_from_config", "stage_key"]


def stage_key(stage: int, key: str) -> str:
    """The name a per-stage value is logged under, as in the eval's report: ``stage1.R_z``."""
    return f"stage{stage}.{key}"


@dataclass
class EpisodeSource:
    """A loaded benchmark and what its episodes share (:func:`load_source`): the eval ``config``
    (an :class:`~shopping_companion.benchmark.run_config.EvalConfig`, or the Inspect task's),
    the ``resources`` (tasks, product index, session pool, embedder), the ``judge``, the
    ``rubric`` (the reward spec's :class:`~shopping_companion.rewards.rubric.Rubric`) and the runner
    ``settings`` (sampling, environment limits, seed, reward function)."""

    config: EpisodeConfig
    resources: Resources
    judge: Any
    rubric: Any
    settings: EvalSettings
    memory: Callable[[Task], Any]

    @property
    def tasks(self) -> list[Task]:
        """The selected tasks, in the benchmark's order."""
        return list(self.resources.tasks)

    def task(self, task_id: str) -> Task:
        """The selected task ``task_id``; :class:`ConfigError` naming the benchmark when it has none."""
        for t in self.resources.tasks:
            if t.task_id == task_id:
                return t
        ids = [t.task_id for t in self.resources.tasks]
        raise ConfigError(
            f"task_id: {task_id!r} is not a selected task of {self.config.bench.path} ({len(ids)} selected"
            + (f", e.g. {ids[0]!r}" if ids else "")
            + ")"
        )

    def new_episode(
        self, task_id: str, strategy: str | Strategy, trial: int = 0, hold_handover: bool = False
    ) -> tuple[ShoppingCompanionEnv, Sampling | None, int]:
        """``(env, sampling, seed)`` of one episode, reset, exactly as ``shopcomp eval`` starts it
        (:func:`~shopping_companion.benchmark.evaluate.prepare_episode`, whose ``hold_handover``
        leaves the user simulator's step between the stages to the caller)."""
        task = self.task(task_id)
        return prepare_episode(
            task,
            self.resources.search,
            self.memory(task),
            self.judge,
            self.settings,
            trial,
            strategy,
            hold_handover=hold_handover,
        )

    async def run(self, task_id: str, strategy: str | Strategy, backend: Any, trial: int = 0) -> EpisodeResult:
        """One whole episode through the eval's own loop
        (:func:`~shopping_companion.benchmark.evaluate.arun_episode`) with ``backend`` as the policy."""
        task = self.task(task_id)
        return await arun_episode(
            task, backend, self.resources.search, self.memory(task), self.judge, self.settings, trial, strategy
        )

    def members(self) -> list[tuple[str, float]]:
        """The rubric's members as ``(key, weight)`` in rubric order (``R_z``, ``R_tool``, ``R_fmt``
        with weight 1.0 each for the paper's Eq. 12)."""
        return [(m["key"], float(m["weight"])) for m in self.rubric.describe()["rewards"]]

    def reward_items(self, result: EpisodeResult) -> dict[str, tuple[float, float]]:
        """``name -> (value, weight)`` for every rubric member of every scored stage of ``result``,
        named :func:`stage_key` ``(stage, key)``; so the weighted sum over the items is the sum of
        the stages' totals (Eq. 12 per stage). A stage that was not scored (its judge failed) has
        no item."""
        out: dict[str, tuple[float, float]] = {}
        for st in result.stages:
            comps = st.reward.components
            if comps.get("judge_failed", 0.0) > 0:
                continue
            for key, weight in self.members():
                if key in comps:
                    out[stage_key(st.trajectory.stage, key)] = (float(comps[key]), weight)
        return out


def load_source(
    bench: str | Path,
    *,
    reward_config: str = "paper",
    judge: Mapping[str, Any] | None = None,
    split: str | None = None,
    limit: int | None = None,
    seed: int = 0,
    simulator: str = "scripted",
    env: Mapping[str, Any] | None = None,
    sampling: Mapping[str, Any] | None = None,
    data_dir: str | Path | None = None,
    index_dir: str | Path | None = None,
    run_dir: str | Path | None = None,
    console: Any = None,
) -> EpisodeSource:
    """Load ``bench`` (a benchmark directory of ``shopcomp synth`` / ``import-tasks``) with the
    settings ``shopcomp eval`` takes under the same names: ``reward_config`` (``--reward-config``:
    ``paper``, ``outcome_only``, a rubric or reward-spec YAML, ``module:attr``), ``judge`` (the
    ``judge`` group), ``split`` / ``limit``, ``seed``, ``simulator``, ``env`` (the ``env`` group:
    turn and size limits), ``sampling`` (``backend.sampling``), ``data_dir`` / ``index_dir``.
    ``run_dir`` holds an LLM judge's verdict cache (default: the cache directory's
    ``integrations/``). Raises :class:`ConfigError` naming the field for a bad setting, and what
    loading the data raises (:class:`~shopping_companion.errors.DataError`)."""
    raw: dict[str, Any] = {
        "bench": {"path": str(bench), "split": split, "limit": limit},
        "output": {"name": "integrations", "runs_dir": str(Path(run_dir).parent) if run_dir else str(cache_dir())},
        "rubric": reward_config,
        "seed": seed,
        "simulator": simulator,
        "env": dict(env or {}),
        "backend": {"sampling": dict(sampling or {})},
        "data": {"data_dir": _path(data_dir), "index_dir": _path(index_dir)},
    }
    if judge is not None:
        raw["judge"] = dict(judge)
    try:
        cfg = EvalConfig.model_validate(raw)
    except ValidationError as e:
        raise ConfigError(validation_message(EvalConfig, e, "shopping_companion.integrations")) from None
    return source_from_config(cfg, Path(run_dir) if run_dir else cfg.output.run_dir, build_sampling(cfg), console)


def source_from_config(
    cfg: EpisodeConfig, work_dir: Path, sampling: Sampling | None, console: Any = None
) -> EpisodeSource:
    """The :class:`EpisodeSource` of a validated ``cfg`` (:func:`load_source`'s, and the Inspect
    task's), loaded in the order that fails fastest: the reward spec, the user simulator, an LLM
    judge's endpoint, then the data (:func:`~shopping_companion.benchmark.kit.build_resources`) and
    the judge and rubric (:func:`~shopping_companion.benchmark.kit.build_scoring`; an LLM judge's
    cache in ``work_dir``). ``sampling``: the runner's (its ``seed`` is the base of the
    per-episode seeds; None sends none). Raises :class:`ConfigError` / what loading raises."""
    from shopping_companion.assembly.data import memory_factory
    from shopping_companion.assembly.judging import ping_judge
    from shopping_companion.assembly.reward_spec import build_rubric

    build_rubric(cfg.rubric)
    check_simulator(cfg)
    ping_judge(cfg.judge)
    res = build_resources(cfg, console)
    work_dir.mkdir(parents=True, exist_ok=True)
    judge, _desc, rubric = build_scoring(cfg, res, work_dir)
    settings = EvalSettings(trials=1, sampling=sampling, env=build_env_config(cfg), seed=cfg.seed, reward_fn=rubric)
    return EpisodeSource(cfg, res, judge, rubric, settings, memory_factory(res.benchmark.sessions, res.embedder))


def _path(p: str | Path | None) -> str | None:
    return None if p is None else str(p)


_SOURCES: dict[str, EpisodeSource] = {}
_LOCK = threading.Lock()


def shared_source(**settings: Any) -> EpisodeSource:
    """:func:`load_source` ``(**settings)``, loaded once per distinct ``settings`` in this process
    (an environment built per episode, as skyrl-gym builds them, shares one index and judge)."""
    key = json.dumps(settings, sort_keys=True, default=str)
    with _LOCK:
        if key not in _SOURCES:
            _SOURCES[key] = load_source(**settings)
        return _SOURCES[key]
