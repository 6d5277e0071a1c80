"""Selective verdicts: a verdict's fields computed from its items, and what uncertain items earn.

The rule judge decides a stage as a list of :class:`~shopping_companion.types.VerdictItem` — stage 1:
one ``match`` per gold preference and one ``grounding`` per answer preference that matches none;
stage 2: one ``type`` per assigned slot, one ``attribute`` per gold preference of an assigned slot and,
for add-on deals, one ``bundle`` (u2). Each item is *confident* (explicit evidence) or *uncertain*
(with a reason). :func:`stage1_fields` and :func:`stage2_fields` turn items into the verdict's fields
under a policy (the reward spec's ``uncertain``, :data:`UNCERTAIN_POLICIES`):

``no_credit`` (default)
    an uncertain item earns nothing: an uncertain match or satisfied preference is not counted (m1,
    m2, n2), an uncertain type does not make q2, and an uncertain answer preference (spurious or
    harmless) is not subtracted in h1 but withholds q1 and stage-1 success, which need every answer
    preference to be confidently in order. Making the judge unsure never pays more than being right.
``credit``
    an uncertain item counts in the agent's favour (an uncertain miss is credited once per answer
    preference that may state it). Gameable: for measuring, not for training.
``unscored``
    the fields are the ``no_credit`` ones and the stage is not scored at all when an uncertain item
    is left to the policy (:func:`undecided` > 0): the outcome reward raises
    :class:`~shopping_companion.errors.UncertainUnscoredError`, and the stage is recorded unscored like
    a judge failure (no reward, no gradient).

Items an LLM judge decided (``decided_by="llm"``, a cascade: :mod:`shopping_companion.judges.cascade`)
count as decided; the policy applies only to uncertain items the rule judge kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, get_args

from shopping_companion.errors import ConfigError
from shopping_companion.types import UncertainPolicy, UncertainReason, Verdict, VerdictItem

__all__ = [
    "UNCERTAIN_POLICIES",
    "UNCERTAIN_REASONS",
    "check_uncertain_policy",
    "judging_stats",
    "resolve",
    "stage1_fields",
    "stage2_fields",
    "undecided",
]

#: The values of the reward spec's ``uncertain`` (:data:`~shopping_companion.types.UncertainPolicy`).
UNCERTAIN_POLICIES: tuple[str, ...] = get_args(UncertainPolicy)
#: The closed set of reasons an item is uncertain (:data:`~shopping_companion.types.UncertainReason`).
UNCERTAIN_REASONS: tuple[str, ...] = get_args(UncertainReason)


def check_uncertain_policy(value: Any, field: str = "uncertain") -> str:
    """``value`` if it is one of :data:`UNCERTAIN_POLICIES`; else :class:`ConfigError` naming
    ``field`` and the allowed values."""
    if isinstance(value, str) and value in UNCERTAIN_POLICIES:
        return value
    raise ConfigError(f"{field}: must be one of {', '.join(UNCERTAIN_POLICIES)}; got {value!r}")


def resolve(item: VerdictItem, policy: str) -> bool | None:
    """How ``item`` counts: its decision (``ok``) when confident or decided by an LLM; for an
    uncertain item the rule judge kept, True under ``credit`` and None (neither for nor against
    the agent) under ``no_credit`` and ``unscored``."""
    if item["confident"] or item["decided_by"] == "llm":
        return item["ok"]
    return True if policy == "credit" else None


def stage1_fields(items: Sequence[VerdictItem], *, F: int, N: int, addon: bool, policy: str) -> dict[str, Any]:
    """``q1``, ``m1``, ``c1``, ``h1``, ``success`` and ``matched`` (labels) from stage-1 items
    (module docstring). m1 counts matches that count; under ``credit`` an uncertain miss counts
    when one of its candidate answer preferences is not already used by another counted match.
    h1 counts grounding items that count against the agent; q1 = 1 iff h1 = 0, no grounding item
    is left uncertain (``no_credit`` / ``unscored``) and some match or grounding item counts for the
    agent; success = m1 = F, h1 = 0 and no grounding item left uncertain; c1 (add-on) counts slots
    with a counted match, at most N."""
    used: set[int] = set()
    matches = [it for it in items if it["kind"] == "match"]
    for it in matches:
        r = resolve(it, policy)
        if r and it["ok"] and it["answer"]:
            used.add(it["answer"][0])
    # credit for uncertain misses: one answer preference per gold preference, as many as can be
    # (a maximum matching of the misses to their free candidates)
    credited = _assign(
        {
            k: [j for j in it["answer"] if j not in used]
            for k, it in enumerate(matches)
            if resolve(it, policy) and not it["ok"]
        }
    )
    flags = [
        k in credited if (resolve(it, policy) and not it["ok"]) else bool(resolve(it, policy))
        for k, it in enumerate(matches)
    ]
    grounding = [resolve(it, policy) for it in items if it["kind"] == "grounding"]
    m1 = sum(flags)
    h1 = sum(r is False for r in grounding)
    clear = h1 == 0 and all(r is not None for r in grounding)
    accepted = any(flags) or any(r is True for r in grounding)
    c1 = min(len({it["slot"] for it, f in zip(matches, flags) if f}), N) if addon else None
    return {
        "q1": 1 if accepted and clear else 0,
        "m1": m1,
        "c1": c1,
        "h1": h1,
        "success": m1 == F and clear,
        "matched": [it["label"] for it, f in zip(matches, flags) if f],
    }


def _assign(options: dict[int, list[int]]) -> set[int]:
    """The keys of ``options`` (key -> the values it may take) in a maximum matching of keys to
    distinct values (augmenting paths, keys in order)."""
    owner: dict[int, int] = {}

    def augment(k: int, seen: set[int]) -> bool:
        for j in options[k]:
            if j not in seen:
                seen.add(j)
                if j not in owner or augment(owner[j], seen):
                    owner[j] = k
                    return True
        return False

    for k in options:
        augment(k, set())
    return set(owner.values())


def stage2_fields(items: Sequence[VerdictItem], *, F: int, N: int, addon: bool, p2: int, policy: str) -> dict[str, Any]:
    """``q2``, ``m2``, ``n2``, ``u2``, ``success`` and ``matched`` (labels) from stage-2 items and
    the structural ``p2`` (module docstring). q2 = 1 iff some slot has a product and every type item
    counts; m2 counts attribute items that count; n2 (add-on) counts slots whose type item and every
    attribute item count; u2 (add-on) is the bundle item (0 without one)."""
    types = {it["slot"]: bool(resolve(it, policy)) for it in items if it["kind"] == "type"}
    attrs = [(it, bool(resolve(it, policy))) for it in items if it["kind"] == "attribute"]
    bundle = [it for it in items if it["kind"] == "bundle"]
    m2 = sum(ok for _, ok in attrs)
    q2 = 1 if types and all(types.values()) else 0
    n2 = sum(1 for s, rel in types.items() if rel and all(ok for it, ok in attrs if it["slot"] == s))
    u2 = (1 if bundle and bundle[0]["ok"] else 0) if addon else None
    success = bool(p2 and q2 and m2 == F)
    if addon:
        success = success and n2 == N and u2 == 1
    return {
        "q2": q2,
        "m2": m2,
        "n2": n2 if addon else None,
        "u2": u2,
        "success": success,
        "matched": [it["label"] for it, ok in attrs if ok],
    }


def undecided(verdict: Verdict) -> int:
    """Uncertain items of ``verdict`` that no LLM decided (those its ``uncertain_policy`` scored)."""
    return sum(1 for it in verdict.items if not it["confident"] and it["decided_by"] == "rule")


def judging_stats(verdict: Verdict | None) -> dict[str, float]:
    """``{"items", "uncertain", "llm_calls"}`` of one verdict (all 0.0 for None): the per-step
    GRPO metrics ``shopcomp/uncertain_share`` (uncertain / items) and LLM-judge calls sum these."""
    if verdict is None:
        return {"items": 0.0, "uncertain": 0.0, "llm_calls": 0.0}
    return {
        "items": float(len(verdict.items)),
        "uncertain": float(verdict.uncertain),
        "llm_calls": float(verdict.llm_calls),
    }
