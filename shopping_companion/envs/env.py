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
``max_calls_per_turn`` calls run per turn; a turn with neither a call nor an answer gets a
user-role reminder listing the format problems found. Observations longer than
``max_observation_chars`` are cut with a visible marker. Lone UTF-16 surrogates in model output
(possible from JSON ``\\ud800`` escapes) are replaced by U+FFFD so results always serialise.

One instance per episode; all state is on the instance. :meth:`ShoppingCompanionEnv.astep` runs
:meth:`step` in a worker thread (and detaches that thread from the JVM afterwards) so many episodes
can share one ``ProductSearch`` / ``MemoryStore`` / ``Embedder``.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Mapping, Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator

from shopping_companion.envs import prompts
from shopping_companion.envs.parsing import (
    extract_rec_ids,
    format_flags,
    parse_action,
    parse_preferences,
)
from shopping_companion.envs.simulator import (
    SimulatorFeedback,
    describe_simulator,
    make_simulator,
    simulator_feedback,
)
from shopping_companion.envs.tools import MEMORY_TOOLS, PRODUCT_TOOLS, ToolBox, truncate_text
from shopping_companion.judges.base import JudgeFailedError
from shopping_companion.llm.base import AssistantMessage, StructuredToolCall
from shopping_companion.rewards import compute_reward
from shopping_companion.rewards.outcome import stage1_reward
from shopping_companion.types import (
    EpisodeResult,
    Message,
    RewardBreakdown,
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


class Judge(Protocol):
    name: str

    def judge(self, task: Task, trajectory: Trajectory) -> Verdict: ...


class EnvConfig(BaseModel):
    """Environment settings (DESIGN.md §6).

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
    """

    model_config = ConfigDict(extra="forbid")
    mode: Mode = "two_stage"
    hint: Literal["none", "low", "high"] = "none"
    simulator: str = "scripted"
    simulator_seed: int = 0
    max_turns: int = Field(default=20, ge=1, le=200)
    max_observation_chars: int = Field(default=12_000, ge=200)
    max_calls_per_turn: int = Field(default=16, ge=1, le=256)
    reject_repeated_calls: bool = True

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


RewardFn = Callable[[Task, Trajectory, Verdict], RewardBreakdown]

_SURROGATES = re.compile("[\ud800-\udfff]")


def _clean(text: Any) -> str:
    """Any value → str without lone surrogates (bytes decoded with replacement)."""
    if text is None:
        return ""
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", errors="replace")
    elif not isinstance(text, str):
        try:
            text = str(text)
        except Exception:
            text = ""
    return _SURROGATES.sub("\ufffd", text)


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
    ) -> None:
        self.task = task
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
        """The current stage's chat so far, as OpenAI-style dicts (what the policy sees)."""
        if self._traj is None:
            raise RuntimeError("call reset() first")
        return [m.model_dump(exclude_none=True) for m in self._traj.messages]

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

        Raises ``RuntimeError`` only for API misuse: before :meth:`reset` or after the episode
        ended.
        """
        if not self._started or self._traj is None:
            raise RuntimeError("call reset() before step()")
        if self.done:
            raise RuntimeError("episode is over; call reset() to start a new one")
        msg = _as_message(action)
        traj = self._traj
        turn = len(traj.steps)
        prefix = f"s{self.stage}t{turn}"
        parsed = parse_action(msg.content, structured=msg.tool_calls or None, call_id_prefix=prefix)
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
        base_info: dict[str, Any] = {
            "stage": self.stage,
            "turn": turn,
            "prompt_tokens": msg.prompt_tokens,
            "completion_tokens": msg.completion_tokens,
        }

        if parsed.has_answer:
            traj.final_answer = parsed.answer
            result = self._end_stage("answered")
            result.info = {**base_info, **result.info}
            return result

        step.tool_results.extend(self._run_calls(parsed, prefix, {c.id for c in msg.tool_calls}))
        observations: list[dict[str, Any]] = []
        for res in step.tool_results:
            m = Message(role="tool", content=res.content, name=res.name, tool_call_id=res.call_id)
            traj.messages.append(m)
            observations.append(m.model_dump(exclude_none=True))
        if not step.tool_results:
            text = truncate_text(prompts.no_action_feedback(parsed.errors), self.config.max_observation_chars)
            m = Message(role="user", content=text)
            traj.messages.append(m)
            observations.append(m.model_dump(exclude_none=True))

        if len(traj.steps) >= self.config.max_turns:
            result = self._end_stage("max_turns")
            result.observations = observations + result.observations
            result.info = {**base_info, **result.info}
            return result
        return StepResult(observations, 0.0, False, False, base_info)

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
        judged (then ``error`` is set). ``succ``: the stage-2 verdict's success. ``simulator``:
        name, model, seed, hint, whether it was consulted, its feedback and how it was produced.
        """
        stage1 = next((r for r in self.results if r.trajectory.stage == 1), None)
        stage2 = next((r for r in self.results if r.trajectory.stage == 2), None)
        error = self._abort_error or self._judge_error
        if self.mode == "oracle":
            acc = 1.0
        elif self.mode == "one_stage":
            acc = _acc(self._pref_verdict) if self._pref_verdict is not None else 0.0
        else:
            acc = _acc(stage1.verdict) if stage1 else 0.0
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
            succ=bool(stage2 and stage2.verdict.success),
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
        out = [s if s.date or sid not in dates else s.model_copy(update={"date": dates[sid]}) for sid, s in zip(ids, out)]
        return sorted(out, key=lambda s: (s.date or "", ids.index(s.session_id)))

    def _start_stage(self, stage: int) -> None:
        self.stage = stage
        self._seen_calls = {}
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

    def _run_calls(self, parsed: Any, prefix: str, structured_ids: set[str]) -> list[ToolResult]:
        """Error observations for malformed blocks, then the calls (limit, repeats, execution).

        Items beyond ``max_calls_per_turn``: a structured call (``structured_ids``, the server's
        ids, which each need a tool response) gets its own short error observation; text-block
        items are merged into one observation carrying the first such call's id."""
        cfg = self.config
        limit = cfg.max_calls_per_turn
        out: list[ToolResult] = []
        over_text: list[str] = []  # text-block items beyond the limit, merged into one observation
        items: list[tuple[str, Any]] = [("bad", (e, cid)) for e, cid in zip(parsed.tool_errors, _pad(parsed.tool_error_ids, len(parsed.tool_errors)))]
        items += [("call", c) for c in parsed.tool_calls]
        for k, (kind, obj) in enumerate(items):
            if k >= limit:
                if kind == "bad" and obj[1]:
                    out.append(self._error_result(obj[1], "invalid_tool_call", f"not read: at most {limit} tool calls per turn"))
                elif kind == "call" and obj.call_id in structured_ids:
                    out.append(self._error_result(obj.call_id, obj.name, f"not run: at most {limit} tool calls per turn"))
                else:
                    over_text.append(obj.call_id if kind == "call" else "")
                continue
            if kind == "bad":
                err, cid = obj
                out.append(self._error_result(cid or f"{prefix}-invalid{k}", "invalid_tool_call", err))
                continue
            call: ToolCall = obj
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
            out.append(self.tools.execute(call, self.allowed_tools, max_chars=cfg.max_observation_chars))
        if over_text:
            first = next((c for c in over_text if c), f"{prefix}-overflow")
            out.append(
                self._error_result(
                    first,
                    "invalid_tool_call",
                    f"{len(over_text)} more tool call(s) in this turn were not run: at most {limit} per turn",
                )
            )
        return out

    def _judge(self, traj: Trajectory) -> Verdict | None:
        try:
            v = self.judge.judge(self.task, traj)
        except Exception as e:  # a judge failure is recorded, never scored as 0
            self._judge_error = f"judge failed: {type(e).__name__}: {str(e)[:300]}"
            return None
        if v.failed:
            self._judge_error = "judge failed: " + ("; ".join(v.reasons) or "no reason given")
        return v

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
        verdict = self._judge(traj)
        if verdict is None or verdict.failed:
            verdict = verdict or Verdict(
                judge=str(getattr(self.judge, "name", "judge")), stage=traj.stage, F=len(self.task.preferences),
                N=self.task.n_products, b=1 if self.task.task_type == "addon" else 0, failed=True,
                reasons=[self._judge_error or "judge failed"],
            )
            reward = RewardBreakdown(total=0.0, components={"judge_failed": 1.0, "stage": float(traj.stage)})
            info["judge_failed"] = self._judge_error
        else:
            try:
                reward = self.reward_fn(self.task, traj, verdict)
            except JudgeFailedError as e:  # a judge used inside the reward failed: not scored
                self._judge_error = f"judge failed inside the reward: {str(e)[:300]}"
                reward = RewardBreakdown(total=0.0, components={"judge_failed": 1.0, "stage": float(traj.stage)})
                info["judge_failed"] = self._judge_error
        if self.mode == "one_stage" and not verdict.failed:
            v1 = self._judge(traj.model_copy(update={"stage": 1}))
            if v1 is not None and not v1.failed:
                self._pref_verdict = v1
                reward.components["R1"] = stage1_reward(v1)
                info["preference_verdict"] = v1.model_dump()
            else:
                info["judge_failed"] = self._judge_error
        self.results.append(StageResult(trajectory=traj, verdict=verdict, reward=reward))
        info["verdict"] = verdict.model_dump()
        info["reward_breakdown"] = reward.model_dump()
        truncated = reason == "max_turns"
        if self.stage == 1 and self.mode == "two_stage":
            self._feedback = simulator_feedback(
                self.simulator, self.task, traj.identified_preferences, self.config.hint
            ) if self.config.hint != "none" else SimulatorFeedback(text=None, source="none")
            self._start_stage(2)
            info["next_stage"] = 2
            info["feedback"] = self._feedback.text
            return StepResult(self.messages, reward.total, False, truncated, info)
        self.done = True
        return StepResult([], reward.total, True, truncated, info)


def _pad(xs: list[Any], n: int) -> list[Any]:
    return list(xs[:n]) + [None] * max(0, n - len(xs))


def _acc(v: Verdict) -> float:
    """Acc (paper §4): fraction of gold preference attributes recovered in stage 1 (m1 / F)."""
    if v.failed:
        return 0.0
    if v.F == 0:
        return 1.0
    return float(v.m1 or 0.0) / v.F
