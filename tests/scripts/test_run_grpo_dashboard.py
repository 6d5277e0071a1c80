"""scripts/run_grpo.sh head: Ray's dashboard (and its unauthenticated job API) listens on
127.0.0.1 unless another address is asked for explicitly, which prints a warning. Runs the real
script with a fake `ray` that records its arguments."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "run_grpo.sh"


def _env(tmp_path: Path, **extra: str) -> tuple[dict[str, str], Path]:
    bin_ = tmp_path / "bin"
    bin_.mkdir(exist_ok=True)
    log = tmp_path / "ray.args"
    (bin_ / "ray").write_text(f"#!/bin/sh\nprintf '%s\\n' \"$*\" >> '{log}'\n[ \"$1\" = status ] && exit 1\nexit 0\n")
    (bin_ / "python").write_text('#!/bin/sh\necho "ARGS $*"\n')
    for f in bin_.iterdir():
        f.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "SHOPCOMP_RAY_DASHBOARD_HOST"}
    env.update(PATH=f"{bin_}:{os.environ['PATH']}", PYTHON=str(bin_ / "python"), **extra)
    return env, log


def _head(tmp_path: Path, args: list[str], **extra: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    env, log = _env(tmp_path, **extra)
    r = subprocess.run(
        ["bash", str(SCRIPT), "head", *args], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    calls = log.read_text().splitlines() if log.exists() else []
    return r, calls


def _dashboard_host(call: str) -> str:
    words = call.split()
    assert words.count("--dashboard-host") == 1, call
    return words[words.index("--dashboard-host") + 1]


def test_head_dashboard_listens_on_loopback_by_default(tmp_path):
    r, calls = _head(tmp_path, [])
    assert r.returncode == 0, r.stderr
    assert len(calls) == 1 and calls[0].startswith("start --head --port 6379")
    assert _dashboard_host(calls[0]) == "127.0.0.1"
    assert "WARNING" not in r.stderr


def test_head_keeps_port_and_extra_ray_arguments(tmp_path):
    r, calls = _head(tmp_path, ["--port", "7000", "--num-gpus", "8"])
    assert r.returncode == 0, r.stderr
    assert calls[0].split()[:4] == ["start", "--head", "--port", "7000"]
    assert _dashboard_host(calls[0]) == "127.0.0.1" and calls[0].endswith("--num-gpus 8")


@pytest.mark.parametrize("how", ["flag", "env"])
def test_another_dashboard_address_is_an_explicit_choice_with_a_warning(tmp_path, how):
    if how == "flag":
        r, calls = _head(tmp_path, ["--dashboard-host", "0.0.0.0"])
    else:
        r, calls = _head(tmp_path, [], SHOPCOMP_RAY_DASHBOARD_HOST="0.0.0.0")
    assert r.returncode == 0, r.stderr
    assert _dashboard_host(calls[0]) == "0.0.0.0"
    assert "WARNING" in r.stderr and "0.0.0.0" in r.stderr and "job" in r.stderr


def test_dashboard_host_needs_a_value(tmp_path):
    r, calls = _head(tmp_path, ["--dashboard-host"])
    assert r.returncode == 2 and "needs a value" in r.stderr and calls == []


def test_train_starts_a_local_head_on_loopback_too(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.parquet").write_bytes(b"")
    env, log = _env(tmp_path)
    r = subprocess.run(
        ["bash", str(SCRIPT), "train", "--data", str(data)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    start = [c for c in log.read_text().splitlines() if c.startswith("start")]
    assert len(start) == 1 and _dashboard_host(start[0]) == "127.0.0.1"
