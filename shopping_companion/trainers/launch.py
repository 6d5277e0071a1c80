"""The verl GRPO launch command (``shopcomp grpo launch``, ``scripts/run_grpo.sh``; docs/grpo.md).

:func:`launch_command` builds ``python -m verl.trainer.main_ppo`` with our Hydra config directory
(``configs/grpo``), one of :data:`VARIANTS`, the parquet rows written by ``shopcomp grpo prepare``
and extra Hydra overrides; :func:`hydra_value` quotes a path as a Hydra override value. Nothing
here imports verl.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Optional, Sequence

from shopping_companion.errors import ConfigError

__all__ = ["VARIANTS", "hydra_value", "launch_command"]

#: configs/grpo/<name>.yaml a launch can use: the paper's two variants and the one-GPU smoke run
VARIANTS = ("outcome_tool", "outcome_only", "gpu_smoke")
_REPO = Path(__file__).resolve().parents[2]


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


def launch_command(variant: str, model: Optional[str], rows_dir: str | Path, extra: Sequence[str] = ()) -> list[str]:
    """The verl command for ``variant`` (one of :data:`VARIANTS`) over the rows in ``rows_dir``
    (``train.parquet`` / ``test.parquet``), with ``extra`` Hydra overrides appended.

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
    return cmd + list(extra)
