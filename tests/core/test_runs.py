"""``shopping_companion.runs``: the run-file mechanics every runner shares, on real files — the
``flock`` held by a second process, torn tails, run identities, verified and fsync'd lines, and
JSONL scanning with unreadable-line bookkeeping."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from shopping_companion.errors import ConfigError, RunError, RunFileReplacedError, RunIdentityError, RunLockedError
from shopping_companion.runs import (
    append_error_log,
    append_line,
    archive_stale,
    check_identity,
    check_still_ours,
    encode_verified_line,
    errors_log_path,
    exclusive,
    identity_path,
    repair_torn_tail,
    scan_jsonl,
    write_lines_atomic,
    write_text_atomic,
)

REPO = Path(__file__).resolve().parents[2]
HOLDER = textwrap.dedent("""
    import sys
    from shopping_companion.runs import append_line, exclusive
    with exclusive(sys.argv[1]) as fh:
        append_line(fh, sys.argv[1], b'{"from": "holder"}\\n')
        print("locked", flush=True)
        sys.stdin.readline()
""")


def _is_obj(raw: bytes) -> bool:
    return isinstance(json.loads(raw), dict)


# --------------------------------------------------------------------------- the lock


def test_a_second_process_holding_the_file_locks_this_one_out_until_it_lets_go(tmp_path):
    path = tmp_path / "results.jsonl"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path)], cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(RunLockedError, match=re.escape(str(path)) + ".*another running evaluation.*--name"):
            with exclusive(path):
                pass
        with pytest.raises(RunLockedError, match="another running sweep.*another --out"):
            with exclusive(path, what="sweep", option="--out"):
                pass
    finally:
        holder.stdin.write("\n")
        holder.stdin.flush()
        assert holder.wait(timeout=30) == 0
    with exclusive(path) as fh:  # free again; appends go after what the holder wrote
        append_line(fh, path, b'{"from": "me"}\n')
    assert path.read_bytes() == b'{"from": "holder"}\n{"from": "me"}\n'
    assert issubclass(RunLockedError, RunError)


INTERRUPTED = textwrap.dedent("""
    import sys, threading
    from shopping_companion.runs import exclusive
    release = threading.Event()
    worker = threading.Thread(target=release.wait)  # an episode still running when Ctrl-C comes
    worker.start()
    try:
        with exclusive(sys.argv[1]):
            raise KeyboardInterrupt
    except KeyboardInterrupt:
        print("interrupted", flush=True)
    sys.stdin.readline()
    release.set()
    worker.join()
    try:  # no other thread now: released at once
        with exclusive(sys.argv[1] + ".2"):
            raise KeyboardInterrupt
    except KeyboardInterrupt:
        pass
    with exclusive(sys.argv[1] + ".2"):
        print("released", flush=True)
