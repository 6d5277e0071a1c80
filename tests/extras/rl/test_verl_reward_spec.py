"""One reward spec through verl 0.9.1 on CPU: the LLM judge scores GRPO rollouts inside verl's own
AgentLoopWorker (a local OpenAI-compatible judge server on 127.0.0.1), its verdicts reach R_z, the
reward loop's components and the per-step training metrics; a custom reward defined in a temporary
module on the spec's python_path is computed by the agent loop, scored by compute_score and logged;
a dead judge endpoint gives unscored samples (no gradient), counted per step."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from tests.extras.rl.conftest import require

require("verl", "ray", "tensordict")

from tests.extras.rl.rl_support import LocalReward, ScriptedServer, verl_config  # noqa: E402
from tests.openai_server import ScriptedOpenAIServer  # noqa: E402

from shopping_companion.trainers.resources import register_resources  # noqa: E402
from shopping_companion.trainers.rows import build_rows, write_parquet  # noqa: E402


def judge_reply(generous: bool):
    """A judge model: ``generous`` finds every annotated feature and says the answer is relevant;
    otherwise nothing matches. Fields follow the prompt's reply schema (stage, add-on)."""

    def reply(body):
        text = "\n".join(str(m.get("content") or "") for m in body["messages"])
        F = int(re.search(r"\(F = (\d+)\)", text).group(1))
        nm = re.search(r"\(N = (\d+)\)", text)
        N = int(nm.group(1)) if nm else 1
        m = F if generous else 0
        out = {"matched": list(range(1, m + 1)), "reasons": ["scripted judge"]}
        if '"q2"' in text:
            out.update(p2=1, q2=int(generous), m2=m)
            if '"n2"' in text:
                out.update(n2=N if generous else 0, u2=1)
        else:
            out.update(q1=int(generous), m1=m, h1=0)
            if '"c1"' in text:
                out.update(c1=N if generous else 0)
        return json.dumps(out)

    return reply


PLUGIN = '''
from shopping_companion.rewards.rubric import Rubric, reward

@reward("answer_brevity", key="answer_brevity", needs=("trajectory",))
def answer_brevity(ctx):
    """1 / (1 + assistant turns of the stage): a custom reward only this test defines."""
    return 1.0 / (1 + len(ctx.trajectory.steps))

RUBRIC = Rubric([("outcome", 1.0), ("tool_wise", 1.0), ("format", 1.0), (answer_brevity, 0.5)], name="brevity")
'''


@pytest.fixture(scope="module")
def setup(tmp_path_factory, rl_kit):
    d = tmp_path_factory.mktemp("verl_spec")
    register_resources("rl-spec-test", rl_kit)
    tasks = list(rl_kit.tasks.values())
    rows = build_rows(tasks, benchmark="(test kit)", stage1="gold")
    path = write_parquet(rows, d / "train.parquet")
    loop_yaml = d / "agent_loop.yaml"
    loop_yaml.write_text(
        "- name: shopping_companion\n"
        "  _target_: shopping_companion.trainers.verl_agent_loop.ShoppingCompanionAgentLoop\n"
        "  resources: rl-spec-test\n"
    )
    plugins = d / "plugins"
    plugins.mkdir()
    (plugins / "spec_test_brevity.py").write_text(PLUGIN)
    return {"dir": d, "parquet": path, "tasks": tasks, "loop_yaml": str(loop_yaml), "plugins": plugins}


def _rollout(setup, tool_model_dir, spec_json, n_repeat=1):
    from transformers import AutoTokenizer
    from verl import DataProto
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker
    from verl.trainer.ppo.reward import extract_reward
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn
    from verl.utils.ray_utils import get_event_loop

    cfg = verl_config(tool_model_dir, setup["loop_yaml"], reward_config=spec_json)
    tok = AutoTokenizer.from_pretrained(tool_model_dir)
    ds = RLHFDataset(data_files=[str(setup["parquet"])], tokenizer=tok, config=cfg.data)
    batch = DataProto.from_single_dict(collate_fn([ds[i] for i in range(len(ds))]))
    if n_repeat > 1:
        batch = batch.repeat(repeat_times=n_repeat, interleave=True)
    batch.non_tensor_batch["uid"] = np.array([str(x) for x in batch.non_tensor_batch["index"]], dtype=object)
    worker = AgentLoopWorker(
        cfg,
        llm_client=ScriptedServer(tok, setup["tasks"]),
        reward_loop_worker_handles=[LocalReward(RewardLoopWorker(cfg))],
    )
    out = get_event_loop().run_until_complete(worker.generate_sequences(batch))
    reward_tensor, extra = extract_reward(out)
    return out, reward_tensor.sum(-1).numpy(), extra


