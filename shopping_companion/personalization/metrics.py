"""Metrics and paired statistics (paper §6.1 Table 4, App. A.3 Tables 8-10).

* :func:`title_overlap` — token-overlap ratio |T ∩ R| / |T| of the target title's content tokens T
  with a response's tokens R, in [0, 1]; :func:`retrieval_correct` — the dialogue counts as correct
  when the best turn's ratio exceeds ``threshold`` (paper: 0.3, Table 4 footnote 6).
* :func:`first_hit_turn` — the first 1-based turn whose retrieved products K^p_t contain the target
  ASIN (None: never); SR@all is the share of dialogues with a hit, the first-hit turn is averaged
  over dialogues with a hit only (Table 9).
* :func:`paired_wilcoxon` — two-sided Wilcoxon signed-rank test (``scipy.stats.wilcoxon``, zero
  differences dropped: ``zero_method="wilcox"``) with the matched-pairs rank-biserial correlation
  r = (R+ - R-) / (R+ + R-) over the ranks of the non-zero |differences| (ties get mean ranks),
  in [-1, 1], positive when the first sample is larger.
* :func:`holm` — Holm step-down adjusted p-values (monotone, capped at 1).
* :func:`spearman` — Spearman's rho of two judges' scores (``scipy.stats.spearmanr``).
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from shopping_companion.errors import ConfigError
from shopping_companion.personalization.text import STOPWORDS, tokens

__all__ = [
    "PairedResult",
    "first_hit_turn",
    "holm",
    "paired_wilcoxon",
    "rank_biserial",
    "retrieval_correct",
    "spearman",
    "title_overlap",
]


def _title_tokens(title: str) -> set[str]:
    return {t for t in tokens(title) if t not in STOPWORDS}


def title_overlap(title: str, response: str) -> float:
    """|T ∩ R| / |T| with T the title's tokens minus stop words and R the response's tokens;
    0.0 when T is empty. Case-insensitive; punctuation ignored."""
    t = _title_tokens(title)
    if not t:
        return 0.0
    return len(t & set(tokens(response))) / len(t)


def retrieval_correct(title: str, responses: Sequence[str], threshold: float = 0.3) -> tuple[bool, float]:
    """``(max ratio > threshold, max ratio)`` over a dialogue's responses (module docstring)."""
    best = max((title_overlap(title, r) for r in responses), default=0.0)
    return best > threshold, best


def first_hit_turn(retrieved_per_turn: Sequence[Sequence[str]], target: str) -> int | None:
    """First 1-based turn whose retrieved ids include ``target``; None when none does."""
    for i, ids in enumerate(retrieved_per_turn, 1):
        if target in ids:
            return i
    return None


def rank_biserial(x: Sequence[float], y: Sequence[float]) -> float:
    """Matched-pairs rank-biserial correlation of ``x - y`` (module docstring); 0.0 when every
    difference is zero. Raises :class:`ConfigError` for unequal lengths."""
    from scipy.stats import rankdata

    if len(x) != len(y):
        raise ConfigError(f"x, y: paired samples need equal lengths, got {len(x)} and {len(y)}")
    d = np.asarray(x, float) - np.asarray(y, float)
    d = d[d != 0]
    if d.size == 0:
        return 0.0
    r = rankdata(np.abs(d))
    rp, rm = r[d > 0].sum(), r[d < 0].sum()
    return float((rp - rm) / (rp + rm))


class PairedResult(dict):
    """``{"n", "n_nonzero", "statistic", "p", "r"}``; ``p`` is NaN when every difference is zero."""


def paired_wilcoxon(x: Sequence[float], y: Sequence[float]) -> PairedResult:
    """Two-sided Wilcoxon signed-rank test of paired samples plus the rank-biserial effect size."""
    from scipy.stats import wilcoxon

    if len(x) != len(y):
        raise ConfigError(f"x, y: paired samples need equal lengths, got {len(x)} and {len(y)}")
    d = np.asarray(x, float) - np.asarray(y, float)
    nz = int((d != 0).sum())
    if nz == 0:
        return PairedResult(n=len(d), n_nonzero=0, statistic=float("nan"), p=float("nan"), r=0.0)
    res = wilcoxon(np.asarray(x, float), np.asarray(y, float), zero_method="wilcox", alternative="two-sided")
    return PairedResult(
        n=len(d), n_nonzero=nz, statistic=float(res.statistic), p=float(res.pvalue), r=rank_biserial(x, y)
    )


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values in input order; NaN inputs stay NaN and are not counted in m."""
    idx = [i for i, p in enumerate(pvalues) if not math.isnan(p)]
    m = len(idx)
    order = sorted(idx, key=lambda i: pvalues[i])
    out = [float("nan")] * len(pvalues)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        out[i] = running
    return out


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rho (NaN when either side is constant or fewer than 2 pairs)."""
    from scipy.stats import spearmanr

    if len(a) != len(b):
        raise ConfigError(f"a, b: need equal lengths, got {len(a)} and {len(b)}")
    if len(a) < 2 or len(set(a)) < 2 or len(set(b)) < 2:
        return float("nan")
    return float(spearmanr(a, b).statistic)
