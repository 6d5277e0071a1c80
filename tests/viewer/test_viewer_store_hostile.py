"""The viewer's data layer against hostile or broken run files (real files, FIFOs and symlinks).

Covers numbers out of range (integers too large for a float, infinities) in every kind of run,
side files and run files that are FIFOs or symlinks out of the run's directory, a run file
replaced by a symlink or a directory after discovery, a file rewritten in place (same inode)
with longer content, file targets that are not run files, and the wording of problems.
"""

from __future__ import annotations

import json
import math
import os
import threading

import pytest

from shopping_companion.errors import ConfigError
from shopping_companion.viewer.store import RunCatalog, RunIndex, RunUnreadableError, compare
from tests.viewer.test_viewer_store import episode, index_of, line, make_run, make_task

HUGE = "1" + "0" * 400  # a JSON integer too large for a float


def _with(d: dict, path: list, token: str) -> str:
    """``d`` as JSON with the value at ``path`` replaced by the raw JSON text ``token``."""
    d = json.loads(json.dumps(d))
    cur = d
    for k in path[:-1]:
        cur = cur[k]
    cur[path[-1]] = "__TOKEN__"
    return json.dumps(d).replace('"__TOKEN__"', token) + "\n"


def _in_thread(fn, timeout: float = 20.0):
    """``fn()`` run in a daemon thread; fails the test when it has not returned within ``timeout``
    seconds (a read blocked on a FIFO), re-raises its exception otherwise."""
    box: dict = {}

    def go():
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            box["error"] = e

    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), f"still blocked after {timeout} s"
    if "error" in box:
        raise box["error"]
    return box["value"]


# --------------------------------------------------------------------------- finding 1: numbers out of range


def test_numbers_out_of_range_make_lines_foreign_and_are_indexed_once(tmp_path):
    good = episode("t1").model_dump(mode="json")
    lines = [
        line(episode("t1")),
        _with(good, ["acc"], HUGE),
        _with(good, ["stages", 0, "trajectory", "stage"], "1e999"),
        _with(good, ["trial"], HUGE),  # a big int is still an int: the row stands, nothing overflows
        line(episode("t2")),
    ]
    run = make_run(tmp_path, "ov", lines, [make_task("t1"), make_task("t2")])
    idx = index_of(run)
    rows = {r.line: r for r in idx.query(limit=500, include_superseded=True).rows}
    assert rows[1].status == "ok" and rows[5].status == "ok"
    assert rows[2].status == "foreign" and rows[2].problem.startswith("not an EpisodeResult: ")
    assert "acc must be a finite number" in rows[2].problem
    assert rows[3].status == "foreign" and "OverflowError" in rows[3].problem
    for n in (2, 3):
        assert idx.episode(n).raw is not None  # opens as raw text, no 500
    s = idx.summary
    assert s.n_lines == 5 and s.n_foreign == 2 and s.problem is None
    assert all(math.isfinite(v) for v in s.components.values())
    # later refreshes never add a line twice
    with open(run / "results.jsonl", "a") as f:
        f.write(_with(good, ["acc"], "Infinity"))
    for _ in range(3):
        idx.refresh()
        assert len(idx) == 6 and idx.end_offset == (run / "results.jsonl").stat().st_size
    assert idx.row(6).status == "foreign"


