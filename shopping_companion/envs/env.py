"""``ShoppingCompanionEnv``: the shopping environment (Shopping Companion §5.1, §6.3, App. B).

Modes (``EnvConfig.mode``; the paper's workflow variants of §6.3 / App. B.3):

``two_stage`` (default, the paper's framework and the RL setting)
    Stage 1 (preference identification) exposes the memory tools and ends with an ``<answer>``
    holding the identified preferences as JSON. The user simulator then answers at the configured
    hint level (``none`` / ``low`` / ``high``, :mod:`~shopping_companion.envs.simulator`), and its
    message is appended to stage 2's opening message. Stage 2 (shopping execution) exposes the
    product tools and ends with a Markdown answer carrying ``@REC::product_id@`` markers (several
    for add-on deals). Each stage is one :class:`~shopping_companion.types.Trajectory`
    (``stage`` 1 and 2), judged and rewarded (Eq. 12) when it ends.

``one_stage`` (end-to-end ablation)
    ONE trajectory, recorded as ``stage=2`` (it ends with a recommendation), ``mode="one_stage"``,
    with all four tools. Its answer must carry a fenced JSON preference block *and* the
    ``@REC::id@`` markers. It is judged twice: as stage 2 (``verdict``, reward Eq. 12 with R2,
    Succ) and, viewed as a stage-1 trajectory (same steps, ``stage=1``), for the stage-1 fields
    (``EpisodeResult.preference_verdict``, Acc = m1/F; R1 is logged as reward component ``"R1"``
    but not added to the total). No user simulator is involved.

``oracle`` (upper bound)
    ONE trajectory (``stage=2``, ``mode="oracle"``) with the product tools only; the gold
    preference (needle) sessions' full text is placed in the opening user message. Acc is not
    applicable: ``EpisodeResult.acc`` is 1.0 by construction (nothing has to be retrieved) and
    ``preference_verdict`` is None; compare Acc across modes without oracle runs.

Every result records the user simulator's name, model and seed (``EpisodeResult.simulator``),
with the feedback text and whether an LLM message had to be replaced.

Malformed model output never raises: it becomes an error observation and counts in the format
reward (Eq. 11). Per turn: malformed tool-call blocks and rejected calls each get an error
observation; a call identical (same tool and arguments) to an earlier one of the stage is not run
again (error observation, r(u)=0 — repeating a high-precision call cannot inflate R_tool); at most
``max_calls_per_turn`` calls run per turn; a call whose decoded arguments are deeper, longer or
hold more items than ``max_tool_arg_depth`` / ``max_tool_arg_chars`` / ``max_tool_arg_items`` is
not run (error observation naming the limit); a turn with neither a call nor an answer gets a
user-role reminder listing the format problems found (among them ``tool_call_in_reasoning`` when
the calls were written only in the separate reasoning channel). A turn cut off by the token limit
(``finish_reason == "length"``) runs no call. ``max_invalid_turns`` consecutive invalid turns end
the stage (``invalid_output`` / ``length``); a prompt the server refuses as too long ends it as
``context_length`` (:meth:`ShoppingCompanionEnv.end_stage_model_failure`); both are scored like a
``max_turns`` end. Observations longer than ``max_observation_chars`` are cut with a visible
marker. Every string of model output, raw or decoded from JSON (a ``\\ud800`` escape), is cleaned
of lone UTF-16 surrogates (replaced by U+FFFD), so requests and results always encode.

Tool-call ids: :func:`~shopping_companion.envs.parsing.parse_action` gives every call of a turn a
unique id (a server's duplicate or empty id is replaced there). Each tool message carries its
call's id, and in a turn whose server returned structured ``tool_calls`` the assistant message
lists exactly the calls its tool messages answer, with the same ids (text calls of that turn
included), so an OpenAI-strict server accepts the next request. A turn of the text protocol (no
structured calls) keeps its calls in the content only.

One instance per episode; all state is on the instance. :meth:`ShoppingCompanionEnv.astep` runs
:meth:`step` in a worker thread (and detaches that thread from the JVM afterwards) so many episodes
can share one ``ProductSearch`` / ``MemoryStore`` / ``Embedder``.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field, model_validator

from shopping_companion.envs import prompts
from shopping_companion.envs.parsing import (
    ArgumentLimits,
    clean_text,
    extract_rec_ids,
    format_flags,
    parse_action,
    parse_preferences,
)
from shopping_companion.envs.simulator import SimulatorFeedback, describe_simulator, make_simulator, simulator_feedback
from shopping_companion.envs.tools import MEMORY_TOOLS, PRODUCT_TOOLS, ToolBox, truncate_text
from shopping_companion.judges.base import Judge, accuracy, success
from shopping_companion.llm.base import AssistantMessage, CircuitOpenError, StructuredToolCall
from shopping_companion.rewards import compute_reward, judge_stage, score_stage
from shopping_companion.rewards.total import RewardFn
from shopping_companion.rewards.outcome import stage1_reward
from shopping_companion.types import (
    EpisodeResult,
    Message,
    Session,
    StageResult,
    Step,
    Task,
    TerminationReason,
    ToolCall,
    ToolResult,
    Trajectory,
    Verdict,
)

Mode = Literal["two_stage", "one_stage", "oracle"]


class EnvConfig(BaseModel):
    """Environment settings (docs/architecture.md, the environment).

    ``mode``: ``two_stage`` | ``one_stage`` | ``oracle`` (module docstring).
    ``hint``: user-simulator feedback between the stages, ``none`` | ``low`` | ``high``; only
    ``two_stage`` has a stage boundary, so another mode with a hint other than ``none`` is a
    validation error.
    ``simulator``: a registered simulator name (``"scripted"``) or ``"module:attr"``; used when no
    simulator object is passed to the environment. ``simulator_seed``: its seed (recorded).
    ``max_turns``: assistant turns allowed per stage (paper: 20), 1..200.
    ``max_observation_chars``: every observation (tool result, error, reminder) longer than this
    is cut with a visible marker; >= 200.
    ``max_calls_per_turn``: tool calls executed per assistant turn (1..256); the rest get an
    error observation.
    ``reject_repeated_calls``: a call asking for the same as an earlier call of the same stage
    (same tool and arguments, id lists compared as sets, queries case- and space-folded) is not run
    again and gets an error observation.
    ``max_tool_arg_depth`` (1..64, default 16), ``max_tool_arg_chars`` (characters of the
    arguments' compact JSON, >= 64, default 65,536) and ``max_tool_arg_items`` (list elements plus
    object entries over the whole arguments value, >= 1, default 1,000): bounds on one call's
    decoded arguments (:class:`~shopping_companion.envs.parsing.ArgumentLimits`); a call over one
    is not run and gets an error observation naming the field and its value (not a format error:
    the JSON was valid). Nothing deeper reaches a trajectory or the results file.
    ``max_invalid_turns``: consecutive invalid turns after which a stage ends (>= 1, default 3;
    termination ``invalid_output``, or ``length`` when the last one was cut off by the token
    limit). A turn is *invalid* when no tool call of it reached a tool (calls that were unparsable,
    over the argument bounds, written only in the reasoning, or beyond ``max_calls_per_turn`` do
    not count; a call a tool rejected for its arguments, or a repeat refused by
    ``reject_repeated_calls``, does) and it holds no answer, or when it was truncated
    (finish_reason ``length``). The turn limit wins when both end the stage on the same turn.
    ``max_prompt_tokens``: optional budget (>= 256 tokens) on the whole prompt of the next turn;
    before it would be exceeded, older tool observations are clipped with a visible
    ``[clipped N chars]`` marker (``None``, the default: never). Estimated without a tokenizer as
    characters / ``prompt_chars_per_token`` (> 0, default 3.0: conservative for JSON and
    non-English text) plus 4 per message, or by the environment's ``token_counter``. Leave it
    None for token-level GRPO, which re-renders earlier turns and has its own response budget.
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    mode: Mode = "two_stage"
    hint: Literal["none", "low", "high"] = "none"
    simulator: str = "scripted"
    simulator_seed: int = 0
    max_turns: int = Field(default=20, ge=1, le=200)
    max_observation_chars: int = Field(default=12_000, ge=200)
    max_calls_per_turn: int = Field(default=16, ge=1, le=256)
    reject_repeated_calls: bool = True
    max_tool_arg_depth: int = Field(default=16, ge=1, le=64)
    max_tool_arg_chars: int = Field(default=65_536, ge=64)
    max_tool_arg_items: int = Field(default=1_000, ge=1)
    max_invalid_turns: int = Field(default=3, ge=1)
    max_prompt_tokens: int | None = Field(default=None, ge=256)
    prompt_chars_per_token: float = Field(default=3.0, gt=0)

    @model_validator(mode="after")
    def _hint_needs_two_stages(self) -> "EnvConfig":
        if self.hint != "none" and self.mode != "two_stage":
            raise ValueError(
                f"hint={self.hint!r} needs mode='two_stage' (the user simulator speaks between the stages); "
                f"got mode={self.mode!r}"
            )
        return self


