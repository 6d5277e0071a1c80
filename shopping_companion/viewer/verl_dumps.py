"""verl's GRPO validation dumps (``<step>.jsonl``): reading one line back as a task id, gold
preferences and a one-stage :class:`~shopping_companion.types.Trajectory` with its reward.

A dump line holds ``input`` (verl's decoded prompt), ``output`` (the decoded multi-turn
response), ``gts`` (the ground truth our GRPO rows carry), ``score`` and the reward's extra keys.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import ValidationError

from shopping_companion.types import Message, Preference, RewardBreakdown, Step, Task, ToolResult, Trajectory
from shopping_companion.viewer.models import RAW_CAP
from shopping_companion.viewer.values import finite

__all__ = [
    "GRPO_TEXT_KEYS",
    "dump_instruction",
    "grpo_ground_truth",
    "grpo_task_id",
    "grpo_gold",
    "split_dump_output",
    "observed_ids",
    "grpo_trajectory",
]

GRPO_TEXT_KEYS = frozenset(
    ("input", "output", "score", "reward", "step", "gts", "data_source", "task_id", "task_type", "request_id")
)


def dump_instruction(prompt: str) -> str:
    """The last user message of verl's decoded prompt (the text after its last ``user`` header
    line, without the closing ``assistant`` header), at most 2,000 characters; the prompt's tail
    when it has no such line. Replaced by the task's instruction when the benchmark is found."""
    i = prompt.rfind("\nuser\n")
    text = prompt[i + len("\nuser\n") :] if i >= 0 else prompt
    if text.endswith("\nassistant\n"):
        text = text[: -len("\nassistant\n")]
    return text.strip()[:2000] if i >= 0 else text[-2000:]


def grpo_ground_truth(d: Any) -> dict[str, Any]:
    """The ``gts`` of a validation-dump line as a dict: the JSON string our GRPO rows put in
    ``reward_model.ground_truth`` (:func:`shopping_companion.trainers.rows.task_rows`: ``task_id``,
    ``preferences``, ``reference_product_ids``, ``needle_session_ids``), which verl copies into the
    dump; a dict is taken as it is. Anything else (missing, not JSON, not an object): ``{}``."""
    g = d.get("gts") if isinstance(d, dict) else None
    if isinstance(g, str) and len(g) <= RAW_CAP:
        try:
            g = json.loads(g)
        except (ValueError, RecursionError):
            return {}
    return g if isinstance(g, dict) else {}


def grpo_task_id(d: Any) -> str | None:
    """The task id of a validation-dump line: a top-level ``task_id`` string, else the ``task_id``
    of its ground truth (:func:`grpo_ground_truth`); None when neither is a non-empty string."""
    if isinstance(d, dict) and isinstance(d.get("task_id"), str) and d["task_id"]:
        return d["task_id"]
    t = grpo_ground_truth(d).get("task_id")
    return t if isinstance(t, str) and t else None


def grpo_gold(d: Any) -> list[Preference]:
    """The gold preferences carried by a dump line's ground truth (those that validate as
    :class:`~shopping_companion.types.Preference`); shown when the benchmark itself is not found."""
    out: list[Preference] = []
    prefs = grpo_ground_truth(d).get("preferences")
    for p in prefs if isinstance(prefs, list) else []:
        try:
            out.append(Preference.model_validate(p))
        except (ValidationError, TypeError, ValueError):
            continue
    return out


#: A role header left by a Qwen/ChatML template once verl decodes with ``skip_special_tokens``
#: (``<|im_start|>user\n`` → ``user\n``, preceded by the ``\n`` after the previous ``<|im_end|>``).
_ROLE_HEADER = re.compile(r"(?:^|\n)(user|assistant|tool)\n")
_TOOL_RESPONSE = re.compile(r"<tool_response>\n?(.*?)\n?</tool_response>", re.DOTALL)


