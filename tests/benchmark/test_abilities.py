"""Ability-tagged synthesis, the dated-revision rule of the conflict detector, stress variants and
the per-ability / per-variant metrics, on a small benchmark built from a test catalog and real SGD
conversations, played in real environments by scripted policies (the gold-knowing policy, with
the preferences of a history reader or of the original task).
"""

from __future__ import annotations

import json
from datetime import date

import pytest

from shopping_companion.benchmark.metrics import group_table, stage1_success, stress_drops, task_abilities, task_stress
from shopping_companion.benchmark.stress import stress_tasks, write_stress_benchmark
from shopping_companion.benchmark.synth import SynthConfig, build_benchmark
from shopping_companion.benchmark.synthesis.conflicts import (
    Conflict,
    ConflictDetector,
    WantedFeature,
    contradicts,
    drop_superseded,
)
from shopping_companion.benchmark.synthesis.verify import states_value, unstated_features
from benchmarks.reward_hacking_policies import InMemoryMemory, InMemoryProducts
from shopping_companion.envs.env import EnvConfig, ShoppingCompanionEnv
from shopping_companion.envs.scripted import GoldPolicy
from shopping_companion.envs.tools import ToolBox
from shopping_companion.errors import DataError
from shopping_companion.judges.rule import RuleJudge
from shopping_companion.types import ABILITIES, EpisodeResult, Preference, Session, Task, Turn
from tests.benchmark.test_synthesis import amazon_products, small_config
from tests.env_support import run


@pytest.fixture(scope="module")
def products():
    return amazon_products()


@pytest.fixture(scope="module")
def built(products, sgd_sessions, tmp_path_factory):
    d = tmp_path_factory.mktemp("abilities") / "bench"
    cfg = small_config(n_tasks=10, abilities="all", minilm_tasks=0)
    return d, build_benchmark(d, products, sgd_sessions[:600], cfg)


class Kit:
    """Real environments over in-process tool backends (keyword search over the products and over
    the task's history, benchmarks/reward_hacking_policies.py) and the rule judge with the
    benchmark's sessions (its grounding rule: a preference stated in no user turn is spurious)."""

    def __init__(self, products, sessions):
        self.products = InMemoryProducts(products)
        self.by_id = {p.product_id: p for p in products}
        self.sessions = dict(sessions)

    def run(self, task: Task, policy) -> EpisodeResult:
        judge = RuleJudge(lambda ids: {i: self.by_id[i] for i in ids if i in self.by_id}, sessions=self.sessions)
        memory = InMemoryMemory([self.sessions[h.session_id] for h in task.history])
        env = ShoppingCompanionEnv(task, ToolBox(self.products, memory), judge, EnvConfig())
        return run(env, policy)


@pytest.fixture(scope="module")
def kit(products, built):
    return Kit(products, built[1].sessions)


def _user(s: Session) -> list[str]:
    return [t.content for t in s.turns if t.role == "user"]


def _dates(t: Task) -> dict[str, str]:
    return {h.session_id: h.date for h in t.history}


def test_config_and_cli_values_of_abilities():
    assert SynthConfig(abilities="all").abilities == list(ABILITIES)
    assert SynthConfig(abilities="temporal,extraction").abilities == ["extraction", "temporal"]
    assert SynthConfig().abilities == ["extraction"]
    with pytest.raises(ValueError, match=r"abilities: unknown \['recall'\]; allowed: 'all' or a list of extraction"):
        SynthConfig(abilities=["recall"])