@dataclass
class StepResult:
    """What :meth:`ShoppingCompanionEnv.step` returns.

    ``observations``: the messages appended after the action (tool results, reminders, or the
    opening messages of the next stage), as OpenAI-style dicts. ``reward``: the ending stage's
    total reward (Eq. 12) when a stage ended on this step, else 0.0. ``terminated``: the episode
    is over. ``truncated``: the stage that ended on this step hit ``max_turns``. ``info``: at
    least ``stage`` and ``turn``; when a stage ends also ``stage_done``, ``termination``,
    ``verdict``, ``reward_breakdown`` (and ``next_stage``, ``feedback`` on the stage change).
    When the judge failed, ``reward`` is 0.0 and ``info["judge_failed"]`` says why: such a stage
    is not scored (the episode's ``error`` is set) and must not be trained on as a 0.
    """

    observations: list[dict[str, Any]]
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any] = field(default_factory=dict)


_SURROGATES = re.compile("[\ud800-\udfff]")
#: The prefix of the format error recorded for a truncated turn (finish_reason ``length``).
TRUNCATED_ERROR = "output_truncated"


def _clean(text: Any) -> str:
    """Any value → str without lone surrogates (bytes decoded with replacement)."""
    return clean_text(text)


def _has_surrogates(text: str) -> bool:
    return _SURROGATES.search(text) is not None


