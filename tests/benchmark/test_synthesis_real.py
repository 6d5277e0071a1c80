"""``shopcomp synth --config configs/benchmark/small.yaml`` over the real catalog, the real BM25 index
and real SGD + ShareGPT conversations: every task of both types passes verification, the rule
judge accepts every gold bundle, and the statistics and manifest are written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from shopping_companion.benchmark.synth import load_benchmark, searchable_query
from shopping_companion.benchmark.synthesis.generators import format_money
from shopping_companion.benchmark.synthesis.verify import gold_accepted, leaked_values, unstated_features
from shopping_companion.cli import app
from shopping_companion.judges.rule import RuleJudge, bundle_cost
from shopping_companion.types import Step, ToolResult, Trajectory

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def small_bench(catalog_index_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("synth") / "small"
    res = CliRunner().invoke(
        app,
        [
            "synth",
            "--config",
            str(REPO / "configs/benchmark/small.yaml"),
            "--out",
            str(out),
            "--index-dir",
            str(catalog_index_dir),
        ],
    )
    assert res.exit_code == 0, res.output
    return out, res.output


def test_small_config_builds_both_task_types(small_bench, product_search):
    out, output = small_bench
    b = load_benchmark(out)
    m = b.manifest
    assert m["counts"]["tasks"] == 40 and m["counts"]["single"] == 20 and m["counts"]["addon"] == 20
    assert m["counts"]["test"] == 8 and m["counts"]["train"] == 32
    assert m["verification"]["dropped_tasks"] == 0 and m["verification"]["searchable_checked"]
    assert m["sources"]["catalog"]["sha256"] and m["sources"]["conversations"]["sgd"]["sha256"]
    assert "benchmark written to" in output and "verification:" in output
    for name in ("stats.md", "stats.json", "categories.png", "history.png", "attributes.png", "alternatives.png"):
        assert (out / name).stat().st_size > 0 and name in m["files"]
    stats = json.loads((out / "stats.json").read_text())
    assert stats["attributes_per_task"]["addon"]["mean"] > stats["attributes_per_task"]["single"]["mean"]
    assert stats["needle_top1"]["bm25"]["all"]["n"] == 40

    judge = RuleJudge(lambda ids: {i: product_search.get(i) for i in ids if product_search.get(i) is not None})
    lookup = {}
    for t in b.tasks:
        for pid in t.reference_product_ids:
            lookup[pid] = product_search.get(pid)
    for t in b.tasks:
        v = t.verification
        assert v.resolvable and v.conflict_free and v.gold_accepted and v.searchable is True
        # recheck searchability with the real index, exactly as the build did
        for slot, q, rank in zip(t.slots, v.search_queries, v.search_ranks):
            prefs = [p for p in t.preferences if p.slot == t.slots.index(slot)]
            assert q == searchable_query(slot.product_type, prefs)
            hits = [
                h["product_id"]
                for h in product_search.search(q, shop_id=t.voucher.shop_id if t.voucher else None, top_k=50)
            ]
            assert hits.index(slot.reference_product_id) + 1 == rank
        # the rule judge scores a recommendation of the references as a success (through a trajectory)
        traj = Trajectory(
            task_id=t.task_id,
            stage=2,
            recommended_ids=t.reference_product_ids,
            termination="answered",
            steps=[
                Step(
                    assistant_text="",
                    tool_results=[
                        ToolResult(call_id="c", name="product_view", content="", returned_ids=t.reference_product_ids)
                    ],
                )
            ],
        )
        verdict = judge.judge(t, traj)
        assert verdict.success, (t.task_id, verdict.reasons)
        assert gold_accepted(t, lookup)[0]
        assert not leaked_values(t.preferences, t.instruction)
        assert not unstated_features(t.preferences, [b.sessions[s] for s in t.needle_session_ids])
        hist = [r.session_id for r in t.history]
        assert len(hist) == len(set(hist)) and set(t.needle_session_ids) <= set(hist)
        assert [r.date for r in t.history] == sorted(r.date for r in t.history)
        if t.task_type == "addon":
            refs = [lookup[i] for i in t.reference_product_ids]
            total, discount, same = bundle_cost(refs, t)
            assert same and discount > 0 and total - discount <= t.budget < total
            # deals come from every priced source (Myntra INR, Best Buy USD, IKEA SAR, ...)
            assert t.currency == refs[0].currency and format_money(t.budget, t.currency) in t.instruction
        else:
            assert t.voucher is None and 1 <= len(t.preferences) <= 3
    # the budget is tight: in most deals, swapping one product for another of its type breaks it
    tight = [t.verification.over_budget_share for t in b.tasks if t.task_type == "addon"]
    assert sum(x > 0 for x in tight if x is not None) >= len(tight) // 2


def test_rerun_after_interrupt_matches_and_cli_errors_are_messages(
    catalog_index_dir, catalog_products, sgd_sessions, product_search, tmp_path
):
    from shopping_companion.benchmark.synth import build_benchmark, load_synth_config
    from shopping_companion.memory.loaders import load_sharegpt

    runner = CliRunner()
    bad = tmp_path / "bad.yaml"
    bad.write_text("n_tasks: -3\nunknown_key: 1\n")
    res = runner.invoke(
        app, ["synth", "--config", str(bad), "--out", str(tmp_path / "b"), "--index-dir", str(catalog_index_dir)]
    )
    assert (
        res.exit_code == 2 and "n_tasks" in res.output and "unknown_key" in res.output and "Traceback" not in res.output
    )
    res = runner.invoke(app, ["synth", "--config", str(tmp_path / "missing.yaml"), "--out", str(tmp_path / "b")])
    assert res.exit_code == 2 and "does not exist" in res.output

    # an interrupted build resumes to the same bytes as an uninterrupted one
    cfg, _ = load_synth_config(REPO / "configs/benchmark/small.yaml", {"n_tasks": 6})
    pool = list(sgd_sessions) + load_sharegpt(limit=4000)[0]

    class Stop(Exception):
        pass

    def stop(done, total, rec):
        if done == 2:
            raise Stop

    build_benchmark(tmp_path / "full", catalog_products, pool, cfg, searcher=product_search)
    with pytest.raises(Stop):
        build_benchmark(tmp_path / "resumed", catalog_products, pool, cfg, searcher=product_search, progress=stop)
    assert not (tmp_path / "resumed" / "manifest.json").exists()
    build_benchmark(tmp_path / "resumed", catalog_products, pool, cfg, searcher=product_search)
    for name in ("tasks.jsonl", "sessions.jsonl", "manifest.json", "stats.md", "categories.png"):
        assert (tmp_path / "full" / name).read_bytes() == (tmp_path / "resumed" / name).read_bytes(), name


def test_synth_refuses_to_replace_a_finished_benchmark_built_with_other_settings(catalog_index_dir, data_dir, tmp_path):
    out = tmp_path / "bench"
    base = ["synth", "--out", str(out), "--n-tasks", "2", "--addon-share", "0", "--no-sharegpt"]
    base += ["--data-dir", str(data_dir), "--index-dir", str(catalog_index_dir), "--sessions-per-user", "20"]
    res = CliRunner().invoke(app, [*base, "--seed", "5"])
    assert res.exit_code == 0, res.output
    manifest = (out / "manifest.json").read_bytes()
    # another seed over the finished benchmark: refused, nothing touched
    res = CliRunner().invoke(app, [*base, "--seed", "6"])
    assert res.exit_code == 2, res.output
    flat = " ".join(res.output.split())
    assert "holds a finished benchmark built with other settings (seed: 5 → 6)" in flat and "--fresh" in flat
    assert (out / "manifest.json").read_bytes() == manifest
    # the same settings: nothing to do, nothing rewritten (never a moment without a manifest)
    stamps = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    res = CliRunner().invoke(app, [*base, "--seed", "5"])
    assert res.exit_code == 0 and "already holds this build (same settings): nothing to do" in res.output, res.output
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == stamps
    assert "benchmark written to" in res.output  # the counts are still shown
    # --fresh replaces it
    res = CliRunner().invoke(app, [*base, "--seed", "6", "--fresh"])
    assert res.exit_code == 0, res.output
    assert json.loads((out / "manifest.json").read_text())["config"]["seed"] == 6
