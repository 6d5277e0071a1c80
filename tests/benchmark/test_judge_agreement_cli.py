"""``shopcomp judge-agreement``: re-judge a finished evaluation with the verdicts recorded at
evaluation time, the rule judge and an LLM judge served by the local scripted OpenAI-compatible
server; per-field agreement, Cohen's κ and OPC land in agreement.md / agreement.json."""

from __future__ import annotations

import hashlib
import json
import re
import shutil

import pytest
from typer.testing import CliRunner

from shopping_companion.benchmark.report import read_results
from shopping_companion.benchmark.synth import write_benchmark
from shopping_companion.cli import app
from tests.openai_server import ScriptedOpenAIServer
from tests.scripted_policy import policy_script

pytestmark = pytest.mark.slow


def strict_grader(body):
    """An LLM judge that never credits a feature or product: every stage it grades fails (unless F = 0)."""
    prompt = body["messages"][-1]["content"]
    reply = {"matched": [], "reasons": ["scripted grader"]}
    if '"q1"' in prompt:
        reply.update(q1=1, m1=0, h1=0)
        if '"c1"' in prompt:
            reply["c1"] = 0
    else:
        reply.update(p2=0, q2=0, m2=0)
        if '"n2"' in prompt:
            reply.update(n2=0, u2=0)
    return json.dumps(reply)


@pytest.fixture(scope="module")
def bench(synth_bench):
    return synth_bench(3, seed=29, sessions_per_user=30)


#: a run name Rich would read as markup ("[red]" opens a style): printed paths must be escaped
RUN = "a[red]b"