def test_out_of_range_numbers_in_sft_kept_and_grpo_lines(tmp_path):
    from shopping_companion.sft.collect import KeptStage

    ep = episode("t1")
    kept = KeptStage(
        task_id="t1", trial=0, mode="two_stage", hint="none", stage=2, policy="scripted", reason="episode Succ",
        acc=1.0, succ=True, trajectory=ep.stages[1].trajectory, verdict=ep.stages[1].verdict,
    ).model_dump(mode="json")  # fmt: skip
    sft = tmp_path / "runs" / "sft"
    sft.mkdir(parents=True)
    (sft / "kept.jsonl").write_text(
        json.dumps(kept)
        + "\n"
        + _with(kept, ["stage"], "1e999")
        + _with(kept, ["trial"], "Infinity")
        + _with(kept, ["acc"], HUGE)
    )
    val = tmp_path / "runs" / "grpo" / "val"
    val.mkdir(parents=True)
    base = {"input": "user: hi", "output": "<answer>@REC myntra:1</answer>", "score": 1.0, "step": 10, "stage": 2}
    (val / "10.jsonl").write_text(
        json.dumps(base)
        + "\n"
        + _with(base, ["num_turns"], "Infinity")
        + _with(base, ["n_tool_calls"], HUGE)
        + _with(base, ["score"], "-Infinity")
        + _with(base, ["R_tool"], "NaN")
    )
    cat = RunCatalog([tmp_path / "runs"], background_taxonomy=False)
    k = cat.get("sft")
    assert [k.row(n).status for n in (1, 2, 3, 4)] == ["ok", "foreign", "foreign", "foreign"]
    assert all(k.row(n).problem.startswith("not a KeptStage: ") for n in (2, 3, 4))
    assert k.summary.n_foreign == 3 and k.episode(2).raw is not None
    g = cat.get("grpo/val/10.jsonl")
    rows = [g.row(n) for n in range(1, 6)]
    assert [r.status for r in rows] == ["ok"] * 5  # non-finite extras are simply left out
    # turns are counted in the output (one assistant turn), never read from num_turns
    assert rows[1].turns == 1 and rows[2].tool_calls is None and rows[3].r2 is None and rows[4].r_tool is None
    assert all(math.isfinite(v) for r in rows for v in r.components.values())
    assert all(math.isfinite(v) for v in g.summary.components.values())
    for n in range(1, 6):
        g.episode(n)
    assert {s.run_id for s in cat.runs()} == {"sft", "grpo/val/10.jsonl"}


# --------------------------------------------------------------------------- finding 2: FIFOs and devices


def test_side_files_that_are_fifos_or_point_outside_are_not_read(tmp_path):
    run = make_run(tmp_path / "runs", "r", [line(episode("t1", succ=False))], [make_task("t1")])
    outside = tmp_path / "outside"
    outside.mkdir()
    fake = {"task_id": "t1", "trial": 0, "strategy": "two_stage", "primary": "from-outside"}
    (outside / "taxonomy.jsonl").write_text(json.dumps(fake) + "\n")
    os.symlink(outside / "taxonomy.jsonl", run / "taxonomy.jsonl")
    os.mkfifo(run / "summary.json")
    cat = _in_thread(lambda: RunCatalog([tmp_path / "runs"], background_taxonomy=False))
    idx = _in_thread(lambda: cat.get("r"))
    assert idx.row(1).taxonomy != "from-outside"  # the symlink out of the runs directory is not followed
    assert idx.summary.benchmark_found  # config.yaml (a regular file) still names the benchmark

    # a FIFO config.yaml / taxonomy.jsonl never blocks
    (run / "config.yaml").unlink()
    os.mkfifo(run / "config.yaml")
    (run / "taxonomy.jsonl").unlink()
    os.mkfifo(run / "taxonomy.jsonl")
    cat2 = _in_thread(lambda: RunCatalog([run], background_taxonomy=False))
    s = _in_thread(lambda: cat2.runs())[0]
    assert s.n_lines == 1 and not s.benchmark_found


def test_a_run_file_replaced_by_a_fifo_is_unreadable_not_a_hang(tmp_path):
    run = make_run(tmp_path, "r", [line(episode("t1"))])
    cat = RunCatalog([run], background_taxonomy=False)
    assert cat.get("r").summary.n_lines == 1
    (run / "results.jsonl").unlink()
    os.mkfifo(run / "results.jsonl")
    idx = _in_thread(lambda: cat.get("r"))
    assert "FIFO" in idx.summary.problem and len(idx) == 0
    with pytest.raises(RunUnreadableError, match="FIFO"):
        idx.raw(1)


# --------------------------------------------------------------------------- finding 3: symlink swapped in later


