"""The Inspect task ``shopping_companion/bench`` against ``shopcomp eval`` (issue 36): the same
scripted policy, served by a local OpenAI-compatible server on 127.0.0.1, plays the same tasks
through ``inspect_ai.eval`` (Inspect's own ``openai/`` provider and client) and through
``shopcomp eval`` (our OpenAI backend); every strategy of the benchmark, two trials (epochs).

Equal: every episode (trajectories with their tool observations, verdicts, reward breakdowns to the
float, Acc, Succ, seeds, simulator feedback; wall times, latencies and the policy's name aside),
the requests the server received (messages and sampling seed; Inspect's client sends no ``name``
on tool messages), and the Inspect metrics equal the means of ``shopcomp eval``'s results file.
``inspect view start`` serves the log.
Real benchmark, BM25 index, memory store, environment, judge and rubric.
"""

from __future__ import annotations

import json
import math
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from typer.testing import CliRunner

from tests.extras.inspect.conftest import require

require("inspect_ai")

from inspect_ai import eval as inspect_eval  # noqa: E402
from inspect_ai.log import read_eval_log  # noqa: E402

from shopping_companion.benchmark.metrics import acc_applies  # noqa: E402
from shopping_companion.benchmark.report import read_results  # noqa: E402
from shopping_companion.cli import app  # noqa: E402
from shopping_companion.integrations.inspect.solvers import RESULT_KEY  # noqa: E402
from shopping_companion.types import EpisodeResult  # noqa: E402
from tests.extras_support import shared_benchmark  # noqa: E402
from tests.openai_server import ScriptedOpenAIServer  # noqa: E402
from tests.scripted_policy import policy_script  # noqa: E402

pytestmark = pytest.mark.slow
STRATEGIES = "two_stage:none,two_stage:high,one_stage,oracle"
N_TASKS = 10  # the issue asks for the figures of a 10-task run
TRIALS = 2


@pytest.fixture(scope="module")
def bench_and_dir(request):
    """The benchmark and its directory: tests/extras/agents plays the same one (same arguments),
    synthesised once for both (:func:`~tests.extras_support.shared_benchmark`)."""
    return shared_benchmark(request, N_TASKS, seed=36, sessions_per_user=30)


@pytest.fixture(scope="module")
def bench(bench_and_dir):
    return bench_and_dir[0]


@pytest.fixture(scope="module")
def bench_dir(bench_and_dir):
    return bench_and_dir[1]


def comparable(r: EpisodeResult) -> dict:
    """An episode without what may differ between two runs of the same policy: wall time,
    latencies, the policy's name."""
    d = r.model_dump(mode="json")
    d.pop("wall_s")
    d.pop("policy")
    for st in d["stages"]:
        for s in st["trajectory"]["steps"]:
            s.pop("latency_s")
    return d


def request_view(body: dict) -> str:
    """What the policy saw in one request: the messages and the seed. Inspect's ``openai/`` provider
    takes a model name it does not know for OpenAI's newest model and sends the system prompt as a
    ``developer`` message; its client sends no ``name`` on tool messages."""
    msgs = []
    for m in body["messages"]:
        m = {k: v for k, v in m.items() if not (m["role"] == "tool" and k == "name")}
        msgs.append({**m, "role": "system"} if m["role"] == "developer" else m)
    return json.dumps({"messages": msgs, "seed": body.get("seed")}, sort_keys=True)


@pytest.fixture(scope="module")
def runs(bench, bench_dir, catalog_index_dir, tmp_path_factory):
    """(``shopcomp eval`` results by key, its requests, the Inspect log, its requests)."""
    tmp = tmp_path_factory.mktemp("parity")
    with ScriptedOpenAIServer(policy_script(bench.tasks)) as srv:
        args = ["eval", "--bench", str(bench_dir), "--name", "ours", "--runs-dir", str(tmp / "runs")]
        args += ["--backend", "openai", "--model", "m", "--base-url", srv.base_url, "--max-retries", "0"]
        args += ["--index-dir", str(catalog_index_dir), "--strategies", STRATEGIES, "--trials", str(TRIALS)]
        args += ["--max-turns", "6", "--concurrency", "2"]
        out = CliRunner().invoke(app, args)
        assert out.exit_code == 0, out.output
        ours_requests = [b for b in srv.bodies]
        n = len(ours_requests)
        (log,) = inspect_eval(
            "shopping_companion/bench",
            model="openai/m",
            model_base_url=srv.base_url,
            # no -M responses_api=false: the task sends Chat Completions to a server that is not OpenAI's
            task_args={
                "bench": str(bench_dir),
                "index_dir": str(catalog_index_dir),
                "strategies": STRATEGIES,
                "max_turns": 6,
            },
            epochs=TRIALS,
            log_dir=str(tmp / "logs"),
            max_connections=2,
            display="none",
        )
        inspect_requests = srv.bodies[n:]
    assert log.status == "success", log.error
    ours = {(r.task_id, r.mode, r.hint, r.trial): r for r in read_results(tmp / "runs" / "ours" / "results.jsonl")}
    return ours, ours_requests, read_eval_log(log.location), inspect_requests


