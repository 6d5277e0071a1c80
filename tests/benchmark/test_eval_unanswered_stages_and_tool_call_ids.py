"""Issue 32, item 5: two defects from public bug reports, each reproduced through `shopcomp eval`
(the CLI, in process) against scripted OpenAI-compatible servers on 127.0.0.1, with a real
benchmark, BM25 index, memory store and environment.

1. ``--judge llm``: a stage that ended with no final answer was still sent to the LLM judge and its
   grade counted (R_z 0.25 / 0.2 observed). Here the local judge is generous (full marks for
   whatever it is shown), so before the fix the unanswered stage 1 scored R1 = 1, Acc = 1 and was
   kept by `sft collect --keep stage`; now it scores 0 everywhere, says why, and costs no request.
2. Two parallel tool calls with the same id (and empty, missing or colliding ids, and a text call
   mixed with structured calls): the environment renamed the second tool message but the
   assistant message kept the duplicates, so an OpenAI-strict server refused the next request and
   the episode was lost. The policy server here checks ids as OpenAI does
   (``ScriptedOpenAIServer(strict_tool_ids=True)``).
"""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from shopping_companion.benchmark.report import read_results
from shopping_companion.benchmark.synth import write_benchmark
from shopping_companion.cli import app
from shopping_companion.judges.base import NO_ANSWER
from shopping_companion.sft.collect import read_kept
from tests.openai_server import ScriptedOpenAIServer, tool_id_problem
from tests.scripted_policy import _call, _tool_json, find_task, policy_script

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def bench(synth_bench):
    return synth_bench(2, seed=32, sessions_per_user=30)


@pytest.fixture(scope="module")
def bench_dir(bench, tmp_path_factory):
    return write_benchmark(bench, tmp_path_factory.mktemp("issue32") / "bench")


def _stage(body: dict) -> int:
    return 1 if "mem_search" in {t["function"]["name"] for t in body.get("tools") or []} else 2


def _turn(body: dict) -> int:
    return sum(m["role"] == "assistant" for m in body["messages"])


def _common(srv: ScriptedOpenAIServer, index_dir) -> list[str]:
    return [
        "--backend",
        "openai",
        "--model",
        "m",
        "--base-url",
        srv.base_url,
        "--max-retries",
        "0",
        "--index-dir",
        str(index_dir),
        "--concurrency",
        "1",
        "--limit",
        "1",
    ]


# --------------------------------------------------------------------------- 1. no final answer


def generous_judge(body: dict) -> str:
    """A local LLM judge that gives full marks to whatever it is shown (the worst case of the bug:
    the issue saw partial grades)."""
    prompt = body["messages"][-1]["content"]
    F = int(re.search(r"Annotated wanted features \(F = (\d+)\)", prompt).group(1))
    n = re.search(r"\(N = (\d+)\)", prompt)
    N = int(n.group(1)) if n else 1
    addon = "add-on deal" in prompt.split("## Shopper's request")[0]
    common = {"matched": list(range(1, F + 1)), "reasons": ["every feature is there"]}
    if "\nStage 1 of a shopping task" in prompt:
        reply = {"q1": 1, "m1": F, "h1": 0, **({"c1": N} if addon else {}), **common}
    else:
        reply = {"p2": 1, "q2": 1, "m2": F, **({"n2": N, "u2": 1} if addon else {}), **common}
    return json.dumps(reply)


