"""configs/grpo/*.yaml compose with verl 0.9.1's own trainer config (Hydra) and hold the paper's
settings (App. D.2); the two variants differ only in the scoring rubric."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.extras.rl.conftest import require

require("verl", "hydra")

CONFIG_DIR = Path(__file__).resolve().parents[3] / "configs" / "grpo"


def _compose(name: str):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        return compose(config_name=name, overrides=["actor_rollout_ref.model.path=/models/sft-merged"])


@pytest.mark.parametrize("variant,rubric", [("outcome_tool", "paper"), ("outcome_only", "outcome_only")])
def test_variants_compose_with_verl_and_hold_the_paper_settings(variant, rubric):
    from omegaconf import OmegaConf

    cfg = _compose(variant)
    OmegaConf.resolve(cfg)
    r = cfg.actor_rollout_ref.rollout
    assert cfg.algorithm.adv_estimator == "grpo_judged"  # GRPO without judge failures (test_grpo_judged_advantage.py)
    assert (r.n, r.temperature, r.top_k, r.top_p) == (8, 0.6, 20, 0.95)
    assert r.multi_turn.enable and r.multi_turn.max_assistant_turns == 20
    assert r.name == "vllm" and r.response_length == cfg.data.max_response_length == 32768
    assert cfg.data.train_batch_size == 16 and cfg.actor_rollout_ref.actor.ppo_mini_batch_size == 8
    assert cfg.actor_rollout_ref.actor.optim.lr == 1e-6 and cfg.actor_rollout_ref.actor.strategy == "fsdp"
    assert cfg.trainer.n_gpus_per_node == 8 and "wandb" in cfg.trainer.logger
    assert cfg.actor_rollout_ref.model.lora_rank == 64
    assert list(cfg.actor_rollout_ref.model.target_modules) == ["q_proj", "k_proj", "v_proj", "o_proj"]
    assert r.agent.default_agent_loop == "shopping_companion"
    assert (CONFIG_DIR.parent.parent / r.agent.agent_loop_config_path).is_file()
    # the trainer loads our manager (reward components in training-step metrics) from this key
    from verl.utils.import_utils import load_class_from_fqn

    from shopping_companion.trainers.verl_agent_loop import ShoppingCompanionAgentLoopManager

    assert (
        load_class_from_fqn(r.agent.agent_loop_manager_class, "AgentLoopManager") is ShoppingCompanionAgentLoopManager
    )
    assert cfg.trainer.use_v1 is False  # the RayPPOTrainer path that manager belongs to
    with pytest.raises(ValueError, match="use_v1"):  # verl's v1 trainer would wait forever on this manager
        ShoppingCompanionAgentLoopManager(OmegaConf.merge(cfg, {"trainer": {"use_v1": True}}), llm_client=None)
    rf = cfg.reward.custom_reward_function
    assert rf.path == "pkg://shopping_companion.trainers.reward" and rf.name == "compute_score"
    assert rf.reward_kwargs.reward_config == rubric and "rubric" not in rf.reward_kwargs  # the one spec key
    # verl loads our reward hook from that config, with the variant's reward spec bound
    from verl.trainer.ppo.reward import get_custom_reward_fn

    fn = get_custom_reward_fn(cfg)
    br = {"total": 3.0, "components": {"R_z": 1.0, "R_tool": 1.0, "R_fmt": 1.0}}
    assert fn(data_source="shopping_companion", solution_str="", ground_truth="{}", extra_info={"shopcomp_reward": br})[
        "score"
    ] == (3.0 if rubric == "paper" else 2.0)


def test_the_reward_spec_json_round_trips_through_hydra_compose(tmp_path):
    """`grpo launch --reward-config X` puts the spec's JSON into the one key both verl sides read;
    composed by Hydra (as verl's main_ppo does) it reads back as the same spec, custom module and
    python_path included, and verl's reward hook scores with it."""
    from omegaconf import OmegaConf

    from shopping_companion.rewards.spec import load_reward_spec
    from shopping_companion.trainers import launch, verl_agent_loop
    from shopping_companion.trainers.launch import reward_config_override

    assert launch.REWARD_CONFIG_KEY == verl_agent_loop.REWARD_CONFIG_KEY
    (tmp_path / "plug ins").mkdir()  # a space in the path, quotes and a ${ in the source
    (tmp_path / "plug ins" / "cfg_rt_plugin.py").write_text(
        "from shopping_companion.rewards.rubric import Rubric\n"
        "RUBRIC = Rubric([('outcome', 2.0), ('format', 1.0)], name=\"it's ${x}\")\n"
    )
    spec = load_reward_spec(
        {
            "rubric": "cfg_rt_plugin:RUBRIC",
            "python_path": [str(tmp_path / "plug ins")],
            "judge": {"kind": "llm", "model": "Qwen/Qwen3-32B", "base_url": "http://judge:8000/v1"},
            "scoring_deadline_s": 90,
            "source": "/cfg/it's ${weird}.yaml",
        }
    )
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        cfg = compose(config_name="outcome_tool", overrides=[reward_config_override(spec)])
    OmegaConf.resolve(cfg)
    OmegaConf.resolve(cfg)  # verl resolves again in its workers: a `${` in the spec must not become an interpolation
    value = OmegaConf.select(cfg, verl_agent_loop.REWARD_CONFIG_KEY)
    assert isinstance(value, str) and load_reward_spec(value) == spec
    from verl.trainer.ppo.reward import get_custom_reward_fn

    br = {"total": 0.0, "components": {"R_z": 1.0, "R_tool": 1.0, "R_fmt": 0.5}}
    out = get_custom_reward_fn(cfg)(
        data_source="s", solution_str="", ground_truth="{}", extra_info={"shopcomp_reward": br}
    )
    assert out["score"] == 2.5  # 2 R_z + 1 R_fmt: the custom rubric, imported through its python_path


def test_checkpoint_dir_follows_shopcomp_ckpt_dir(monkeypatch):
    """grpo_common.yaml: trainer.default_local_dir = ${oc.env:SHOPCOMP_CKPT_DIR,checkpoints}/<project>/<experiment>."""
    from omegaconf import OmegaConf

    monkeypatch.delenv("SHOPCOMP_CKPT_DIR", raising=False)
    cfg = _compose("outcome_only")
    OmegaConf.resolve(cfg)
    assert cfg.trainer.default_local_dir == "checkpoints/shopping_companion_grpo/outcome_only"  # verl's default
    monkeypatch.setenv("SHOPCOMP_CKPT_DIR", "/shared/ckpt")
    cfg = _compose("outcome_tool")
    OmegaConf.resolve(cfg)
    assert cfg.trainer.default_local_dir == "/shared/ckpt/shopping_companion_grpo/outcome_tool"


def test_verl_use_external_modules_registers_grpo_judged_without_the_entry_point():
    """A package shipped through Ray's py_modules has no entry point; `grpo submit` sets
    VERL_USE_EXTERNAL_MODULES, which `import verl` imports in every process."""
    import os
    import subprocess
    import sys

    code = (
        "import verl\n"
        "from verl.trainer.ppo.core_algos import get_adv_estimator_fn\n"
        "try:\n    get_adv_estimator_fn('grpo_judged'); print('REGISTERED')\n"
        "except Exception as e:\n    print('MISSING', type(e).__name__)\n"
    )
    env = {**os.environ, "VERL_USE_EXTERNAL_PLUGINS": "none"}
    env.pop("VERL_USE_EXTERNAL_MODULES", None)
    # both interpreters at once (each spends its time importing verl)
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    off = subprocess.Popen([sys.executable, "-c", code], env=env, **pipes)
    on = subprocess.Popen(
        [sys.executable, "-c", code],
        env={**env, "VERL_USE_EXTERNAL_MODULES": "shopping_companion.trainers.verl_plugin"},
        **pipes,
    )
    (off_out, off_err), (on_out, on_err) = off.communicate(timeout=300), on.communicate(timeout=300)
    assert "MISSING" in off_out, off_out + off_err[-2000:]  # entry points off: not registered
    assert "REGISTERED" in on_out, on_out + on_err[-2000:]
