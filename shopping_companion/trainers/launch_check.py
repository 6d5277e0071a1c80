"""Pre-flight check of a verl GRPO launch, on CPU and without Ray (``shopcomp grpo launch --check``).

Composes the exact config the launch command would run (our ``configs/grpo/<variant>.yaml`` over
verl's ``ppo_trainer`` with the command's Hydra overrides), runs verl's own ``validate_config`` (the
batch-size and parallelism checks ``verl.trainer.main_ppo`` runs first), and checks what verl would
only discover minutes later inside Ray actors: the data files and their rows, the model directory,
the agent-loop registry and class, the agent-loop manager class, the reward function and the
advantage estimator. Needs the ``verl`` extra (``scripts/install_rl.sh``).
"""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from typing import Any

__all__ = ["check_launch"]


def _compose(config_dir: Path, name: str, overrides: list[str]) -> Any:
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        cfg = compose(config_name=name, overrides=overrides)
    OmegaConf.resolve(cfg)
    return cfg


def _rows(path: str, key: str, problems: list[str]) -> int:
    p = Path(path)
    if not p.is_file():
        problems.append(f"{key}: {p} does not exist (make it with `shopcomp grpo prepare`)")
        return 0
    try:
        import pyarrow.parquet as pq

        table = pq.read_table(p)
    except Exception as e:  # noqa: BLE001 - any unreadable file is reported, not raised
        problems.append(f"{key}: {p} is not a readable parquet file ({type(e).__name__}: {e})")
        return 0
    missing = [c for c in ("prompt", "agent_name", "extra_info", "reward_model") if c not in table.column_names]
    if missing:
        problems.append(f"{key}: {p} lacks columns {missing}: not made by `shopcomp grpo prepare`")
    if table.num_rows == 0:
        problems.append(f"{key}: {p} has no rows")
    return table.num_rows