def test_every_episode_equals_shopcomp_eval(runs):
    ours, _, log, _ = runs
    assert len(ours) == N_TASKS * 4 * TRIALS and all(r.error is None for r in ours.values())
    theirs = {}
    for s in log.samples:
        r = EpisodeResult.model_validate(s.store[RESULT_KEY])
        assert s.id == f"{r.task_id}@{s.metadata['strategy']}" and r.trial == s.epoch - 1
        theirs[(r.task_id, r.mode, r.hint, r.trial)] = r
    assert theirs.keys() == ours.keys()
    for key, r in ours.items():
        assert comparable(theirs[key]) == comparable(r), key
    # not a trivial equality: tool observations, verdicts and rewards vary over the episodes
    assert {r.succ for r in ours.values()} == {True, False}
    assert len({r.stages[-1].reward.total for r in ours.values()}) > 3
    assert sum(len(s.tool_results) for r in ours.values() for st in r.stages for s in st.trajectory.steps) > 50


def test_the_policy_saw_the_same_requests(runs):
    _, ours, _, theirs = runs
    assert Counter(map(request_view, theirs)) == Counter(map(request_view, ours))
    # the task's token limit and the per-episode seeds (no temperature: the newest-model rules again);
    # our tool schemas by name
    assert {b["max_completion_tokens"] for b in theirs} == {4096} and {b["top_p"] for b in theirs} == {0.95}
    assert {b["seed"] for b in theirs} == {b["seed"] for b in ours} and len({b["seed"] for b in ours}) > 1
    ours_tools = {json.dumps(sorted(t["function"]["name"] for t in b["tools"])) for b in ours}
    assert {json.dumps(sorted(t["function"]["name"] for t in b["tools"])) for b in theirs} == ours_tools


def test_inspect_metrics_are_the_means_of_the_results_file(runs):
    ours, _, log, _ = runs
    means = {sc.name: sc.metrics["mean"].value for sc in log.results.scores}
    results = list(ours.values())

    def mean(xs):
        xs = list(xs)
        return sum(xs) / len(xs)

    assert math.isclose(means["acc"], mean(r.acc for r in results if acc_applies(r)))
    assert math.isclose(means["succ"], mean(float(r.succ) for r in results))
    final = [r.stages[-1] for r in results]
    assert math.isclose(means["reward"], mean(st.reward.total for st in final))
    for c in ("R_z", "R_tool", "R_fmt"):
        assert math.isclose(means[c], mean(st.reward.components[c] for st in final)), c
    first = [r.stages[0].reward for r in results if r.mode == "two_stage"]
    assert math.isclose(means["R_z_s1"], mean(b.components["R_z"] for b in first))


def test_inspect_view_serves_the_log(runs):
    """``inspect view start`` (a real server on 127.0.0.1) lists the log and returns its samples."""
    _, _, log, _ = runs
    log_file = Path(log.location)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    inspect_cli = Path(sys.executable).with_name("inspect")
    cmd = [str(inspect_cli), "view", "start", "--log-dir", str(log_file.parent), "--host", "127.0.0.1"]
    proc = subprocess.Popen([*cmd, "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                listing = httpx.get(f"{base}/api/log-files", timeout=5)
                break
            except httpx.TransportError:
                assert proc.poll() is None, proc.stderr.read().decode()
                assert time.monotonic() < deadline, "inspect view did not start within 60 s"
                time.sleep(0.5)
        assert listing.status_code == 200, listing.text
        names = [f["name"] for f in listing.json()["files"]]
        (name,) = [n for n in names if n.endswith(log_file.name)]
        page = httpx.get(base + "/", timeout=10)
        assert page.status_code == 200 and "<html" in page.text.lower()
        got = httpx.get(f"{base}/api/logs/{quote(name, safe='')}", timeout=30)  # as the viewer asks
        assert got.status_code == 200, got.text[:500]
        assert len(got.json()["samples"]) == len(log.samples)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