def test_llm_judge_a_stage_without_final_answer_scores_zero_and_costs_no_request(
    bench, bench_dir, catalog_index_dir, tmp_path
):
    answered = policy_script(bench.tasks, think=False)

    def policy(body: dict):
        if _stage(body) == 1:  # searches every turn, never answers: stage 1 ends at max_turns
            task = find_task(body, bench.tasks)
            return _call("mem_search", {"queries": [f"{task.instruction} ({_turn(body)})"], "top_k": 5})
        return answered(body)

    runner = CliRunner()
    with ScriptedOpenAIServer(policy) as srv, ScriptedOpenAIServer(generous_judge, model="judge") as judge:
        common = _common(srv, catalog_index_dir) + ["--max-turns", "3", "--judge", "llm", "--judge-model", "judge"]
        # every answered stage to the LLM judge (the cascade would keep what the rule judge is sure of)
        common += ["--judge-base-url", judge.base_url, "--no-judge-cascade"]
        out = runner.invoke(
            app, ["eval", "--bench", str(bench_dir), "--name", "noans", "--runs-dir", str(tmp_path / "runs")] + common
        )
        assert out.exit_code == 0, out.output
        prompts = [b["messages"][-1]["content"] for b in judge.bodies]
        col = runner.invoke(
            app,
            ["sft", "collect", "--bench", str(bench_dir), "--out", str(tmp_path / "col"), "--keep", "stage"] + common,
        )
        assert col.exit_code == 0, col.output

    # the judge was never asked about the unanswered stage 1 (only stage 2, if at all)
    assert all("\nStage 2 of a shopping task" in p for p in prompts), [p[:120] for p in prompts]
    (res,) = read_results(tmp_path / "runs" / "noans" / "results.jsonl")
    assert res.error is None
    s1, s2 = res.stages
    assert s1.trajectory.final_answer is None and s1.trajectory.termination == "max_turns"
    v1 = s1.verdict
    assert v1.no_answer and not v1.failed and not v1.success
    assert (v1.q1, v1.m1, v1.h1) == (0, 0, 0) and v1.matched == []
    assert v1.reasons[0].startswith(NO_ANSWER) and "max_turns" in v1.reasons[0]
    assert s1.reward.components["R_z"] == 0.0 and s1.reward.components["R1"] == 0.0
    assert res.acc == 0.0
    # the answered stage is judged as before (by the LLM judge: its full marks, after the post-checks)
    assert s2.trajectory.final_answer and not s2.verdict.no_answer and not s2.verdict.failed
    if s2.verdict.judge == "llm:judge":  # the plain LLM judge (not a rule-first cascade)
        assert len(prompts) == 1 and s2.verdict.m2 == s2.verdict.F
    # SFT rejection sampling sees the same verdict: the unanswered stage is never kept
    kept = read_kept(tmp_path / "col")
    assert all(k.stage == 2 and k.trajectory.final_answer for k in kept)
    (roll,) = read_results(tmp_path / "col" / "rollouts.jsonl")
    assert roll.stages[0].verdict.no_answer and roll.stages[0].reward.components["R_z"] == 0.0


# --------------------------------------------------------------------------- 2. tool-call ids


