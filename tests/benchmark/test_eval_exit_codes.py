"""``shopcomp eval`` end to end under failures: exit status 3 with errored episodes (everything
written, errored rows null in results.parquet), exit 4 when the endpoint goes down mid-run (circuit
breaker; results kept, the rerun resumes), refusal of tasks whose gold products are not in the
catalog (or skipping them with ``--skip-missing-gold``), and ``--force`` for a results file whose
identity was lost. Real synthesised benchmark, index, embedder and judge; the policy is the scripted
OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest
from typer.testing import CliRunner

from shopping_companion.benchmark.report import final_results, read_results, result_key
from shopping_companion.benchmark.synth import write_benchmark
from shopping_companion.cli import app
from tests.openai_server import ScriptedOpenAIServer
from tests.scripted_policy import find_task, policy_script

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def bench(synth_bench):
    return synth_bench(3, seed=31, sessions_per_user=10)  # a short haystack: nothing here depends on its length


@pytest.fixture(scope="module")
def bench_dir(bench, tmp_path_factory):
    return write_benchmark(bench, tmp_path_factory.mktemp("exitbench") / "bench")


def text(out) -> str:
    """The console output with Rich's line wrapping undone."""
    return " ".join(out.output.split())


def _args(bench_dir, index_dir, runs, name, url):
    return [
        "eval",
        "--bench",
        str(bench_dir),
        "--name",
        name,
        "--backend",
        "openai",
        "--model",
        "m",
        "--index-dir",
        str(index_dir),
        "--runs-dir",
        str(runs),
        "--max-turns",
        "6",
        "--max-retries",
        "0",
        "--concurrency",
        "1",
        "--base-url",
        url,
    ]


def test_errored_episodes_exit_3_after_writing_everything_and_are_null_in_parquet(
    bench, bench_dir, catalog_index_dir, tmp_path
):
    import pandas as pd

    inner = policy_script(bench.tasks)
    dead = bench.tasks[1].task_id

    def script(body):
        return {"status": 503, "message": "overloaded"} if find_task(body, bench.tasks).task_id == dead else inner(body)

    runs = tmp_path / "runs"
    with ScriptedOpenAIServer(script) as srv:
        out = CliRunner().invoke(app, _args(bench_dir, catalog_index_dir, runs, "e3", srv.base_url))
    assert out.exit_code == 3, out.output
    assert "1 episode(s) ended with an error (1 backend)" in text(out) and "Exit status 3" in text(out)
    run = runs / "e3"
    res = read_results(run / "results.jsonl")
    assert len(res) == 3 and [r.task_id for r in res if r.error] == [dead]
    for name in ("report.md", "summary.json", "results.parquet", "results_stages.parquet", "taxonomy.jsonl"):
        assert (run / name).is_file(), name
    df = pd.read_parquet(run / "results.parquet").set_index("task_id")
    assert pd.isna(df.loc[dead, "succ"]) and pd.isna(df.loc[dead, "acc"]) and df.loc[dead, "error_kind"] == "backend"
    assert df.drop(index=dead)["succ"].notna().all()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["summary"]["errors_by_kind"] == {"backend": 1}
    assert "## Episodes not scored (errors)" in (run / "report.md").read_text()
    # a healthy rerun retries the backend error and exits 0
    with ScriptedOpenAIServer(policy_script(bench.tasks)) as srv:
        out = CliRunner().invoke(app, _args(bench_dir, catalog_index_dir, runs, "e3", srv.base_url))
    assert out.exit_code == 0, out.output
    assert all(r.error is None for r in read_results(run / "results.jsonl")[-1:])


