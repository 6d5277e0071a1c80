"""Small value helpers of the viewer's data layer: numbers read from JSON, one-line error texts."""

from __future__ import annotations

import math
import statistics
from typing import Any, Iterable

from pydantic import ValidationError

__all__ = ["article", "short_error", "validation_problem", "finite", "mean_or_none"]


def article(word: str) -> str:
    return "an" if word[:1] in "AEIOUaeiou" else "a"


def short_error(e: BaseException, n: int = 200) -> str:
    return f"{type(e).__name__}: {' '.join(str(e).split())}"[:n]


def validation_problem(model: str, e: ValidationError) -> str:
    """One short line naming the first field pydantic refused (and how many more)."""
    errs = e.errors()
    if not errs:
        return f"not {article(model)} {model}"
    first = errs[0]
    loc = ".".join(str(x) for x in first.get("loc", ())) or "(record)"
    more = f" (+{len(errs) - 1} more)" if len(errs) > 1 else ""
    return f"not {article(model)} {model}: {loc}: {first.get('msg', '')}{more}"[:300]


def finite(v: Any) -> float | None:
    """``v`` as a finite float (a bool as 0.0 / 1.0); None for anything else: not a number, NaN,
    infinite, or an integer too large for a float."""
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)):
        try:
            x = float(v)
        except OverflowError:
            return None
        return x if math.isfinite(x) else None
    return None


def mean_or_none(xs: Iterable[float]) -> float | None:
    xs = list(xs)
    return statistics.fmean(xs) if xs else None
