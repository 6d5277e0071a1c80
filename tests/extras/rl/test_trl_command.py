"""``shopcomp grpo trl`` end to end on CPU (TRL 1.16.0): the real command, run twice on a small
synthesised benchmark with the tiny tool-calling model and a reward spec whose rubric has a custom
member from a module on the spec's python_path. The first run trains 2 steps; the second, with
max_steps 3, resumes from the checkpoint and trains step 3 only."""

from __future__ import annotations

import json
import math
import textwrap
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.extras.rl.conftest import require

require("trl", "datasets", "peft")

REPO = Path(__file__).resolve().parents[3]
CPU_CONFIG = REPO / "configs" / "grpo" / "trl_cpu.yaml"

PLUGIN = textwrap.dedent(
    """
    from shopping_companion.rewards.rubric import reward

    @reward("trl_cmd_few_turns", key="few_turns", needs=("trajectory",))
    def few_turns(ctx):
        # a custom reward: 1 / (1 + number of steps of the stage trajectory)
        return 1.0 / (1 + len(ctx.trajectory.steps))
    """
)

SPEC = textwrap.dedent(
    """
    rubric:
      name: paper_plus_few_turns
      rewards:
        - {name: outcome, weight: 1}
        - {name: tool_wise, weight: 1}
        - {name: format, weight: 1}
        - {path: "trl_cmd_plugin:few_turns", weight: 0.5, key: few_turns}
    python_path: [plugins]
    scoring_deadline_s: 120
    """
)


@pytest.fixture(scope="module")
def bench_dir(synth_bench, tmp_path_factory) -> Path:
    from shopping_companion.benchmark.synth import write_benchmark

    bench = synth_bench(3, seed=17, sessions_per_user=30, test_fraction=0.0)
    return write_benchmark(bench, tmp_path_factory.mktemp("trlbench") / "bench")


