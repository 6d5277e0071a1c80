"""An LLM policy through a real HTTP round trip: the OpenAI-compatible backend talks to a scripted
OpenAI-compatible server on 127.0.0.1, and the environment executes the tool calls it returns."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from shopping_companion.benchmark.evaluate import EvalSettings, run_episode
from shopping_companion.benchmark.synth import write_benchmark
from shopping_companion.cli import app
from shopping_companion.judges.rule import RuleJudge
from shopping_companion.llm.openai_backend import OpenAIBackend
from shopping_companion.memory.store import MemoryStore
from tests.openai_server import ScriptedOpenAIServer

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def bench(synth_bench):
    return synth_bench(3, seed=11, sessions_per_user=10)  # a short haystack: nothing here depends on its length


def _tool_names(body):
    return {t["function"]["name"] for t in body.get("tools") or []}


def _last_tool_json(body):
    tools = [m for m in body["messages"] if m["role"] == "tool"]
    return json.loads(tools[-1]["content"]) if tools else {}


def oracle_script(task):
    """A scripted 'model' that knows the gold answer and uses the tools like a good agent.

    Stage 1's first call is a structured OpenAI tool call; the others are Hermes text blocks.
    """
    ref = task.slots[0].reference_product_id

    def script(body):
        n_assistant = sum(m["role"] == "assistant" for m in body["messages"])
        if "mem_search" in _tool_names(body):
            if n_assistant == 0:
                return {
                    "tool_calls": [{"name": "mem_search", "arguments": {"queries": ["what do I like"], "top_k": 5}}]
                }
            if n_assistant == 1:
                call = {"name": "mem_view", "arguments": {"session_ids": task.needle_session_ids}}
                return f"<think>open the sessions</think><tool_call>{json.dumps(call)}</tool_call>"
            prefs = [p.model_dump() for p in task.preferences]
            return "<think>done</think><answer>" + json.dumps({"preferences": prefs}) + "</answer>"
        if n_assistant == 0:
            query = task.slots[0].product_type + " " + " ".join(p.value for p in task.preferences)
            return f"<tool_call>{json.dumps({'name': 'product_search', 'arguments': {'query': query, 'top_k': 50}})}</tool_call>"
        if n_assistant == 1:
            return f"<tool_call>{json.dumps({'name': 'product_view', 'arguments': {'product_ids': [ref]}})}</tool_call>"
        return f"<answer>It matches everything you said. @REC::{ref}@</answer>"

    return script


def test_llm_policy_episode_over_http(bench, product_search, embedder):
    task = bench.tasks[0]
    judge = RuleJudge(lambda ids: {p: product_search.get(p) for p in ids if product_search.get(p)})
    memory = MemoryStore.from_pool(bench.sessions, task.history, embedder)
    with ScriptedOpenAIServer(oracle_script(task)) as srv:
        backend = OpenAIBackend(model="scripted", base_url=srv.base_url, api_key="sk-test-secret", backoff_s=0.01)
        res = run_episode(task, backend, product_search, memory, judge, EvalSettings())
        bodies = srv.bodies
    assert res.error is None
    s1, s2 = res.stages
    # the server saw the stage tool sets and the observations of our tools
    assert _tool_names(bodies[0]) == {"mem_search", "mem_view"}
    assert _tool_names(bodies[3]) == {"product_search", "product_view"}
    assert bodies[1]["messages"][-1]["role"] == "tool"
    assert bodies[1]["messages"][-2]["tool_calls"][0]["function"]["name"] == "mem_search"
    # tool-wise reward: mem_view of exactly the gold sessions scores 1 (Eq. 8)
    assert s1.reward.per_tool_call[1] == pytest.approx(1.0)
    assert s2.reward.per_tool_call[1] == pytest.approx(1.0)  # product_view of the reference (Eq. 9)
    assert res.acc == pytest.approx(1.0) and res.succ
    assert s1.reward.components["R1"] == pytest.approx(1.0)
    assert s2.reward.components["R2"] == pytest.approx(1.0)
    assert s2.trajectory.steps[0].prompt_tokens is not None  # token counts reach the trajectory
    assert "sk-test-secret" not in res.model_dump_json()


def test_cli_eval_openai_backend_resumes_and_writes_report(bench, catalog_index_dir, tmp_path):
    bench_dir = write_benchmark(bench, tmp_path / "bench")
    runner = CliRunner()

    def script(body):  # answers without looking: empty preferences, then the first search hit
        n_assistant = sum(m["role"] == "assistant" for m in body["messages"])
        if "mem_search" in _tool_names(body):
            return '<answer>{"preferences": []}</answer>'
        if n_assistant == 0:
            return '<tool_call>{"name": "product_search", "arguments": {"query": "cotton shirt"}}</tool_call>'
        first = _last_tool_json(body)["results"][0]["product_id"]
        return f"<answer>@REC::{first}@</answer>"

    args = [
        "eval",
        "--bench",
        str(bench_dir),
        "--name",
        "r1",
        "--backend",
        "openai",
        "--model",
        "m",
        "--index-dir",
        str(catalog_index_dir),
        "--runs-dir",
        str(tmp_path / "runs"),
    ]
    with ScriptedOpenAIServer(script) as srv:
        out = runner.invoke(app, args + ["--base-url", srv.base_url])
        assert out.exit_code == 0, out.output
        n_requests = len(srv.bodies)
        assert n_requests == 3 * 3
        again = runner.invoke(app, args + ["--base-url", srv.base_url])  # resume: nothing left to do
        assert again.exit_code == 0, again.output
        assert len(srv.bodies) == n_requests
    run = tmp_path / "runs" / "r1"
    lines = (run / "results.jsonl").read_text().splitlines()
    assert len(lines) == 3 and len({json.loads(x)["task_id"] for x in lines}) == 3
    report = (run / "report.md").read_text()
    assert "openai:m" in report and "| **all** | 3 |" in report
    assert "reference policy" not in report  # only the baseline is labelled as a baseline


def test_cli_errors_are_messages_not_tracebacks(tmp_path, catalog_index_dir):
    runner = CliRunner()
    out = runner.invoke(app, ["build-index", "--data-dir", str(tmp_path / "missing")])
    assert out.exit_code == 2 and "does not exist" in out.output
    out = runner.invoke(app, ["eval", "--bench", str(tmp_path / "nobench"), "--name", "x"])
    assert out.exit_code == 2 and "manifest.json" in out.output
    broken = tmp_path / "broken-index"
    broken.mkdir()
    (broken / "manifest.json").write_text("{not json")
    out = runner.invoke(app, ["build-index", "--index-dir", str(broken)])
    assert out.exit_code == 2 and "Traceback" not in out.output
    assert "index" in out.output.lower()