def split_dump_output(output: str) -> list[tuple[str, str]]:
    """verl's decoded response of one multi-turn trajectory as ``[(role, text), ...]``.

    verl writes ``tokenizer.decode(response_ids, skip_special_tokens=True)``: the assistant turns
    the policy generated and, between them, the observations the agent loop appended
    (:mod:`shopping_companion.trainers.episode`), rendered by the chat template. With Qwen/ChatML
    templates the ``<|im_start|>`` / ``<|im_end|>`` markers are special and vanish, leaving a line
    ``user`` (or ``tool``) before each observation and ``assistant`` before the next turn. The
    text before the first header is the first assistant turn (its header ends the prompt). A
    ``user`` line starts an observation only when text follows it; an ``assistant`` line ends one.
    Roles: ``assistant`` and ``observation``. Tool observations hold ``<tool_response>`` blocks
    (``<tool_response>`` … ``</tool_response>``); others are the environment's plain user messages (format feedback).
    Model text that itself holds a line ``user`` would be split there (the decoded text carries
    no other boundary)."""
    parts: list[tuple[str, str]] = []
    role, start = "assistant", 0
    for m in _ROLE_HEADER.finditer(output):
        header = m.group(1)
        if role == "assistant" and header in ("user", "tool"):
            parts.append((role, output[start : m.start()]))
            role, start = "observation", m.end()
        elif role == "observation" and header == "assistant":
            parts.append((role, output[start : m.start()]))
            role, start = "assistant", m.end()
        elif role == "observation" and header in ("user", "tool"):
            # consecutive observation messages (one user turn per tool result, as some templates do)
            parts.append((role, output[start : m.start()]))
            start = m.end()
    parts.append((role, output[start:]))
    if parts and parts[-1] == ("assistant", "") and len(parts) > 1:
        parts.pop()
    return [(r, t.rstrip("\n") if r == "assistant" else t) for r, t in parts]


_ID_KEYS = {"mem_search": ("results", "session_id"), "mem_view": ("sessions", "session_id")}
_ID_KEYS.update({"product_search": ("results", "product_id"), "product_view": ("products", "product_id")})


def observed_ids(name: str, content: str) -> tuple[list[str], str | None]:
    """``(returned ids, error)`` of one tool observation's text, as the tool box recorded them
    (:mod:`shopping_companion.envs.tools`): ``mem_search`` one session id per distinct
    ``(session_id, turn_index)`` item, ``mem_view`` / ``product_view`` each session / product once,
    ``product_search`` each hit; an ``{"error": …}`` observation returns nothing and its message.
    An observation cut at ``max_observation_chars`` is not JSON: its ids are the
    ``"session_id"`` / ``"product_id"`` values still visible in the text (as the tool box counts a
    cut observation's ids). Other tool names: no ids."""
    if name not in _ID_KEYS:
        return [], None
    key, field_ = _ID_KEYS[name]
    try:
        obj = json.loads(content)
    except (ValueError, RecursionError):
        obj = None
    if isinstance(obj, dict):
        if isinstance(obj.get("error"), str) and key not in obj:
            return [], obj["error"]
        items = obj.get(key)
        items = [x for x in items if isinstance(x, dict)] if isinstance(items, list) else []
        if name == "mem_search":
            seen = dict.fromkeys((str(x.get(field_)), str(x.get("turn_index"))) for x in items if x.get(field_))
            return [sid for sid, _ in seen], None
        ids = [str(x[field_]) for x in items if isinstance(x.get(field_), str)]
        return (ids if name == "product_search" else list(dict.fromkeys(ids))), None
    found = re.findall(rf'"{field_}": "((?:[^"\\]|\\.)*)"', content)
    return found, None