def test_an_endpoint_that_goes_down_stops_the_run_with_exit_4_and_the_rerun_resumes(
    bench, bench_dir, catalog_index_dir, tmp_path, monkeypatch
):
    from shopping_companion.llm.breaker import ENV_BREAKER_THRESHOLD

    monkeypatch.setenv(ENV_BREAKER_THRESHOLD, "2")  # two consecutive timeouts open the circuit
    inner = policy_script(bench.tasks)

    def script(body):  # the first task is served, then every request times out (the client waits 0.3 s)
        if find_task(body, bench.tasks).task_id == bench.tasks[0].task_id:
            return inner(body)
        return {"delay_s": 2.0}

    runs = tmp_path / "runs"
    args = _args(bench_dir, catalog_index_dir, runs, "down", "")[:-1]
    with ScriptedOpenAIServer(script) as srv:
        out = CliRunner().invoke(app, args + [srv.base_url, "--timeout-s", "0.3", "--max-retries", "1"])
    assert out.exit_code == 4, out.output  # EXIT_SERVICE: the endpoint is down, nothing is wrong with the input
    assert "endpoint is considered down" in text(out) and "rerun the same command to resume" in text(out)
    res = read_results(runs / "down" / "results.jsonl")
    assert res[0].task_id == bench.tasks[0].task_id and res[0].error is None
    # the episode whose requests opened the circuit may be recorded as a backend error; no episode
    # starts after the circuit is open, so the third task has no result
    assert all(r.error is not None for r in res[1:]) and bench.tasks[2].task_id not in {r.task_id for r in res}
    with ScriptedOpenAIServer(policy_script(bench.tasks)) as srv:
        out = CliRunner().invoke(app, args + [srv.base_url])
    assert out.exit_code == 0, out.output
    final = final_results(read_results(runs / "down" / "results.jsonl"))
    assert len({result_key(r) for r in final}) == 3 and all(r.error is None for r in final)


def test_gold_products_missing_from_the_catalog_are_refused_or_skipped(bench, bench_dir, catalog_index_dir, tmp_path):
    d = tmp_path / "bench"
    shutil.copytree(bench_dir, d)
    lines = (d / "tasks.jsonl").read_text().splitlines()
    t = json.loads(lines[0])
    t["slots"][0]["reference_product_id"] = "nowhere:404"
    lines[0] = json.dumps(t)
    (d / "tasks.jsonl").write_text("\n".join(lines) + "\n")
    manifest = json.loads((d / "manifest.json").read_text())
    runs = tmp_path / "runs"
    with ScriptedOpenAIServer(policy_script(bench.tasks)) as srv:
        # the edited file no longer matches the manifest's hash
        out = CliRunner().invoke(app, _args(d, catalog_index_dir, runs, "g", srv.base_url))
        assert out.exit_code == 2 and "does not match manifest.json" in text(out) and "tasks.jsonl" in text(out)
        manifest["files"]["tasks.jsonl"] = hashlib.sha256((d / "tasks.jsonl").read_bytes()).hexdigest()
        (d / "manifest.json").write_text(json.dumps(manifest))
        out = CliRunner().invoke(app, _args(d, catalog_index_dir, runs, "g", srv.base_url))
        assert out.exit_code == 2, out.output
        assert "not in the catalog" in text(out) and t["task_id"] in text(out) and "nowhere:404" in text(out)
        assert "--skip-missing-gold" in text(out) and not (runs / "g" / "results.jsonl").exists()
        out = CliRunner().invoke(app, _args(d, catalog_index_dir, runs, "g", srv.base_url) + ["--skip-missing-gold"])
        assert out.exit_code == 0, out.output
    res = read_results(runs / "g" / "results.jsonl")
    assert sorted(r.task_id for r in res) == sorted(x.task_id for x in bench.tasks[1:])


def test_a_lost_identity_is_refused_and_force_adopts_the_configuration(bench, bench_dir, catalog_index_dir, tmp_path):
    runs = tmp_path / "runs"
    with ScriptedOpenAIServer(policy_script(bench.tasks)) as srv:
        args = _args(bench_dir, catalog_index_dir, runs, "idn", srv.base_url)
        assert CliRunner().invoke(app, args + ["--limit", "1"]).exit_code == 0
        (runs / "idn" / "results.identity.json").unlink()
        out = CliRunner().invoke(app, args)
        assert out.exit_code == 2 and "results.identity.json is missing" in text(out) and "--force" in text(out)
        out = CliRunner().invoke(app, args + ["--force"])
        assert out.exit_code == 0, out.output
    assert len(read_results(runs / "idn" / "results.jsonl")) == 3
    assert (runs / "idn" / "results.identity.json").is_file()
