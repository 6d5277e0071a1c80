"""Metrics, error taxonomy, report and parquet over hand-built episode records (no model, no index).

The records are real :class:`EpisodeResult` objects shaped like the environment's output (tool
observations are the JSON the tools emit), so every expected value below is computed by hand.
"""

from __future__ import annotations

import json
import math

import pytest

from shopping_companion.benchmark import metrics as M
from shopping_companion.benchmark import taxonomy as T
from shopping_companion.benchmark.report import (
    episode_rows,
    final_results,
    read_results,
    scrub_url,
    stage_rows,
    summarize,
    write_parquet,
    write_report,
)
from shopping_companion.types import (
    EpisodeResult,
    Preference,
    ProductSlot,
    RewardBreakdown,
    SessionRef,
    StageResult,
    Step,
    Task,
    ToolResult,
    Trajectory,
    Verdict,
)

# --------------------------------------------------------------------------- builders


def tr(name, payload, ids=(), error=None, cid="c"):
    content = payload if isinstance(payload, str) else json.dumps(payload)
    return ToolResult(call_id=cid, name=name, content=content, returned_ids=list(ids), error=error)


def step(text="<tool_call>…</tool_call>", results=(), ctoks=10):
    return Step(assistant_text=text, tool_results=list(results), completion_tokens=ctoks, prompt_tokens=100)


def stage(n, steps, prefs=None, recs=(), answer=None, success=False, failed=False, task_id="t"):
    traj = Trajectory(
        task_id=task_id,
        stage=n,
        steps=steps,
        identified_preferences=prefs,
        recommended_ids=list(recs),
        final_answer=answer,
        termination="answered",
    )
    v = Verdict(judge="rule", stage=n, F=2, N=1, success=success, failed=failed, m1=1 if n == 1 else None)
    return StageResult(
        trajectory=traj, verdict=v, reward=RewardBreakdown(total=1.5, components={"R_z": 0.5, "R_tool": 1.0})
    )


def episode(
    task_id, task_type="single", succ=False, acc=1.0, mode="two_stage", hint="none", trial=0, stages=None, error=None
):
    stages = (
        stages if stages is not None else [stage(1, [step()], task_id=task_id), stage(2, [step()], task_id=task_id)]
    )
    return EpisodeResult(
        task_id=task_id,
        task_type=task_type,
        mode=mode,
        hint=hint,
        policy="p",
        trial=trial,
        seed=0,
        stages=stages,
        acc=acc,
        succ=succ,
        wall_s=1.0,
        error=error,
    )


def task(task_id, task_type="single", prefs=(("colour", "navy"),), voucher=None):
    return Task(
        task_id=task_id,
        task_type=task_type,
        instruction="find me a shirt",
        user_id="u",
        history=[SessionRef(session_id="s1", date="2024-01-01")],
        needle_session_ids=["s1"],
        preferences=[Preference(attribute=a, value=v) for a, v in prefs],
        slots=[ProductSlot(product_type="shirt", reference_product_id="p1")],
        voucher=voucher,
    )


def P(attr, value):
    return Preference(attribute=attr, value=value)


# --------------------------------------------------------------------------- pass@k / pass^k


def test_pass_at_k_and_pass_hat_k_hand_values():
    assert M.pass_at_k(5, 2, 2) == pytest.approx(0.7)  # 1 - C(3,2)/C(5,2) = 1 - 3/10
    assert M.pass_hat_k(5, 2, 2) == pytest.approx(0.1)  # C(2,2)/C(5,2) = 1/10
    assert M.pass_at_k(4, 4, 3) == M.pass_hat_k(4, 4, 3) == 1.0
    assert M.pass_at_k(3, 0, 1) == M.pass_hat_k(3, 0, 1) == 0.0
    assert M.pass_hat_k(10, 7, 3) == pytest.approx(math.comb(7, 3) / math.comb(10, 3))
    with pytest.raises(ValueError):
        M.pass_at_k(2, 1, 3)
    with pytest.raises(ValueError):
        M.pass_hat_k(2, 3, 1)


