"""The benchmark as an Inspect task: ``inspect eval shopping_companion/bench`` (docs/integrations.md,
"Inspect AI").

:func:`bench` loads a benchmark directory as ``shopcomp eval`` does (split, limit, the BM25
index, the memory embeddings, the gold-product check) and builds the judge and rubric of the reward
spec, through :func:`~shopping_companion.integrations.episodes.source_from_config` as every adapter. Its dataset has one sample per task and
strategy (id ``<task_id>@<strategy>``, e.g. ``t0001@two_stage:none``; input: the shopping request;
target: the reference product ids; metadata: task id, task type, strategy, mode, hint); its solver
is :func:`~.solvers.shopping_episode`, its scorer :func:`~.scorer.shopping_scorer`. Inspect's
epochs are ``shopcomp eval``'s trials (epoch ``e`` is trial ``e - 1``, with that trial's seeds).

The task's generation config is ``shopcomp eval``'s default sampling (temperature 0.6, top_p 0.95,
top_k 20, max_tokens 4096); Inspect's own options (``--temperature``, ``--max-tokens``, ...)
override it.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

from inspect_ai import Task as InspectTask
from inspect_ai import task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import GenerateConfig
from inspect_ai.solver import TaskState
from inspect_ai.util import registry_info
from inspect_ai._util.error import PrerequisiteError  # the error ``inspect eval`` prints without a traceback
from pydantic import Field, ValidationError

from shopping_companion.benchmark.evaluate import Strategy, parse_strategies
from shopping_companion.benchmark.run_config import BenchmarkSelection, EpisodeConfig
from shopping_companion.config import validation_message
from shopping_companion.errors import ConfigError, ShopCompError
from shopping_companion.integrations.episodes import source_from_config
from shopping_companion.integrations.inspect.scorer import shopping_scorer
from shopping_companion.llm.base import Sampling
from shopping_companion.integrations.inspect.solvers import Episodes, shopping_episode
from shopping_companion.paths import cache_dir
from shopping_companion.types import Task

__all__ = ["TASK_NAME", "BenchConfig", "bench", "bench_samples", "build_task", "strategy_list"]

#: ``shopcomp eval``'s default sampling (BackendSampling), as Inspect's generation config.
DEFAULT_GENERATE = GenerateConfig(temperature=0.6, top_p=0.95, top_k=20, max_tokens=4096)


class BenchConfig(EpisodeConfig):
    """The settings of one :func:`bench` task: the groups of ``shopcomp eval``'s config that apply
    to it (``strategies``, ``seed``, ``judge``, ``simulator``, ``rubric``, ``env``, ``data``) plus
    ``bench`` (which tasks) and ``work_dir`` (the LLM judge's cache, ``judge_cache.sqlite``)."""

    bench: BenchmarkSelection
    work_dir: Path = Field(default_factory=lambda: cache_dir() / "inspect")


def strategy_list(strategies: str | list[str], hint: str | None) -> list[Strategy]:
    """``strategies`` (comma-separated or a list, as ``--strategies``) with ``hint`` applied to the
    ``two_stage`` entries that name no hint (``two_stage`` + ``low`` → ``two_stage:low``).
    Raises :class:`ConfigError` naming the supported strategies."""
    items = [s.strip() for s in strategies.split(",")] if isinstance(strategies, str) else list(strategies)
    if hint is not None:
        allowed = ("none", "low", "high")
        if hint not in allowed:
            raise ConfigError(f"-T hint: must be one of {', '.join(allowed)}, got {hint!r}")
        items = [f"{s}:{hint}" if s == "two_stage" else s for s in items]
    return parse_strategies(items)


def bench_samples(tasks: list[Task], strategies: list[Strategy]) -> list[Sample]:
    """One sample per task and strategy (module docstring), tasks first."""
    return [
        Sample(
            id=f"{t.task_id}@{s.name}",
            input=t.instruction,
            target=list(t.reference_product_ids),
            metadata={
                "task_id": t.task_id,
                "task_type": t.task_type,
                "strategy": s.name,
                "mode": s.mode,
                "hint": s.hint,
            },
        )
        for t in tasks
        for s in strategies
    ]


#: The dotted config keys of :class:`BenchConfig` the task parameters set, for error messages.
_PARAM_OF = {
    "bench.path": "-T bench",
    "bench.split": "-T split",
    "bench.limit": "-T limit",
    "bench.skip_missing_gold": "-T skip_missing_gold",
    "strategies": "-T strategies",
    "seed": "-T seed",
    "simulator": "-T simulator",
    "rubric": "-T reward_config",
    "judge": "-T judge",
    "data.data_dir": "-T data_dir",
    "data.index_dir": "-T index_dir",
    "env.max_turns": "-T max_turns",
    "work_dir": "-T work_dir",
}


class TaskParameterError(ConfigError, PrerequisiteError):
    """A bad task parameter or benchmark: a :class:`ConfigError` that ``inspect eval`` prints as its
    message alone (Inspect prints a traceback for any other exception raised by a task)."""

    def __init__(self, message: str) -> None:
        ConfigError.__init__(self, message)
        self.message = f"shopping_companion/bench: {message}"


def bench(
    bench: str | None = None,
    split: str | None = None,
    limit: int | None = None,
    strategies: str | list[str] = "two_stage:none",
    hint: str | None = None,
    seed: int = 0,
    send_seed: bool = True,
    reward_config: str = "paper",
    judge: str | dict[str, Any] | None = None,
    simulator: str = "scripted",
    data_dir: str | None = None,
    index_dir: str | None = None,
    max_turns: int = 20,
    skip_missing_gold: bool = False,
    work_dir: str | None = None,
    **unknown: Any,
) -> InspectTask:
    """The Shopping Companion benchmark (module docstring). Parameters (``-T name=value``):

    ``bench``: the benchmark directory (``shopcomp synth`` / ``import-tasks``; required);
    ``split`` (``train`` | ``test``), ``limit`` (the first N tasks), ``skip_missing_gold``: which
    tasks, as ``--split`` / ``--limit`` / ``--skip-missing-gold``; ``strategies``: ``oracle``,
    ``one_stage``, ``two_stage[:none|low|high]`` (comma-separated) or ``all``; ``hint``: the hint
    of the ``two_stage`` entries that name none; ``seed``: base of the per-episode seeds;
    ``send_seed``: send the per-episode sampling seed; ``reward_config``: the reward spec
    (``paper``, ``outcome_only``, a YAML file, ``module:attr``); ``judge``: ``rule`` (default), or
    a mapping of the judge settings (``{kind: llm, model: ..., base_url: ...}``; a reward spec
    that names a judge brings its own); ``simulator``: the user simulator; ``data_dir``,
    ``index_dir``: the data and the BM25 index (defaults as ``shopcomp eval``); ``max_turns``:
    assistant turns per stage; ``work_dir``: the LLM judge's cache.

    Raises :class:`TaskParameterError` (a :class:`ConfigError`) naming the parameter and its allowed
    values for an unknown or bad parameter, and with the message of what loading the data raises
    (a missing benchmark directory, say)."""
    unknown.pop("model", None)  # Inspect passes the model to every task that takes keywords
    if unknown:
        names = ", ".join(sorted(unknown))
        raise TaskParameterError(f"unknown task parameter(s) {names}; allowed: {', '.join(_PARAMS)}")
    try:
        if not bench:
            raise ConfigError("-T bench: the benchmark directory is required (-T bench=PATH)")
        fields: dict[str, Any] = {
            "bench": {"path": bench, "split": split, "limit": limit, "skip_missing_gold": skip_missing_gold},
            "strategies": [s.name for s in strategy_list(strategies, hint)],
            "seed": seed,
            "simulator": simulator,
            "rubric": reward_config,
            "data": {"data_dir": data_dir, "index_dir": index_dir},
            "env": {"max_turns": max_turns},
        }
        if judge is not None:
            fields["judge"] = {"kind": judge} if isinstance(judge, str) else judge
        if work_dir is not None:
            fields["work_dir"] = work_dir
        try:
            cfg = BenchConfig.model_validate(fields)
        except ValidationError as e:
            raise ConfigError(validation_message(BenchConfig, e, names=_PARAM_OF)) from None
        return build_task(cfg, send_seed=send_seed)
    except ShopCompError as e:
        raise TaskParameterError(str(e)) from None


#: The task parameters, in order (what an unknown one is told).
_PARAMS = [p for p in inspect.signature(bench).parameters if p != "unknown"]

#: The name ``inspect eval`` knows the task by.
TASK_NAME = "shopping_companion/bench"
# Inspect prefixes a task's name with the installed package it comes from; it does not see the
# package when a ``shopping_companion.egg-info`` of the source tree (which ``pip install -e``
# writes there) shadows the installed metadata, i.e. when the repository root is on sys.path.
# Then the task is registered under its full name as well.
bench = task(bench)
if registry_info(bench).name != TASK_NAME:
    bench = task(name=TASK_NAME)(bench)


def build_task(cfg: BenchConfig, send_seed: bool = True) -> InspectTask:
    """The Inspect task of ``cfg`` (module docstring) over the benchmark and judge that
    :func:`~shopping_companion.integrations.episodes.source_from_config` loads (as every adapter does)."""
    sampling = Sampling(seed=cfg.seed) if send_seed else None  # only its seed is used (Inspect samples)
    episodes = Episodes(source_from_config(cfg, cfg.work_dir, sampling))

    async def cleanup(state: TaskState) -> None:
        episodes.drop(state)

    return InspectTask(
        dataset=MemoryDataset(
            bench_samples(episodes.source.tasks, parse_strategies(cfg.strategies)), name=cfg.bench.path.name
        ),
        solver=shopping_episode(episodes),
        scorer=shopping_scorer(episodes),
        config=DEFAULT_GENERATE,
        cleanup=cleanup,
    )
