"""The viewer's data layer under its former name: every public name it had, re-exported from the
module that now holds it (kept for code that imports ``shopping_companion.viewer.store``): the
package's own public names and a few caps and :class:`RunUnreadableError`.

- :mod:`~shopping_companion.viewer.models`: the view models (:class:`RunSummary`,
  :class:`EpisodeRow`, :class:`EpisodeView`, ...);
- :mod:`~shopping_companion.viewer.files`: reading run files safely (:class:`RunUnreadableError`);
- :mod:`~shopping_companion.viewer.rows`: rows from parsed lines;
- :mod:`~shopping_companion.viewer.benchmarks`: the benchmark and checkpoint of a run;
- :mod:`~shopping_companion.viewer.index`: :class:`RunIndex`, the index of one run file;
- :mod:`~shopping_companion.viewer.failure_classes`: taxonomy classes of failures;
- :mod:`~shopping_companion.viewer.verl_dumps`: GRPO validation dumps;
- :mod:`~shopping_companion.viewer.episodes`: annotated episodes and product cards;
- :mod:`~shopping_companion.viewer.discovery`: finding runs, :class:`RunCatalog`;
- :mod:`~shopping_companion.viewer.compare`: :func:`compare`.
"""

from __future__ import annotations

from shopping_companion import viewer
from shopping_companion.viewer import *  # noqa: F403 - the package's public names are this module's too
from shopping_companion.viewer.benchmarks import TASKS_FILE_CAP
from shopping_companion.viewer.files import LIVE_WINDOW_S, SIDE_FILE_CAP, RunUnreadableError
from shopping_companion.viewer.models import RAW_CAP

#: The package's public names (:data:`shopping_companion.viewer.__all__`) and the caps and error
#: this module also held.
__all__ = [*viewer.__all__, "RAW_CAP", "LIVE_WINDOW_S", "SIDE_FILE_CAP", "TASKS_FILE_CAP", "RunUnreadableError"]