@pytest.fixture(scope="module")
def spec_file(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("trlspec")
    (d / "plugins").mkdir()
    (d / "plugins" / "trl_cmd_plugin.py").write_text(PLUGIN)
    (d / "reward.yaml").write_text(SPEC)
    return d / "reward.yaml"


def _invoke(args: list[str]):
    from shopping_companion.cli import app

    t0 = time.perf_counter()
    res = CliRunner().invoke(app, ["grpo", "trl", *args])
    return res, time.perf_counter() - t0


def test_trl_command_trains_logs_every_component_checkpoints_and_resumes(
    tmp_path, bench_dir, spec_file, tool_model_dir, catalog_index_dir
):
    out = tmp_path / "run"
    common = [
        "--config",
        str(CPU_CONFIG),
        "--model",
        str(tool_model_dir),
        "--bench",
        str(bench_dir),
        "--output-dir",
        str(out),
        "--reward-config",
        str(spec_file),
        "--set",
        f"index_dir={catalog_index_dir}",
    ]
    res, wall = _invoke(common)
    assert res.exit_code == 0, res.output
    print(f"shopcomp grpo trl (2 steps, CPU): {wall:.1f} s wall including setup")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 2 and summary["resumed_from"] is None
    assert summary["tasks"] == 2 and summary["rows"] == 4  # rows.limit 2 of trl_cpu.yaml, stages 1 and 2
    assert summary["reward_functions"] == ["shopcomp_total", "R_z", "R_tool", "R_fmt", "few_turns", "success"]
    assert [h["step"] for h in summary["logged"]] == [1, 2]
    for h in summary["logged"]:
        for name in summary["reward_functions"]:
            assert math.isfinite(h[f"rewards/{name}/mean"]), name
        assert 0.0 < h["rewards/few_turns/mean"] <= 1.0  # the custom reward ran on every trajectory
        # the custom member trains with its weight (0.5): the total is the rubric's sum
        total = h["rewards/R_z/mean"] + h["rewards/R_tool/mean"] + h["rewards/R_fmt/mean"]
        assert abs(h["rewards/shopcomp_total/mean"] - (total + 0.5 * h["rewards/few_turns/mean"])) < 1e-4
        assert h["reward"] == pytest.approx(h["rewards/shopcomp_total/mean"])
        assert h["shopcomp/deadline_missed"] == 0.0
    # TRL's own log history (what tensorboard / wandb receive) has every component too
    state = json.loads((out / "checkpoint-2" / "trainer_state.json").read_text())
    logged = [h for h in state["log_history"] if "rewards/shopcomp_total/mean" in h]
    assert [h["step"] for h in logged] == [1, 2]
    assert all("rewards/few_turns/mean" in h and "rewards/R_tool/mean" in h for h in logged)
    assert list((out / "runs").rglob("events.out.tfevents.*")), "no tensorboard event file"
    # the resolved config: flags and --set applied, readable by the same loader
    from shopping_companion.config import load_model
    from shopping_companion.trainers.trl_train import TrlGrpoConfig

    resolved = load_model(TrlGrpoConfig, out / "config.yaml")
    assert resolved.model == str(tool_model_dir) and resolved.index_dir == str(catalog_index_dir)
    assert resolved.reward_config == str(spec_file) and resolved.trainer.max_steps == 2
    assert "step 2/2" in res.output and "few_turns" in res.output

    # second invocation: 3 steps, resume auto picks up checkpoint-2 and trains step 3 only
    res2, wall2 = _invoke(common + ["--max-steps", "3"])
    assert res2.exit_code == 0, res2.output
    print(f"shopcomp grpo trl (resumed, 1 more step): {wall2:.1f} s wall")
    s2 = json.loads((out / "summary.json").read_text())
    assert s2["resumed_from"] == str(out / "checkpoint-2")
    # the summary covers the run, not the invocation: steps 1-2 read back from metrics.jsonl
    assert s2["steps"] == 3 and [h["step"] for h in s2["logged"]] == [1, 2, 3]
    assert s2["first_rollout_weights_sha256"] == summary["first_rollout_weights_sha256"]
    assert (out / "checkpoint-3" / "trainer_state.json").is_file()
    assert "resuming from" in res2.output

    # --resume insists on a checkpoint: a fresh output directory has none
    res3, _ = _invoke(common[:6] + ["--output-dir", str(tmp_path / "empty"), "--resume"] + common[8:])
    assert res3.exit_code == 2 and "holds no checkpoint-N directory" in res3.output


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--set", "trainer.colour=red"], "trainer.colour: unknown field; allowed: beta"),
        (["--set", "trainer.num_generations=3"], "must be a multiple of trainer.num_generations (3)"),
        (["--set", "trainer.report_to=[mlflow]"], "trainer.report_to.0"),
        (["--set", "env.scoring_deadline_s=-1"], "env.scoring_deadline_s"),
        (["--set", "trainer.extra_args={learning_rate: 1}"], "set by this config's own fields"),
        (["--set", "trainer.extra_args={no_such_field: 1}"], "not GRPOConfig fields"),
        (["--set", "lora.rank=0"], "lora.rank"),
    ],
)
def test_bad_config_fields_are_named(tmp_path, extra, needle):
    res, _ = _invoke(
        ["--config", str(CPU_CONFIG), "--model", "m", "--bench", "b", "--output-dir", str(tmp_path / "o"), *extra]
    )
    assert res.exit_code == 2, res.output
    assert needle in " ".join(res.output.split())
    assert not (tmp_path / "o" / "config.yaml").exists()  # nothing written for a refused config


@pytest.mark.parametrize("model", ["/nonexistent/model", "./no_such_dir", "a/b/c", "EMPTY_DIR"])
def test_a_model_path_that_is_no_model_directory_is_named_before_anything_is_written(tmp_path, model):
    if model == "EMPTY_DIR":  # a directory without config.json
        model = str(tmp_path / "empty")
        (tmp_path / "empty").mkdir()
    res, _ = _invoke(
        ["--config", str(CPU_CONFIG), "--model", model, "--bench", "b", "--output-dir", str(tmp_path / "o")]
    )
    assert res.exit_code == 2, res.output
    text = " ".join(res.output.split())
    why = "has no config.json" if model.endswith("empty") else "does not exist here"
    assert f"model: {model!r} is not a model directory (" in text and why in text, text
    assert "repo id" not in text.lower(), text
    assert not (tmp_path / "o").exists()


