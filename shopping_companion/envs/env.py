"""``ShoppingCompanionEnv``: the two-stage shopping environment (Shopping Companion §5.1, App. B).

Stage 1 (preference identification) exposes the memory tools and ends with an ``<answer>``
holding the identified preferences as JSON. Stage 2 (shopping execution) exposes the product tools
and ends with a Markdown answer carrying ``@REC::product_id@`` markers. Each stage is one
:class:`~shopping_companion.types.Trajectory`; when a stage ends it is judged and rewarded
(Eq. 12) and the reward is returned by :meth:`ShoppingCompanionEnv.step`.

The same environment serves evaluation, SFT data collection and GRPO rollouts. One instance per
episode; all state is on the instance. Malformed model output never raises: it becomes an error
observation and counts in the format reward.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from shopping_companion.envs import prompts
from shopping_companion.envs.parsing import (
    extract_rec_ids,
    format_flags,
    parse_action,
    parse_preferences,
)
from shopping_companion.envs.tools import MEMORY_TOOLS, PRODUCT_TOOLS, ToolBox
from shopping_companion.llm.base import AssistantMessage
from shopping_companion.rewards import compute_reward
from shopping_companion.types import (
    EpisodeResult,
    Message,
    RewardBreakdown,
    StageResult,
    Step,
    Task,
    TerminationReason,
    ToolResult,
    Trajectory,
    Verdict,
)


class Judge(Protocol):
    name: str

    def judge(self, task: Task, trajectory: Trajectory) -> Verdict: ...


class EnvConfig(BaseModel):
    """Environment settings.

    ``max_turns``: assistant turns allowed per stage (paper: 20). ``max_observation_chars``: tool
    observations longer than this are cut with a visible marker. ``mode``: only ``two_stage`` in
    this release. ``hint``: user-simulator feedback between the stages (``none``: no feedback,
    the mode used in RL training).
    """

    model_config = ConfigDict(extra="forbid")
    mode: Literal["two_stage"] = "two_stage"
    hint: Literal["none"] = "none"
    max_turns: int = Field(default=20, ge=1, le=200)
    max_observation_chars: int = Field(default=12_000, ge=200)


@dataclass
class StepResult:
    """What :meth:`ShoppingCompanionEnv.step` returns.

    ``observations``: the messages appended after the action (tool results, feedback, or the
    opening messages of the next stage). ``reward``: the stage's total reward when a stage ended
    on this step, else 0.0. ``terminated``: the episode is over. ``truncated``: the last stage
    ended by hitting ``max_turns``.
    """

    observations: list[dict[str, Any]]
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any] = field(default_factory=dict)


RewardFn = Callable[[Task, Trajectory, Verdict], RewardBreakdown]


class ShoppingCompanionEnv:
    """One episode of the two-stage Shopping Companion task.

    Args:
        task: the benchmark instance.
        tools: a :class:`ToolBox` over the catalog and this user's memory store.
        judge: produces the :class:`Verdict` each stage's outcome reward needs.
        config: :class:`EnvConfig`.
        reward_fn: ``(task, trajectory, verdict) -> RewardBreakdown``; default Eq. 12.
    """

    def __init__(
        self,
        task: Task,
        tools: ToolBox,
        judge: Judge,
        config: EnvConfig | None = None,
        reward_fn: RewardFn = compute_reward,
    ) -> None:
        self.task = task
        self.tools = tools
        self.judge = judge
        self.config = config or EnvConfig()
        self.reward_fn = reward_fn
        self._started = False
        self._t0 = 0.0
        self.results: list[StageResult] = []
        self.stage: int = 1
        self.done = False
        self._traj: Trajectory | None = None

    # ------------------------------------------------------------------ API

    @property
    def allowed_tools(self) -> tuple[str, ...]:
        return MEMORY_TOOLS if self.stage == 1 else PRODUCT_TOOLS

    @property
    def tool_schemas(self) -> list[dict[str, Any]]:
        """OpenAI function schemas of the tools of the current stage."""
        return self.tools.schemas(self.allowed_tools)

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The current stage's chat so far, as OpenAI-style dicts (what the policy sees)."""
        if self._traj is None:
            raise RuntimeError("call reset() first")
        return [m.model_dump(exclude_none=True) for m in self._traj.messages]

    @property
    def trajectory(self) -> Trajectory:
        if self._traj is None:
            raise RuntimeError("call reset() first")
        return self._traj

    def reset(self, seed: int | None = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Start the episode at stage 1. Returns (messages, info)."""
        self.results = []
        self.done = False
        self.stage = 1
        self._started = True
        self._t0 = time.perf_counter()
        self._start_stage(1)
        return self.messages, {"stage": 1, "tools": list(self.allowed_tools), "seed": seed}

    def step(self, action: str | AssistantMessage) -> StepResult:
        """Apply one assistant turn. Never raises for malformed model output."""
        if not self._started or self._traj is None:
            raise RuntimeError("call reset() before step()")
        if self.done:
            raise RuntimeError("episode is over; call reset() to start a new one")
        msg = action if isinstance(action, AssistantMessage) else AssistantMessage(content=str(action))
        traj = self._traj
        turn = len(traj.steps)
        parsed = parse_action(
            msg.content, structured=msg.tool_calls or None, call_id_prefix=f"s{self.stage}t{turn}"
        )
        flags = format_flags(parsed)
        step = Step(
            assistant_text=msg.content,
            tool_calls=parsed.tool_calls,
            format=flags,
            prompt_tokens=msg.prompt_tokens,
            completion_tokens=msg.completion_tokens,
            latency_s=msg.latency_s,
        )
        assistant: dict[str, Any] = {"role": "assistant", "content": msg.content}
        if msg.tool_calls:
            assistant["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in msg.tool_calls
            ]
        traj.messages.append(Message(**assistant))
        traj.steps.append(step)

        if parsed.has_answer:
            traj.final_answer = parsed.answer
            return self._end_stage("answered")

        observations: list[dict[str, Any]] = []
        for i, err in enumerate(parsed.tool_errors):
            res = ToolResult(
                call_id=f"s{self.stage}t{turn}-invalid{i}",
                name="invalid_tool_call",
                content=self.tools.truncate(f'{{"error": {_json_str(err)}}}'),
                error=err,
            )
            step.tool_results.append(res)
        for call in parsed.tool_calls:
            step.tool_results.append(self.tools.execute(call, self.allowed_tools))
        for res in step.tool_results:
            m = Message(role="tool", content=res.content, name=res.name, tool_call_id=res.call_id)
            traj.messages.append(m)
            observations.append(m.model_dump(exclude_none=True))
        if not step.tool_results:
            m = Message(role="user", content=prompts.NO_ACTION_FEEDBACK)
            traj.messages.append(m)
            observations.append(m.model_dump(exclude_none=True))

        if len(traj.steps) >= self.config.max_turns:
            result = self._end_stage("max_turns")
            result.observations = observations + result.observations
            return result
        return StepResult(observations, 0.0, False, False, {"stage": self.stage, "turn": turn})

    async def astep(self, action: str | AssistantMessage) -> StepResult:
        """Async :meth:`step` (tools run in a worker thread) for concurrent rollouts."""
        return await asyncio.to_thread(self.step, action)

    def abort(self, reason: TerminationReason, error: str) -> None:
        """End the episode early (e.g. the backend failed after its retries). Nothing is scored."""
        if self._traj is not None and not self.done:
            self._traj.termination = reason
        self.done = True
        self._abort_error = error

    def episode_result(self, policy: str, trial: int = 0, seed: int = 0) -> EpisodeResult:
        """The judged, rewarded episode (one line of results.jsonl)."""
        stage1 = next((r for r in self.results if r.trajectory.stage == 1), None)
        stage2 = next((r for r in self.results if r.trajectory.stage == 2), None)
        error = getattr(self, "_abort_error", None)
        acc = _acc(stage1.verdict) if stage1 else 0.0
        return EpisodeResult(
            task_id=self.task.task_id,
            task_type=self.task.task_type,
            mode=self.config.mode,
            hint=self.config.hint,
            policy=policy,
            trial=trial,
            seed=seed,
            stages=self.results,
            acc=acc,
            succ=bool(stage2 and stage2.verdict.success),
            wall_s=round(time.perf_counter() - self._t0, 4),
            error=error,
        )

    # ------------------------------------------------------------------ internals

    def _start_stage(self, stage: int) -> None:
        self.stage = stage
        if stage == 1:
            system = prompts.stage1_system(self.config.max_turns)
            user = prompts.stage1_user(self.task)
        else:
            prev = self.results[-1].trajectory if self.results else None
            prefs = prev.identified_preferences if prev else None
            system = prompts.stage2_system(self.config.max_turns)
            user = prompts.stage2_user(self.task, prefs)
        self._traj = Trajectory(
            task_id=self.task.task_id,
            stage=stage,  # type: ignore[arg-type]
            mode=self.config.mode,
            messages=[Message(role="system", content=system), Message(role="user", content=user)],
        )

    def _end_stage(self, reason: TerminationReason) -> StepResult:
        traj = self._traj
        assert traj is not None
        traj.termination = reason
        info: dict[str, Any] = {"stage": self.stage, "stage_done": True, "termination": reason}
        if traj.final_answer is not None:
            if self.stage == 1:
                prefs, err = parse_preferences(traj.final_answer)
                traj.identified_preferences = prefs if err is None else None
                if err:
                    info["answer_error"] = err
            else:
                ids, malformed = extract_rec_ids(traj.final_answer)
                traj.recommended_ids = ids
                if malformed:
                    info["malformed_rec_markers"] = malformed
        verdict = self.judge.judge(self.task, traj)
        reward = self.reward_fn(self.task, traj, verdict)
        self.results.append(StageResult(trajectory=traj, verdict=verdict, reward=reward))
        info["verdict"] = verdict.model_dump()
        info["reward_breakdown"] = reward.model_dump()
        truncated = reason == "max_turns"
        if self.stage == 1 and self.config.mode == "two_stage":
            self._start_stage(2)
            info["next_stage"] = 2
            return StepResult(self.messages, reward.total, False, truncated, info)
        self.done = True
        return StepResult([], reward.total, True, truncated, info)


def _json_str(s: str) -> str:
    import json

    return json.dumps(s, ensure_ascii=False)


def _acc(v: Verdict) -> float:
    """Acc (paper §4): fraction of gold preference attributes recovered in stage 1 (m1 / F)."""
    if v.F == 0:
        return 1.0
    return float(v.m1 or 0.0) / v.F
