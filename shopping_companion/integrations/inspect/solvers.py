"""The episode as Inspect solver steps (docs/integrations.md, "Inspect AI").

An episode is the environment of ``shopcomp eval``
(:class:`~shopping_companion.envs.env.ShoppingCompanionEnv`, built by
:func:`~shopping_companion.benchmark.evaluate.prepare_episode` with the same seeds) driven by three
solver steps, chained by :func:`shopping_episode`:

1. :func:`play_stage` plays the current stage: each turn sends the stage's messages and tools
   (:func:`~.tools.tool_infos`) to the eval's model and hands the reply to the environment, which
   runs the tool calls, judges and rewards the stage when it ends;
2. :func:`user_simulator` runs the user simulator between the stages
   (:meth:`ShoppingCompanionEnv.hand_over`) and opens stage 2; in ``one_stage`` and ``oracle``
   episodes, which have one stage, it does nothing;
3. :func:`play_stage` again, for stage 2 (nothing when the episode is over).

The last step stores the episode's :class:`~shopping_companion.types.EpisodeResult` (JSON) in the
sample's store under :data:`RESULT_KEY`, which the scorer (:mod:`.scorer`) judges. The sample's
messages are the conversation of each stage, one after the other.

Model replies become the environment's actions as ``shopcomp eval``'s OpenAI backend makes them:
the text (a ``<think>`` block Inspect took out of the content is put back in front), structured
tool calls with their arguments as JSON (a call whose arguments Inspect could not parse is passed
on as unparseable, so the environment reports it), the finish reason (``max_tokens`` →
``length``; ``model_length``, a prompt longer than the model's context, ends the stage as
``context_length``) and the token counts. A model error after Inspect's own retries fails the
sample (Inspect records it); it is never scored.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any
from urllib.parse import urlparse

from inspect_ai.log import transcript
from inspect_ai.model import (
    ChatMessage,
    ChatMessageAssistant,
    ChatMessageSystem,
    ChatMessageTool,
    ChatMessageUser,
    ContentReasoning,
    ContentText,
    GenerateConfig,
    Model,
    ModelOutput,
    get_model,
)
from inspect_ai.solver import Generate, Solver, TaskState, chain, solver
from inspect_ai.tool import ToolCall as InspectToolCall
from inspect_ai.util import span

from shopping_companion.benchmark.evaluate import Strategy
from shopping_companion.envs.env import ShoppingCompanionEnv
from shopping_companion.integrations.episodes import EpisodeSource
from shopping_companion.integrations.inspect.tools import tool_infos
from shopping_companion.llm.base import AssistantMessage, StructuredToolCall

__all__ = [
    "RESULT_KEY",
    "Episodes",
    "action_from_output",
    "chat_completions_off_openai",
    "inspect_messages",
    "play_stage",
    "shopping_episode",
    "user_simulator",
]

#: The sample-store key of the episode's result (``EpisodeResult`` as JSON).
RESULT_KEY = "shopping_companion:episode"
_FINISH = {"max_tokens": "length", "tool_calls": "tool_calls", "stop": "stop", "content_filter": "content_filter"}


class Episodes:
    """The running environments of one task's samples, by sample run (``TaskState.uuid``): what
    the solver steps of one episode share. The first step that sees a sample builds its
    environment; the step that ends the episode stores the result (:data:`RESULT_KEY`); the
    task's cleanup (:meth:`drop`) forgets it."""

    def __init__(self, source: EpisodeSource, policy: str = "inspect") -> None:
        self.source = source
        self.policy = policy
        self.envs: dict[str, tuple[ShoppingCompanionEnv, int, int | None]] = {}
        self.history: dict[str, list[ChatMessage]] = {}

    def __repr__(self) -> str:  # how Inspect's log names the solver's and scorer's argument
        return f"Episodes({len(self.source.resources.tasks)} tasks)"

    def get(self, state: TaskState) -> tuple[ShoppingCompanionEnv, int, int | None]:
        if state.uuid not in self.envs:
            meta = state.metadata
            env, sampling, seed = self.source.new_episode(
                meta["task_id"], Strategy(meta["mode"], meta["hint"]), state.epoch - 1, hold_handover=True
            )
            sampling_seed = sampling.seed if sampling is not None else None
            self.envs[state.uuid] = (env, seed, sampling_seed)
            self.history[state.uuid] = []
        return self.envs[state.uuid]

    def show(self, state: TaskState, env: ShoppingCompanionEnv) -> None:
        """The sample's messages: the earlier stages' conversations, then the current one's."""
        state.messages = self.history[state.uuid] + inspect_messages(env.messages)

    def close_stage(self, state: TaskState, env: ShoppingCompanionEnv) -> None:
        self.history[state.uuid] = self.history[state.uuid] + inspect_messages(env.messages)

    def finish(self, state: TaskState) -> None:
        env, seed, _ = self.envs[state.uuid]  # kept (done) until the task's cleanup drops it
        result = env.episode_result(policy=self.policy, trial=state.epoch - 1, seed=seed)
        state.store.set(RESULT_KEY, result.model_dump(mode="json"))

    def drop(self, state: TaskState) -> None:
        """Forget the sample's environment (the task's cleanup, after the sample is scored or
        failed)."""
        self.envs.pop(state.uuid, None)
        self.history.pop(state.uuid, None)


