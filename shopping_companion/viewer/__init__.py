"""``shopcomp view``: a read-only local web viewer of runs (evaluations, SFT collections, GRPO
validation dumps).

:mod:`~shopping_companion.viewer.discovery` finds runs, :mod:`~shopping_companion.viewer.index`
indexes one run file, :mod:`~shopping_companion.viewer.episodes` builds annotated episodes (only
these read run files, through :mod:`~shopping_companion.viewer.files`);
:mod:`~shopping_companion.viewer.compare` pairs two runs; ``viewer/app.py`` serves the pages
(``viewer/web.py`` its HTTP plumbing, ``viewer/links.py`` its URLs). ``docs/viewer.md`` is the
user guide.
"""

from shopping_companion.viewer.compare import (
    COMPARED_METRICS,
    Comparison,
    MetricDelta,
    TaskPair,
    compare,
    paired_bootstrap_ci,
)
from shopping_companion.viewer.discovery import RunCatalog
from shopping_companion.viewer.index import RunIndex
from shopping_companion.viewer.models import (
    MAX_LIMIT,
    SORT_FIELDS,
    CallView,
    EpisodeRow,
    EpisodeView,
    Mark,
    Page,
    ProductCard,
    RowStatus,
    RunKind,
    RunSummary,
    StageView,
    TurnView,
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
