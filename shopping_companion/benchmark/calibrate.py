"""Difficulty calibration of a built benchmark by a policy's results: Succ by source and task type.

A benchmark's ``stats.md`` reports how findable its needles are (:mod:`.synthesis.stats`); this
module adds how hard its tasks are for a known policy. :func:`succ_by_source` groups the episodes of
an evaluation run by the catalog source of each task's reference products (the part of a product id
before the first ``:``, e.g. ``ikea_sa``) and by task type; :func:`calibrate_benchmark` records it in
``stats.json`` / ``stats.md`` of the benchmark directory and refreshes the file hashes of
``manifest.json``, so the directory stays loadable. ``shopcomp quickstart`` calibrates its benchmark
with the reference policy's run.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from shopping_companion.errors import DataError
from shopping_companion.types import EpisodeResult, Task

__all__ = ["calibrate_benchmark", "succ_by_source", "task_source"]


def task_source(task: Task) -> str:
    """The catalog source of a task's reference products (``"a+b"`` when they differ,
    ``"(open)"`` for a task without reference products). Product ids are ``source:id``."""
    srcs = sorted({pid.split(":", 1)[0] for pid in task.reference_product_ids if pid and ":" in pid})
    return "+".join(srcs) if srcs else "(open)"


def succ_by_source(tasks: list[Task], episodes: list[EpisodeResult]) -> dict[str, Any]:
    """Succ (stage-2 success, Eq. 5 of the paper) by source and task type.

    ``episodes``: results of one run (every trial and strategy counts as one episode; errored
    episodes are left out and counted). Returns ``{"episodes": n, "errored": n, "by_source":
    {source: {"single"|"addon"|"all": {"n", "succ"}}}}`` with ``succ`` in [0, 1]; sources in
    decreasing number of episodes, then ``"all"`` last."""
    by_id = {t.task_id: t for t in tasks}
    cells: dict[str, dict[str, list[bool]]] = defaultdict(lambda: defaultdict(list))
    errored = 0
    used = 0
    for ep in episodes:
        task = by_id.get(ep.task_id)
        if task is None:
            continue
        if ep.error is not None:
            errored += 1
            continue
        used += 1
        for src in (task_source(task), "all"):
            cells[src][task.task_type].append(bool(ep.succ))
            cells[src]["all"].append(bool(ep.succ))

    def cell(xs: list[bool]) -> dict[str, Any]:
        return {"n": len(xs), "succ": round(sum(xs) / len(xs), 4) if xs else None}

    order = sorted((s for s in cells if s != "all"), key=lambda s: (-len(cells[s]["all"]), s))
    if "all" in cells:
        order.append("all")
    return {
        "episodes": used,
        "errored": errored,
        "by_source": {s: {k: cell(cells[s][k]) for k in ("single", "addon", "all")} for s in order},
    }


def calibrate_benchmark(bench_dir: str | Path, results: str | Path, policy: str = "reference") -> dict[str, Any]:
    """Record ``policy``'s Succ by source and task type (from the run's ``results`` JSONL) in the
    benchmark at ``bench_dir``: ``stats.json`` gains ``calibration``, ``stats.md`` is rewritten with
    the table, and ``manifest.json``'s file hashes are refreshed. Returns the calibration dict.

    Raises :class:`~shopping_companion.errors.DataError` when the benchmark has no ``stats.json``
    or the results file holds no episode of the benchmark's tasks."""
    from shopping_companion.benchmark.report import read_results
    from shopping_companion.benchmark.synth import load_benchmark
    from shopping_companion.benchmark.synthesis.build import write_manifest
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
    st = json.loads(stats_path.read_text(encoding="utf-8"))
    verification = st.pop("verification", None)
    st["calibration"] = cal
    written = write_stats(d, st, verification)
    write_manifest(d, bench.manifest, written, keep_files=True)
    return cal
