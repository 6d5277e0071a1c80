"""``shopcomp eval --ray ADDRESS`` (issue 19 part 3): episodes on Ray episode workers, the driver the
one writer of the results file.

Real Ray (the session's 2-CPU local cluster, conftest.ray_cluster), real benchmark, index, memory, judge and
rubric in every worker; the policy is the scripted OpenAI-compatible server on 127.0.0.1 (a pure
function of each request, so runs for the same seeds are comparable). Covers: 2 workers' results
equal a local run's (everything except wall times and latencies); the driver (one worker) killed
with SIGKILL mid-run, then resumed: complete, no duplicate keys, equal to local; a worker actor
killed mid-run: its episodes are resubmitted, the run completes with every episode, equal to
local; a bad ``--ray`` address: exit 2 with a clear message.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.extras.rl.conftest import require

require("ray")

from shopping_companion.benchmark.report import read_results, result_key  # noqa: E402
from shopping_companion.benchmark.synth import write_benchmark  # noqa: E402
from shopping_companion.cli import app  # noqa: E402
from tests.openai_server import ScriptedOpenAIServer  # noqa: E402
from tests.scripted_policy import policy_script  # noqa: E402

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[3]
STRATEGIES = "two_stage:none,oracle"
TRIALS = 2
N_TASKS = 3
TOTAL = N_TASKS * TRIALS * 2


@pytest.fixture(scope="module")
def bench(synth_bench):
    return synth_bench(N_TASKS, seed=41, sessions_per_user=40)


@pytest.fixture(scope="module")
def bench_dir(bench, tmp_path_factory):
    return write_benchmark(bench, tmp_path_factory.mktemp("raybench") / "bench")


@pytest.fixture(scope="module")
def ray_address(ray_connection, catalog_index_dir):
    """The session's local Ray cluster (conftest: 2 CPUs, token auth off, so that a CLI subprocess
    can join), this process connected to it."""
    return ray_connection.address


@pytest.fixture(scope="module")
def server(bench):
    with ScriptedOpenAIServer(policy_script(bench.tasks, delay_s=0.05)) as srv:
        yield srv


def _args(bench_dir, index_dir, runs, name, url):
    return [
        "eval",
        "--bench",
        str(bench_dir),
        "--name",
        name,
        "--backend",
        "openai",
        "--model",
        "m",
        "--index-dir",
        str(index_dir),
        "--runs-dir",
        str(runs),
        "--max-turns",
        "6",
        "--trials",
        str(TRIALS),
        "--strategies",
        STRATEGIES,
        "--concurrency",
        "4",
        "--base-url",
        url,
    ]


def normalized(path: Path) -> dict:
    """Every line of a results file without wall times and latencies, by key (duplicates refused)."""
    out = {}
    for r in read_results(path):
        d = r.model_dump(mode="json")
        d.pop("wall_s")
        for st in d["stages"]:
            for s in st["trajectory"]["steps"]:
                s.pop("latency_s")
        key = result_key(r)
        assert key not in out, f"duplicate key {key} in {path}"
        out[key] = d
    return dict(sorted(out.items()))


@pytest.fixture(scope="module")
def local_run(bench_dir, catalog_index_dir, server, tmp_path_factory, ray_address):
    runs = tmp_path_factory.mktemp("local-runs")
    out = CliRunner().invoke(app, _args(bench_dir, catalog_index_dir, runs, "local", server.base_url))
    assert out.exit_code == 0, out.output
    assert "episodes run in this process" in " ".join(out.output.split())
    res = normalized(runs / "local" / "results.jsonl")
    assert len(res) == TOTAL and all(r["error"] is None for r in res.values())
    # outcomes vary with the trial's seed, so equality below is not trivial
    assert {r["succ"] for r in res.values()} == {True, False}
    return res


def _lines(p: Path) -> int:
    return len(p.read_text().splitlines()) if p.exists() else 0


def test_two_workers_equal_local(bench_dir, catalog_index_dir, server, ray_address, local_run, tmp_path):
    runs = tmp_path / "runs"
    args = _args(bench_dir, catalog_index_dir, runs, "ray2", server.base_url)
    out = CliRunner().invoke(app, [*args, "--ray", ray_address, "--ray-workers", "2"])
    assert out.exit_code == 0, out.output
    text = " ".join(out.output.split())
    assert f"episodes run on Ray at {ray_address} (2 worker(s)" in text
    assert "episodes run on 2 Ray episode workers (1 CPU each, on 1 node)" in text
    dist = normalized(runs / "ray2" / "results.jsonl")
    assert list(dist) == list(local_run)
    for k in local_run:
        assert dist[k] == local_run[k], k
    assert not (runs / "ray2" / "results.errors.log").exists()
    # the workers wrote nothing into the run directory (their scratch dirs are private)
    assert not (runs / "ray2" / "judge_cache.sqlite").exists()
    # the workers are stopped at the end
    import ray

    assert not [a for a in ray.util.list_named_actors() if a.startswith("shopcomp-eval-worker")]


def test_driver_killed_then_resumed_equals_local(
    bench_dir, catalog_index_dir, server, ray_address, local_run, tmp_path
):
    runs = tmp_path / "runs"
    # one episode worker: the driver's death and the resume are what is tested (each worker builds
    # its own kit, the slow part; two workers are covered by the tests around this one)
    args = [*_args(bench_dir, catalog_index_dir, runs, "killed", server.base_url), "--ray", ray_address]
    args += ["--ray-workers", "1"]
    results = runs / "killed" / "results.jsonl"
    log = open(tmp_path / "child.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "shopping_companion.cli", *args],
        cwd=REPO,
        env=dict(os.environ),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 240
        while _lines(results) < 2 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert proc.poll() is None, (tmp_path / "child.log").read_text()[-3000:]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()
    written = _lines(results)
    assert 2 <= written < TOTAL, written
    before = results.read_text().splitlines()
    # rerun the same command (in this process, connected to the same cluster): it resumes
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 0, out.output
    after = results.read_text().splitlines()
    assert after[: len(before)] == before  # kept as written (a torn tail would have been cut)
    resumed = normalized(results)  # refuses duplicate keys
    assert list(resumed) == list(local_run)
    for k in local_run:
        assert resumed[k] == local_run[k], k


def test_worker_killed_mid_run_resubmits_its_episodes(
    bench_dir, catalog_index_dir, server, ray_address, local_run, tmp_path
):
    import ray

    from shopping_companion.benchmark.distributed import WORKER_NAME_PREFIX

    runs = tmp_path / "runs"
    args = [*_args(bench_dir, catalog_index_dir, runs, "wkill", server.base_url), "--ray", ray_address]
    results = runs / "wkill" / "results.jsonl"
    box: dict = {}

    def run() -> None:
        box["out"] = CliRunner().invoke(app, args)

    t = threading.Thread(target=run)
    t.start()
    killed = None
    deadline = time.monotonic() + 240
    while t.is_alive() and time.monotonic() < deadline:
        if _lines(results) >= 2:
            names = sorted(a for a in ray.util.list_named_actors() if a.startswith(WORKER_NAME_PREFIX))
            if names:
                killed = names[0]
                ray.kill(ray.get_actor(killed), no_restart=False)  # a crash: Ray restarts it
                break
        time.sleep(0.02)
    t.join(timeout=300)
    assert killed is not None, "the run ended before a worker could be killed"
    out = box["out"]
    assert out.exit_code == 0, out.output
    assert _lines(results) < TOTAL + 1  # nothing appended twice
    dist = normalized(results)
    assert list(dist) == list(local_run)
    for k in local_run:
        assert dist[k] == local_run[k], k
    assert not (runs / "wkill" / "results.errors.log").exists()
    # the kill hit episodes in flight: they were lost with the worker and resubmitted
    assert "were lost with their Ray worker" in " ".join(out.output.split()) and "resubmitted" in out.output


def test_bad_ray_address_exits_2(tmp_path):
    # the benchmark and the index do not exist: the address is refused before either is read
    # (were they read first, the refusal would name them instead)
    base = _args(tmp_path / "no-bench", tmp_path / "no-index", tmp_path / "runs", "bad", "http://127.0.0.1:9/v1")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    for address, says in (
        ("127.0.0.1:9", "ray.address (--ray): nothing answers at 127.0.0.1:9"),
        ("not an address", "ray.address (--ray): 'not an address' is not an address"),
    ):
        r = subprocess.run(
            [sys.executable, "-m", "shopping_companion.cli", *base, "--ray", address],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert r.returncode == 2, r.stdout + r.stderr
        assert says in " ".join(r.stderr.split()), r.stderr
    assert not (tmp_path / "runs" / "bad" / "results.jsonl").exists()
