"""The viewer's data layer on small run directories built from the real record types.

Covers line statuses (ok / error / unreadable / foreign / torn / superseded), incremental
refresh of a live file (only appended bytes are read), a replaced or shrunk file, queries
(filters, sort, paging, bad parameters), the annotations of an episode (needle / reference /
alternative / other marks, r(u) alignment, think text, product cards), run discovery and ids,
the SFT and GRPO kinds, taxonomy, summaries against ``benchmark.metrics``, and ``compare``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from shopping_companion.benchmark import metrics as M
from shopping_companion.benchmark.report import final_results, scan_results
from shopping_companion.envs.tools import product_record
from shopping_companion.errors import ConfigError
from shopping_companion.types import (
    AttributeSource,
    EpisodeResult,
    FormatFlags,
    Message,
    Preference,
    Product,
    ProductSlot,
    RewardBreakdown,
    SessionRef,
    StageResult,
    Step,
    Task,
    ToolCall,
    ToolResult,
    Trajectory,
    Verdict,
)
from shopping_companion.viewer.compare import paired_bootstrap_ci
from shopping_companion.viewer.store import RunCatalog, RunIndex, compare

REF, ALT, OTHER = "myntra:1", "myntra:2", "myntra:3"
NEEDLE, HAY = "sess-needle", "sess-hay"


# --------------------------------------------------------------------------- builders


def make_task(task_id: str = "t1") -> Task:
    return Task(
        task_id=task_id,
        instruction=f"I need a t-shirt for the summer ({task_id})",
        user_id="u1",
        history=[SessionRef(session_id=NEEDLE, date="2024-01-01"), SessionRef(session_id=HAY, date="2024-01-02")],
        needle_session_ids=[NEEDLE],
        preferences=[Preference(attribute="colour", value="blue"), Preference(attribute="fabric", value="cotton")],
        slots=[ProductSlot(product_type="t-shirt", category_path=["Apparel", "Tshirts"], reference_product_id=REF)],
    )


def make_product(pid: str, title: str, colour: str, fabric: str) -> Product:
    return Product(
        product_id=pid,
        title=title,
        source="myntra",
        shop="Myntra (India)",
        shop_id="myntra:shop1",
        brand="Acme",
        price=499.0,
        currency="INR",
        category_path=["Apparel", "Tshirts"],
        attributes={"colour": colour, "fabric": fabric},
        attribute_sources={"colour": AttributeSource(source="title", span=colour, extractor="rules-v1")},
    )


PRODUCTS = {
    REF: make_product(REF, "Men Blue Cotton T-shirt", "Blue", "Cotton"),
    ALT: make_product(ALT, "Men Navy Blue Cotton T-shirt", "Blue", "Cotton"),
    OTHER: make_product(OTHER, "Men Red Polyester T-shirt", "Red", "Polyester"),
}


def _hit(p: Product) -> dict:
    return {"product_id": p.product_id, "title": p.title, "price": p.price, "shop": p.shop, "shop_id": p.shop_id}


def stage1(succ: bool = True) -> StageResult:
    steps = [
        Step(
            assistant_text='<think>check what they said before</think>\n<tool_call>{"name": "mem_search", '
            '"arguments": {"queries": ["t-shirt"]}}</tool_call>',
            tool_calls=[ToolCall(name="mem_search", arguments={"queries": ["t-shirt"]}, call_id="c0")],
            tool_results=[
                ToolResult(
                    call_id="c0", name="mem_search", content='{"results": []}', returned_ids=[NEEDLE, HAY, NEEDLE]
                )
            ],
            prompt_tokens=100,
            completion_tokens=20,
        ),
        Step(
            assistant_text="<tool_call>{...}</tool_call>",
            tool_calls=[ToolCall(name="mem_view", arguments={"session_ids": [NEEDLE]}, call_id="c1")],
            tool_results=[ToolResult(call_id="c1", name="mem_view", content='{"sessions": []}', returned_ids=[NEEDLE])],
        ),
        Step(
            assistant_text='<answer>{"colour": "blue", "fabric": "cotton"}</answer>',
            format=FormatFlags(has_answer=True),
        ),
    ]
    traj = Trajectory(
        task_id="t1",
        stage=1,
        messages=[Message(role="system", content="sys"), Message(role="user", content="I need a t-shirt")],
        steps=steps,
        final_answer='{"colour": "blue", "fabric": "cotton"}',
        identified_preferences=[Preference(attribute="colour", value="blue")],
        termination="answered",
    )
    verdict = Verdict(judge="rule", stage=1, F=2, N=1, q1=1, m1=2.0 if succ else 1.0, success=succ)
    reward = RewardBreakdown(
        total=1.5, components={"R_z": 1.0, "R_tool": 5 / 6, "R_fmt": 1.0, "stage": 1.0}, per_tool_call=[2 / 3, 1.0]
    )
    return StageResult(trajectory=traj, verdict=verdict, reward=reward)


def stage2(succ: bool = True, rec: str = REF) -> StageResult:
    search = json.dumps({"results": [_hit(PRODUCTS[i]) for i in (REF, ALT, OTHER)], "n_results": 3})
    view = json.dumps({"products": [product_record(PRODUCTS[i]) for i in (REF, ALT)]}, ensure_ascii=False)
    steps = [
        Step(
            assistant_text="<tool_call>{...}</tool_call>",
            tool_calls=[ToolCall(name="product_search", arguments={"query": "blue cotton t-shirt"}, call_id="p0")],
            tool_results=[
                ToolResult(call_id="p0", name="product_search", content=search, returned_ids=[REF, ALT, OTHER])
            ],
        ),
        Step(
            assistant_text="<think>compare the two</think>two calls",
            tool_calls=[
                ToolCall(name="product_view", arguments={"product_ids": [REF, ALT]}, call_id="p1"),
                ToolCall(name="product_view", arguments={"product_ids": [OTHER]}, call_id="p2"),
            ],
            tool_results=[ToolResult(call_id="p1", name="product_view", content=view, returned_ids=[REF, ALT])],
            format=FormatFlags(tool_json_ok=False, errors=["tool call 3: invalid JSON at char 4"]),
        ),
        Step(assistant_text=f"<answer>@REC {rec}</answer>", format=FormatFlags(has_answer=True)),
    ]
    traj = Trajectory(
        task_id="t1", stage=2, steps=steps, final_answer=f"@REC {rec}", recommended_ids=[rec], termination="answered"
    )
    verdict = Verdict(judge="rule", stage=2, F=2, N=1, p2=1, q2=1, m2=2.0, success=succ)
    reward = RewardBreakdown(
        total=2.0 if succ else 0.5,
        components={"R_z": 1.0 if succ else 0.0, "R_tool": 0.5, "R_fmt": 1.0, "stage": 2.0},
        per_tool_call=[1 / 3, 0.5, 0.0],
    )
    return StageResult(trajectory=traj, verdict=verdict, reward=reward)


def episode(
    task_id: str = "t1",
    *,
    trial: int = 0,
    succ: bool = True,
    error: str | None = None,
    mode: str = "two_stage",
    hint: str = "none",
    acc: float = 1.0,
    rec: str = REF,
) -> EpisodeResult:
    stages = [] if error else [stage1(), stage2(succ, rec)]
    for s in stages:
        s.trajectory.task_id = task_id
    return EpisodeResult(
        task_id=task_id,
        task_type="single",
        mode=mode,
        hint=hint,
        policy="scripted",
        trial=trial,
        stages=stages,
        acc=acc,
        succ=succ and not error,
        wall_s=1.0,
        error=error,
    )


def line(r: EpisodeResult) -> str:
    return r.model_dump_json() + "\n"


def write_bench(d: Path, tasks: list[Task]) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "tasks.jsonl").write_text("".join(t.model_dump_json() + "\n" for t in tasks))
    return d


def make_run(root: Path, name: str, lines: list[str], tasks: list[Task] | None = None) -> Path:
    """``root/name/results.jsonl`` plus a benchmark at ``root/<name>-bench`` named in config.yaml
    by a path relative to ``root``'s parent (as a run started from there records it)."""
    run = root / name
    run.mkdir(parents=True)
    (run / "results.jsonl").write_text("".join(lines))
    if tasks is not None:
        write_bench(root / f"{name}-bench", tasks)
        (run / "config.yaml").write_text(f"bench:\n  path: {root.name}/{name}-bench\n")
    return run


