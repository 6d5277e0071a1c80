"""The benchmark as a skyrl-gym text environment (skyrl-gym 0.4.0, ``BaseTextEnv``), registered as
``shopping_companion`` when this module is imported (docs/integrations.md, SkyRL-gym).

One :class:`ShoppingCompanionTextEnv` is one episode of
:class:`~shopping_companion.envs.env.ShoppingCompanionEnv`, started as ``shopcomp eval`` starts it
(:meth:`~shopping_companion.integrations.episodes.EpisodeSource.new_episode`: same tools, limits,
prompts, user simulator, judge and rubric). skyrl-gym's conventions:

``skyrl_gym.make("shopping_companion", env_config=..., extras=...)``
    ``env_config``: where the benchmark is and how it is scored, the keyword arguments of
    :func:`~shopping_companion.integrations.episodes.load_source` (``bench`` is required;
    ``reward_config``, ``judge``, ``seed``, ``env``, ``data_dir``, ``index_dir``, ...); a mapping or an
    OmegaConf ``DictConfig``. Environments with the same ``env_config`` share one loaded benchmark in
    the process. ``extras``: the dataset row, holding ``task_id`` and optionally ``strategy``
    (``two_stage:none`` by default; ``one_stage``, ``oracle``, ``two_stage:low|high``) and ``trial``
    (0), at the top level or under ``extra_info`` (:func:`dataset_rows` writes such rows).
``init(prompt)``
    Returns the episode's opening messages (system and user of the first stage; the row's prompt
    is replaced by them, so a stale dataset cannot change the episode) and metadata with
    ``task_id``, ``strategy``, ``stage`` and ``tools``: the OpenAI tool schemas of the first stage,
    which the generator's chat template should receive as ``shopcomp eval``'s requests carry them
    (the system prompt describes the tools in words only).
``step(action)``
    ``action`` is the model's turn as text (tool calls as Hermes ``<tool_call>`` blocks, the answer in
    ``<answer>``, as in ``shopcomp eval``). ``observations``: the messages the environment appended
    (tool results with role ``tool``, reminders with role ``user``); when stage 1 of a ``two_stage``
    episode ends they end with stage 2's opening system and user messages (the user simulator's
    feedback is in that user message), and ``metadata["tools"]`` then holds stage 2's tools.
    ``reward``: the ending stage's total (Eq. 12 under the reward spec) on the turn a stage ends,
    else 0.0, so an episode's rewards sum to the sum of its stage totals. ``done``: the episode is
    over. ``metadata``: the environment's step info (``stage``, ``turn``, and when a stage ends
    ``termination``, ``verdict``, ``reward_breakdown``, ``judge_failed`` when its judge failed).
``get_metrics()``
    After the episode: ``acc``, ``succ``, ``scored`` (0.0 when a judge failed or the episode
    errored) and every reward component per stage (``stage1.R_z``, ...), as the eval's report
    names them.
"""

from __future__ import annotations

import inspect

from typing import Any, Mapping

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput
from skyrl_gym.envs.registration import register, registry

from shopping_companion.errors import ConfigError
from shopping_companion.integrations.episodes import load_source, shared_source, stage_key
from shopping_companion.types import EpisodeResult

__all__ = ["ENV_NAME", "ShoppingCompanionTextEnv", "dataset_rows"]

#: The id this module registers with skyrl-gym.
ENV_NAME = "shopping_companion"


#: the ``env_config`` keys: :func:`load_source`'s settings
_SOURCE_SETTINGS = tuple(p for p in inspect.signature(load_source).parameters if p != "console")


def _plain(obj: Any) -> Any:
    """An OmegaConf node (what SkyRL passes) or a mapping -> plain Python containers."""
    if obj is None:
        return {}
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf

        if isinstance(obj, (DictConfig, ListConfig)):
            return OmegaConf.to_container(obj, resolve=True)
    except ImportError:  # skyrl-gym depends on omegaconf; a mapping works without it
        pass
    return obj


