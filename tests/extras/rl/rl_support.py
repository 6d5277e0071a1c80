"""Fake verl server managers for the agent-loop tests (the real one talks to vLLM on GPUs).

:class:`TinyModelServer` answers ``generate(request_id=, prompt_ids=, sampling_params=)`` by
running a real tiny causal LM (``transformers.generate``) on the prompt ids, honouring
``max_tokens``, ``temperature``, ``top_k`` and ``top_p`` and stopping at EOS, and returns verl's
``TokenOutput``. :class:`ScriptedServer` answers with the token ids of the gold-knowing
:class:`~shopping_companion.envs.scripted.GoldPolicy` (or of a variant that recommends a wrong
product), so rewards are known in advance: it plays the role of a policy, never of our code.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from shopping_companion.envs.scripted import GoldPolicy
from shopping_companion.envs.tools import MEMORY_TOOLS, PRODUCT_TOOLS, tool_schema
from shopping_companion.types import Task


class TinyModelServer:
    def __init__(self, model_dir: str, max_new_tokens: int = 160, seed: int = 0) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.tok = AutoTokenizer.from_pretrained(model_dir)
        self.model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
        self.max_new_tokens = max_new_tokens
        self.seed = seed
        self.calls = 0
        self._lock = threading.Lock()
        self._torch = torch

    def _generate(self, prompt_ids: list[int], sp: dict[str, Any]) -> list[int]:
        torch = self._torch
        n = max(1, min(int(sp.get("max_tokens", self.max_new_tokens)), self.max_new_tokens))
        temp = float(sp.get("temperature", 0.0) or 0.0)
        kw: dict[str, Any] = {
            "max_new_tokens": n,
            "eos_token_id": self.tok.eos_token_id,
            "pad_token_id": self.tok.pad_token_id,
        }
        if temp > 0:
            top_k = sp.get("top_k")
            kw.update(
                do_sample=True,
                temperature=temp,
                top_p=float(sp.get("top_p", 1.0)),
                top_k=int(top_k) if top_k and int(top_k) > 0 else None,
            )
        else:
            kw.update(do_sample=False)
        with self._lock, torch.no_grad():
            self.calls += 1
            torch.manual_seed(self.seed + self.calls)
            x = torch.tensor([prompt_ids])
            out = self.model.generate(input_ids=x, attention_mask=torch.ones_like(x), **kw)
        return out[0, len(prompt_ids) :].tolist()

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **kwargs: Any):
        from verl.workers.rollout.replica import TokenOutput

        ids = await asyncio.to_thread(self._generate, list(prompt_ids), dict(sampling_params))
        return TokenOutput(token_ids=ids, log_probs=[-1.0] * len(ids), stop_reason="completed")


class ScriptedServer:
    """GoldPolicy over tokens. With ``mix``, every second stage-2 trajectory of a task (in the order
    their request ids first arrive) recommends ``wrong_id`` instead of the reference product, so a
    GRPO group of an even size gets exactly half gold and half wrong answers. ``wrong_tasks``: every
    stage-2 trajectory of these task ids recommends ``wrong_id`` (no dependence on arrival order)."""

    def __init__(
        self,
        tokenizer: Any,
        tasks: list[Task],
        wrong_id: str | None = None,
        mix: bool = False,
        wrong_tasks: set[str] | frozenset[str] = frozenset(),
    ) -> None:
        self.tok = tokenizer
        self.tasks = tasks
        self.wrong_id = wrong_id
        self.mix = mix
        self.wrong_tasks = set(wrong_tasks)
        self.requests: dict[str, bool] = {}
        self._seen: dict[str, int] = {}

    def _task(self, text: str) -> Task:
        for t in self.tasks:
            if f"Shopping request: {t.instruction}" in text:
                return t
        raise LookupError("no task matches the prompt")

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **kwargs: Any):
        from verl.workers.rollout.replica import TokenOutput

        text = self.tok.decode(prompt_ids, skip_special_tokens=False)
        last_sys = text.rfind("<|im_start|>system")
        stage_text = text[last_sys:]
        task = self._task(stage_text)
        turn = stage_text.count("<|im_start|>assistant") - 1
        names = MEMORY_TOOLS if '"name": "mem_search"' in stage_text.split("</tools>")[0] else PRODUCT_TOOLS
        bad = False
        if names == PRODUCT_TOOLS:  # decide once per trajectory, at its first stage-2 request
            if request_id not in self.requests:
                k = self._seen.get(task.task_id, 0)
                self._seen[task.task_id] = k + 1
                self.requests[request_id] = (self.mix and k % 2 == 1) or task.task_id in self.wrong_tasks
            bad = self.requests[request_id]
        policy = GoldPolicy(task, recommend=[self.wrong_id] if bad and self.wrong_id else None)
        msgs = [{"role": "assistant", "content": ""}] * turn
        reply = policy.chat(msgs, [tool_schema(n) for n in names]).content
        ids = self.tok.encode(reply, add_special_tokens=False) + [self.tok.eos_token_id]
        return TokenOutput(token_ids=ids[: int(sampling_params.get("max_tokens", len(ids)))], stop_reason="completed")


class LocalReward:
    """A verl reward-loop worker handle that runs in this process (``handle.compute_score.remote(data)``).

    Like a Ray actor call, the worker gets its own copy of ``data`` (a pickle round trip): verl's
    reward manager updates the row's ``extra_info`` dict in place, and the rollouts of one prompt
    share that dict object in the agent-loop worker (``DataProto.repeat``), so calling the worker
    on the caller's objects would let concurrent rollouts of a group overwrite each other's reward
    breakdown, which cannot happen across Ray's process boundary."""

    def __init__(self, worker: Any) -> None:
        self.compute_score = self
        self.worker = worker

    def remote(self, data: Any):
        import pickle

        return self.worker.compute_score(pickle.loads(pickle.dumps(data)))


def verl_config(
    model_dir: str,
    agent_loop_yaml: str,
    *,
    prompt_length: int = 8192,
    response_length: int = 4096,
    max_turns: int = 6,
    rubric: str = "paper",
    reward_config: str | None = None,
):
    """verl's generated PPO config with our hooks set (what configs/grpo/*.yaml set on a cluster).
    ``reward_config``: the reward spec both verl sides read (``reward_kwargs.reward_config``), in
    place of the older ``reward_kwargs.rubric``."""
    import os

    import verl
    from omegaconf import OmegaConf

    cfg = OmegaConf.load(os.path.join(os.path.dirname(verl.__file__), "trainer/config/_generated_ppo_trainer.yaml"))
    r = cfg.actor_rollout_ref.rollout
    cfg.actor_rollout_ref.model.path = str(model_dir)
    r.name = "vllm"
    r.prompt_length = prompt_length
    r.response_length = response_length
    r.temperature = 0.6
    r.top_k = 20
    r.top_p = 0.95
    r.multi_turn.enable = True
    r.multi_turn.max_assistant_turns = max_turns
    r.agent.agent_loop_config_path = agent_loop_yaml
    cfg.data.max_prompt_length = prompt_length
    cfg.data.max_response_length = response_length
    cfg.algorithm.adv_estimator = "grpo"
    cfg.reward.custom_reward_function.path = "pkg://shopping_companion.trainers.reward"
    cfg.reward.custom_reward_function.name = "compute_score"
    if reward_config is not None:
        cfg.reward.custom_reward_function.reward_kwargs = {"reward_config": reward_config}
    else:
        cfg.reward.custom_reward_function.reward_kwargs = {"rubric": rubric}
    return cfg