def _spec(setup, judge: dict, rubric: str = "paper", **more) -> str:
    from shopping_companion.rewards.spec import load_reward_spec

    return load_reward_spec({"rubric": rubric, "judge": judge, **more}).to_json()


def test_llm_judge_verdicts_reach_R_z_and_the_step_metrics(setup, tool_model_dir):
    from shopping_companion.trainers.verl_agent_loop import rollout_reward_metrics

    results = {}
    for generous in (True, False):
        with ScriptedOpenAIServer(judge_reply(generous)) as srv:
            # cascade off: every stage goes to the LLM judge (the cascade: tests/judges/test_judge_cascade.py)
            judge = {"kind": "llm", "model": "judge-x", "base_url": srv.base_url, "max_in_flight": 2, "cascade": False}
            spec = _spec(setup, judge)
            out, scores, extra = _rollout(setup, tool_model_dir, spec, n_repeat=2)
            results[generous] = (out, scores, extra, len(srv.chat_requests))
    n = len(results[True][0])
    for generous, (out, scores, extra, n_requests) in results.items():
        stage = np.asarray(out.non_tensor_batch["shopcomp_stage"], dtype=int)
        R_z, success = (np.asarray(extra[k], dtype=float) for k in ("R_z", "success"))
        # every trajectory was judged by the LLM (one request per rollout's stage; replies are cached
        # by content, so two rollouts with identical stage outputs may share one)
        assert 1 <= n_requests <= n
        assert np.asarray(extra["judge_failed"], dtype=float).sum() == 0
        if generous:  # every feature found, relevant: R1 = 1 exactly (Eq. 6); Succ follows the verdict
            assert np.allclose(R_z[stage == 1], 1.0) and success.min() == 1.0
        else:  # nothing matched, not relevant: R1 = 0; stage 2 keeps only the post-checked p2 (and u2)
            assert np.allclose(R_z[stage == 1], 0.0) and success.max() == 0.0
            assert (R_z[stage == 2] > 0).all() and (R_z[stage == 2] < 0.5).all()
        # the trained score is Eq. 12 over the LLM judge's R_z
        assert np.allclose(scores, R_z + np.asarray(extra["R_tool"], float) + np.asarray(extra["R_fmt"], float))
        metrics = rollout_reward_metrics(dict(out.non_tensor_batch))
        assert metrics["shopcomp/R_z/mean"] == pytest.approx(R_z.mean())
        assert metrics["shopcomp/stage1/R_z/mean"] == pytest.approx(R_z[stage == 1].mean())
        assert metrics["shopcomp/judge_failed/count"] == 0
    assert (results[True][2]["R_z"] > results[False][2]["R_z"]).all()


def test_dead_llm_judge_gives_unscored_samples_counted_per_step(setup, tool_model_dir):
    from shopping_companion.trainers.verl_agent_loop import rollout_reward_metrics

    with ScriptedOpenAIServer(lambda body: {"status": 503, "message": "judge overloaded"}) as srv:
        judge = {"kind": "llm", "model": "judge-x", "base_url": srv.base_url, "max_retries": 0, "timeout_s": 5}
        judge["cascade"] = False  # every stage goes to the dead judge
        out, scores, extra = _rollout(setup, tool_model_dir, _spec(setup, judge))
    assert (np.asarray(extra["judge_failed"], dtype=float) == 1).all()
    assert (out.batch["response_mask"].sum(-1) == 0).all()  # no gradient from an unjudged sample
    metrics = rollout_reward_metrics(dict(out.non_tensor_batch))
    assert metrics["shopcomp/judge_failed/count"] == len(out)


def test_custom_reward_from_a_spec_module_is_computed_scored_and_logged(setup, tool_model_dir):
    from shopping_companion.trainers.verl_agent_loop import rollout_reward_metrics

    spec = _spec(setup, {"kind": "rule"}, rubric="spec_test_brevity:RUBRIC", python_path=[str(setup["plugins"])])
    out, scores, extra = _rollout(setup, tool_model_dir, spec)
    brevity = np.asarray(extra["answer_brevity"], dtype=float)
    assert ((brevity > 0) & (brevity <= 0.5)).all()
    R = sum(np.asarray(extra[k], float) for k in ("R_z", "R_tool", "R_fmt"))
    assert np.allclose(scores, R + 0.5 * brevity)  # compute_score used the spec's weights
    stage = np.asarray(out.non_tensor_batch["shopcomp_stage"], dtype=int)
    metrics = rollout_reward_metrics(dict(out.non_tensor_batch))
    assert metrics["shopcomp/answer_brevity/mean"] == pytest.approx(brevity.mean())
    assert metrics["shopcomp/stage2/answer_brevity/mean"] == pytest.approx(brevity[stage == 2].mean())
