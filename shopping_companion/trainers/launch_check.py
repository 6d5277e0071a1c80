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

from shopping_companion.errors import ConfigError

__all__ = ["check_launch"]

#: verl's ppo_trainer default model path: still there means no model was given
_VERL_DEFAULT_MODEL = "~/models/deepseek-llm-7b-chat"


def _compose(config_dir: Path, name: str, overrides: list[str]) -> Any:
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        cfg = compose(config_name=name, overrides=overrides)
    OmegaConf.resolve(cfg)
    return cfg


def _files(value: Any, key: str, problems: list[str]) -> list[str]:
    """The file list of ``data.train_files`` / ``data.val_files`` (a path or a list of paths)."""
    if isinstance(value, str) and value:
        return [value]
    if isinstance(value, (list, tuple)) or type(value).__name__ == "ListConfig":
        files = [str(v) for v in value if v is not None and str(v)]
        if files:
            return files
    problems.append(f"{key}: expected a parquet path or a list of them, got {value!r}")
    return []


def _rows(value: Any, key: str, problems: list[str], agent_names: set[str] | None) -> int:
    """Rows in the parquet file(s) of ``key``, checking they were made by ``shopcomp grpo prepare``:
    the columns, an ``agent_name`` in the agent-loop registry, ``extra_info`` with ``task_id`` and
    ``stage``, and benchmark directories that exist on this machine."""
    import pyarrow.parquet as pq

    n = 0
    for path in _files(value, key, problems):
        p = Path(path).expanduser()
        if not p.is_file():
            problems.append(f"{key}: {p} does not exist (make it with `shopcomp grpo prepare`)")
            continue
        try:
            table = pq.read_table(p)
        except Exception as e:  # noqa: BLE001 - any unreadable file is reported, not raised
            problems.append(f"{key}: {p} is not a readable parquet file ({type(e).__name__}: {e})")
            continue
        missing = [c for c in ("prompt", "agent_name", "extra_info", "reward_model") if c not in table.column_names]
        if missing:
            problems.append(f"{key}: {p} lacks columns {missing}: not made by `shopcomp grpo prepare`")
            continue
        if table.num_rows == 0:
            problems.append(f"{key}: {p} has no rows")
            continue
        n += table.num_rows
        names = {str(x) for x in table.column("agent_name").to_pylist()}
        if agent_names is not None and names - agent_names:
            problems.append(
                f"{key}: {p} has rows for agent loops {sorted(names - agent_names)} that are not in the "
                f"agent-loop registry ({sorted(agent_names)})"
            )
        extras = table.column("extra_info").to_pylist()
        bad = sum(1 for e in extras if not isinstance(e, dict) or e.get("task_id") is None or e.get("stage") is None)
        if bad:
            problems.append(
                f"{key}: {p}: {bad} of {len(extras)} rows have no extra_info.task_id / extra_info.stage "
                "(rows must come from `shopcomp grpo prepare`)"
            )
        benches = {str(e["benchmark"]) for e in extras if isinstance(e, dict) and e.get("benchmark")}
        for b in sorted(benches):
            if not Path(b).is_dir():
                problems.append(
                    f"{key}: {p} refers to the benchmark directory {b}, which does not exist here (every "
                    "node needs it at that path, or set `benchmark` in the agent-loop config)"
                )
    return n


def _int(cfg: Any, key: str, problems: list[str], minimum: int | None = None) -> int | None:
    """The integer at dotted ``key`` of ``cfg``, or None with a problem naming the key."""
    from omegaconf import OmegaConf

    v = OmegaConf.select(cfg, key)
    try:
        if isinstance(v, bool) or v is None:
            raise TypeError
        i = int(v)
        if i != v and not isinstance(v, str):
            raise TypeError
    except (TypeError, ValueError):
        problems.append(f"{key}: expected an integer, got {v!r}")
        return None
    if minimum is not None and i < minimum:
        problems.append(f"{key}: must be >= {minimum}, got {i}")
    return i


