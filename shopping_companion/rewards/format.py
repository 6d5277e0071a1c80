"""Format reward R_fmt (Shopping Companion §5.3, Eq. 11).

``R_fmt = (f_ans + f_th + f_tc + 𝟙[z=2]·f_rec) / (3 + 𝟙[z=2])`` with four binary indicators. The
paper names them (answer in answer tags, thinking tags, tool-call JSON, recommendation schema)
without fixing their rules; these are our precise definitions, computed from the trajectory's
per-turn records (``Step.format``, filled by the environment from
:func:`shopping_companion.envs.parsing.format_flags`, whose parser enforces the protocol, and
``Step.tool_calls``, the calls that parsed).

**No credit for inaction (our deviation, issue 31).** Read literally, the paper's indicators are
vacuously true for a stage that does nothing: no tool call means no malformed tool call, no think
tags mean no malformed ones, so a stage of free text scored f_th = f_tc = 1 (R_fmt = 2/3 in
stage 1) while a stage that tried a tool call and got its JSON wrong scored less, and GRPO learned
to stop calling tools. Where the paper is silent (what a turn must hold) or its indicators are
vacuous (a check over no calls), we require an action: each indicator certifies that the stage
*did* something well-formed, never only that it did nothing wrong. Trying and failing therefore
never scores below doing nothing.

- A turn holds a **valid action** when (a) it holds no answer block and at least one tool call
  that parsed as a protocol call (``Step.tool_calls`` non-empty: strict JSON with a name and an
  arguments object, in the content, text block or structured call; a call the tool then rejects
  for its argument values, or a call over the argument bounds, is still a protocol call), or
  (b) it is the stage's final turn and its answer meets ``f_ans``. Tool calls written only in the
  reasoning channel are not calls (they are not in ``Step.tool_calls``). Tool calls in a turn
  that also holds an answer never count as the stage's calls: the answer ends the stage, so they
  are not run (before the answer they are no error either; after it they are, see f_tc).
- A stage with **no valid-action turn** scores 0 on every indicator (R_fmt = 0): free text every
  turn, empty turns, malformed calls only, calls only in the reasoning channel, an unparsable
  answer with nothing else. A trajectory with no assistant turn at all (e.g. a stage whose first
  prompt the server refused as too long, ``context_length``) is such a stage.

Otherwise:

- ``f_ans`` — the stage ended with exactly one answer block in its final turn, and that answer is
  parsable: ``trajectory.final_answer`` is not None, the last step holds exactly one complete
  ``<answer>…</answer>`` (``n_answers == 1``: two answer blocks, identical or not, give 0), and in
  stage 1 :func:`~shopping_companion.envs.parsing.parse_preferences` decodes it without error
  (strict JSON; an empty preference list is parsable); in stage 2 it is non-blank.
- ``f_th`` — every assistant turn's thinking tags are balanced (no unclosed, nested or stray tag;
  one leading ``</think>`` is the Qwen3 template's) with at most one thinking block per turn:
  ``step.format.think_ok`` (and ``n_think_blocks <= 1``) for every step. Thinking stays optional.
- ``f_tc`` — the stage made at least one tool call (a turn without an answer holding a protocol
  call), every turn without an answer held a valid action (a free-text turn, an empty turn, a turn
  whose only calls were malformed or written only in the reasoning channel fails f_tc), and no
  turn broke the tool-call protocol: ``step.format.tool_json_ok`` and not
  ``step.format.tool_after_answer`` for every step, i.e. every tool-call block parsed as strict
  JSON by object boundary (``</tool_call>`` inside a JSON string does not cut a call;
  ``NaN``/``Infinity`` are invalid), no tool call comes after the answer in its turn, and no turn
  wrote its calls only in the separate reasoning channel (``reasoning_content`` / ``reasoning``:
  such calls are not run and are recorded as the error ``tool_call_in_reasoning…``; a tool call
  belongs in the content, as the prompts teach). The answer turn is judged by f_ans, not by
  f_tc: a stage that called tools and then wrote an unparsable answer loses f_ans only, so it does
  not score below the same stage that never answered. Not format errors, so f_tc stays 1: a call
  a tool rejects for its argument values, a call over the argument bounds (``EnvConfig``
  ``max_tool_arg_depth`` / ``_chars`` / ``_items``: valid JSON, refused like a bad value), and a
  turn cut off by the token limit (finish_reason ``length``: its calls are not run and the error
  ``output_truncated…`` is recorded in ``errors``; its complete calls are protocol calls, and a
  cut-off block that did not parse is already a tool-call JSON error).
- ``f_rec`` (stage 2 only) — the recommendation conforms to the schema: the final answer has at
  least one well-formed ``@REC::id@`` marker and no malformed one
  (:func:`~shopping_companion.envs.parsing.extract_rec_ids`). Whether the count is N is the judge's
  product-validity check p2, not a format matter.

So in stage 1: calls and a parsable answer 1; a parsable answer without any call 2/3 (f_tc = 0);
calls and no answer (``max_turns``, ``invalid_output``) or an unparsable one 2/3; free text,
empty turns or malformed calls only 0. Stages that end with ``invalid_output`` / ``length`` /
``context_length`` have no final answer, so f_ans = 0 (and f_rec = 0), like a ``max_turns`` end.
Flags stored before ``n_answers`` / ``n_think_blocks`` existed (None) are read as one answer block
when ``final_answer`` is set, and as ``think_ok`` alone.

:data:`FORMAT_REWARD_VERSION` names these rules; the built-in ``format`` and ``f_*`` reward
functions carry it, so a rubric's description (and a run's identity) changes with it.
"""

