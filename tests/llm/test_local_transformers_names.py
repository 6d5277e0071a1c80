"""The default policy name of :class:`LocalTransformersBackend` (issue 31, item 5): a training
checkpoint is named by its run and step, so two checkpoints of the same step in different runs are
two policies. Pure path rules: nothing is loaded (the backend itself:
tests/llm/test_local_transformers.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from shopping_companion.llm.local_transformers import checkpoint_label, checkpoint_step, default_policy_name


@pytest.mark.parametrize(
    ("path", "name", "step"),
    [
        # TRL / Hugging Face Trainer: <output_dir>/checkpoint-<N>
        ("runs/grpo/outcome_only/checkpoint-60", "local:outcome_only/checkpoint-60", 60),
        ("runs/grpo/outcome_tool/checkpoint-60/", "local:outcome_tool/checkpoint-60", 60),
        # verl: <project>/<experiment>/global_step_<N>/actor (or its huggingface/ directory, or the step)
        ("checkpoints/shopcomp/grpo_outcome_tool/global_step_40/actor", "local:grpo_outcome_tool/global_step_40", 40),
        ("checkpoints/shopcomp/exp/global_step_40/actor/huggingface", "local:exp/global_step_40", 40),
        ("checkpoints/shopcomp/exp/global_step_40", "local:exp/global_step_40", 40),
        # anything else keeps its directory name
        ("/ckpt/sft-merged", "local:sft-merged", None),
        ("/models/Qwen3-4B", "local:Qwen3-4B", None),
        ("/x/actor", "local:actor", None),  # not under a global_step_<N>
        ("/x/checkpoint-final", "local:checkpoint-final", None),
        ("/x/my-checkpoint-60", "local:my-checkpoint-60", None),
    ],
)
def test_default_name_identifies_run_and_step(path: str, name: str, step: int | None):
    assert default_policy_name(path) == name
    assert checkpoint_step(path) == step
    assert checkpoint_label(path) == name.removeprefix("local:")


def test_two_runs_at_the_same_step_get_two_names():
    a = default_policy_name("runs/grpo/outcome_only/checkpoint-60")
    b = default_policy_name("runs/grpo/outcome_tool/checkpoint-60")
    assert a != b


def test_lora_suffix_and_relative_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    assert default_policy_name("/ckpt/base", "/ckpt/lora") == "local:base+lora:lora"
    assert (
        default_policy_name("/ckpt/base", "/out/grpo_lora/checkpoint-120") == "local:base+lora:grpo_lora/checkpoint-120"
    )
    assert default_policy_name("/ckpt/base", None) == "local:base"
    # a checkpoint given relative to the working directory is named by its run too
    run = tmp_path / "outcome_only" / "checkpoint-60"
    run.mkdir(parents=True)
    monkeypatch.chdir(run)
    assert default_policy_name(".") == "local:outcome_only/checkpoint-60"
    monkeypatch.chdir(run.parent)
    assert default_policy_name("checkpoint-60") == "local:outcome_only/checkpoint-60"
    # a symlink keeps the name it is given by (it is not resolved)
    link = tmp_path / "outcome_tool" / "checkpoint-60"
    link.parent.mkdir()
    link.symlink_to(run)
    assert default_policy_name(link) == "local:outcome_tool/checkpoint-60"
    assert default_policy_name("~/ckpt/sft-merged") == "local:sft-merged"