def index_of(run: Path) -> RunIndex:
    cat = RunCatalog([run])
    return cat.get(cat.run_ids()[0])


# --------------------------------------------------------------------------- statuses


def test_line_statuses_and_bad_lines_open_as_raw(tmp_path):
    bad_schema = episode("t4").model_dump(mode="json")
    bad_schema["stages"][0]["verdict"]["F"] = -1  # structurally an episode, refused by pydantic
    lines = [
        line(episode("t1")),
        line(episode("t2", error="backend failed after 3 retries")),
        "{this is not json\n",
        '{"hello": "world"}\n',
        "[1, 2, 3]\n",
        "\n",
        json.dumps(bad_schema) + "\n",
        line(episode("t3"))[:200],  # torn: no newline
    ]
    idx = index_of(make_run(tmp_path, "run", lines, [make_task(t) for t in ("t1", "t2", "t3")]))
    rows = {r.line: r for r in idx.query(limit=500, include_superseded=True).rows}
    assert [rows[i].status for i in (1, 2, 3, 4, 5, 7, 8)] == [
        "ok",
        "error",
        "unreadable",
        "foreign",
        "foreign",
        "ok",
        "torn",
    ]
    assert 6 not in rows  # a blank line has no row but keeps the numbering
    assert rows[2].problem == "backend failed after 3 retries" and not rows[2].scored
    assert rows[3].problem.startswith("not JSON: JSONDecodeError")
    assert "missing field" in rows[4].problem and "JSON list" in rows[5].problem
    assert "incomplete last line" in rows[8].problem
    for n in (3, 4, 8):
        v = idx.episode(n)
        assert v.raw and v.result is None and v.stages == []
    assert idx.episode(4).raw == '{"hello": "world"}'
    # the schema problem shows when the line is opened; the row is foreign from then on
    v = idx.episode(7)
    assert v.row.status == "foreign" and "stages.0.verdict.F" in v.row.problem and v.raw
    with pytest.raises(KeyError):
        idx.episode(6)
    with pytest.raises(KeyError):
        idx.episode(99)
    s = idx.summary
    assert (s.n_lines, s.n_unreadable, s.n_foreign, s.n_errors, s.torn) == (7, 4, 3, 1, True)