from __future__ import annotations

from collections.abc import Mapping

from shopping_companion.types import Step, Trajectory

__all__ = [
    "FORMAT_REWARD_VERSION",
    "format_indicators",
    "format_reward",
    "format_reward_from_indicators",
    "valid_action_turns",
]

#: Version of the indicator rules above (1: the paper's indicators, vacuously 1 for a stage
#: without tool calls or think tags; 2: no credit for inaction). Part of the rubric description
#: of the built-in format rewards, hence of the run identity: results scored under another
#: version are not mixed with these.
FORMAT_REWARD_VERSION = 2

_ZERO = {"f_ans": 0.0, "f_th": 0.0, "f_tc": 0.0, "f_rec": 0.0}


def _answer_ok(trajectory: Trajectory) -> bool:
    """``f_ans`` (module docstring)."""
    from shopping_companion.envs.parsing import parse_preferences

    ans = trajectory.final_answer
    n_final = trajectory.steps[-1].format.n_answers if trajectory.steps else None
    if ans is None or not trajectory.steps or (n_final is not None and n_final != 1):
        return False
    if trajectory.stage == 1:
        return parse_preferences(ans)[1] is None
    return bool(ans.strip())


def _is_answer_turn(trajectory: Trajectory, i: int, step: Step) -> bool:
    """The turn holds an answer block (the stage's final answer is its last turn's)."""
    return step.format.has_answer or (i == len(trajectory.steps) - 1 and trajectory.final_answer is not None)


def valid_action_turns(trajectory: Trajectory) -> list[bool]:
    """Per assistant turn: whether it holds a valid action (module docstring): a protocol tool
    call in a turn without an answer, or the stage's final answer when it meets ``f_ans``."""
    steps = trajectory.steps
    ans_ok = _answer_ok(trajectory)
    out = []
    for i, s in enumerate(steps):
        if _is_answer_turn(trajectory, i, s):
            out.append(ans_ok and i == len(steps) - 1)
        else:
            out.append(bool(s.tool_calls))
    return out


def format_indicators(trajectory: Trajectory) -> dict[str, float]:
    """``{"f_ans", "f_th", "f_tc", "f_rec"}`` as 0.0/1.0 (``f_rec`` is 0.0 and unused in stage 1);
    all 0.0 for a stage without a valid-action turn (module docstring)."""
    # Imported here so that importing rewards never imports the environment package's __init__
    # at module load (the environment itself may import rewards).
    from shopping_companion.envs.parsing import extract_rec_ids

    steps = trajectory.steps
    valid = valid_action_turns(trajectory)
    if not any(valid):
        return dict(_ZERO)
    f_ans = _answer_ok(trajectory)
    f_th = all(s.format.think_ok and (s.format.n_think_blocks or 0) <= 1 for s in steps)
    acting = [ok for i, (s, ok) in enumerate(zip(steps, valid)) if not _is_answer_turn(trajectory, i, s)]
    f_tc = bool(acting) and all(acting) and all(s.format.tool_json_ok and not s.format.tool_after_answer for s in steps)
    f_rec = False
    ans = trajectory.final_answer
    if trajectory.stage == 2 and ans is not None:
        ids, malformed = extract_rec_ids(ans)
        f_rec = bool(ids) and not malformed
    return {"f_ans": float(f_ans), "f_th": float(f_th), "f_tc": float(f_tc), "f_rec": float(f_rec)}


def format_reward_from_indicators(flags: Mapping[str, float], stage: int) -> float:
    """Eq. 11's arithmetic on indicators of :func:`format_indicators`:
    ``(f_ans + f_th + f_tc + 𝟙[z=2]·f_rec) / (3 + 𝟙[z=2])``."""
    z2 = 1 if stage == 2 else 0
    return (flags["f_ans"] + flags["f_th"] + flags["f_tc"] + z2 * flags["f_rec"]) / (3 + z2)


def format_reward(trajectory: Trajectory) -> float:
    """R_fmt (Eq. 11): ``(f_ans + f_th + f_tc + 𝟙[z=2]·f_rec) / (3 + 𝟙[z=2])`` (module docstring)."""
    return format_reward_from_indicators(format_indicators(trajectory), trajectory.stage)
