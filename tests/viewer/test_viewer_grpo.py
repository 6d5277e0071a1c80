"""GRPO validation dumps (run kind ``grpo_val``) in the viewer, from dump lines made the way verl
writes them (tests/fixtures/viewer/grpo_dump.py): our episodes' chats rendered with the tests'
tiny tokenizer and RL chat template, decoded with ``skip_special_tokens`` as verl does, with our
rows' ground truth and our reward function's keys. The task comes from ``gts``; the multi-turn
output splits into the turns, tool calls and results the episode had, parsed by the
environment's own parser."""

from __future__ import annotations

import json

import pytest
from starlette.testclient import TestClient

from benchmarks.viewer_synth import write_synthetic_run
from shopping_companion.benchmark.report import read_results
from shopping_companion.envs.parsing import extract_rec_ids, format_flags, parse_action
from shopping_companion.types import Task
from shopping_companion.viewer.app import create_app
from shopping_companion.viewer.store import RunCatalog
from shopping_companion.viewer.verl_dumps import grpo_trajectory, observed_ids, split_dump_output
from tests.fixtures.viewer.grpo_dump import dump_entry, tiny_tokenizer, write_dump


@pytest.fixture(scope="module")
def dump(tmp_path_factory):
    """``(root, results, tasks)``: ``root/val/3.jsonl`` holds one dump line per stage of 3
    synthetic episodes (6 lines, stage 1 then stage 2), ``root/val/config.yaml`` names their
    benchmark; ``root/bare/3.jsonl`` is the same dump without it."""
    root = tmp_path_factory.mktemp("grpo")
    write_synthetic_run(root / "ev", 3, seed=1, turns=4, result_chars=300)
    tasks = {
        t.task_id: t
        for t in (Task.model_validate_json(x) for x in (root / "ev/bench/tasks.jsonl").read_text().split("\n") if x)
    }
    results = [r for r in read_results(root / "ev/results.jsonl") if r.stages]
    tok = tiny_tokenizer(root / "tok")
    entries = [dump_entry(s, tasks[r.task_id], tok, step=3) for r in results for s in r.stages]
    write_dump(root / "val/3.jsonl", entries)
    (root / "val/config.yaml").write_text(f"bench:\n  path: {root / 'ev/bench'}\n")
    write_dump(root / "bare/3.jsonl", entries)
    return root, results, tasks


def _ids(res):
    """The ids the real tool box records for ``res``: the synthetic run's ``mem_search`` payloads may
    repeat a (session, turn) item, which the real tool lists once (one id per distinct item)."""
    if res.name != "mem_search" or res.error:
        return res.returned_ids
    hits = json.loads(res.content)["results"]
    return [sid for sid, _ in dict.fromkeys((h["session_id"], h["turn_index"]) for h in hits)]


def _stages(results):
    return [(r, s) for r in results for s in r.stages]


def test_the_dump_line_looks_like_verls(dump):
    root, results, _ = dump
    line = json.loads((root / "val/3.jsonl").read_text().split("\n")[1])
    assert {"input", "output", "gts", "score", "step", "reward", "R_z", "R_tool", "stage", "num_turns"} <= set(line)
    assert "<|im_start|>" not in line["output"] and "\nuser\n<tool_response>\n" in line["output"]
    assert isinstance(line["gts"], str) and json.loads(line["gts"])["task_id"] == results[0].task_id
    assert "task_id" not in line and "shopcomp_messages" not in line


def test_task_linked_from_gts_and_turns_calls_results_recovered(dump):
    root, results, tasks = dump
    cat = RunCatalog([root / "val"])
    assert [s.kind for s in cat.runs()] == ["grpo_val"]
    idx = cat.get(cat.run_ids()[0])
    page = idx.query(limit=50)
    pairs = _stages(results)
    assert page.total == len(pairs)
    marks: set[str] = set()
    for row, (r, st) in zip(page.rows, pairs):
        orig = st.trajectory
        task = tasks[r.task_id]
        assert (row.status, row.task_id, row.stage) == ("ok", r.task_id, orig.stage)
        assert row.instruction == task.instruction and row.source and row.category
        v = idx.episode(row.line)
        assert v.task == task and v.gold == task.preferences
        (sv,) = v.stages
        assert len(sv.turns) == len(orig.steps) == row.turns
        for turn, step in zip(sv.turns, orig.steps):
            assert [c.name for c in turn.calls] == [c.name for c in step.tool_calls]
            assert [c.arguments for c in turn.calls] == [c.arguments for c in step.tool_calls]
            assert [[i for i, _ in c.returned] for c in turn.calls] == [_ids(t) for t in step.tool_results]
            assert [c.content for c in turn.calls] == [t.content for t in step.tool_results]
            assert [c.error is not None for c in turn.calls] == [t.error is not None for t in step.tool_results]
            # the environment's parser on the turn's text: the same (here: no) format errors
            assert turn.format_errors == format_flags(parse_action(step.assistant_text)).errors
            marks.update(m for c in turn.calls for _, m in c.returned)
        assert sv.final_answer == orig.final_answer
        # what the environment derives from the answer (the synthetic run's own list may differ)
        recs = extract_rec_ids(orig.final_answer)[0] if orig.stage == 2 and orig.final_answer else []
        assert [c.product_id for c in sv.recommended] == list(dict.fromkeys(recs))
        assert sv.reward.total == pytest.approx(st.reward.total)
        assert sv.reward.components["R_tool"] == pytest.approx(st.reward.components["R_tool"])
    assert "unknown" not in marks and {"needle", "reference"} & marks