def test_superseded_attempts_follow_final_results(tmp_path):
    results = [
        episode("t1", error="backend failed"),  # retried below
        episode("t2"),
        episode("t1", succ=False),
        episode("t2", error="judge failed: timeout"),  # an errored retry never replaces a result
        episode("t3", error="backend failed"),
        episode("t3", error="backend failed again"),
    ]
    run = make_run(tmp_path, "run", [line(r) for r in results], [make_task(t) for t in ("t1", "t2", "t3")])
    idx = index_of(run)
    shown = idx.query(limit=500).rows
    assert [r.line for r in shown] == [2, 3, 6]
    every = {r.line: r for r in idx.query(limit=500, include_superseded=True).rows}
    assert {n: every[n].superseded_by for n in (1, 4, 5)} == {1: 3, 4: 2, 5: 6}
    assert all(every[n].status == "superseded" for n in (1, 4, 5))
    assert [r.line for r in idx.query(status="superseded").rows] == [1, 4, 5]
    # the same choice as benchmark.report.final_results
    final = final_results(scan_results(run / "results.jsonl").results)
    assert [(r.task_id, r.error) for r in final] == [(every[n].task_id, every[n].problem) for n in (2, 3, 6)]
    assert idx.summary.n_episodes == 3 and idx.summary.n_superseded == 3
    assert idx.episode(1).row.status == "superseded"  # still opens


# --------------------------------------------------------------------------- live files


def test_refresh_reads_only_appended_bytes_and_completes_a_torn_line(tmp_path):
    run = make_run(tmp_path, "live", [line(episode("t1")), line(episode("t2"))], [make_task("t1"), make_task("t2")])
    f = run / "results.jsonl"
    idx = index_of(run)
    size0 = f.stat().st_size
    assert idx.end_offset == size0 and idx.last_read == (0, size0)
    assert idx.refresh() is False and idx.last_read == (0, size0)  # nothing new: nothing read

    third = line(episode("t3", succ=False))
    with open(f, "a") as fh:
        fh.write(third[:150])
    assert idx.refresh() is True
    assert idx.last_read == (size0, size0 + 150) and idx.end_offset == size0
    assert idx.row(3).status == "torn" and idx.summary.torn
    assert [r.line for r in idx.rows_after(2)] == []  # a torn line is not a finished episode

    with open(f, "a") as fh:
        fh.write(third[150:])
    assert idx.refresh() is True
    size1 = f.stat().st_size
    assert idx.last_read == (size0, size1) and idx.end_offset == size1  # re-read from the end of line 2
    assert idx.row(3).status == "ok" and idx.row(3).success is False
    assert [r.line for r in idx.rows_after(2)] == [3]
    assert idx.summary.n_episodes == 3 and not idx.summary.torn
    assert idx.summary.live  # just written


