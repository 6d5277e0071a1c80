"""Issue 31, item 5: the viewer names every number once, compares custom reward components and
tells checkpoints apart by run and step.

* R1 / R2 are the paper's outcome rewards (R_z of stage 1 / stage 2, Eqs. 6-7) on every page and
  in the export; a stage's total is "S1 total" / "S2 total" (the row attributes ``r1`` / ``r2`` and
  ``stage1_total`` / ``stage2_total`` carry the same names).
* The compare page compares every reward component both runs log, per stage (custom rubric members
  too), with the same bootstrap, and lists the components only one run logs.
* Runs of two checkpoints with the same step in different training runs show apart (policy name,
  the checkpoint of the run's config for runs named the old way, the step).

Rows come from real ``EpisodeResult`` / validation-dump lines written to disk; pages from the real
app (:func:`create_app` over a :class:`RunCatalog`, through Starlette's TestClient) and the real
export. Nothing of ours is mocked."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from shopping_companion.llm.local_transformers import default_policy_name
from shopping_companion.types import EpisodeResult, RewardBreakdown
from shopping_companion.viewer.app import component_groups, create_app, reward_rows
from shopping_companion.viewer.benchmarks import declared_checkpoint, policy_step
from shopping_companion.viewer.compare import COMPARED_METRICS, compare
from shopping_companion.viewer.export import export_run
from shopping_companion.viewer.store import RunCatalog
from tests.viewer.test_viewer_app import local_client
from tests.viewer.test_viewer_store import episode, index_of, line, make_run, make_task, stage2


def scored(
    task_id: str,
    *,
    z1: float,
    t1: float,
    z2: float,
    t2: float,
    trial: int = 0,
    extra1: dict[str, float] | None = None,
    extra2: dict[str, float] | None = None,
    policy: str = "scripted",
) -> EpisodeResult:
    """A two-stage episode whose stages carry outcome rewards ``z1`` / ``z2`` (logged as ``R_z`` and
    ``R1`` / ``R2``, as the built-in outcome reward does), stage totals ``t1`` / ``t2`` and the
    ``extra`` components of a custom rubric."""
    ep = episode(task_id, trial=trial)
    s1, s2 = ep.stages
    s1.reward = RewardBreakdown(
        total=t1, components={"R_z": z1, "R1": z1, "R_tool": 0.5, "R_fmt": 1.0, **(extra1 or {}), "stage": 1.0}
    )
    s2.reward = RewardBreakdown(
        total=t2, components={"R_z": z2, "R2": z2, "R_tool": 0.25, "R_fmt": 1.0, **(extra2 or {}), "stage": 2.0}
    )
    ep.policy = policy
    return ep


def no_wbr(html: str) -> str:
    return html.replace("<wbr>", "")


# --------------------------------------------------------------------------- rows


def test_rows_carry_outcome_rewards_as_r1_r2_and_stage_totals_apart(tmp_path: Path):
    # the researcher's GRPO case: outcome reward 0, stage total 0.625
    two = scored("t1", z1=0.0, t1=0.625, z2=0.25, t2=1.5)
    # a one-stage episode: one stage 2, whose R1 scores the answer's preferences
    one = episode("t2", mode="one_stage")
    one.stages = [stage2()]
    one.stages[0].reward = RewardBreakdown(
        total=2.1, components={"R_z": 0.4, "R2": 0.4, "R1": 0.7, "R_tool": 0.5, "R_fmt": 1.0, "stage": 2.0}
    )
    # a rubric whose outcome member logs only R_z, and one without an outcome member
    only_z = scored("t3", z1=0.3, t1=1.0, z2=0.6, t2=2.0)
    for s in only_z.stages:
        s.reward.components.pop("R1", None)
        s.reward.components.pop("R2", None)
    no_outcome = scored("t4", z1=0.3, t1=1.0, z2=0.6, t2=2.0)
    for s in no_outcome.stages:
        for k in ("R_z", "R1", "R2"):
            s.reward.components.pop(k, None)
    idx = index_of(make_run(tmp_path, "run", [line(e) for e in (two, one, only_z, no_outcome)]))
    rows = {r.task_id: r for r in idx.final_rows()}
    values = {t: (r.r1, r.r2, r.stage1_total, r.stage2_total) for t, r in rows.items()}
    assert values == {
        "t1": (0.0, 0.25, 0.625, 1.5),
        "t2": (0.7, 0.4, None, 2.1),
        "t3": (0.3, 0.6, 1.0, 2.0),
        "t4": (None, None, 1.0, 2.0),
    }


def test_grpo_dump_rows_name_the_outcome_reward_and_the_stage_total_apart(tmp_path: Path):
    d = tmp_path / "val"
    d.mkdir()
    recs = [
        {"score": 0.625, "stage": 1.0, "R_z": 0.0, "R1": 0.0, "R_tool": 0.5, "R_fmt": 1.0, "success": 0.0},
        {"score": 1.75, "stage": 2.0, "R_z": 0.5, "R2": 0.5, "R_tool": 0.25, "R_fmt": 1.0, "success": 1.0},
    ]
    text = "".join(
        json.dumps({"input": "user\nhi\nassistant\n", "output": "<answer>x</answer>", **r}) + "\n" for r in recs
    )
    (d / "60.jsonl").write_text(text)
    idx = index_of(d / "60.jsonl")
    r1, r2 = idx.row(1), idx.row(2)
    assert (r1.r1, r1.r2, r1.stage1_total, r1.stage2_total) == (0.0, None, 0.625, None)
    assert (r2.r1, r2.r2, r2.stage1_total, r2.stage2_total) == (None, 0.5, None, 1.75)
    assert idx.summary.step == 60


# --------------------------------------------------------------------------- reward tables


def test_reward_tables_name_every_number_once():
    def labels(head):
        return [k for k, _, _ in head]

    # stage 1: R_z and R1 are the same number: listed once, as R1; the stage total is not in head
    head, rest = reward_rows({"R_z": 0.5, "R1": 0.5, "R_tool": 0.2, "R_fmt": 1.0, "f_th": 1.0, "total": 1.7}, 1)
    assert labels(head) == ["R1", "R_tool", "R_fmt"] and rest == [("f_th", 1.0)]
    assert "Eq. 6" in head[0][2] and "outcome reward of stage 1" in head[0][2]
    # only R_z logged: it is R2 on stage 2; the stage is read from the components when not given
    head, _ = reward_rows({"R_z": 0.4, "R_tool": 0.2, "stage": 2.0})
    assert [(k, v) for k, v, _ in head] == [("R2", 0.4), ("R_tool", 0.2)]
    # a one-stage answer: R2 (its R_z) and R1 of its preferences, two numbers under two names
    head, _ = reward_rows({"R_z": 0.4, "R2": 0.4, "R1": 0.7, "stage": 2.0})
    assert [(k, v) for k, v, _ in head] == [("R2", 0.4), ("R1", 0.7)]
    # R_z that is not the outcome reward (a custom member keyed R_z): both shown, each once
    head, _ = reward_rows({"R_z": 0.9, "R1": 0.5}, 1)
    assert [(k, v) for k, v, _ in head] == [("R_z", 0.9), ("R1", 0.5)]
    # no stage known (a validation line without one): R_z keeps its name
    head, _ = reward_rows({"R_z": 0.9, "R_fmt": 1.0}, 0)
    assert labels(head) == ["R_z", "R_fmt"]
    groups = component_groups(
        {"s1.R_z": 0.1, "s1.R1": 0.1, "s1.total": 1.0, "s2.R_z": 0.3, "s2.total": 2.0, "R_z": 5.0}
    )
    assert [(g["stage"], labels(g["head"]), g["total_label"]) for g in groups] == [
        ("", ["R_z"], "total"),
        ("s1", ["R1"], "S1 total"),
        ("s2", ["R2"], "S2 total"),
    ]
    assert "R_z + R_tool + R_fmt under the run's rubric" in groups[1]["total_help"]


# --------------------------------------------------------------------------- compare


def _runs(tmp_path: Path, a: list[EpisodeResult], b: list[EpisodeResult], tasks: list) -> tuple:
    ia = index_of(make_run(tmp_path, "a", [line(e) for e in a], tasks))
    ib = index_of(make_run(tmp_path, "b", [line(e) for e in b], tasks))
    return ia, ib


def test_compare_names_outcome_rewards_and_stage_totals_apart(tmp_path: Path):
    tasks = [make_task(f"t{i}") for i in range(12)]
    # B: the same outcome rewards as A (0), but a stage-1 total higher by 0.625 (R_tool + R_fmt)
    a = [scored(t.task_id, z1=0.0, t1=0.0, z2=0.5, t2=1.0) for t in tasks]
    b = [scored(t.task_id, z1=0.0, t1=0.625, z2=0.5, t2=1.0) for t in tasks]
    ia, ib = _runs(tmp_path, a, b, tasks)
    c = compare(ia, ib, n_boot=300)
    assert [d.metric for d in c.main_deltas] == [name for name, _ in COMPARED_METRICS]
    d = {m.metric: m for m in c.main_deltas}
    assert d["R1"].delta == 0.0 and d["R1"].a == d["R1"].b == 0.0
    assert d["S1 total"].delta == pytest.approx(0.625) and d["S1 total"].ci_low > 0
    assert "Eq. 6" in d["R1"].help and "R_z + R_tool + R_fmt" in d["S1 total"].help
    html = local_client(create_app(RunCatalog([tmp_path]))).get("/compare?a=a&b=b").text
    r1 = re.search(r'<tr data-metric="r1"><td title="R1: outcome reward[^"]*">R1</td>(.*?)</tr>', html, re.S)
    s1 = re.search(r'<tr data-metric="stage1_total"><td title="stage-1 total[^"]*">S1 total</td>(.*?)</tr>', html, re.S)
    assert r1 and s1
    assert re.search(r'<span class="" title="CI includes 0">\+0\.000</span>', r1.group(1))  # unmarked
    assert re.search(r'<span class="badge ok" title="CI excludes 0">\+0\.625</span>', s1.group(1))  # green


def test_compare_includes_custom_components_and_lists_one_sided_ones(tmp_path: Path):
    tasks = [make_task(f"t{i}") for i in range(10)]
    # both runs score with a custom rubric logging `few_turns` on stage 2 (2 trials per task);
    # A also logs `brevity` on stage 1, B `politeness` on stage 2
    a = [
        scored(t.task_id, z1=0.5, t1=1.5, z2=0.5, t2=2.0, trial=k, extra1={"brevity": 0.5}, extra2={"few_turns": 0.2})
        for t in tasks
        for k in (0, 1)
    ]
    b = [
        scored(
            t.task_id,
            z1=0.5,
            t1=1.5,
            z2=0.5,
            t2=2.0,
            trial=k,
            extra2={"few_turns": 0.3 + 0.1 * (i % 2), "politeness": 1.0},
        )
        for i, t in enumerate(tasks)
        for k in (0, 1)
    ]
    ia, ib = _runs(tmp_path, a, b, tasks)
    c = compare(ia, ib, n_boot=300)
    comps = {m.metric: m for m in c.component_deltas}
    few = comps["s2 few_turns"]
    assert few.key == "s2.few_turns" and few.n == 20 and few.n_tasks == 10
    assert few.delta == pytest.approx(0.15) and few.clustered and few.ci_low <= 0.15 <= few.ci_high and few.ci_low > 0
    # the built-in components per stage are there too; R1 / R2 / the totals are not repeated
    for name in ("s1 R_tool", "s1 R_fmt", "s2 R_tool", "s2 R_fmt"):
        assert name in comps, sorted(comps)
    assert not {"s1 R_z", "s1 R1", "s2 R_z", "s2 R2", "s1 total", "s2 total", "s1 stage"} & set(comps)
    assert c.components_only_a == ["s1 brevity"] and c.components_only_b == ["s2 politeness"]
    html = local_client(create_app(RunCatalog([tmp_path]))).get("/compare?a=a&b=b").text
    table = html[html.index('<table class="deltas components">') :]
    table = table[: table.index("</table>")]
    row = re.search(
        r'<tr data-metric="s2\.few_turns"><td title="few_turns[^"]*">s2 few_turns</td>(.*?)</tr>', table, re.S
    )
    assert row and '<span class="badge ok" title="CI excludes 0">+0.150</span>' in row.group(1)
    assert re.search(r'only in A \(a\), not compared: <span class="mono">s1 brevity</span>', html)
    assert re.search(r'only in B \(b\), not compared: <span class="mono">s2 politeness</span>', html)


def test_compare_keeps_an_r_z_that_is_not_the_outcome_reward(tmp_path: Path):
    tasks = [make_task(f"t{i}") for i in range(4)]
    a = [scored(t.task_id, z1=0.5, t1=1.0, z2=0.5, t2=1.0) for t in tasks]
    b = [scored(t.task_id, z1=0.5, t1=1.0, z2=0.5, t2=1.0) for t in tasks]
    for e in a + b:
        e.stages[1].reward.components["R_z"] = 0.9  # a custom member keyed R_z; R2 stays the outcome reward
    c = compare(*_runs(tmp_path, a, b, tasks), n_boot=100)
    names = {d.metric for d in c.component_deltas}
    assert "s2 R_z" in names and "s1 R_z" not in names and "s2 R2" not in names


def test_compare_component_logged_by_both_runs_but_no_common_pair(tmp_path: Path):
    tasks = [make_task(f"t{i}") for i in range(4)]
    a = [
        scored(t.task_id, z1=0.5, t1=1.0, z2=0.5, t2=1.0, extra2={"x": 1.0} if i == 0 else None)
        for i, t in enumerate(tasks)
    ]
    b = [
        scored(t.task_id, z1=0.5, t1=1.0, z2=0.5, t2=1.0, extra2={"x": 1.0} if i == 1 else None)
        for i, t in enumerate(tasks)
    ]
    c = compare(*_runs(tmp_path, a, b, tasks), n_boot=100)
    assert c.components_unpaired == ["s2 x"] and "s2 x" not in {d.metric for d in c.deltas}


# --------------------------------------------------------------------------- pages and export


def test_episode_pages_and_export_use_the_same_names(tmp_path: Path):
    tasks = [make_task("t1")]
    run = make_run(tmp_path, "grpo-ckpt", [line(scored("t1", z1=0.0, t1=0.625, z2=0.25, t2=1.5))], tasks)
    client = local_client(create_app(RunCatalog([tmp_path])))
    runs = client.get("/").text
    cell = runs[runs.index('<td class="comps') :]
    cell = cell[: cell.index("</td>")]
    assert re.search(r'<strong>s1</strong> <span title="R1: [^"]*">R1</span> <span class="mono">0\.00</span>', cell)
    assert re.search(r'<span title="stage-1 total: [^"]*">S1 total</span> <span class="mono">0\.62</span>', cell)
    assert ">R_z<" not in cell
    rows = client.get("/runs/grpo-ckpt/episodes").text
    heads = re.findall(r"<th[^>]*>([^<]+)</th>", rows[rows.index('id="episodes"') :])
    assert heads[heads.index("Acc") + 1 : heads.index("Acc") + 7] == [
        "R1",
        "R2",
        "S1 total",
        "S2 total",
        "R_tool",
        "R_fmt",
    ]
    row = re.search(r'<tr data-line="1">(.*?)</tr>', rows, re.S).group(1)
    nums = re.findall(r'<td class="num">([^<]*)</td>', row)
    assert nums[2:6] == ["0.000", "0.250", "0.625", "1.500"]  # R1, R2, S1 total, S2 total (after trial, Acc)
    api = client.get("/api/runs/grpo-ckpt/rows?after=0").json()["rows"][0]
    assert (api["r1"], api["r2"], api["stage1_total"], api["stage2_total"]) == (0.0, 0.25, 0.625, 1.5)
    page = client.get("/runs/grpo-ckpt/episodes/1").text
    strip = page[page.index('id="summary"') :]
    assert re.search(r'<span title="R1: [^"]*">R1</span> 0\.000 · <span title="R2: [^"]*">R2</span> 0\.250', strip)
    assert re.search(
        r'<span title="stage-1 total[^"]*">S1 total</span> 0\.625 · <span title="stage-2 total[^"]*">S2 total</span> 1\.500',
        strip,
    )
    s1_table = page[page.index('<table class="reward">') :]
    s1_table = s1_table[: s1_table.index("</table>")]
    assert ">R1<" in s1_table and ">R_z<" not in s1_table and ">S1 total<" in s1_table and ">total<" not in s1_table
    # the side-by-side page shows the same names
    side = client.get("/compare/episode?a=grpo-ckpt&la=1&b=grpo-ckpt&lb=1").text
    # each side: the summary strip and the stage's reward table
    assert side.count(">S1 total<") == 4 and side.count(">S2 total<") == 4 and ">R_z<" not in side
    # the static export: the strip's reward groups and the same table heads
    export_run(RunCatalog([tmp_path]), "grpo-ckpt", tmp_path / "bundle")
    index = (tmp_path / "bundle" / "index.html").read_text(encoding="utf-8")
    shown = index[: index.index('id="export-rows"')]  # the strip (the rows' JSON holds the raw keys)
    assert ">S1 total<" in shown and ">S2 total<" in shown and "s1.total" not in shown and ">R_z<" not in shown
    assert re.search(r'<th class="num" title="R1: [^"]*">R1</th>', index)
    ep = (tmp_path / "bundle" / "episodes" / "1.html").read_text(encoding="utf-8")
    assert ">S1 total<" in ep and ">R_z<" not in ep
    assert run.is_dir()


# --------------------------------------------------------------------------- checkpoints


def test_policy_step_and_declared_checkpoint():
    assert policy_step("local:outcome_only/checkpoint-60") == 60
    assert policy_step("local:exp/global_step_40") == 40
    assert policy_step("local:sft-merged+lora:grpo/checkpoint-120") == 120
    assert policy_step("local:checkpoint-60") == 60  # an old name still has its step
    assert policy_step("local:sft-merged") is None and policy_step(None) is None
    assert policy_step("local:my-checkpoint-60-final") is None
    cfg = {"backend": {"kind": "local", "model_path": "/x/runs/grpo/outcome_tool/checkpoint-60"}}
    assert declared_checkpoint(cfg) == ("outcome_tool/checkpoint-60", 60)
    cfg = {"backend": {"kind": "local", "model_path": "/ck/exp/global_step_40/actor", "adapter": "/a/lora"}}
    assert declared_checkpoint(cfg) == ("exp/global_step_40+lora:lora", 40)
    assert declared_checkpoint({"backend": {"kind": "openai", "model": "m"}}) == (None, None)
    assert declared_checkpoint(None) == (None, None)


def test_two_checkpoints_of_different_runs_show_apart(tmp_path: Path):
    """Two TRL checkpoints of step 60 of different GRPO runs, evaluated with the local backend
    (policy names from the backend's own rule), plus the same checkpoint evaluated before the
    names carried the run (policy ``local:checkpoint-60``; its config.yaml names the path)."""
    root = tmp_path / "runs"
    tasks = [make_task(f"t{i}") for i in range(6)]
    ckpts = {name: tmp_path / "grpo" / name / "checkpoint-60" for name in ("outcome_only", "outcome_tool")}
    names = {name: default_policy_name(path) for name, path in ckpts.items()}
    assert names == {
        "outcome_only": "local:outcome_only/checkpoint-60",
        "outcome_tool": "local:outcome_tool/checkpoint-60",
    }
    policies = {**names, "old": "local:checkpoint-60"}
    for run, policy in policies.items():
        eps = [scored(t.task_id, z1=0.5, t1=1.0, z2=0.5, t2=1.0, policy=policy) for t in tasks]
        d = make_run(root, f"eval-{run}", [line(e) for e in eps], tasks)
        path = ckpts["outcome_only" if run == "old" else run]
        cfg = (d / "config.yaml").read_text() + f"backend:\n  kind: local\n  model_path: {path}\n"
        (d / "config.yaml").write_text(cfg)
    client = local_client(create_app(RunCatalog([root])))
    summaries = {s["run_id"]: s for s in client.get("/api/runs").json()["runs"]}
    assert {k: (v["policy"], v["step"], v["checkpoint"]) for k, v in summaries.items()} == {
        "eval-outcome_only": ("local:outcome_only/checkpoint-60", 60, None),
        "eval-outcome_tool": ("local:outcome_tool/checkpoint-60", 60, None),
        "eval-old": ("local:checkpoint-60", 60, "outcome_only/checkpoint-60"),
    }
    html = no_wbr(client.get("/").text)
    cells = re.findall(r'<td class="policy">(.*?)</td>', html, re.S)
    assert len(cells) == 3 and len(set(cells)) == 3
    for run in ("outcome_only", "outcome_tool"):
        assert any(f"local:{run}/checkpoint-60" in c and "step 60" in c for c in cells)
    assert any("local:checkpoint-60" in c and "checkpoint outcome_only/checkpoint-60" in c for c in cells)
    cmp = no_wbr(client.get("/compare?a=eval-outcome_only&b=eval-outcome_tool").text)
    assert (
        "(local:outcome_only/checkpoint-60 · step 60)" in cmp and "(local:outcome_tool/checkpoint-60 · step 60)" in cmp
    )
    options = re.findall(r"<option value=\"eval-[^\"]+\"[^>]*>([^<]+)</option>", cmp)
    assert len(options) == 6 and len(set(options)) == 3  # two pickers, three runs each, all told apart
    assert any("local:checkpoint-60 [outcome_only/checkpoint-60] · step 60" in o for o in options)
    strip = no_wbr(client.get("/runs/eval-outcome_tool/episodes").text)
    assert "local:outcome_tool/checkpoint-60" in strip and "step 60" in strip
