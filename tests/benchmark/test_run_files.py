"""The evaluation runner's results file under failure: an exception inside one episode, a result
that cannot be read back, an endpoint considered down, unreadable lines, a missing or corrupt run
identity, a second writer, and result lines that do not belong to the run.

The runner, environment, judge and rewards are the real ones. The policy answers every stage at
once (no tool call), so no product index or embedding model is needed and the tests are fast; the
memory store is a real, empty :class:`MemoryStore`.
"""

from __future__ import annotations

import json
import logging
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from shopping_companion.benchmark.evaluate import (
    EvalSettings,
    RunIdentityError,
    RunLockedError,
    errors_log_path,
    identity_path,
    run_evaluation,
)
from shopping_companion.benchmark.report import (
    error_kind,
    errors_by_kind,
    left_out_results,
    read_results,
    result_key,
    scan_results,
    summarize,
    write_parquet,
)
from shopping_companion.envs.env import EnvConfig
from shopping_companion.judges.rule import RuleJudge
from shopping_companion.llm.base import AssistantMessage, CircuitOpenError
from shopping_companion.memory.embedder import Embedder
from shopping_companion.memory.store import MemoryStore
from shopping_companion.rewards.total import compute_reward
from shopping_companion.types import Preference, ProductSlot, RewardBreakdown, SessionRef, Task

REPO = Path(__file__).resolve().parents[2]


def make_tasks(n: int = 4) -> list[Task]:
    return [
        Task(
            task_id=f"rf-{i:03d}",
            instruction=f"I need a shirt number {i}.",
            user_id=f"u{i}",
            history=[SessionRef(session_id=f"s{i}", date="2024-01-01")],
            needle_session_ids=[f"s{i}"],
            preferences=[Preference(attribute="colour", value="blue")],
            slots=[ProductSlot(product_type="shirt", reference_product_id=f"cat:{i}")],
        )
        for i in range(n)
    ]


class AnswerAtOnce:
    """A policy that answers each stage in its first turn. ``circuit_on``: task ids whose first
    request raises :class:`CircuitOpenError` (the endpoint is considered down)."""

    name = "answer-at-once"

    def __init__(self, circuit_on: tuple[str, ...] = ()) -> None:
        self.circuit_on = set(circuit_on)
        self.calls = 0

    def chat(self, messages, tools=None, sampling=None):
        self.calls += 1
        text = json.dumps(messages)
        for tid in self.circuit_on:
            if f"shirt number {tid.split('-')[1].lstrip('0') or '0'}." in text:
                raise CircuitOpenError("5 consecutive connection failures to http://127.0.0.1:9/v1")
        names = {t["function"]["name"] for t in tools or []}
        if "mem_search" in names:
            return AssistantMessage(
                content='<answer>{"preferences": [{"attribute": "colour", "value": "blue", '
                '"slot": 0, "evidence": "s0"}]}</answer>'
            )
        return AssistantMessage(content="<answer>Nothing fits, sorry.</answer>")


@pytest.fixture(scope="module")
def embedder(tmp_path_factory):
    return Embedder(cache_path=tmp_path_factory.mktemp("emb") / "cache.sqlite")


@pytest.fixture()
def kit(embedder):
    def make_memory(task):
        return MemoryStore([], embedder, embeddings=np.zeros((0, 384), dtype=np.float32))

    judge = RuleJudge(lambda ids: {})
    return make_memory, judge


def reward_failing_on(task_ids, exc=None, nan=False):
    def reward(task, traj, verdict):
        if task.task_id in task_ids:
            if nan:
                return RewardBreakdown(total=math.nan, components={"stage": float(traj.stage)})
            raise exc or RuntimeError(f"reward exploded on {task.task_id}")
        return compute_reward(task, traj, verdict)

    return reward


def run(tasks, path, kit, policy=None, **kw):
    make_memory, judge = kit
    settings = kw.pop("settings", None) or EvalSettings(env=EnvConfig(max_turns=3))
    return run_evaluation(
        tasks, policy or AnswerAtOnce(), None, make_memory, judge, path, settings, progress=False, **kw
    )