def check_launch(cmd: list[str]) -> tuple[list[str], dict[str, Any]]:
    """Check the verl command built by :func:`~shopping_companion.trainers.cli.launch_command`.

    Returns ``(problems, summary)``: ``problems`` is empty when the launch would pass every check
    (each entry names the config key and what is wrong); ``summary`` has the composed settings a
    user wants to see before spending GPU time (rows, steps, batch, rollouts, lengths, GPUs) and
    ``notes`` on checks that could not run here (verl's LoRA-rank check needs vLLM installed).

    Raises:
        RuntimeError: verl or hydra is not installed in this environment.
    """
    try:
        from verl.trainer.ppo.utils import need_critic, need_reference_policy
        from verl.utils.config import validate_config
    except ImportError as e:
        raise RuntimeError(f"--check needs the verl extra in this environment ({e}); install it with "
                           "scripts/install_rl.sh and run .venv-rl/bin/shopcomp grpo launch --check") from e
    config_dir = name = None
    overrides = []
    for a in cmd[3:]:
        if a.startswith("--config-path="):
            config_dir = Path(a.split("=", 1)[1])
        elif a.startswith("--config-name="):
            name = a.split("=", 1)[1]
        else:
            overrides.append(a)
    if config_dir is None or name is None:
        raise ValueError("cmd: expected --config-path= and --config-name= (from launch_command)")
    problems: list[str] = []
    try:
        cfg = _compose(config_dir, name, overrides)
    except Exception as e:  # noqa: BLE001 - a bad override is a problem to report
        return [f"hydra overrides: the config does not compose ({type(e).__name__}: {e})"], {}
    notes: list[str] = []
    try:
        validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    except (AssertionError, ValueError) as e:
        if "vllm" in str(e).lower() and importlib.util.find_spec("vllm") is None:
            # validate_config's LoRA-rank check asks the installed vLLM; without vLLM (a CPU machine)
            # run the other checks on a copy without LoRA and say so
            from omegaconf import OmegaConf

            notes.append("vLLM is not installed here: verl's LoRA-rank check against vLLM was skipped")
            plain = OmegaConf.merge(cfg, {"actor_rollout_ref": {"model": {"lora_rank": 0, "lora": {"rank": 0}}}})
            try:
                validate_config(plain, use_reference_policy=need_reference_policy(plain), use_critic=need_critic(plain))
            except (AssertionError, ValueError) as e2:
                problems.append(f"verl validate_config: {e2}")
        else:
            problems.append(f"verl validate_config: {e}")

    n_train = _rows(cfg.data.train_files, "data.train_files", problems)
    n_val = _rows(cfg.data.val_files, "data.val_files", problems)
    bs = int(cfg.data.train_batch_size)
    if 0 < n_train < bs:
        problems.append(f"data.train_batch_size: {bs} prompts per step but data.train_files has {n_train} rows; verl's "
                        "train dataloader drops the incomplete last batch, so no step would run")

    model = str(cfg.actor_rollout_ref.model.path or "")
    mp = Path(model).expanduser()
    if not model or model == "None":
        problems.append("actor_rollout_ref.model.path: not set (--model)")
    elif mp.exists():
        if not (mp / "config.json").is_file():
            problems.append(f"actor_rollout_ref.model.path: {mp} has no config.json (a Hugging Face model directory is expected)")
    elif mp.is_absolute() or model.startswith(("./", "../", "~")) or model.count("/") != 1:
        problems.append(f"actor_rollout_ref.model.path: {model} does not exist")

    agent = cfg.actor_rollout_ref.rollout.agent
    loop_path = Path(str(agent.agent_loop_config_path))
    if not loop_path.is_file():
        problems.append(f"actor_rollout_ref.rollout.agent.agent_loop_config_path: {loop_path} does not exist")
    else:
        import yaml

        entries = yaml.safe_load(loop_path.read_text()) or []
        names = {e.get("name"): e for e in entries if isinstance(e, dict)}
        want = str(agent.default_agent_loop)
        if want not in names:
            problems.append(f"actor_rollout_ref.rollout.agent.default_agent_loop: {want!r} is not in {loop_path} "
                            f"(names: {sorted(names)})")
        for entry in names.values():
            target = str(entry.get("_target_", ""))
            mod, _, cls = target.rpartition(".")
            try:
                getattr(importlib.import_module(mod), cls)
            except Exception as e:  # noqa: BLE001
                problems.append(f"{loop_path}: _target_ {target!r} cannot be imported ({type(e).__name__}: {e})")
    manager = agent.get("agent_loop_manager_class")
    if manager:
        from verl.utils.import_utils import load_class_from_fqn

        try:
            load_class_from_fqn(str(manager), "AgentLoopManager")
        except Exception as e:  # noqa: BLE001
            problems.append(f"actor_rollout_ref.rollout.agent.agent_loop_manager_class: {manager} ({type(e).__name__}: {e})")
        if cfg.trainer.get("use_v1", False) and str(manager).endswith("ShoppingCompanionAgentLoopManager"):
            problems.append("trainer.use_v1=true needs actor_rollout_ref.rollout.agent.agent_loop_manager_class=null "
                            "(ShoppingCompanionAgentLoopManager belongs to the RayPPOTrainer path)")

    rf = cfg.reward.get("custom_reward_function") or {}
    if rf.get("path"):
        path = str(rf.path)
        try:
            if path.startswith("pkg://"):
                fn = getattr(importlib.import_module(path[len("pkg://"):]), str(rf.name))
            else:

                spec = importlib.util.spec_from_file_location("_reward_fn", path)
                if spec is None or spec.loader is None:
                    raise FileNotFoundError(path)
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
                fn = getattr(module, str(rf.name))
            if not callable(fn):
                raise TypeError(f"{rf.name} is not callable")
        except Exception as e:  # noqa: BLE001
            problems.append(f"reward.custom_reward_function: {path}:{rf.get('name')} ({type(e).__name__}: {e})")
        rubric = (rf.get("reward_kwargs") or {}).get("rubric")
        if rubric is not None:
            from shopping_companion.rewards.rubric import load_rubric

            try:
                load_rubric(str(rubric))
            except Exception as e:  # noqa: BLE001
                problems.append(f"reward.custom_reward_function.reward_kwargs.rubric: {rubric!r} ({e})")

    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    est = str(cfg.algorithm.adv_estimator)
    if est not in ("gae",):
        try:
            get_adv_estimator_fn(est)
        except Exception as e:  # noqa: BLE001
            problems.append(f"algorithm.adv_estimator: {est!r} is not registered ({e}); grpo_judged needs this "
                            "package installed in the environment (its verl.plugins entry point)")

    r = cfg.actor_rollout_ref.rollout
    summary = {
        "config": name, "train_rows": n_train, "val_rows": n_val, "model": model,
        "train_batch_size": int(cfg.data.train_batch_size), "rollout_n": int(r.n),
        "trajectories_per_step": int(cfg.data.train_batch_size) * int(r.n),
        "ppo_mini_batch_size": int(cfg.actor_rollout_ref.actor.ppo_mini_batch_size),
        "total_training_steps": cfg.trainer.get("total_training_steps"), "total_epochs": int(cfg.trainer.total_epochs),
        "max_prompt_length": int(cfg.data.max_prompt_length), "response_length": int(r.response_length),
        "max_assistant_turns": int(r.multi_turn.max_assistant_turns), "adv_estimator": est,
        "rubric": (rf.get("reward_kwargs") or {}).get("rubric"), "lora_rank": int(cfg.actor_rollout_ref.model.lora_rank),
        "gpus": int(cfg.trainer.n_gpus_per_node) * int(cfg.trainer.nnodes), "trainer": "v1" if cfg.trainer.get("use_v1") else "RayPPOTrainer",
        "notes": notes,
    }
    return problems, summary
