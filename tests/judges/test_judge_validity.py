"""The hand-labelled judge-validity set (tests/fixtures/judge_validity) and the rule judge's
agreement with it (issue 13, item 6; ``benchmarks/bench_judge_validity.py`` prints the details).

The catalog is streamed once per module (a few seconds), keeping only the ids the set names.
"""

from __future__ import annotations

from collections import Counter

import pytest

from benchmarks.bench_judge_validity import (
    TARGET_COUNT,
    TARGET_SUCCESS,
    build_trajectory,
    load_catalog_subset,
    load_fixture,
    make_judge,
    recommended_ids,
    referenced_product_ids,
    run_agreement,
    summarize,
)
from shopping_companion.envs.parsing import parse_action, parse_preferences
from shopping_companion.paths import DataDirError, resolve_data_dir

pytestmark = pytest.mark.slow

SOURCES = {
    "myntra_styles",
    "myntra_catalog",
    "bigbasket",
    "amazon2018_minionerec",
    "bestbuy_algolia",
    "ikea_sa",
    "adidas_us",
}
#: ids the probes name on purpose as not being in the catalog (the non-existent-id adversary)
DELIBERATELY_MISSING = {"myntra_styles:99999999", "bigbasket:0", "ikea_sa:00000001"}


@pytest.fixture(scope="module")
def fx():
    return load_fixture()


@pytest.fixture(scope="module")
def catalog(fx):
    try:
        resolve_data_dir()
    except DataDirError as e:
        pytest.skip(f"no data directory: {e}")
    ids = referenced_product_ids(fx) - set(fx.handwritten)
    return {**load_catalog_subset(ids), **fx.handwritten}


def test_records_parse_and_reference_each_other(fx):
    assert len(fx.probes) >= 250
    assert len({p.probe_id for p in fx.probes}) == len(fx.probes)
    for t in fx.tasks.values():
        assert t.needle_session_ids and set(t.needle_session_ids) <= {r.session_id for r in t.history}
        for ref in t.history:
            assert ref.session_id in fx.sessions, (t.task_id, ref.session_id)
        for g in t.preferences + t.dont_care:
            assert 0 <= g.slot < t.n_products, (t.task_id, g)
        if t.task_type == "addon":
            assert t.voucher is not None and t.budget is not None and t.n_products >= 2
    for p in fx.probes:
        assert p.task_id in fx.tasks, p.probe_id
        assert p.rationale.strip(), p.probe_id
        assert p.tags, p.probe_id
        for s in p.memory_session_ids or []:
            assert s in fx.sessions, (p.probe_id, s)
        if p.stage == 1:
            assert p.returned_ids is None, p.probe_id
            assert p.label.h1 is not None, p.probe_id
            assert p.label.count <= len(fx.tasks[p.task_id].preferences), p.probe_id
        else:
            assert p.label.h1 is None, p.probe_id
            assert parse_action(p.answer).answer is not None, p.probe_id
            assert recommended_ids(p) or "REC" not in p.answer, p.probe_id
            assert p.label.count <= len(fx.tasks[p.task_id].preferences), p.probe_id


def test_coverage(fx):
    by_source = Counter(fx.source_of(p) for p in fx.probes)
    assert set(by_source) == SOURCES
    assert min(by_source.values()) >= 20, by_source
    assert {p.stage for p in fx.probes} == {1, 2}
    assert {fx.tasks[p.task_id].task_type for p in fx.probes} == {"single", "addon"}
    assert {
        t.slots[0].reference_product_id.split(":")[0] for t in fx.tasks.values() if t.task_type == "addon"
    } >= SOURCES - {"amazon2018_minionerec"}  # Amazon 2018 records carry no price, so no budgeted deal there
    share = sum(p.label.success for p in fx.probes) / len(fx.probes)
    assert 0.3 <= share <= 0.7, share
    stage1 = sum(p.stage == 1 for p in fx.probes) / len(fx.probes)
    assert 0.35 <= stage1 <= 0.65, stage1
    tags = Counter(t for p in fx.probes for t in p.tags)
    for needed in (
        "paraphrase_user_words",
        "valid_alternative",
        "attribute_only_in_text",
        "one_violation",
        "avoid",
        "numeric",
        "budget_exact",
        "over_budget",
        "min_spend_not_reached",
        "different_shop",
        "wrong_type",
        "adversary_list_every_value",
        "adversary_contradictory",
        "adversary_wrong_slot",
        "adversary_wrong_attribute",
        "adversary_padding_quotes",
        "adversary_many_products",
        "adversary_unreturned_id",
        "adversary_right_product_hallucinated_prefs",
    ):
        assert tags[needed] >= 1, needed


def test_stage1_answers_parse_as_labelled(fx):
    """Every stage-1 answer labelled with a count > 0 parses into preferences."""
    for p in fx.probes:
        if p.stage == 1 and p.label.count > 0:
            prefs, err = parse_preferences(parse_action(p.answer).answer)
            assert err is None and prefs, (p.probe_id, err)


def test_every_referenced_id_is_in_the_catalog(fx, catalog):
    missing = referenced_product_ids(fx) - set(catalog)
    assert missing == DELIBERATELY_MISSING


def test_trajectories_build(fx):
    for p in fx.probes:
        traj = build_trajectory(p)
        assert traj.stage == p.stage
        if p.stage == 2:
            returned = {i for r in traj.tool_results for i in r.returned_ids}
            assert returned == set(p.returned_ids if p.returned_ids is not None else recommended_ids(p))


def test_rule_judge_agreement_meets_targets(fx, catalog):
    rows = run_agreement(make_judge("rule", catalog, fx.sessions), fx)
    o = summarize(rows)["overall"]
    assert o["success"] >= TARGET_SUCCESS, o
    assert o["count"] >= TARGET_COUNT, o
