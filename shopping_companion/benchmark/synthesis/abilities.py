"""Memory abilities of synthesised tasks (LongMemEval's abilities, for preferences).

A build's ``abilities`` (:class:`~.config.SynthConfig`, ``shopcomp synth --abilities``; default
``extraction`` only) give each task one ability (:func:`ability_plan`: as many of each as possible,
in a seeded order), recorded in ``Task.abilities``, and it is built
it as follows; every task still passes every check of :mod:`.build`:

``extraction``
    Today's tasks: each wanted feature stated once, in the needle sessions.
``knowledge_update``
    A wanted category feature *f* of the first product gets a second value *o* of the same
    attribute that contradicts it (:func:`~.conflicts.contradicts`, taken from products of the same
    type, else the catalog's vocabulary). An earlier *stale* session states *o*; a later-dated
    revision session (:meth:`~.generators.Generator.revision`) says the user no longer wants *o*,
    with a reason, and states *f*. Gold: *f* (the latest); *o* is recorded in ``Task.superseded``.
    Checked: the stale session states *o* and not *f*; every conflict the rule detector finds in it
    is revised later (:func:`~.conflicts.drop_superseded`), so it contradicts nothing else.
``multi_session``
    The first product has at least three wanted features, stated in three sessions (the other
    products' features in their own needles).
``temporal``
    As for knowledge update a second value *o*, but said in another conversation of another month;
    the request points to the needle stating *f* by its month
    (:meth:`~.generators.Generator.temporal_reference`, e.g. "It should match what I told you in
    March 2023."). The gold needle may come before or after the other conversation, so neither the
    first nor the latest mention is always right; only the dates decide. Checked: the two months differ
    and the other conversation conflicts with no other wanted feature.
``abstention``
    A does-not-matter attribute *a* of the first product (a real attribute, not wanted) is left out
    of the dialogues, and the request asks for "my usual *a*"
    (:meth:`~.generators.Generator.abstention_request`). The user never stated one, so a reported
    value is spurious (the judge's h1: an attribute the user does not care about); ``Task.unstated``
    records *a* with the reference product's value. Checked: no needle or distractor user turn names
    *a* or states that value.

The generators write every text (template and LLM alike): the sessions through
:meth:`~.generators.Generator.dialogues` on sub-tasks (one product, the features of that session),
the rest through the three methods above.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from shopping_companion.benchmark.synthesis.catalog_view import CatalogView, Feature
from shopping_companion.benchmark.synthesis.common import CheckFailed, GenerationError
from shopping_companion.benchmark.synthesis.conflicts import (
    ConflictDetector,
    WantedFeature,
    contradicts,
    drop_superseded,
)
from shopping_companion.benchmark.synthesis.generators import Generator, SlotSpec, TaskSpec
from shopping_companion.benchmark.synthesis.verify import leaked_values, states_value
from shopping_companion.judges.rule import normalize_tokens
from shopping_companion.types import Ability, Preference, Session, SessionRef, Turn

__all__ = [
    "AbilityParts",
    "ability_plan",
    "check_dated",
    "finish_instruction",
    "place_sessions",
    "prepare",
    "write_sessions",
]

#: Products of the same type read for a second value of an attribute.
_ALT_PRODUCTS = 40


def ability_plan(abilities: Sequence[Ability], n_tasks: int, seed: int) -> list[Ability]:
    """One ability per task index: each of ``abilities`` ``n_tasks // k`` times (the first
    ``n_tasks % k`` once more), in a seeded order."""
    k = len(abilities)
    seq = [abilities[i % k] for i in range(n_tasks)]
    random.Random(f"shopcomp-abilities:{seed}").shuffle(seq)
    return seq


@dataclass
class AbilityParts:
    """What an ability adds to one task attempt.

    ``feature`` / ``other``: the gold feature with a second value and that value
    (knowledge_update, temporal); ``unstated``: the attribute left unstated (abstention);
    after :func:`write_sessions`: ``needles`` (gold-stating sessions, as turns), ``stale`` (sessions
    stating ``other``), ``revision`` (index of the revision session in ``needles``), ``target``
    (index of the needle the request points to).
    """

    ability: Ability
    feature: Feature | None = None
    other: Feature | None = None
    unstated: Feature | None = None
    needles: list[list[Turn]] = field(default_factory=list)
    stale: list[list[Turn]] = field(default_factory=list)
    revision: int | None = None
    target: int | None = None

    def record(self, slot: int = 0) -> dict[str, Any]:
        """The task fields of the ability (``abilities``, ``superseded``, ``unstated``)."""
        out: dict[str, Any] = {"abilities": [self.ability]}
        if self.other is not None:
            out["superseded"] = [Preference(slot=slot, attribute=self.other.label, value=self.other.value)]
        if self.unstated is not None:
            out["unstated"] = [Preference(slot=slot, attribute=self.unstated.label, value=self.unstated.value)]
        return out


def _second_value(view: CatalogView, slot: SlotSpec, f: Feature, rng: random.Random) -> Feature | None:
    """A value of ``f``'s attribute that contradicts it: from products of the slot's type first,
    then from the catalog's vocabulary of the attribute."""
    same_type = view.single_types.get(slot.product_type, [])
    sample = rng.sample(same_type, min(len(same_type), _ALT_PRODUCTS))
    seen = sorted({g.value for p in sample for g in view.features(p, allow_brand=False) if g.label == f.label})
    rng.shuffle(seen)
    vocab = sorted(" ".join(v) for v in view.vocab.get(f.label, ()))
    rng.shuffle(vocab)
    for v in seen + vocab:
        if contradicts(f.label, f.value, v):
            return Feature(key=f.key, label=f.label, value=v)
    return None