def check_launch(cmd: list[str]) -> tuple[list[str], dict[str, Any]]:
    """Check the verl command built by :func:`~shopping_companion.trainers.launch.launch_command`.

    Returns ``(problems, summary)``: ``problems`` is empty when the launch would pass every check
    (each entry names the config key and what is wrong); ``summary`` has the composed settings a
    user wants to see before spending GPU time (rows, steps, batch, rollouts, lengths, GPUs) and
    ``notes`` on checks that could not run here (verl's LoRA-rank check needs vLLM installed).

    Raises:
        ConfigError: verl or hydra is not installed in this environment, or ``cmd`` is not a
            command of :func:`~shopping_companion.trainers.launch.launch_command`.
    """
    try:
        from verl.trainer.ppo.utils import need_critic, need_reference_policy
        from verl.utils.config import validate_config
    except ImportError as e:
        raise ConfigError(
            f"--check needs the verl extra in this environment ({e}); install it with "
            "scripts/install_rl.sh and run .venv-rl/bin/shopcomp grpo launch --check"
        ) from e
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
        raise ConfigError("cmd: expected --config-path= and --config-name= (from launch_command)")
    problems: list[str] = []
    try:
        cfg = _compose(config_dir, name, overrides)
    except Exception as e:  # noqa: BLE001 - a bad override is a problem to report
        return [f"hydra overrides: the config does not compose ({type(e).__name__}: {e})"], {}
    notes: list[str] = []
    try:
        validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    except Exception as e:  # noqa: BLE001 - verl raises AssertionError/ValueError, odd values give TypeError
        if "vllm" in str(e).lower() and importlib.util.find_spec("vllm") is None:
            # validate_config's LoRA-rank check asks the installed vLLM; without vLLM (a CPU machine)
            # run the other checks on a copy without LoRA and say so
            from omegaconf import OmegaConf

            notes.append("vLLM is not installed here: verl's LoRA-rank check against vLLM was skipped")
            plain = OmegaConf.merge(cfg, {"actor_rollout_ref": {"model": {"lora_rank": 0, "lora": {"rank": 0}}}})
            try:
                validate_config(plain, use_reference_policy=need_reference_policy(plain), use_critic=need_critic(plain))
            except Exception as e2:  # noqa: BLE001
                problems.append(f"verl validate_config: {type(e2).__name__}: {e2}")
        else:
            problems.append(f"verl validate_config: {type(e).__name__}: {e}")

    agent = cfg.actor_rollout_ref.rollout.agent
    loop_path = Path(str(agent.agent_loop_config_path))
    registry: set[str] | None = None
    if not loop_path.is_file():
        problems.append(f"actor_rollout_ref.rollout.agent.agent_loop_config_path: {loop_path} does not exist")
    else:
        import yaml

        try:
            entries = yaml.safe_load(loop_path.read_text()) or []
        except yaml.YAMLError as e:
            entries = None
            problems.append(
                f"actor_rollout_ref.rollout.agent.agent_loop_config_path: {loop_path} is not valid YAML ({e})"
            )
        if entries is not None and not (isinstance(entries, list) and all(isinstance(e, dict) for e in entries)):
            problems.append(
                f"actor_rollout_ref.rollout.agent.agent_loop_config_path: {loop_path} must be a list of "
                "{name, _target_, ...} entries"
            )
            entries = None
        names = {e.get("name"): e for e in entries or []}
        registry = {str(k) for k in names} if entries is not None else None
        want = str(agent.default_agent_loop)
        if entries is not None and want not in names:
            problems.append(
                f"actor_rollout_ref.rollout.agent.default_agent_loop: {want!r} is not in {loop_path} "
                f"(names: {sorted(names)})"
            )
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
            problems.append(
                f"actor_rollout_ref.rollout.agent.agent_loop_manager_class: {manager} ({type(e).__name__}: {e})"
            )
        if cfg.trainer.get("use_v1", False) and str(manager).endswith("ShoppingCompanionAgentLoopManager"):
            problems.append(
                "trainer.use_v1=true needs actor_rollout_ref.rollout.agent.agent_loop_manager_class=null "
                "(ShoppingCompanionAgentLoopManager belongs to the RayPPOTrainer path)"
            )

    rf = cfg.reward.get("custom_reward_function") or {}
    if rf.get("path"):
        path = str(rf.path)
        try:
            if path.startswith("pkg://"):
                fn = getattr(importlib.import_module(path[len("pkg://") :]), str(rf.name))
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
            problems.append(
                f"algorithm.adv_estimator: {est!r} is not registered ({e}); grpo_judged needs this "
                "package installed in the environment (its verl.plugins entry point)"
            )

    n_train = _rows(cfg.data.train_files, "data.train_files", problems, registry)
    n_val = _rows(cfg.data.val_files, "data.val_files", problems, registry)
    bs = _int(cfg, "data.train_batch_size", problems, minimum=1)
    n = _int(cfg, "actor_rollout_ref.rollout.n", problems, minimum=1)
    mini = _int(cfg, "actor_rollout_ref.actor.ppo_mini_batch_size", problems, minimum=1)
    turns = _int(cfg, "actor_rollout_ref.rollout.multi_turn.max_assistant_turns", problems, minimum=1)
    gpus = _int(cfg, "trainer.n_gpus_per_node", problems, minimum=1)
    nodes = _int(cfg, "trainer.nnodes", problems, minimum=1)
    if bs and 0 < n_train < bs:
        problems.append(
            f"data.train_batch_size: {bs} prompts per step but data.train_files has {n_train} rows; verl's "
            "train dataloader drops the incomplete last batch, so no step would run"
        )

    model = str(cfg.actor_rollout_ref.model.path or "")
    mp = Path(model).expanduser()
    if not model or model in ("None", "???") or model == _VERL_DEFAULT_MODEL:
        problems.append("actor_rollout_ref.model.path: not set (pass --model, a local model directory or a hub id)")
    elif mp.exists():
        if not (mp / "config.json").is_file():
            problems.append(
                f"actor_rollout_ref.model.path: {mp} has no config.json (a Hugging Face model directory is expected)"
            )
        elif not mp.is_absolute():
            notes.append(
                f"actor_rollout_ref.model.path {model} is relative: Ray actors may resolve it elsewhere; "
                "give an absolute path"
            )
    elif mp.is_absolute() or model.startswith(("./", "../", "~")) or model.count("/") != 1:
        problems.append(f"actor_rollout_ref.model.path: {model} does not exist")
    else:
        notes.append(
            f"actor_rollout_ref.model.path {model} is not a local directory: it will be read from the "
            "Hugging Face hub (or its cache) on every node"
        )

    r = cfg.actor_rollout_ref.rollout
    summary = {
        "config": name,
        "train_rows": n_train,
        "val_rows": n_val,
        "model": model,
        "train_batch_size": bs,
        "rollout_n": n,
        "trajectories_per_step": bs * n if bs and n else None,
        "ppo_mini_batch_size": mini,
        "total_training_steps": cfg.trainer.get("total_training_steps"),
        "total_epochs": cfg.trainer.get("total_epochs"),
        "max_prompt_length": cfg.data.get("max_prompt_length"),
        "response_length": r.get("response_length"),
        "max_assistant_turns": turns,
        "adv_estimator": est,
        "rubric": (rf.get("reward_kwargs") or {}).get("rubric"),
        "lora_rank": cfg.actor_rollout_ref.model.get("lora_rank"),
        "gpus": gpus * nodes if gpus and nodes else None,
        "trainer": "v1" if cfg.trainer.get("use_v1") else "RayPPOTrainer",
        "notes": notes,
    }
    return problems, summary
