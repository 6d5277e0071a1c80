"""The one name of every number the viewer shows, and what its tooltip says.

The paper's R1 and R2 are **outcome rewards** only: R1 = R_z of stage 1 (Eq. 6, preference
identification), R2 = R_z of stage 2 (Eq. 7, the recommendation). A stage's **total** (the
rubric's weighted sum of its members; ``R_z + R_tool + R_fmt`` under the paper's rubric) is
"S1 total" / "S2 total", never R1 / R2. Every page (runs, episodes, episode, compare, side by
side) and the static export take their labels from here, and the attributes of
:class:`~shopping_companion.viewer.models.EpisodeRow` carry the same names (``r1`` / ``r2``: the
outcome rewards; ``stage1_total`` / ``stage2_total``: the stage totals).
"""

from __future__ import annotations

__all__ = ["HELP", "component_help", "outcome_label", "stage_total_help", "stage_total_label"]

#: Tooltip of each label (the key is the label as shown).
HELP: dict[str, str] = {
    "Succ": "Succ: stage-2 success (Eq. 5), 1 or 0 per episode",
    "Acc": "Acc: stage-1 preference accuracy m1 / F",
    "R1": "R1: outcome reward of stage 1 (R_z of stage 1, Eq. 6): the identified preferences as judged; "
    "in a one-stage run, the single answer's preferences",
    "R2": "R2: outcome reward of stage 2 (R_z of stage 2, Eq. 7): the recommendation as judged",
    "R_z": "R_z: outcome reward of the stage (Eqs. 6-7)",
    "R_tool": "R_tool: tool-wise reward (Eq. 10, from r(u) of Eqs. 8-9)",
    "R_fmt": "R_fmt: format reward (Eq. 11)",
    "turns": "assistant turns of stage 1 and stage 2 together (mean count per episode)",
    "tool_calls": "tool calls of both stages (mean count per episode)",
    "total": "total: the weighted sum of the rubric's members (R_z + R_tool + R_fmt under the paper's rubric)",
}
#: Tooltips of the per-episode means of R_tool / R_fmt (episodes table, compare).
MEAN_HELP: dict[str, str] = {
    "R_tool": "R_tool: tool-wise reward (Eq. 10), mean over the episode's stages",
    "R_fmt": "R_fmt: format reward (Eq. 11), mean over the episode's stages",
}


def outcome_label(stage: int | None) -> str:
    """The name of a stage's outcome reward R_z: ``R1`` (stage 1), ``R2`` (stage 2), else ``R_z``."""
    return f"R{stage}" if stage in (1, 2) else "R_z"


def stage_total_label(stage: int | None) -> str:
    """The name of a stage's reward total: ``S1 total`` / ``S2 total``; ``total`` when the stage
    is unknown (a GRPO validation line without a stage key)."""
    return f"S{stage} total" if stage in (1, 2) else "total"


def stage_total_help(stage: int | None) -> str:
    """The tooltip of :func:`stage_total_label`."""
    if stage not in (1, 2):
        return HELP["total"]
    return (
        f"stage-{stage} total: R_z + R_tool + R_fmt under the run's rubric (the weighted sum of its members; "
        f"with a custom rubric its own members). Not R{stage}, which is the outcome reward alone"
    )


def component_help(name: str) -> str:
    """The tooltip of a reward component named ``name`` (a rubric member's key or a metric)."""
    if name in HELP:
        return HELP[name]
    if name.startswith("f_"):
        return f"{name}: format indicator (0 or 1)"
    return f"{name}: reward component logged by the run's rubric"
