"""Counterfactual stress variants of a benchmark (docs/benchmark.md, "Abilities and stress variants").

:func:`stress_tasks` gives, for every task, the variants of ``Task.stress`` it can carry, each a
new task ``<task_id>~<variant>`` (``variant_of``: the original) with the original's request,
products and haystack:

``needle_removed``
    The needle sessions (and any stale sessions) are gone from the history; the gold has no
    preference (F = 0) and the original preferences go to ``unstated``: an agent must report none.
    Reporting one is spurious (the rule judge's grounding rule: stated in no user turn), so stage-1
    success falls. Stage 2 asks only for the right kind of product, so on this variant Succ also
    needs stage 1 right (:func:`~shopping_companion.envs.env.episode_scores`): a policy that always
    reports preferences scores 0.
``stale_before``
    A session stating a value of one gold attribute that contradicts the gold value
    (:func:`~.synthesis.conflicts.contradicts`, a value another task of the benchmark wants) is
    inserted right before the first needle, dated before it; the needle is the latest statement, so
    the gold is unchanged. The value goes to ``superseded``. Needs a gold attribute with such a value.
``needle_oldest``
    The needles (and stale sessions, in their order) move to the start of the history; the dates
    stay the history's, so every session keeps its position's date.

Temporal tasks carry only ``needle_removed`` (their request names a month, which the other variants
would move). The texts of stale sessions come from the template generator.
:func:`write_stress_benchmark` writes the originals and their variants as one benchmark directory,
so one evaluation reports every policy's drop per variant (``report.md``, "Per stress variant").
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from datetime import date, timedelta
from pathlib import Path
from typing import Any, Sequence

from shopping_companion.benchmark.synthesis.catalog_view import Feature
from shopping_companion.benchmark.synthesis.common import opaque_id, stable_hash
from shopping_companion.benchmark.synthesis.conflicts import contradicts
from shopping_companion.benchmark.synthesis.directory import SynthOutput, task_counts, write_benchmark
from shopping_companion.benchmark.synthesis.generators import SlotSpec, TaskSpec, TemplateGenerator
from shopping_companion.benchmark.synthesis.verify import states_value
from shopping_companion.errors import DataError
from shopping_companion.types import STRESS_VARIANTS, Preference, Session, SessionRef, Stress, Task

__all__ = ["check_stress_target", "stress_tasks", "write_stress_benchmark"]


def _check_variants(variants: Sequence[str]) -> list[Stress]:
    bad = [v for v in variants if v not in STRESS_VARIANTS]
    if bad or not variants:
        raise DataError(
            f"stress variants: {'unknown ' + repr(bad) if bad else 'none given'}; allowed: {', '.join(STRESS_VARIANTS)}"
        )
    return [v for v in STRESS_VARIANTS if v in variants]  # type: ignore[misc]


def _variant(task: Task, stress: Stress, **update: Any) -> Task:
    return task.model_copy(
        update={"task_id": f"{task.task_id}~{stress}", "stress": stress, "variant_of": task.task_id, **update}
    )


def _needle_removed(task: Task) -> Task:
    gone = set(task.needle_session_ids) | set(task.stale_session_ids)
    return _variant(
        task,
        "needle_removed",
        history=[h for h in task.history if h.session_id not in gone],
        needle_session_ids=[],
        preferences=[],
        superseded=[],
        stale_session_ids=[],
        unstated=[*task.preferences, *task.unstated],
        n_alternatives=None,
        verification=None,
    )


def _needle_oldest(task: Task) -> Task:
    moved = set(task.needle_session_ids) | set(task.stale_session_ids)
    order = [h.session_id for h in task.history if h.session_id in moved]
    order += [h.session_id for h in task.history if h.session_id not in moved]
    dates = [h.date for h in task.history]
    return _variant(task, "needle_oldest", history=[SessionRef(session_id=s, date=d) for s, d in zip(order, dates)])


def _stale_before(
    task: Task, values: dict[str, list[str]], sessions: dict[str, Session], gen: TemplateGenerator
) -> tuple[Task, Session] | None:
    rng = random.Random(stable_hash("stress", task.task_id))
    needles = [sessions[s] for s in task.needle_session_ids if s in sessions]
    for p in sorted(task.preferences, key=lambda p: (p.slot, p.attribute)):
        if p.polarity != "want":
            continue
        others = [v for v in values.get(p.attribute, []) if contradicts(p.attribute, p.value, v)]
        if not others:
            continue
        other = rng.choice(others)
        slot = task.slots[p.slot]
        spec = TaskSpec(
            task_id=task.task_id,
            index=0,
            task_type="single",
            slots=[
                SlotSpec(
                    p.slot,
                    None,
                    slot.product_type,
                    [slot.product_type],
                    "generic",
                    [Feature(p.attribute, p.attribute, other)],
                    [],
                )
            ],
            n_needles=1,
            seed=rng.randrange(2**31),
        )
        turns = gen.dialogues(spec, rng)[0]
        users = [t.content for t in turns if t.role == "user"]
        if not any(states_value(p.attribute, other, u) for u in users) or any(
            states_value(q.attribute, q.value, u) for q in task.preferences for u in users
        ):
            continue
        if not any(states_value(p.attribute, p.value, t.content) for s in needles for t in s.turns if t.role == "user"):
            continue
        sid = opaque_id(task.task_id, "stress-stale", p.attribute)
        stale = Session(session_id=sid, turns=turns, source=f"template-stale:{task.task_id}:stress")
        first = min(i for i, h in enumerate(task.history) if h.session_id in set(task.needle_session_ids))
        when = date.fromisoformat(task.history[first].date) - timedelta(days=1)
        if first > 0:
            when = max(when, date.fromisoformat(task.history[first - 1].date))
        history = list(task.history)
        history.insert(first, SessionRef(session_id=sid, date=when.isoformat()))
        pref = Preference(slot=p.slot, attribute=p.attribute, value=other)
        return (
            _variant(
                task,
                "stale_before",
                history=history,
                superseded=[*task.superseded, pref],
                stale_session_ids=[*task.stale_session_ids, sid],
            ),
            stale,
        )
    return None


def stress_tasks(
    tasks: list[Task], sessions: dict[str, Session], variants: Sequence[str] = STRESS_VARIANTS
) -> tuple[list[Task], dict[str, Session], dict[str, dict[str, int]]]:
    """The variants (module docstring) of every task with needles, in task order and
    :data:`~shopping_companion.types.STRESS_VARIANTS` order per task. Returns ``(variants, new
    sessions by id, skipped)`` where ``skipped`` counts per variant the tasks that cannot carry it
    and why (``no_needle``, ``temporal``, ``no_contradicting_value``). Raises
    :class:`~shopping_companion.errors.DataError` naming the allowed values for an unknown variant."""
    wanted = _check_variants(variants)
    values: dict[str, list[str]] = defaultdict(list)
    for t in tasks:
        for p in t.preferences:
            if p.value not in values[p.attribute]:
                values[p.attribute].append(p.value)
    gen = TemplateGenerator()
    out: list[Task] = []
    new_sessions: dict[str, Session] = {}
    skipped: dict[str, Counter[str]] = {v: Counter() for v in wanted}
    for t in tasks:
        if t.stress is not None:
            continue
        for v in wanted:
            if not t.needle_session_ids:
                skipped[v]["no_needle"] += 1
            elif v != "needle_removed" and "temporal" in t.abilities:
                skipped[v]["temporal"] += 1
            elif v == "needle_removed":
                out.append(_needle_removed(t))
            elif v == "needle_oldest":
                out.append(_needle_oldest(t))
            else:
                got = _stale_before(t, values, sessions, gen)
                if got is None:
                    skipped[v]["no_contradicting_value"] += 1
                    continue
                out.append(got[0])
                new_sessions[got[1].session_id] = got[1]
    return out, new_sessions, {v: dict(c) for v, c in skipped.items()}


def check_stress_target(source: str | Path, out_dir: str | Path) -> None:
    """Refuse an ``out_dir`` the stress benchmark of ``source`` would clobber: ``source`` itself, a
    file, or a non-empty directory that holds anything but an earlier stress benchmark of the same
    source (which is rewritten). Raises :class:`~shopping_companion.errors.DataError` naming the
    directory."""
    import json

    src, out = Path(source).expanduser().resolve(), Path(out_dir).expanduser()
    if out.resolve() == src:
        raise DataError(f"{out}: that is the source benchmark; the stress benchmark needs a directory of its own")
    if out.exists() and not out.is_dir():
        raise DataError(f"{out}: not a directory; give a new or empty directory for the stress benchmark")
    if not out.is_dir() or not any(out.iterdir()):
        return
    try:
        earlier = json.loads((out / "manifest.json").read_text(encoding="utf-8")).get("stress") or {}
    except (OSError, ValueError, AttributeError):
        earlier = {}
    made_from = earlier.get("source") if isinstance(earlier, dict) else None
    if not isinstance(made_from, str) or Path(made_from).expanduser().resolve() != src:
        raise DataError(
            f"{out}: not empty and not a stress benchmark of {source}; give a new or empty directory "
            "(nothing in it was changed)"
        )


def write_stress_benchmark(
    source: str | Path, out_dir: str | Path, variants: Sequence[str] = STRESS_VARIANTS
) -> SynthOutput:
    """Write the benchmark at ``source`` (loaded and checked) with the stress variants of its tasks
    to ``out_dir``: its tasks first, then the variants; the sessions of both; a manifest recording
    ``stress`` (source manifest hash, variants per kind, skipped tasks per reason) and the counts.
    Raises :class:`~shopping_companion.errors.DataError` for an unknown variant, a source that is
    not a benchmark directory, an ``out_dir`` that :func:`check_stress_target` refuses, or when no
    task can carry any variant."""
    from shopping_companion.assembly.data import load_benchmark
    from shopping_companion.runs import file_sha256

    src = Path(source)
    check_stress_target(src, out_dir)
    bench = load_benchmark(src)
    tasks, extra, skipped = stress_tasks(bench.tasks, bench.sessions, variants)
    if not tasks:
        raise DataError(f"{src}: no task can carry the stress variants {list(variants)} (skipped: {skipped})")
    all_tasks = [t for t in bench.tasks if t.stress is None] + tasks
    sessions = {**bench.sessions, **extra}
    manifest = dict(bench.manifest)
    manifest.pop("files", None)
    manifest["counts"] = task_counts(all_tasks, len(sessions), len(all_tasks))
    manifest["stress"] = {
        "source": str(src),
        "source_manifest_sha256": file_sha256(src / "manifest.json"),
        "variants": dict(Counter(t.stress for t in tasks if t.stress)),
        "skipped": skipped,
    }
    out = SynthOutput(tasks=all_tasks, sessions=sessions, manifest=manifest)
    write_benchmark(out, out_dir)
    return out