def test_replaced_or_shrunk_file_is_indexed_again(tmp_path):
    run = make_run(tmp_path, "r", [line(episode("t1")), line(episode("t2"))], [make_task("t1"), make_task("t2")])
    f = run / "results.jsonl"
    idx = index_of(run)
    assert len(idx) == 2
    tmp = run / "results.jsonl.tmp"
    tmp.write_text(line(episode("t9", succ=False)) + line(episode("t1")) + line(episode("t2")))
    os.replace(tmp, f)  # another inode, even if larger
    assert idx.refresh() is True
    assert idx.last_read[0] == 0 and [r.task_id for r in idx.query().rows] == ["t9", "t1", "t2"]
    f.write_text(line(episode("t5")))  # same inode, shorter
    assert idx.refresh() is True
    assert idx.last_read[0] == 0 and [r.task_id for r in idx.query().rows] == ["t5"]
    f.unlink()
    assert idx.refresh() is True and len(idx) == 0


# --------------------------------------------------------------------------- queries


def test_query_filters_sort_paging_and_bad_parameters(tmp_path):
    results = []
    for i in range(30):
        strat = ("two_stage", "none") if i % 2 == 0 else ("two_stage", "high")
        results.append(episode(f"t{i:02d}", succ=i % 3 != 0, mode=strat[0], hint=strat[1], acc=i / 30))
    run = make_run(tmp_path, "q", [line(r) for r in results], [make_task(f"t{i:02d}") for i in range(30)])
    idx = index_of(run)
    assert idx.query().total == 30
    failed = idx.query(failed_only=True, limit=500)
    assert failed.total == 10 and all(r.success is False for r in failed.rows)
    high = idx.query(strategy="two_stage:high", limit=500)
    assert high.total == 15 and {r.strategy for r in high.rows} == {"two_stage:high"}
    assert idx.query(q="T07").total == 1 and idx.query(q="for the summer (t1").total == 10
    assert idx.query(task_type="addon").total == 0
    by_acc = idx.query(sort="acc", desc=True, limit=5)
    assert [r.task_id for r in by_acc.rows] == ["t29", "t28", "t27", "t26", "t25"]
    page = idx.query(sort="task_id", offset=10, limit=10)
    assert (page.total, page.offset, page.limit) == (30, 10, 10)
    assert [r.task_id for r in page.rows] == [f"t{i:02d}" for i in range(10, 20)]
    assert [r.line for r in idx.query(desc=True, limit=3).rows] == [30, 29, 28]
    facets = idx.facets()
    assert facets["strategy"] == ["two_stage:high", "two_stage:none"] and facets["task_type"] == ["single"]
    assert "unverified_attributes" in facets["taxonomy"] and "other" in facets["taxonomy"]
    with pytest.raises(ValueError, match="sort: must be one of line"):
        idx.query(sort="instruction; drop")
    with pytest.raises(ValueError, match="limit: must be an integer from 1 to 500"):
        idx.query(limit=0)
    with pytest.raises(ValueError, match="limit"):
        idx.query(limit=501)
    with pytest.raises(ValueError, match="offset"):
        idx.query(offset=-1)
    with pytest.raises(ValueError, match="status: must be one of ok"):
        idx.query(status="great")


def test_ability_and_stress_filters_and_facets(tmp_path):
    abilities = ["extraction", "knowledge_update", "temporal"]
    tasks = [make_task(f"t{i}").model_copy(update={"abilities": [abilities[i % 3]]}) for i in range(6)]
    tasks.append(tasks[1].model_copy(update={"task_id": "t1~needle_removed", "stress": "needle_removed"}))
    tasks.append(make_task("t9"))  # untagged
    run = make_run(tmp_path, "ab", [line(episode(t.task_id)) for t in tasks], tasks)
    idx = index_of(run)
    facets = idx.facets()
    assert facets["ability"] == ["extraction", "knowledge_update", "temporal", "untagged"]
    assert facets["stress"] == ["needle_removed", "original"]
    assert [r.task_id for r in idx.query(ability="knowledge_update").rows] == ["t1", "t4", "t1~needle_removed"]
    assert [r.task_id for r in idx.query(stress="needle_removed").rows] == ["t1~needle_removed"]
    assert idx.query(ability="temporal", stress="original").total == 2
    assert idx.query(ability="untagged").rows[0].task_id == "t9"