def _as_message(action: Any) -> AssistantMessage:
    """Coerce an action (str, AssistantMessage, dict, bytes, anything) to a clean AssistantMessage."""
    if isinstance(action, AssistantMessage):
        msg = action
    elif isinstance(action, dict):
        try:
            msg = AssistantMessage.model_validate(action)
        except Exception:
            msg = AssistantMessage(content=_clean(action.get("content")))
    else:
        msg = AssistantMessage(content=_clean(action))
    calls = [
        StructuredToolCall(id=_clean(c.id), name=_clean(c.name), arguments=_clean(c.arguments)) for c in msg.tool_calls
    ]
    return msg.model_copy(
        update={
            "content": _clean(msg.content),
            "reasoning": None if msg.reasoning is None else _clean(msg.reasoning),
            "finish_reason": None if msg.finish_reason is None else _clean(msg.finish_reason),
            "tool_calls": calls,
        }
    )


def _canonical_arg(name: str, value: object) -> object:
    """Argument values that ask for the same thing compare equal: id lists as sorted sets
    (``["a", "a"]`` is ``["a"]``), query text case- and space-folded."""
    if name.endswith("_ids") and isinstance(value, list) and all(isinstance(v, str) for v in value):
        return sorted({v.strip() for v in value})
    if name == "queries" and isinstance(value, list) and all(isinstance(v, str) for v in value):
        return sorted({" ".join(v.lower().split()) for v in value})
    if name == "query" and isinstance(value, str):
        return " ".join(value.lower().split())
    return value


def _call_key(call: ToolCall) -> str:
    """What makes two calls the same request (``reject_repeated_calls``): the tool name and the
    canonical arguments (:func:`_canonical_arg`), so padding an id list with repeats is no new call."""
    try:
        canon = {k: _canonical_arg(k, v) for k, v in call.arguments.items()}
        args = json.dumps(canon, sort_keys=True, ensure_ascii=False, default=str)
    except Exception:
        args = repr(call.arguments)
    return f"{call.name}\x00{args}"


def _detach_jvm_thread() -> None:
    if threading.current_thread() is threading.main_thread():
        return
    try:
        from shopping_companion.catalog.jvm import detach_thread

        detach_thread()
    except Exception:  # no JVM in this process, or jnius not installed: nothing to detach
        pass


