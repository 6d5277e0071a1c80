"""Wall-clock bounds on blocking calls: one helper behind every "give up after N seconds" of the
package (an HTTP attempt, an LLM judge's reply, a GRPO sample's judging and rewarding)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar
from shopping_companion.errors import CallTimeout  # noqa: F401 - re-exported

T = TypeVar("T")


def call_within(fn: Callable[[], T], seconds: float | None, name: str = "bounded-call") -> T:
    """``fn()`` in a daemon thread named ``name``, waited on for at most ``seconds`` of wall clock
    (``None``: called directly, no limit). Returns its result, re-raises what it raised (any
    ``BaseException``, in the caller's thread), or raises :class:`CallTimeout` when the time is
    up. The caller decides how to stop the abandoned work (e.g. shut its sockets down)."""
    if seconds is None:
        return fn()
    box: dict[str, Any] = {}
    done = threading.Event()

    def work() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = e
        finally:
            done.set()

    threading.Thread(target=work, daemon=True, name=name).start()
    if not done.wait(max(0.0, seconds)):
        raise CallTimeout(f"no result within {round(seconds, 2):g}s")
    if "error" in box:
        raise box["error"]
    return box["value"]


__all__ = ["CallTimeout", "call_within"]