class ShoppingCompanionTextEnv(BaseTextEnv):
    """One Shopping Companion episode as a skyrl-gym ``BaseTextEnv`` (module docstring).

    Raises :class:`ConfigError` when ``env_config`` has no ``bench``, when ``extras`` names no
    ``task_id`` or an unknown task or strategy, and what loading the benchmark raises."""

    def __init__(self, env_config: Any = None, extras: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        settings = dict(_plain(env_config))
        settings.pop("env_class", None)
        if "bench" not in settings:
            raise ConfigError("env_config.bench: required (a benchmark directory of shopcomp synth / import-tasks)")
        unknown = sorted(set(settings) - set(_SOURCE_SETTINGS))
        if unknown:
            raise ConfigError(f"env_config.{unknown[0]}: unknown setting; allowed: {', '.join(_SOURCE_SETTINGS)}")
        row = dict(_plain(extras))
        info = dict(row.get("extra_info") or {})
        task_id = row.get("task_id", info.get("task_id"))
        if not task_id:
            raise ConfigError("extras.task_id (or extras.extra_info.task_id): required, the benchmark task to play")
        self.strategy = str(row.get("strategy", info.get("strategy", "two_stage:none")))
        trial = row.get("trial", info.get("trial", 0))
        try:
            self.trial = int(trial)
        except (TypeError, ValueError):
            raise ConfigError(f"extras.trial: must be an integer >= 0, got {trial!r}") from None
        self.source = shared_source(**settings)
        self.env, self.sampling, self.seed = self.source.new_episode(str(task_id), self.strategy, self.trial)
        self.task_id = str(task_id)
        n_stages = 2 if self.env.mode == "two_stage" else 1
        self.max_turns = self.env.config.max_turns * n_stages
        self.result: EpisodeResult | None = None
        self.started = False

    def init(self, prompt: Any = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """The first stage's opening messages (``prompt`` is not used) and the metadata above."""
        self.started = True
        meta = {"task_id": self.task_id, "strategy": self.strategy, "stage": self.env.stage}
        return self.env.messages, {**meta, "tools": self.env.tool_schemas}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        """One assistant turn through :meth:`ShoppingCompanionEnv.step` (module docstring). Raises
        ``RuntimeError`` before :meth:`init` (skyrl-gym's order: ``init``, then ``step``)."""
        if not self.started:
            raise RuntimeError("call init() before step(): the episode has not been opened")
        self.turns += 1
        res = self.env.step(action)
        metadata = dict(res.info)
        if res.info.get("next_stage"):
            metadata["tools"] = self.env.tool_schemas
        if res.terminated:
            self.result = self.env.episode_result(policy="skyrl", trial=self.trial, seed=self.seed)
        return BaseTextEnvStepOutput(
            observations=res.observations, reward=float(res.reward), done=bool(res.terminated), metadata=metadata
        )

    def get_metrics(self) -> dict[str, Any]:
        """``acc``, ``succ``, ``scored`` and the per-stage reward components of the finished
        episode (``{}`` before it ends)."""
        r = self.result
        if r is None:
            return {}
        out: dict[str, Any] = {"acc": r.acc, "succ": float(r.succ), "scored": float(r.error is None)}
        for st in r.stages:
            s = st.trajectory.stage
            out[stage_key(s, "total")] = st.reward.total
            for k, v in st.reward.components.items():
                if k != "stage":
                    out[stage_key(s, k)] = float(v)
        return out


def dataset_rows(
    source: Any, strategies: list[str] | None = None, data_source: str = "shopping_companion"
) -> list[dict[str, Any]]:
    """Dataset rows for SkyRL's trainer, one per (task, strategy) of ``source`` (an
    :class:`~shopping_companion.integrations.episodes.EpisodeSource`): ``data_source``, ``prompt``
    (the episode's opening messages, for the dataset's length filters; :meth:`ShoppingCompanionTextEnv.init`
    replaces it), ``env_class`` (``shopping_companion``), ``reward_spec`` (``{"method": "rule"}``:
    the environment computes the reward) and ``extra_info`` (``task_id``, ``strategy``)."""
    rows = []
    for strategy in strategies or ["two_stage:none"]:
        for task in source.tasks:
            env, _sampling, _seed = source.new_episode(task.task_id, strategy)
            rows.append(
                {
                    "data_source": data_source,
                    "prompt": env.messages,
                    "env_class": ENV_NAME,
                    "reward_spec": {"method": "rule"},
                    "extra_info": {"task_id": task.task_id, "strategy": strategy},
                }
            )
    return rows


if ENV_NAME not in registry:
    register(id=ENV_NAME, entry_point=f"{__name__}:ShoppingCompanionTextEnv")
