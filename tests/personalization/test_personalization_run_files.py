"""``run_dialogues``'s files: the lock is on ``dialogues.jsonl`` itself (deleting files next to it does
not let a second writer in), a missing or corrupt ``run.json`` beside existing dialogues is refused
unless ``force``, and a record that cannot be written becomes an error record, never an unreadable
line. (Before: a side ``dialogues.lock`` that could be deleted, a missing ``run.json`` silently
accepted, a corrupt one a JSONDecodeError traceback, and a lone surrogate killed the writer.)"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from shopping_companion.errors import ConfigError
from shopping_companion.personalization.agents import ExtractiveRoles
from shopping_companion.personalization.runner import _encode_record, run_dialogues

REPO = Path(__file__).resolve().parents[2]


class NoEmbedder:  # never called: the dataset has no case
    def encode(self, texts):
        raise AssertionError("not expected")


@pytest.fixture()
def dirs(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "cases.jsonl").write_text("")
    (data / "manifest.json").write_text("{}")
    return data, tmp_path / "out"


def _run(dirs, **kw):
    data, out = dirs
    return run_dialogues(data, out, ExtractiveRoles(), NoEmbedder(), **kw)


def _old_line(out: Path) -> None:
    with open(out / "dialogues.jsonl", "a") as f:
        f.write(json.dumps({"case_id": "c1", "variant": "full", "memory": "full", "error": None}) + "\n")


@pytest.mark.parametrize("damage", ["missing", "corrupt"])
def test_a_lost_identity_beside_dialogues_is_refused_unless_forced(dirs, damage):
    data, out = dirs
    _run(dirs)
    assert (out / "run.json").is_file()
    _old_line(out)
    if damage == "missing":
        (out / "run.json").unlink()
    else:
        (out / "run.json").write_text("{not json")
    with pytest.raises(ConfigError, match=f"run.json is {damage}"):
        _run(dirs)
    _run(dirs, force=True)
    assert json.loads((out / "run.json").read_text())["engine"] == "extractive-baseline"
    _run(dirs)  # now it holds


HOLDER = textwrap.dedent("""
    import fcntl, sys
    with open(sys.argv[1], "ab") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        print("locked", flush=True)
        sys.stdin.readline()
""")


def test_the_lock_is_on_the_dialogues_file_itself(dirs):
    data, out = dirs
    _run(dirs)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(out / "dialogues.jsonl")],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        for p in out.iterdir():
            if p.name != "dialogues.jsonl":
                p.unlink()
        with pytest.raises(ConfigError, match="another process is writing"):
            _run(dirs)
    finally:
        holder.stdin.write("\n")
        holder.stdin.flush()
        holder.wait(timeout=30)
    _run(dirs)


def test_an_unwritable_record_becomes_an_error_record():
    for bad in (
        {"case_id": "c1", "variant": "full", "memory": "full", "reply": "x\ud800"},
        {"case_id": "c1", "variant": "full", "memory": "full", "overlap_max": math.nan},
    ):
        line = _encode_record(bad)
        rec = json.loads(line)
        assert line.endswith(b"\n") and line.count(b"\n") == 1
        assert rec["case_id"] == "c1" and rec["error"].startswith("record could not be written")
    good = {"case_id": "c2", "variant": "full", "memory": "full", "error": None}
    assert json.loads(_encode_record(good)) == good
