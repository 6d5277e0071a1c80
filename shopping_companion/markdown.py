"""Markdown tables, written once for every report of the package (evaluation, personalization,
training pipeline, judge agreement, benchmark statistics).

:func:`markdown_table` renders a GitHub-flavoured Markdown table: a header row, the rule row
(``---``, or ``:---`` / ``---:`` / ``:---:`` for a column's alignment) and one row per record,
each line ``| a | b |``. Every cell is text (``None`` is empty, anything else ``str()``); a ``|``
in it is escaped as ``\\|`` and a line break becomes a space, so no value can split a row or end
the table. An empty cell prints as ``| |``. Imports nothing of the package.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["markdown_cell", "markdown_table"]

_RULES = {"": "---", "left": ":---", "right": "---:", "center": ":---:"}


def markdown_cell(value: Any) -> str:
    """``value`` as the text of one table cell: ``None`` -> ``""``, ``|`` -> ``\\|``, every line
    break (``\\r\\n``, ``\\r``, ``\\n``) -> one space."""
    if value is None:
        return ""
    text = str(value).replace("\r\n", " ").replace("\r", " ").replace("\n", " ")
    return text.replace("|", "\\|")


def _row(cells: Iterable[Any]) -> str:
    return "|" + "|".join(f" {c} " if c else " " for c in map(markdown_cell, cells)) + "|"


def markdown_table(
    headers: Sequence[Any], rows: Iterable[Sequence[Any]], align: Sequence[str] | str | None = None
) -> str:
    """The Markdown table of ``headers`` and ``rows`` (one line each, joined by ``\\n``, no final
    newline); cells as :func:`markdown_cell` makes them.

    Args:
        headers: the column names.
        rows: the records, each with one cell per column.
        align: one of ``""`` (none), ``"left"``, ``"right"``, ``"center"`` per column, or one of
            them for every column; ``None``: no alignment (``---``).

    Raises:
        ValueError: a row with another number of cells than ``headers``, or an unknown alignment.
    """
    n = len(headers)
    aligns = [align or ""] * n if align is None or isinstance(align, str) else list(align)
    if len(aligns) != n or any(a not in _RULES for a in aligns):
        raise ValueError(f"align: {n} of {sorted(_RULES)} expected, got {align!r}")
    lines = [_row(headers), "|" + "|".join(_RULES[a] for a in aligns) + "|"]
    for i, row in enumerate(rows):
        cells = list(row)
        if len(cells) != n:
            raise ValueError(f"row {i}: {len(cells)} cells for {n} columns ({cells!r})")
        lines.append(_row(cells))
    return "\n".join(lines)