def test_a_run_file_swapped_for_a_symlink_out_of_the_runs_dir_is_never_served(tmp_path):
    root = tmp_path / "runs"
    run = make_run(root, "r", [line(episode("t1"))], [make_task("t1")])
    secret = make_run(tmp_path / "elsewhere", "secret", [line(episode("secret-task"))])
    cat = RunCatalog([root], background_taxonomy=False)
    idx = cat.get("r")
    assert idx.row(1).task_id == "t1"
    link = run / "link.tmp"
    os.symlink(secret / "results.jsonl", link)
    os.replace(link, run / "results.jsonl")  # mv -T: the name now points outside the runs directory
    idx = cat.get("r")
    s = [x for x in cat.runs() if x.run_id == "r"][0]
    assert s.problem and "outside" in s.problem and s.n_lines == 0
    assert idx.query(limit=500, include_superseded=True).rows == []
    with pytest.raises(RunUnreadableError, match="outside"):
        idx.raw(1)
    with pytest.raises(RunUnreadableError, match="outside"):
        idx.episode(1)
    # a symlink that stays inside the runs directory is fine, and the run comes back
    inside = make_run(root, "other", [line(episode("t2"))])
    link = run / "link.tmp"
    os.symlink(inside / "results.jsonl", link)
    os.replace(link, run / "results.jsonl")
    idx = cat.get("r")
    assert idx.summary.problem is None and idx.row(1).task_id == "t2" and b"t2" in idx.raw(1)


def test_an_explicit_run_file_is_confined_to_its_own_directory(tmp_path):
    run = make_run(tmp_path / "a", "r", [line(episode("t1"))])
    make_run(tmp_path / "b", "secret", [line(episode("secret-task"))])
    cat = RunCatalog([run / "results.jsonl"], background_taxonomy=False)
    assert cat.get("r").row(1).task_id == "t1"
    link = run / "x.tmp"
    os.symlink(tmp_path / "b" / "secret" / "results.jsonl", link)
    os.replace(link, run / "results.jsonl")
    idx = cat.get("r")
    assert "outside" in idx.summary.problem and len(idx) == 0


# --------------------------------------------------------------------------- finding 5: rewritten in place


def test_a_file_rewritten_in_place_and_longer_is_indexed_again(tmp_path):
    run = make_run(tmp_path, "r", [line(episode("t1")), line(episode("t2"))])
    f = run / "results.jsonl"
    idx = index_of(run)
    ino = f.stat().st_ino
    with open(f, "w") as fh:  # same inode, longer, other lines
        fh.write(line(episode("t7", succ=False)) + line(episode("t8")) + line(episode("t9")))
    assert f.stat().st_ino == ino
    idx.refresh()
    assert idx.last_read[0] == 0
    assert [r.task_id for r in idx.query(limit=500, include_superseded=True).rows] == ["t7", "t8", "t9"]
    # the first line unchanged, a middle one longer, so the last indexed line moved: indexed again
    with open(f, "w") as fh:
        fh.write(line(episode("t7", succ=False)) + line(episode("t8-longer")) + line(episode("t9")) + "\n")
    idx.refresh()
    assert idx.last_read[0] == 0 and len(idx) == 3
    assert [idx.row(n).task_id for n in (1, 2, 3)] == ["t7", "t8-longer", "t9"]


def test_a_torn_tail_cut_off_and_completed_is_still_read_incrementally(tmp_path):
    run = make_run(tmp_path, "r", [line(episode("t1")), line(episode("t2"))])
    f = run / "results.jsonl"
    idx = index_of(run)
    end = idx.end_offset
    with open(f, "a") as fh:
        fh.write(line(episode("t3"))[:120])  # a crash mid-line
    idx.refresh()
    assert idx.row(3).status == "torn"
    os.truncate(f, end)  # what shopcomp eval does on resume: cut the incomplete last line only
    with open(f, "a") as fh:
        fh.write(line(episode("t3")))
    idx.refresh()
    assert idx.last_read[0] == end and idx.row(3).status == "ok" and len(idx) == 3


# --------------------------------------------------------------------------- finding 6: file targets


