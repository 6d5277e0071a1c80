"""``shopcomp rescore`` on a real run: the ``reference`` run of the viewer's runs
(tests/viewer/viewer_runs.py: the reference policy through the real ``shopcomp eval``, rule
judge, BM25, memory, the paper's rubric) re-scored through the real command, without a policy.

Under ``configs/rewards/paper.yaml`` (the rubric the run was scored with) every stored verdict and
reward comes back exactly; under ``configs/rewards/outcome_only.yaml`` the verdicts and every
component stay and only the totals change, by the tool-wise reward that rubric weighs 0. The new
runs have their own identity, resume without re-scoring, refuse another rubric under the same
name, and the viewer's compare page shows a source and a rescored run side by side."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from shopping_companion.benchmark.report import final_results, read_results, result_key
from shopping_companion.cli import app
from shopping_companion.viewer.store import RunCatalog, compare
from tests.viewer.viewer_runs import viewer_runs  # noqa: F401, F811  (the viewer's reference runs, a session fixture)

pytestmark = pytest.mark.slow

REWARDS = Path(__file__).resolve().parents[2] / "configs" / "rewards"


def _rescore(source, rubric: str, name: str) -> str:
    out = CliRunner().invoke(app, ["rescore", str(source), "--reward-config", rubric, "--name", name])
    assert out.exit_code == 0, out.output + repr(out.exception)
    return out.output


def _by_key(path):
    return {result_key(r): r for r in final_results(read_results(path))}


@pytest.fixture(scope="module")
def rescored(viewer_runs):  # noqa: F811
    """``(runs dir, source results, paper-rescored results, outcome_only-rescored results)``, each
    results dict keyed by episode; the two rescored runs are ``reference-paper`` and
    ``reference-outcome`` beside the source ``reference``."""
    runs = viewer_runs.cli_runs
    _rescore(runs / "reference", str(REWARDS / "paper.yaml"), "reference-paper")
    _rescore(runs / "reference", str(REWARDS / "outcome_only.yaml"), "reference-outcome")
    return (
        runs,
        _by_key(runs / "reference" / "results.jsonl"),
        _by_key(runs / "reference-paper" / "results.jsonl"),
        _by_key(runs / "reference-outcome" / "results.jsonl"),
    )


def test_same_rubric_reproduces_the_stored_scores_exactly(rescored):
    runs, src, paper, _ = rescored
    assert paper.keys() == src.keys() and len(src) == 4 * 2
    for key, old in src.items():
        new = paper[key]
        assert new.error is None and old.error is None
        assert (new.acc, new.succ) == (old.acc, old.succ)
        assert len(new.stages) == len(old.stages) == 2
        for a, b in zip(new.stages, old.stages):
            assert a.trajectory == b.trajectory  # the policy did not run again
            assert a.verdict == b.verdict and a.reward == b.reward, key
        assert (new.seed, new.wall_s, new.simulator, new.policy) == (old.seed, old.wall_s, old.simulator, old.policy)
    src_id = json.loads((runs / "reference" / "results.identity.json").read_text())
    new_id = json.loads((runs / "reference-paper" / "results.identity.json").read_text())
    assert new_id["config_sha256"] != src_id["config_sha256"]
    assert new_id["rescored_from"] == {
        "run": str((runs / "reference").resolve()),
        "config_sha256": src_id["config_sha256"],
    }
    assert new_id["rubric"] == src_id["rubric"] and new_id["policy"] == src_id["policy"]
    summary = json.loads((runs / "reference-paper" / "summary.json").read_text())
    assert summary["meta"]["rescored_from"]["run"] == str((runs / "reference").resolve())
    assert summary["summary"]["n_scored"] == len(src)
    for f in ("report.md", "results.parquet", "results_stages.parquet", "taxonomy.jsonl", "config.yaml"):
        assert (runs / "reference-paper" / f).is_file(), f


def test_another_rubric_changes_only_what_it_changes(rescored):
    _runs, src, _, outcome = rescored
    assert outcome.keys() == src.keys()
    changed = 0
    for key, old in src.items():
        new = outcome[key]
        assert (new.acc, new.succ) == (old.acc, old.succ)
        for a, b in zip(new.stages, old.stages):
            assert a.verdict == b.verdict  # the same judge
            assert a.reward.components == b.reward.components and a.reward.per_tool_call == b.reward.per_tool_call
            # outcome_only: R = R_z + R_fmt; R_tool (weight 0) is logged but left out of the total
            assert a.reward.total == pytest.approx(b.reward.total - b.reward.components["R_tool"])
            changed += a.reward.total != b.reward.total
    assert changed > 0


def test_rescore_resumes_and_refuses_another_rubric_under_its_name(rescored):
    runs, src, _, _ = rescored
    path = runs / "reference-paper" / "results.jsonl"
    before = path.read_bytes()
    _rescore(runs / "reference", str(REWARDS / "paper.yaml"), "reference-paper")
    assert path.read_bytes() == before  # every key had its result: nothing re-scored, nothing appended
    out = CliRunner().invoke(
        app, ["rescore", str(runs / "reference"), "--reward-config", "outcome_only", "--name", "reference-paper"]
    )
    assert out.exit_code == 2 and "rubric" in " ".join(out.output.split()), out.output
    out = CliRunner().invoke(
        app, ["rescore", str(runs / "reference"), "--reward-config", "paper", "--name", "reference"]
    )
    assert out.exit_code == 2 and "a name of its own" in " ".join(out.output.split()), out.output


def test_a_refused_reward_spec_leaves_no_run_behind(rescored, tmp_path):
    runs, _, _, _ = rescored
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nrewards:\n  - {name: no_such_reward, weight: 1}\n", encoding="utf-8")
    out = CliRunner().invoke(
        app, ["rescore", str(runs / "reference"), "--reward-config", str(bad), "--name", "reference-bad"]
    )
    assert out.exit_code == 2, out.output
    assert not (runs / "reference-bad").exists()


def test_eval_refuses_to_run_a_policy_into_a_rescored_run(rescored):
    runs, _, _, _ = rescored
    run = runs / "reference-outcome"
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    out = CliRunner().invoke(app, ["eval", "--config", str(run / "config.yaml")])
    assert out.exit_code == 2, out.output
    assert "re-scored by `shopcomp rescore`" in " ".join(out.output.split()), out.output
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before  # nothing moved or rewritten


def test_compare_page_shows_source_and_rescored_run(rescored):
    from starlette.testclient import TestClient

    from shopping_companion.viewer.app import create_app

    runs, src, _, _ = rescored
    cat = RunCatalog([runs])
    c = compare(cat.get("reference"), cat.get("reference-outcome"), n_boot=200)
    assert c.same_benchmark and c.n_pairs == len(src)
    deltas = {d.metric: d for d in c.deltas}
    assert deltas["Succ"].delta == 0 and deltas["Acc"].delta == 0
    tool = sum(st.reward.components["R_tool"] for r in src.values() for st in r.stages if st.trajectory.stage == 2)
    assert deltas["S2 total"].delta == pytest.approx(-tool / len(src))
    client = TestClient(create_app(cat), base_url="http://127.0.0.1:8765")
    page = client.get("/compare", params={"a": "reference", "b": "reference-outcome"})
    assert page.status_code == 200 and "reference-outcome" in page.text and "S2 total" in page.text


def test_relative_bench_path_and_unreadable_lines_are_named(rescored, tmp_path, monkeypatch):
    """A source whose ``bench.path`` is relative to another working directory is refused with the
    way out (``--bench``), not a hint to synthesise; with ``--bench`` it re-scores, and a line of
    the source that cannot be read back is named in a note instead of being skipped silently."""
    import shutil

    import yaml

    runs, source, _, _ = rescored
    src = tmp_path / "runs" / "moved"
    shutil.copytree(runs / "reference", src)
    cfg = yaml.safe_load((src / "config.yaml").read_text(encoding="utf-8"))
    bench = Path(cfg["bench"]["path"]).resolve()
    cfg["bench"]["path"] = "elsewhere/bench"
    (src / "config.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    with open(src / "results.jsonl", "a", encoding="utf-8") as fh:
        fh.write('{"task_id": "garbage"\n')
    monkeypatch.chdir(tmp_path)
    args = ["rescore", str(src), "--reward-config", str(REWARDS / "paper.yaml"), "--name", "moved-paper"]
    out = CliRunner().invoke(app, args)
    text = " ".join(out.output.split())
    assert out.exit_code == 2 and "'elsewhere/bench'" in text and "--bench DIR" in text, out.output
    assert "shopcomp synth" not in text and not (src.parent / "moved-paper").exists()
    out = CliRunner().invoke(app, [*args, "--bench", str(bench)])
    text = " ".join(out.output.split())
    assert out.exit_code == 0, out.output + repr(out.exception)
    assert "1 line(s) (line numbers" in text, out.output
    assert _by_key(src.parent / "moved-paper" / "results.jsonl").keys() == source.keys()


def test_a_benchmark_with_other_tasks_is_refused(rescored, tmp_path):
    """The stored trajectories are judged against the benchmark's gold: a benchmark whose tasks are
    not the ones the run was made on (another build with the same task ids, say) is refused
    before anything is written."""
    import shutil

    runs, _, _, _ = rescored
    src = tmp_path / "runs" / "other-tasks"
    shutil.copytree(runs / "reference", src)
    ident = json.loads((src / "results.identity.json").read_text(encoding="utf-8"))
    ident["benchmark_tasks_sha256"] = "0" * 64  # the run was made on other tasks
    (src / "results.identity.json").write_text(json.dumps(ident), encoding="utf-8")
    out = CliRunner().invoke(
        app, ["rescore", str(src), "--reward-config", str(REWARDS / "paper.yaml"), "--name", "other-paper"]
    )
    text = " ".join(out.output.split())
    assert out.exit_code == 2 and "are not the tasks" in text and "0000000000000000" in text, out.output
    assert not (src.parent / "other-paper").exists()


def test_errors_are_explained_with_what_rescore_can_retry(rescored, tmp_path):
    """An episode the source lacks is an error of the rescored run; the summary says how to get it
    (the source's eval, then this command again), not an eval-only flag."""
    import shutil

    from shopping_companion.errors import EXIT_EPISODE_ERRORS

    runs, _, _, _ = rescored
    src = tmp_path / "runs" / "short"
    shutil.copytree(runs / "reference", src)
    lines = (src / "results.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    (src / "results.jsonl").write_text("".join(lines[1:]), encoding="utf-8")  # one trajectory fewer
    out = CliRunner().invoke(
        app, ["rescore", str(src), "--reward-config", str(REWARDS / "paper.yaml"), "--name", "short-paper"]
    )
    text = " ".join(out.output.split())
    assert out.exit_code == EXIT_EPISODE_ERRORS, out.output + repr(out.exception)
    assert "--no-retry-errors" not in text and "--retry-failed" in text, out.output
    assert f"rerun `shopcomp eval --config {src / 'config.yaml'}`" in text and "then this rescore command" in text