def test_an_exception_inside_one_episode_is_recorded_logged_and_not_retried_forever(kit, tmp_path):
    tasks = make_tasks(4)
    path = tmp_path / "results.jsonl"
    bad = tasks[2].task_id
    settings = EvalSettings(env=EnvConfig(max_turns=3), reward_fn=reward_failing_on({bad}))
    res = run(tasks, path, kit, settings=settings, concurrency=2)
    assert sorted(r.task_id for r in res) == sorted(t.task_id for t in tasks)  # the others finished
    by_id = {r.task_id: r for r in res}
    failed = by_id[bad]
    assert failed.error == f"episode error: RuntimeError: reward exploded on {bad}"
    assert error_kind(failed) == "episode" and failed.stages == [] and not failed.succ
    assert all(by_id[t.task_id].error is None for t in tasks if t.task_id != bad)
    # the traceback is in the log next to the results, never in the result line
    log = errors_log_path(path).read_text()
    assert f"task {bad} trial 0 strategy two_stage:none seed " in log
    assert "Traceback (most recent call last)" in log and "reward exploded" in log
    assert "Traceback" not in path.read_text()
    s = summarize(res)
    assert s["n_errors"] == 1 and s["errors_by_kind"] == {"episode": 1} and s["errors"][0]["kind"] == "episode"
    # a resume does not re-run it (not even with retry_errors) ...
    lines = path.read_text().splitlines()
    again = run(tasks, path, kit, settings=settings, retry_errors=True)
    assert path.read_text().splitlines() == lines and len(again) == 4
    # ... unless asked to; with the bug fixed it now succeeds and the newest result wins
    fixed = EvalSettings(env=EnvConfig(max_turns=3))
    again = run(tasks, path, kit, settings=fixed, retry_failed=True)
    assert len(path.read_text().splitlines()) == 5
    assert all(r.error is None for r in again) and len(again) == 4


def test_an_exception_before_the_episode_starts_is_recorded_too(kit, tmp_path):
    make_memory, judge = kit
    tasks = make_tasks(3)

    def flaky_memory(task):
        if task.task_id == tasks[0].task_id:
            raise KeyError("s0")
        return make_memory(task)

    path = tmp_path / "results.jsonl"
    res = run_evaluation(tasks, AnswerAtOnce(), None, flaky_memory, judge, path, EvalSettings(), progress=False)
    assert [r.error for r in res] == ["episode error: KeyError: 's0'", None, None]
    assert "KeyError" in errors_log_path(path).read_text()


def test_a_result_that_cannot_be_read_back_is_replaced_by_an_error_record(kit, tmp_path, caplog):
    # NaN serialises as null, which the reader refuses: before, the line was written and then
    # silently skipped on every read (the run counted one episode less and each resume added a line)
    tasks = make_tasks(3)
    bad = tasks[1].task_id
    path = tmp_path / "results.jsonl"
    settings = EvalSettings(env=EnvConfig(max_turns=3), reward_fn=reward_failing_on({bad}, nan=True))
    res = run(tasks, path, kit, settings=settings)
    scan = scan_results(path)
    assert scan.unreadable == [] and not scan.torn_tail and len(scan.results) == 3
    for line in path.read_text(encoding="utf-8").splitlines():
        json.loads(line)
    rec = {r.task_id: r for r in res}[bad]
    assert rec.error.startswith("episode error: result line could not be written: ") and rec.stages == []
    assert "result line could not be written" in errors_log_path(path).read_text()
    before = path.read_text()
    with caplog.at_level(logging.WARNING):
        run(tasks, path, kit, settings=settings)
    assert path.read_text() == before  # not re-run on resume


def test_circuit_open_stops_the_run_and_keeps_what_was_written(kit, tmp_path):
    tasks = make_tasks(5)
    path = tmp_path / "results.jsonl"
    policy = AnswerAtOnce(circuit_on=(tasks[2].task_id,))
    with pytest.raises(CircuitOpenError, match="consecutive connection failures"):
        run(tasks, path, kit, policy=policy, concurrency=1)
    written = read_results(path)
    assert [r.task_id for r in written] == [t.task_id for t in tasks[:2]] and all(r.error is None for r in written)
    assert not errors_log_path(path).exists()  # not an episode error
    calls = policy.calls
    assert calls <= 2 * 2 + 1  # nothing was started after the endpoint was declared down
    res = run(tasks, path, kit)  # the endpoint is back: the rerun resumes
    keys = [result_key(r) for r in read_results(path)]
    assert len(res) == 5 and len(keys) == len(set(keys)) == 5


def test_circuit_open_with_episodes_in_flight(kit, tmp_path):
    tasks = make_tasks(8)
    path = tmp_path / "results.jsonl"
    with pytest.raises(CircuitOpenError):
        run(tasks, path, kit, policy=AnswerAtOnce(circuit_on=(tasks[3].task_id,)), concurrency=4)
    scan = scan_results(path)
    assert scan.unreadable == [] and all(r.error is None for r in scan.results) and len(scan.results) < 8
    run(tasks, path, kit, concurrency=4)
    keys = [result_key(r) for r in read_results(path)]
    assert len(keys) == len(set(keys)) == 8


def test_unreadable_lines_are_reported_with_line_numbers_and_their_episodes_rerun(kit, tmp_path, caplog):
    tasks = make_tasks(3)
    path = tmp_path / "results.jsonl"
    run(tasks, path, kit)
    lines = path.read_text().splitlines()
    lines[1] = lines[1][:40]  # a complete line (it ends with a newline) that is not a result
    path.write_text("\n".join(lines) + "\n")
    scan = scan_results(path)
    assert [n for n, _ in scan.unreadable] == [2] and len(scan.results) == 2
    assert scan.describe_unreadable().startswith("1 line(s) (line numbers 2;")
    with caplog.at_level(logging.WARNING):
        assert len(read_results(path)) == 2
    assert "line numbers 2" in caplog.text  # never silently skipped
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        res = run(tasks, path, kit)
    assert "1 line(s) cannot be read back" in caplog.text and "line numbers 2" in caplog.text
    assert len(res) == 3 and all(r.error is None for r in res)
    assert len(path.read_text().splitlines()) == 4  # the lost episode ran again, once


