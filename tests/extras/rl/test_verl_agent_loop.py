"""verl 0.9.1 integration, offline on CPU: our parquet through verl's RLHFDataset, whole two-stage
episodes through our agent loop inside verl's own AgentLoopWorker (fake server manager backed by
a real tiny model), the reward breakdown through verl's reward loop to the batch the trainer
reads, and verl's GRPO advantage on those rewards."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.extras.rl.conftest import require

require("verl", "ray", "tensordict")

from tests.extras.rl.rl_support import LocalReward, ScriptedServer, TinyModelServer, verl_config  # noqa: E402

from shopping_companion.trainers.resources import register_resources  # noqa: E402
from shopping_companion.trainers.rows import build_rows, write_parquet  # noqa: E402


@pytest.fixture(scope="module")
def setup(tmp_path_factory, rl_kit, tool_model_dir):
    d = tmp_path_factory.mktemp("verl")
    register_resources("rl-test", rl_kit)
    tasks = list(rl_kit.tasks.values())
    rows = build_rows(tasks, benchmark="(test kit)", stage1="policy")
    path = write_parquet(rows, d / "train.parquet")
    loop_yaml = d / "agent_loop.yaml"
    loop_yaml.write_text(
        "- name: shopping_companion\n"
        "  _target_: shopping_companion.trainers.verl_agent_loop.ShoppingCompanionAgentLoop\n"
        "  resources: rl-test\n  record_messages: true\n"
    )
    return {"dir": d, "parquet": path, "tasks": tasks, "rows": rows, "loop_yaml": str(loop_yaml)}


def _dataset(setup, tool_model_dir, cfg):
    from transformers import AutoTokenizer
    from verl.utils.dataset.rl_dataset import RLHFDataset

    tok = AutoTokenizer.from_pretrained(tool_model_dir)
    return RLHFDataset(data_files=[str(setup["parquet"])], tokenizer=tok, config=cfg.data), tok


def test_rlhf_dataset_reads_our_parquet(setup, tool_model_dir):
    cfg = verl_config(tool_model_dir, setup["loop_yaml"])
    ds, _ = _dataset(setup, tool_model_dir, cfg)
    assert len(ds) == 2 * len(setup["tasks"])  # one row per (task, stage)
    for i in range(len(ds)):
        item = ds[i]
        row = setup["rows"][i]
        assert item["agent_name"] == "shopping_companion"
        assert [dict(m) for m in item["raw_prompt"]] == row["prompt"]
        assert item["extra_info"]["task_id"] == row["extra_info"]["task_id"]
        assert item["extra_info"]["stage"] == (1 if i % 2 == 0 else 2)
        assert item["index"] == i
        gt = json.loads(item["reward_model"]["ground_truth"])
        assert gt["reference_product_ids"] == rl_ref_ids(setup, row)


def rl_ref_ids(setup, row):
    return next(t for t in setup["tasks"] if t.task_id == row["extra_info"]["task_id"]).reference_product_ids


def _batch(ds, n_repeat: int = 1, only: list[int] | None = None):
    from verl import DataProto
    from verl.utils.dataset.rl_dataset import collate_fn

    items = [ds[i] for i in (only if only is not None else range(len(ds)))]
    batch = DataProto.from_single_dict(collate_fn(items))
    if n_repeat > 1:
        batch = batch.repeat(repeat_times=n_repeat, interleave=True)
    batch.non_tensor_batch["uid"] = np.array([str(x) for x in batch.non_tensor_batch["index"]], dtype=object)
    return batch


def _worker(cfg, server):
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

    return AgentLoopWorker(cfg, llm_client=server, reward_loop_worker_handles=[LocalReward(RewardLoopWorker(cfg))])


def _run(coro):
    """verl's workers keep the event loop current at construction (``get_event_loop``); run there."""
    from verl.utils.ray_utils import get_event_loop

    return get_event_loop().run_until_complete(coro)


def _segments(mask: list[int]) -> list[tuple[int, int, int]]:
    out, start = [], 0
    for i in range(1, len(mask) + 1):
        if i == len(mask) or mask[i] != mask[start]:
            out.append((mask[start], start, i))
            start = i
    return out