class ShoppingCompanionEnv:
    """One episode of the Shopping Companion task (two-stage, one-stage or oracle).

    Args:
        task: the benchmark instance.
        tools: a :class:`ToolBox` over the catalog and this user's memory store (the memory may be
            None in ``oracle`` mode when ``sessions`` is given).
        judge: produces the :class:`Verdict` each stage's outcome reward needs.
        config: :class:`EnvConfig`.
        reward_fn: ``(task, trajectory, verdict) -> RewardBreakdown``; default Eq. 12.
        simulator: a user simulator object (``feedback(task, prefs, hint)``); default built from
            ``config.simulator`` / ``config.simulator_seed`` by
            :func:`~shopping_companion.envs.simulator.make_simulator`.
        sessions: ``session_id -> Session`` used by ``oracle`` mode to show the needle sessions
            when ``tools.memory`` is None (e.g. a benchmark's session pool).
        token_counter: optional ``(messages, tool_schemas) -> int`` prompt-length counter (e.g.
            a tokenizer's chat template) for ``max_prompt_tokens``; default the tokenizer-free
            estimate of :meth:`estimate_prompt_tokens`.
        hold_handover: in ``two_stage`` mode, stop after stage 1 is judged instead of asking the
            user simulator and opening stage 2 in the same step: that step returns no messages
            and ``info["handover"] = True``, and :meth:`hand_over` (e.g. a separate solver step of
            an eval framework) does the rest. Same episode either way.

    Raises ``ValueError`` for an unknown simulator name and (at :meth:`reset`) for an ``oracle``
    episode whose needle sessions cannot be found.
    """

    def __init__(
        self,
        task: Task,
        tools: ToolBox,
        judge: Judge,
        config: EnvConfig | None = None,
        reward_fn: RewardFn = compute_reward,
        simulator: Any = None,
        sessions: Mapping[str, Session] | None = None,
        token_counter: Callable[[list[dict[str, Any]], list[dict[str, Any]]], int] | None = None,
        hold_handover: bool = False,
    ) -> None:
        self.task = task
        self.hold_handover = hold_handover
        self.awaiting_handover = False
        self.token_counter = token_counter
        self.tools = tools
        self.judge = judge
        self.config = config or EnvConfig()
        self.reward_fn = reward_fn
        self.simulator = (
            simulator
            if simulator is not None
            else make_simulator(self.config.simulator, seed=self.config.simulator_seed)
        )
        self.sessions = sessions
        self._started = False
        self._t0 = 0.0
        self.results: list[StageResult] = []
        self.stage: int = 1
        self.done = False
        self._traj: Trajectory | None = None
        self._abort_error: str | None = None
        self._seen_calls: dict[str, str] = {}
        self._feedback: SimulatorFeedback | None = None
        self._pref_verdict: Verdict | None = None
        self._judge_error: str | None = None
        self._seed: int | None = None
        self._invalid_run = 0
        c = self.config
        self._limits = ArgumentLimits(
            max_depth=c.max_tool_arg_depth, max_chars=c.max_tool_arg_chars, max_items=c.max_tool_arg_items
        )

    # ------------------------------------------------------------------ API

    @property
    def mode(self) -> Mode:
        return self.config.mode

    @property
    def allowed_tools(self) -> tuple[str, ...]:
        """The tool names of the current stage (by mode and stage)."""
        if self.mode == "one_stage":
            return MEMORY_TOOLS + PRODUCT_TOOLS
        if self.mode == "oracle":
            return PRODUCT_TOOLS
        return MEMORY_TOOLS if self.stage == 1 else PRODUCT_TOOLS

    @property
    def tool_schemas(self) -> list[dict[str, Any]]:
        """OpenAI function schemas of the tools of the current stage."""
        return self.tools.schemas(self.allowed_tools)

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The current stage's chat so far, as OpenAI-style dicts (what the policy sees).

        An assistant turn's separate reasoning is kept on the trajectory's message (key
        ``reasoning_content``) but left out here: OpenAI-compatible reasoning APIs do not take it
        back (some reject it) and Qwen3-style templates drop past reasoning anyway."""
        if self._traj is None:
            raise RuntimeError("call reset() first")
        return [m.model_dump(exclude_none=True, exclude={"reasoning_content"}) for m in self._traj.messages]

    @property
    def trajectory(self) -> Trajectory:
        if self._traj is None:
            raise RuntimeError("call reset() first")
        return self._traj

    @property
    def feedback(self) -> SimulatorFeedback | None:
        """The user simulator's answer of this episode (None before stage 2 / in other modes)."""
        return self._feedback

    def reset(self, seed: int | None = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Start the episode (stage 1 in ``two_stage``, the single stage otherwise).

        Returns ``(messages, info)``; ``info`` has ``stage``, ``mode``, ``hint``, ``tools`` and
        ``seed``. The environment itself is deterministic: ``seed`` is only recorded (the user
        simulator has its own seed).
        """
        self.results = []
        self.done = False
        self.awaiting_handover = False
        self._started = True
        self._t0 = time.perf_counter()
        self._abort_error = None
        self._feedback = None
        self._pref_verdict = None
        self._judge_error = None
        self._seed = seed
        self._start_stage(1 if self.mode == "two_stage" else 2)
        return self.messages, {
            "stage": self.stage,
            "mode": self.mode,
            "hint": self.config.hint,
            "tools": list(self.allowed_tools),
            "seed": seed,
        }

    def step(self, action: str | AssistantMessage | Any) -> StepResult:
        """Apply one assistant turn. Never raises for malformed model output.

        The turn's ``finish_reason`` and separate ``reasoning`` are recorded on its
        :class:`~shopping_companion.types.Step`; the reasoning is also kept on the assistant
        message of the trajectory (key ``reasoning_content``, not sent back to the policy: see
        :attr:`messages`). A turn cut off by the token limit (``finish_reason == "length"``) runs
        none of its tool calls (each gets an error observation saying the output was cut off); a
        complete answer in it still ends the stage. After ``max_invalid_turns`` consecutive
        invalid turns (no call reached a tool and no answer, or a truncated turn) the stage ends
        with termination ``invalid_output`` (``length`` when the last of them was truncated),
        judged and scored like a ``max_turns`` end; the turn limit takes precedence when both
        happen on the same turn. With ``max_prompt_tokens`` set, older tool observations are
        clipped before the next prompt would exceed it (:meth:`_clip_prompt`).

        Raises ``RuntimeError`` only for API misuse: before :meth:`reset` or after the episode
        ended.
        """
        traj = self._open_stage("step()")
        msg = _as_message(action)
        cfg = self.config
        turn = len(traj.steps)
        prefix = f"s{self.stage}t{turn}"
        parsed = parse_action(
            msg.content,
            structured=msg.tool_calls or None,
            call_id_prefix=prefix,
            reasoning=msg.reasoning,
            limits=self._limits,
        )
        truncated_turn = msg.finish_reason == "length"
        flags = format_flags(parsed)
        if truncated_turn and not parsed.has_answer:
            flags.errors.append(
                f"{TRUNCATED_ERROR}: the output was cut off at the token limit (finish_reason length) "
                "before the turn ended; its tool calls were not run"
            )
        step = Step(
            assistant_text=msg.content,
            tool_calls=parsed.tool_calls,
            format=flags,
            prompt_tokens=msg.prompt_tokens,
            completion_tokens=msg.completion_tokens,
            latency_s=msg.latency_s,
            finish_reason=msg.finish_reason,
            reasoning=msg.reasoning,
        )
        assistant: dict[str, Any] = {"role": "assistant", "content": msg.content}
        if msg.reasoning:
            assistant["reasoning_content"] = msg.reasoning
        if msg.tool_calls:
            assistant["tool_calls"] = _assistant_tool_calls(msg, parsed, None)
        at = len(traj.messages)
        traj.messages.append(Message(**assistant))
        traj.steps.append(step)
        base_info: dict[str, Any] = {
            "stage": self.stage,
            "turn": turn,
            "prompt_tokens": msg.prompt_tokens,
            "completion_tokens": msg.completion_tokens,
            "finish_reason": msg.finish_reason,
        }

        if parsed.has_answer:
            traj.final_answer = parsed.answer
            self._invalid_run = 0
            result = self._end_stage("answered")
            result.info = {**base_info, **result.info}
            return result

        if truncated_turn:
            results, n_run = self._truncated_results(parsed), 0
        else:
            results, n_run = self._run_calls(parsed)
        step.tool_results.extend(results)
        if msg.tool_calls:  # the ids of the assistant message and of its tool messages agree
            traj.messages[at] = Message(**{**assistant, "tool_calls": _assistant_tool_calls(msg, parsed, results)})
        n_obs = len(traj.messages)
        for res in step.tool_results:
            traj.messages.append(Message(role="tool", content=res.content, name=res.name, tool_call_id=res.call_id))
        if not step.tool_results:
            errors = list(flags.errors) if truncated_turn else list(parsed.errors)
            text = truncate_text(prompts.no_action_feedback(errors), cfg.max_observation_chars)
            traj.messages.append(Message(role="user", content=text))
        self._clip_prompt()
        observations = [m.model_dump(exclude_none=True, exclude={"reasoning_content"}) for m in traj.messages[n_obs:]]

        invalid = truncated_turn or n_run == 0
        self._invalid_run = self._invalid_run + 1 if invalid else 0
        base_info["invalid_turns"] = self._invalid_run
        if len(traj.steps) >= cfg.max_turns:
            reason: TerminationReason | None = "max_turns"
        elif self._invalid_run >= cfg.max_invalid_turns:
            reason = "length" if truncated_turn else "invalid_output"
        else:
            reason = None
        if reason is not None:
            result = self._end_stage(reason)
            result.observations = observations + result.observations
            result.info = {**base_info, **result.info}
            return result
        return StepResult(observations, 0.0, False, False, base_info)

    def _open_stage(self, caller: str) -> Trajectory:
        """The trajectory of the stage in progress; ``RuntimeError`` naming ``caller`` before
        :meth:`reset`, after the episode ended, or at the end of stage 1 before :meth:`hand_over`."""
        if not self._started or self._traj is None:
            raise RuntimeError(f"call reset() before {caller}")
        if self.done:
            raise RuntimeError("episode is over; call reset() to start a new one")
        if self.awaiting_handover:
            raise RuntimeError("stage 1 has ended; call hand_over() before the next step")
        return self._traj

    def end_stage_model_failure(self, reason: TerminationReason, message: str) -> StepResult:
        """End the current stage because the model could not go on, e.g. the server refused the
        prompt as longer than the model's context (``reason="context_length"``).

        This is a *model* failure, not a backend error: the stage keeps what it did so far and is
        judged and scored like a ``max_turns`` end (in ``two_stage`` mode a failed stage 1 hands
        over to stage 2, whose prompt starts afresh). ``message`` (e.g. the server's error text,
        cleaned and cut to 500 characters) is recorded in ``info["model_failure"]`` of the
        returned :class:`StepResult`. ``reason`` must be one of ``context_length``, ``length``,
        ``invalid_output``, ``max_turns`` or ``token_budget`` (``ValueError`` otherwise);
        ``RuntimeError`` before :meth:`reset` or after the episode ended.
        """
        traj = self._open_stage("end_stage_model_failure()")
        allowed = ("context_length", "length", "invalid_output", "max_turns", "token_budget")
        if reason not in allowed:
            raise ValueError(f"reason: must be one of {allowed} (a model failure), got {reason!r}")
        stage, turn = self.stage, len(traj.steps)
        result = self._end_stage(reason)
        result.info = {"stage": stage, "turn": turn, **result.info, "model_failure": _clean(message)[:500]}
        return result

    async def astep(self, action: str | AssistantMessage | Any) -> StepResult:
        """Async :meth:`step`: runs in a worker thread (tools release the GIL in Lucene and numpy),
        then detaches that thread from the JVM, so ``asyncio.gather`` over many episodes sharing
        one ``ProductSearch`` / ``MemoryStore`` / ``Embedder`` is safe."""

        def work() -> StepResult:
            try:
                return self.step(action)
            finally:
                _detach_jvm_thread()

        return await asyncio.to_thread(work)

    async def aend_stage_model_failure(self, reason: TerminationReason, message: str) -> StepResult:
        """Async :meth:`end_stage_model_failure` (judging runs in a worker thread, detached from
        the JVM afterwards, like :meth:`astep`)."""

        def work() -> StepResult:
            try:
                return self.end_stage_model_failure(reason, message)
            finally:
                _detach_jvm_thread()

        return await asyncio.to_thread(work)

    def abort(self, reason: TerminationReason, error: str) -> None:
        """End the episode early (e.g. the backend failed after its retries). Nothing is scored."""
        if self._traj is not None and not self.done:
            self._traj.termination = reason
        self.done = True
        self._abort_error = error

    def episode_result(self, policy: str, trial: int = 0, seed: int = 0) -> EpisodeResult:
        """The judged, rewarded episode (one line of results.jsonl).

        ``acc``: two_stage → stage-1 m1/F; one_stage → m1/F of ``preference_verdict``; oracle →
        1.0 (not applicable, module docstring); 0.0 when the episode ended before it could be
        judged (then ``error`` is set). ``succ``: the stage-2 verdict's success (and stage 1's on a
        ``needle_removed`` variant, :func:`episode_scores`). ``simulator``:
        name, model, seed, hint, whether it was consulted, its feedback and how it was produced.
        """
        error = self._abort_error or self._judge_error
        acc, succ = episode_scores(self.mode, self.results, self._pref_verdict, self.task)
        sim: dict[str, Any] = {
            **describe_simulator(self.simulator),
            "hint": self.config.hint,
            "consulted": self._feedback is not None and self.config.hint != "none",
        }
        if self._feedback is not None:
            sim.update(self._feedback.to_dict())
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
            succ=succ,
            wall_s=round(time.perf_counter() - self._t0, 4),
            error=error,
            simulator=sim,
            preference_verdict=self._pref_verdict,
        )

    # ------------------------------------------------------------------ internals

    def _oracle_sessions(self) -> list[Session]:
        ids = list(self.task.needle_session_ids)
        found: dict[str, Session] = {}
        mem = self.tools.memory
        if mem is not None:
            for i in range(0, len(ids), 10):
                got, _unknown = mem.view(ids[i : i + 10])
                found.update({s.session_id: s for s in got})
        if self.sessions is not None:
            for sid in ids:
                if sid not in found and sid in self.sessions:
                    found[sid] = self.sessions[sid]
        missing = [sid for sid in ids if sid not in found]
        if missing:
            raise ValueError(
                f"oracle mode: needle sessions {missing} of task {self.task.task_id!r} are neither in the "
                "memory store nor in `sessions`"
            )
        dates = {r.session_id: r.date for r in self.task.history}
        out = [found[sid] for sid in ids]
        out = [
            s if s.date or sid not in dates else s.model_copy(update={"date": dates[sid]}) for sid, s in zip(ids, out)
        ]
        return sorted(out, key=lambda s: (s.date or "", ids.index(s.session_id)))

    def _start_stage(self, stage: int) -> None:
        self.stage = stage
        self._seen_calls = {}
        self._invalid_run = 0
        n = self.config.max_turns
        if self.mode == "one_stage":
            system, user = prompts.one_stage_system(n), prompts.one_stage_user(self.task)
        elif self.mode == "oracle":
            system, user = prompts.oracle_system(n), prompts.oracle_user(self.task, self._oracle_sessions())
        elif stage == 1:
            system, user = prompts.stage1_system(n), prompts.stage1_user(self.task)
        else:
            prev = self.results[-1].trajectory if self.results else None
            prefs = prev.identified_preferences if prev else None
            fb = self._feedback.text if self._feedback is not None else None
            system, user = prompts.stage2_system(n), prompts.stage2_user(self.task, prefs, fb)
        self._traj = Trajectory(
            task_id=self.task.task_id,
            stage=stage,  # type: ignore[arg-type]
            mode=self.mode,
            messages=[Message(role="system", content=system), Message(role="user", content=user)],
        )

    def _error_result(self, call_id: str, name: str, error: str) -> ToolResult:
        content = truncate_text(json.dumps({"error": error}, ensure_ascii=False), self.config.max_observation_chars)
        return ToolResult(call_id=call_id, name=name, content=content, error=error)

    def _truncated_results(self, parsed: Any) -> list[ToolResult]:
        """A truncated turn (finish_reason ``length``): one error observation per call and per
        malformed block (with the parser's id), nothing run."""
        why = (
            "not run: your output was cut off at the token limit (finish_reason length) before the "
            "turn ended, so this call may be incomplete; write shorter turns (think less) and call again"
        )
        out = [self._error_result(c.call_id, c.name, why) for c in parsed.tool_calls]
        for err, cid in zip(parsed.tool_errors, parsed.tool_error_ids):
            out.append(self._error_result(cid, "invalid_tool_call", f"{err}; {why}"))
        return out[: self.config.max_calls_per_turn + 1]

    def _run_calls(self, parsed: Any) -> tuple[list[ToolResult], int]:
        """Error observations for malformed blocks, then the calls (limit, argument bounds,
        repeats, execution), each carrying the id :func:`parse_action` gave it. Returns
        ``(results, n_run)``: ``n_run`` counts the calls that reached a tool or were refused as
        repeats (a turn with none is an invalid turn).

        Items beyond ``max_calls_per_turn``: a structured call (``parsed.structured_ids``: each
        needs a tool response) gets its own short error observation; text-block items are merged
        into one observation carrying the first such item's id. A call whose arguments broke the
        bounds (``parsed.rejected``) gets an error observation naming the limit and is not run."""
        cfg = self.config
        limit = cfg.max_calls_per_turn
        structured_ids = set(parsed.structured_ids)
        n_run = 0
        out: list[ToolResult] = []
        over_text: list[str] = []  # text-block items beyond the limit, merged into one observation
        items: list[tuple[str, Any]] = [("bad", (e, cid)) for e, cid in zip(parsed.tool_errors, parsed.tool_error_ids)]
        items += [("call", c) for c in parsed.tool_calls]
        for k, (kind, obj) in enumerate(items):
            if k >= limit:
                if kind == "bad" and obj[1] in structured_ids:
                    out.append(
                        self._error_result(
                            obj[1], "invalid_tool_call", f"not read: at most {limit} tool calls per turn"
                        )
                    )
                elif kind == "call" and obj.call_id in structured_ids:
                    out.append(
                        self._error_result(obj.call_id, obj.name, f"not run: at most {limit} tool calls per turn")
                    )
                else:
                    over_text.append(obj.call_id if kind == "call" else obj[1])
                continue
            if kind == "bad":
                err, cid = obj
                out.append(self._error_result(cid, "invalid_tool_call", err))
                continue
            call: ToolCall = obj
            if call.call_id in parsed.rejected:
                out.append(
                    self._error_result(
                        call.call_id, call.name, f"{call.name}: not run: {parsed.rejected[call.call_id]}"
                    )
                )
                continue
            n_run += 1
            key = _call_key(call)
            if cfg.reject_repeated_calls and key in self._seen_calls:
                out.append(
                    self._error_result(
                        call.call_id,
                        call.name,
                        f"{call.name}: identical to call {self._seen_calls[key]} made earlier in this stage "
                        "(same arguments); it was not run again, its result is shown above. Change the "
                        "arguments to get new information.",
                    )
                )
                continue
            self._seen_calls[key] = call.call_id
            res = self.tools.execute(call, self.allowed_tools, max_chars=cfg.max_observation_chars)
            out.append(
                res if not _has_surrogates(res.content) else res.model_copy(update={"content": _clean(res.content)})
            )
        if over_text:
            out.append(
                self._error_result(
                    over_text[0],
                    "invalid_tool_call",
                    f"{len(over_text)} more tool call(s) in this turn were not run: at most {limit} per turn",
                )
            )
        return out, n_run

    def _clip_prompt(self) -> None:
        """With ``max_prompt_tokens`` set: while the estimated prompt of the next turn (messages
        plus tool schemas, :meth:`estimate_prompt_tokens`) exceeds it, cut tool observations of
        the current stage, oldest first, each to its first ``_CLIP_KEEP`` characters plus the
        marker ``[clipped N chars]``. The messages are changed in place (they are what the policy
        sees next); the steps' :class:`ToolResult` keep the full text and ids the agent was shown
        when the call ran. Stops when nothing is left to clip (the server may then refuse the
        prompt: termination ``context_length``)."""
        budget = self.config.max_prompt_tokens
        if budget is None or self._traj is None:
            return
        msgs = self._traj.messages
        est = self.estimate_prompt_tokens()
        if est <= budget:
            return
        cpt = self.config.prompt_chars_per_token
        for m in msgs:
            if est <= budget:
                break
            if m.role != "tool" or len(m.content) <= _CLIP_KEEP + 40 or _CLIP_MARK in m.content[-40:]:
                continue
            excess_chars = int((est - budget) * cpt) + 1
            keep = max(_CLIP_KEEP, len(m.content) - excess_chars - 40)
            if keep >= len(m.content) - 40:
                continue
            n = len(m.content) - keep
            m.content = m.content[:keep] + f"\n…[clipped {n} chars]"
            est = self.estimate_prompt_tokens()

    def estimate_prompt_tokens(self) -> int:
        """The tokenizer-free estimate of the next prompt's length in tokens used by
        ``max_prompt_tokens``: the ``token_counter`` given to the environment, called on
        ``(messages, tool_schemas)``, when there is one; else ``ceil(chars / prompt_chars_per_token)``
        over every message's content plus the JSON of the tool schemas, plus 4 tokens per message
        (role and template markers)."""
        if self._traj is None:
            return 0
        if self.token_counter is not None:
            return int(self.token_counter(self.messages, self.tool_schemas))
        chars = sum(len(m.content) for m in self._traj.messages)
        chars += self._schema_chars()
        return math.ceil(chars / self.config.prompt_chars_per_token) + 4 * len(self._traj.messages)

    def _schema_chars(self) -> int:
        key = self.allowed_tools
        if key not in _SCHEMA_CHARS:
            _SCHEMA_CHARS[key] = len(json.dumps(self.tool_schemas, ensure_ascii=False))
        return _SCHEMA_CHARS[key]

    def _end_stage(self, reason: TerminationReason) -> StepResult:
        traj = self._traj
        assert traj is not None
        traj.termination = reason
        info: dict[str, Any] = {"stage": self.stage, "stage_done": True, "termination": reason}
        if traj.final_answer is not None:
            if self.stage == 1 or self.mode == "one_stage":
                prefs, err = parse_preferences(traj.final_answer)
                traj.identified_preferences = prefs if err is None else None
                if err:
                    info["answer_error"] = err
            if self.stage == 2:
                ids, malformed = extract_rec_ids(traj.final_answer)
                traj.recommended_ids = ids
                if malformed:
                    info["malformed_rec_markers"] = malformed
        scored = score_episode_stage(self.judge, self.reward_fn, self.task, traj, self.mode)
        if scored.error is not None:  # not scored (never as a 0): recorded on the episode
            self._judge_error = scored.error
            info["judge_failed"] = scored.error
        if scored.preference_verdict is not None:
            self._pref_verdict = scored.preference_verdict
            info["preference_verdict"] = scored.preference_verdict.model_dump()
        verdict, reward = scored.result.verdict, scored.result.reward
        self.results.append(scored.result)
        info["verdict"] = verdict.model_dump()
        info["reward_breakdown"] = reward.model_dump()
        truncated = reason == "max_turns"
        if self.stage == 1 and self.mode == "two_stage":
            self.awaiting_handover = True
            if self.hold_handover:
                info["handover"] = True
                return StepResult([], reward.total, False, truncated, info)
            info["feedback"] = self._hand_over()
            info["next_stage"] = 2
            return StepResult(self.messages, reward.total, False, truncated, info)
        self.done = True
        return StepResult([], reward.total, True, truncated, info)

    def hand_over(self) -> list[dict[str, Any]]:
        """Between the stages of a ``hold_handover`` episode: ask the user simulator (at the
        configured hint level; nothing is asked at ``none``) and open stage 2. Returns stage 2's
        opening messages; the feedback is :attr:`feedback`. Raises ``RuntimeError`` when the
        episode is not waiting at the stage boundary."""
        if not self.awaiting_handover:
            raise RuntimeError("hand_over(): the episode is not at the end of stage 1")
        self._hand_over()
        return self.messages

    def _hand_over(self) -> str | None:
        prev = self.results[-1].trajectory
        self._feedback = (
            simulator_feedback(self.simulator, self.task, prev.identified_preferences, self.config.hint)
            if self.config.hint != "none"
            else SimulatorFeedback(text=None, source="none")
        )
        self.awaiting_handover = False
        self._start_stage(2)
        return self._feedback.text


_SCHEMA_CHARS: dict[tuple[str, ...], int] = {}
_CLIP_KEEP = 200
_CLIP_MARK = "chars]"


def _assistant_tool_calls(msg: AssistantMessage, parsed: Any, results: list[ToolResult] | None) -> list[dict[str, Any]]:
    """The ``tool_calls`` of the assistant message of a turn whose server returned structured
    calls, with the ids :func:`parse_action` gave out (unique within the turn).

    Before the calls ran (``results`` None: a turn with an answer, nothing runs) every structured
    call; after, exactly the calls the turn's tool messages answer: the structured calls in the
    server's order, then text calls (arguments as JSON) and malformed blocks (named like their
    observation, arguments ``{}``) in the order of their tool messages. So every tool message
    answers a call of the assistant message and every call there is answered, once — what an
    OpenAI-strict server requires of the next request."""

    def entry(cid: str, name: str, arguments: str) -> dict[str, Any]:
        return {"id": cid, "type": "function", "function": {"name": name, "arguments": arguments}}

    structured = [entry(cid, c.name, c.arguments) for c, cid in zip(msg.tool_calls, parsed.structured_ids)]
    if results is None:
        return structured
    names = {r.call_id: r.name for r in results}
    out = [e for e in structured if e["id"] in names]
    listed = {e["id"] for e in out}
    texts = {c.call_id: c for c in parsed.tool_calls}
    for cid, name in names.items():
        if cid in listed:
            continue
        c = texts.get(cid)
        out.append(
            entry(cid, name, "{}") if c is None else entry(cid, c.name, json.dumps(c.arguments, ensure_ascii=False))
        )
    return out


@dataclass
class ScoredStage:
    """One judged and rewarded stage (:func:`score_episode_stage`): the stage ``result``; the
    ``preference_verdict`` (stage-1 fields judged on a ``one_stage`` trajectory, None otherwise or
    when that judging failed); ``error``, the judge failure that leaves the episode unscored (None
    when it was scored)."""

    result: StageResult
    preference_verdict: Verdict | None = None
    error: str | None = None


def score_episode_stage(judge: Judge, reward_fn: RewardFn, task: Task, traj: Trajectory, mode: str) -> ScoredStage:
    """Judge and reward one finished stage trajectory of a ``mode`` episode, as the environment
    does when a stage ends (and ``shopcomp rescore`` does for a stored one): :func:`score_stage`;
    a judge failure gives a ``failed`` verdict (never a 0 score); a ``one_stage`` trajectory is
    also judged as stage 1 for Acc, its R1 logged as reward component ``"R1"``.
    ``CircuitOpenError`` (the judge's endpoint is down) propagates."""
    verdict, reward, error = score_stage(judge, reward_fn, task, traj, reraise=(CircuitOpenError,))
    if verdict is None:
        verdict = Verdict(
            judge=str(getattr(judge, "name", "judge")),
            stage=traj.stage,
            F=len(task.preferences),
            N=task.n_products,
            b=1 if task.task_type == "addon" else 0,
            failed=True,
            reasons=[error or "judge failed"],
        )
    pref: Verdict | None = None
    if mode == "one_stage" and not verdict.failed:
        v1, error1 = judge_stage(judge, task, traj.model_copy(update={"stage": 1}), reraise=(CircuitOpenError,))
        if v1 is not None and not v1.failed:
            pref = v1
            reward.components["R1"] = stage1_reward(v1)
        error = error1 or error
    return ScoredStage(StageResult(trajectory=traj, verdict=verdict, reward=reward), pref, error)


def episode_scores(
    mode: str, results: list[StageResult], preference_verdict: Verdict | None, task: Task | None = None
) -> tuple[float, bool]:
    """``(acc, succ)`` of an episode from its stage results (:meth:`ShoppingCompanionEnv.episode_result`):
    Acc is m1/F of stage 1 (two_stage), of ``preference_verdict`` (one_stage) or 1.0 (oracle);
    Succ is the stage-2 verdict's success; a missing or failed verdict gives 0.0 / False.

    On a ``needle_removed`` stress variant of ``task`` (no preference left in the history: what it
    tests is reporting none) Succ also needs the stage-1 verdict's success (``preference_verdict``
    in one_stage; oracle has no stage 1): stage 2 asks only for the product type, which an agent
    that invented preferences in stage 1 still gets right (docs/benchmark.md, "Stress variants")."""
    stage1 = next((r for r in results if r.trajectory.stage == 1), None)
    stage2 = next((r for r in results if r.trajectory.stage == 2), None)
    v1 = preference_verdict if mode == "one_stage" else (stage1.verdict if stage1 else None)
    acc = 1.0 if mode == "oracle" else _acc(v1)
    succ = stage2 is not None and not stage2.verdict.failed and success(stage2.verdict)
    if succ and task is not None and task.stress == "needle_removed" and mode != "oracle":
        succ = v1 is not None and not v1.failed and bool(v1.success)
    return acc, succ


def _acc(v: Verdict | None) -> float:
    """:func:`~shopping_companion.judges.base.accuracy` of a stage-1 verdict; 0.0 when there is
    none or it failed (the episode's ``error`` is then set and it is not scored)."""
    return 0.0 if v is None or v.failed else accuracy(v)
