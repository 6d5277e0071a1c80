"""The one configuration loader (docs/architecture.md, configuration).

- :func:`load_model` builds a pydantic config (``EvalConfig``, ``SynthConfig``, ...) from a YAML
  file, the command line's flags and its ``--set dotted.key=value`` overrides, and turns a
  validation error into a :class:`~shopping_companion.errors.ConfigError` that names each field
  and its allowed values; :func:`config_hash` is the hash of a resolved config (a run's identity)
  and :func:`dump_yaml` writes a resolved config next to the run;
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
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from shopping_companion.errors import ConfigError

__all__ = [
    "STRICT",
    "RunDir",
    "apply_overrides",
    "config_hash",
    "dump_yaml",
    "load_config",
    "load_model",
    "load_yaml",
    "parse_yaml",
    "validation_message",
]

#: The ``model_config`` of every config model: unknown keys refused, and no inf / nan where a
#: number is meant.
STRICT = ConfigDict(extra="forbid", allow_inf_nan=False)


class RunDir:
    """Mixin of a config model whose run writes into one directory: the model has a ``name``
    (one directory name, validated by the model) and a ``runs_dir`` (``str`` or ``Path``)."""

    @property
    def run_dir(self) -> Path:
        """``<runs_dir>/<name>``, as given (relative paths stay relative to the working directory)."""
        return Path(self.runs_dir) / self.name  # type: ignore[attr-defined]


def _strict_loader() -> Any:
    """A ``yaml.SafeLoader`` that refuses a mapping with the same key twice (plain PyYAML keeps
    the last one silently, so a config could say two things and mean one)."""
    import yaml

    class StrictLoader(yaml.SafeLoader):
        pass

    def mapping(loader: Any, node: Any, deep: bool = False) -> Any:
        seen: dict[Any, Any] = {}
        for key_node, _ in node.value:
            key = loader.construct_object(key_node, deep=deep)
            try:
                hash(key)
            except TypeError:
                continue  # an unhashable key: construct_mapping reports it
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping", node.start_mark, f"found duplicate key {key!r}", key_node.start_mark
                )
            seen[key] = True
        return loader.construct_mapping(node, deep=deep)

    StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    return StrictLoader


def parse_yaml(text: str, what: str) -> Any:
    """Parse YAML ``text`` (duplicate keys refused); ``what`` names the source in the
    :class:`ConfigError` raised for invalid YAML, nesting too deep to parse, or a value Python
    refuses (e.g. an integer of more than 4,300 digits)."""
    import yaml

    try:
        return yaml.load(text, Loader=_strict_loader())  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or " ".join(str(e).split())
        raise ConfigError(f"{what} is not valid YAML{where}: {problem}") from None
    except RecursionError:
        raise ConfigError(f"{what}: nested too deeply to read") from None
    except ValueError as e:
        raise ConfigError(f"{what}: a value cannot be read ({e})") from None


def load_yaml(path: str | os.PathLike[str]) -> Any:
    """Parse a YAML file; raises :class:`ConfigError` when it is missing, a directory, not UTF-8
    or malformed (:func:`parse_yaml`)."""
    p = Path(path).expanduser()
    if p.is_dir():
        raise ConfigError(f"config file {str(p)!r} is a directory, not a YAML file")
    if not p.is_file():
        raise ConfigError(f"config file {str(p)!r} does not exist")
    raw = p.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(
            f"config file {str(p)!r} is not UTF-8 text (byte {raw[e.start]:#04x} at position {e.start})"
        ) from None
    return parse_yaml(text, f"config file {str(p)!r}")


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
    out = copy.deepcopy(dict(config))
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item[:80]!r}: expected 'dotted.key=value'")
        key, raw = item.split("=", 1)
        parts = [p for p in key.strip().split(".")]
        if not all(parts):
            raise ConfigError(f"override {item[:80]!r}: empty key segment")
        shown = item if len(item) <= 80 else item[:77] + "..."
        value = parse_yaml(raw, f"override {shown!r}: the value") if raw.strip() else ""
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


M = TypeVar("M", bound=BaseModel)


def _allowed_values(model: type[BaseModel], loc: tuple[Any, ...]) -> str | None:
    """The allowed values of the field at ``loc`` in ``model`` when it is a Literal / Enum."""
    import enum
    import typing

    node: Any = model
    ann: Any = None
    for part in loc:
        if not (isinstance(node, type) and issubclass(node, BaseModel)) or part not in node.model_fields:
            return None
        ann = node.model_fields[part].annotation
        node = ann
        for arg in typing.get_args(ann) or ():
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                node = arg
    values: list[Any] = []
    stack = [ann]
    while stack:
        a = stack.pop()
        if typing.get_origin(a) is typing.Literal:
            values += list(typing.get_args(a))
        elif isinstance(a, type) and issubclass(a, enum.Enum):
            values += [m.value for m in a]
        else:
            stack += [x for x in typing.get_args(a) if x is not type(None)]
    return ", ".join(repr(v) for v in values) if values else None


def _model_at(model: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The pydantic model at ``loc`` inside ``model`` (list indexes and ``Optional`` / ``list[...]``
    wrappers stepped through), or None when ``loc`` does not lead to a model."""
    import typing

    def model_in(ann: Any) -> type[BaseModel] | None:
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            return ann
        for arg in typing.get_args(ann):
            found = model_in(arg)
            if found is not None:
                return found
        return None

    node: type[BaseModel] | None = model
    for part in loc:
        if isinstance(part, int):
            continue
        if node is None or part not in node.model_fields:
            return None
        node = model_in(node.model_fields[part].annotation)
    return node