def test_missing_model_and_bench_name_their_flags(tmp_path):
    res, _ = _invoke(["--config", str(CPU_CONFIG)])
    assert res.exit_code == 2
    text = " ".join(res.output.split())
    assert "model (--model): required, not given" in text and "bench (--bench): required, not given" in text


def _minimal(schema: dict, defs: dict | None = None):
    """The smallest reply a JSON schema allows (zeros, empty lists): a judge that finds nothing."""
    defs = defs if defs is not None else schema.get("$defs", {})
    if "$ref" in schema:
        return _minimal(defs[schema["$ref"].split("/")[-1]], defs)
    if "anyOf" in schema:
        return _minimal(schema["anyOf"][0], defs)
    kind = schema.get("type")
    if kind == "object":
        req = schema.get("required", [])
        return {k: _minimal(v, defs) for k, v in schema.get("properties", {}).items() if k in req}
    if kind == "array":
        return []
    if kind in ("integer", "number"):
        return schema.get("minimum", 0)
    return False if kind == "boolean" else ""


def _judge_reply(request: dict) -> str:
    """An LLM judge served over HTTP: answers each verdict prompt with the minimal valid reply of
    the JSON schema the prompt states (it reads only the prompt, as a real judge model would)."""
    text = "\n".join(str(m.get("content") or "") for m in request["messages"])
    at = text.rfind("JSON schema: ")
    if at < 0:
        return "no schema in the prompt"
    schema, _ = json.JSONDecoder().raw_decode(text[at + len("JSON schema: ") :])
    return json.dumps(_minimal(schema))


def test_trl_command_with_an_llm_judge(tmp_path, monkeypatch, bench_dir, tool_model_dir, catalog_index_dir):
    from tests.openai_server import ScriptedOpenAIServer

    monkeypatch.setenv("SHOPCOMP_TEST_JUDGE_KEY", "k")
    with ScriptedOpenAIServer(_judge_reply) as srv:
        spec = tmp_path / "llm_reward.yaml"
        spec.write_text(
            "rubric: paper\n"
            f"judge: {{kind: llm, model: judge-m, base_url: '{srv.base_url}', api_key_env: SHOPCOMP_TEST_JUDGE_KEY,"
            " max_retries: 0, max_in_flight: 2, cascade: false}\n"  # every stage to the LLM judge
        )
        out = tmp_path / "run"
        res, wall = _invoke(
            [
                "--config",
                str(CPU_CONFIG),
                "--model",
                str(tool_model_dir),
                "--bench",
                str(bench_dir),
                "--output-dir",
                str(out),
                "--reward-config",
                str(spec),
                "--max-steps",
                "1",
                "--set",
                f"index_dir={catalog_index_dir}",
                "--set",
                "trainer.report_to=none",
            ]
        )
        assert res.exit_code == 0, res.output
        print(f"shopcomp grpo trl with an LLM judge (1 step): {wall:.1f} s wall")
        bodies = list(srv.bodies)
    assert bodies and all(b["model"] == "judge-m" for b in bodies)  # the environment asked the LLM judge
    summary = json.loads((out / "summary.json").read_text())
    assert summary["reward_spec"]["judge"] == {"kind": "llm", "model": "judge-m", "cascade": False}
    (h,) = summary["logged"]
    assert h["shopcomp/unscored"] == 0.0  # every verdict came from the served judge and was valid
    assert math.isfinite(h["rewards/shopcomp_total/mean"]) and h["rewards/success/mean"] == 0.0  # it found nothing
