"""GRPO rows (one per (task, stage)) and the verl reward hook, without verl."""

from __future__ import annotations

import json

import pytest

from shopping_companion.trainers.reward import LOGGED_KEYS, compute_score
from shopping_companion.trainers.rows import build_rows, write_parquet
from shopping_companion.types import RewardBreakdown
from tests.task_support import shoe_task


def _sessions_of(tasks) -> str:
    """One small session per session id the tasks reference (load_benchmark refuses missing ones)."""
    from shopping_companion.types import Session, Turn

    ids = sorted({r.session_id for t in tasks for r in t.history})
    return "".join(
        Session(
            session_id=i, date="2024-01-01", turns=[Turn(role="user", content="I like black shoes.")]
        ).model_dump_json()
        + "\n"
        for i in ids
    )


_task = shoe_task


def test_one_row_per_task_and_stage_with_chat_prompts_and_task_reference(tmp_path):
    import pyarrow.parquet as pq

    tasks = [_task(i) for i in range(5)]
    rows = build_rows(tasks, benchmark="/b")
    assert len(rows) == 10  # 800 tasks -> 1,600 rows at paper scale
    assert [r["extra_info"]["index"] for r in rows] == list(range(10))
    assert [r["extra_info"]["stage"] for r in rows] == [1, 2] * 5
    r1, r2 = rows[0], rows[1]
    assert r1["agent_name"] == "shopping_companion"
    assert [m["role"] for m in r1["prompt"]] == ["system", "user"]
    assert "Shopping request: I need shoes number 0." in r1["prompt"][1]["content"]
    assert "memory" in r1["prompt"][0]["content"].lower()
    assert '"value": "Black"' in r2["prompt"][1]["content"]  # stage 2 opens with the gold preferences
    assert r1["extra_info"]["task_id"] == "t0" and r1["extra_info"]["benchmark"] == "/b"
    gt = json.loads(r1["reward_model"]["ground_truth"])
    assert gt["reference_product_ids"] == ["p:0"] and gt["needle_session_ids"] == ["s0"]
    back = pq.read_table(write_parquet(rows, tmp_path / "x.parquet")).to_pylist()
    assert back == rows


@pytest.mark.parametrize(
    "kw,field",
    [
        ({"stages": [3]}, "stages"),
        ({"stages": [1, 1]}, "stages"),
        ({"stage1": "oracle"}, "stage1"),
        ({"hint": "medium"}, "hint"),
    ],
)
def test_bad_options_name_the_field(kw, field):
    with pytest.raises(ValueError, match=field):
        build_rows([_task(0)], benchmark="/b", **kw)


def _breakdown(stage: int, r_z: float, r_tool: float, r_fmt: float) -> dict:
    comps = {
        "R_z": r_z,
        "R_tool": r_tool,
        "R_fmt": r_fmt,
        f"R{stage}": r_z,
        "f_ans": 1.0,
        "f_th": 1.0,
        "f_tc": 1.0,
        "f_rec": 1.0 if stage == 2 else 0.0,
        "tool_mem_mean": r_tool if stage == 1 else 0.0,
        "tool_prod_mean": r_tool if stage == 2 else 0.0,
        "n_tool_calls": 3.0,
        "success": 1.0,
        "stage": float(stage),
    }
    return RewardBreakdown(total=r_z + r_tool + r_fmt, components=comps, per_tool_call=[r_tool] * 3).model_dump()


def test_compute_score_returns_the_rubric_total_and_a_fixed_key_set():
    a = compute_score(
        "shopping_companion", "x", "{}", {"shopcomp_reward": _breakdown(1, 0.5, 0.25, 1.0), "num_turns": 7}
    )
    b = compute_score("shopping_companion", "x", "{}", {"shopcomp_reward": _breakdown(2, 0.8, 0.4, 0.75)})
    assert a["score"] == pytest.approx(1.75) and b["score"] == pytest.approx(1.95)
    assert set(a) == set(b) == {"score", "num_turns", *LOGGED_KEYS}  # verl stacks keys across a batch
    assert a["R_tool"] == 0.25 and a["tool_mem_mean"] == 0.25 and a["num_turns"] == 7
    # the outcome-only variant: R_tool logged, not scored
    c = compute_score(extra_info={"shopcomp_reward": _breakdown(2, 0.8, 0.4, 0.75)}, rubric="outcome_only")
    assert c["score"] == pytest.approx(0.8 + 0.75) and c["R_tool"] == 0.4


def test_compute_score_refuses_rows_not_played_by_our_agent_loop():
    with pytest.raises(ValueError, match="shopcomp_reward"):
        compute_score("gsm8k", "42", "42", {"index": 0})


def test_compute_score_keeps_a_judge_failure_visible():
    br = RewardBreakdown(total=0.0, components={"judge_failed": 1.0, "stage": 2.0}).model_dump()
    out = compute_score(extra_info={"shopcomp_reward": br}, rubric="paper")
    assert out["judge_failed"] == 1.0 and out["score"] == 0.0


