"""The verl GRPO launch command (``shopcomp grpo launch``, ``scripts/run_grpo.sh``; docs/grpo.md).

:func:`launch_command` builds ``python -m verl.trainer.main_ppo`` with our Hydra config directory
(``configs/grpo``), one of :data:`VARIANTS`, the parquet rows written by ``shopcomp grpo prepare``,
the reward spec (:func:`reward_config_override`: the spec's JSON in
``reward.custom_reward_function.reward_kwargs.reward_config``, so it travels inside the config to
every worker) and extra Hydra overrides; :func:`hydra_value` quotes a value for a Hydra override.
:func:`record_reward_spec` / :func:`recorded_reward_spec` keep the spec ``grpo prepare
--reward-config`` resolved next to the rows. Nothing here imports verl.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence

from shopping_companion.errors import ConfigError
from shopping_companion.runs import write_text_atomic

if TYPE_CHECKING:
    from shopping_companion.assembly.reward_spec import RewardSpec

__all__ = [
    "RECORDED_SPEC",
    "REWARD_CONFIG_KEY",
    "VARIANTS",
    "hydra_value",
    "launch_command",
    "record_reward_spec",
    "recorded_reward_spec",
    "reward_config_override",
]

#: configs/grpo/<name>.yaml a launch can use: the paper's two variants and the one-GPU smoke run
VARIANTS = ("outcome_tool", "outcome_only", "gpu_smoke")
_REPO = Path(__file__).resolve().parents[2]
#: the one Hydra key both verl sides read the reward spec from (the agent loop and compute_score)
REWARD_CONFIG_KEY = "reward.custom_reward_function.reward_kwargs.reward_config"
#: the resolved reward spec ``grpo prepare --reward-config`` records in the rows directory
#: (:meth:`RewardSpec.to_json`), with a readable YAML copy next to it (``reward_config.yaml``)
RECORDED_SPEC = "reward_config.json"


def hydra_value(value: object) -> str:
    """A path as a Hydra override value: as is when it has only ASCII path characters, else
    single-quoted by Hydra's rules (``\\'`` for a quote; backslashes doubled only where they
    precede a quote or ``${`` or end the value; ``\\${`` so a ``${`` in a path is not an
    interpolation)."""
    text = str(value)
    if re.fullmatch(r"[A-Za-z0-9_./+@%-]+", text):
        return text
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        if text[i] == "\\":
            j = i
            while j < n and text[j] == "\\":
                j += 1
            run = text[i:j]
            out.append(run * 2 if j == n or text[j] == "'" or text.startswith("${", j) else run)
            i = j
        elif text[i] == "'":
            out.append("\\'")
            i += 1
        elif text.startswith("${", i):
            out.append("\\${")
            i += 2
        else:
            out.append(text[i])
            i += 1
    return "'" + "".join(out) + "'"


def reward_config_override(spec: "RewardSpec") -> str:
    """The Hydra override that gives both verl sides ``spec``: ``REWARD_CONFIG_KEY=<spec JSON>``
    (quoted by :func:`hydra_value`; the value reads back with ``load_reward_spec``). Every ``$`` is
    written as the JSON escape ``\\u0024``: the config is resolved more than once on its way to the
    workers (OmegaConf turns an escaped ``\\${`` into a plain ``${`` on the first resolution, which
    the next one would take for an interpolation), and JSON reads the escape back as ``$``."""
    return f"{REWARD_CONFIG_KEY}={hydra_value(spec.to_json().replace('$', chr(92) + 'u0024'))}"


def record_reward_spec(spec: "RewardSpec", rows_dir: str | Path) -> list[Path]:
    """Write ``spec`` into ``rows_dir``: :data:`RECORDED_SPEC` (its JSON, what launch reads) and
    ``reward_config.yaml`` (the same fields, for people). Returns the two paths."""
    import yaml

    out = Path(rows_dir)
    out.mkdir(parents=True, exist_ok=True)
    js, ym = out / RECORDED_SPEC, out / "reward_config.yaml"
    write_text_atomic(js, spec.to_json() + "\n")
    header = "# The reward spec `shopcomp grpo prepare --reward-config` resolved (read: reward_config.json)\n"
    ym.write_text(header + yaml.safe_dump(json.loads(spec.to_json()), sort_keys=True))
    return [js, ym]


def recorded_reward_spec(rows_dir: str | Path) -> Optional["RewardSpec"]:
    """The spec recorded in ``rows_dir`` by :func:`record_reward_spec`, or None when there is none.
    Raises :class:`ConfigError` naming the file when it is not a valid spec."""
    from shopping_companion.assembly.reward_spec import load_reward_spec

    p = Path(rows_dir) / RECORDED_SPEC
    if not p.is_file():
        return None
    try:
        return load_reward_spec(p.read_text())
    except ConfigError as e:
        raise ConfigError(f"{p}: {e} (rewrite it with `shopcomp grpo prepare --reward-config X`)") from None


def launch_command(
    variant: str,
    model: Optional[str],
    rows_dir: str | Path,
    extra: Sequence[str] = (),
    reward_spec: Optional["RewardSpec"] = None,
) -> list[str]:
    """The verl command for ``variant`` (one of :data:`VARIANTS`) over the rows in ``rows_dir``
    (``train.parquet`` / ``test.parquet``), with ``extra`` Hydra overrides appended. With
    ``reward_spec``, :func:`reward_config_override` replaces the variant's reward config (before
    ``extra``).

    verl runs under this interpreter (``sys.executable``: the environment that has this package and
    verl, also when it is not the ``python`` on PATH), and the data files are absolute paths (verl
    reads them inside Ray actors, whose working directory is not necessarily this one); so is a
    ``model`` that exists as a local path (anything else is passed on, e.g. a hub id). Raises
    :class:`ConfigError` for an unknown variant, naming the allowed ones."""
    if variant not in VARIANTS:
        raise ConfigError(f"--variant: must be one of {', '.join(VARIANTS)}, got {variant!r}")
    rows = Path(rows_dir).expanduser().absolute()
    grpo = _REPO / "configs" / "grpo"
    cmd = [
        sys.executable,
        "-m",
        "verl.trainer.main_ppo",
        f"--config-path={grpo}",
        f"--config-name={variant}",
        f"data.train_files={hydra_value(rows / 'train.parquet')}",
        f"data.val_files={hydra_value(rows / 'test.parquet')}",
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={hydra_value(grpo / 'agent_loop.yaml')}",
    ]
    if model:
        local = Path(model).expanduser()
        if local.exists():  # a local directory: absolute, as Ray actors may run elsewhere
            model = str(local.absolute())
        cmd.append(f"actor_rollout_ref.model.path={hydra_value(model)}")
    if reward_spec is not None:
        cmd.append(reward_config_override(reward_spec))
    return cmd + list(extra)
