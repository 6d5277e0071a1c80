"""The GRPO reward function: verl's ``custom_reward_function`` hook (Shopping Companion §5.3,
Eqs. 6–12; App. C.2).

The environment judges and rewards every stage as it ends (one reward implementation for
evaluation, SFT and RL); the agent loop hands that :class:`~shopping_companion.types.RewardBreakdown`
to the trainer in ``extra_fields["shopcomp_reward"]``, which verl merges into ``extra_info``.
:func:`compute_score` turns it into the trainer's scalar and its logged components.

verl config::

    reward:
      custom_reward_function:
        path: pkg://shopping_companion.trainers.reward   # or the file path of this module
        name: compute_score
        reward_kwargs: {reward_config: paper}            # the reward spec (docs/rewards.md)

The agent loop reads the same ``reward_kwargs.reward_config`` from the trainer config for its
judge and rubric, so both sides score with one spec. ``score`` is the configured rubric's total: ``Σ weight · component`` over the rubric's members
(``paper``: R = R_z + R_tool + R_fmt, Eq. 12; ``outcome_only``: R = R_z + R_fmt, R_tool logged
with weight 0). Without ``rubric`` the breakdown's own total (the rubric the environment used) is
the score. Every other key of the returned dict is logged by verl (reward_extra_info); the key set
is the same for every trajectory of a batch (verl stacks them per key).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

__all__ = ["LOGGED_KEYS", "compute_score", "score_breakdown"]

#: Components returned for every trajectory (0.0 when a component does not apply to its stage).
#: ``judge_failed`` / ``deadline_missed``: 1.0 when the trajectory is not scored (its judge failed;
#: its judging and rewarding missed the per-sample ``scoring_deadline_s``); ``uncertain_unscored``:
#: 1.0 when it is not scored because the reward spec says ``uncertain: unscored``.
LOGGED_KEYS = (
    "R_z",
    "R_tool",
    "R_fmt",
    "f_ans",
    "f_th",
    "f_tc",
    "f_rec",
    "tool_mem_mean",
    "tool_prod_mean",
    "n_tool_calls",
    "success",
    "stage",
    "judge_failed",
    "deadline_missed",
    "uncertain_unscored",
)

_RUBRIC_CACHE: dict[str, Any] = {}


def _weights(rubric: Any) -> dict[str, float]:
    """Member key -> weight of ``rubric``: a :class:`Rubric`, or any reward-config reference
    (:func:`~shopping_companion.assembly.reward_spec.load_reward_spec`; built once per process)."""
    from shopping_companion.rewards.rubric import Rubric
    from shopping_companion.assembly.reward_spec import load_reward_spec

    if isinstance(rubric, Rubric):
        r = rubric
    else:
        key = rubric if isinstance(rubric, str) else repr(rubric)
        if key not in _RUBRIC_CACHE:
            _RUBRIC_CACHE[key] = load_reward_spec(rubric).build_rubric()
        r = _RUBRIC_CACHE[key]
    return {m.key: float(m.weight) for m in r.members}


def score_breakdown(breakdown: Mapping[str, Any], rubric: Any = None) -> dict[str, float]:
    """The logged dict of one breakdown (``RewardBreakdown.model_dump()``): ``score`` plus
    :data:`LOGGED_KEYS` plus the rubric's own member keys.

    Raises ``ValueError`` when a rubric member's component is missing from the breakdown (the
    environment used a rubric without it) or a value is not finite.
    """
    comps = {str(k): float(v) for k, v in dict(breakdown.get("components") or {}).items()}
    failed = comps.get("judge_failed", 0.0) > 0
    if rubric is None or failed:
        score = float(breakdown["total"])
    else:
        weights = _weights(rubric)
        missing = sorted(k for k in weights if k not in comps)
        if missing:
            raise ValueError(
                f"reward_kwargs.rubric={rubric!r}: components {missing} are not in the trajectory's reward breakdown "
                f"(it has {sorted(comps)}); the agent loop's rubric must compute every member of the scoring rubric"
            )
        score = sum(w * comps[k] for k, w in weights.items() if w != 0)
    out = {"score": score}
    for k in LOGGED_KEYS:
        out[k] = comps.get(k, 0.0)
    if rubric is not None:  # every member, custom ones too (0.0 when unscored: one key set per batch)
        for k in _weights(rubric):
            out.setdefault(k, 0.0 if failed else comps[k])
    for k, v in out.items():
        if not math.isfinite(v):
            raise ValueError(f"reward component {k!r} is not finite ({v})")
    return out


def compute_score(
    data_source: str | None = None,
    solution_str: str | None = None,
    ground_truth: Any = None,
    extra_info: Mapping[str, Any] | None = None,
    rubric: Any = None,
    reward_config: Any = None,
    **kwargs: Any,
) -> dict[str, float]:
    """verl reward hook: ``{"score": total, "R_z": …, "R_tool": …, "R_fmt": …, "f_ans": …, …}``.

    Reads ``extra_info["shopcomp_reward"]`` (the agent loop's breakdown) and scores it with the
    rubric of ``reward_config`` (``reward_kwargs.reward_config``: the reward spec both verl sides
    read — the agent loop takes its judge and rubric from the same key, so every member the score
    needs is computed; :func:`~shopping_companion.assembly.reward_spec.load_reward_spec` forms: a built-in
    name, a YAML file, ``module:attr`` or the spec's JSON) or, the older way, ``rubric`` (a
    rubric reference or :class:`~shopping_companion.rewards.rubric.Rubric`). Neither: the
    breakdown's own total. Every member of the rubric is logged (custom ones included), plus
    ``num_turns`` when verl passes it. ``data_source``, ``solution_str`` and ``ground_truth`` are
    not needed: the environment already judged the trajectory against the task's gold data.

    Raises ``ValueError`` when ``extra_info`` has no ``shopcomp_reward`` (the row was not played
    by the Shopping Companion agent loop) or a component is missing or not finite.
    """
    if rubric is not None and reward_config is not None:
        raise ValueError(
            "reward_kwargs: give reward_config (the one reward spec) or the older rubric, not both "
            f"(reward_config={reward_config!r}, rubric={rubric!r})"
        )
    if reward_config is not None:
        rubric = reward_config
    info = dict(extra_info or {})
    breakdown = info.get("shopcomp_reward")
    if not breakdown:
        raise ValueError(
            "extra_info['shopcomp_reward'] is missing: rows of data_source "
            f"{data_source!r} must be played by the 'shopping_companion' agent loop (agent_name column), "
            "which puts the environment's reward breakdown there"
        )
    out = score_breakdown(breakdown, rubric)
    nt = info.get("num_turns")
    out["num_turns"] = float(nt) if nt is not None and not isinstance(nt, (list, dict)) else 0.0
    return out
