"""The benchmark as a PrimeIntellect verifiers environment (verifiers 0.4.0, its ``verifiers.v1``
API; docs/integrations.md, verifiers).

verifiers 0.4.0 builds an environment from a *taskset* (tasks and their rewards), a *harness* (the
program that plays a task against the model behind verifiers' interception endpoint, which
records every model call on the rollout's trace) and an ``Env`` (the seats). This module gives
all three, exported by the installable package ``environments/shopping_companion_bench/`` as
taskset id ``shopping-companion-bench``:

:class:`ShoppingTaskset` (config :class:`ShoppingTasksetConfig`, ``--env.taskset.*``)
    One :class:`ShoppingTask` per (benchmark task, strategy), loaded through
    :func:`~shopping_companion.integrations.episodes.load_source` with the eval's settings:
    ``bench``, ``strategies`` (``two_stage:none`` ... ``oracle``, as ``shopcomp eval --strategies``),
    ``reward_config``, ``judge``, ``seed``, ``env``, ``split``, ``limit``, ``data_dir``, ``index_dir``.
:class:`ShoppingHarness` (id ``shopping-companion-bench``, the taskset's default harness)
    Plays the episode in process with the eval's own loop
    (:meth:`~shopping_companion.integrations.episodes.EpisodeSource.run`: our
    :class:`~shopping_companion.llm.openai_backend.OpenAIBackend` pointed at verifiers' endpoint):
    the four tools with their schemas and limits, the two-stage protocol with the user simulator
    between the stages, the judge and the rubric. Every model call goes through verifiers, so the
    trace holds both stages' conversations. The episode's outcome is kept on the trace
    (``trace.info["shopping_companion"]``: acc, succ, error, and per stage its termination,
    verdict and reward breakdown).
:class:`ShoppingTask` rewards and metrics
    The reward spec as verifiers rewards: every rubric member of every scored stage, named
    ``stage<s>.<key>`` (``stage1.R_z``, ``stage2.R_tool``, ...) with the member's weight, so
    verifiers logs each component and its weighted sum (the trace's reward) is the sum of the
    stage totals (Eq. 12 per stage). Metrics ``acc`` and ``succ`` (the paper's Acc, Succ) and
    ``scored`` (0.0 when a judge failed: such an episode has no reward items and must not be
    trained on as a 0).
:class:`ShoppingEnv`
    verifiers' single-agent environment with the agent's runtime set to ``subprocess`` (the
    harness runs no program, so no sandbox is needed).

:func:`load_environment` builds the environment from Python with the same settings.
"""

from __future__ import annotations

import asyncio
from typing import Any

import verifiers.v1 as vf
from pydantic import Field, field_validator
from verifiers.v1.runtimes import ProgramResult
from verifiers.v1.runtimes.subprocess import SubprocessConfig
from verifiers.v1.utils.loaders import load_environment as vf_load_environment

from shopping_companion.errors import ConfigError
from shopping_companion.integrations.episodes import shared_source
from shopping_companion.types import EpisodeResult

__all__ = [
    "TASKSET_ID",
    "ShoppingData",
    "ShoppingTask",
    "ShoppingTasksetConfig",
    "ShoppingTaskset",
    "ShoppingHarnessConfig",
    "ShoppingHarness",
    "ShoppingEnvConfig",
    "ShoppingEnv",
    "load_environment",
    "outcome",
]

#: The taskset (and harness) id of the package in environments/shopping_companion_bench/.
TASKSET_ID = "shopping-companion-bench"
#: The module verifiers imports for :data:`TASKSET_ID`.
PACKAGE = "shopping_companion_bench"
#: The key of the episode outcome in ``trace.info``.
INFO_KEY = "shopping_companion"


class ShoppingData(vf.TaskData):
    """One rollout's data: the benchmark ``task_id``, the ``strategy`` (``mode[:hint]``) and the
    ``source`` settings the episode is built from (:func:`~shopping_companion.integrations.episodes.load_source`
    keyword arguments), so a trace says exactly what was played."""

    task_id: str
    strategy: str = "two_stage:none"
    source: dict[str, Any] = Field(default_factory=dict)


