"""Step-level SFT examples (Shopping Companion §6.1, App. D: "2,948 step-level examples").

Every assistant turn of a kept stage trajectory becomes ONE example: the whole chat before that
turn (the stage's system prompt, the opening user message, earlier assistant turns, tool
responses and any user-role reminders) as context, the turn itself as the target, and the
stage's tool schemas. A stage of T assistant turns gives T examples (fewer when malformed turns
are dropped as targets: they stay in later examples' context, exactly as the policy saw them).

The target is the assistant text exactly as the teacher produced it (thinking included); tool
calls are the environment's parse of it (:class:`~shopping_companion.types.Step.tool_calls`).

Reasoning models served with a reasoning parser return their thinking apart from the content
(``Step.reasoning``, kept on the trajectory's assistant message as ``reasoning_content``).
LLaMA-Factory's ShareGPT format has no reasoning field: its reasoning templates (``qwen3``) read
the thinking as a ``<think>…</think>`` block at the start of the assistant value. So such a turn's
content becomes ``<think>\n{reasoning}\n</think>\n\n{content}`` (when the content has no
thinking tags of its own), in targets and in context alike, and
:mod:`~shopping_companion.sft.export` writes it as the turn's thinking prefix.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Iterable, Literal

from pydantic import BaseModel, ConfigDict, Field

from shopping_companion.envs.tools import MEMORY_TOOLS, PRODUCT_TOOLS, tool_schema
from shopping_companion.sft.collect import KeptStage
from shopping_companion.types import Step, Trajectory

__all__ = [
    "StepExample",
    "stage_tool_names",
    "step_examples",
    "trajectory_examples",
    "example_stats",
    "is_malformed",
    "with_reasoning",
]

TargetKind = Literal["tool_call", "answer", "other"]


class StepExample(BaseModel):
    """One step-level example.

    ``messages``: OpenAI-style dicts, ``messages[0]`` the system prompt, ``messages[-1]`` the
    target assistant turn; assistant dicts carry ``tool_calls`` (parsed calls with JSON-string
    arguments) when the turn called tools. ``tools``: OpenAI function schemas of the stage.
    ``turn``: 0-based index of the target among the stage's assistant turns. ``target_tools``:
    tool names called by the target, in order. ``example_id``: ``<kept key>/turn<k>``.
    """

    model_config = ConfigDict(extra="forbid")
    example_id: str
    task_id: str
    trial: int
    stage: int
    mode: str
    turn: int
    n_turns: int
    target_kind: TargetKind
    target_tools: list[str] = Field(default_factory=list)
    tools: list[dict[str, Any]]
    messages: list[dict[str, Any]]


def stage_tool_names(trajectory: Trajectory) -> tuple[str, ...]:
    """The tools the policy had in this stage (same rule as the environment)."""
    if trajectory.mode == "one_stage":
        return MEMORY_TOOLS + PRODUCT_TOOLS
    if trajectory.mode == "oracle" or trajectory.stage == 2:
        return PRODUCT_TOOLS
    return MEMORY_TOOLS


def is_malformed(step: Step) -> bool:
    """A turn not worth imitating: format errors (thinking tags, tool-call JSON, answer tags) or
    neither a tool call nor an answer."""
    f = step.format
    return (not f.think_ok) or (not f.tool_json_ok) or bool(f.errors) or (not step.tool_calls and not f.has_answer)


def _kind(step: Step) -> TargetKind:
    if step.format.has_answer:  # an answer ends the stage: calls in the same turn are never run
        return "answer"
    if step.tool_calls:
        return "tool_call"
    return "other"


def with_reasoning(content: str, reasoning: str | None) -> str:
    """``content`` with separate ``reasoning`` put in front as a ``<think>`` block (module
    docstring); unchanged when there is no reasoning or the content has thinking tags already."""
    r = (reasoning or "").strip()
    if not r or "<think>" in content or "</think>" in content:
        return content
    return f"<think>\n{r}\n</think>\n\n{content.lstrip()}"


def _assistant_dict(step: Step, content: str) -> dict[str, Any]:
    import json

    d: dict[str, Any] = {"role": "assistant", "content": with_reasoning(content, step.reasoning)}
    if step.tool_calls and not step.format.has_answer:
        d["tool_calls"] = [
            {
                "id": c.call_id,
                "type": "function",
                "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)},
            }
            for c in step.tool_calls
        ]
    return d


def step_examples(
    kept: Iterable[KeptStage], *, drop_malformed: bool = True, drop_error_calls: bool = False
) -> list[StepExample]:
    """Split kept stage trajectories into step-level examples (module docstring).

    ``drop_malformed``: malformed turns (:func:`is_malformed`) are not targets.
    ``drop_error_calls``: turns with a tool call the environment rejected (its result has
    ``error``) are not targets either.
    Raises ``ValueError`` when a trajectory's messages and steps disagree (corrupt input).
    """
    out: list[StepExample] = []
    for k in kept:
        traj = k.trajectory
        tools = [tool_schema(n) for n in stage_tool_names(traj)]
        msgs = [m.model_dump(exclude_none=True) for m in traj.messages]
        a_idx = [i for i, m in enumerate(msgs) if m["role"] == "assistant"]
        if len(a_idx) != len(traj.steps):
            raise ValueError(f"{k.key}: {len(a_idx)} assistant messages but {len(traj.steps)} steps")
        # assistant messages in the context carry the parsed calls (structured form)
        ctx = [dict(m) for m in msgs]
        for i, step in zip(a_idx, traj.steps):
            ctx[i] = _assistant_dict(step, msgs[i]["content"])
        for turn, (i, step) in enumerate(zip(a_idx, traj.steps)):
            if drop_malformed and is_malformed(step):
                continue
            if drop_error_calls and any(r.error for r in step.tool_results):
                continue
            out.append(
                StepExample(
                    example_id=f"{k.key}/turn{turn}",
                    task_id=k.task_id,
                    trial=k.trial,
                    stage=k.stage,
                    mode=k.mode,
                    turn=turn,
                    n_turns=len(traj.steps),
                    target_kind=_kind(step),
                    target_tools=[] if step.format.has_answer else [c.name for c in step.tool_calls],
                    tools=tools,
                    messages=ctx[: i + 1],
                )
            )
    return out


def trajectory_examples(examples: Iterable[StepExample]) -> tuple[list[StepExample], int]:
    """One example per stage trajectory instead of one per turn: the step example of each
    trajectory's last turn, whose context holds every earlier turn. Trained with LLaMA-Factory's
    ``mask_history: false`` every assistant turn of it is a target, so the model learns the same
    turns as from the step examples while reading each context once (about ``1 / turns`` of the
    tokens). A trajectory with a turn that is not a target (dropped as malformed or as a rejected
    call) is left out, since that turn would be trained on in the others' context. Returns
    ``(examples, trajectories left out)``."""
    by_traj: dict[str, list[StepExample]] = {}
    for e in examples:
        by_traj.setdefault(e.example_id.rsplit("/turn", 1)[0], []).append(e)
    out, left_out = [], 0
    for steps in by_traj.values():
        last = max(steps, key=lambda e: e.turn)
        if len(steps) != last.n_turns or last.turn != last.n_turns - 1:
            left_out += 1
            continue
        out.append(last)
    return out, left_out


def example_stats(examples: Iterable[StepExample]) -> dict[str, Any]:
    """Counts for the report: ``n`` examples; ``by_stage``; ``by_kind`` (tool_call / answer /
    other); ``by_tool`` (tool calls in targets per tool name, plus ``answer`` turns);
    ``by_turn`` (examples per 0-based turn index); ``trajectories`` (distinct kept stages);
    ``tasks``; ``context_messages`` (min / mean / max messages before the target)."""
    ex = list(examples)
    by_tool: Counter[str] = Counter()
    for e in ex:
        by_tool.update(e.target_tools)
        if e.target_kind == "answer":
            by_tool["answer"] += 1
    ctx = [len(e.messages) - 1 for e in ex]
    return {
        "n": len(ex),
        "by_stage": {str(k): v for k, v in sorted(Counter(e.stage for e in ex).items())},
        "by_kind": dict(sorted(Counter(e.target_kind for e in ex).items())),
        "by_tool": dict(sorted(by_tool.items())),
        "by_turn": {str(k): v for k, v in sorted(Counter(e.turn for e in ex).items())},
        "trajectories": len({e.example_id.rsplit("/turn", 1)[0] for e in ex}),
        "tasks": len({e.task_id for e in ex}),
        "context_messages": (
            {"min": min(ctx), "mean": round(sum(ctx) / len(ctx), 2), "max": max(ctx)} if ctx else None
        ),
    }
