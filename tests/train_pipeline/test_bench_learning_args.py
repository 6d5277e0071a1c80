"""benchmarks/bench_learning.py refuses bad arguments before anything trains, with its
``FAIL`` / ``RESULT`` lines and the pipeline's exit status for a config error (2)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_learning", ROOT / "benchmarks" / "bench_learning.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--fresh", "bogus"], "--fresh: unknown phase"),
        (["--window", "20"], "--window 20: two windows need at least 40 GRPO steps; grpo.trainer.max_steps is 32"),
    ],
)
def test_refused_before_training_with_fail_and_result_lines(tmp_path, capsys, args, needle):
    code = _bench().main(["--runs-dir", str(tmp_path), "--check", *args])
    out = capsys.readouterr().out.strip().splitlines()
    assert code == 2
    assert out[-2].startswith("FAIL ") and needle in out[-2]
    assert out[-1].startswith("RESULT pass=0 failed=1 stopped=2 ")
    assert not any(tmp_path.iterdir())  # nothing was run or written


@pytest.mark.parametrize("args", [["--window", "0"], ["--window", "x"], ["--split", "dev"]])
def test_bad_window_or_split_is_an_argument_error(tmp_path, capsys, args):
    with pytest.raises(SystemExit) as e:
        _bench().main(["--runs-dir", str(tmp_path), *args])
    assert e.value.code == 2
    assert args[0] in capsys.readouterr().err