def outcome(result: EpisodeResult, source: Any) -> dict[str, Any]:
    """What the harness keeps on the trace of an episode: ``acc``, ``succ``, ``error``, the
    reward ``items`` (``name -> [value, weight]``, :meth:`~shopping_companion.integrations.episodes.EpisodeSource.reward_items`)
    and per stage its ``termination``, ``verdict`` (the judge's, as JSON) and ``reward`` (total and
    components)."""
    stages = []
    for st in result.stages:
        v = st.verdict
        stages.append(
            {
                "stage": st.trajectory.stage,
                "termination": st.trajectory.termination,
                "verdict": v.model_dump(mode="json"),
                "reward": st.reward.model_dump(mode="json", include={"total", "components"}),
            }
        )
    items = {k: [v, w] for k, (v, w) in source.reward_items(result).items()}
    return {"acc": result.acc, "succ": result.succ, "error": result.error, "items": items, "stages": stages}


def _outcome_of(trace: Any) -> dict[str, Any]:
    got = (trace.info or {}).get(INFO_KEY)
    if got is None:
        raise vf.TaskError("the trace has no Shopping Companion outcome: the episode did not run to its end")
    return got


class ShoppingTask(vf.Task[ShoppingData]):
    """A (benchmark task, strategy) pair; its rewards and metrics read the outcome the harness
    kept on the trace (module docstring)."""

    @property
    def key(self) -> str:
        return f"{self.data.task_id}|{self.data.strategy}"

    @vf.reward
    async def rubric(self, trace: vf.Trace) -> dict[str, float]:
        """Record each rubric member of each scored stage with its own weight (``stage1.R_z``, ...)."""
        for name, (value, weight) in _outcome_of(trace)["items"].items():
            trace.record_reward(name, value, weight)
        return {}

    @vf.metric
    async def acc(self, trace: vf.Trace) -> float:
        """Acc: correctly identified preferences / preferences (stage 1; 1.0 for oracle)."""
        return float(_outcome_of(trace)["acc"])

    @vf.metric
    async def succ(self, trace: vf.Trace) -> float:
        """Succ: 1.0 when the recommendation satisfies every preference (stage 2)."""
        return float(_outcome_of(trace)["succ"])

    @vf.metric
    async def scored(self, trace: vf.Trace) -> float:
        """1.0 when every stage was judged and rewarded, 0.0 when a judge failed."""
        return 0.0 if _outcome_of(trace)["error"] else 1.0