def validation_message(
    model: type[BaseModel],
    err: ValidationError,
    source: str | None = None,
    names: Mapping[str, str] | None = None,
    prefix: str = "",
) -> str:
    """A pydantic :class:`ValidationError` as one readable message: each bad field as a dotted path
    (with its command-line flag from ``names``, ``{dotted key: "--flag"}``, when it has one), what is
    wrong, the value given and, for Literal / Enum fields, the allowed values. ``prefix`` (e.g.
    ``"eval."``) is put before every path, for a model validated as a section of another."""
    parts = []
    for e in err.errors():
        loc = tuple(e.get("loc", ()))
        plain = prefix + ".".join(str(x) for x in loc) if loc else prefix[:-1] or "(top level)"
        path = plain + (f" ({names[plain]})" if names and plain in names else "")
        msg = e.get("msg", "invalid")
        if msg.startswith(("Value error, ", "Assertion failed, ")):
            msg = msg.split(", ", 1)[1]
            if msg.startswith(plain + ".") or not (loc or prefix):
                # a nested section's own message, its paths already in it; or a check over the
                # whole model, whose message names the keys it compares
                parts.append(msg)
                continue
        if e.get("type") == "missing":
            msg = "required, not given"
        if e.get("type") == "extra_forbidden":
            target = _model_at(model, loc[:-1])
            known = sorted(target.model_fields) if target is not None else []
            msg = "unknown field" + (f"; allowed: {', '.join(known)}" if known else "")
        else:
            allowed = _allowed_values(model, tuple(x for x in loc if isinstance(x, str)))
            if allowed and e.get("type") not in ("literal_error", "enum"):
                msg += f" (allowed: {allowed})"
            if (
                "input" in e
                and e.get("type") not in ("missing", "value_error")
                and not isinstance(e["input"], (dict, list))
            ):
                shown = repr(e["input"])
                msg += f", got {shown[:80] + '…' if len(shown) > 80 else shown}"
        parts.append(f"{path}: {msg}")
    where = f"{source}: " if source else ""
    return where + "; ".join(parts)


def load_model(
    model: type[M],
    config: str | os.PathLike[str] | Mapping[str, Any] | None = None,
    sets: Iterable[str] = (),
    flags: Mapping[str, Any] | None = None,
    names: Mapping[str, str] | None = None,
) -> M:
    """The one configuration loader: a pydantic ``model`` from a YAML file (or mapping), then the
    command line's flags, then its ``--set dotted.key=value`` overrides.

    Precedence, lowest first: the model's defaults < ``config`` < ``flags`` < ``sets``.
    ``flags`` maps dotted keys to values; ``None`` values are skipped (a flag the user did not
    give). ``sets`` items are ``"dotted.key=value"`` with the value parsed as YAML. ``names`` maps
    dotted keys to the flags that set them, for the error message.

    Raises :class:`ConfigError` naming the file, each bad field as a dotted path, and the allowed
    values where the field has a fixed set (unknown keys are refused with the known ones listed).
    """
    data = load_config(config) if config is not None else {}
    source = str(config) if config is not None and not isinstance(config, Mapping) else None
    for key, value in (flags or {}).items():
        if value is None:
            continue
        node = data
        parts = key.split(".")
        for p in parts[:-1]:
            nxt = node.get(p)
            if not isinstance(nxt, dict):
                nxt = node[p] = {}
            node = nxt
        node[parts[-1]] = value
    data = apply_overrides(data, list(sets))
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise ConfigError(validation_message(model, e, source, names)) from None


def config_hash(data: BaseModel | Mapping[str, Any]) -> str:
    """SHA-256 (hex, first 16 characters) of the canonical JSON of ``data`` (sorted keys, no
    whitespace): equal configurations hash equal, any changed value gives another hash."""
    import hashlib
    import json

    obj = data.model_dump(mode="json") if isinstance(data, BaseModel) else data
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def dump_yaml(data: BaseModel | Mapping[str, Any], path: str | os.PathLike[str], header: str | None = None) -> None:
    """Write ``data`` (a model: its JSON-mode dump) as YAML to ``path`` atomically (temp file + rename);
    ``header`` lines are written as ``#`` comments first."""
    import yaml

    obj = data.model_dump(mode="json") if isinstance(data, BaseModel) else dict(data)
    text = yaml.safe_dump(obj, sort_keys=False, allow_unicode=True, width=100)
    if header:
        text = "".join(f"# {line}\n" for line in header.splitlines()) + text
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"{p} is a directory; it must be the run's resolved config file (remove or rename it)")
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(p)
    finally:
        tmp.unlink(missing_ok=True)
