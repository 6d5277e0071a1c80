"""The one stderr console: progress, notes and warnings of every command and library function go
here (``rich``; soft-wrapped, no emoji codes), so stdout keeps only command results (tables,
paths). Functions that print take an optional ``console`` and fall back to this one."""

from __future__ import annotations

from rich.console import Console

__all__ = ["console"]

#: Progress, notes and errors go to stderr; command results (tables, paths) may go to stdout.
console = Console(stderr=True, soft_wrap=True, emoji=False)