def grpo_trajectory(d: dict[str, Any], task: Task | None = None) -> tuple[Trajectory, RewardBreakdown | None]:
    """A validation-dump line as a one-stage :class:`~shopping_companion.types.Trajectory` and its reward breakdown.

    ``output`` is split into turns (:func:`split_dump_output`); each assistant turn is parsed by
    the environment's own parser (:func:`~shopping_companion.envs.parsing.parse_action` with the
    environment's call ids ``s<stage>t<turn>c<k>``, :func:`~shopping_companion.envs.parsing.format_flags`),
    and the ``<tool_response>`` blocks of the observation after it are its calls' results, in
    order (ids from :func:`observed_ids`); a plain observation is format feedback. The last turn's
    answer gives ``final_answer``, the identified preferences (stage 1,
    :func:`~shopping_companion.envs.parsing.parse_preferences`) or the recommended ids (stage 2,
    :func:`~shopping_companion.envs.parsing.extract_rec_ids`), as the environment derives them.
    ``messages``: the prompt (``input``, verl's decoded prompt) as one user message, then the
    turns. ``task_id``: :func:`grpo_task_id`. The reward breakdown: the line's numeric keys
    (``total`` = ``score``); with ``task``, ``per_tool_call`` is r(u) of the exact tool-wise reward
    (:func:`~shopping_companion.rewards.tool_wise.tool_wise_reward`) when its mean equals the
    line's ``R_tool`` (else it is left empty: the run used another tool-wise rule)."""
    from shopping_companion.envs.parsing import extract_rec_ids, format_flags, parse_action, parse_preferences

    output = str(d.get("output", ""))
    stage_f = finite(d.get("stage"))
    stage = int(stage_f) if stage_f in (1.0, 2.0) else 2
    messages = [Message(role="user", content=str(d.get("input", "")))]
    steps: list[Step] = []
    answer: str | None = None
    for role, text in split_dump_output(output):
        if role == "assistant":
            parsed = parse_action(text, call_id_prefix=f"s{stage}t{len(steps)}")
            steps.append(Step(assistant_text=text, tool_calls=parsed.tool_calls, format=format_flags(parsed)))
            messages.append(Message(role="assistant", content=text))
            if parsed.has_answer:
                answer = parsed.answer
            continue
        blocks = _TOOL_RESPONSE.findall(text)
        if not blocks:
            messages.append(Message(role="user", content=text.rstrip("\n")))
            continue
        last = steps[-1] if steps else None
        for content in blocks:
            calls = last.tool_calls if last is not None else []
            k = len(last.tool_results) if last is not None else 0  # results so far: one per call, in order
            call = calls[k] if k < len(calls) else None
            name = call.name if call is not None else "unknown"
            cid = call.call_id if call is not None else f"s{stage}t{max(len(steps) - 1, 0)}r{k}"
            ids, err = observed_ids(name, content)
            res = ToolResult(call_id=cid, name=name, content=content, returned_ids=ids, error=err)
            if last is not None:
                last.tool_results.append(res)
            messages.append(Message(role="tool", content=content, name=name, tool_call_id=cid))
    traj = Trajectory(
        task_id=grpo_task_id(d) or "",
        stage=stage,
        messages=messages,
        steps=steps,
        final_answer=answer,
        termination="answered" if answer is not None else "running",
    )
    if answer is not None and stage == 1:
        prefs, err = parse_preferences(answer)
        traj.identified_preferences = prefs if err is None else None
    if answer is not None and stage == 2:
        traj.recommended_ids = extract_rec_ids(answer)[0]
    score = finite(d.get("score"))
    comps = {k: x for k, v in d.items() if k not in GRPO_TEXT_KEYS and (x := finite(v)) is not None}
    reward = RewardBreakdown(total=score, components=comps) if score is not None else None
    if reward is not None and task is not None and task.task_id == traj.task_id:
        from shopping_companion.rewards.tool_wise import tool_wise_reward

        try:
            r_tool, per_call = tool_wise_reward(traj, task)
        except Exception:  # noqa: BLE001 - a trajectory the reward cannot read shows no r(u)
            r_tool, per_call = None, []
        want = comps.get("R_tool")
        if r_tool is not None and want is not None and abs(r_tool - want) <= 1e-6:
            reward.per_tool_call = list(per_call)
    return traj, reward


# --------------------------------------------------------------------------- annotation
