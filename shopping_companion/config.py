"""Small helpers for YAML configuration files (DESIGN.md §3).

- :func:`load_config` reads a mapping from a YAML file, or copies one given directly;
- :func:`apply_overrides` applies dotted command-line overrides (``"a.b.c=value"``, the value parsed
  as YAML, so ``3`` is an int, ``true`` a bool, ``[1, 2]`` a list, ``x`` a string).

Errors are :class:`~shopping_companion.errors.ConfigError` naming the file and the problem.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from shopping_companion.errors import ConfigError

__all__ = ["apply_overrides", "load_config", "load_yaml"]


def load_yaml(path: str | os.PathLike[str]) -> Any:
    """Parse a YAML file; raises :class:`ConfigError` when it is missing or malformed."""
    import yaml

    p = Path(path).expanduser()
    if not p.is_file():
        raise ConfigError(f"config file {str(p)!r} does not exist")
    try:
        return yaml.safe_load(p.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise ConfigError(f"config file {str(p)!r} is not valid YAML: {e}") from e


def load_config(source: str | os.PathLike[str] | Mapping[str, Any]) -> dict[str, Any]:
    """A config mapping from a YAML file path or a mapping (deep-copied).

    Raises :class:`ConfigError` when the file's top level is not a mapping.
    """
    if isinstance(source, Mapping):
        return copy.deepcopy(dict(source))
    data = load_yaml(source)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {str(source)!r}: top level must be a mapping, got {type(data).__name__}")
    return data


def apply_overrides(config: Mapping[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    """Return a copy of ``config`` with each ``"dotted.key=value"`` applied in order.

    Intermediate mappings are created when missing; an intermediate that is not a mapping raises
    :class:`ConfigError`. Values are parsed with YAML (``"a.b=0.5"`` sets the float 0.5).
    """
    import yaml

    out = copy.deepcopy(dict(config))
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r}: expected 'dotted.key=value'")
        key, raw = item.split("=", 1)
        parts = [p for p in key.strip().split(".")]
        if not all(parts):
            raise ConfigError(f"override {item!r}: empty key segment")
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError as e:
            raise ConfigError(f"override {item!r}: value is not valid YAML ({e})") from e
        node: Any = out
        for i, p in enumerate(parts[:-1]):
            nxt = node.get(p)
            if nxt is None:
                nxt = node[p] = {}
            if not isinstance(nxt, dict):
                raise ConfigError(f"override {item!r}: {'.'.join(parts[: i + 1])} is not a mapping")
            node = nxt
        node[parts[-1]] = value
    return out