def test_agent_loop_runs_two_stage_episodes_with_a_tiny_model(setup, tool_model_dir):
    """Stage-2 rows with stage1='policy': the tiny model plays stage 1, the simulator runs, then
    stage 2 is the trajectory. Masks are 0 exactly on observation tokens, and the decoded ids are
    the chat the environment saw."""
    from shopping_companion.trainers.chat_tokens import ChatTokens

    cfg = verl_config(tool_model_dir, setup["loop_yaml"], max_turns=4)
    ds, tok = _dataset(setup, tool_model_dir, cfg)
    server = TinyModelServer(str(tool_model_dir))
    worker = _worker(cfg, server)
    out = _run(worker.generate_sequences(_batch(ds, only=[0, 1, 3])))
    chat = ChatTokens(tok)
    nt = out.non_tensor_batch
    tool_calls_seen = 0
    for i in range(len(out)):
        stage = int(nt["shopcomp_stage"][i])
        msgs = nt["shopcomp_messages"][i]
        prompt = out.batch["prompts"][i]
        attn = out.batch["attention_mask"][i]
        P = prompt.shape[0]
        prompt_ids = prompt[attn[:P].bool()].tolist()
        resp_len = int(attn[P:].sum())
        resp = out.batch["responses"][i][:resp_len].tolist()
        mask = out.batch["response_mask"][i][:resp_len].tolist()
        assert stage == (1 if i == 0 else 2)
        text = chat.decode(prompt_ids + resp)
        last = max(j for j, m in enumerate(msgs) if m["role"] == "assistant")
        seen = msgs[: last + 1]  # the trajectory ends with its last assistant turn
        # prompt ids are the template over the stage's opening messages and its tools
        assert chat.decode(prompt_ids) == tok.apply_chat_template(
            seen[:2], tools=_tools_of(stage), tokenize=False, add_generation_prompt=True
        )
        rendered = tok.apply_chat_template(seen, tools=_tools_of(stage), tokenize=False)
        # decoded prompt+response == the environment's chat, up to the template's closing tail
        k = next((j for j, (a, b) in enumerate(zip(text, rendered)) if a != b), min(len(text), len(rendered)))
        assert rendered.startswith(text), (k, text[k - 200 : k + 100], rendered[k - 200 : k + 100])
        assert rendered[len(text) :] in ("\n", "<|im_end|>\n")
        segs = _segments(mask)
        assert segs[0][0] == 1 and segs[-1][0] == 1  # starts and ends with generated tokens
        gen_segs = [chat.content(resp[a:b]) for m, a, b in segs if m == 1]
        obs_segs = [tok.decode(resp[a:b], skip_special_tokens=False) for m, a, b in segs if m == 0]
        asst = [m["content"] for m in seen if m["role"] == "assistant"]
        assert gen_segs == asst  # mask 1 = exactly the assistant's generated text
        observations = [m for m in seen[2:] if m["role"] != "assistant"]
        assert len(obs_segs) == len(asst) - 1
        for o in observations:  # every observation lies in a mask-0 span ...
            assert any(o["content"] in x for x in obs_segs)
        for x in obs_segs:  # ... and a mask-0 span holds observations and template framing only
            assert x.endswith("<|im_start|>assistant\n")
        tool_calls_seen += sum(1 for o in observations if o["role"] == "tool")
        assert int(nt["shopcomp_prefix_mismatches"][i]) == 0
        if stage == 2:
            s1 = nt["shopcomp_stage1"][i]
            assert s1["source"] == "policy" and s1["turns"] >= 1 and s1["generated_tokens"] > 0
    assert tool_calls_seen > 0, "the tiny tool-calling model made no tool call"
    assert server.calls > 0
    # the reward reached the batch the trainer reads
    assert "rm_scores" in out.batch.keys()
    for k in ("R_z", "R_tool", "R_fmt", "success", "f_tc"):
        assert k in out.meta_info["reward_extra_keys"]


def _tools_of(stage: int):
    from shopping_companion.envs.tools import MEMORY_TOOLS, PRODUCT_TOOLS, tool_schema

    return [tool_schema(n) for n in (MEMORY_TOOLS if stage == 1 else PRODUCT_TOOLS)]