def test_cli_prepare_writes_train_and_test_parquet(tmp_path):
    import pyarrow.parquet as pq
    from typer.testing import CliRunner

    from shopping_companion.cli.grpo import app

    bench = tmp_path / "bench"
    bench.mkdir()
    tasks = [_task(i, "train") for i in range(4)] + [_task(i, "test") for i in range(4, 5)]
    (bench / "tasks.jsonl").write_text("\n".join(t.model_dump_json() for t in tasks) + "\n")
    (bench / "sessions.jsonl").write_text(_sessions_of(tasks))
    (bench / "manifest.json").write_text("{}")
    res = CliRunner().invoke(app, ["prepare", "--bench", str(bench), "--out", str(tmp_path / "data")])
    assert res.exit_code == 0, res.output
    train = pq.read_table(tmp_path / "data" / "train.parquet").to_pylist()
    test = pq.read_table(tmp_path / "data" / "test.parquet").to_pylist()
    assert len(train) == 8 and len(test) == 2  # tasks x 2 stages
    assert {r["extra_info"]["split"] for r in train} == {"train"}
    assert train[0]["extra_info"]["benchmark"] == str(bench.resolve())
    bad = CliRunner().invoke(app, ["prepare", "--bench", str(bench), "--out", str(tmp_path / "d2"), "--hint", "x"])
    assert bad.exit_code == 2 and "hint" in bad.output
    # the deprecated --benchmark spelling still works (with a note) and writes the same rows
    old = CliRunner().invoke(app, ["prepare", "--benchmark", str(bench), "--out", str(tmp_path / "d3")])
    assert old.exit_code == 0, old.output
    assert "--benchmark is deprecated; use --bench" in " ".join(old.stderr.split())
    assert pq.read_table(tmp_path / "d3" / "train.parquet").to_pylist() == train
    missing = CliRunner().invoke(app, ["prepare", "--out", str(tmp_path / "d4")])
    assert missing.exit_code == 2 and "--bench is required" in missing.output
    helptext = CliRunner().invoke(app, ["prepare", "-h"], terminal_width=80).output
    assert "--bench DIR" in helptext and "--benchmark" not in helptext


def test_cli_prepare_failure_leaves_an_existing_output_directory_untouched(tmp_path):
    """A benchmark without test tasks: nothing is written, so a reused --out directory never ends
    up with a new train.parquet next to the previous run's test.parquet and prepare.json."""
    from typer.testing import CliRunner

    from shopping_companion.cli.grpo import app

    def bench(name, tasks):
        d = tmp_path / name
        d.mkdir()
        (d / "tasks.jsonl").write_text("\n".join(t.model_dump_json() for t in tasks) + "\n")
        (d / "sessions.jsonl").write_text(_sessions_of(tasks))
        (d / "manifest.json").write_text("{}")
        return d

    good = bench("good", [_task(0, "train"), _task(1, "test")])
    train_only = bench("train_only", [_task(i, "train") for i in range(3)])
    out = tmp_path / "data"
    assert CliRunner().invoke(app, ["prepare", "--bench", str(good), "--out", str(out)]).exit_code == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    res = CliRunner().invoke(app, ["prepare", "--bench", str(train_only), "--out", str(out)])
    assert res.exit_code == 2 and "no test tasks" in res.output
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    fresh = tmp_path / "fresh"
    assert CliRunner().invoke(app, ["prepare", "--bench", str(train_only), "--out", str(fresh)]).exit_code == 2
    assert not fresh.exists() or not any(fresh.iterdir())


def test_trl_rows_train_only_the_named_tasks_in_their_order():
    """``rows.task_ids`` (the pipeline's select phase) picks the split's tasks by id, in the given
    order, before ``limit``; an id the split lacks is refused naming the field."""
    from types import SimpleNamespace

    from shopping_companion.errors import DataError
    from shopping_companion.trainers.trl_train import TrlGrpoConfig, _task_rows

    tasks = [_task(i) for i in range(4)] + [_task(9, split="test")]
    resources = SimpleNamespace(tasks={t.task_id: t for t in tasks})

    def rows_of(rows: dict) -> tuple[list[str], list[tuple[str, int]]]:
        cfg = TrlGrpoConfig.model_validate({"model": "m", "bench": "/b", "rows": rows})
        chosen, dataset = _task_rows(cfg, resources, "/b")
        return [t.task_id for t in chosen], [(r["task_id"], r["stage"]) for r in dataset]

    ids, dataset = rows_of({"task_ids": ["t3", "t1", "t2"], "limit": 2})
    assert ids == ["t3", "t1"]
    assert dataset == [("t3", 1), ("t3", 2), ("t1", 1), ("t1", 2)]
    assert rows_of({"limit": 2})[0] == ["t0", "t1"]  # without task_ids: benchmark order
    with pytest.raises(DataError, match=r"rows\.task_ids: \['t9'\] are not 'train' tasks"):
        rows_of({"task_ids": ["t1", "t9"]})