def test_pass_k_table_means_over_tasks():
    rs = [episode("A", succ=s, trial=i) for i, s in enumerate([True, True, False])]
    rs += [episode("B", "addon", succ=False, trial=i) for i in range(3)]
    rs += [episode("C", succ=True, trial=i) for i in range(2)]
    rs.append(episode("C", succ=False, trial=2, error="backend_error: HTTP 500"))  # not scored
    tab = M.pass_k_table(rs, [1, 2, 3])
    k1, k2, k3 = tab["k"][1], tab["k"][2], tab["k"][3]
    assert k1["pass@k"] == pytest.approx((2 / 3 + 0 + 1) / 3) and k1["pass^k"] == pytest.approx(5 / 9)
    assert k2["pass@k"] == pytest.approx(2 / 3)  # A: 1, B: 0, C: 1
    assert k2["pass^k"] == pytest.approx((1 / 3 + 0 + 1) / 3)  # A: C(2,2)/C(3,2)
    assert k3["n_tasks"] == 2 and k3["n_tasks_short"] == 1  # C has only 2 scored trials
    assert k3["pass@k"] == pytest.approx(0.5) and k3["pass^k"] == 0.0
    assert k2["by_task_type"]["addon"]["pass@k"] == 0.0
    assert tab["trials"] == {"min": 2, "max": 3}


# --------------------------------------------------------------------------- Acc / Succ / strategies


def test_acc_succ_per_type_avg_all_and_exclusions():
    rs = [
        episode("a", "single", succ=True, acc=1.0),
        episode("b", "single", succ=False, acc=0.5),
        episode("c", "addon", succ=True, acc=0.25),
        episode("d", "addon", succ=True, acc=0.0, error="backend_error: timed out"),  # excluded
        episode(
            "e", "addon", succ=False, acc=1.0, stages=[stage(1, [step()], failed=True), stage(2, [step()])]
        ),  # judge failed: excluded
    ]
    t = M.acc_succ(rs)
    assert t["by_task_type"]["single"] == {"n": 2, "acc": 0.75, "succ": 0.5}
    assert t["by_task_type"]["addon"] == {"n": 1, "acc": 0.25, "succ": 1.0}
    assert t["avg"]["succ"] == pytest.approx(0.75) and t["avg"]["acc"] == pytest.approx(0.5)
    assert t["all"] == {"n": 3, "acc": pytest.approx(1.75 / 3), "succ": pytest.approx(2 / 3)}


def test_strategy_table_orders_like_table_3_and_skips_oracle_acc():
    rs = [
        episode("a", mode="two_stage", hint="high", succ=True, acc=0.5),
        episode("a", mode="oracle", succ=True, acc=1.0),
        episode("a", mode="two_stage", hint="none", succ=False, acc=0.5),
        episode("a", mode="one_stage", succ=False, acc=0.0),
    ]
    tab = M.strategy_table(rs)
    assert list(tab) == ["oracle", "one_stage", "two_stage:none", "two_stage:high"]
    assert tab["oracle"]["all"]["acc"] is None and tab["oracle"]["all"]["succ"] == 1.0
    assert tab["two_stage:high"]["all"]["acc"] == 0.5
    assert M.strategy_name("two_stage", "none") == "two_stage:none" and M.strategy_name("oracle") == "oracle"


def test_behaviour_means_and_tool_calls_per_turn():
    s1 = stage(
        1, [step(results=[tr("mem_search", {}), tr("mem_view", {})], ctoks=5), step("<answer>{}</answer>", ctoks=7)]
    )
    s2 = stage(
        2,
        [
            step(results=[tr("product_search", {})], ctoks=3),
            step(results=[tr("invalid_tool_call", {}, error="bad")], ctoks=4),
            step("<answer>@REC::p@</answer>", ctoks=1),
        ],
    )
    e1 = episode("a", stages=[s1, s2])
    e2 = episode(
        "b", stages=[stage(1, [step(results=[tr("mem_search", {})], ctoks=None)]), stage(2, [step("x", ctoks=2)])]
    )
    b = M.behaviour([e1, e2])
    assert b["n"] == 2 and b["turns"] == pytest.approx((5 + 2) / 2)
    assert b["tool_uses"] == pytest.approx((4 + 1) / 2)
    assert b["resp_tokens"] == 20 and b["n_resp_tokens"] == 1  # e2 lacks a token count
    assert b["resp_chars"] == pytest.approx(
        (sum(len(x.assistant_text) for s in (s1, s2) for x in s.trajectory.steps) + len("<tool_call>…</tool_call>") + 1)
        / 2
    )
    assert b["tool_call_rate"] == pytest.approx(4 / 7)
    assert b["tool_uses_by_tool"]["mem_search"] == 1.0 and b["turns_by_stage"] == {"stage1": 1.5, "stage2": 2.0}
    per_turn = M.tool_calls_per_turn([e1, e2])
    # episode-level turn index: stage-1 turns 0..1, then stage-2 turns 2..4
    assert per_turn == {
        "mem_search": [2, 0, 0, 0, 0],
        "mem_view": [1, 0, 0, 0, 0],
        "product_search": [0, 0, 1, 0, 0],
        "invalid_tool_call": [0, 0, 0, 1, 0],
    }