def test_taxonomy_from_file_else_from_the_rules(tmp_path):
    results = [episode("t1", succ=False, rec=OTHER), episode("t2", succ=False, rec="myntra:404"), episode("t3")]
    run = make_run(tmp_path, "tx", [line(r) for r in results], [make_task(t) for t in ("t1", "t2", "t3")])
    idx = index_of(run)
    rows = idx.query(failed_only=True).rows  # the page's failures are classified by the rules
    assert all(r.taxonomy for r in rows)
    v = idx.episode(2)
    assert v.taxonomy and v.taxonomy["primary"] == rows[1].taxonomy and v.taxonomy["evidence"]
    assert idx.query(taxonomy=rows[1].taxonomy).total >= 1
    item = {"task_id": "t1", "trial": 0, "strategy": "two_stage:none", "primary": "same_shop_alignment"}
    item.update(task_type="single", labels=["same_shop_alignment"], evidence={"same_shop_alignment": ["x"]})
    (run / "taxonomy.jsonl").write_text(json.dumps(item) + "\n")
    idx.refresh()
    assert idx.row(1).taxonomy == "same_shop_alignment"
    assert idx.episode(1).taxonomy["evidence"] == {"same_shop_alignment": ["x"]}
    assert idx.row(3).taxonomy is None  # a success has no class


def test_failures_are_classified_in_the_background(tmp_path):
    import time

    from shopping_companion.benchmark.taxonomy import classify_failures

    results = [episode(f"t{i}", succ=False, rec=(OTHER, "myntra:404", ALT)[i % 3]) for i in range(12)]
    tasks = [make_task(f"t{i}") for i in range(12)]
    run = make_run(tmp_path, "bg", [line(r) for r in results], tasks)
    want = {c.task_id: c.primary for c in classify_failures(results, {t.task_id: t for t in tasks})}
    idx = RunCatalog([run]).get("bg")  # nothing queried: the worker classifies every failure
    deadline = time.monotonic() + 30
    while idx.query(limit=1, offset=11).unclassified and time.monotonic() < deadline:
        time.sleep(0.05)
    assert {r.task_id: r.taxonomy for r in idx.query(limit=500).rows} == want
    off = RunCatalog([run], background_taxonomy=False).get("bg")
    page = off.query(limit=2)
    assert all(r.taxonomy for r in page.rows) and page.unclassified == 10  # only the page's rows
    assert off.classify_pending() == 10 and off.query(taxonomy=want["t5"]).total == sum(
        1 for v in want.values() if v == want["t5"]
    )


# --------------------------------------------------------------------------- episode annotations


def test_episode_marks_rewards_think_text_and_cards(tmp_path):
    run = make_run(tmp_path, "ep", [line(episode("t1"))], [make_task("t1")])
    idx = index_of(run)
    row = idx.row(1)
    assert (row.source, row.category, row.instruction) == ("myntra", "Tshirts", make_task("t1").instruction)
    assert (row.turns, row.tool_calls, row.r_tool) == (6, 4, pytest.approx((5 / 6 + 0.5) / 2))
    # R1 / R2 are the outcome rewards (R_z of each stage), the stage totals are stage1_total / stage2_total
    assert (row.r1, row.r2, row.stage1_total, row.stage2_total) == (1.0, 1.0, 1.5, 2.0)
    v = idx.episode(1)
    assert v.task is not None and [g.attribute for g in v.gold] == ["colour", "fabric"]
    s1, s2 = v.stages
    t0 = s1.turns[0]
    assert t0.think == "check what they said before" and "<tool_call>" in t0.text and "<think>" not in t0.text
    assert t0.calls[0].returned == [(NEEDLE, "needle"), (HAY, "non_needle"), (NEEDLE, "needle")]
    assert [c.reward for t in s1.turns for c in t.calls] == pytest.approx([2 / 3, 1.0])
    search = s2.turns[0].calls[0]
    assert search.returned == [(REF, "reference"), (ALT, "alternative"), (OTHER, "other")]
    assert search.arguments == {"query": "blue cotton t-shirt"}
    # the call without a recorded result is a call of its own in U(tau): r(u) stays aligned
    view_turn = s2.turns[1]
    assert [(c.name, c.error) for c in view_turn.calls] == [
        ("product_view", None),
        ("product_view", "no result recorded"),
    ]
    assert [c.reward for t in s2.turns for c in t.calls] == pytest.approx([1 / 3, 0.5, 0.0])
    assert view_turn.format_errors == ["tool call 3: invalid JSON at char 4"] and view_turn.think == "compare the two"
    (card,) = s2.recommended
    assert card.mark == "reference" and card.seen and card.viewed and card.title == "Men Blue Cotton T-shirt"
    assert card.attributes["colour"] == "Blue"  # " (from title)" stripped
    assert card.matched == ["colour=blue", "fabric=cotton"] and card.missing == []
    assert card.price == "499.0 INR" and card.shop == "Myntra (India)"


