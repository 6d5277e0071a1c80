"""A model's ``config.json`` as found on this machine: in a local checkpoint directory, or for a
Hugging Face hub id (``org/name``) in the local Hugging Face cache. Nothing is ever downloaded, so
the training checks that read it (the SFT export's tied-embeddings report, the GRPO launch
check's context length) work offline and say so when the file is not here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["looks_like_path", "model_config"]


def looks_like_path(name: str) -> bool:
    """Whether a model or tokenizer name is meant as a local path rather than a hub id
    (``org/name``): it starts with ``/``, ``./``, ``../``, ``.\\`` or ``~``, has more than one
    ``/``, or exists on disk."""
    name = str(name)
    return name.startswith(("/", "./", "../", "~", ".\\")) or name.count("/") > 1 or Path(name).expanduser().exists()


def _config_file(name: str) -> tuple[Path | None, str]:
    """``(path, "")`` of the ``config.json`` of ``name``, or ``(None, why)`` when there is none."""
    p = Path(name).expanduser()
    if p.is_dir():
        f = p / "config.json"
        return (f, "") if f.is_file() else (None, f"{p} has no config.json")
    if not looks_like_path(name):
        try:
            from huggingface_hub import try_to_load_from_cache

            hit = try_to_load_from_cache(name, "config.json")
        except Exception:  # noqa: BLE001 - an odd id or cache: not readable, never a crash
            hit = None
        if isinstance(hit, str) and Path(hit).is_file():
            return Path(hit), ""
        return None, f"{name} is not a local directory and its config.json is not in the Hugging Face cache here"
    return None, f"{name} is a file, not a model directory" if p.exists() else f"{name} does not exist here"


def model_config(name_or_path: str) -> tuple[dict[str, Any] | None, str]:
    """``(config, where)``: the ``config.json`` of a local model directory, or of a hub id in the
    local Hugging Face cache, as a dict, and the file it was read from; ``(None, why)`` when it is
    not here, not readable JSON or not a JSON object. Never downloads, never raises for a bad
    name or file."""
    f, why = _config_file(str(name_or_path))
    if f is None:
        return None, why
    try:
        data = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        return None, f"{f} is not readable JSON ({e})"
    return (data, str(f)) if isinstance(data, dict) else (None, f"{f} is not a JSON object")
