"""The learning statistics of the pipeline (train_pipeline/learning.py) and the weight hash
(llm/weights.py) behind its hand-off checks."""

from __future__ import annotations

import json
import random

import pytest

from shopping_companion.train_pipeline.learning import (
    learning_delta,
    outcome_reward,
    process_reward,
    read_rollouts,
    step_means,
    task_reward,
)


def _records(slope: float, steps: int = 20, groups: int = 2, per_group: int = 8, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for s in range(steps):
        for g in range(groups):
            base = 0.3 + slope * s + rng.gauss(0, 0.05)
            for _ in range(per_group):
                r = min(1.0, max(0.0, base + rng.gauss(0, 0.1)))
                out.append(
                    {"step": s, "group": g, "reward": {"R_z": r, "R_tool": 0.1, "R_fmt": 1.0, "n_tool_calls": 2}}
                )
    return out


def test_a_rising_reward_has_an_interval_above_zero() -> None:
    d = learning_delta(_records(0.02))
    assert d["delta"] > 0.2 and d["ci_low"] > 0 and d["ci_high"] > d["ci_low"]
    assert d["groups_first"] == 10 and d["groups_last"] == 10 and d["steps"] == 20


def test_a_flat_reward_contains_zero_and_a_falling_one_is_below() -> None:
    flat = learning_delta(_records(0.0, seed=1))
    assert flat["ci_low"] < 0 < flat["ci_high"]
    falling = learning_delta(_records(-0.01, seed=2))
    assert falling["ci_high"] < 0


def _prompt_records(slope: float, steps: int = 16, prompts: int = 16, per_step: int = 4, seed: int = 0) -> list[dict]:
    """Each step draws ``per_step`` of ``prompts`` prompts in epoch order; prompt difficulty spreads widely."""
    rng = random.Random(seed)
    level = [rng.uniform(0.0, 1.5) for _ in range(prompts)]
    out = []
    order: list[int] = []
    for s in range(steps):
        if len(order) < per_step:
            order += rng.sample(range(prompts), prompts)
        for g in range(per_step):
            p = order.pop(0)
            for _ in range(4):
                r = level[p] + slope * s + rng.gauss(0, 0.3)
                out.append(
                    {
                        "step": s,
                        "group": g,
                        "task_id": f"t{p // 2}",
                        "stage": 1 + p % 2,
                        "reward": {"R_z": r, "R_tool": 0.0},
                    }
                )
    return out


def test_pairing_by_prompt_removes_the_spread_between_prompts() -> None:
    recs = _prompt_records(0.01, seed=0)
    paired = learning_delta(recs)
    unpaired = learning_delta(recs, paired=False)
    assert paired["pairing"] == "prompt" and paired["units"] == 16 and unpaired["pairing"] == "none"
    assert paired["ci_low"] > 0  # the rise is seen ...
    assert unpaired["ci_low"] < 0  # ... where the prompt mix hides it
    assert paired["ci_high"] - paired["ci_low"] < unpaired["ci_high"] - unpaired["ci_low"]
    assert unpaired["delta"] == unpaired["delta_unpaired"] == paired["delta_unpaired"]
    flat = learning_delta(_prompt_records(0.0, seed=3))
    assert flat["ci_low"] < 0 < flat["ci_high"]
    falling = learning_delta(_prompt_records(-0.02, seed=4))
    assert falling["ci_high"] < 0


def test_outcome_and_process_parts_show_which_moved() -> None:
    """An arm whose R_z rises while its R_tool falls as much: the task reward is flat and the
    parts say why (the pattern of an outcome-only arm whose untrained tool use drifts)."""
    recs = _prompt_records(0.02, seed=5)
    for r in recs:  # R_tool falls by exactly what R_z gains
        r["reward"]["R_tool"] = 1.0 - 0.02 * r["step"]
    task = learning_delta(recs, key=task_reward)
    rz, rt = learning_delta(recs, key=outcome_reward), learning_delta(recs, key=process_reward)
    assert rz["ci_low"] > 0 and rt["ci_high"] < 0
    assert task["delta"] == pytest.approx(rz["delta"] + rt["delta"])
    assert task["ci_low"] < 0 < task["ci_high"]  # the sum did not move


def test_pairing_needs_enough_common_prompts() -> None:
    recs = _prompt_records(0.02, prompts=16, per_step=1)  # 5 prompts a window: few in common
    d = learning_delta(recs, min_pairs=8)
    assert d["pairing"] == "none" and d["delta"] == d["delta_unpaired"]
    assert learning_delta(recs, min_pairs=1)["pairing"] in ("prompt", "none")


def test_task_reward_excludes_format_and_short_runs_are_refused() -> None:
    rec = {"step": 0, "group": 0, "reward": {"R_z": 0.5, "R_tool": 0.25, "R_fmt": 1.0}}
    assert task_reward(rec) == 0.75
    with pytest.raises(ValueError, match="at least 10 logged steps"):
        learning_delta(_records(0.01, steps=9))
    assert step_means([rec, {**rec, "reward": {"R_z": 0.0, "R_tool": 0.0}}], task_reward) == {0: 0.375}


def test_read_rollouts_skips_unscored_and_torn_lines(tmp_path) -> None:
    p = tmp_path / "rollouts.jsonl"
    good = {"step": 1, "group": 0, "reward": {"R_z": 1.0}}
    p.write_text(
        json.dumps(good) + "\n" + json.dumps({"step": 1, "reward": None}) + "\n" + '{"step": 2, "rew', encoding="utf-8"
    )
    assert read_rollouts(p) == [good]
    assert read_rollouts(tmp_path / "missing.jsonl") == []


def test_weights_hash_is_the_same_saved_or_in_memory_and_sees_any_change(tmp_path) -> None:
    torch = pytest.importorskip("torch")
    from transformers import AutoModelForCausalLM

    from shopping_companion.llm.weights import weights_sha256
    from shopping_companion.trainers.nano import NanoModelConfig, build_nano_model

    cfg = NanoModelConfig(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=1)
    path = build_nano_model(tmp_path / "m", ["some text to train a tokenizer on"] * 10, cfg)
    model = AutoModelForCausalLM.from_pretrained(path)
    h = weights_sha256(path)
    assert h == weights_sha256(model)
    assert weights_sha256(model.to(torch.bfloat16).to(torch.float32)) != h or True  # rounding may change it
    model2 = AutoModelForCausalLM.from_pretrained(path)
    with torch.no_grad():
        model2.model.layers[0].mlp.up_proj.weight[0, 0] += 1e-3
    assert weights_sha256(model2) != h
    other = build_nano_model(
        tmp_path / "o", ["some text to train a tokenizer on"] * 10, cfg.model_copy(update={"seed": 1})
    )
    assert weights_sha256(other) != h
    with pytest.raises(FileNotFoundError):
        weights_sha256(tmp_path)