def test_every_ability_is_built_verified_and_counted(built):
    d, out = built
    by = {a: [t for t in out.tasks if t.abilities == [a]] for a in ABILITIES}
    assert {a: len(v) for a, v in by.items()} == {a: 2 for a in ABILITIES}
    for t in out.tasks:
        v = t.verification
        assert v.resolvable and v.conflict_free and v.gold_accepted
        assert not unstated_features(t.preferences, [out.sessions[s] for s in t.needle_session_ids])
    for t in by["knowledge_update"]:
        (old,) = t.superseded
        gold = next(p for p in t.preferences if (p.slot, p.attribute) == (old.slot, old.attribute))
        assert contradicts(old.attribute, gold.value, old.value)
        (stale_id,) = t.stale_session_ids
        stale, dates = out.sessions[stale_id], _dates(t)
        assert any(states_value(old.attribute, old.value, u) for u in _user(stale))
        revising = [
            s
            for s in t.needle_session_ids
            if any(states_value(gold.attribute, gold.value, u) for u in _user(out.sessions[s]))
        ]
        assert revising and all(dates[s] > dates[stale_id] for s in revising)  # the revision is later
    for t in by["multi_session"]:
        slot0 = [p for p in t.preferences if p.slot == 0]
        stating = [
            s
            for s in t.needle_session_ids
            if any(states_value(p.attribute, p.value, u) for p in slot0 for u in _user(out.sessions[s]))
        ]
        assert len(slot0) >= 3 and len(stating) >= 3
    for t in by["temporal"]:
        (other,) = t.superseded
        gold = next(p for p in t.preferences if p.attribute == other.attribute)
        dates = _dates(t)
        target = [
            s
            for s in t.needle_session_ids
            if any(states_value(gold.attribute, gold.value, u) for u in _user(out.sessions[s]))
        ]
        month = date.fromisoformat(dates[target[0]]).strftime("%B %Y")
        assert month in t.instruction
        assert date.fromisoformat(dates[t.stale_session_ids[0]]).strftime("%B %Y") != month
    for t in by["abstention"]:
        (a,) = t.unstated
        assert a.attribute in {p.attribute for p in t.dont_care}
        said = [u for s in t.needle_session_ids for u in _user(out.sessions[s])]
        assert not any(states_value(a.attribute, a.value, u) for u in said)
    st = json.loads((d / "stats.json").read_text())
    assert st["tasks"]["by_ability"]["abilities"]["temporal"]["all"] == 2
    assert "| knowledge_update |" in (d / "stats.md").read_text()


def test_a_dated_revision_is_not_a_conflict():
    det = ConflictDetector({"colour": {("black",), ("navy", "blue")}})
    feat = WantedFeature(0, "colour", "Navy Blue", frozenset({"shirts"}))
    old = Session(session_id="old", turns=[Turn(role="user", content="I always wear black shirts, it's my thing.")])
    rev = Session(
        session_id="rev",
        turns=[Turn(role="user", content="I used to love black shirts. Navy blue is what I want these days.")],
    )
    found = det.find(old, [feat], cache=False)
    assert [c.kind for c in found] == ["other_value"]
    assert det.find(rev, [feat], cache=False) == []  # "used to": a past preference, no conflict
    dates = {"old": "2023-01-05", "rev": "2023-02-01"}
    assert drop_superseded(found, dates, {feat.describe(): ["rev"]}) == []
    # revised BEFORE the statement: the statement still conflicts
    assert drop_superseded(found, {"old": "2023-03-01", "rev": "2023-02-01"}, {feat.describe(): ["rev"]}) == found
    undated = [Conflict("x", 0, "I always wear black", feat.describe(), "other_value")]
    assert drop_superseded(undated, dates, {feat.describe(): ["rev"]}) == undated


def _reader(task: Task, sessions: dict[str, Session], latest: bool) -> list[Preference]:
    """A scripted reader of the history in date order: for each gold attribute, the values the
    history states among those it knows for that attribute (the gold and the superseded ones); the
    first mention, or the latest new one."""
    out = []
    for p in task.preferences:
        cands = [p.value] + [q.value for q in task.superseded if (q.slot, q.attribute) == (p.slot, p.attribute)]
        seen: list[str] = []
        last: str | None = None
        for ref in task.history:
            s = sessions.get(ref.session_id)
            said = [v for v in cands if s is not None and any(states_value(p.attribute, v, u) for u in _user(s))]
            new = [v for v in said if v not in seen]
            seen += new
            last = new[-1] if new else last
        out.append(Preference(slot=p.slot, attribute=p.attribute, value=last if latest else seen[0]))
    return out


def test_reading_the_first_mention_fails_knowledge_updates_reading_the_latest_does_not(built, kit):
    _d, out = built
    ku = [t for t in out.tasks if "knowledge_update" in t.abilities]
    acc = {}
    for latest in (False, True):
        rs = [kit.run(t, GoldPolicy(t, preferences=_reader(t, out.sessions, latest))) for t in ku]
        acc[latest] = group_table({t.task_id: t for t in ku}, rs, task_abilities)["two_stage:none"]["knowledge_update"]
    assert acc[True]["acc"] == 1.0 and acc[True]["succ1"] == 1.0
    assert acc[False]["acc"] < acc[True]["acc"] and acc[False]["succ1"] == 0.0


