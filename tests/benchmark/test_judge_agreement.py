"""Judge agreement: OPC (App. E), per-field agreement, Cohen's κ, rule judge vs LLM judge."""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

import pytest

from shopping_companion.benchmark.judge_agreement import (
    agreement_report,
    cohen_kappa,
    field_value,
    items_from_results,
    judge_all,
    opc,
    pearson,
    score_vectors,
    spearman,
)
from shopping_companion.judges.llm import LLMJudge
from shopping_companion.judges.rule import RuleJudge
from shopping_companion.llm.openai_backend import OpenAIBackend
from shopping_companion.types import (
    Preference,
    Product,
    ProductSlot,
    SessionRef,
    Step,
    Task,
    ToolCall,
    ToolResult,
    Trajectory,
    Verdict,
)

_REPO = str(Path(__file__).resolve().parents[2])
if _REPO not in sys.path:
    sys.path.insert(0, _REPO)
from tests.openai_server import ScriptedOpenAIServer  # noqa: E402

# Table 5 of the paper: success rates (%) of four agent systems under five judge LLMs.
TABLE5 = {
    "GPT-5": [64.5, 51.0, 49.0, 48.0],
    "Qwen3-Max": [59.0, 52.0, 43.0, 45.5],
    "Kimi-K2": [58.5, 48.5, 44.0, 49.0],
    "Gemini-3-Pro": [66.5, 54.5, 45.0, 48.5],
    "Qwen3-Next-80B": [63.0, 49.5, 43.0, 46.0],
}
SYSTEMS = ["gpt-5", "gpt-4.1", "gpt-4o", "qwen3-max"]


def V(stage=2, success=False, failed=False, **kw):
    base = dict(judge="j", stage=stage, F=2, N=1, b=0)
    if not failed:
        base.update(dict(p2=1, q2=1, m2=2) if stage == 2 else dict(q1=1, m1=2))
    base.update(kw)
    return Verdict(**base, success=success, failed=failed)


def test_opc_reproduces_the_papers_table5():
    r = opc(TABLE5)
    assert r.mean == pytest.approx(0.9547, abs=5e-5)
    assert r.std == pytest.approx(0.0289, abs=5e-5)  # population std (ddof 0)
    assert r.n_pairs == 10 and r.n_undefined == 0


def test_opc_by_system_from_verdicts_equals_table5():
    """200 stage-2 items per system; judge j marks round(rate × 2) of them successful."""
    table = {}
    for judge, rates in TABLE5.items():
        verdicts = {}
        for system, rate in zip(SYSTEMS, rates):
            n_succ = round(rate * 2)
            for i in range(200):
                ok = i < n_succ
                verdicts[(system, f"task{i}", 2)] = V(success=ok, m2=2 if ok else 1)
        table[judge] = verdicts
    labels, vecs = score_vectors(table, by="system")
    assert labels == sorted(SYSTEMS)
    assert vecs["GPT-5"][labels.index("gpt-5")] == pytest.approx(0.645)
    rep = agreement_report(table)
    assert rep.opc is not None and rep.opc.by == "system"
    assert rep.opc.mean == pytest.approx(0.9547, abs=5e-5) and rep.opc.std == pytest.approx(0.0289, abs=5e-5)
    md = rep.to_markdown()
    assert "OPC (Pearson of per-system success vectors" in md and "0.9547 ± 0.0289" in md


def test_statistics_by_hand():
    assert cohen_kappa([1, 1, 0, 0], [1, 0, 0, 0]) == pytest.approx(0.5)  # po .75, pe .5
    assert cohen_kappa([1, 0, 1, 0], [1, 0, 1, 0]) == 1.0
    assert math.isnan(cohen_kappa([1, 1], [1, 1]))  # p_e = 1: undefined
    assert cohen_kappa([1, 0], [0, 1]) == pytest.approx(-1.0)
    assert pearson([1, 2, 3], [2, 4, 6.5]) == pytest.approx(4.5 / math.sqrt(2 * (169 / 36 + 1 / 36 + 49 / 9)))
    assert spearman([1, 2, 3], [3, 1, 2]) == pytest.approx(-0.5)
    assert math.isnan(pearson([1, 1, 1], [1, 2, 3]))
    with pytest.raises(ValueError):
        opc({"only": [1.0, 2.0]})
    with pytest.raises(ValueError):
        opc({"a": [1.0, 2.0], "b": [1.0]})