def test_card_of_a_product_that_misses_preferences_and_no_task(tmp_path):
    run = make_run(tmp_path, "ep", [line(episode("t1", succ=False, rec=OTHER))], [make_task("t1")])
    (card,) = index_of(run).episode(1).stages[1].recommended
    assert card.mark == "other" and card.seen and not card.viewed  # only a search hit was shown
    assert card.matched == [] and card.missing == ["colour=blue", "fabric=cotton"]
    # without a benchmark nothing is claimed about the ids
    bare = make_run(tmp_path, "bare", [line(episode("t1"))])
    idx = index_of(bare)
    v = idx.episode(1)
    assert v.task is None and v.gold == [] and idx.summary.benchmark_found is False
    assert {m for t in v.stages[0].turns for c in t.calls for _, m in c.returned} == {"unknown"}
    assert v.stages[1].recommended[0].mark == "unknown"


# --------------------------------------------------------------------------- summaries


def test_summary_matches_benchmark_metrics(tmp_path):
    results = []
    for t in range(4):
        for k in range(3):
            results.append(episode(f"t{t}", trial=k, succ=(t + k) % 2 == 0, acc=(t + 1) / 4))
    results.append(episode("t0", trial=0, mode="oracle", succ=True))
    results.append(episode("t1", trial=5, error="backend failed"))
    run = make_run(tmp_path, "m", [line(r) for r in results], [make_task(f"t{t}") for t in range(4)])
    s = index_of(run).summary
    final = final_results(results)
    pooled = M.acc_succ(final)["all"]
    assert s.acc == pytest.approx(pooled["acc"]) and s.succ == pytest.approx(pooled["succ"])
    table = M.pass_k_table(final, [1, 2, 3])
    assert s.pass_hat_k == pytest.approx({k: table["k"][k]["pass^k"] for k in (1, 2, 3)})
    assert (s.n_episodes, s.n_scored, s.n_errors, s.trials) == (14, 13, 1, 6)
    assert s.strategies == ["oracle", "two_stage:none"] and s.policy == "scripted"
    assert s.components["s1.R_z"] == 1.0 and s.components["s2.total"] == pytest.approx(
        sum(r.stages[1].reward.total for r in M.scored(final)) / 13
    )
    assert s.benchmark == f"{tmp_path.name}/m-bench" and s.benchmark_found
    assert s.kind == "eval" and s.updated.endswith("+00:00")


# --------------------------------------------------------------------------- discovery and kinds


