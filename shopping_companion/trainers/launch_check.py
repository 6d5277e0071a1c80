"""Pre-flight check of a verl GRPO launch, on CPU and without Ray (``shopcomp grpo launch --check``).

Composes the exact config the launch command would run (our ``configs/grpo/<variant>.yaml`` over
verl's ``ppo_trainer`` with the command's Hydra overrides), runs verl's own ``validate_config`` (the
batch-size and parallelism checks ``verl.trainer.main_ppo`` runs first), and checks what verl would
only discover minutes later inside Ray actors: the data files and their rows, the model directory,
the agent-loop registry and class, the agent-loop manager class, the reward function, the reward
spec (its rubric imports here with its ``python_path``; every component the scoring side needs is
computed by the agent loop; an LLM judge's endpoint answers), the tool service when the agent loop's ``tool_service`` is
``serve:URL`` (ready, holds the rows' benchmarks, scores with the run's reward spec), the
advantage estimator, wandb's mode and key, the checkpoint directory, and that prompt + response
lengths fit the model's context (:func:`check_context`). Needs the ``verl`` extra (``scripts/install_rl.sh``).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
from pathlib import Path
from typing import Any

from shopping_companion.errors import ConfigError
from shopping_companion.llm.model_files import model_config
from shopping_companion.trainers.launch import REWARD_CONFIG_KEY

__all__ = [
    "check_checkpoint_dir",
    "check_context",
    "check_launch",
    "check_reward",
    "check_tool_service",
    "check_wandb",
    "model_context",
]

_REPO = Path(__file__).resolve().parents[2]
#: node-local places: a checkpoint directory there is not shared between nodes
_NODE_LOCAL = ("/tmp", "/var/tmp", "/dev/shm", "/run")
#: Hydra command-line flags that are not config overrides (skipped by the check): with a value, without
_HYDRA_FLAGS_WITH_VALUE = ("--cfg", "-c", "--package", "-p")
_HYDRA_FLAGS = ("--resolve",)
#: the agent loop's rubric when neither the trainer config nor its entry names one (resources.py)
_AGENT_DEFAULT_RUBRIC = "paper"

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


def _rows(
    value: Any, key: str, problems: list[str], agent_names: set[str] | None, seen: dict[str, set[str]] | None = None
) -> int:
    """Rows in the parquet file(s) of ``key``, checking they were made by ``shopcomp grpo prepare``:
    the columns, an ``agent_name`` in the agent-loop registry, ``extra_info`` with ``task_id`` and
    ``stage``, and benchmark directories that exist on this machine."""
    import pyarrow.parquet as pq

    n = 0
    for path in _files(value, key, problems):
        p = Path(path).expanduser()
        if seen is not None:
            seen.setdefault("files", set()).add(str(p))
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
        if seen is not None:
            seen.setdefault("benchmarks", set()).update(benches)
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


def _rubric_label(rubric: Any) -> str:
    """A short name for a spec's rubric reference: the string itself, else the config's name."""
    if isinstance(rubric, str):
        return rubric
    if isinstance(rubric, dict) and rubric.get("name"):
        return f"{rubric['name']} (inline)"
    return "inline rubric"


def _ref_label(ref: Any) -> str:
    """A short description of a reward-config reference for problem lines: a spec's JSON (how
    the launch passes it) becomes ``reward spec <file>`` or ``rubric <label>``; a short string
    is quoted as is; anything else is cut to 80 characters."""
    if isinstance(ref, str) and ref.lstrip().startswith("{"):
        try:
            data = json.loads(ref)
        except ValueError:
            data = None
        if isinstance(data, dict):
            if data.get("source"):
                return f"reward spec {data['source']}"
            return f"rubric {_rubric_label(data.get('rubric', 'paper'))!r}"
    if isinstance(ref, (dict, list)):
        return _rubric_label(ref)
    text = repr(ref)
    return text if len(text) <= 80 else text[:77] + "..."


def _member_keys(ref: Any) -> list[str]:
    """Member keys of the rubric a reward-config reference names (imports its modules)."""
    from shopping_companion.assembly.reward_spec import load_reward_spec

    return [m.key for m in load_reward_spec(ref).build_rubric().members]


def check_reward(rf: Any, entries: list[dict[str, Any]], problems: list[str]) -> dict[str, Any] | None:
    """Check the reward spec of a composed config.

    ``rf`` is ``reward.custom_reward_function`` (its ``reward_kwargs``: ``reward_config``, the one
    spec both verl sides read, or the older ``rubric`` of ``compute_score``); ``entries`` are the
    agent-loop registry entries of our agent loop (their older ``rubric`` key). Appends a problem
    (naming the key) when both forms are set on one side, a spec does not load or its rubric's
    modules do not import here (with its ``python_path``), the scoring rubric has members the agent
    loop's rubric does not compute (``compute_score`` would fail on every trajectory), or an LLM
    judge's endpoint does not answer. Returns the agent loop's spec as a summary
    (``rubric``, ``source``, ``components``, ``judge``, ``scoring_deadline_s``, ``python_path``),
    or None when it could not be loaded.
    """
    from shopping_companion.errors import ShopCompError
    from shopping_companion.assembly.reward_spec import load_reward_spec

    kwargs = dict((rf or {}).get("reward_kwargs") or {})
    rc, rub = kwargs.get("reward_config"), kwargs.get("rubric")
    rc = None if rc is None else str(rc)
    if rc is not None and rub is not None:
        problems.append(
            f"reward.custom_reward_function.reward_kwargs: reward_config and the older rubric={rub!r} are both set; "
            "compute_score refuses that: give the spec once (shopcomp grpo launch --reward-config X) and drop "
            "reward_kwargs.rubric"
        )
    scoring_key = REWARD_CONFIG_KEY if rc is not None else "reward.custom_reward_function.reward_kwargs.rubric"
    scoring_ref = rc if rc is not None else rub
    scoring: list[str] | None = None
    if scoring_ref is not None:
        try:
            scoring = _member_keys(str(scoring_ref) if not isinstance(scoring_ref, (dict, list)) else scoring_ref)
        except (ShopCompError, ImportError, ValueError, TypeError, AttributeError) as e:
            problems.append(f"{scoring_key}: {_ref_label(scoring_ref)} does not load here ({type(e).__name__}: {e})")
    summary: dict[str, Any] | None = None
    for entry in entries:
        name = entry.get("name")
        erub = entry.get("rubric")
        if rc is not None and erub is not None:
            problems.append(
                f"agent loop {name!r}: rubric={erub!r} in the agent-loop config and {REWARD_CONFIG_KEY} are both "
                f"set; the agent loop refuses that: remove its rubric (the spec goes in {REWARD_CONFIG_KEY})"
            )
            continue
        if entry.get("resources"):
            continue  # registered services (tests) bring their own judge and rubric
        agent_ref = rc if rc is not None else (erub if erub is not None else _AGENT_DEFAULT_RUBRIC)
        where = (
            REWARD_CONFIG_KEY
            if rc is not None
            else f"agent loop {name!r} rubric" + ("" if erub is not None else f" (none set: {_AGENT_DEFAULT_RUBRIC})")
        )
        try:
            spec = load_reward_spec(agent_ref)
            keys = spec.component_keys()
        except (ShopCompError, ImportError, ValueError, TypeError, AttributeError) as e:
            if agent_ref is not scoring_ref:  # the same failure is reported once
                problems.append(f"{where}: {_ref_label(agent_ref)} does not load here ({type(e).__name__}: {e})")
            continue
        if scoring is not None:
            missing = [k for k in scoring if k not in keys]
            if missing:
                theirs = f"its rubric, from {where}: {_rubric_label(spec.rubric)!r}, computes {keys}"
                one = scoring_ref if isinstance(scoring_ref, str) and len(scoring_ref) < 80 else "X"
                problems.append(
                    f"{scoring_key}: the scoring rubric ({_ref_label(scoring_ref)}) needs components {missing} that "
                    f"the agent loop {name!r} does not compute ({theirs}); compute_score would fail on every "
                    f"trajectory. Give both sides one spec: --reward-config {one}"
                )
        if summary is None:
            try:
                judge = spec.ping_judge()
            except ShopCompError as e:
                judge = spec.judge.describe()
                problems.append(
                    f"{where}: judge.base_url {spec.judge.base_url or '(provider default)'}: the LLM judge "
                    f"({judge}) does not answer ({e}); start it or fix judge.base_url in the reward spec"
                )
            summary = {
                "rubric": _rubric_label(spec.rubric),
                "source": spec.source,
                "components": keys,
                "judge": judge,
                "scoring_deadline_s": spec.scoring_deadline_s,
                "python_path": list(spec.python_path),
            }
    return summary


def check_tool_service(
    entries: list[dict[str, Any]], benchmarks: set[str], reward_config: str | None, problems: list[str]
) -> dict[str, Any] | None:
    """Check the tool service of each agent-loop entry whose ``tool_service`` is ``serve:URL``
    (:func:`~shopping_companion.serve.remote.connect`): it answers and is ready, holds every
    benchmark the rows (``benchmarks``, or the entry's own ``benchmark``) refer to, and scores
    with the agent loop's reward spec (``reward_config``, else the entry's ``rubric``, else
    ``paper``). Appends one problem per failure, naming the entry, the URL and what is wrong (also
    for a ``tool_service`` or ``service`` value that is not valid). Returns ``{"tool_service",
    "benchmarks": {dir: service name}, "judge", "rubric"}`` of the last checked service, or None
    when every entry is local."""
    from pydantic import ValidationError

    from shopping_companion.assembly.endpoints import ServiceConfig, check_tools
    from shopping_companion.errors import ShopCompError
    from shopping_companion.serve.remote import connect

    summary: dict[str, Any] | None = None
    for entry in entries:
        if entry.get("resources"):
            continue  # registered services (tests)
        where = f"agent loop {entry.get('name')!r} tool_service"
        try:
            tools = check_tools(entry.get("tool_service") or "local", where)
        except ValueError as e:
            problems.append(str(e))
            continue
        if tools == "local":
            continue
        try:
            service = ServiceConfig(**dict(entry.get("service") or {}))
        except (ValidationError, TypeError) as e:
            problems.append(f"agent loop {entry.get('name')!r} service: {' '.join(str(e).split())[:300]}")
            continue
        ref = reward_config if reward_config is not None else (entry.get("rubric") or _AGENT_DEFAULT_RUBRIC)
        dirs = [str(entry["benchmark"])] if entry.get("benchmark") else sorted(benchmarks)
        dirs = [d for d in dirs if Path(d).is_dir()] or [None]  # missing ones are reported with the rows
        names: dict[str, Any] = {}
        svc = None
        for d in dirs:
            try:
                svc = connect(tools, service, benchmark_dir=d, reward_spec=ref)
            except ShopCompError as e:
                problems.append(f"{where}: {e}")
                if d is None or "has not loaded the benchmark" not in str(e):
                    break  # down, not ready, token or reward spec: once is enough
                continue
            if d is not None:
                names[d] = svc.benchmark
        if svc is not None:
            summary = {
                "tool_service": tools,
                "benchmarks": names,
                "judge": svc.info.reward.judge,
                "rubric": (svc.info.reward.rubric or {}).get("name")
                if isinstance(svc.info.reward.rubric, dict)
                else None,
            }
            svc.close()
    return summary


def _wandb_key() -> str | None:
    """Where wandb would find an API key: ``WANDB_API_KEY``, else a netrc entry for the wandb host
    (``WANDB_BASE_URL``'s, default api.wandb.ai; the file ``$NETRC`` or ``~/.netrc``), else None."""
    import netrc
    from urllib.parse import urlparse

    if os.environ.get("WANDB_API_KEY", "").strip():
        return "WANDB_API_KEY"
    host = urlparse(os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai").hostname or "api.wandb.ai"
    path = Path(os.environ.get("NETRC") or Path.home() / ".netrc").expanduser()
    try:
        auth = netrc.netrc(str(path)).authenticators(host)
    except (OSError, netrc.NetrcParseError):
        return None
    return f"{path} ({host})" if auth and auth[2] else None


def check_wandb(logger: Any, problems: list[str], notes: list[str]) -> str:
    """wandb's mode for ``trainer.logger`` (a name or a list): ``not used``, ``offline``,
    ``disabled`` or ``online (key: WHERE)``. ``WANDB_MODE`` offline/dryrun/disabled are fine (a
    note says what happens); online (also: unset) needs a key (:func:`_wandb_key`), else a problem
    names the three ways out. Another ``WANDB_MODE`` is a problem."""
    loggers = [logger] if isinstance(logger, str) else [str(x) for x in (logger or [])]
    if "wandb" not in loggers:
        return "not used"
    raw = os.environ.get("WANDB_MODE", "").strip().lower()
    mode = raw or "online"
    if mode in ("offline", "dryrun"):
        notes.append(
            f"wandb: offline (WANDB_MODE={raw}): runs are written under ./wandb of the trainer process; "
            "upload them later with `wandb sync`"
        )
        return "offline"
    if mode == "disabled":
        notes.append("wandb: disabled (WANDB_MODE=disabled): nothing is logged to wandb, console only")
        return "disabled"
    if mode not in ("online", "run"):
        problems.append(f"WANDB_MODE: {raw!r} is not one of online, offline, disabled")
        return raw
    key = _wandb_key()
    if key is None:
        problems.append(
            "trainer.logger: has wandb and WANDB_MODE is "
            + ("online" if raw else "unset (online)")
            + " but no wandb API key was found (WANDB_API_KEY, or a ~/.netrc entry for api.wandb.ai from "
            "`wandb login`); verl would stop when the trainer starts. Set WANDB_API_KEY, or WANDB_MODE=offline, "
            "or pass trainer.logger=[console]"
        )
        return "online (no key)"
    return f"online (key: {key})"


def check_checkpoint_dir(path: Any, nnodes: int | None, notes: list[str]) -> str:
    """``trainer.default_local_dir`` as a string; with ``nnodes`` > 1 a note (a warning) when it is
    relative or node-local (under /tmp, /var/tmp, /dev/shm, /run or this repository): every node
    writes its checkpoint shards there, so it must be shared storage."""
    d = str(path)
    if nnodes is not None and nnodes > 1:
        p = Path(d).expanduser()
        why = None
        if not p.is_absolute():
            why = "is relative (each node resolves it in its own working directory)"
        else:
            rp = p.resolve()
            for base in (*_NODE_LOCAL, str(_REPO)):
                b = Path(base).resolve()
                if rp == b or b in rp.parents:
                    why = f"is under {base}, which is local to each node"
                    break
        if why:
            notes.append(
                f"trainer.default_local_dir {d} {why}: with trainer.nnodes={nnodes} every node writes its checkpoint "
                "shards there, so it must be shared storage (set SHOPCOMP_CKPT_DIR=/shared/ckpt or "
                "trainer.default_local_dir=/shared/...)"
            )
    return d


def _positive_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    try:
        i = int(value)
    except (TypeError, ValueError):
        return None
    return i if i > 0 and i == value else None


def model_context(model: str, override_config: Any = None) -> tuple[int | None, str]:
    """The context length verl 0.9.1 gives the rollout of ``model``: the ``max_position_embeddings``
    its vLLM server reads (``verl.workers.rollout.utils.get_max_position_embeddings`` on the
    model's Hugging Face config after ``actor_rollout_ref.model.override_config``; a composite
    model's ``text_config``). Rope scaling fields (``rope_scaling`` / ``rope_parameters``) are not
    counted: verl caps ``rollout.max_model_len`` at ``max_position_embeddings`` whatever the
    scaling. Returns ``(tokens, where it came from)``, or ``(None, why it could not be read)``
    (a hub id not in the local cache, no such field)."""
    oc = dict(override_config or {})
    oc = dict(oc.get("model_config") or {}) if "model_config" in oc else oc
    if oc.get("max_position_embeddings") is not None:
        n = _positive_int(oc["max_position_embeddings"])
        key = "actor_rollout_ref.model.override_config.max_position_embeddings"
        return (n, key) if n else (None, f"{key}: not a positive integer ({oc['max_position_embeddings']!r})")
    data, path = model_config(model)
    if data is None:
        return None, path
    for where, d in (("", data), ("text_config.", data.get("text_config"))):
        if isinstance(d, dict) and d.get("max_position_embeddings") is not None:
            n = _positive_int(d["max_position_embeddings"])
            if n:
                return n, f"{where}max_position_embeddings in {path}"
    return None, f"{path} has no max_position_embeddings"


def check_context(cfg: Any, model: str, problems: list[str], notes: list[str]) -> dict[str, Any] | str:
    """Check that a trajectory fits the model's context: ``data.max_prompt_length +
    data.max_response_length`` (and ``actor_rollout_ref.rollout.prompt_length + response_length``
    when they differ: verl's agent loop and vLLM server budget with those) must not exceed the
    rollout's context, which is ``actor_rollout_ref.rollout.max_model_len`` when set, else the
    model's :func:`model_context`; a ``max_model_len`` above the model's context is a problem too
    (verl's vLLM server refuses to start). Returns the summary's ``context`` entry: the numbers,
    or ``"not checked: why"`` (with a note) when the model's config is not on this machine."""
    from omegaconf import OmegaConf

    r = cfg.actor_rollout_ref.rollout
    oc = cfg.actor_rollout_ref.model.get("override_config")
    oc = OmegaConf.to_container(oc, resolve=True) if OmegaConf.is_config(oc) else oc
    ctx, source = model_context(model, oc if isinstance(oc, dict) else None)
    mml_raw = r.get("max_model_len")
    mml = _positive_int(mml_raw)
    if mml_raw is not None and mml is None:
        problems.append(
            f"actor_rollout_ref.rollout.max_model_len: expected a positive integer or null, got {mml_raw!r}"
        )
    pairs = [("data.max_prompt_length", "data.max_response_length")]
    pairs.append(("actor_rollout_ref.rollout.prompt_length", "actor_rollout_ref.rollout.response_length"))
    lengths: list[tuple[str, str, int, int]] = []
    for pk, rk in pairs:
        p, q = _positive_int(OmegaConf.select(cfg, pk)), _positive_int(OmegaConf.select(cfg, rk))
        if p and q and all((p, q) != (a, b) for _, _, a, b in lengths):
            lengths.append((pk, rk, p, q))
    if ctx is not None and mml is not None and mml > ctx:
        problems.append(
            f"actor_rollout_ref.rollout.max_model_len: {mml} tokens is more than the context of "
            f"actor_rollout_ref.model.path {model} ({ctx} tokens, {source}); verl's vLLM server refuses to start "
            f"(max_model_len should be less than or equal to max_position_embeddings). Set it to at most {ctx} or "
            "leave it null (verl then uses the model's)"
        )
    limit = mml if mml is not None else ctx
    if limit is None:
        notes.append(
            f"context not checked: {source}; data.max_prompt_length + data.max_response_length "
            f"({' / '.join(str(p + q) for *_, p, q in lengths) or '?'} tokens) must fit the model's "
            "max_position_embeddings (check its config.json, or give a local model directory)"
        )
        return f"not checked: {source}"
    where = (
        "actor_rollout_ref.rollout.max_model_len"
        if mml is not None
        else f"{source}; verl sets actor_rollout_ref.rollout.max_model_len to it"
    )
    for pk, rk, p, q in lengths:
        if p + q > limit:
            fix = f"lower {rk} to {limit - p}" if limit > p else f"lower {pk} below {limit}"
            if mml is not None and ctx is not None and ctx > mml:
                fix += f", or raise actor_rollout_ref.rollout.max_model_len (the model allows {ctx})"
            problems.append(
                f"{pk} + {rk} = {p} + {q} = {p + q} tokens is more than the {limit}-token context of the rollout "
                f"for actor_rollout_ref.model.path {model} ({where}): a trajectory grows to prompt + response "
                f"tokens, and vLLM cuts generations short and then refuses the request (failing the training "
                f"step) once it no longer fits. Fix: {fix} (or {pk}), or train a model with a longer context"
            )
    return {
        "tokens": limit,
        "source": "actor_rollout_ref.rollout.max_model_len" if mml is not None else source,
        "model_max_position_embeddings": ctx,
        "prompt_plus_response": max((p + q for *_, p, q in lengths), default=None),
    }


def _hydra_args(cmd: list[str]) -> tuple[Path, str, list[str]]:
    """``(config dir, config name, overrides)`` of a verl command of ``launch_command`` (Hydra's own
    flags left out). Raises ConfigError without ``--config-path=`` / ``--config-name=``."""
    config_dir = name = None
    overrides = []
    args = iter(cmd[3:])
    for a in args:
        if a.startswith("--config-path="):
            config_dir = Path(a.split("=", 1)[1])
        elif a.startswith("--config-name="):
            name = a.split("=", 1)[1]
        elif a in _HYDRA_FLAGS_WITH_VALUE:
            next(args, None)  # e.g. `--cfg job`: Hydra's own flags are not config overrides
        elif a in _HYDRA_FLAGS:
            continue
        else:
            overrides.append(a)
    if config_dir is None or name is None:
        raise ConfigError("cmd: expected --config-path= and --config-name= (from launch_command)")
    return config_dir, name, overrides


def _validate(cfg: Any, problems: list[str], notes: list[str]) -> None:
    """verl's ``validate_config`` on ``cfg``; without vLLM, on a copy without LoRA (said in ``notes``)."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

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


def _check_agent_loops(cfg: Any, problems: list[str]) -> tuple[set[str] | None, list[dict[str, Any]]]:
    """Check the agent-loop registry file, its default loop and targets, and the loop manager class.
    Returns ``(registry names or None when unreadable, the registry entries of our agent loop)``."""
    agent = cfg.actor_rollout_ref.rollout.agent
    loop_path = Path(str(agent.agent_loop_config_path))
    registry: set[str] | None = None
    ours: list[dict[str, Any]] = []  # registry entries of our agent loop (their reward keys are checked)
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
            if target.endswith(".ShoppingCompanionAgentLoop"):
                ours.append(entry)
                if "zero_std_warn_share" in entry:
                    from shopping_companion.trainers.verl_agent_loop import zero_std_warn_threshold

                    try:
                        zero_std_warn_threshold(entry["zero_std_warn_share"])
                    except ValueError as e:
                        problems.append(f"{loop_path}: agent loop {entry.get('name')!r}: {e}")
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
    return registry, ours


def _check_reward_function(rf: Any, problems: list[str]) -> None:
    """``reward.custom_reward_function``: its ``path`` (a file or ``pkg://module``) must give a
    callable ``name``."""
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


def _check_model(cfg: Any, problems: list[str], notes: list[str]) -> str:
    """``actor_rollout_ref.model.path``: set, and a Hugging Face model directory when local (or a
    hub id, noted). Returns the path as given."""
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
    return model


def check_launch(cmd: list[str]) -> tuple[list[str], dict[str, Any]]:
    """Check the verl command built by :func:`~shopping_companion.trainers.launch.launch_command`.

    Returns ``(problems, summary)``: ``problems`` is empty when the launch would pass every check
    (each entry names the config key and what is wrong); ``summary`` has the composed settings a
    user wants to see before spending GPU time (rows, steps, batch, rollouts, lengths, GPUs) and
    ``notes`` on checks that could not run here (verl's LoRA-rank check needs vLLM installed) and
    warnings (wandb's mode, a checkpoint directory that is not shared on several nodes); also
    ``reward`` (:func:`check_reward`), ``checkpoint_dir``, ``wandb``, ``data_files`` and the
    ``benchmarks`` the rows refer to.

    Raises:
        ConfigError: verl or hydra is not installed in this environment, or ``cmd`` is not a
            command of :func:`~shopping_companion.trainers.launch.launch_command`.
    """
    try:  # verl must be installed here; _validate uses these
        from verl.trainer.ppo.utils import need_critic, need_reference_policy  # noqa: F401
        from verl.utils.config import validate_config  # noqa: F401
    except ImportError as e:
        raise ConfigError(
            f"--check needs the verl extra in this environment ({e}); install it with "
            "scripts/install_rl.sh and run .venv-rl/bin/shopcomp grpo launch --check"
        ) from e
    config_dir, name, overrides = _hydra_args(cmd)
    problems: list[str] = []
    try:
        cfg = _compose(config_dir, name, overrides)
    except Exception as e:  # noqa: BLE001 - a bad override is a problem to report
        return [f"hydra overrides: the config does not compose ({type(e).__name__}: {e})"], {}
    notes: list[str] = []
    _validate(cfg, problems, notes)
    registry, ours = _check_agent_loops(cfg, problems)

    rf = cfg.reward.get("custom_reward_function") or {}
    _check_reward_function(rf, problems)
    from omegaconf import OmegaConf

    reward = check_reward(OmegaConf.to_container(rf) if OmegaConf.is_config(rf) else rf, ours, problems)

    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    est = str(cfg.algorithm.adv_estimator)
    if est not in ("gae",):
        try:
            get_adv_estimator_fn(est)
        except Exception as e:  # noqa: BLE001
            problems.append(
                f"algorithm.adv_estimator: {est!r} is not registered ({e}); grpo_judged needs this "
                "package installed in the environment (its verl.plugins entry point) or "
                "VERL_USE_EXTERNAL_MODULES=shopping_companion.trainers.verl_plugin (what `grpo submit` sets)"
            )

    seen: dict[str, set[str]] = {}
    n_train = _rows(cfg.data.train_files, "data.train_files", problems, registry, seen)
    n_val = _rows(cfg.data.val_files, "data.val_files", problems, registry, seen)
    rc = dict((OmegaConf.to_container(rf) if OmegaConf.is_config(rf) else rf or {}).get("reward_kwargs") or {}).get(
        "reward_config"
    )
    tool_service = check_tool_service(ours, seen.get("benchmarks", set()), None if rc is None else str(rc), problems)
    bs = _int(cfg, "data.train_batch_size", problems, minimum=1)
    n = _int(cfg, "actor_rollout_ref.rollout.n", problems, minimum=1)
    mini = _int(cfg, "actor_rollout_ref.actor.ppo_mini_batch_size", problems, minimum=1)
    turns = _int(cfg, "actor_rollout_ref.rollout.multi_turn.max_assistant_turns", problems, minimum=1)
    gpus = _int(cfg, "trainer.n_gpus_per_node", problems, minimum=1)
    nodes = _int(cfg, "trainer.nnodes", problems, minimum=1)
    logger = cfg.trainer.get("logger")
    wandb = check_wandb(OmegaConf.to_container(logger) if OmegaConf.is_config(logger) else logger, problems, notes)
    ckpt = check_checkpoint_dir(cfg.trainer.get("default_local_dir"), nodes, notes)
    if bs and 0 < n_train < bs:
        problems.append(
            f"data.train_batch_size: {bs} prompts per step but data.train_files has {n_train} rows; verl's "
            "train dataloader drops the incomplete last batch, so no step would run"
        )

    model = _check_model(cfg, problems, notes)

    context: dict[str, Any] | str | None = None
    if not any(p.startswith("actor_rollout_ref.model.path:") for p in problems):
        context = check_context(cfg, model, problems, notes)

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
        "context": context,
        "max_assistant_turns": turns,
        "adv_estimator": est,
        "rubric": reward["rubric"] if reward else None,
        "reward": reward,
        "tool_service": tool_service,
        "checkpoint_dir": ckpt,
        "nnodes": nodes,
        "wandb": wandb,
        "lora_rank": cfg.actor_rollout_ref.model.get("lora_rank"),
        "gpus": gpus * nodes if gpus and nodes else None,
        "trainer": "v1" if cfg.trainer.get("use_v1") else "RayPPOTrainer",
        "data_files": sorted(seen.get("files", ())),
        "benchmarks": sorted(seen.get("benchmarks", ())),
        "notes": notes,
    }
    return problems, summary
