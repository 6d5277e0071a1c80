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

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput

from shopping_companion.trainers.episode import ChatTokens, Generation, run_row_episode
from shopping_companion.trainers.resources import (
    EnvResources,
    ResourceSpec,
    get_resources,
    registered_resources,
)

__all__ = ["ShoppingCompanionAgentLoop"]


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
