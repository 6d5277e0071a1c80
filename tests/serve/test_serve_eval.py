"""``shopcomp eval`` with ``tools: serve:URL`` end to end: the same config run once in process and
once against a tool service (tests/serve_server.py, a real HTTP server over our real index, memory
stores, rule judge and rubric) gives the same results file and the same run identity; the remote
run loads no index (``data.index_dir`` points nowhere) and a service without the benchmark is
refused before anything runs. Policy: the scripted OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from shopping_companion.benchmark.synth import write_benchmark
from shopping_companion.cli import app
from tests.openai_server import ScriptedOpenAIServer
from tests.scripted_policy import policy_script
from tests.serve_server import Bench, ServeServer, bench_from_dir, result_lines

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def bench(synth_bench):
    return synth_bench(2, seed=41, sessions_per_user=30)


@pytest.fixture(scope="module")
def bench_dir(bench, tmp_path_factory):
    return write_benchmark(bench, tmp_path_factory.mktemp("servebench") / "bench")


def test_eval_through_the_service_equals_the_local_run(
    bench, bench_dir, catalog_index_dir, product_search, embedder, tmp_path
):
    runs = tmp_path / "runs"
    with ScriptedOpenAIServer(policy_script(bench.tasks)) as policy:
        base = {
            "bench": {"path": str(bench_dir)},
            "output": {"name": "local", "runs_dir": str(runs)},
            "backend": {"kind": "openai", "model": "m", "base_url": policy.base_url, "max_retries": 0},
            "strategies": ["two_stage:none", "one_stage"],
            "env": {"max_turns": 6},
            "concurrency": 2,
            "data": {"index_dir": str(catalog_index_dir)},
        }
        cfg = tmp_path / "run.yaml"
        cfg.write_text(yaml.safe_dump(base))
        out = CliRunner().invoke(app, ["eval", "--config", str(cfg)])
        assert out.exit_code == 0, out.output
        with ServeServer(product_search, {"bench": bench_from_dir(bench_dir)}, embedder) as srv:
            nowhere = tmp_path / "no-index-here"
            args = ["eval", "--config", str(cfg), "--set", "output.name=remote", "--set", f"tools=serve:{srv.base_url}"]
            out = CliRunner().invoke(app, args + ["--set", f"data.index_dir={nowhere}"])
            assert out.exit_code == 0, out.output
            assert not nowhere.exists()  # no index was opened or built
            assert srv.routes("judge") >= 4 and srv.routes("reward") >= 4 and srv.routes("mem_search") >= 2
            # a resume through the service has nothing left to do
            n = len(srv.requests)
            out = CliRunner().invoke(app, args)
            assert out.exit_code == 0, out.output
            assert all(r in ("ready", "info", "endpoints", "product_view") for _, r, _ in srv.requests[n:])
        # a service that has not loaded this benchmark: refused (exit 2), naming what it has
        other = Bench(bench.tasks[:1], dict(bench.sessions), "/srv/other")
        with ServeServer(product_search, {"other": other}, embedder) as srv2:
            out = CliRunner().invoke(
                app, ["eval", "--config", str(cfg), "--set", "output.name=r2", "--set", f"tools=serve:{srv2.base_url}"]
            )
            assert out.exit_code == 2, out.output
            assert "has not loaded the benchmark" in " ".join(out.output.split()) and "/srv/other" in out.output
    local, remote = runs / "local", runs / "remote"
    assert result_lines(remote / "results.jsonl") == result_lines(local / "results.jsonl")
    assert len(result_lines(local / "results.jsonl")) == 4
    li = json.loads((local / "results.identity.json").read_text())
    ri = json.loads((remote / "results.identity.json").read_text())
    assert li == ri
    assert yaml.safe_load((remote / "config.yaml").read_text())["tools"] == f"serve:{srv.base_url}"