def inspect_messages(messages: list[dict[str, Any]]) -> list[ChatMessage]:
    """The environment's OpenAI-style messages as Inspect chat messages, text unchanged (an
    assistant turn's structured calls keep their ids; a tool message keeps its call id and tool
    name). Raises ``ValueError`` for a role other than system, user, assistant and tool."""
    out: list[ChatMessage] = []
    for m in messages:
        role, content = m["role"], m.get("content") or ""
        if role == "system":
            out.append(ChatMessageSystem(content=content))
        elif role == "user":
            out.append(ChatMessageUser(content=content))
        elif role == "assistant":
            calls = [
                InspectToolCall(
                    id=c["id"], function=c["function"]["name"], arguments=_arguments(c["function"]["arguments"])
                )
                for c in m.get("tool_calls") or []
            ]
            out.append(ChatMessageAssistant(content=content, tool_calls=calls or None))
        elif role == "tool":
            out.append(ChatMessageTool(content=content, tool_call_id=m.get("tool_call_id"), function=m.get("name")))
        else:
            raise ValueError(f"message role: must be system, user, assistant or tool, got {role!r}")
    return out


def _arguments(raw: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except ValueError:
        return {"arguments": raw}
    return value if isinstance(value, dict) else {"arguments": value}


def action_from_output(output: ModelOutput) -> AssistantMessage:
    """One Inspect model reply as the environment's action (module docstring)."""
    msg = output.message
    text, reasoning = "", None
    if isinstance(msg.content, str):
        text = msg.content
    else:
        for part in msg.content:
            if isinstance(part, ContentReasoning):
                if part.internal == "think":  # Inspect took a <think> block out of the text
                    text = f"<think>{part.reasoning}</think>" + text
                else:
                    reasoning = part.reasoning if reasoning is None else reasoning + part.reasoning
            elif isinstance(part, ContentText):
                text += part.text
    calls = [
        StructuredToolCall(
            id=c.id,
            name=c.function,
            arguments=f"unparseable arguments: {c.parse_error}" if c.parse_error else json.dumps(c.arguments),
        )
        for c in msg.tool_calls or []
    ]
    usage = output.usage
    return AssistantMessage(
        content=text,
        reasoning=reasoning,
        tool_calls=calls,
        prompt_tokens=usage.input_tokens if usage else None,
        completion_tokens=usage.output_tokens if usage else None,
        latency_s=output.time,
        finish_reason=_FINISH.get(output.stop_reason),
    )


def chat_completions_off_openai(model: Model) -> bool:
    """Switch Inspect's ``openai/`` provider to Chat Completions when its base URL is not OpenAI's
    (``-M responses_api=false`` done for the user); returns whether it switched. That provider takes
    a model name it does not know (any local model) for OpenAI's newest and sends it to the
    Responses API (``/v1/responses``), which OpenAI-compatible servers (vLLM, SGLang) lack. Azure,
    Bedrock and other providers are left as they are."""
    api = model.api
    if type(api).__name__ != "OpenAIAPI" or not getattr(api, "responses_api", False):
        return False
    if api.is_azure() or api.is_bedrock():
        return False
    url = api.base_url or os.environ.get("OPENAI_BASE_URL") or os.environ.get("INSPECT_EVAL_MODEL_BASE_URL") or ""
    if not url or urlparse(url).hostname == "api.openai.com":
        return False
    api.responses_api = False
    return True


@solver
def play_stage(episodes: Episodes) -> Solver:
    """Play the episode's current stage to its end (module docstring, step 1); nothing when the
    episode is over or waits for the user simulator."""

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        env, _seed, sampling_seed = episodes.get(state)
        if env.done or env.awaiting_handover:
            return state
        model = get_model()
        chat_completions_off_openai(model)
        config = GenerateConfig(seed=sampling_seed) if sampling_seed is not None else GenerateConfig()
        async with span(f"stage {env.stage}"):
            while not env.done and not env.awaiting_handover:
                episodes.show(state, env)
                output = await model.generate(
                    inspect_messages(env.messages), tools=tool_infos(env.allowed_tools), config=config
                )
                if output.stop_reason == "model_length":
                    await env.aend_stage_model_failure("context_length", output.error or "model_length")
                else:
                    await env.astep(action_from_output(output))
                episodes.show(state, env)
        episodes.close_stage(state, env)
        if env.done:
            episodes.finish(state)
        return state

    return solve


@solver
def user_simulator(episodes: Episodes) -> Solver:
    """Ask the user simulator between the stages and open stage 2 (module docstring, step 2);
    nothing in an episode of one stage."""

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        env, _seed, _ = episodes.get(state)
        if env.awaiting_handover:
            async with span("user simulator"):
                await asyncio.to_thread(env.hand_over)
                fb = env.feedback
                transcript().info(
                    {"hint": env.config.hint, "feedback": fb.text if fb else None, "source": fb.source if fb else None},
                    source="user simulator",
                )
            episodes.show(state, env)
        return state

    return solve


@solver
def shopping_episode(episodes: Episodes) -> Solver:
    """The whole episode: stage, user simulator, stage (module docstring)."""
    return chain(play_stage(episodes), user_simulator(episodes), play_stage(episodes))