def test_discovery_ids_kinds_and_confinement(tmp_path):
    from shopping_companion.sft.collect import KeptStage

    root = tmp_path / "runs"
    make_run(root, "eval-a", [line(episode("t1"))])
    make_run(root / "nested" / "deeper", "with space@x", [line(episode("t1"))])
    sft = root / "sft"
    sft.mkdir()
    ep = episode("t1")
    (sft / "rollouts.jsonl").write_text(line(ep))
    kept = KeptStage(
        task_id="t1", trial=0, mode="two_stage", hint="none", stage=2, policy="scripted", reason="episode Succ",
        acc=1.0, succ=True, trajectory=ep.stages[1].trajectory, verdict=ep.stages[1].verdict,
    )  # fmt: skip
    (sft / "kept.jsonl").write_text(kept.model_dump_json() + "\n")
    grpo = root / "grpo" / "val"
    grpo.mkdir(parents=True)
    for step in (10, 2):
        rec = {"input": "user: I need a t-shirt", "output": "<think>hm</think><answer>@REC myntra:1</answer>"}
        rec.update(score=1.5 + step, step=step, R_z=1.0, R_tool=0.25, R_fmt=1.0, success=1.0, stage=2.0)
        (grpo / f"{step}.jsonl").write_text(json.dumps(rec) + "\n")
    (root / "eval-a" / "results.jsonl.stale-20250101T000000Z").write_text(line(episode("old")))
    outside = tmp_path / "elsewhere"
    make_run(outside, "secret", [line(episode("t1"))])
    os.symlink(outside / "secret", root / "link-out")
    os.symlink(root / "eval-a", root / "link-in")

    cat = RunCatalog([root])
    kinds = {s.run_id: s.kind for s in cat.runs()}
    assert kinds == {
        "eval-a": "eval",
        "grpo/val/2.jsonl": "grpo_val",
        "grpo/val/10.jsonl": "grpo_val",
        "nested/deeper/with_space_x": "eval",
        "sft": "sft_rollouts",
        "sft/kept.jsonl": "sft_kept",
    }
    # link-out resolves outside the target (skipped); link-in is eval-a again (listed once)
    assert "link-out" not in kinds and not any(k.startswith("/") or ".." in k for k in kinds)
    with pytest.raises(KeyError):
        cat.get("../elsewhere/secret")

    kv = cat.get("sft/kept.jsonl").episode(1)
    assert kv.result is None and kv.record["reason"] == "episode Succ" and kv.stages[0].reward is None
    assert kv.stages[0].recommended[0].product_id == REF
    g = cat.get("grpo/val/10.jsonl")
    gv = g.episode(1)
    assert g.row(1).success is True and g.row(1).stage == 2
    assert (g.row(1).r1, g.row(1).r2, g.row(1).stage1_total, g.row(1).stage2_total) == (None, 1.0, None, 11.5)
    steps = {s.run_id: s.step for s in cat.runs()}
    assert steps["grpo/val/10.jsonl"] == 10 and steps["grpo/val/2.jsonl"] == 2 and steps["eval-a"] is None
    assert gv.stages[0].turns[0].think == "hm" and gv.stages[0].final_answer == "@REC myntra:1"
    assert gv.stages[0].reward.total == 11.5 and gv.stages[0].reward.components["R_tool"] == 0.25

    make_run(root, "eval-b", [line(episode("t1"))])  # a new run appears
    assert "eval-b" in {s.run_id for s in cat.runs()}
    with pytest.raises(ConfigError, match="does not exist"):
        RunCatalog([tmp_path / "nope"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="holds no run"):
        RunCatalog([tmp_path / "empty"])


def test_explicit_targets_are_named_after_their_directory_and_uniquified(tmp_path):
    a = make_run(tmp_path / "x", "same", [line(episode("t1"))])
    b = make_run(tmp_path / "y", "same", [line(episode("t1"))])
    cat = RunCatalog([a, b / "results.jsonl"])
    assert cat.run_ids() == ["same", "same-2"]


# --------------------------------------------------------------------------- compare


def test_compare_transitions_and_bootstrap(tmp_path):
    tasks = [make_task(f"t{i}") for i in range(40)]
    # a: t0..t19 succeed; b: t10..t29 succeed -> won t20..t29, lost t0..t9, both t10..t19, neither t30..t39
    ra = [episode(t.task_id, succ=i < 20, acc=0.5) for i, t in enumerate(tasks)]
    rb = [episode(t.task_id, succ=10 <= i < 30, acc=0.75) for i, t in enumerate(tasks)]
    ia = index_of(make_run(tmp_path, "a", [line(r) for r in ra], tasks))
    ib = index_of(make_run(tmp_path, "b", [line(r) for r in rb], tasks))
    c = compare(ia, ib, n_boot=500, seed=1)
    assert c.n_pairs == 40 and c.same_benchmark
    assert {k: len(v) for k, v in c.transitions.items()} == {"won": 10, "lost": 10, "both": 10, "neither": 10}
    assert {p.task_id for p in c.transitions["won"]} == {f"t{i}" for i in range(20, 30)}
    won = c.transitions["won"][0]
    assert ia.row(won.line_a).task_id == ib.row(won.line_b).task_id == won.task_id
    d = {m.metric: m for m in c.deltas}
    assert d["Succ"].delta == 0.0 and d["Succ"].ci_low < 0.0 < d["Succ"].ci_high and d["Succ"].n == 40
    assert d["Acc"].delta == pytest.approx(0.25) and (d["Acc"].ci_low, d["Acc"].ci_high) == pytest.approx((0.25, 0.25))
    # b gets more successes: the true delta of 0.25 is inside the interval
    rc = [episode(t.task_id, succ=i < 30, acc=0.5) for i, t in enumerate(tasks)]
    ic = index_of(make_run(tmp_path, "c", [line(r) for r in rc], tasks))
    s = {m.metric: m for m in compare(ia, ic, n_boot=500).deltas}["Succ"]
    assert s.delta == pytest.approx(0.25) and s.ci_low <= 0.25 <= s.ci_high and s.ci_low > 0.0
    other = index_of(make_run(tmp_path, "other", [line(episode("zzz"))]))
    with pytest.raises(ValueError, match="share no scored episode"):
        compare(ia, other)


def test_paired_bootstrap_ci_edge_cases():
    assert paired_bootstrap_ci([0.0], [1.0]) == (1.0, 1.0, "exact")
    assert paired_bootstrap_ci([0.0, 1.0], [1.0, 2.0]) == (1.0, 1.0, "exact")
    lo, hi, method = paired_bootstrap_ci([0.0] * 50 + [1.0] * 50, [1.0] * 70 + [0.0] * 30, n_boot=400)
    assert method in ("BCa", "percentile") and lo < 0.2 < hi
    with pytest.raises(ValueError, match="a, b"):
        paired_bootstrap_ci([], [])


# --------------------------------------------------------------------------- live badge, runs() cache


def test_a_finished_run_is_not_live_unless_a_writer_holds_its_lock(tmp_path):
    import fcntl
    import time

    run = make_run(tmp_path, "done", [line(episode("t1"))], [make_task("t1")])
    f = run / "results.jsonl"
    idx = index_of(run)
    assert idx.summary.live  # just written, no summary.json yet
    (run / "summary.json").write_text("{}")
    now = time.time()
    os.utime(run / "summary.json", (now, now))
    os.utime(f, (now - 5, now - 5))
    assert not idx.summary.live  # changed recently, but the run wrote its summary after it
    os.utime(f, (now + 1, now + 1))
    assert idx.summary.live  # appended to after the summary (a resumed run)
    os.utime(f, (now - 600, now - 600))
    assert not idx.summary.live  # quiet for 10 minutes
    with open(f, "a") as fh:  # a writer holding the lock makes it live whatever the times
        fcntl.flock(fh, fcntl.LOCK_EX)
        os.utime(f, (now - 600, now - 600))
        assert idx.summary.live
        fcntl.flock(fh, fcntl.LOCK_UN)
    assert not idx.summary.live


def test_runs_are_cached_for_a_second_but_changed_files_show_at_once(tmp_path, monkeypatch):
    import shopping_companion.viewer.discovery as discovery

    root = tmp_path / "runs"
    make_run(root / "group", "one", [line(episode("t1"))], [make_task("t1")])
    cat = RunCatalog([root], background_taxonomy=False)
    monkeypatch.setattr(discovery, "RUNS_CACHE_S", 3600.0)  # a loaded machine must not outlast the cache time
    walks = []
    real = discovery._discover
    monkeypatch.setattr(discovery, "_discover", lambda t: walks.append(t) or real(t))
    first = cat.runs()
    assert [s.run_id for s in first] == ["group/one"] and len(walks) == 1
    assert [s.run_id for s in cat.runs()] == ["group/one"] and len(walks) == 1  # cached: no walk
    with open(root / "group" / "one" / "results.jsonl", "a") as fh:  # a run file changed: at once
        fh.write(line(episode("t2")))
    assert cat.runs()[0].n_lines == 2 and len(walks) == 2
    make_run(root / "group", "two", [line(episode("t1"))])  # nested below the target: within the cache time
    monkeypatch.setattr(discovery, "RUNS_CACHE_S", 0.0)  # the cache time is over
    assert {s.run_id for s in cat.runs()} == {"group/one", "group/two"} and len(walks) == 3
