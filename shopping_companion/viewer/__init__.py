"""``shopcomp view``: a read-only local web viewer of runs (evaluations, SFT collections, GRPO
validation dumps).

:mod:`~shopping_companion.viewer.store` finds and indexes runs and builds annotated episodes
(the only module that reads run files); :mod:`~shopping_companion.viewer.compare` pairs two runs;
``viewer/app.py`` serves the pages. See ``docs/`` for the user guide.
"""

from shopping_companion.viewer.compare import COMPARED_METRICS, paired_bootstrap_ci
from shopping_companion.viewer.store import (
    MAX_LIMIT,
    SORT_FIELDS,
    CallView,
    Comparison,
    EpisodeRow,
    EpisodeView,
    Mark,
    MetricDelta,
    Page,
    ProductCard,
    RowStatus,
    RunCatalog,
    RunIndex,
    RunKind,
    RunSummary,
    StageView,
    TaskPair,
    TurnView,
    compare,
)

__all__ = [
    "COMPARED_METRICS",
    "MAX_LIMIT",
    "SORT_FIELDS",
    "CallView",
    "Comparison",
    "EpisodeRow",
    "EpisodeView",
    "Mark",
    "MetricDelta",
    "Page",
    "ProductCard",
    "RowStatus",
    "RunCatalog",
    "RunIndex",
    "RunKind",
    "RunSummary",
    "StageView",
    "TaskPair",
    "TurnView",
    "compare",
    "paired_bootstrap_ci",
]
