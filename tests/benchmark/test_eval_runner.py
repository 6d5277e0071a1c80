"""The evaluation runner end to end: real environment, tools, memory, judge and rewards, with an LLM
policy served by the local scripted OpenAI-compatible server on 127.0.0.1 (tests/openai_server.py).

Covers: concurrent == sequential for the same seeds; resume after ``kill -9`` of a running
``shopcomp eval`` (nothing lost, nothing duplicated, equal to an uninterrupted run); endpoint
faults (HTTP 5xx/429, invalid JSON, timeouts) retried, recorded and never scored; all five
strategies of Table 3 from one command with pass@k, behaviour, Figure 3, taxonomy, parquet; the
API key never written anywhere.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from shopping_companion.benchmark.evaluate import EvalSettings, run_evaluation
from shopping_companion.benchmark.metrics import strategy_of
from shopping_companion.benchmark.report import final_results, read_results, result_key, summarize
from shopping_companion.benchmark.synth import write_benchmark
from shopping_companion.cli import app
from shopping_companion.envs.env import EnvConfig
from shopping_companion.judges.rule import RuleJudge
from shopping_companion.llm.base import Sampling
from shopping_companion.llm.openai_backend import OpenAIBackend
from shopping_companion.pipeline import memory_factory
from tests.openai_server import ScriptedOpenAIServer
from tests.scripted_policy import find_task, policy_script

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench(synth_bench):
    return synth_bench(3, seed=23, sessions_per_user=40)


@pytest.fixture(scope="module")
def bench_dir(bench, tmp_path_factory):
    return write_benchmark(bench, tmp_path_factory.mktemp("evalbench") / "bench")


@pytest.fixture(scope="module")
def judge(product_search):
    return RuleJudge(lambda ids: {p: product_search.get(p) for p in ids if product_search.get(p) is not None})


def normalized(results):
    """Everything except wall times and latencies, keyed and sorted."""
    out = {}
    for r in final_results(results):
        d = r.model_dump(mode="json")
        d.pop("wall_s")
        for st in d["stages"]:
            for s in st["trajectory"]["steps"]:
                s.pop("latency_s")
        out[result_key(r)] = d
    return dict(sorted(out.items()))


def test_concurrent_run_equals_sequential(bench, product_search, embedder, judge, tmp_path):
    tasks = bench.tasks
    settings = EvalSettings(trials=2, sampling=Sampling(temperature=0.6, seed=0), env=EnvConfig(max_turns=6))
    strategies = "two_stage:none,one_stage,oracle,two_stage:high"
    make_memory = memory_factory(bench.sessions, embedder)
    events: list[tuple[str, float]] = []
    with ScriptedOpenAIServer(policy_script(tasks, delay_s=0.03)) as srv:
        be = OpenAIBackend("scripted", base_url=srv.base_url, api_key="k", backoff_s=0.0)
        seq = run_evaluation(
            tasks,
            be,
            product_search,
            make_memory,
            judge,
            tmp_path / "seq.jsonl",
            settings,
            progress=False,
            concurrency=1,
            strategies=strategies,
        )
        conc = run_evaluation(
            tasks,
            be,
            product_search,
            make_memory,
            judge,
            tmp_path / "conc.jsonl",
            settings,
            progress=False,
            concurrency=8,
            strategies=strategies,
            on_event=lambda ev, key, t: events.append((ev, t)),
        )
        assert not srv.errors
    assert len(seq) == len(conc) == 3 * 2 * 4
    assert all(r.error is None for r in seq)
    a, b = normalized(seq), normalized(conc)
    assert list(a) == list(b)
    for k in a:
        assert a[k] == b[k], k
    # it really ran concurrently: up to 8 episodes in flight at once
    level = peak = 0
    for ev, _ in sorted(events, key=lambda e: e[1]):
        level += 1 if ev == "start" else -1
        peak = max(peak, level)
    assert 4 <= peak <= 8
    # the script makes outcomes depend on the trial's seed, so the runs are not trivially equal
    assert {r.succ for r in seq} == {True, False} and len({r.acc for r in seq}) > 1
    assert {strategy_of(r) for r in seq} == {"two_stage:none", "one_stage", "oracle", "two_stage:high"}
    # finishing order differs from task order in the concurrent file, yet nothing is duplicated
    keys = [result_key(r) for r in read_results(tmp_path / "conc.jsonl")]
    assert len(keys) == len(set(keys)) == 24


def _lines(p: Path) -> int:
    return len(p.read_text().splitlines()) if p.exists() else 0


def test_resume_after_kill_equals_uninterrupted_run(bench, bench_dir, catalog_index_dir, tmp_path):
    runs = tmp_path / "runs"
    common = [
        "eval",
        "--bench",
        str(bench_dir),
        "--backend",
        "openai",
        "--model",
        "m",
        "--index-dir",
        str(catalog_index_dir),
        "--runs-dir",
        str(runs),
        "--trials",
        "2",
        "--max-turns",
        "6",
        "--strategies",
        "two_stage:none,two_stage:low",
    ]
    total = 3 * 2 * 2
    results = runs / "killed" / "results.jsonl"
    with ScriptedOpenAIServer(policy_script(bench.tasks, delay_s=0.25)) as srv:
        log = open(tmp_path / "child.log", "w")
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "shopping_companion.cli",
                *common,
                "--name",
                "killed",
                "--concurrency",
                "2",
                "--base-url",
                srv.base_url,
            ],
            cwd=REPO,
            env=dict(os.environ),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 240
        while _lines(results) < 3 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None, (tmp_path / "child.log").read_text()[-3000:]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        log.close()
        written = _lines(results)
        assert 3 <= written < total
        before = read_results(results)
        # rerun the same command: it resumes
        out = CliRunner().invoke(app, [*common, "--name", "killed", "--concurrency", "4", "--base-url", srv.base_url])
        assert out.exit_code == 0, out.output
    resumed = read_results(results)
    keys = [result_key(r) for r in resumed]
    assert len(resumed) == total and len(set(keys)) == total  # nothing missing, nothing duplicated
    assert [r.model_dump() for r in resumed[: len(before)]] == [r.model_dump() for r in before]  # kept as written
    with ScriptedOpenAIServer(policy_script(bench.tasks)) as srv:
        out = CliRunner().invoke(app, [*common, "--name", "straight", "--concurrency", "1", "--base-url", srv.base_url])
        assert out.exit_code == 0, out.output
    straight = read_results(runs / "straight" / "results.jsonl")
    assert normalized(resumed) == normalized(straight)


class FaultyScript:
    """Wraps the scripted policy with endpoint faults chosen by (task, stage tools, turn).

    ``first``: faults served on the FIRST attempt of a request only (then the normal answer);
    ``always``: faults served on every attempt (the backend gives up).
    Stage: 1 = memory tools only, 2 = product tools only (stage 2, oracle), 0 = all tools (one_stage).
    """

    def __init__(self, tasks, first, always=()):
        self.inner = policy_script(tasks)
        self.tasks = tasks
        self.first = first
        self.always = set(always)
        self.seen: dict[str, int] = {}
        self.served_faults = 0

    def __call__(self, body):
        task = find_task(body, self.tasks)
        idx = self.tasks.index(task)
        names = {t["function"]["name"] for t in body.get("tools") or []}
        stage = 0 if {"mem_search", "product_search"} <= names else (1 if "mem_search" in names else 2)
        turn = sum(m["role"] == "assistant" for m in body["messages"])
        h = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
        self.seen[h] = self.seen.get(h, 0) + 1
        if (idx, stage, turn) in self.always:
            self.served_faults += 1
            return {"status": 503, "message": "overloaded"}
        fault = self.first.get((idx, stage, turn))
        if fault is not None and self.seen[h] == 1:
            self.served_faults += 1
            return fault
        return self.inner(body)


def test_endpoint_faults_are_retried_recorded_and_never_scored(
    bench, product_search, embedder, judge, tmp_path, caplog
):
    secret = "sk-test-NEVER-LOG-ME"
    tasks = bench.tasks
    settings = EvalSettings(trials=1, sampling=Sampling(seed=0), env=EnvConfig(max_turns=6))
    make_memory = memory_factory(bench.sessions, embedder)
    first = {
        (1, 1, 0): {"status": 500},
        (1, 1, 1): {"raw": "{not json"},
        (1, 2, 0): {"delay_s": 1.5},  # the client times out after 0.5 s
        (2, 2, 1): {"status": 429, "headers": {"retry-after": "0"}},
        (2, 1, 0): {"raw": '{"choices": []}'},
        (0, 1, 0): {"status": 502},
    }
    with ScriptedOpenAIServer(policy_script(tasks)) as srv:
        be = OpenAIBackend("m", base_url=srv.base_url, api_key=secret, timeout_s=0.5, max_retries=2, backoff_s=0.0)
        clean = run_evaluation(
            tasks,
            be,
            product_search,
            make_memory,
            judge,
            tmp_path / "clean.jsonl",
            settings,
            progress=False,
            concurrency=3,
        )
    faulty = FaultyScript(tasks, first, always={(0, 2, 1)})
    path = tmp_path / "faulty.jsonl"
    with caplog.at_level(logging.WARNING), ScriptedOpenAIServer(faulty) as srv:
        be = OpenAIBackend("m", base_url=srv.base_url, api_key=secret, timeout_s=0.5, max_retries=2, backoff_s=0.0)
        res = run_evaluation(
            tasks, be, product_search, make_memory, judge, path, settings, progress=False, concurrency=3
        )
        assert all(a == f"Bearer {secret}" for a in srv.authorizations)
    assert faulty.served_faults == len(first) + 3  # every first-attempt fault, and 3 attempts of the dead one
    by_task = {r.task_id: r for r in res}
    dead = by_task[tasks[0].task_id]
    assert dead.error is not None and "3 attempt(s)" in dead.error and "503" in dead.error
    assert dead.stages[-1].trajectory.termination == "backend_error" or len(dead.stages) == 1
    assert not dead.succ
    # the retried episodes are exactly what they would have been without faults
    nc, nf = normalized(clean), normalized(res)
    for t in tasks[1:]:
        k = (t.task_id, 0, "two_stage", "none")
        assert nf[k] == nc[k]
    s = summarize(res)
    assert s["n_errors"] == 1 and s["n_scored"] == 2
    assert s["errors"][0]["task_id"] == tasks[0].task_id
    # recorded in the log (retries) without the key
    assert "retrying" in caplog.text and secret not in caplog.text
    assert secret not in path.read_text()
    # a rerun with a healthy endpoint retries only the errored episode; the newest success wins
    with ScriptedOpenAIServer(policy_script(tasks)) as srv:
        be = OpenAIBackend("m", base_url=srv.base_url, api_key=secret, timeout_s=5, max_retries=0)
        again = run_evaluation(
            tasks, be, product_search, make_memory, judge, path, settings, progress=False, concurrency=3
        )
        n_requests = len(srv.bodies)
    assert 0 < n_requests <= 12  # one episode only
    assert len(read_results(path)) == 4 and len(again) == 3 and all(r.error is None for r in again)
    assert normalized(again) == nc


def test_cli_all_strategies_pass_k_report_and_no_key_anywhere(
    bench, bench_dir, catalog_index_dir, tmp_path, monkeypatch
):
    import pandas as pd

    secret = "sk-live-SECRET-4242"
    monkeypatch.setenv("SHOPCOMP_TEST_KEY", secret)
    runs = tmp_path / "runs"
    faulty = FaultyScript(bench.tasks, {(1, 2, 0): {"status": 500}, (2, 1, 0): {"raw": "nope"}}, always={(0, 2, 0)})
    args = [
        "eval",
        "--bench",
        str(bench_dir),
        "--name",
        "all",
        "--backend",
        "openai",
        "--model",
        "m",
        "--api-key-env",
        "SHOPCOMP_TEST_KEY",
        "--index-dir",
        str(catalog_index_dir),
        "--runs-dir",
        str(runs),
        "--strategies",
        "oracle,one_stage,two_stage:none,two_stage:low,two_stage:high",
        "--trials",
        "2",
        "--pass-k",
        "1,2",
        "--max-turns",
        "6",
        "--max-retries",
        "1",
        "--concurrency",
        "8",
    ]
    runner = CliRunner()
    attribution = '{"category": "unverified_attributes", "secondary": [], "explanation": "turn 2 skipped product_view"}'
    with ScriptedOpenAIServer(faulty) as srv, ScriptedOpenAIServer(lambda body: attribution) as att:
        out = runner.invoke(
            app,
            args + ["--base-url", srv.base_url, "--attribution-model", "att", "--attribution-base-url", att.base_url],
        )
        assert out.exit_code == 3, out.output  # some episodes ended with a backend error: all written, exit 3
        assert srv.authorizations and all(a == f"Bearer {secret}" for a in srv.authorizations)
        n_attributed = len(att.bodies)
        # a different configuration cannot append to the same run
        bad = runner.invoke(app, args + ["--base-url", srv.base_url, "--temperature", "0.1"])
        assert bad.exit_code == 2 and "different run configuration" in bad.output
    run = runs / "all"
    res = read_results(run / "results.jsonl")
    assert len(res) == 3 * 5 * 2
    errored = [r for r in res if r.error]
    # task 0's opening product-stage request always fails: two-stage (3 hints) and oracle lose task 0
    assert {r.task_id for r in errored} == {bench.tasks[0].task_id} and len(errored) == 8
    assert {strategy_of(r) for r in errored} == {"oracle", "two_stage:none", "two_stage:low", "two_stage:high"}
    report = (run / "report.md").read_text()
    for label in ("Oracle", "One-Stage", "Two-Stage (No Hint)", "Two-Stage (Low Hint)", "Two-Stage (High Hint)"):
        assert f"| {label} |" in report
    assert "## pass@k and pass^k" in report and "| two_stage:high | 2 | 2 |" in report
    assert "## Behaviour (Table 4" in report and "Tool calls per turn (Figure 3)" in report
    assert "Episodes not scored (errors)" in report and report.count("503") >= 1
    assert (run / "tool_calls_per_turn_two_stage_none.png").read_bytes()[:4] == b"\x89PNG"
    df = pd.read_parquet(run / "results.parquet")
    assert len(df) == 30 and df["scored"].sum() == 22
    assert set(df["strategy"]) == {"oracle", "one_stage", "two_stage:none", "two_stage:low", "two_stage:high"}
    hi = df[(df.strategy == "two_stage:high") & df.scored]
    assert hi["simulator"].map(lambda s: json.loads(s)["hint"] == "high").all()
    # the LLM attribution asked once per failure and is reported next to the rules
    tax = [json.loads(x) for x in (run / "taxonomy.jsonl").read_text().splitlines()]
    failures = [r for r in res if r.error is None and not r.succ]
    assert len(tax) == len(failures) == n_attributed > 0
    assert all(t["llm"]["category"] == "unverified_attributes" for t in tax)
    assert f"LLM attribution (attribution:att): {n_attributed}/{n_attributed} usable replies" in report
    summary = json.loads((run / "summary.json").read_text())["summary"]
    assert summary["n_errors"] == 8 and set(summary["pass_k"]["oracle"]["k"]) == {"1", "2"}
    assert summary["strategies"]["oracle"]["all"]["acc"] is None
    # the key is nowhere: not in any file of the run, not in the console output
    for p in run.rglob("*"):
        if p.is_file():
            assert secret.encode() not in p.read_bytes(), p
    assert secret not in out.output and secret not in bad.output
    # unknown strategies are refused with the supported list; --list-strategies prints them
    out = runner.invoke(app, ["eval", "--bench", str(bench_dir), "--name", "x", "--strategies", "two_stage:loud"])
    assert out.exit_code == 2 and "two_stage:high" in out.output and "oracle" in out.output
    out = runner.invoke(app, ["eval", "--list-strategies"])
    assert out.exit_code == 0 and out.output.split() == [
        "oracle",
        "one_stage",
        "two_stage:none",
        "two_stage:low",
        "two_stage:high",
    ]