def test_without_the_benchmark_the_gold_comes_from_gts(dump):
    root, results, tasks = dump
    cat = RunCatalog([root / "bare"])
    idx = cat.get(cat.run_ids()[0])
    row = idx.row(2)
    assert row.task_id == results[0].task_id and row.instruction == results[0].stages[1].trajectory.messages[1].content
    v = idx.episode(2)
    assert v.task is None and v.gold == tasks[row.task_id].preferences
    assert {m for t in v.stages[0].turns for c in t.calls for _, m in c.returned} <= {"unknown"}


def test_split_merged_tool_responses_and_feedback():
    """Qwen3's template puts consecutive tool results in one user turn; a turn without a valid
    call gets the environment's plain feedback message."""
    out = (
        '<think>a</think>\n<tool_call>{"name": "product_search", "arguments": {"query": "x"}}</tool_call>\n'
        '<tool_call>{"name": "product_view", "arguments": {"product_ids": ["p:1"]}}</tool_call>\n'
        'user\n<tool_response>\n{"results": [{"product_id": "p:1"}, {"product_id": "p:2"}], "n_results": 2}\n'
        '</tool_response>\n<tool_response>\n{"products": [{"product_id": "p:1", "title": "T"}]}\n</tool_response>\n'
        "assistant\n<think>b</think>\noops no call\nuser\nYour last turn had no tool call.\nassistant\n"
        "<think>c</think>\n<answer>@REC::p:1@</answer>"
    )
    parts = split_dump_output(out)
    assert [r for r, _ in parts] == ["assistant", "observation", "assistant", "observation", "assistant"]
    traj, reward = grpo_trajectory({"output": out, "input": "u", "stage": 2.0, "score": 1.0})
    assert len(traj.steps) == 3 and reward is not None and reward.total == 1.0
    first = traj.steps[0]
    assert [t.returned_ids for t in first.tool_results] == [["p:1", "p:2"], ["p:1"]]
    assert [t.call_id for t in first.tool_results] == [c.call_id for c in first.tool_calls]
    assert traj.steps[1].tool_results == [] and traj.messages[-2].content == "Your last turn had no tool call."
    assert traj.recommended_ids == ["p:1"] and traj.termination == "answered"
    assert all(s.format.think_ok for s in traj.steps)  # one think block per turn, not 3 in one


def test_observed_ids_of_errors_and_cut_observations():
    assert observed_ids("mem_view", '{"error": "mem_view: unknown session ids"}') == (
        [],
        "mem_view: unknown session ids",
    )
    hits = (
        '{"results": [{"session_id": "s1", "turn_index": 0}, {"session_id": "s1", "turn_index": 2}, {"session_id": "s2"'
    )
    assert observed_ids("mem_search", hits + "\n…[observation truncated: 90 more characters not shown]") == (
        ["s1", "s1", "s2"],
        None,
    )
    full = '{"results": [{"session_id": "s1", "turn_index": 0}, {"session_id": "s1", "turn_index": 0}]}'
    assert observed_ids("mem_search", full) == (["s1"], None)


def test_grpo_episode_page_renders(dump):
    root, results, _ = dump
    with TestClient(create_app(RunCatalog([root / "val"])), base_url="http://127.0.0.1") as c:
        r = c.get("/runs/val/3.jsonl/episodes/2")
        assert r.status_code == 200, r.text[:500]
        assert results[0].task_id in r.text and "product_search" in r.text
        assert "Hide gold preferences" in r.text
        assert "could not be read as an episode" not in r.text  # it is one: no raw-line box
        runs = c.get("/")
        assert runs.status_code == 200 and "grpo_val" in runs.text
