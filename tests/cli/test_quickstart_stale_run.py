"""The main job never refuses, nor mixes, results of an older release: a results file whose run
identity differs (or is missing) is moved aside, kept, and the quickstart starts afresh."""

from __future__ import annotations

import json

from shopping_companion.runs import archive_stale, errors_log_path, identity_path


def _write(run, identity):
    results = run / "results.jsonl"
    results.write_text('{"task_id": "t0"}\n')
    if identity is not None:
        identity_path(results).write_text(json.dumps(identity))
    errors_log_path(results).write_text("traceback\n")
    return results


def test_same_identity_is_kept_in_place(tmp_path):
    results = _write(tmp_path, {"a": 1, "env": {"max_turns": 20}})
    assert archive_stale(results, {"env": {"max_turns": 20}, "a": 1}) == []
    assert results.read_text() == '{"task_id": "t0"}\n' and identity_path(results).exists()
    assert not list(tmp_path.glob("*.stale-*"))


def test_other_or_missing_identity_is_moved_aside_never_deleted(tmp_path):
    for i, old in enumerate([{"a": 0}, None, "corrupt"]):
        run = tmp_path / f"r{i}"
        run.mkdir()
        results = _write(run, None if old == "corrupt" else old)
        if old == "corrupt":
            identity_path(results).write_text("{not json")
        moved = archive_stale(results, {"a": 1})
        assert sorted(moved) == sorted(run.glob("*.stale-*"))
        assert not results.exists() and not identity_path(results).exists()
        stale = sorted(p.name.split(".stale-")[0] for p in run.glob("*.stale-*"))
        expected = ["results.errors.log", "results.jsonl"] + ([] if old is None else ["results.identity.json"])
        assert stale == sorted(expected)
        kept = next(run.glob("results.jsonl.stale-*"))
        assert kept.read_text() == '{"task_id": "t0"}\n'


def test_nothing_there_is_a_no_op(tmp_path):
    assert archive_stale(tmp_path / "results.jsonl", {"a": 1}) == []
    assert list(tmp_path.iterdir()) == []