@pytest.mark.parametrize("rubric", ["paper", "outcome_only"])
def test_tool_wise_reward_reaches_the_trainer_and_grpo_advantages(setup, tool_model_dir, rubric):
    """Groups of 4 rollouts per row (one task's stage-2 rollouts recommend a wrong product), through verl's
    AgentLoopWorker → reward loop → batch: token_level_scores carry R_tool under the paper rubric
    and not under outcome_only; compute_grpo_outcome_advantage gives (s - mean) / (std + eps)."""
    import torch
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage
    from verl.trainer.ppo.reward import extract_reward

    cfg = verl_config(tool_model_dir, setup["loop_yaml"], rubric=rubric)
    ds, tok = _dataset(setup, tool_model_dir, cfg)
    other = setup["tasks"][2].reference_product_ids[-1]  # the add-on task's second product: another category
    rows = [setup["rows"][i]["extra_info"]["task_id"] for i in (0, 1, 2, 3)]
    wrong_task = rows[-1]  # every rollout of this task's stage-2 row recommends the wrong product
    server = ScriptedServer(tok, setup["tasks"], wrong_id=other, wrong_tasks={wrong_task})
    worker = _worker(cfg, server)
    batch = _batch(ds, n_repeat=4, only=[0, 1, 2, 3])
    out = _run(worker.generate_sequences(batch))
    reward_tensor, extra = extract_reward(out)
    scores = reward_tensor.sum(-1)
    R_z, R_tool, R_fmt = (np.asarray(extra[k], dtype=float) for k in ("R_z", "R_tool", "R_fmt"))
    assert (R_tool > 0).all()  # the gold policy's tool calls return gold sessions / reference products
    expected = R_z + R_fmt + (R_tool if rubric == "paper" else 0.0)
    assert np.allclose(scores.numpy(), expected, atol=1e-5)
    # the score sits on the last response token (verl's convention for outcome rewards)
    mask = out.batch["response_mask"]
    last = out.batch["attention_mask"][:, out.batch["prompts"].shape[1] :].sum(-1) - 1
    assert torch.allclose(reward_tensor[torch.arange(len(out)), last], scores)
    # the group of stage-2 rows has different outcomes (gold vs wrong product)
    stage = np.asarray(out.non_tensor_batch["shopcomp_stage"], dtype=int)
    index = np.asarray(batch.non_tensor_batch["uid"])  # verl keeps the batch order
    adv, _ = compute_grpo_outcome_advantage(token_level_rewards=reward_tensor, response_mask=mask, index=index)
    for uid in np.unique(index):
        sel = index == uid
        s = scores[torch.as_tensor(sel)]
        want = (s - s.mean()) / (s.std() + 1e-6)
        got = (adv[torch.as_tensor(sel)] * mask[torch.as_tensor(sel)]).sum(-1) / mask[torch.as_tensor(sel)].sum(-1)
        assert torch.allclose(got, want, atol=1e-4)
    s2 = scores[torch.as_tensor(stage == 2)]
    tids = np.asarray(out.non_tensor_batch["shopcomp_task_id"]) if "shopcomp_task_id" in out.non_tensor_batch else None
    assert s2.max() > s2.min(), "gold and wrong recommendations should score differently"
    if tids is not None:
        wrong = torch.as_tensor((stage == 2) & (tids == wrong_task))
        gold = torch.as_tensor((stage == 2) & (tids != wrong_task))
        assert scores[wrong].max() < scores[gold].min()
    assert sum(server.requests.values()) == 4  # the 4 stage-2 rollouts of one task recommended the wrong product


class _LocalWorkerHandle:
    """A Ray actor handle stand-in: ``handle.generate_sequences.remote(batch)`` runs the worker here."""

    def __init__(self, worker):
        self.generate_sequences = self
        self.worker = worker

    def remote(self, batch):
        return self.worker.generate_sequences(batch)


