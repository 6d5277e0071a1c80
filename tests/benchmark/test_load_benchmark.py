"""``load_benchmark`` refuses a directory whose files do not match the manifest's SHA-256, duplicate
task ids and sessions referenced but missing; ``missing_gold_products`` names gold ids a catalog
lacks. Before, a changed file loaded silently, a duplicate id overwrote results on resume, and a
missing session surfaced as a KeyError traceback (or R_tool silently 0)."""

from __future__ import annotations

import hashlib
import json
import warnings
from pathlib import Path

import pytest

from shopping_companion.benchmark.synth import BenchmarkError, load_benchmark, missing_gold_products
from shopping_companion.types import Preference, ProductSlot, Session, SessionRef, Task, Turn


def _task(i: int, sid: str | None = None) -> Task:
    sid = sid or f"s{i}"
    return Task(
        task_id=f"t-{i}",
        instruction="a shirt",
        user_id=f"u{i}",
        history=[SessionRef(session_id=sid, date="2024-01-01")],
        needle_session_ids=[sid],
        preferences=[Preference(attribute="colour", value="blue")],
        slots=[ProductSlot(product_type="shirt", reference_product_id=f"cat:{i}")],
    )


def _session(sid: str) -> Session:
    return Session(session_id=sid, date="2024-01-01", turns=[Turn(role="user", content="I like blue.")])


def write_dir(d: Path, tasks: list[Task], sessions: list[Session], hashes: bool = True) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "tasks.jsonl").write_text("".join(t.model_dump_json() + "\n" for t in tasks))
    (d / "sessions.jsonl").write_text("".join(s.model_dump_json() + "\n" for s in sessions))
    manifest = {"format_version": 2, "counts": {"tasks": len(tasks)}}
    if hashes:
        manifest["files"] = {
            n: hashlib.sha256((d / n).read_bytes()).hexdigest() for n in ("tasks.jsonl", "sessions.jsonl")
        }
    (d / "manifest.json").write_text(json.dumps(manifest))
    return d


def test_a_consistent_directory_loads(tmp_path):
    d = write_dir(tmp_path / "b", [_task(0), _task(1)], [_session("s0"), _session("s1")])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        b = load_benchmark(d)
    assert [t.task_id for t in b.tasks] == ["t-0", "t-1"] and set(b.sessions) == {"s0", "s1"}


@pytest.mark.parametrize("name", ["tasks.jsonl", "sessions.jsonl"])
def test_a_file_changed_after_the_build_is_refused_naming_file_and_hashes(tmp_path, name):
    d = write_dir(tmp_path / "b", [_task(0)], [_session("s0")])
    want = json.loads((d / "manifest.json").read_text())["files"][name]
    with open(d / name, "a") as f:
        f.write("\n")
    got = hashlib.sha256((d / name).read_bytes()).hexdigest()
    with pytest.raises(BenchmarkError) as e:
        load_benchmark(d)
    msg = str(e.value)
    assert str(d / name) in msg and want in msg and got in msg


def test_an_old_manifest_without_hashes_loads_with_a_warning(tmp_path):
    d = write_dir(tmp_path / "b", [_task(0)], [_session("s0")], hashes=False)
    with pytest.warns(UserWarning, match="records no SHA-256 for tasks.jsonl"):
        b = load_benchmark(d)
    assert len(b.tasks) == 1


def test_duplicate_task_ids_are_refused_naming_them(tmp_path):
    d = write_dir(tmp_path / "b", [_task(0), _task(1), _task(0)], [_session("s0"), _session("s1")])
    with pytest.raises(BenchmarkError, match=r"duplicate task ids t-0 \(2 lines\)"):
        load_benchmark(d)


def test_sessions_referenced_but_missing_are_refused_naming_them(tmp_path):
    d = write_dir(tmp_path / "b", [_task(0), _task(1, sid="gone-1")], [_session("s0")])
    with pytest.raises(BenchmarkError, match=r"lacks 1 session\(s\) referenced by 1 task\(s\).*t-1: gone-1"):
        load_benchmark(d)


def test_a_bad_line_names_file_and_line(tmp_path):
    d = write_dir(tmp_path / "b", [_task(0)], [_session("s0")], hashes=False)
    with open(d / "tasks.jsonl", "a") as f:
        f.write('{"task_id": "x"}\n')
    with pytest.warns(UserWarning), pytest.raises(BenchmarkError, match=r"tasks.jsonl line 2: not a valid task"):
        load_benchmark(d)


def test_missing_gold_products_names_tasks_and_ids():
    tasks = [_task(0), _task(1), _task(2)]
    catalog = {"cat:0", "cat:2"}
    seen: list[list[str]] = []

    def lookup(ids):
        seen.append(list(ids))
        return {i: object() for i in ids if i in catalog}

    assert missing_gold_products(tasks, lookup) == {"t-1": ["cat:1"]}
    assert seen == [["cat:0", "cat:1", "cat:2"]]
    assert missing_gold_products(tasks[:1], lookup) == {}


def test_the_quickstart_benchmark_still_loads():
    d = Path(__file__).resolve().parents[2] / "runs" / "quickstart" / "bench"
    if not (d / "manifest.json").is_file():
        pytest.skip("no quickstart benchmark built")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        b = load_benchmark(d)
    assert len(b.tasks) == len({t.task_id for t in b.tasks}) > 0