def test_duplicate_empty_and_mixed_tool_call_ids_pass_an_openai_strict_server(
    bench, bench_dir, catalog_index_dir, tmp_path
):
    def policy(body: dict):
        task = find_task(body, bench.tasks)
        k, q = _turn(body), task.instruction
        if _stage(body) == 1:
            if k == 0:  # two parallel calls with the same id
                return {
                    "tool_calls": [
                        {"id": "call_dup", "name": "mem_search", "arguments": {"queries": [q], "top_k": 5}},
                        {"id": "call_dup", "name": "mem_search", "arguments": {"queries": [q + " likes"], "top_k": 5}},
                    ]
                }
            if k == 1:  # an empty id and no id at all
                hits = _tool_json(body, "mem_search").get("results", [])
                ids = list(dict.fromkeys(h["session_id"] for h in hits))[:1] or ["none"]
                return {
                    "tool_calls": [
                        {"id": "", "name": "mem_search", "arguments": {"queries": [q + " dislikes"], "top_k": 5}},
                        {"id": None, "name": "mem_view", "arguments": {"session_ids": ids}},
                    ]
                }
            if k == 2:  # a text call mixed with a structured call whose server id is the text call's id
                return {
                    "content": _call("mem_search", {"queries": [q + " wants"], "top_k": 3}),
                    "tool_calls": [
                        {"id": "s1t2_1", "name": "mem_search", "arguments": {"queries": [q + " needs"], "top_k": 3}}
                    ],
                }
            prefs = [p.model_dump() for p in task.preferences]
            return "<answer>" + json.dumps({"preferences": prefs}) + "</answer>"
        if k == 0:
            return {
                "tool_calls": [
                    {"id": "call_dup", "name": "product_search", "arguments": {"query": q, "top_k": 10}},
                    {
                        "id": "call_dup",
                        "name": "product_search",
                        "arguments": {"query": task.slots[0].product_type, "top_k": 10},
                    },
                ]
            }
        ref = task.slots[0].reference_product_id

        def search(cid, words: str) -> dict:
            return {"id": cid, "name": "product_search", "arguments": {"query": f"{q} {words}", "top_k": 5}}

        if k == 1:  # a structured call and a malformed text block
            view = {"id": "v", "name": "product_view", "arguments": {"product_ids": [ref]}}
            return {"content": "<tool_call>{not json}</tool_call>", "tool_calls": [view]}
        if k == 2:  # over max_calls_per_turn (2): 3 structured calls with one id, 2 text calls
            texts = _call("product_search", {"query": f"{q} cheap"}) + _call("product_search", {"query": f"{q} new"})
            return {"content": texts, "tool_calls": [search("o", "red"), search("o", "blue"), search("o", "green")]}
        if k == 3:  # cut off at the token limit: nothing runs, every structured call is answered
            return {"tool_calls": [search("t", "slim"), search("t", "wide")], "finish_reason": "length"}
        return f"<answer>@REC::{ref}@</answer>"

    runner = CliRunner()
    with ScriptedOpenAIServer(policy, strict_tool_ids=True) as srv:
        out = runner.invoke(
            app,
            ["eval", "--bench", str(bench_dir), "--name", "ids", "--runs-dir", str(tmp_path / "runs")]
            + _common(srv, catalog_index_dir)
            + ["--set", "env.max_calls_per_turn=2"],
        )
        assert srv.rejected == [], srv.rejected
        assert out.exit_code == 0, out.output
        assert len(srv.bodies) == 9  # 4 turns of stage 1, 5 of stage 2: nothing refused, nothing retried

    (res,) = read_results(tmp_path / "runs" / "ids" / "results.jsonl")
    assert res.error is None
    assert [s.trajectory.termination for s in res.stages] == ["answered", "answered"]
    for s in res.stages:
        msgs = [m.model_dump(exclude_none=True) for m in s.trajectory.messages]
        assert tool_id_problem(msgs) is None
        for st in s.trajectory.steps:
            ids = [r.call_id for r in st.tool_results]
            assert len(set(ids)) == len(ids), ids
    steps1, steps2 = res.stages[0].trajectory.steps, res.stages[1].trajectory.steps
    # every call of stage 1 and of stage 2's first turn ran under its own id
    assert all(r.error is None for st in steps1[:3] + steps2[:1] for r in st.tool_results)
    assert [r.call_id for r in steps2[0].tool_results] == ["call_dup", "call_dup_1"]
    assert [r.call_id for r in steps2[1].tool_results] == ["s2t1-invalid0", "v"]
    assert [r.call_id for r in steps2[2].tool_results] == ["o", "o_1", "o_2", "s2t2_3"]  # 2 run, the rest refused
    assert [r.call_id for r in steps2[3].tool_results] == ["t", "t_1"]
    assert all(r.error for st in steps2[3:4] for r in st.tool_results)
    calls2 = [m.tool_calls for m in [m for m in res.stages[1].trajectory.messages if m.role == "assistant"][:4]]
    assert [[c["id"] for c in cs] for cs in calls2] == [
        ["call_dup", "call_dup_1"],
        ["v", "s2t1-invalid0"],
        ["o", "o_1", "o_2", "s2t2_3"],
        ["t", "t_1"],
    ]
    assert [r.call_id for r in steps1[0].tool_results] == ["call_dup", "call_dup_1"]
    assert [r.call_id for r in steps1[1].tool_results] == ["s1t1_0", "s1t1_1"]
    assert [r.call_id for r in steps1[2].tool_results] == ["s1t2_1", "s1t2_1_1"]
    mixed = [m for m in res.stages[0].trajectory.messages if m.role == "assistant"][2]
    assert [c["function"]["name"] for c in mixed.tool_calls] == ["mem_search", "mem_search"]
    assert [c["id"] for c in mixed.tool_calls] == ["s1t2_1", "s1t2_1_1"]