def prepare(ability: Ability, view: CatalogView, slots: list[SlotSpec], rng: random.Random) -> AbilityParts:
    """Choose what the ability needs from the sampled ``slots`` (module docstring). Raises
    :class:`~.common.CheckFailed` (``too_few_features``, ``no_second_value``,
    ``nothing_to_abstain_on``) when the sample cannot carry the ability; the task is re-drawn."""
    slot = slots[0]
    if ability == "multi_session" and len(slot.wanted) < 3:
        raise CheckFailed("too_few_features", f"multi_session needs 3 wanted features, got {len(slot.wanted)}")
    if ability in ("knowledge_update", "temporal"):
        cands = [f for f in slot.wanted if f.kind == "category" and f.label not in ("size", "brand")]
        rng.shuffle(cands)
        for f in cands:
            other = _second_value(view, slot, f, rng)
            if other is not None:
                return AbilityParts(ability, feature=f, other=other)
        raise CheckFailed("no_second_value", ", ".join(f"{f.label}={f.value}" for f in cands) or "no category feature")
    if ability == "abstention":
        wanted = {f.label for s in slots for f in s.wanted}
        cands = [f for f in slot.dont_care if f.kind == "category" and f.label not in wanted]
        if not cands:
            raise CheckFailed("nothing_to_abstain_on", slot.product.product_id if slot.product else "")
        a = rng.choice(cands)
        slot.dont_care = [f for f in slot.dont_care if f is not a]  # never said, not even "I don't mind"
        return AbilityParts(ability, unstated=a)
    return AbilityParts(ability)


def _sub(spec: TaskSpec, slots: list[SlotSpec], n_needles: int, salt: int) -> TaskSpec:
    return dataclasses.replace(spec, slots=slots, n_needles=n_needles, seed=spec.seed + 7919 * salt)


def _states(turns: list[Turn], f: Feature) -> bool:
    return any(t.role == "user" and states_value(f.label, f.value, t.content) for t in turns)


