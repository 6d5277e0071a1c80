"""verl agent loop for Shopping Companion GRPO (needs the ``verl`` extra: ``verl[verl-core]==0.9.1``).

:class:`ShoppingCompanionAgentLoop` is a subclass of verl's ``AgentLoopBase``, registered under
the name ``shopping_companion`` through verl's public agent-loop config hook:
``configs/grpo/agent_loop.yaml`` (``{name, _target_, ...our keys}``) given as
``actor_rollout_ref.rollout.agent.agent_loop_config_path``; rows pick it with their ``agent_name``
column. (It deliberately does not use verl's ``@register`` decorator: that decorator runs when
hydra first imports this module and would replace the YAML entry — and its settings, e.g. the
rubric — with a bare one for every later trajectory.) verl creates one instance per trajectory; all per-trajectory state (the
environment, token buffers) lives in :meth:`run`'s scope, the shared services in the process-wide
:class:`~shopping_companion.trainers.resources.EnvResources`.

:meth:`run` drives :class:`~shopping_companion.envs.env.ShoppingCompanionEnv` itself through
:func:`~shopping_companion.trainers.episode.run_row_episode`: it generates with verl's server
manager (``server_manager.generate(request_id=, prompt_ids=, sampling_params=)``, one sticky
request id per trajectory), lets the environment parse tool calls, run our tools, the judge, the
rubric and (for stage-2 rows that ask for it) the user simulator, and appends observations as
tokens with ``response_mask`` 0. Limits: ``actor_rollout_ref.rollout.multi_turn.max_assistant_turns``
(paper: 20) → the environment's ``max_turns``; ``rollout.response_length`` (paper: 32,768) → the
response token budget. The trajectory's reward breakdown goes to the trainer in ``extra_fields``
(read by :func:`shopping_companion.trainers.reward.compute_score`). A trajectory whose judge failed
gets ``response_mask`` all 0 (no gradient) instead of being trained on as a 0, and the
``grpo_judged`` advantage estimator (:mod:`shopping_companion.trainers.verl_plugin`) keeps it out of
its group's statistics.

Agent-loop config keys (``configs/grpo/agent_loop.yaml``; each is a constructor argument):
``benchmark`` (default: the row's ``extra_info.benchmark``), ``data_dir``, ``index_dir``, ``rubric``
(``paper`` | ``outcome_only`` | YAML path), ``memory_cache``, ``max_observation_chars``,
``resources`` (the name of :func:`~shopping_companion.trainers.resources.register_resources`
resources, for tests), ``record_messages`` (also return the stage's chat in
``extra_fields["shopcomp_messages"]``; for debugging, it makes the batch much larger).
"""

from __future__ import annotations

import asyncio
from typing import Any, Optional
from uuid import uuid4

import numpy as np
from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopManager, AgentLoopMetrics, AgentLoopOutput

from shopping_companion.trainers.episode import ChatTokens, Generation, run_row_episode
from shopping_companion.trainers.resources import (
    EnvResources,
    ResourceSpec,
    get_resources,
    registered_resources,
)

__all__ = ["ShoppingCompanionAgentLoop", "ShoppingCompanionAgentLoopManager", "rollout_reward_metrics"]


def _plain(x: Any) -> Any:
    """numpy scalars / 0-d arrays from verl's non-tensor batch → Python values."""
    if hasattr(x, "item") and getattr(x, "shape", None) == ():
        return x.item()
    return x


