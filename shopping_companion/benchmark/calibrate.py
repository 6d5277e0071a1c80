"""Difficulty calibration of a built benchmark by a policy's results: Succ by source and task type,
and Acc / Succ / pass^k per memory ability and stress variant.

A benchmark's ``stats.md`` reports how findable its needles are (:mod:`.synthesis.stats`); this
module adds how hard its tasks are for a known policy.
:func:`~shopping_companion.benchmark.metrics.succ_by_source` groups the episodes of
an evaluation run by the catalog source of each task's reference products (the part of a product id
before the first ``:``, e.g. ``ikea_sa``) and by task type,
:func:`~shopping_companion.benchmark.metrics.group_table` by ability and stress variant;
:func:`calibrate_benchmark` records both in
``stats.json`` / ``stats.md`` of the benchmark directory and refreshes the file hashes of
``manifest.json``, so the directory stays loadable. ``shopcomp quickstart`` calibrates its benchmark
with the reference policy's run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from shopping_companion.benchmark.metrics import group_table, succ_by_source, task_abilities, task_stress
from shopping_companion.benchmark.metrics import task_source  # noqa: F401 - task_source re-exported
from shopping_companion.errors import DataError

__all__ = ["calibrate_benchmark", "succ_by_source", "task_source"]  # the last two: metrics.py


def calibrate_benchmark(bench_dir: str | Path, results: str | Path, policy: str = "reference") -> dict[str, Any]:
    """Record ``policy``'s Succ by source and task type, and its Acc / Succ / pass^1 per ability and
    stress variant (``by_ability``, ``by_stress``: per strategy), from the run's ``results`` JSONL, in the
    benchmark at ``bench_dir``: ``stats.json`` gains ``calibration``, ``stats.md`` is rewritten with
    the table, and ``manifest.json``'s file hashes are refreshed. Returns the calibration dict.

    Raises :class:`~shopping_companion.errors.DataError` when the benchmark has no ``stats.json``
    or the results file holds no episode of the benchmark's tasks."""
    from shopping_companion.benchmark.report import read_results
    from shopping_companion.assembly.data import load_benchmark
    from shopping_companion.benchmark.synthesis.directory import write_manifest
    from shopping_companion.benchmark.synthesis.stats import write_stats

    d = Path(bench_dir)
    bench = load_benchmark(d)
    stats_path = d / "stats.json"
    if not stats_path.is_file():
        raise DataError(f"{d}: no stats.json to calibrate (a benchmark written by shopcomp synth has one)")
    if not Path(results).is_file():
        raise DataError(f"results file {str(results)!r} does not exist (give the results.jsonl of a shopcomp eval run)")
    try:
        episodes = read_results(results)
    except ValueError as e:
        raise DataError(f"{results}: not a results file of shopcomp eval ({' '.join(str(e).split())[:200]})") from None
    cal = succ_by_source(bench.tasks, episodes)
    if not cal["episodes"]:
        raise DataError(f"{results}: no finished episode of a task of {d} (a run on another benchmark?)")
    cal["policy"] = policy
    by_id = {t.task_id: t for t in bench.tasks}
    cal["by_ability"] = group_table(by_id, episodes, task_abilities)
    cal["by_stress"] = group_table(by_id, episodes, task_stress)
    st = json.loads(stats_path.read_text(encoding="utf-8"))
    verification = st.pop("verification", None)
    st["calibration"] = cal
    written = write_stats(d, st, verification)
    write_manifest(d, bench.manifest, written, keep_files=True)
    return cal
