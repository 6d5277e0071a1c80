"""Format reward R_fmt (Shopping Companion §5.3, Eq. 11).

``R_fmt = (f_ans + f_th + f_tc + 𝟙[z=2]·f_rec) / (3 + 𝟙[z=2])`` with four binary indicators. The
paper names them (answer in answer tags, thinking tags, tool-call JSON, recommendation schema)
without fixing their rules; these are our precise definitions, computed from the trajectory's
per-turn flags ``Step.format`` (filled by the environment from
:func:`shopping_companion.envs.parsing.format_flags`, whose parser enforces the protocol):

- ``f_ans`` — the stage ended with exactly one answer block in its final turn, and that answer is
  parsable: ``trajectory.final_answer`` is not None, the last step holds exactly one complete
  ``<answer>…</answer>`` (``n_answers == 1``: two answer blocks, identical or not, give 0), and in
  stage 1 :func:`~shopping_companion.envs.parsing.parse_preferences` decodes it without error
  (strict JSON; an empty preference list is parsable); in stage 2 it is non-blank.
- ``f_th`` — every assistant turn's thinking tags are balanced (no unclosed, nested or stray tag;
  one leading ``</think>`` is the Qwen3 template's) with at most one thinking block per turn:
  ``step.format.think_ok`` (and ``n_think_blocks <= 1``) for every step.
- ``f_tc`` — every tool-call block of the trajectory parsed as strict JSON by object boundary
  (``</tool_call>`` inside a JSON string does not cut a call; ``NaN``/``Infinity`` are invalid) and
  no tool call comes after the answer in its turn, and no turn wrote its calls only in the
  separate reasoning channel (``reasoning_content`` / ``reasoning``: such calls are not run and
  are recorded as the error ``tool_call_in_reasoning…``; a tool call belongs in the content, as
  the prompts teach): ``step.format.tool_json_ok`` and not ``step.format.tool_after_answer`` for
  every step (1 when no tool call was attempted). Not format errors, so f_tc stays 1: a call a
  tool rejects for its argument values, a call over the argument bounds (``EnvConfig``
  ``max_tool_arg_depth`` / ``_chars`` / ``_items``: valid JSON, refused like a bad value), and a
  turn cut off by the token limit (finish_reason ``length``: its calls are not run and the error
  ``output_truncated…`` is recorded in ``errors``; a cut-off block that did not parse is already
  a tool-call JSON error).
- ``f_rec`` (stage 2 only) — the recommendation conforms to the schema: the final answer has at
  least one well-formed ``@REC::id@`` marker and no malformed one
  (:func:`~shopping_companion.envs.parsing.extract_rec_ids`). Whether the count is N is the judge's
  product-validity check p2, not a format matter.

A trajectory with no assistant turn scores 0 on every indicator (nothing was produced, so nothing
is well-formed), e.g. a stage whose first prompt the server refused as too long
(``context_length``). Stages that end with ``invalid_output`` / ``length`` / ``context_length`` have
no final answer, so f_ans = 0 (and f_rec = 0), like a ``max_turns`` end. Flags stored before ``n_answers`` / ``n_think_blocks`` existed (None) are read as
one answer block when ``final_answer`` is set, and as ``think_ok`` alone.
"""

from __future__ import annotations

from collections.abc import Mapping

from shopping_companion.types import Trajectory

__all__ = ["format_indicators", "format_reward", "format_reward_from_indicators"]


def format_indicators(trajectory: Trajectory) -> dict[str, float]:
    """``{"f_ans", "f_th", "f_tc", "f_rec"}`` as 0.0/1.0 (``f_rec`` is 0.0 and unused in stage 1)."""
    # Imported here so that importing rewards never imports the environment package's __init__
    # at module load (the environment itself may import rewards).
    from shopping_companion.envs.parsing import extract_rec_ids, parse_preferences

    steps = trajectory.steps
    if not steps:
        return {"f_ans": 0.0, "f_th": 0.0, "f_tc": 0.0, "f_rec": 0.0}
    ans = trajectory.final_answer
    n_final = steps[-1].format.n_answers
    if ans is None or (n_final is not None and n_final != 1):
        f_ans = False
    elif trajectory.stage == 1:
        f_ans = parse_preferences(ans)[1] is None
    else:
        f_ans = bool(ans.strip())
    f_th = all(s.format.think_ok and (s.format.n_think_blocks or 0) <= 1 for s in steps)
    f_tc = all(s.format.tool_json_ok and not s.format.tool_after_answer for s in steps)
    f_rec = False
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
