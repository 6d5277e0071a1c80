"""``benchmark_tasks_sha256`` (assembly/data.py): a benchmark keeps its hash when the task schema
grows, so runs recorded before a field existed can still be resumed, rescored and served."""

from __future__ import annotations

import hashlib

from shopping_companion.assembly.data import TASK_FIELDS_ADDED_LATER, benchmark_tasks_sha256
from shopping_companion.types import Task, Verification
from tests.task_support import shoe_task


def _task(i: int, **extra: object) -> Task:
    verification = Verification(resolvable=True, conflict_free=True, gold_accepted=True, n_alternatives=3)
    return shoe_task(i, split="test", verification=verification, **extra)


def _schema_before_the_added_fields(t: Task) -> str:
    """The task's JSON as the schema wrote it before the fields of TASK_FIELDS_ADDED_LATER existed."""
    top = dict.fromkeys(TASK_FIELDS_ADDED_LATER[""], True)
    nested = {k: set(v) for k, v in TASK_FIELDS_ADDED_LATER.items() if k}
    return t.model_dump_json(exclude={**top, **nested})


def test_fields_added_later_at_their_default_leave_the_hash_as_it_was() -> None:
    tasks = [_task(0), _task(1)]
    before = hashlib.sha256("\n".join(_schema_before_the_added_fields(t) for t in tasks).encode()).hexdigest()[:16]
    assert benchmark_tasks_sha256(tasks) == before


def test_a_value_in_an_added_field_changes_the_hash() -> None:
    plain = benchmark_tasks_sha256([_task(0)])
    assert benchmark_tasks_sha256([_task(0, abilities=["knowledge_update"])]) != plain
    tagged = _task(0)
    tagged.verification.accepted_by_evidence.append("fabric=Cotton (slot 0)")
    assert benchmark_tasks_sha256([tagged]) != plain
    assert benchmark_tasks_sha256([_task(1)]) != plain


def test_every_listed_field_exists_on_its_model() -> None:
    """A renamed field would silently enter the hash again: the table must name real fields."""
    task = _task(0)
    for owner, names in TASK_FIELDS_ADDED_LATER.items():
        model = type(task) if not owner else type(getattr(task, owner))
        assert set(names) <= set(model.model_fields), (owner, set(names) - set(model.model_fields))
