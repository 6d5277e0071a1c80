"""``shopcomp eval --config`` end to end: the resolved config is written beside the results and
its hash is the run identity (a changed rubric weight or sampling value is refused as a resume; a
changed concurrency or timeout resumes), flags and ``--set`` override the file, and bad keys or
values exit 2 naming the field and the allowed values. Real benchmark, index, embedder and judge;
the policy is the scripted OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from shopping_companion.benchmark.report import read_results
from shopping_companion.benchmark.synth import write_benchmark
from shopping_companion.cli import app
from tests.openai_server import ScriptedOpenAIServer
from tests.scripted_policy import policy_script

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def bench(synth_bench):
    return synth_bench(2, seed=37, sessions_per_user=30)


@pytest.fixture(scope="module")
def bench_dir(bench, tmp_path_factory):
    return write_benchmark(bench, tmp_path_factory.mktemp("cfgbench") / "bench")


def chats(srv) -> int:
    """Chat completions the server answered (the start-up ping is a GET /v1/models)."""
    return sum(r.path.endswith("/chat/completions") for r in srv.requests)


def text(out) -> str:
    return " ".join(out.output.split())


def test_config_file_resume_and_identity(bench, bench_dir, catalog_index_dir, tmp_path):
    runs = tmp_path / "runs"
    rubric = tmp_path / "rubric.yaml"
    rubric.write_text("name: mine\nrewards:\n  - {name: outcome, weight: 1.0}\n  - {name: format, weight: 1.0}\n")
    with ScriptedOpenAIServer(policy_script(bench.tasks)) as srv:
        cfg = tmp_path / "run.yaml"
        cfg.write_text(
            yaml.safe_dump(
                {
                    "bench": {"path": str(bench_dir)},
                    "output": {"name": "c1", "runs_dir": str(runs)},
                    "backend": {
                        "kind": "openai",
                        "model": "m",
                        "base_url": srv.base_url,
                        "max_retries": 0,
                        "sampling": {"temperature": 0.3},
                    },
                    "env": {"max_turns": 6},
                    "rubric": str(rubric),
                    "concurrency": 1,
                    "data": {"index_dir": str(catalog_index_dir)},
                }
            )
        )
        # a flag and --set override the file
        out = CliRunner().invoke(
            app, ["eval", "--config", str(cfg), "--max-turns", "7", "--set", "backend.sampling.temperature=0.2"]
        )
        assert out.exit_code == 0, out.output
        run = runs / "c1"
        resolved = yaml.safe_load((run / "config.yaml").read_text())
        assert resolved["env"]["max_turns"] == 7 and resolved["backend"]["sampling"]["temperature"] == 0.2
        ident = json.loads((run / "results.identity.json").read_text())
        assert len(ident["config_sha256"]) == 16 and ident["rubric"]["name"] == "mine"
        assert (
            (run / "config.yaml")
            .read_text()
            .startswith(f"# The resolved configuration of run c1 (config_sha256 {ident['config_sha256']})")
        )
        summary = json.loads((run / "summary.json").read_text())
        assert summary["meta"]["config"]["config_sha256"] == ident["config_sha256"]
        assert len(read_results(run / "results.jsonl")) == 2
        # the written config.yaml reruns the same run: a resume with nothing left to do
        served = chats(srv)
        out = CliRunner().invoke(
            app, ["eval", "--config", str(run / "config.yaml"), "--concurrency", "2", "--timeout-s", "30"]
        )
        assert out.exit_code == 0, out.output
        assert chats(srv) == served and len(read_results(run / "results.jsonl")) == 2
        # notes are printed whole (soft-wrapped): a log file keeps each on one line
        out = CliRunner().invoke(app, ["eval", "--config", str(run / "config.yaml"), "--limit", "1"])
        assert out.exit_code == 0, out.output
        assert "are for tasks, strategies or trials this run did not request (e.g." in out.output
        # a changed rubric weight (same file name) is another run: refused, nothing written
        rubric.write_text("name: mine\nrewards:\n  - {name: outcome, weight: 0.5}\n  - {name: format, weight: 1.0}\n")
        out = CliRunner().invoke(app, ["eval", "--config", str(run / "config.yaml")])
        assert out.exit_code == 2, out.output
        assert "different run configuration" in text(out) and "config_sha256" in text(out) and "0.5" in text(out)
        # so is a changed sampling value; the recorded config is left as it was
        out = CliRunner().invoke(
            app, ["eval", "--config", str(run / "config.yaml"), "--set", "backend.sampling.top_p=0.5"]
        )
        assert out.exit_code == 2, out.output
        assert yaml.safe_load((run / "config.yaml").read_text())["backend"]["sampling"]["top_p"] == 0.95
        assert chats(srv) == served


@pytest.mark.parametrize(
    "args,msg",
    [
        (["--set", "env.max_turn=3"], "env.max_turn: unknown field; allowed: hint,"),
        (["--set", "backend.kind=gpt"], "backend.kind (--backend): Input should be 'reference', 'openai' or 'local'"),
        (["--backend", "openai"], "backend.model is required with backend.kind=openai"),
        (["--strategies", "two_stage:loud"], "strategies (--strategies)"),
        (["--set", "trials=0"], "trials (--trials): Input should be greater than or equal to 1"),
        (["--config", "/nonexistent/run.yaml"], "config file '/nonexistent/run.yaml' does not exist"),
        (["--simulator", "nosuch"], "simulator (--simulator): unknown user simulator 'nosuch'; known: llm, scripted"),
        (["--simulator", "llm"], "simulator (--simulator): simulator 'llm': cannot construct"),
        (["--base-url", "not-a-url"], "backend.base_url (--base-url): must be an http:// or https:// URL"),
        (["--set", "env.mode=oracle"], "mode is set by strategies (--strategies)"),
        (
            ["--rubric", "/nonexistent/rubric.yaml"],
            "rubric (--reward-config): config file '/nonexistent/rubric.yaml' does not exist",
        ),
    ],
)
def test_bad_config_exits_2_naming_the_field(tmp_path, args, msg):
    out = CliRunner().invoke(
        app, ["eval", "--bench", str(tmp_path), "--name", "x", "--runs-dir", str(tmp_path / "runs"), *args]
    )
    assert out.exit_code == 2, out.output
    assert msg in text(out)
    assert not (tmp_path / "runs").exists()
