"""One reward spec for evaluation and SFT collection: a reward-spec YAML whose rubric lives in a
temporary module on its python_path scores `shopcomp eval` and `shopcomp sft collect` runs, its
custom component is in every result line, its judge section sets the run's judge, and a judge given
twice is refused. (The verl and TRL paths: tests/extras/rl/test_verl_reward_spec.py and
tests/extras/rl/test_trl_command.py.) Real benchmark, index, embedder and rule judge; the policy is
the scripted OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from shopping_companion.benchmark.report import read_results
from shopping_companion.benchmark.synth import write_benchmark
from shopping_companion.cli import app
from tests.openai_server import ScriptedOpenAIServer
from tests.scripted_policy import policy_script

pytestmark = pytest.mark.slow

PLUGIN = '''
from shopping_companion.rewards.rubric import Rubric, reward


@reward("turn_thrift", key="turn_thrift", needs=("trajectory",))
def turn_thrift(ctx):
    """1 / (1 + assistant turns of the stage)."""
    return 1.0 / (1 + len(ctx.trajectory.steps))


def make():
    return Rubric([("outcome", 1.0), ("format", 1.0), (turn_thrift, 0.25)], name="thrift")
'''


@pytest.fixture(scope="module")
def bench(synth_bench):
    return synth_bench(4, seed=53, sessions_per_user=30)


@pytest.fixture(scope="module")
def bench_dir(bench, tmp_path_factory):
    return write_benchmark(bench, tmp_path_factory.mktemp("specbench") / "bench")


@pytest.fixture()
def spec_file(tmp_path):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "thrift_rewards_mod.py").write_text(PLUGIN)
    f = tmp_path / "reward.yaml"
    f.write_text("rubric: thrift_rewards_mod:make\npython_path: [plugins]\njudge: {kind: rule}\n")
    return f


def _check_components(lines):
    n = 0
    for r in lines:
        for st in r.stages:
            comps = st.reward.components
            if not comps:
                continue
            n += 1
            assert 0 < comps["turn_thrift"] <= 0.5 and "R_tool" not in comps
            total = comps["R_z"] + comps["R_fmt"] + 0.25 * comps["turn_thrift"]
            assert st.reward.total == pytest.approx(total)
    assert n > 0


def test_eval_and_sft_collect_score_with_one_spec(bench, bench_dir, catalog_index_dir, spec_file, tmp_path):
    runner = CliRunner()
    with ScriptedOpenAIServer(policy_script(bench.tasks)) as srv:
        common = ["--backend", "openai", "--model", "m", "--base-url", srv.base_url, "--max-retries", "0"]
        common += ["--index-dir", str(catalog_index_dir), "--concurrency", "1", "--reward-config", str(spec_file)]
        out = runner.invoke(
            app, ["eval", "--bench", str(bench_dir), "--name", "spec", "--runs-dir", str(tmp_path / "runs")] + common
        )
        assert out.exit_code == 0, out.output
        run = tmp_path / "runs" / "spec"
        _check_components(read_results(run / "results.jsonl"))
        ident = json.loads((run / "results.identity.json").read_text())
        assert ident["rubric"]["name"] == "thrift"
        assert [m["key"] for m in ident["rubric"]["rewards"]] == ["R_z", "R_fmt", "turn_thrift"]
        col = runner.invoke(app, ["sft", "collect", "--bench", str(bench_dir), "--out", str(tmp_path / "col")] + common)
        assert col.exit_code == 0, col.output
        _check_components(read_results(tmp_path / "col" / "rollouts.jsonl"))


def test_spec_judge_sets_the_run_judge_and_a_second_judge_is_refused(bench_dir, tmp_path):
    from shopping_companion.benchmark.run_config import EvalConfig
    from shopping_companion.errors import ConfigError

    f = tmp_path / "llm_reward.yaml"
    f.write_text("rubric: paper\njudge: {kind: llm, model: judge-x, base_url: 'http://127.0.0.1:9/v1'}\n")
    base = {"bench": {"path": str(bench_dir)}, "output": {"name": "x"}, "rubric": str(f)}
    cfg = EvalConfig.model_validate(base)
    assert cfg.judge.kind == "llm" and cfg.judge.model == "judge-x"
    assert cfg.identity()["judge"] == {"kind": "llm", "model": "judge-x", "cascade": True}
    with pytest.raises((ConfigError, ValueError), match="give the judge in one place"):
        EvalConfig.model_validate({**base, "judge": {"kind": "llm", "model": "other"}})
    runner = CliRunner()
    out = runner.invoke(
        app,
        [
            "eval",
            "--bench",
            str(bench_dir),
            "--name",
            "x",
            "--runs-dir",
            str(tmp_path),
            "--judge-model",
            "o",
            "--judge",
            "llm",
            "--reward-config",
            str(f),
        ],
    )
    assert out.exit_code == 2 and "give the judge in one place" in " ".join(out.output.split()), out.output