def test_training_step_metrics_carry_every_reward_component(setup, tool_model_dir):
    """Our AgentLoopManager (configs' agent_loop_manager_class) runs verl's own generate_sequences
    over a real AgentLoopWorker and adds the per-component means to the rollout timing dict, which
    verl's trainer turns into training-step metrics (compute_timing_metrics): they must equal the
    reward loop's per-trajectory components, per stage too."""
    from verl.experimental.agent_loop.agent_loop import AgentLoopManager
    from verl.trainer.ppo.metric_utils import compute_timing_metrics
    from verl.trainer.ppo.reward import extract_reward

    from shopping_companion.trainers.verl_agent_loop import ShoppingCompanionAgentLoopManager

    cfg = verl_config(tool_model_dir, setup["loop_yaml"])
    ds, tok = _dataset(setup, tool_model_dir, cfg)
    other = setup["tasks"][2].reference_product_ids[-1]
    wrong_task = setup["rows"][3]["extra_info"]["task_id"]
    server = ScriptedServer(tok, setup["tasks"], wrong_id=other, wrong_tasks={wrong_task})
    manager = ShoppingCompanionAgentLoopManager.__new__(ShoppingCompanionAgentLoopManager)
    manager.agent_loop_workers = [_LocalWorkerHandle(_worker(cfg, server)), _LocalWorkerHandle(_worker(cfg, server))]
    batch = _batch(ds, n_repeat=2, only=[0, 1, 2, 3])

    async def go():
        return await manager.generate_sequences(batch)

    out = _run(go())
    timing = out.meta_info["timing"]
    assert "agent_loop/generate_sequences/mean" in timing  # verl's own metrics are still there
    _, extra = extract_reward(out)
    stage = np.asarray(out.non_tensor_batch["shopcomp_stage"], dtype=int)
    for key in ("R_z", "R_tool", "R_fmt", "success"):
        vals = np.asarray(extra[key], dtype=float)
        assert timing[f"shopcomp/{key}/mean"] == pytest.approx(vals.mean())
        for s in (1, 2):
            assert timing[f"shopcomp/stage{s}/{key}/mean"] == pytest.approx(vals[stage == s].mean())
    # stage-specific components: per stage only (a 0 from the other stage's rows would halve them)
    assert "shopcomp/tool_prod_mean/mean" not in timing and "shopcomp/stage1/tool_prod_mean/mean" not in timing
    prod = np.asarray(extra["tool_prod_mean"], dtype=float)
    assert timing["shopcomp/stage2/tool_prod_mean/mean"] == pytest.approx(prod[stage == 2].mean())
    assert timing["shopcomp/stage2/tool_prod_mean/mean"] > 0
    assert "shopcomp/stage1/tool_mem_mean/mean" in timing and "shopcomp/stage2/tool_mem_mean/mean" not in timing
    assert timing["shopcomp/R_tool/mean"] > 0
    assert 0 < timing["shopcomp/stage2/success/mean"] < 1  # one task's rollouts recommend the wrong product
    assert timing["shopcomp/trajectories"] == len(out) == 8
    assert timing["shopcomp/judge_failed/count"] == 0
    assert sum(v for k, v in timing.items() if k.startswith("shopcomp/termination/")) == pytest.approx(1.0)
    # what the trainer logs for this step
    logged = compute_timing_metrics(batch=out, timing_raw={"gen": 1.0, **timing})
    assert logged["timing_s/shopcomp/R_tool/mean"] == pytest.approx(timing["shopcomp/R_tool/mean"])
    # verl's plain manager would not report them
    plain = AgentLoopManager._performance_metrics(
        manager,
        [[{"generate_sequences": 0.0, "tool_calls": 0.0, "compute_score": 0.0, "num_preempted": -1}] * len(out)],
        out,
    )
    assert not any(k.startswith("shopcomp/") for k in plain)


