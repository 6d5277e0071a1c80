"""Rewards as plug-ins: the Rubric, YAML configs, custom rewards, safe_reward, semantic fallback."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from shopping_companion.errors import ConfigError
from shopping_companion.judges.base import JudgeFailedError
from shopping_companion.registry import REWARDS
from shopping_companion.rewards import (
    RewardContext,
    RewardOutput,
    Rubric,
    compute_reward,
    format_indicators,
    format_reward,
    load_rubric,
    outcome_only_rubric,
    outcome_reward,
    paper_rubric,
    reward,
    rule_product_matcher,
    safe_reward,
    semantic_tool_wise_reward,
    tool_call_reward,
    tool_wise_reward,
    trajectory_tool_results,
)
from shopping_companion.types import (
    FormatFlags,
    Preference,
    Product,
    ProductSlot,
    RewardBreakdown,
    Session,
    SessionRef,
    Step,
    Task,
    ToolCall,
    ToolResult,
    Trajectory,
    Turn,
    Verdict,
)

REPO = Path(__file__).resolve().parents[2]


# --------------------------------------------------------------------------- the oracle
# The Eq. 12 composition exactly as `compute_reward` implemented it before rewards became a rubric
# (frozen here so the rubric can be checked against it, component by component).


def _mean(xs):
    return sum(xs) / len(xs) if xs else 0.0


def eq12_oracle(task: Task, trajectory: Trajectory, verdict: Verdict) -> RewardBreakdown:
    if verdict.stage != trajectory.stage:
        raise ValueError("stage mismatch")
    if verdict.b != (1 if task.task_type == "addon" else 0):
        raise ValueError("b mismatch")
    r_z = outcome_reward(verdict)
    results = trajectory_tool_results(trajectory)
    per_call = [tool_call_reward(r, task) for r in results]
    r_tool = _mean(per_call)
    mem = [x for r, x in zip(results, per_call) if r.name in ("mem_search", "mem_view")]
    prod = [x for r, x in zip(results, per_call) if r.name in ("product_search", "product_view")]
    r_fmt = format_reward(trajectory)
    components = {
        "R_z": r_z,
        "R_tool": r_tool,
        "R_fmt": r_fmt,
        f"R{trajectory.stage}": r_z,
        **format_indicators(trajectory),
        "tool_mem_mean": _mean(mem),
        "tool_prod_mean": _mean(prod),
        "n_tool_calls": float(len(per_call)),
        "success": 1.0 if verdict.success else 0.0,
        "stage": float(trajectory.stage),
    }
    return RewardBreakdown(total=r_z + r_tool + r_fmt, components=components, per_tool_call=per_call)


# --------------------------------------------------------------------------- random cases

SESSIONS = [f"s{i}" for i in range(8)]
PRODUCTS = [f"p:{i}" for i in range(10)]
TOOLS = ["mem_search", "mem_view", "product_search", "product_view", "calculator"]
ANSWERS1 = ['{"preferences": [{"attribute": "colour", "value": "navy"}]}', '{"preferences": []}', "not json {", None]
ANSWERS2 = ["Buy @REC::p:1@ now", "@REC::p:1@ and @REC::p:2@", "broken @REC::@ marker", "no marker", "  ", None]


def random_task(rng: random.Random) -> Task:
    addon = rng.random() < 0.5
    n = rng.randint(2, 3) if addon else 1
    prefs = [Preference(slot=rng.randrange(n), attribute=f"a{i}", value=f"v{i}") for i in range(rng.randint(0, 5))]
    return Task(
        task_id=f"t{rng.randrange(10**6)}",
        task_type="addon" if addon else "single",
        instruction="x",
        user_id="u",
        history=[SessionRef(session_id=s, date="2024-01-01") for s in SESSIONS],
        needle_session_ids=rng.sample(SESSIONS, rng.randint(1, 3)),
        preferences=prefs,
        slots=[ProductSlot(product_type="thing", reference_product_id=p) for p in rng.sample(PRODUCTS, n)],
    )


def random_trajectory(rng: random.Random, stage: int) -> Trajectory:
    steps = []
    for k in range(rng.randint(0, 5)):
        calls, results = [], []
        for c in range(rng.randint(0, 3)):
            name = rng.choice(TOOLS)
            cid = f"c{k}_{c}"
            if rng.random() < 0.85:
                calls.append(ToolCall(name=name, arguments={}, call_id=cid))
            if rng.random() < 0.85:
                pool = SESSIONS if name.startswith("mem") else PRODUCTS
                ids = [rng.choice(pool) for _ in range(rng.randint(0, 6))]
                err = "bad arguments" if rng.random() < 0.15 else None
                results.append(ToolResult(call_id=cid, name=name, content="...", returned_ids=ids, error=err))
        steps.append(
            Step(
                assistant_text="...",
                tool_calls=calls,
                tool_results=results,
                format=FormatFlags(think_ok=rng.random() < 0.8, tool_json_ok=rng.random() < 0.8),
            )
        )
    answer = rng.choice(ANSWERS1 if stage == 1 else ANSWERS2)
    return Trajectory(
        task_id="t",
        stage=stage,
        steps=steps,
        final_answer=answer,
        termination="answered" if answer is not None else "max_turns",
    )


def random_verdict(rng: random.Random, task: Task, stage: int) -> Verdict:
    F, N, b = len(task.preferences), task.n_products, 1 if task.task_type == "addon" else 0
    kw = dict(judge="rand", stage=stage, F=F, N=N, b=b, success=rng.random() < 0.5)
    if stage == 1:
        kw.update(q1=rng.randint(0, 1), m1=rng.randint(0, F), c1=rng.randint(0, N) if b else None)
    else:
        kw.update(
            p2=rng.randint(0, 1),
            q2=rng.randint(0, 1),
            m2=rng.randint(0, F),
            n2=rng.randint(0, N) if b else None,
            u2=rng.randint(0, 1) if b else None,
        )
    return Verdict(**kw)


def test_paper_rubric_equals_eq12_exactly_on_many_cases():
    rng = random.Random(1234)
    rubric = paper_rubric()
    yaml_rubric = Rubric.from_config(REPO / "configs" / "rewards" / "paper.yaml")
    n_nonzero_tool = 0
    for _ in range(600):
        task = random_task(rng)
        stage = rng.choice([1, 2])
        traj = random_trajectory(rng, stage)
        verdict = random_verdict(rng, task, stage)
        want = eq12_oracle(task, traj, verdict)
        for got in (compute_reward(task, traj, verdict), rubric(task, traj, verdict), yaml_rubric(task, traj, verdict)):
            assert got.total == want.total  # bit-for-bit, not approx
            assert got.components == want.components
            assert got.per_tool_call == want.per_tool_call
            assert got == want
        n_nonzero_tool += want.components["R_tool"] > 0
    assert n_nonzero_tool > 100  # the cases exercise the tool-wise term


def test_outcome_only_logs_tool_wise_with_weight_zero():
    rng = random.Random(7)
    oo = outcome_only_rubric()
    oo_yaml = load_rubric(str(REPO / "configs" / "rewards" / "outcome_only.yaml"))
    checked = 0
    for _ in range(200):
        task = random_task(rng)
        stage = rng.choice([1, 2])
        traj, verdict = random_trajectory(rng, stage), None
        verdict = random_verdict(rng, task, stage)
        full = compute_reward(task, traj, verdict)
        for got in (oo(task, traj, verdict), oo_yaml(task, traj, verdict)):
            assert got.total == full.components["R_z"] + full.components["R_fmt"]
            assert got.components == full.components  # R_tool still logged
            assert got.per_tool_call == full.per_tool_call
        if full.components["R_tool"] > 0:
            assert oo(task, traj, verdict).total < full.total
            checked += 1
    assert checked > 20
    assert [m.weight for m in oo.members] == [1.0, 0.0, 1.0]


# --------------------------------------------------------------------------- custom rewards


def brevity_bonus(ctx: RewardContext) -> float:
    """1 when the stage took at most two assistant turns."""
    return 1.0 if len(ctx.trajectory.steps) <= 2 else 0.0


def tool_stats(ctx: RewardContext) -> dict[str, float]:
    n = len(trajectory_tool_results(ctx.trajectory))
    return {"value": -0.1 * n, "n_calls_seen": float(n)}


def _simple_case():
    task = Task(
        task_id="t1",
        instruction="a shirt",
        user_id="u",
        history=[SessionRef(session_id="s1", date="2024-01-01")],
        needle_session_ids=["s1"],
        preferences=[Preference(attribute="colour", value="navy")],
        slots=[ProductSlot(product_type="shirt", reference_product_id="p:1")],
    )
    traj = Trajectory(
        task_id="t1",
        stage=2,
        final_answer="take @REC::p:1@",
        termination="answered",
        steps=[
            Step(
                assistant_text="<tool_call>..</tool_call>",
                tool_calls=[ToolCall(name="product_search", call_id="c0")],
                tool_results=[
                    ToolResult(call_id="c0", name="product_search", content="..", returned_ids=["p:1", "p:2"])
                ],
            ),
            Step(assistant_text="<answer>take @REC::p:1@</answer>"),
        ],
    )
    verdict = Verdict(judge="t", stage=2, F=1, N=1, p2=1, q2=1, m2=1, success=True)
    return task, traj, verdict


def test_custom_reward_by_dotted_path_in_yaml_changes_total(tmp_path):
    task, traj, verdict = _simple_case()
    base = compute_reward(task, traj, verdict)
    cfg = tmp_path / "rubric.yaml"
    cfg.write_text(
        "name: paper_plus\n"
        "rewards:\n"
        "  - {name: outcome, weight: 1}\n"
        "  - {name: tool_wise, weight: 1}\n"
        "  - {name: format, weight: 1}\n"
        f"  - {{path: '{__name__}:brevity_bonus', weight: 0.5}}\n"
        f"  - {{path: '{__name__}:tool_stats', weight: 2, key: call_penalty}}\n"
    )
    rubric = Rubric.from_config(cfg)
    got = rubric(task, traj, verdict)
    assert got.components["brevity_bonus"] == 1.0
    assert got.components["call_penalty"] == pytest.approx(-0.1)
    assert got.components["n_calls_seen"] == 1.0  # a dict reward's other entries are metrics
    assert got.total == pytest.approx(base.total + 0.5 * 1.0 + 2 * -0.1)
    assert got.total != base.total
    assert rubric.name == "paper_plus" and [m.key for m in rubric.members][-2:] == ["brevity_bonus", "call_penalty"]


def test_registered_reward_and_weight_zero_member_is_metric_only():
    @reward("test_constant_bonus", key="bonus", needs=("trajectory",), replace=True)
    def constant(ctx):
        return RewardOutput(0.25, {"bonus_detail": 3.0}, per_turn=[0.1, 0.2])

    try:
        task, traj, verdict = _simple_case()
        base = compute_reward(task, traj, verdict)
        r = Rubric([("outcome", 1), ("tool_wise", 1), ("format", 1), ("test_constant_bonus", 4)])
        got = r(task, traj, verdict)
        assert got.total == pytest.approx(base.total + 1.0)
        assert got.components["bonus"] == 0.25 and got.components["bonus_detail"] == 3.0
        assert got.per_turn == [0.1, 0.2]
        zero = Rubric([("outcome", 1), ("tool_wise", 1), ("format", 1), ("test_constant_bonus", 0)])(
            task, traj, verdict
        )
        assert zero.total == base.total and zero.components["bonus"] == 0.25
        # a format-only rubric scores without the verdict's fields
        only_fmt = Rubric([("format", 2.0)])(task, traj, verdict)
        assert only_fmt.total == pytest.approx(2 * base.components["R_fmt"])
        assert "R_z" not in only_fmt.components
    finally:
        REWARDS.unregister("test_constant_bonus")


def test_rubric_config_errors():
    with pytest.raises(ConfigError, match="unknown reward 'nope'.*outcome"):
        Rubric([("nope", 1)])
    with pytest.raises(ConfigError, match="exactly one of"):
        Rubric.from_config({"rewards": [{"name": "outcome", "path": "x:y"}]})
    with pytest.raises(ConfigError, match="same key"):
        Rubric([("outcome", 1), ("outcome", 0.5)])
    with pytest.raises(ConfigError, match="cannot import module"):
        Rubric.from_config([{"path": "no_such_module_xyz:f"}])
    with pytest.raises(
        ConfigError, match=r"rewards\.0\.wieght: unknown field; allowed: key, name, params, path, weight"
    ):
        Rubric.from_config({"rewards": [{"name": "outcome", "wieght": 1}]})
    with pytest.raises(ConfigError, match="at least one"):
        Rubric([])
    with pytest.raises(ConfigError, match="not a built-in"):
        load_rubric("papers")
    task, traj, verdict = _simple_case()
    bad = Rubric([{"name": "tool_wise", "params": {"semantic": "auto"}}])
    with pytest.raises(ConfigError, match="unknown"):
        bad(task, traj, verdict)


def test_non_finite_or_malformed_custom_values_raise():
    task, traj, verdict = _simple_case()
    with pytest.raises(ValueError, match="not finite"):
        Rubric([(lambda ctx: math.nan, 1)])(task, traj, verdict)
    with pytest.raises(ValueError, match="without its value"):
        Rubric([(lambda ctx: {"a": 1.0}, 1)])(task, traj, verdict)
    with pytest.raises(ValueError, match="expected float"):
        Rubric([(lambda ctx: "high", 1)])(task, traj, verdict)


# --------------------------------------------------------------------------- judge failures


def test_failed_verdict_is_never_scored():
    task, traj, _ = _simple_case()
    failed = Verdict(judge="llm:x", stage=2, F=1, N=1, failed=True, reasons=["no valid reply"])
    with pytest.raises(JudgeFailedError, match="no valid reply"):
        compute_reward(task, traj, failed)
    with pytest.raises(ValueError):  # JudgeFailedError is a ValueError: old callers still see one
        outcome_only_rubric()(task, traj, failed)
    assert safe_reward(task, traj, failed) is None
    assert safe_reward(task, traj, failed, outcome_only_rubric()) is None
    ok = Verdict(judge="t", stage=2, F=1, N=1, p2=1, q2=1, m2=1, success=True)
    assert safe_reward(task, traj, ok) == compute_reward(task, traj, ok)
    # inconsistencies that are bugs still raise through safe_reward
    with pytest.raises(ValueError, match="stage"):
        safe_reward(task, traj, Verdict(judge="t", stage=1, F=1, N=1, q1=1, m1=1))


# --------------------------------------------------------------------------- semantic fallback

SHIRTS = ["Apparel", "Topwear", "Shirts"]


def _p(pid, title, cat=SHIRTS, **attrs):
    return Product(
        product_id=pid,
        title=title,
        source="test",
        shop="T",
        shop_id="S1",
        brand="B",
        price=10.0,
        category_path=list(cat),
        attributes=attrs,
    )


CATALOG = {
    p.product_id: p
    for p in [
        _p("m:1", "Men Navy Shirt", base_colour="Navy Blue", Fabric="Cotton"),
        _p("m:2", "Men Navy Slim Shirt", base_colour="Navy", Fabric="100% Cotton"),
        _p("m:3", "Men Black Shirt", base_colour="Black", Fabric="Cotton"),
        _p("m:4", "Navy Cotton Skirt", cat=["Apparel", "Bottomwear", "Skirts"], base_colour="Navy", Fabric="Cotton"),
    ]
}


def lookup(ids):
    return {i: CATALOG[i] for i in ids if i in CATALOG}


def _shirt_task(ref="gone:7", needles=("s1",)):
    return Task(
        task_id="t",
        instruction="a shirt",
        user_id="u",
        history=[SessionRef(session_id="s1", date="2024-01-01")],
        needle_session_ids=list(needles),
        preferences=[Preference(attribute="colour", value="navy"), Preference(attribute="fabric", value="cotton")],
        slots=[ProductSlot(product_type="shirt", category_path=SHIRTS, reference_product_id=ref)],
    )


def _prod_traj():
    return Trajectory(
        task_id="t",
        stage=2,
        steps=[
            Step(
                assistant_text="..",
                tool_calls=[ToolCall(name="product_search", call_id="a"), ToolCall(name="product_view", call_id="b")],
                tool_results=[
                    ToolResult(
                        call_id="a", name="product_search", content="..", returned_ids=["m:1", "m:3", "m:4", "m:1"]
                    ),
                    ToolResult(call_id="b", name="product_view", content="..", returned_ids=["m:2"]),
                ],
            )
        ],
    )


def test_rule_product_matcher_is_valid_alternative():
    task = _shirt_task()
    assert rule_product_matcher(task, [CATALOG[i] for i in ("m:1", "m:2", "m:3", "m:4")]) == [True, True, False, False]


def test_semantic_fallback_when_reference_unknown_to_catalog():
    task, traj = _shirt_task(ref="gone:7"), _prod_traj()
    exact, per_exact = tool_wise_reward(traj, task)
    assert exact == 0.0 and per_exact == [0.0, 0.0]
    total, per, info = semantic_tool_wise_reward(traj, task, lookup=lookup, mode="auto")
    assert per == [pytest.approx(1 / 3), 1.0]  # m:1 matches, m:3 wrong colour, m:4 not a shirt; dup m:1 once
    assert total == pytest.approx((1 / 3 + 1) / 2)
    assert info == {"tool_semantic_calls": 2.0, "tool_semantic_matched": 2.0}
    # through the rubric and its YAML config
    verdict = Verdict(judge="t", stage=2, F=2, N=1, p2=1, q2=1, m2=2, success=True)
    rb = Rubric.from_config(REPO / "configs" / "rewards" / "paper_semantic.yaml", resources={"lookup": lookup})(
        task, traj, verdict
    )
    assert rb.components["R_tool"] == pytest.approx(total)
    assert rb.per_tool_call == per
    assert rb.components["tool_semantic_calls"] == 2.0
    assert rb.total == pytest.approx(compute_reward(task, traj, verdict).total + total)
    # no reference id at all: same
    assert semantic_tool_wise_reward(traj, _shirt_task(ref=""), lookup=lookup)[1] == per


def test_semantic_fallback_auto_keeps_exact_when_reference_known_and_always_counts_alternatives():
    task, traj = _shirt_task(ref="m:1"), _prod_traj()
    exact = tool_wise_reward(traj, task)
    auto = semantic_tool_wise_reward(traj, task, lookup=lookup, mode="auto")
    assert auto[:2] == exact and auto[2]["tool_semantic_calls"] == 0.0
    assert exact[1] == [pytest.approx(1 / 3), 0.0]
    always = semantic_tool_wise_reward(traj, task, lookup=lookup, mode="always")
    assert always[1] == [pytest.approx(1 / 3), 1.0]  # m:2 is a valid alternative to m:1
    off = semantic_tool_wise_reward(traj, task, lookup=lookup, mode="off")
    assert off[:2] == exact


def test_semantic_fallback_needs_a_lookup_and_a_known_mode():
    task, traj = _shirt_task(ref="gone:7"), _prod_traj()
    # without a lookup an unknown reference id cannot be detected: exact matching applies
    assert semantic_tool_wise_reward(traj, task, mode="auto")[1] == [0.0, 0.0]
    with pytest.raises(ConfigError, match="lookup"):  # no reference at all: records are needed
        semantic_tool_wise_reward(traj, _shirt_task(ref=""), mode="auto")
    with pytest.raises(ConfigError, match="semantic_fallback"):
        semantic_tool_wise_reward(traj, task, lookup=lookup, mode="sometimes")
    verdict = Verdict(judge="t", stage=2, F=2, N=1, p2=1, q2=1, m2=2, success=True)
    with pytest.raises(ConfigError, match="llm_judge"):
        paper_rubric({"lookup": lookup}, semantic_fallback="auto", matcher="llm")(task, traj, verdict)


def test_semantic_fallback_with_custom_matcher_resource_and_memory_sessions():
    task, traj = _shirt_task(ref="gone:7"), _prod_traj()
    calls = []

    def everything_matches(t, products):
        calls.append([p.product_id for p in products])
        return [True] * len(products)

    verdict = Verdict(judge="t", stage=2, F=2, N=1, p2=1, q2=1, m2=2, success=True)
    rb = paper_rubric({"lookup": lookup, "product_matcher": everything_matches}, semantic_fallback="auto")(
        task, traj, verdict
    )
    assert rb.per_tool_call == [1.0, 1.0]
    assert calls == [["m:1", "m:2", "m:3", "m:4"]]  # one matcher call for the whole trajectory

    sessions = {
        "a": Session(session_id="a", turns=[Turn(role="user", content="I only wear NAVY shirts.")]),
        "b": Session(
            session_id="b",
            turns=[Turn(role="user", content="Weather in Paris?"), Turn(role="assistant", content="navy skies")],
        ),
    }
    mem_task = _shirt_task(needles=())
    mem_traj = Trajectory(
        task_id="t",
        stage=1,
        steps=[
            Step(
                assistant_text="..",
                tool_calls=[ToolCall(name="mem_search", call_id="m")],
                tool_results=[ToolResult(call_id="m", name="mem_search", content="..", returned_ids=["a", "b", "zz"])],
            )
        ],
    )
    assert tool_wise_reward(mem_traj, mem_task)[1] == [0.0]
    got = semantic_tool_wise_reward(
        mem_traj, mem_task, session_lookup=lambda ids: {i: sessions[i] for i in ids if i in sessions}
    )
    assert got[1] == [pytest.approx(1 / 3)]  # only the user's own words count; unknown id does not


def test_the_format_rules_version_is_in_the_rubric_description_and_the_run_identity():
    """Issue 31: results scored under the old (vacuous) format rules are another run identity."""
    import dataclasses

    from shopping_companion.benchmark.kit import run_identity
    from shopping_companion.benchmark.run_config import EpisodeConfig
    from shopping_companion.rewards.format import FORMAT_REWARD_VERSION

    rubric = paper_rubric()
    by = {m["name"]: m for m in rubric.describe()["rewards"]}
    assert by["format"]["version"] == FORMAT_REWARD_VERSION == 2
    assert "version" not in by["outcome"] and "version" not in by["tool_wise"]  # rules unchanged: as before
    assert all(Rubric([(f, 1.0)]).describe()["rewards"][0]["version"] == 2 for f in ("f_ans", "f_th", "f_tc", "f_rec"))
    # the same rubric whose format member has no version (how the old rules described it)
    old = Rubric(
        [
            (m.reward if m.key != "R_fmt" else dataclasses.replace(m.reward, version=None), m.weight)
            for m in rubric.members
        ],
        name=rubric.name,
    )
    assert "version" not in old.describe()["rewards"][2]
    cfg = EpisodeConfig()
    assert run_identity(cfg, "p", rubric, "t")["config_sha256"] != run_identity(cfg, "p", old, "t")["config_sha256"]