def write_sessions(gen: Generator, spec: TaskSpec, parts: AbilityParts, rng: random.Random) -> None:
    """Write the ability's sessions into ``parts`` (module docstring) with ``gen``. Raises
    :class:`~.common.GenerationError` as the generator does, and :class:`~.common.CheckFailed`
    (``stale_not_stated``) when a stale session does not state its value or states the gold one."""
    slot = spec.slots[0]
    if parts.ability == "multi_session":
        chunks = [slot.wanted[j::3] for j in range(3)]
        for j, chunk in enumerate(chunks):
            parts.needles += gen.dialogues(_sub(spec, [dataclasses.replace(slot, wanted=chunk)], 1, j + 1), rng)
        rest = spec.slots[1:]
        if rest:
            parts.needles += gen.dialogues(_sub(spec, rest, max(1, (len(rest) + 1) // 2), 4), rng)
        return
    if parts.ability not in ("knowledge_update", "temporal"):
        parts.needles = gen.dialogues(spec, rng)
        return
    f, other = parts.feature, parts.other
    assert f is not None and other is not None
    stale = gen.dialogues(_sub(spec, [dataclasses.replace(slot, wanted=[other], dont_care=[])], 1, 5), rng)
    if not _states(stale[0], other) or _states(stale[0], f):
        raise CheckFailed("stale_not_stated", f"{other.label}={other.value}")
    parts.stale = stale
    if parts.ability == "temporal":
        parts.needles = gen.dialogues(spec, rng)
        hits = [i for i, turns in enumerate(parts.needles) if _states(turns, f)]
        if not hits:
            raise CheckFailed("not_resolvable", f"{f.label}={f.value}")
        parts.target = hits[0]
        return
    rest_slots = [dataclasses.replace(slot, wanted=[x for x in slot.wanted if x is not f]), *spec.slots[1:]]
    if any(s.wanted for s in rest_slots):
        keep = [s for s in rest_slots if s.wanted]
        parts.needles = gen.dialogues(_sub(spec, keep, max(1, spec.n_needles - 1), 6), rng)
    parts.needles.append(gen.revision(spec, slot, other, f, rng))
    parts.revision = len(parts.needles) - 1


def place_sessions(
    rng: random.Random, order: list[str], needle_ids: list[str], stale_ids: list[str], parts: AbilityParts
) -> list[str]:
    """``order`` (haystack and distractor ids) with the needles and stale sessions inserted at
    random positions; a knowledge-update revision comes after its stale session, a temporal target
    in another third of the history than the other conversation."""
    order = list(order)
    special = {parts.revision, parts.target} - {None}
    for j, nid in enumerate(needle_ids):
        if j not in special:
            order.insert(rng.randint(0, len(order)), nid)
    if parts.revision is not None:
        pos = rng.randint(len(order) // 2, len(order))
        order.insert(pos, needle_ids[parts.revision])
        for sid in stale_ids:
            order.insert(rng.randint(0, pos), sid)
    elif parts.target is not None:
        third = max(1, len(order) // 3)
        early = rng.random() < 0.5
        order.insert(
            rng.randint(0, third) if early else rng.randint(len(order) - third, len(order)), needle_ids[parts.target]
        )
        for sid in stale_ids:
            n = len(order)
            order.insert(rng.randint(n - third, n) if early else rng.randint(0, third), sid)
    else:
        for sid in stale_ids:
            order.insert(rng.randint(0, len(order)), sid)
    return order


def _month(iso: str) -> str:
    return date.fromisoformat(iso).strftime("%B %Y")


def check_dated(
    parts: AbilityParts,
    history: list[SessionRef],
    needles: list[Session],
    stale: list[Session],
    distractors: list[Session],
    detector: ConflictDetector,
    feats: list[WantedFeature],
) -> None:
    """The checks that need the dates (module docstring); raises :class:`~.common.CheckFailed`:
    ``stale_conflict_unrevised`` (a stale session conflicts with a wanted feature other than the
    one it states, or, for a knowledge update, with that one without a later revision),
    ``temporal_ambiguous`` (the other conversation falls in the target's month),
    ``abstention_stated`` (the unstated attribute is named)."""
    dates = {h.session_id: h.date for h in history}
    if parts.feature is not None:
        f = parts.feature
        which = {w.describe() for w in feats if w.slot == 0 and (w.label, w.value) == (f.label, f.value)}
        found = [c for s in stale for c in detector.find(s, feats, cache=False)]
        if parts.revision is not None:  # the stale value is revised later: no conflict left
            rev = needles[parts.revision].session_id
            left = drop_superseded(found, dates, {w: [rev] for w in which})
        else:  # temporal: the other conversation contradicts f on purpose, nothing else
            left = [c for c in found if c.feature not in which]
        if left:
            raise CheckFailed("stale_conflict_unrevised", left[0].describe())
    if parts.target is not None:
        month = _month(dates[needles[parts.target].session_id])
        if any(_month(dates[s.session_id]) == month for s in stale):
            raise CheckFailed("temporal_ambiguous", month)
    if parts.unstated is not None:
        a = parts.unstated
        words = set(normalize_tokens(a.spoken_label))
        for s in needles + distractors:
            for t in s.turns:
                if t.role == "user" and (
                    words <= set(normalize_tokens(t.content)) or states_value(a.label, a.value, t.content)
                ):
                    raise CheckFailed("abstention_stated", t.content[:120])


def finish_instruction(
    gen: Generator,
    spec: TaskSpec,
    parts: AbilityParts,
    instruction: str,
    history: list[SessionRef],
    needles: list[Session],
    gold: list[Preference],
    rng: random.Random,
) -> str:
    """``instruction`` with the ability's sentence: the temporal reference to the target needle's
    month or the abstention request. Raises :class:`~.common.CheckFailed`
    (``instruction_leaks_preference``) when the sentence states a gold value, and
    :class:`~.common.GenerationError` as the generator does."""
    if parts.target is not None:
        when = _month({h.session_id: h.date for h in history}[needles[parts.target].session_id])
        extra = gen.temporal_reference(spec, when, rng).strip()
        if when not in extra:
            raise GenerationError(f"temporal reference without {when!r}: {extra!r}")
    elif parts.unstated is not None:
        extra = gen.abstention_request(spec, spec.slots[0], parts.unstated.spoken_label, rng).strip()
    else:
        return instruction
    if leaked_values(gold, extra):
        raise CheckFailed("instruction_leaks_preference", extra)
    return f"{instruction} {extra}"