@pytest.mark.parametrize("damage", ["missing", "corrupt", "not_an_object"])
def test_a_missing_or_corrupt_identity_beside_results_is_refused_unless_forced(kit, tmp_path, damage):
    tasks = make_tasks(2)
    path = tmp_path / "results.jsonl"
    ident = {"policy": "answer-at-once", "seed": 0}
    run(tasks[:1], path, kit, identity=ident)
    ip = identity_path(path)
    assert json.loads(ip.read_text()) == ident
    if damage == "missing":
        ip.unlink()
    elif damage == "corrupt":
        ip.write_text('{"policy": "answer-at')
    else:
        ip.write_text("[1, 2]")
    before = path.read_text()
    word = "missing" if damage == "missing" else "corrupt"
    with pytest.raises(RunIdentityError, match=f"results.identity.json is {word}.*--force"):
        run(tasks, path, kit, identity={"policy": "another", "seed": 1})
    assert path.read_text() == before
    res = run(tasks, path, kit, identity={"policy": "another", "seed": 1}, force=True)
    assert len(res) == 2 and json.loads(ip.read_text()) == {"policy": "another", "seed": 1}
    # force never overrides a readable, different identity
    with pytest.raises(RunIdentityError, match="different run configuration"):
        run(tasks, path, kit, identity={"policy": "third", "seed": 1}, force=True)


def test_an_identity_is_simply_written_when_there_are_no_results_yet(kit, tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text("")
    identity_path(path).write_text("garbage")
    res = run(make_tasks(1), path, kit, identity={"policy": "p"})
    assert len(res) == 1 and json.loads(identity_path(path).read_text()) == {"policy": "p"}


HOLDER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from shopping_companion.runs import exclusive
    with exclusive(Path(sys.argv[1])):
        print("locked", flush=True)
        sys.stdin.readline()
""")


def test_the_lock_is_on_the_results_file_itself_and_a_second_writer_is_refused(kit, tmp_path):
    tasks = make_tasks(2)
    path = tmp_path / "results.jsonl"
    run(tasks[:1], path, kit, identity={"policy": "p"})
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path)], cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        # deleting every file next to the results does not let a second writer in
        for p in tmp_path.iterdir():
            if p != path:
                p.unlink()
        before = path.read_text()
        with pytest.raises(RunLockedError, match="another running evaluation"):
            run(tasks, path, kit)
        assert path.read_text() == before
    finally:
        holder.stdin.write("\n")
        holder.stdin.flush()
        holder.wait(timeout=30)
    assert len(run(tasks, path, kit)) == 2  # the first writer is gone


def test_results_of_other_tasks_and_strategies_are_reported_and_left_out(kit, tmp_path):
    tasks = make_tasks(4)
    path = tmp_path / "results.jsonl"
    run(tasks, path, kit, strategies="two_stage:none,one_stage")
    res = run(tasks[:2], path, kit, strategies="two_stage:none")
    assert sorted(result_key(r) for r in res) == sorted((t.task_id, 0, "two_stage", "none") for t in tasks[:2])
    requested = {(t.task_id, 0, "two_stage", "none") for t in tasks[:2]}
    out = left_out_results(read_results(path), [t.task_id for t in tasks[:3]], requested)
    assert out["not_in_benchmark"] == {"count": 2, "examples": ["rf-003"]}  # both strategies of rf-003
    assert out["not_requested"]["count"] == 4 and sorted(out["not_requested"]["examples"]) == [
        "rf-000",
        "rf-001",
        "rf-002",
    ]


def test_parquet_score_columns_are_null_for_errored_episodes(kit, tmp_path):
    import pandas as pd

    tasks = make_tasks(3)
    bad = tasks[0].task_id
    settings = EvalSettings(env=EnvConfig(max_turns=3), reward_fn=reward_failing_on({bad}))
    res = run(tasks, tmp_path / "results.jsonl", kit, settings=settings)
    assert errors_by_kind(res) == {"episode": 1}
    ep, st = write_parquet(res, tmp_path)
    df = pd.read_parquet(ep).set_index("task_id")
    assert df.loc[bad, "error_kind"] == "episode" and not df.loc[bad, "scored"]
    assert pd.isna(df.loc[bad, "acc"]) and pd.isna(df.loc[bad, "succ"])
    ok = df.drop(index=bad)
    assert ok["succ"].notna().all() and ok["acc"].notna().all() and ok["scored"].all()
    assert ok["stage2_reward_total"].notna().all()