def test_tool_call_plot_is_a_png(tmp_path):
    import matplotlib.image as mpimg

    e = episode(
        "a",
        stages=[stage(1, [step(results=[tr("mem_search", {})])]), stage(2, [step(results=[tr("product_view", {})])])],
    )
    p = M.plot_tool_calls_per_turn([e], tmp_path / "f.png", title="t")
    assert p is not None and p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    h, w = mpimg.imread(p).shape[:2]
    assert h > 100 and w > 100
    assert M.plot_tool_calls_per_turn([episode("b")], tmp_path / "none.png") is None  # no tool call at all
    assert not (tmp_path / "none.png").exists()


# --------------------------------------------------------------------------- error taxonomy

MEM_SEARCH = {"results": [{"session_id": "s1", "turn": 2, "snippet": "I only wear navy shirts"}], "n_results": 1}
MEM_VIEW = {
    "sessions": [{"session_id": "s1", "turns": [{"role": "user", "content": "I only wear navy shirts, cotton please"}]}]
}
SEARCH = {
    "results": [
        {"product_id": "p1", "title": "Navy shirt", "price": 10, "shop_id": "s1"},
        {"product_id": "p2", "title": "Blue shirt", "price": 12, "shop_id": "s1"},
        {"product_id": "p3", "title": "Navy tee", "price": 9, "shop_id": "s2"},
    ],
    "n_results": 3,
}


def VIEW(*ids, **attrs):
    recs = {
        "p1": {
            "product_id": "p1",
            "title": "Navy shirt",
            "shop_id": "s1",
            "attributes": {"colour": "Navy", "fabric": "polyester"},
        },
        "p2": {"product_id": "p2", "title": "Blue shirt", "shop_id": "s1", "attributes": {"colour": "Blue"}},
        "p3": {"product_id": "p3", "title": "Navy tee", "shop_id": "s2", "attributes": {"colour": "Navy"}},
    }
    return tr("product_view", {"products": [recs[i] for i in ids]}, ids)


def _stage2(steps, recs, answer):
    return stage(2, steps, recs=recs, answer=answer)


# The taxonomy's rules (one hand-built trajectory per class, precedence, 'other') are tested in
# tests/benchmark/test_taxonomy.py; the LLM attribution and the report's taxonomy table here.


def test_llm_attribution_through_the_scripted_server():
    from shopping_companion.llm.openai_backend import OpenAIBackend
    from tests.openai_server import ScriptedOpenAIServer

    s1 = stage(1, [step(results=[tr("mem_search", MEM_SEARCH, ["s1"])]), step("a")], prefs=[P("colour", "navy")])
    s2 = _stage2([step("<answer>@REC::zz@</answer>")], ["zz"], "@REC::zz@")
    ep = episode("G", stages=[s1, s2])
    script = [
        'Sure. {"category": "insufficient_tool_calls", "secondary": ["product_id_sourcing", "nonsense"], '
        '"explanation": "Stage 2 made no product call."}',
        "I think it is a hallucination.",
        '{"category": "bad_luck", "explanation": "?"}',
        {"status": 503},
        {"status": 503},
    ]
    with ScriptedOpenAIServer(script) as srv:
        be = OpenAIBackend("judge-m", base_url=srv.base_url, api_key="k", max_retries=1, backoff_s=0.0)
        ok = T.llm_attribute(ep, be, task("G"))
        no_json = T.llm_attribute(ep, be)
        unknown = T.llm_attribute(ep, be)
        failed = T.llm_attribute(ep, be)
        bodies = srv.bodies
    assert ok.category == "insufficient_tool_calls" and ok.secondary == ["product_id_sourcing"] and ok.error is None
    assert no_json.category is None and "no JSON object" in no_json.error
    assert unknown.category is None and "unknown category 'bad_luck'" in unknown.error
    assert failed.category is None and failed.error.startswith("backend error") and "503" in failed.error
    prompt = bodies[0]["messages"]
    assert "insufficient_tool_calls" in prompt[0]["content"] and "Gold preferences: colour=navy" in prompt[1]["content"]
    assert bodies[0]["temperature"] == 0.0 and "tools" not in bodies[0]