class ShoppingCompanionAgentLoop(AgentLoopBase):
    """One row = one (task, stage) trajectory of the Shopping Companion environment (module docstring)."""

    def __init__(self, *args: Any, tools: Any = None, name: Optional[str] = None, benchmark: Optional[str] = None,
                 data_dir: Optional[str] = None, index_dir: Optional[str] = None, rubric: str = "paper",
                 memory_cache: int = 256, max_observation_chars: int = 12_000, resources: Optional[str] = None,
                 record_messages: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        mt = self.rollout_config.multi_turn
        self.max_turns = int(mt.get("max_assistant_turns") or 20) if mt is not None else 20
        self.response_length = int(self.rollout_config.response_length)
        self.benchmark = benchmark
        self.data_dir = data_dir
        self.index_dir = index_dir
        self.rubric = rubric
        self.memory_cache = int(memory_cache)
        self.max_observation_chars = int(max_observation_chars)
        self.resources_name = resources
        self.record_messages = bool(record_messages)
        self.chat = ChatTokens(self.tokenizer, dict(self.apply_chat_template_kwargs or {}))

    async def _resources(self, extra: dict[str, Any]) -> EnvResources:
        if self.resources_name:
            return registered_resources(self.resources_name)
        bench = self.benchmark or extra.get("benchmark")
        if not bench:
            raise ValueError("no benchmark: set `benchmark` in the agent loop config or prepare rows with "
                             "`shopcomp grpo prepare` (extra_info.benchmark)")
        spec = ResourceSpec(benchmark=str(bench), data_dir=self.data_dir, index_dir=self.index_dir,
                            rubric=self.rubric, memory_cache=self.memory_cache)
        return await asyncio.to_thread(get_resources, spec)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        extra = {k: _plain(v) for k, v in dict(kwargs.get("extra_info") or {}).items()}
        for key in ("task_id", "stage"):
            if key not in extra:
                raise ValueError(f"extra_info.{key} is missing: prepare rows with `shopcomp grpo prepare`")
        res = await self._resources(extra)
        task = res.task(str(extra["task_id"]))
        stage = int(extra["stage"])
        env = res.make_env(task, hint=str(extra.get("hint", "none")), max_turns=self.max_turns,
                           simulator_seed=int(extra.get("index", 0)),
                           max_observation_chars=self.max_observation_chars)
        request_id = uuid4().hex

        async def generate(ids: list[int], sp: dict[str, Any]) -> Generation:
            out = await self.server_manager.generate(request_id=request_id, prompt_ids=ids, sampling_params=sp)
            return Generation(list(out.token_ids), list(out.log_probs) if out.log_probs else None)

        ep = await run_row_episode(env, stage, self.chat, generate, dict(sampling_params), self.response_length,
                                   stage1=str(extra.get("stage1", "gold")))
        toks = ep.tokens
        prompt_ids = self._cap_text_prompt_length(toks.prompt_ids)
        mask = list(toks.response_mask)
        if ep.judge_failed:
            mask = [0] * len(mask)  # not scored: contributes no policy gradient
        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=toks.response_ids[: self.response_length],
            response_mask=mask[: self.response_length],
            response_logprobs=toks.response_logprobs[: self.response_length] if toks.has_logprobs and toks.response_logprobs else None,
            num_turns=ep.num_turns,
            metrics=AgentLoopMetrics(generate_sequences=ep.generate_s, tool_calls=ep.env_s),
            extra_fields={**ep.extra_fields(), **({"shopcomp_messages": ep.messages} if self.record_messages else {})},
        )


