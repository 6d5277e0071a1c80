"""Outcome-level rewards R1 and R2 (Shopping Companion §5.3, Eqs. 6–7).

Both are computed from a judge :class:`~shopping_companion.types.Verdict` only, so any judge (rule,
LLM, human) plugs in. A failed verdict (``failed=True``) or a verdict missing a field the equation
needs raises :class:`ValueError` (:class:`~shopping_companion.judges.base.JudgeFailedError` for a
failed verdict): a judge failure must never be scored as a 0 reward. So does a verdict scored
``uncertain_policy="unscored"`` with uncertain items no judge decided
(:class:`~shopping_companion.errors.UncertainUnscoredError`, a ``JudgeFailedError``): the reward
spec says such a stage is not scored. Fields out of
their documented range (q, p, u ∉ {0,1}; m ∉ [0, F]; c, n ∉ [0, N]) also raise: clamping is the
judge's business, not the reward's.
"""

from __future__ import annotations

from shopping_companion.errors import UncertainUnscoredError
from shopping_companion.judges.base import JudgeFailedError
from shopping_companion.judges.selective import undecided
from shopping_companion.types import Verdict

__all__ = ["stage1_reward", "stage2_reward", "outcome_reward"]


def _check_usable(verdict: Verdict, stage: int) -> None:
    if verdict.failed:
        reason = "; ".join(verdict.reasons) or "no reason given"
        raise JudgeFailedError(f"judge {verdict.judge!r} failed ({reason}); a failed verdict cannot be scored")
    if verdict.uncertain_policy == "unscored" and undecided(verdict):
        raise UncertainUnscoredError(
            f"judge {verdict.judge!r} is uncertain about {undecided(verdict)} item(s) and the reward spec says "
            "uncertain: unscored; the stage is not scored"
        )
    if verdict.stage != stage:
        raise ValueError(f"stage-{stage} reward asked for a stage-{verdict.stage} verdict")


def _need(verdict: Verdict, field: str, lo: float, hi: float, binary: bool = False) -> float:
    v = getattr(verdict, field)
    if v is None:
        raise ValueError(f"verdict of judge {verdict.judge!r}: field {field} is required but None")
    v = float(v)
    if binary and v not in (0.0, 1.0):
        raise ValueError(f"verdict field {field}={v} must be 0 or 1")
    if not lo <= v <= hi:
        raise ValueError(f"verdict field {field}={v} out of range [{lo}, {hi}]")
    return v


def stage1_reward(verdict: Verdict) -> float:
    """R1 (Eq. 6) with our precision rule: ``(q1 + max(0, m1 − h1) + b·c1) / (1 + F + b·N)``.

    q1 ∈ {0,1} query relevance (the judges set it to 0 when any identified preference is
    spurious), m1 ∈ [0, F] matched preference attributes, h1 ≥ 0 spurious identified preferences
    (hallucinated, contradictory, piled on one attribute, misattributed; None = not assessed, read
    as 0), c1 ∈ [0, N] matched product count (read only when ``b == 1``, the add-on task). Result in
    [0, 1]. With h1 = 0 this is the paper's Eq. 6 exactly; subtracting h1 is our deviation
    (``docs/judge.md``): without it, listing several guesses per attribute raises m1 once q1 is
    already lost, so R1 would reward hallucination.
    """
    _check_usable(verdict, 1)
    F, N, b = verdict.F, verdict.N, verdict.b
    q1 = _need(verdict, "q1", 0, 1, binary=True)
    m1 = _need(verdict, "m1", 0, F)
    h1 = float(verdict.h1 or 0)
    c1 = _need(verdict, "c1", 0, N) if b else 0.0
    return (q1 + max(0.0, m1 - h1) + b * c1) / (1 + F + b * N)


def stage2_reward(verdict: Verdict) -> float:
    """R2 (Eq. 7): ``(p2 + q2 + m2 + b·(n2 + u2)) / (2 + F + b·(N + 1))``.

    p2 ∈ {0,1} product validity, q2 ∈ {0,1} relevance, m2 ∈ [0, F] matched preference attributes;
    for add-on (``b == 1``) also n2 ∈ [0, N] matched product count and u2 ∈ {0,1} budget
    feasibility (n2, u2 are not read when ``b == 0``). Result in [0, 1].
    """
    _check_usable(verdict, 2)
    F, N, b = verdict.F, verdict.N, verdict.b
    p2 = _need(verdict, "p2", 0, 1, binary=True)
    q2 = _need(verdict, "q2", 0, 1, binary=True)
    m2 = _need(verdict, "m2", 0, F)
    n2 = _need(verdict, "n2", 0, N) if b else 0.0
    u2 = _need(verdict, "u2", 0, 1, binary=True) if b else 0.0
    return (p2 + q2 + m2 + b * (n2 + u2)) / (2 + F + b * (N + 1))


def outcome_reward(verdict: Verdict) -> float:
    """R_z (Eqs. 6–7): :func:`stage1_reward` or :func:`stage2_reward` by ``verdict.stage``."""
    if verdict.stage == 1:
        return stage1_reward(verdict)
    if verdict.stage == 2:
        return stage2_reward(verdict)
    raise ValueError(f"unknown stage {verdict.stage!r}")  # pragma: no cover - Verdict validates