# --------------------------------------------------------------------------- report / parquet / results file


def test_final_results_keeps_the_newest_success_per_key(tmp_path):
    err = episode("a", error="backend_error: HTTP 500")
    ok = episode("a", succ=True)
    other = episode("a", hint="low", succ=False)
    later_err = episode("a", error="backend_error: again")
    out = final_results([err, other, ok, later_err])
    assert [(r.hint, r.error) for r in out] == [("low", None), ("none", None)]
    p = tmp_path / "r.jsonl"
    p.write_text("\n".join(r.model_dump_json() for r in [err, ok]) + "\n" + ok.model_dump_json()[:40])
    assert len(read_results(p)) == 2  # the torn line is ignored
    assert scrub_url("http://user:sk-secret@h.example:8000/v1?key=sk-secret#x") == "http://h.example:8000/v1"


def test_report_and_parquet(tmp_path):
    import pandas as pd

    s1 = stage(1, [step(results=[tr("mem_search", MEM_SEARCH, ["s1"])]), step("a")], prefs=[P("colour", "navy")])
    s2 = _stage2([step(results=[tr("product_search", SEARCH, ["p1", "p2", "p3"])]), step("a")], ["p1"], "@REC::p1@")
    rs = []
    for strat in (("two_stage", "none"), ("two_stage", "high"), ("oracle", "none")):
        stages = [s1, s2] if strat[0] == "two_stage" else [s2]
        for i, tt in enumerate(("single", "addon")):
            for k in range(2):
                rs.append(
                    episode(
                        f"{tt}{i}",
                        tt,
                        succ=(k == 0 and strat[1] == "high"),
                        acc=0.5,
                        mode=strat[0],
                        hint=strat[1],
                        trial=k,
                        stages=stages,
                    )
                )
    rs.append(
        episode("single0", mode="two_stage", hint="none", trial=2, error="backend_error: failed after 4 attempt(s)")
    )
    meta = {
        "run_name": "r",
        "policy": "openai:m",
        "endpoint": "http://u:sk-zzz@localhost:1/v1?k=sk-zzz",
        "judge": "rule",
        "simulator": "scripted (seed 0)\nwith | a pipe",
        "trials": 2,
        "seeds": "base 0",
        "config": {"a": 1},
    }
    s = write_report(rs, tmp_path / "report.md", meta)
    md = (tmp_path / "report.md").read_text()
    assert "sk-zzz" not in md and "http://localhost:1/v1" in md
    assert "| user simulator | scripted (seed 0) with \\| a pipe |" in md  # one row (markdown_table escapes)
    assert "| Two-Stage (High Hint) | 50.0 | 50.0 | 50.0 | 50.0 |" in md  # Table 3 row: Single, Add-on, Avg, Acc
    assert "| Oracle | 0.0 | 0.0 | 0.0 | – |" in md  # no Acc for oracle
    assert "| two_stage:high | 2 | 2 | 1.0000 | 0.0000 |" in md  # pass@2 = 1, pass^2 = 0 for both tasks
    assert "Episodes not scored" in md and "failed after 4 attempt(s)" in md
    for name in ("tool_calls_per_turn_two_stage_none.png", "tool_calls_per_turn_oracle.png", "error_taxonomy.png"):
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG", name
    assert s["n_errors"] == 1 and s["n_scored"] == 12
    assert s["taxonomy"]["primary"]["n_failures"] == 10
    ep, st = write_parquet(rs, tmp_path)
    df = pd.read_parquet(ep)
    assert len(df) == 13 and set(df["strategy"]) == {"two_stage:none", "two_stage:high", "oracle"}
    row = df[(df.task_id == "single0") & (df.trial == 0) & (df.strategy == "two_stage:high")].iloc[0]
    assert bool(row["succ"]) and row["stage1_turns"] == 2 and row["stage2_tool_uses"] == 1
    assert row["stage2_reward_R_tool"] == 1.0 and list(row["recommended_ids"]) == ["p1"]
    sdf = pd.read_parquet(st)
    assert len(sdf) == sum(len(r.stages) for r in rs) and {"verdict_m1", "reward_R_z", "stage"} <= set(sdf.columns)
    assert len(episode_rows(rs)) == 13 and len(stage_rows(rs)) == len(sdf)
    assert summarize(rs, ks=[1])["pass_k"]["two_stage:high"]["k"][1]["pass@k"] == 0.5


