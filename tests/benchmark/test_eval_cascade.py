"""Issue 32, item 2: `shopcomp eval` and `shopcomp sft collect` with an LLM judge judge as a cascade —
the rule judge decides every stage, and only stages with an uncertain item cost a request to the
local LLM judge (a scripted OpenAI-compatible server on 127.0.0.1), which decides only those items.
Real benchmark, BM25 index, memory store and environment; the policy is the scripted server, with
its stage-1 answer reworded so that the rule judge cannot read one value."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from shopping_companion.benchmark.report import read_results
from shopping_companion.benchmark.synth import write_benchmark
from shopping_companion.cli import app
from tests.openai_server import ScriptedOpenAIServer
from tests.scripted_policy import policy_script

pytestmark = pytest.mark.slow

VAGUE = "the one I mentioned"  # words no vocabulary reads, short enough to be a value


@pytest.fixture(scope="module")
def bench(synth_bench):
    return synth_bench(2, seed=71, sessions_per_user=30)


@pytest.fixture(scope="module")
def bench_dir(bench, tmp_path_factory):
    return write_benchmark(bench, tmp_path_factory.mktemp("cascade") / "bench")


def reworded(tasks):
    """The scripted policy, its stage-1 answer's first value in words no vocabulary reads."""
    script = policy_script(tasks, think=False)

    def policy(body: dict):
        text = script(body)
        m = re.fullmatch(r"<answer>(\{.*\})</answer>", text, re.S) if isinstance(text, str) else None
        if m is None:
            return text
        answer = json.loads(m.group(1))
        if answer.get("preferences"):
            answer["preferences"][0]["value"] = VAGUE
        return "<answer>" + json.dumps(answer) + "</answer>"

    return policy


def generous_judge(body: dict) -> str:
    """A local LLM judge that counts every annotated feature."""
    prompt = body["messages"][-1]["content"]
    F = int(re.search(r"Annotated wanted features \(F = (\d+)\)", prompt).group(1))
    common = {"matched": list(range(1, F + 1)), "reasons": ["every feature is there"]}
    if "\nStage 1 of a shopping task" in prompt:
        return json.dumps({"q1": 1, "m1": F, "h1": 0, **common})
    return json.dumps({"p2": 1, "q2": 1, "m2": F, **common})


def _check(results, n_requests: int) -> None:
    stages = [st for r in results for st in r.stages]
    assert stages and all(r.error is None for r in results)
    for st in stages:
        v = st.verdict
        assert v.llm_calls == (1 if v.uncertain else 0), (v.judge, v.uncertain, v.llm_calls)
        if v.llm_calls:
            assert v.judge == "rule+llm:judge"
            assert all(it["decided_by"] == ("rule" if it["confident"] else "llm") for it in v.items)
        else:
            assert v.judge == "rule" and all(it["decided_by"] == "rule" for it in v.items)
    # the reworded value is uncertain, the judge sees it and counts it
    for r in results:
        s1 = r.stages[0].verdict
        vague = [it for it in s1.items if it["kind"] == "match" and not it["confident"]]
        assert vague and all(it["ok"] and it["decided_by"] == "llm" for it in vague), s1.items
        assert s1.m1 == s1.F
    assert n_requests == sum(st.verdict.llm_calls for st in stages)  # no request for a confident stage


def test_eval_and_sft_collect_send_only_uncertain_stages_to_the_llm_judge(
    bench, bench_dir, catalog_index_dir, tmp_path
):
    runner = CliRunner()
    with (
        ScriptedOpenAIServer(reworded(bench.tasks)) as srv,
        ScriptedOpenAIServer(generous_judge, model="judge") as judge,
    ):
        common = ["--backend", "openai", "--model", "m", "--base-url", srv.base_url, "--max-retries", "0"]
        common += ["--index-dir", str(catalog_index_dir), "--concurrency", "1"]
        common += ["--judge", "llm", "--judge-model", "judge", "--judge-base-url", judge.base_url]
        out = runner.invoke(
            app, ["eval", "--bench", str(bench_dir), "--name", "casc", "--runs-dir", str(tmp_path / "runs")] + common
        )
        assert out.exit_code == 0, out.output
        n_eval = len(judge.bodies)
        run = tmp_path / "runs" / "casc"
        results = read_results(run / "results.jsonl")
        _check(results, n_eval)
        judging = json.loads((run / "summary.json").read_text())["summary"]["judging"]
        assert judging["stage1"]["llm_calls"] == len(results) and judging["stage1"]["uncertain"] >= len(results)
        ident = json.loads((run / "results.identity.json").read_text())
        assert ident["config"]["judge"] == {"kind": "llm", "model": "judge", "cascade": True}
        assert ident["uncertain"] == "no_credit"
        col = runner.invoke(app, ["sft", "collect", "--bench", str(bench_dir), "--out", str(tmp_path / "col")] + common)
        assert col.exit_code == 0, col.output
        _check(read_results(tmp_path / "col" / "rollouts.jsonl"), len(judge.bodies) - n_eval)
