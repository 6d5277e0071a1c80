"""The ``shopcomp`` command line (one module per command group; :mod:`.root` assembles them).

``app`` and ``main`` are loaded on first use, so ``python -m shopping_companion.cli.grpo`` runs
that group alone without importing (and re-importing) the others."""

from __future__ import annotations

from typing import Any

__all__ = ["app", "main"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from shopping_companion.cli import root

        return getattr(root, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