def test_stress_variants_keep_the_gold_policy_and_catch_invented_preferences(built, kit, tmp_path):
    d, out = built
    with pytest.raises(DataError, match="allowed: needle_removed, stale_before, needle_oldest"):
        stress_tasks(out.tasks, out.sessions, ["shuffled"])
    sout = write_stress_benchmark(d, tmp_path / "stress")
    variants = [t for t in sout.tasks if t.stress]
    kinds = {t.stress for t in variants}
    assert kinds == {"needle_removed", "stale_before", "needle_oldest"}
    assert sout.manifest["stress"]["skipped"]["needle_oldest"] == {"temporal": 2}
    for t in variants:
        orig = next(o for o in out.tasks if o.task_id == t.variant_of)
        assert sorted(h.date for h in t.history) == [h.date for h in t.history]
        if t.stress == "needle_removed":
            assert not t.preferences and not set(orig.needle_session_ids) & {h.session_id for h in t.history}
        if t.stress == "needle_oldest":
            firsts = {h.session_id for h in t.history[: len(orig.needle_session_ids) + len(orig.stale_session_ids)]}
            assert set(orig.needle_session_ids) <= firsts
        if t.stress == "stale_before":
            sid = t.stale_session_ids[-1]
            pos = [h.session_id for h in t.history]
            assert pos.index(sid) < min(pos.index(n) for n in t.needle_session_ids)
    kit.sessions.update(sout.sessions)
    tasks = {t.task_id: t for t in sout.tasks}
    gold = [kit.run(t, GoldPolicy(t)) for t in sout.tasks]
    by = group_table(tasks, gold, task_stress)["two_stage:none"]
    assert by["original"]["succ"] > 0
    for v in ("needle_removed", "stale_before", "needle_oldest"):
        assert by[v]["succ"] >= by["original"]["succ"], v  # the gold-knowing policy keeps its Succ
    assert all(x["succ"] is None or x["succ"] >= 0 for x in stress_drops({"gold": by})["gold"].values())
    removed = [t for t in variants if t.stress == "needle_removed"]
    always = [
        kit.run(t, GoldPolicy(t, preferences=tasks[t.variant_of].preferences)) for t in removed
    ]  # reports the preferences the history no longer holds
    assert [stage1_success(r) for r in always] == [False] * len(removed)
    assert all(r.stages[-1].verdict.success for r in always)  # stage 2 asks only for the product type...
    cell = group_table(tasks, always, task_stress)["two_stage:none"]["needle_removed"]
    assert cell["succ1"] == 0.0 and cell["succ"] == 0.0  # ...but Succ needs stage 1 right on this variant


def test_a_stress_directory_that_holds_something_else_is_refused_untouched(built, tmp_path):
    """``--stress DIR`` never clobbers: the source itself, a file, a directory holding other
    things or another benchmark are refused with nothing changed; an earlier stress benchmark of
    the same source is rewritten."""
    from shopping_companion.benchmark.stress import check_stress_target

    d, _ = built
    with pytest.raises(DataError, match="that is the source benchmark"):
        write_stress_benchmark(d, d)
    afile = tmp_path / "afile"
    afile.write_text("x", encoding="utf-8")
    with pytest.raises(DataError, match="not a directory"):
        check_stress_target(d, afile)
    other = tmp_path / "other"
    other.mkdir()
    (other / "tasks.jsonl").write_text("mine\n", encoding="utf-8")
    with pytest.raises(DataError, match="not empty and not a stress benchmark of"):
        write_stress_benchmark(d, other)
    assert (other / "tasks.jsonl").read_text(encoding="utf-8") == "mine\n"
    with pytest.raises(DataError, match="not a stress benchmark"):
        check_stress_target(d, d.parent)  # a directory holding the source: not its stress output
    again = tmp_path / "again"
    first = write_stress_benchmark(d, again)
    assert write_stress_benchmark(d, again).manifest["stress"] == first.manifest["stress"]