def test_per_field_agreement_kappa_and_failures():
    a = {("s", f"t{i}", 2): V(success=s, m2=m) for i, (s, m) in enumerate([(1, 2), (1, 2), (0, 1), (0, 0)])}
    b = {("s", f"t{i}", 2): V(success=s, m2=m) for i, (s, m) in enumerate([(1, 2), (0, 1), (0, 1), (0, 1)])}
    b[("s", "t4", 2)] = V(failed=True, reasons=["no reply"])  # judged only by b, failed
    a[("s", "t5", 2)] = V(success=True)
    b[("s", "t5", 2)] = V(failed=True, reasons=["no reply"])  # failed: excluded, not a disagreement
    rep = agreement_report({"a": a, "b": b}, opc_by="item")
    assert rep.failures == {"a": 0, "b": 2} and rep.n_items == 6
    s = rep.pair("a", "b", "success")
    assert s.n == 4 and s.agreement == pytest.approx(0.75) and s.kappa == pytest.approx(0.5)
    m = rep.pair("b", "a", "m2")
    assert m.n == 4 and m.agreement == pytest.approx(0.5) and m.kappa is None
    assert rep.pair("a", "b", "q2").agreement == 1.0
    assert rep.pair("a", "b", "q1").n == 0  # stage-1 field on stage-2 items
    summary = rep.field_summary()
    assert "q1" not in summary and summary["success"]["agreement"] == pytest.approx(0.75)
    # OPC by item over the items both judged: success vectors [1,1,0,0] vs [1,0,0,0]
    assert rep.opc.labels == [("s", f"t{i}", 2) for i in range(4)]
    assert rep.opc.mean == pytest.approx(pearson([1, 1, 0, 0], [1, 0, 0, 0]))
    d = rep.to_dict()
    assert json.loads(json.dumps(d))["failures"] == {"a": 0, "b": 2}
    assert field_value(V(failed=True), "success") is None
    assert field_value(V(success=True), "reward") == pytest.approx(1.0)


# --------------------------------------------------------------------------- rule vs LLM

SHIRTS = ["Apparel", "Topwear", "Shirts"]
CATALOG = {
    p.product_id: p
    for p in [
        Product(
            product_id=f"m:{i}",
            title=t,
            source="test",
            shop="T",
            shop_id="S1",
            price=10.0,
            category_path=SHIRTS,
            attributes={"base_colour": c, "Fabric": f},
        )
        for i, (t, c, f) in enumerate(
            [
                ("Navy Cotton Shirt", "Navy", "Cotton"),
                ("Black Cotton Shirt", "Black", "Cotton"),
                ("Navy Linen Shirt", "Navy", "Linen"),
                ("Red Silk Shirt", "Red", "Silk"),
            ]
        )
    ]
}


def lookup(ids):
    return {i: CATALOG[i] for i in ids if i in CATALOG}


def _items():
    items = {}
    for k in range(8):
        task = Task(
            task_id=f"t{k}",
            instruction=f"shirt request {k}",
            user_id="u",
            history=[SessionRef(session_id="h", date="2024-01-01")],
            needle_session_ids=["h"],
            preferences=[Preference(attribute="colour", value="navy"), Preference(attribute="fabric", value="cotton")],
            slots=[ProductSlot(product_type="shirt", category_path=SHIRTS, reference_product_id="m:0")],
        )
        pid = f"m:{k % 4}"
        traj = Trajectory(
            task_id=task.task_id,
            stage=2,
            recommended_ids=[pid],
            final_answer=f"@REC::{pid}@",
            steps=[
                Step(
                    assistant_text="..",
                    tool_calls=[ToolCall(name="product_search", call_id="c")],
                    tool_results=[ToolResult(call_id="c", name="product_search", content="..", returned_ids=[pid])],
                )
            ],
        )
        items[("sys-a" if k < 4 else "sys-b", task.task_id, 2)] = (task, traj)
    return items