def test_zero_variance_groups_are_logged_per_step_and_warned_about(setup, tool_model_dir, tmp_path, caplog):
    """GRPO groups (verl's uid) whose scored rollouts all got the same total give no gradient: the
    manager logs their share every step (timing_s/shopcomp/zero_std_groups/share) and warns above
    the agent-loop config's zero_std_warn_share. Stage-1 groups of the gold-knowing policy are all
    equal; with ``mix`` every stage-2 group has one gold and one wrong recommendation."""
    import logging

    from verl.trainer.ppo.metric_utils import compute_timing_metrics
    from verl.trainer.ppo.reward import extract_reward

    from shopping_companion.trainers.verl_agent_loop import ShoppingCompanionAgentLoopManager

    def loops(share: str) -> str:
        f = tmp_path / f"loops-{share}.yaml"
        f.write_text(Path(setup["loop_yaml"]).read_text() + f"  zero_std_warn_share: {share}\n")
        return str(f)

    def step(share: str):
        cfg = verl_config(tool_model_dir, loops(share))
        ds, tok = _dataset(setup, tool_model_dir, cfg)
        other = setup["tasks"][2].reference_product_ids[-1]
        server = ScriptedServer(tok, setup["tasks"], wrong_id=other, mix=True)
        manager = ShoppingCompanionAgentLoopManager.__new__(ShoppingCompanionAgentLoopManager)
        manager.config = cfg
        manager.agent_loop_workers = [
            _LocalWorkerHandle(_worker(cfg, server)),
            _LocalWorkerHandle(_worker(cfg, server)),
        ]
        batch = _batch(ds, n_repeat=2, only=[0, 1, 2, 3])

        async def go():
            return await manager.generate_sequences(batch)

        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="shopping_companion.trainers.verl_agent_loop"):
            out = _run(go())
        return batch, out, [r.getMessage() for r in caplog.records if "zero reward variance" in r.getMessage()]

    batch, out, warned = step("0.4")
    timing = out.meta_info["timing"]
    # the trained scores grouped by the uid GRPO groups by (verl keeps the batch order)
    reward_tensor, _ = extract_reward(out)
    scores = reward_tensor.sum(-1).numpy()
    uids = np.asarray(batch.non_tensor_batch["uid"])
    flat = [np.ptp(scores[uids == u]) <= 1e-6 for u in np.unique(uids)]
    assert len(flat) == 4 and sum(flat) == 2  # the two stage-1 groups
    assert timing["shopcomp/zero_std_groups/share"] == pytest.approx(sum(flat) / len(flat)) == 0.5
    assert timing["shopcomp/zero_std_groups/count"] == 2 and timing["shopcomp/zero_std_groups/groups"] == 4
    # verl's reward loop drops the input's uid from the rollout batch: the agent loop carries it
    assert "uid" not in out.non_tensor_batch
    assert list(out.non_tensor_batch["shopcomp_uid"]) == [str(u) for u in uids]
    logged = compute_timing_metrics(batch=out, timing_raw={"gen": 1.0, **timing})
    assert logged["timing_s/shopcomp/zero_std_groups/share"] == 0.5
    assert len(warned) == 1 and "2 of 4 GRPO groups (50%)" in warned[0] and "zero_std_warn_share=0.40" in warned[0]
    # at the threshold (not above it) and with null: no warning; the metric is logged all the same
    for share in ("0.5", "null"):
        _, out, warned = step(share)
        assert warned == [] and out.meta_info["timing"]["shopcomp/zero_std_groups/share"] == 0.5


def test_zero_std_groups_leave_out_unscored_trajectories_and_single_rollouts():
    from shopping_companion.trainers.verl_agent_loop import rollout_reward_metrics, zero_std_warn_threshold

    def rb(total, failed=False):
        return {"total": total, "components": {"R_z": total, **({"judge_failed": 1.0} if failed else {})}}

    m = rollout_reward_metrics(
        {
            "shopcomp_reward": np.array(
                [rb(1.0), rb(1.0), rb(0.0, failed=True), rb(2.0), rb(0.5), rb(3.0), rb(float("nan")), rb(1.0)],
                dtype=object,
            ),
            # a: equal totals once the failed judgement is left out; b: varies; c: one scored rollout
            # (NaN is not a score); d: a lone row of verl's uid column, its own copy saying otherwise
            "uid": np.array(["a", "a", "a", "b", "b", "c", "c", None], dtype=object),
            "shopcomp_uid": np.array(["x", "x", "x", "x", "x", "x", "x", "d"], dtype=object),
        }
    )
    assert m["shopcomp/zero_std_groups/share"] == 0.5
    assert m["shopcomp/zero_std_groups/count"] == 1 and m["shopcomp/zero_std_groups/groups"] == 2
    # no group with two scored rollouts: no share (never a made-up 0)
    one = rollout_reward_metrics({"shopcomp_reward": np.array([rb(1.0)], dtype=object), "uid": np.array(["a"])})
    assert "shopcomp/zero_std_groups/share" not in one and one["shopcomp/trajectories"] == 1
    assert zero_std_warn_threshold(None) is None and zero_std_warn_threshold(0) == 0.0
    for bad in (1.5, -0.1, "0.5", True):
        with pytest.raises(ValueError, match="zero_std_warn_share"):
            zero_std_warn_threshold(bad)