""")


def test_an_interrupted_run_keeps_its_lock_while_its_threads_may_still_write(tmp_path):
    """Ctrl-C while worker threads run: the lock is held until the process exits, so a rerun
    cannot take over a run the old process may still be writing."""
    path = tmp_path / "results.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-c", INTERRUPTED, str(path)],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "interrupted"
        with pytest.raises(RunLockedError):
            with exclusive(path):
                pass
    finally:
        proc.stdin.write("\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "released"
        assert proc.wait(timeout=30) == 0
    with exclusive(path):  # the process is gone: the lock with it
        pass


def test_a_deleted_or_replaced_results_path_is_noticed_before_a_line_is_lost(tmp_path):
    path = tmp_path / "results.jsonl"
    with exclusive(path) as fh:
        check_still_ours(path, fh)
        path.unlink()
        with pytest.raises(RunFileReplacedError, match="was deleted while this run was writing it"):
            append_line(fh, path, b"{}\n")
    with exclusive(path) as fh:
        other = tmp_path / "other.jsonl"
        other.write_bytes(b"")
        os.replace(other, path)
        with pytest.raises(RunFileReplacedError, match="was replaced"):
            append_line(fh, path, b"{}\n")
    assert path.read_bytes() == b""  # nothing went to the new file


# --------------------------------------------------------------------------- torn tails


def test_a_torn_last_line_is_cut_and_kept_aside(tmp_path):
    p = tmp_path / "d.jsonl"
    good = b'{"k": 1}\n'
    p.write_bytes(good + b'{"k": 2, "tor')
    assert repair_torn_tail(p, _is_obj) == len(b'{"k": 2, "tor')
    assert p.read_bytes() == good
    assert (tmp_path / "d.jsonl.torn").read_bytes() == b'{"k": 2, "tor\n'
    with open(p, "ab") as f:  # the next append starts on its own line
        f.write(b'{"k": 3}\n')
    assert [r["k"] for r in scan_jsonl(p, json.loads).records] == [1, 3]


def test_a_complete_valid_last_line_without_its_newline_is_kept(tmp_path):
    p = tmp_path / "d.jsonl"
    p.write_bytes(b'{"k": 1}\n{"k": 2}')
    assert repair_torn_tail(p, _is_obj) == 0
    assert p.read_bytes() == b'{"k": 1}\n{"k": 2}\n' and not (tmp_path / "d.jsonl.torn").exists()


@pytest.mark.parametrize("validator", [None, _is_obj, lambda raw: 1 / 0])
def test_without_a_validator_or_when_it_refuses_or_raises_the_tail_is_cut(tmp_path, validator):
    p = tmp_path / "d.jsonl"
    p.write_bytes(b'{"k": 1}\n[1, 2]')
    assert repair_torn_tail(p, validator) == len(b"[1, 2]") and p.read_bytes() == b'{"k": 1}\n'


def test_untouched_files_and_a_single_torn_line_longer_than_the_scan_block(tmp_path):
    p = tmp_path / "d.jsonl"
    assert repair_torn_tail(p, _is_obj) == 0 and not p.exists()  # missing
    p.write_bytes(b"")
    assert repair_torn_tail(p, _is_obj) == 0 and p.read_bytes() == b""
    p.write_bytes(b'{"k": 1}\n')
    assert repair_torn_tail(p, _is_obj) == 0 and p.read_bytes() == b'{"k": 1}\n'
    head = b'{"k": 1}\n' * 10_000  # 90 kB, then a torn line of 200 kB: found across scan blocks
    tail = b'{"text": "' + b"x" * 200_000
    p.write_bytes(head + tail)
    assert repair_torn_tail(p, _is_obj) == len(tail) and p.read_bytes() == head
    p.write_bytes(tail)  # no newline at all
    assert repair_torn_tail(p, _is_obj) == len(tail) and p.read_bytes() == b""


# --------------------------------------------------------------------------- identity


def test_identity_is_written_once_then_enforced(tmp_path):
    path = tmp_path / "results.jsonl"
    assert identity_path(path) == tmp_path / "results.identity.json"
    assert errors_log_path(path) == tmp_path / "results.errors.log"
    check_identity(path, None)
    assert not identity_path(path).exists()  # no identity given: no check, nothing written
    check_identity(path, {"policy": "p", "n": 1, "when": Path("/x")})
    assert json.loads(identity_path(path).read_text()) == {"policy": "p", "n": 1, "when": "/x"}
    check_identity(path, {"when": "/x", "n": 1, "policy": "p"})  # same after a JSON round trip
    with pytest.raises(RunIdentityError, match=r"different run configuration \(n: 1 → 2\); use another --name"):
        check_identity(path, {"policy": "p", "n": 2, "when": "/x"}, force=True)  # force never overrides
    assert issubclass(RunIdentityError, ConfigError)


@pytest.mark.parametrize(
    "damage,word", [("missing", "is missing"), ("corrupt", "is corrupt"), ("list", "is corrupt"), ("empty", "is empty")]
)
def test_a_lost_identity_beside_results_is_refused_unless_force_adopts_it(tmp_path, damage, word):
    path = tmp_path / "results.jsonl"
    path.write_text('{"k": 1}\n')
    ip = identity_path(path)
    if damage != "missing":
        ip.write_text({"corrupt": "{not json", "list": "[1]", "empty": "{}"}[damage])
    with pytest.raises(RunIdentityError, match=f"results.identity.json {word}.*--force"):
        check_identity(path, {"policy": "p"})
    check_identity(path, {"policy": "p"}, force=True)
    assert json.loads(ip.read_text()) == {"policy": "p"}
    check_identity(path, {"policy": "p"})


def test_identity_in_a_named_file_a_directory_and_an_empty_results_file(tmp_path):
    path = tmp_path / "dialogues.jsonl"
    run_json = tmp_path / "run.json"
    run_json.mkdir()
    with pytest.raises(RunIdentityError, match="run.json is a directory.*another --out"):
        check_identity(path, {"a": 1}, identity_file=run_json, option="--out")
    run_json.rmdir()
    path.write_text("")  # no results yet: a corrupt identity is simply replaced
    run_json.write_text("garbage")
    check_identity(path, {"a": 1}, identity_file=run_json)
    assert json.loads(run_json.read_text()) == {"a": 1} and not identity_path(path).exists()


def test_archive_stale_moves_another_runs_files_aside_and_returns_them(tmp_path):
    path = tmp_path / "results.jsonl"
    assert archive_stale(path, {"a": 1}) == []
    path.write_text('{"k": 1}\n')
    identity_path(path).write_text(json.dumps({"a": 0}))
    errors_log_path(path).write_text("tb\n")
    moved = archive_stale(path, {"a": 1})
    assert sorted(p.name.split(".stale-")[0] for p in moved) == [
        "results.errors.log",
        "results.identity.json",
        "results.jsonl",
    ]
    assert all(re.fullmatch(r"\d{8}T\d{6}Z", p.name.split(".stale-")[1]) for p in moved)
    kept = next(p for p in moved if p.name.startswith("results.jsonl"))
    assert not path.exists() and kept.read_text() == '{"k": 1}\n'


# --------------------------------------------------------------------------- lines


def test_encode_verified_line_accepts_only_lines_that_read_back():
    assert encode_verified_line(b'{"a": 1}') == b'{"a": 1}\n'
    with pytest.raises(ValueError, match="newline"):
        encode_verified_line(b'{"a":\n1}')
    with pytest.raises(ValueError):
        encode_verified_line(b'{"a": ')
    with pytest.raises(ValueError):
        encode_verified_line(b'{"a": "\xff"}')  # not UTF-8

    def no_b(data: bytes) -> None:
        if "b" in json.loads(data):
            raise ValueError("b is not allowed")

    assert encode_verified_line(b'{"a": 1}', no_b) == b'{"a": 1}\n'
    with pytest.raises(ValueError, match="b is not allowed"):
        encode_verified_line(b'{"b": 1}', no_b)


def test_scan_jsonl_counts_unreadable_lines_and_a_torn_tail(tmp_path):
    p = tmp_path / "r.jsonl"
    assert scan_jsonl(p, json.loads).records == []
    p.write_bytes('{"k": 1}\n\n{bad\n{"k": "a\u2028b"}\n[1]\n{"k": 9'.encode())

    def parse(raw: bytes) -> dict:
        rec = json.loads(raw)
        if not isinstance(rec, dict):
            raise ValueError("not an object")
        return rec

    scan = scan_jsonl(p, parse)
    assert [r["k"] for r in scan.records] == [1, "a\u2028b"]  # U+2028 does not split a line
    assert [n for n, _ in scan.unreadable] == [3, 5] and scan.torn_tail  # the torn tail is not counted
    assert scan.unreadable[1][1] == "ValueError: not an object"
    assert scan.describe_unreadable().startswith("2 line(s) (line numbers 3, 5; first: JSONDecodeError")
    p.write_bytes(b'{"k": 1}\n{"k": 2}')  # a torn tail that parses is a record
    scan = scan_jsonl(p, parse)
    assert [r["k"] for r in scan.records] == [1, 2] and scan.torn_tail and scan.describe_unreadable() == ""


def test_append_error_log_appends_a_headed_traceback_and_never_raises(tmp_path):
    log = tmp_path / "results.errors.log"
    try:
        raise KeyError("boom")
    except KeyError as e:
        append_error_log(log, "task t1 trial 0: episode error", e)
        append_error_log(log, "second", e)
        append_error_log(tmp_path, "a directory cannot be opened", e)  # logged, not raised
    text = log.read_text()
    assert re.match(r"=== \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00 task t1 trial 0: episode error\nTraceback", text)
    assert "KeyError: 'boom'" in text and text.count("=== ") == 2


def test_atomic_rewrites_leave_the_new_content_and_no_temp_file(tmp_path):
    p = tmp_path / "kept.jsonl"
    p.write_text("old\n")
    write_lines_atomic(p, (f'{{"i": {i}}}' for i in range(3)))
    assert p.read_text() == '{"i": 0}\n{"i": 1}\n{"i": 2}\n'
    write_text_atomic(tmp_path / "collect.json", '{"a": 1}')
    assert (tmp_path / "collect.json").read_text() == '{"a": 1}'
    assert sorted(x.name for x in tmp_path.iterdir()) == ["collect.json", "kept.jsonl"]