def test_judge_agreement_cli_recorded_rule_and_llm(bench, catalog_index_dir, tmp_path):
    bench_dir = write_benchmark(bench, tmp_path / "bench")
    runs = tmp_path / "runs"
    runner = CliRunner()
    with ScriptedOpenAIServer(policy_script(bench.tasks)) as srv:
        out = runner.invoke(
            app,
            [
                "eval",
                "--bench",
                str(bench_dir),
                "--name",
                RUN,
                "--backend",
                "openai",
                "--model",
                "m",
                "--base-url",
                srv.base_url,
                "--index-dir",
                str(catalog_index_dir),
                "--runs-dir",
                str(runs),
                "--trials",
                "2",
                "--max-turns",
                "6",
            ],
        )
        assert out.exit_code == 0, out.output
    results = runs / RUN / "results.jsonl"
    res = read_results(results)
    n_stages = sum(len(r.stages) for r in res if r.error is None)
    assert n_stages >= 8
    with ScriptedOpenAIServer(strict_grader) as grader:
        out = runner.invoke(
            app,
            [
                "judge-agreement",
                "--bench",
                str(bench_dir),
                "--results",
                str(results),
                "--judge",
                "recorded",
                "--judge",
                "rule",
                "--judge",
                f"llm:grader@{grader.base_url}",
                "--index-dir",
                str(catalog_index_dir),
                "--opc-by",
                "item",
            ],
        )
        assert out.exit_code == 0, out.output
        # identical trajectories of two trials share one cached reply
        assert 0 < len(grader.bodies) <= n_stages
    rep = json.loads((runs / RUN / "agreement.json").read_text())
    assert rep["judges"] == ["recorded", "rule", "llm:grader"] and rep["n_items"] == n_stages
    assert rep["failures"] == {"recorded": 0, "rule": 0, "llm:grader": 0}
    pairs = {(p["judge_a"], p["judge_b"], p["field"]): p for p in rep["pairs"]}
    # the evaluation recorded the rule judge's verdicts: re-judging with it agrees on every item
    assert pairs[("recorded", "rule", "success")]["agreement"] == 1.0
    assert pairs[("recorded", "rule", "success")]["n"] == n_stages
    # the strict grader fails everything (F > 0 in every task), so it agrees exactly on the rule judge's failures
    succ = [st.verdict.success for r in res if r.error is None for st in r.stages]
    assert 0 < sum(succ) < len(succ)
    assert pairs[("rule", "llm:grader", "success")]["agreement"] == pytest.approx(1 - sum(succ) / len(succ))
    # OPC over stage-2 items: the grader's all-zero vector has no correlation with anyone (2 undefined pairs)
    assert rep["opc"]["by"] == "item" and rep["opc"]["n_pairs"] == 1 and rep["opc"]["n_undefined"] == 2
    assert rep["opc"]["mean"] == pytest.approx(1.0)
    md = (runs / RUN / "agreement.md").read_text()
    assert "| recorded | rule |" in md and "OPC" in md
    # the grader's replies are cached: a rerun asks the endpoint nothing
    with ScriptedOpenAIServer(strict_grader) as grader2:
        out = runner.invoke(
            app,
            [
                "judge-agreement",
                "--bench",
                str(bench_dir),
                "--results",
                str(results),
                "--judge",
                "rule",
                "--judge",
                f"llm:grader@{grader2.base_url}",
                "--index-dir",
                str(catalog_index_dir),
            ],
        )
        assert out.exit_code == 0, out.output
        assert grader2.bodies == []

    # results of another benchmark whose task ids coincide (same seed, other content) are refused,
    # not silently re-judged against the wrong gold (regression)
    other = tmp_path / "other-bench"
    shutil.copytree(bench_dir, other)
    lines = (other / "tasks.jsonl").read_text().splitlines()
    t0 = json.loads(lines[0])
    t0["instruction"] += " Something else entirely."
    (other / "tasks.jsonl").write_text("\n".join([json.dumps(t0)] + lines[1:]) + "\n")
    # a coherent other benchmark: its manifest records its own tasks file (load_benchmark checks it)
    manifest = json.loads((other / "manifest.json").read_text())
    manifest["files"]["tasks.jsonl"] = hashlib.sha256((other / "tasks.jsonl").read_bytes()).hexdigest()
    (other / "manifest.json").write_text(json.dumps(manifest))
    out = runner.invoke(
        app,
        [
            "judge-agreement",
            "--bench",
            str(other),
            "--results",
            str(results),
            "--judge",
            "recorded",
            "--judge",
            "rule",
            "--index-dir",
            str(catalog_index_dir),
        ],
    )
    assert out.exit_code == 2 and "do not belong to --bench" in " ".join(out.output.split()), out.output

    # a judge whose every verdict failed (wrong endpoint, bad replies) is an error, not an empty report
    with ScriptedOpenAIServer(lambda body: "not json at all") as broken:
        out = runner.invoke(
            app,
            [
                "judge-agreement",
                "--bench",
                str(bench_dir),
                "--results",
                str(results),
                "--judge",
                "recorded",
                "--judge",
                f"llm:broken@{broken.base_url}",
                "--index-dir",
                str(catalog_index_dir),
                "--out",
                str(tmp_path / "ja-broken"),
            ],
        )
    flat = " ".join(out.output.split())
    assert out.exit_code == 4 and "all" in flat and "verdicts failed" in flat, (
        out.output
    )  # EXIT_SERVICE: the judge failed


def test_judge_agreement_cli_rejects_bad_input(tmp_path):
    runner = CliRunner()
    out = runner.invoke(
        app, ["judge-agreement", "--bench", str(tmp_path), "--results", str(tmp_path / "r.jsonl"), "--judge", "rule"]
    )
    assert out.exit_code == 2 and "at least two judges" in out.output
    out = runner.invoke(
        app,
        [
            "judge-agreement",
            "--bench",
            str(tmp_path),
            "--results",
            str(tmp_path / "r.jsonl"),
            "--judge",
            "rule",
            "--judge",
            "gpt",
        ],
    )
    assert out.exit_code == 2 and re.search(r"allowed values are rule, recorded, llm:MODEL", out.output)
    out = runner.invoke(
        app, ["judge-agreement", "--bench", str(tmp_path), "--results", str(tmp_path / "r.jsonl"), "--stage", "3"]
    )
    assert out.exit_code == 2 and "--stage must be 1, 2 or all" in out.output