def test_reward_metrics_leave_out_judge_failures_and_foreign_rows():
    from shopping_companion.trainers.verl_agent_loop import rollout_reward_metrics

    ok = {"total": 2.0, "components": {"R_z": 1.5, "R_tool": 0.25, "R_fmt": 0.25, "success": 1.0}}
    bad = {"total": 0.0, "components": {"R_z": 0.0, "judge_failed": 1.0}}
    m = rollout_reward_metrics(
        {
            "shopcomp_reward": np.array([ok, bad, None], dtype=object),
            "shopcomp_stage": np.array([2, 2, 0], dtype=object),
            "shopcomp_judge_failed": np.array(["", "judge unreachable", ""], dtype=object),
            "shopcomp_termination": np.array(["answered", "answered", None], dtype=object),
            "shopcomp_prefix_mismatches": np.array([0, 1, 0], dtype=object),
            "shopcomp_env_s": np.array([0.5, 1.5, None], dtype=object),
        }
    )
    assert m["shopcomp/R_z/mean"] == 1.5 and m["shopcomp/stage2/env_total/mean"] == 2.0  # the failure is not a 0
    assert m["shopcomp/judge_failed/count"] == 1 and m["shopcomp/trajectories"] == 2
    assert m["shopcomp/termination/answered/share"] == 1.0 and m["shopcomp/prefix_mismatches/sum"] == 1
    assert m["shopcomp/env_s/mean"] == 1.0
    assert rollout_reward_metrics({"responses": np.zeros(3)}) == {}


def test_reward_metrics_survive_malformed_entries_without_inventing_numbers():
    from shopping_companion.trainers.verl_agent_loop import rollout_reward_metrics

    good = {"total": 1.0, "components": {"R_z": 1.0, "R_tool": 0.5}}
    odd = [
        {"total": None, "components": {"R_z": float("nan"), "R_tool": "x"}},  # nothing usable but counted
        {"total": 3.0, "components": {"R_z": float("inf"), "R_tool": 1.5, "stage": 2}},
        {"total": 2.0, "components": None},  # not a breakdown: ignored
        "garbage",
    ]
    m = rollout_reward_metrics(
        {
            "shopcomp_reward": np.array([good, *odd], dtype=object),
            "shopcomp_stage": np.array([1, float("nan"), None, "x"], dtype=object),  # shorter than the rewards
            "shopcomp_prefix_mismatches": np.array([float("nan"), "2", None, 0, 0], dtype=object),
            "shopcomp_env_s": np.array(["slow", 1.0, None, None, None], dtype=object),
            "shopcomp_termination": np.array(["answered", None, "max_turns", None, None], dtype=object),
        }
    )
    assert m["shopcomp/trajectories"] == 3
    assert m["shopcomp/R_z/mean"] == 1.0  # NaN and inf left out, not averaged in
    assert m["shopcomp/R_tool/mean"] == pytest.approx(1.0)  # 0.5 and 1.5; "x" left out
    assert m["shopcomp/env_total/mean"] == pytest.approx(2.0)
    assert m["shopcomp/stage1/R_z/mean"] == 1.0
    assert m["shopcomp/stage2/R_tool/mean"] == 1.5  # stage taken from the components when the column has none
    assert m["shopcomp/prefix_mismatches/sum"] == 2 and m["shopcomp/env_s/mean"] == 1.0
    assert all(np.isfinite(v) for v in m.values())
    assert rollout_reward_metrics({"shopcomp_reward": np.array(None, dtype=object)}) == {}
    assert rollout_reward_metrics({"shopcomp_reward": np.array([], dtype=object)}) == {}
    assert rollout_reward_metrics({"shopcomp_reward": 5}) == {}
    # a missing component is left out, not a 0; "False" is not a judge failure; array cells and
    # huge numbers do not raise
    a = {"total": 1.0, "components": {"R_z": 1.0}}
    b = {"total": 1.0, "components": {"R_z": 0.5, "R_tool": 10**400}}
    m = rollout_reward_metrics(
        {
            "shopcomp_reward": np.array([a, b], dtype=object),
            "shopcomp_judge_failed": np.array(["False", np.array([1, 2])], dtype=object),
            "shopcomp_termination": np.array([np.array(["x", "y"]), "answered"], dtype=object),
            "shopcomp_prefix_mismatches": np.array([1e308, 1e308], dtype=object),
        }
    )
    assert m["shopcomp/R_z/mean"] == 0.75 and "shopcomp/R_tool/mean" not in m
    assert m["shopcomp/judge_failed/count"] == 0 and m["shopcomp/termination/unknown/share"] == 0.5
    assert all(np.isfinite(v) for v in m.values())