def test_rule_judge_vs_llm_judge_agreement():
    """The scripted LLM grades like the rule judge except on request 2 (it accepts linen as cotton)."""

    def script(body):
        prompt = body["messages"][1]["content"]
        k = int(re.search(r"shirt request (\d+)", prompt).group(1))
        pid = f"m:{k % 4}"
        p = CATALOG[pid]
        matched = [
            i for i, ok in ((1, p.attributes["base_colour"] == "Navy"), (2, p.attributes["Fabric"] == "Cotton")) if ok
        ]
        if k == 2:
            matched = [1, 2]
        return json.dumps({"p2": 1, "q2": 1, "m2": len(matched), "matched": matched, "reasons": ["scripted"]})

    items = _items()
    with ScriptedOpenAIServer(script) as srv:
        backend = OpenAIBackend("grader", base_url=srv.base_url, api_key="k", max_retries=0)
        llm = LLMJudge(backend, lookup, concurrency=4, backoff_s=0)
        table = judge_all([RuleJudge(lookup), llm], items)
        assert len(srv.bodies) == 8
    assert set(table) == {"rule", "llm:grader"}
    rule_succ = [table["rule"][k].success for k in items]
    assert rule_succ == [True, False, False, False] * 2
    rep = agreement_report(table)
    s = rep.pair("rule", "llm:grader", "success")
    assert s.n == 8 and s.agreement == pytest.approx(7 / 8)
    # success: rule [1,0,0,0,1,0,0,0] vs llm [1,0,1,0,1,0,0,0]: po 7/8, pe = (2/8)(3/8) + (6/8)(5/8) = 36/64
    assert s.kappa == pytest.approx((7 / 8 - 36 / 64) / (1 - 36 / 64))
    assert rep.pair("rule", "llm:grader", "m2").agreement == pytest.approx(7 / 8)
    # OPC by system: success rates rule (.25, .25) vs llm (.5, .25)
    assert rep.opc.labels == ["sys-a", "sys-b"]
    assert rep.opc.vectors == {"rule": [0.25, 0.25], "llm:grader": [0.5, 0.25]}
    assert math.isnan(rep.opc.mean) and rep.opc.n_undefined == 1  # rule's vector is constant
    md = rep.to_markdown()
    assert "| rule | llm:grader | 8 | 0.875 |" in md
    assert "| success | 1 | 8 | 0.875 |" in md
    item_rep = agreement_report(table, opc_by="item")
    assert item_rep.opc.mean == pytest.approx(pearson([1, 0, 0, 0, 1, 0, 0, 0], [1, 0, 1, 0, 1, 0, 0, 0]))


def test_items_from_results_rejudges_recorded_episodes():
    from shopping_companion.rewards import compute_reward
    from shopping_companion.types import EpisodeResult, StageResult

    rule = RuleJudge(lookup)
    results, tasks = [], {}
    for (system, _tid, _z), (task, traj) in _items().items():
        tasks[task.task_id] = task
        recorded = rule.judge(task, traj)
        if task.task_id == "t1":  # pretend the evaluation-time judge was lenient on this one
            recorded = recorded.model_copy(update={"judge": "rule", "m2": 2, "success": True})
        stage = StageResult(trajectory=traj, verdict=recorded, reward=compute_reward(task, traj, recorded))
        results.append(
            EpisodeResult(
                task_id=task.task_id,
                task_type="single",
                mode="two_stage",
                policy=system,
                stages=[stage],
                acc=0.0,
                succ=recorded.success,
                wall_s=0.1,
            )
        )
    items, recorded = items_from_results(results, tasks)
    assert len(items) == 8 and ("sys-a", "t0", 2, 0) in items
    table = {"recorded": recorded, **judge_all([rule], items)}
    rep = agreement_report(table)
    assert rep.pair("recorded", "rule", "success").agreement == pytest.approx(7 / 8)
    assert rep.opc.vectors["recorded"] == [0.5, 0.25]
    with pytest.raises(KeyError, match="t0"):
        items_from_results(results, {})
