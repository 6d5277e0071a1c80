"""Format reward R_fmt (Shopping Companion §5.3, Eq. 11).

``R_fmt = (f_ans + f_th + f_tc + 𝟙[z=2]·f_rec) / (3 + 𝟙[z=2])`` with four binary indicators,
defined here precisely from the trajectory (per-turn flags are ``Step.format``, filled by the
environment from :func:`shopping_companion.envs.parsing.format_flags`):

- ``f_ans`` — the stage ended with a parsable answer in answer tags: ``trajectory.final_answer``
  is not None and, in stage 1, :func:`~shopping_companion.envs.parsing.parse_preferences` decodes it
  without error (an empty preference list is parsable); in stage 2, it is non-blank.
- ``f_th`` — every assistant turn's thinking tags are well-formed: ``step.format.think_ok`` for
  every step.
- ``f_tc`` — every tool-call block in the trajectory parsed: ``step.format.tool_json_ok`` for every
  step (1 when no tool call was attempted).
- ``f_rec`` (stage 2 only) — the recommendation conforms to the schema: the final answer has at
  least one well-formed ``@REC::id@`` marker and no malformed one
  (:func:`~shopping_companion.envs.parsing.extract_rec_ids`). Whether the count is N is the judge's
  product-validity check p2, not a format matter.

A trajectory with no assistant turn scores 0 on every indicator (nothing was produced, so nothing
is well-formed).
"""

from __future__ import annotations

from shopping_companion.types import Trajectory

__all__ = ["format_indicators", "format_reward"]


def format_indicators(trajectory: Trajectory) -> dict[str, float]:
    """``{"f_ans", "f_th", "f_tc", "f_rec"}`` as 0.0/1.0 (``f_rec`` is 0.0 and unused in stage 1)."""
    # Imported here so that importing rewards never imports the environment package's __init__
    # at module load (the environment itself may import rewards).
    from shopping_companion.envs.parsing import extract_rec_ids, parse_preferences

    steps = trajectory.steps
    if not steps:
        return {"f_ans": 0.0, "f_th": 0.0, "f_tc": 0.0, "f_rec": 0.0}
    ans = trajectory.final_answer
    if ans is None:
        f_ans = False
    elif trajectory.stage == 1:
        f_ans = parse_preferences(ans)[1] is None
    else:
        f_ans = bool(ans.strip())
    f_th = all(s.format.think_ok for s in steps)
    f_tc = all(s.format.tool_json_ok for s in steps)
    f_rec = False
    if trajectory.stage == 2 and ans is not None:
        ids, malformed = extract_rec_ids(ans)
        f_rec = bool(ids) and not malformed
    return {"f_ans": float(f_ans), "f_th": float(f_th), "f_tc": float(f_tc), "f_rec": float(f_rec)}


def format_reward(trajectory: Trajectory) -> float:
    """R_fmt (Eq. 11): ``(f_ans + f_th + f_tc + 𝟙[z=2]·f_rec) / (3 + 𝟙[z=2])`` (module docstring)."""
    f = format_indicators(trajectory)
    z2 = 1 if trajectory.stage == 2 else 0
    return (f["f_ans"] + f["f_th"] + f["f_tc"] + z2 * f["f_rec"]) / (3 + z2)
