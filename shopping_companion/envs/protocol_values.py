"""The values of the action protocol (:mod:`~shopping_companion.envs.parsing`): text cleaning, the
strict JSON decoder and the bounds on a tool call's decoded arguments.

:func:`clean_text` and :func:`as_text` never raise; :func:`strict_json_loads` raises like
``json.loads`` and also on ``NaN``/``Infinity``; :func:`bound_and_clean` returns its error instead of
raising. Imports only pydantic and the standard library.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "STRICT_DECODER",
    "ArgumentLimits",
    "as_text",
    "bound_and_clean",
    "clean_text",
    "json_error",
    "snippet",
    "strict_json_loads",
]

_MAX_SNIPPET = 80

_SURROGATES = re.compile("[\ud800-\udfff]")


def clean_text(text: Any) -> str:
    """Any value as ``str`` without lone UTF-16 surrogates (each replaced by U+FFFD).

    ``None`` is ``""``; bytes are decoded as UTF-8 with replacement; other objects go through
    ``str()`` (``""`` when that fails). Never raises. Such a string always encodes to UTF-8, so
    ``json.dumps(..., ensure_ascii=False).encode("utf-8")`` and pydantic's JSON writer accept it."""
    if text is None:
        return ""
    if isinstance(text, (bytes, bytearray, memoryview)):
        text = bytes(text).decode("utf-8", errors="replace")
    elif not isinstance(text, str):
        try:
            text = str(text)
        except Exception:
            return ""
    return _SURROGATES.sub("\ufffd", text) if _SURROGATES.search(text) else text


class ArgumentLimits(BaseModel):
    """Bounds on the decoded ``arguments`` object of one tool call (``EnvConfig`` sets them).

    ``max_depth``: nesting levels of objects/lists, the arguments object itself being level 1
    (``{"ids": ["a"]}`` is 2), 1..64, default 16. ``max_chars``: length in characters of the
    arguments' compact JSON encoding, >= 64, default 65,536 (64 KiB). ``max_items``: the number of
    list elements plus object entries over the whole arguments value, >= 1, default 1,000. A call
    over a limit is not run; its error names the limit (by its ``EnvConfig`` field) and value.
    """

    model_config = ConfigDict(extra="forbid")
    max_depth: int = Field(default=16, ge=1, le=64)
    max_chars: int = Field(default=65_536, ge=64)
    max_items: int = Field(default=1_000, ge=1)


_DEFAULT_LIMITS = ArgumentLimits()


def bound_and_clean(
    value: dict[str, Any], limits: ArgumentLimits | None = None
) -> tuple[dict[str, Any] | None, str | None]:
    """Check decoded ``arguments`` against ``limits`` and clean every key and string.

    Returns ``(cleaned, None)`` or ``(None, error)``: the error names the limit
    (``max_tool_arg_depth``, ``max_tool_arg_items``, ``max_tool_arg_chars``) and its value.
    Non-finite numbers (JSON ``1e400`` decodes to infinity) are also an error. Iterative, so any
    depth is safe. Never raises."""
    lim = limits or _DEFAULT_LIMITS
    try:
        stack: list[tuple[Any, int]] = [(value, 1)]
        items = 0
        while stack:
            node, depth = stack.pop()
            if isinstance(node, (dict, list)):
                if depth > lim.max_depth:
                    return None, (
                        f"arguments nest more than {lim.max_depth} levels deep (limit "
                        f"max_tool_arg_depth = {lim.max_depth}); use a flat JSON object"
                    )
                items += len(node)
                if items > lim.max_items:
                    return None, (
                        f"arguments hold more than {lim.max_items} items (list elements and object "
                        f"entries; limit max_tool_arg_items = {lim.max_items})"
                    )
                children = node.values() if isinstance(node, dict) else node
                stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list, float)))
            elif isinstance(node, float) and not math.isfinite(node):
                return None, "arguments hold a number out of range (not a finite number)"
        cleaned = _clean_value(value)
        size = len(json.dumps(cleaned, ensure_ascii=False, separators=(",", ":")))
        if size > lim.max_chars:
            return None, (f"arguments are {size} characters long as JSON (limit max_tool_arg_chars = {lim.max_chars})")
        return cleaned, None
    except Exception as e:  # pragma: no cover - defensive: the parser must be total
        return None, f"arguments could not be checked ({type(e).__name__})"


def _clean_value(v: Any) -> Any:
    """A copy of a decoded JSON value with every string (and key) cleaned (depth already bounded)."""
    if isinstance(v, str):
        return clean_text(v)
    if isinstance(v, dict):
        return {clean_text(k): _clean_value(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_clean_value(x) for x in v]
    return v


class _NonStandardConstant(ValueError):
    """Raised by the strict decoder for ``NaN``, ``Infinity`` and ``-Infinity`` (not JSON)."""


def _reject_constant(name: str) -> Any:
    raise _NonStandardConstant(f"non-standard JSON constant {name} (strict JSON has no NaN, Infinity or -Infinity)")


#: The one decoder of the protocol: standard JSON only (Python's ``json`` accepts NaN/Infinity).
STRICT_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def strict_json_loads(s: str) -> Any:
    """``json.loads`` for the protocol: strict JSON (``NaN``/``Infinity`` raise ``ValueError``).
    Raises ``json.JSONDecodeError`` / ``ValueError`` / ``RecursionError`` like ``json.loads``."""
    return STRICT_DECODER.decode(s)


def json_error(e: BaseException) -> str:
    if isinstance(e, json.JSONDecodeError):
        return f"{e.msg} at line {e.lineno} column {e.colno} (char {e.pos})"
    if isinstance(e, RecursionError):
        return "nested too deeply"
    return str(e)


def snippet(s: str, n: int = _MAX_SNIPPET) -> str:
    s = s.strip().replace("\n", "\\n")
    return s if len(s) <= n else s[:n] + "…"


def as_text(text: Any) -> str:
    """Coerce any input to ``str`` (bytes are decoded with replacement; None is empty)."""
    if text is None:
        return ""
    if isinstance(text, str):
        return text
    if isinstance(text, (bytes, bytearray, memoryview)):
        return bytes(text).decode("utf-8", errors="replace")
    try:
        return str(text)
    except Exception:  # pragma: no cover - pathological __str__
        return ""