class ShoppingTasksetConfig(vf.TasksetConfig):
    """``--env.taskset.*``: the eval's settings (:func:`~shopping_companion.integrations.episodes.load_source`)."""

    bench: str = ""
    """Benchmark directory (shopcomp synth / import-tasks); required."""
    strategies: list[str] = Field(default_factory=lambda: ["two_stage:none"])
    """Strategies as ``shopcomp eval --strategies``: oracle, one_stage, two_stage:none|low|high."""
    reward_config: str = "paper"
    """The reward spec (``--reward-config``): paper, outcome_only, a YAML file or module:attr."""
    judge: dict[str, Any] | None = None
    """The eval's ``judge`` group (default: the rule judge, or the reward spec's judge)."""
    seed: int = 0
    """Base of the per-episode seeds (the user simulator's too)."""
    env: dict[str, Any] = Field(default_factory=dict)
    """The eval's ``env`` group (max_turns, max_observation_chars, ...)."""
    split: str | None = None
    limit: int | None = None
    data_dir: str | None = None
    index_dir: str | None = None

    @field_validator("strategies", mode="before")
    @classmethod
    def _comma_list(cls, v: Any) -> Any:
        """``--env.taskset.strategies two_stage:none,oracle`` as on the eval's command line."""
        items = [v] if isinstance(v, str) else v
        if not isinstance(items, list):
            return v
        out: list[Any] = []
        for it in items:
            out += [p.strip() for p in it.split(",") if p.strip()] if isinstance(it, str) else [it]
        return out

    def source_settings(self) -> dict[str, Any]:
        """The keyword arguments of :func:`~shopping_companion.integrations.episodes.load_source`."""
        if not self.bench:
            raise ConfigError("taskset.bench (--env.taskset.bench): required, a benchmark directory")
        out: dict[str, Any] = {"bench": self.bench, "reward_config": self.reward_config, "seed": self.seed}
        for name in ("judge", "split", "limit", "data_dir", "index_dir"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        if self.env:
            out["env"] = dict(self.env)
        return out


class ShoppingTaskset(vf.Taskset[ShoppingTask, ShoppingTasksetConfig]):
    """The benchmark's tasks, strategy by strategy (module docstring)."""

    def load(self) -> list[ShoppingTask]:
        from shopping_companion.benchmark.evaluate import parse_strategies

        settings = self.config.source_settings()
        source = shared_source(**settings)
        out = []
        for strategy in parse_strategies(list(self.config.strategies)):
            for task in source.tasks:
                data = ShoppingData(
                    id=f"{task.task_id}|{strategy.name}",
                    name=task.task_id,
                    prompt=task.instruction,
                    task_id=task.task_id,
                    strategy=strategy.name,
                    source=settings,
                )
                out.append(ShoppingTask(data, self.config.task))
        return out


class ShoppingHarnessConfig(vf.HarnessConfig):
    """``--env.agent.harness.*``: how the harness calls verifiers' endpoint."""

    timeout_s: float = 600.0
    """Seconds one model call may take."""
    max_retries: int = 2
    """Retries of a failed model call (the eval's backend retry policy)."""


class ShoppingHarness(vf.Harness[ShoppingHarnessConfig]):
    """Plays one episode in process with the eval's loop, every model call through verifiers'
    endpoint (module docstring). A model-call failure after the backend's retries (what the eval
    records as a backend error and retries on resume) raises :class:`verifiers.v1.HarnessError`
    with the eval's message, so verifiers marks the rollout errored; a judge failure is kept on
    the trace (metric ``scored`` 0.0, no reward items)."""

    APPENDS_SYSTEM_PROMPT = True
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def launch(
        self,
        ctx: vf.ModelContext,
        trace: vf.Trace,
        runtime: Any,
        endpoint: str,
        secret: str,
        mcp_urls: dict[str, str],
        data: vf.TaskData,
        **_: Any,
    ) -> ProgramResult:
        from shopping_companion.benchmark.report import error_kind
        from shopping_companion.llm.openai_backend import OpenAIBackend

        if not isinstance(data, ShoppingData):
            data = ShoppingData.model_validate(data.model_dump())
        source = await asyncio.to_thread(shared_source, **data.source)
        backend = OpenAIBackend(
            model=ctx.model,
            base_url=endpoint,
            api_key=secret,
            timeout_s=self.config.timeout_s,
            max_retries=self.config.max_retries,
        )
        result = await source.run(data.task_id, data.strategy, backend)
        trace.info[INFO_KEY] = outcome(result, source)
        if error_kind(result) == "backend":  # the eval records it as an error, retried on resume
            raise vf.HarnessError(f"episode {data.task_id} ({data.strategy}): {result.error}")
        return ProgramResult(exit_code=0, stdout="", stderr="")


class ShoppingEnvConfig(vf.EnvConfig):
    """The one ``agent`` seat (``--env.agent.*``), its runtime ``subprocess`` by default (the
    harness runs in process: no sandbox is needed)."""

    agent: vf.AgentConfig = vf.AgentConfig(runtime=SubprocessConfig())


class ShoppingEnv(vf.Env[ShoppingEnvConfig]):
    """One agent playing :class:`ShoppingTaskset`'s tasks (module docstring)."""

    async def run(self, task: vf.Task, agents: vf.Agents) -> None:
        await agents.agent.run(task)


def load_environment(
    bench: str, strategy: str | list[str] = "two_stage:none", reward_config: str = "paper", **settings: Any
) -> vf.Env:
    """The verifiers environment of ``bench`` played under ``strategy`` (one name, a comma list or a
    list, as ``shopcomp eval --strategies``) and scored with ``reward_config``; ``settings`` are the
    other fields of :class:`ShoppingTasksetConfig` (``judge``, ``seed``, ``env``, ``split``, ``limit``,
    ``data_dir``, ``index_dir``). Raises :class:`ConfigError` for a bad setting (unknown strategy,
    missing benchmark)."""
    import importlib.util

    if importlib.util.find_spec(PACKAGE) is None:
        raise ConfigError(
            f"the verifiers environment package {PACKAGE!r} is not installed: "
            "pip install -e environments/shopping_companion_bench (scripts/install_agents.sh does)"
        )
    strategies = [s.strip() for s in strategy.split(",")] if isinstance(strategy, str) else list(strategy)
    taskset = {"id": TASKSET_ID, "bench": str(bench), "strategies": strategies, "reward_config": reward_config}
    config = ShoppingEnvConfig.model_validate({"taskset": {**taskset, **settings}})
    return vf_load_environment(config)