def test_per_ability_and_per_stress_variant_tables_report_and_parquet(tmp_path):
    import pandas as pd

    a = task("a").model_copy(update={"abilities": ["extraction"]})
    b = task("b").model_copy(update={"abilities": ["knowledge_update"]})
    b_nr = b.model_copy(update={"task_id": "b~needle_removed", "stress": "needle_removed", "variant_of": "b"})
    tasks = {t.task_id: t for t in (a, b, b_nr)}

    def ep(tid, trial, s1, succ):
        return episode(
            tid,
            succ=succ,
            acc=1.0 if s1 else 0.5,
            trial=trial,
            stages=[stage(1, [step()], success=s1, task_id=tid), stage(2, [step()], success=succ, task_id=tid)],
        )

    rs = [ep("a", 0, True, True), ep("a", 1, True, False), ep("b", 0, False, True), ep("b", 1, False, True)]
    rs += [ep("b~needle_removed", 0, True, False), ep("b~needle_removed", 1, False, False)]
    by = M.group_table(tasks, rs, M.task_abilities, ks=[1, 2])["two_stage:none"]
    assert by["extraction"] == {"n": 2, "n_tasks": 1, "acc": 1.0, "succ": 0.5, "succ1": 1.0, "pass^k": {1: 0.5, 2: 0.0}}
    assert by["knowledge_update"]["n"] == 4 and by["knowledge_update"]["n_tasks"] == 2
    assert by["knowledge_update"]["succ"] == 0.5 and by["knowledge_update"]["succ1"] == 0.25
    st = M.group_table(tasks, rs, M.task_stress, ks=[1])
    assert st["two_stage:none"]["original"]["succ"] == 0.75 and st["two_stage:none"]["needle_removed"]["succ1"] == 0.5
    assert M.stress_drops(st) == {"two_stage:none": {"needle_removed": {"succ": -0.75, "succ1": 0.0}}}
    s = write_report(rs, tmp_path / "report.md", {"run_name": "r"}, tasks=tasks, ks=[1, 2], plots=False)
    md = (tmp_path / "report.md").read_text()
    assert s["by_ability"]["two_stage:none"]["extraction"]["pass^k"] == {1: 0.5, 2: 0.0}
    assert (
        "## Per memory ability" in md
        and "| two_stage:none | extraction | 2 | 1 | 1.0000 | 1.0000 | 0.5000 | 0.5000 | 0.0000 |" in md
    )
    assert "| two_stage:none | needle_removed | 2 | 1 | 0.7500 | 0.5000 (+0.0 pts) | 0.0000 (-75.0 pts) |" in md
    ep_path, st_path = write_parquet(rs, tmp_path, tasks)
    df = pd.read_parquet(ep_path)
    assert sorted(zip(df["task_id"], df["abilities"], df["stress"])) == sorted(
        (r.task_id, tasks[r.task_id].abilities[0], tasks[r.task_id].stress or "original") for r in rs
    )
    assert set(pd.read_parquet(st_path)["stress"]) == {"original", "needle_removed"}
    plain = write_report(rs, tmp_path / "plain.md", {"run_name": "r"}, plots=False)  # no tasks: no tables
    assert plain["by_ability"] == {} and "Per memory ability" not in (tmp_path / "plain.md").read_text()