def rollout_reward_metrics(non_tensor_batch: dict[str, Any]) -> dict[str, float]:
    """Per-step reward metrics of one rollout batch, from the agent loop's ``extra_fields``.

    ``non_tensor_batch`` is a rollout ``DataProto``'s ``non_tensor_batch`` (one entry per
    trajectory; rows not played by this agent loop are ignored). Returns, over the trajectories
    whose judge did not fail, ``shopcomp/<key>/mean`` for ``total`` (the environment rubric's
    Eq. 12 sum) and every :data:`~shopping_companion.trainers.reward.LOGGED_KEYS` component
    (R_z, R_tool, R_fmt, f_*, per-tool means, n_tool_calls, success), the same means per stage
    (``shopcomp/stage<s>/<key>/mean``), plus ``shopcomp/judge_failed/count``,
    ``shopcomp/trajectories``, ``shopcomp/termination/<reason>/share``,
    ``shopcomp/prefix_mismatches/sum`` and ``shopcomp/env_s/mean`` (seconds per trajectory in the
    environment). Empty when the batch has no Shopping Companion trajectories.
    """
    from shopping_companion.trainers.reward import LOGGED_KEYS

    rewards = non_tensor_batch.get("shopcomp_reward")
    if rewards is None:
        return {}
    n = len(rewards)
    col = {k: list(non_tensor_batch.get(k, [None] * n)) for k in (
        "shopcomp_stage", "shopcomp_judge_failed", "shopcomp_termination", "shopcomp_prefix_mismatches", "shopcomp_env_s")}
    kept: dict[str, list[float]] = {}
    failed = 0
    played = 0
    terms: dict[str, int] = {}
    mismatches = 0.0
    env_s: list[float] = []
    for i, rb in enumerate(rewards):
        if not isinstance(rb, dict) or "components" not in rb:
            continue
        played += 1
        term = str(col["shopcomp_termination"][i] or "unknown")
        terms[term] = terms.get(term, 0) + 1
        mismatches += float(col["shopcomp_prefix_mismatches"][i] or 0)
        if col["shopcomp_env_s"][i] is not None:
            env_s.append(float(col["shopcomp_env_s"][i]))
        comps = {str(k): float(v) for k, v in dict(rb["components"]).items()}
        if col["shopcomp_judge_failed"][i] or comps.get("judge_failed", 0.0) > 0:
            failed += 1
            continue
        stage = col["shopcomp_stage"][i]
        values = {"total": float(rb.get("total", 0.0)), **{k: comps.get(k, 0.0) for k in LOGGED_KEYS if k not in ("stage", "judge_failed")}}
        for k, v in values.items():
            kept.setdefault(f"shopcomp/{k}/mean", []).append(v)
            if stage is not None:
                kept.setdefault(f"shopcomp/stage{int(stage)}/{k}/mean", []).append(v)
    if not played:
        return {}
    out = {k: float(np.mean(v)) for k, v in kept.items()}
    out["shopcomp/trajectories"] = float(played)
    out["shopcomp/judge_failed/count"] = float(failed)
    out["shopcomp/prefix_mismatches/sum"] = mismatches
    for term, c in terms.items():
        out[f"shopcomp/termination/{term}/share"] = c / played
    if env_s:
        out["shopcomp/env_s/mean"] = float(np.mean(env_s))
    return out


class ShoppingCompanionAgentLoopManager(AgentLoopManager):
    """verl's ``AgentLoopManager`` that also reports our reward components for every training step.

    verl 0.9.1 logs the reward function's extra keys only in validation metrics (``val-aux/…``) and
    rollout dumps; its training-step metrics carry only the total (``critic/score/…``), and it has
    no public hook for custom training metrics. The rollout's timing dictionary is the one dict a
    manager returns that the trainer logs whole, so this manager adds
    :func:`rollout_reward_metrics` to it: each training step logs ``timing_s/shopcomp/R_tool/mean``,
    ``timing_s/shopcomp/stage2/R_z/mean``, ``timing_s/shopcomp/success/mean`` and the rest (the
    ``timing_s/`` prefix is verl's, not a unit). Selected with
    ``actor_rollout_ref.rollout.agent.agent_loop_manager_class`` (``configs/grpo/grpo_common.yaml``);
    everything else is verl's manager unchanged.

    Raises:
        ValueError: at construction when ``trainer.use_v1`` is true (verl's TransferQueue trainer
            needs its own manager; this one would leave it waiting for rollouts).
    """

    def __init__(self, config: Any, *args: Any, **kwargs: Any) -> None:
        trainer = config.get("trainer", {}) if hasattr(config, "get") else {}
        if trainer and trainer.get("use_v1", False):
            raise ValueError(
                "actor_rollout_ref.rollout.agent.agent_loop_manager_class: ShoppingCompanionAgentLoopManager works "
                "with verl's RayPPOTrainer (trainer.use_v1=false, as in configs/grpo); with trainer.use_v1=true set "
                "agent_loop_manager_class=null (verl's TransferQueue manager)"
            )
        super().__init__(config, *args, **kwargs)

    def _performance_metrics(self, metrics: list[list[dict[str, str]]], output: Any) -> dict[str, float]:
        timing = super()._performance_metrics(metrics, output)
        timing.update(rollout_reward_metrics(dict(output.non_tensor_batch)))
        return timing
