"""The one benchmark manifest writer (synthesis/build.write_manifest), shared by write_benchmark
(synthesis and import) and calibrate_benchmark, and the manifest parts both builders share."""

from __future__ import annotations

import hashlib
import json

from shopping_companion.benchmark.synthesis.directory import stats_summary, task_counts, write_manifest
from shopping_companion.types import Task


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_write_manifest_hashes_the_files_it_names(tmp_path):
    (tmp_path / "tasks.jsonl").write_bytes(b'{"t": 1}\n')
    (tmp_path / "stats.md").write_bytes(b"# stats\n")
    manifest = {"seed": 3, "files": {"old.png": "x" * 64}, "generator": {"kind": "template"}}
    write_manifest(tmp_path, manifest, ["tasks.jsonl", "stats.md", "missing.json"])
    text = (tmp_path / "manifest.json").read_text(encoding="utf-8")
    got = json.loads(text)
    # a fresh files map: only the named files that exist (what write_benchmark records)
    assert got["files"] == {"tasks.jsonl": _sha(b'{"t": 1}\n'), "stats.md": _sha(b"# stats\n")}
    assert got["seed"] == 3 and got["generator"] == {"kind": "template"}
    assert text == json.dumps(got, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    assert manifest["files"] == {"old.png": "x" * 64}  # the caller's dict is not changed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["manifest.json", "stats.md", "tasks.jsonl"]


def test_write_manifest_can_keep_and_update_the_files_map(tmp_path):
    (tmp_path / "stats.json").write_bytes(b"{}")
    manifest = {"files": {"tasks.jsonl": "a" * 64, "stats.json": "b" * 64}}
    write_manifest(tmp_path, manifest, ["stats.json", "gone.png"], keep_files=True)  # what calibrate does
    got = json.loads((tmp_path / "manifest.json").read_text(encoding="utf-8"))
    assert got["files"] == {"tasks.jsonl": "a" * 64, "stats.json": _sha(b"{}")}


def _task(task_type: str, split: str, needles: int, prefs: int) -> Task:
    # only the fields task_counts reads
    return Task.model_construct(
        task_type=task_type,
        split=split,
        needle_session_ids=[f"n{k}" for k in range(needles)],
        preferences=[object()] * prefs,
    )


def test_task_counts_and_stats_summary():
    tasks = [_task("single", "train", 2, 1), _task("addon", "test", 1, 2), _task("single", "test", 0, 2)]
    assert task_counts(tasks, 40, 5) == {
        "tasks": 3,
        "single": 2,
        "addon": 1,
        "train": 1,
        "test": 2,
        "sessions": 40,
        "needle_sessions": 3,
        "preferences_mean": 1.667,
        "requested": 5,
    }
    st = {
        "attributes_per_task": {"single": {"mean": 2.5}, "addon": {"mean": 3.0}},
        "history": {"sessions_per_user": {"mean": 12.0}, "tokens_per_user": {"mean": 900.5}},
        "needle_top1": {"bm25": {"all": {"share": 0.4}}, "minilm": {"all": {"share": 0.6}}},
    }
    assert stats_summary(st) == {
        "attributes_per_task": {"single": 2.5, "addon": 3.0},
        "sessions_per_user": 12.0,
        "tokens_per_user": 900.5,
        "needle_top1_bm25": 0.4,
        "needle_top1_minilm": 0.6,
    }