def test_file_targets_that_are_not_run_files_are_refused(tmp_path):
    (tmp_path / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    (tmp_path / "config.yaml").write_text("bench:\n  path: x\n")
    (tmp_path / "notes.jsonl").write_text("hello\n")
    (tmp_path / "list.jsonl").write_text("[1, 2]\n")
    for name in ("passwd", "config.yaml", "notes.jsonl", "list.jsonl"):
        with pytest.raises(ConfigError, match=r"not a run file.*results\.jsonl, rollouts\.jsonl, kept\.jsonl") as e:
            RunCatalog([tmp_path / name])
        assert str(tmp_path / name) in str(e.value)
    os.mkfifo(tmp_path / "pipe.jsonl")
    with pytest.raises(ConfigError, match="neither a regular file nor a directory"):
        _in_thread(lambda: RunCatalog([tmp_path / "pipe.jsonl"]))
    # accepted: a known name whatever it holds, and any .jsonl of JSON objects
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "results.jsonl").write_text("not json at all\n")
    (tmp_path / "custom.jsonl").write_text(line(episode("t1")))
    assert RunCatalog([tmp_path / "d" / "results.jsonl"]).get("d").row(1).status == "unreadable"
    assert RunCatalog([tmp_path / "custom.jsonl"]).runs()[0].n_episodes == 1


# --------------------------------------------------------------------------- finding 11: unreadable run files


def test_a_run_file_that_became_a_directory_says_so_and_never_raises_oserror(tmp_path):
    a = make_run(tmp_path / "runs", "a", [line(episode("t1"))])
    make_run(tmp_path / "runs", "b", [line(episode("t1"))])
    cat = RunCatalog([tmp_path / "runs"], background_taxonomy=False)
    assert cat.get("a").summary.problem is None
    (a / "results.jsonl").unlink()
    (a / "results.jsonl").mkdir()
    s = {x.run_id: x for x in cat.runs()}
    assert s["a"].problem and "directory" in s["a"].problem and s["a"].n_lines == 0
    assert s["b"].problem is None
    idx = cat.get("a")
    for call in (idx.raw, idx.episode):
        with pytest.raises(RunUnreadableError) as e:
            call(1)
        assert not isinstance(e.value, (OSError, KeyError)) and "\n" not in str(e.value)
    with pytest.raises(ValueError, match="share no scored episode"):
        compare(cat.get("a"), cat.get("b"))  # the usual refusal, no OSError
    # back to a file: readable again
    (a / "results.jsonl").rmdir()
    (a / "results.jsonl").write_text(line(episode("t5")))
    idx = cat.get("a")
    assert idx.summary.problem is None and idx.row(1).task_id == "t5"


def test_a_line_read_after_the_file_was_replaced_is_refused_not_misread(tmp_path):
    run = make_run(tmp_path, "r", [line(episode("t1")), line(episode("t2"))])
    idx = RunIndex("r", "eval", run / "results.jsonl", "r", background_taxonomy=False)
    tmp = run / "new.tmp"
    tmp.write_text(line(episode("t9")))
    os.replace(tmp, run / "results.jsonl")
    with pytest.raises(RunUnreadableError, match="replaced since it was indexed"):
        idx.raw(2)  # no refresh yet: the offsets belong to the old file
    idx.refresh()
    assert b"t9" in idx.raw(1)


# --------------------------------------------------------------------------- finding 12: wording


def test_problems_use_the_right_article(tmp_path):
    bad_schema = episode("t1").model_dump(mode="json")
    bad_schema["stages"][0]["verdict"]["F"] = -1
    lines = ['{"hello": "world"}\n', "[1]\n", json.dumps(bad_schema) + "\n"]
    idx = index_of(make_run(tmp_path, "r", lines))
    assert idx.row(1).problem.startswith("not an EpisodeResult: missing field(s)")
    assert idx.row(2).problem.startswith("not an EpisodeResult: a JSON list")
    assert idx.episode(3).row.problem.startswith("not an EpisodeResult: stages.0.verdict.F")
    assert "not a EpisodeResult" not in " ".join(idx.row(n).problem for n in (1, 2, 3))


def test_unreadable_error_is_exported_and_a_value_error():
    import shopping_companion.viewer.store as store

    assert "RunUnreadableError" in store.__all__ and issubclass(RunUnreadableError, ValueError)
    assert not issubclass(RunUnreadableError, (OSError, KeyError))
