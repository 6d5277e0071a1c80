"""The benchmark directory (:func:`write_benchmark`): ``tasks.jsonl``, ``sessions.jsonl``, the
statistics and ``manifest.json`` with the SHA-256 of every other file, written last; the manifest's
counts; and the :class:`PartStore` of finished tasks that lets an interrupted build resume.
"""

from __future__ import annotations

import fcntl
import json
import shutil
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shopping_companion.benchmark.synthesis.common import SynthError
from shopping_companion.runs import file_sha256, read_json, write_lines_atomic, write_text_atomic
from shopping_companion.types import Session, Task

__all__ = [
    "FORMAT_VERSION",
    "PARTIAL_DIR",
    "kept_parts",
    "PartStore",
    "SynthOutput",
    "stats_summary",
    "task_counts",
    "write_benchmark",
    "write_manifest",
]

#: Version of the benchmark directory format (2: add-on deals, verification, stats, resumable).
FORMAT_VERSION = 2

PARTIAL_DIR = ".partial"


@dataclass
class SynthOutput:
    """A built benchmark in memory: tasks (index order), sessions by id, manifest, statistics."""

    tasks: list[Task]
    sessions: dict[str, Session]
    manifest: dict[str, Any]
    dropped: dict[str, int] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)
    build_log: dict[str, Any] = field(default_factory=dict)


def task_counts(tasks: list[Task], n_sessions: int, requested: int) -> dict[str, Any]:
    """The manifest's ``counts`` of a non-empty task list: tasks by type and split, sessions,
    needle sessions, mean preferences per task (3 decimals) and the tasks ``requested``."""
    return {
        "tasks": len(tasks),
        "single": sum(t.task_type == "single" for t in tasks),
        "addon": sum(t.task_type == "addon" for t in tasks),
        "train": sum(t.split == "train" for t in tasks),
        "test": sum(t.split == "test" for t in tasks),
        "sessions": n_sessions,
        "needle_sessions": sum(len(t.needle_session_ids) for t in tasks),
        "preferences_mean": round(sum(len(t.preferences) for t in tasks) / len(tasks), 3),
        "requested": requested,
    }


def stats_summary(st: dict[str, Any]) -> dict[str, Any]:
    """The manifest's ``stats_summary`` every benchmark has, from the statistics ``st``
    (:func:`~shopping_companion.benchmark.synthesis.stats.compute_stats`)."""
    return {
        "attributes_per_task": {k: v.get("mean") for k, v in st["attributes_per_task"].items()},
        "sessions_per_user": st["history"]["sessions_per_user"].get("mean"),
        "tokens_per_user": st["history"]["tokens_per_user"].get("mean"),
        "needle_top1_bm25": st["needle_top1"]["bm25"]["all"]["share"],
        "needle_top1_minilm": st["needle_top1"]["minilm"]["all"]["share"],
    }


def write_manifest(
    directory: str | Path, manifest: dict[str, Any], files: Iterable[str], *, keep_files: bool = False
) -> None:
    """Write ``manifest.json`` in ``directory`` atomically (sorted keys, 2-space indent):
    ``manifest`` with a ``files`` map of the SHA-256 of each of ``files`` (names in ``directory``)
    that exists; with ``keep_files`` the ``files`` map ``manifest`` has is kept and updated."""
    d = Path(directory)
    out = dict(manifest)
    hashes = dict(out.get("files", {})) if keep_files else {}
    for name in files:
        if (d / name).is_file():
            hashes[name] = file_sha256(d / name)
    out["files"] = hashes
    write_lines_atomic(d / "manifest.json", [json.dumps(out, indent=2, sort_keys=True, ensure_ascii=False)])


def write_benchmark(out: SynthOutput, directory: str | Path) -> Path:
    """Write ``tasks.jsonl``, ``sessions.jsonl``, the statistics (``stats.md``, ``stats.json``,
    PNGs) and ``manifest.json`` (each atomically; the manifest last, with the SHA-256 of every
    other file, so a directory with a manifest is complete). Timings go to ``build_log.json``
    (the only file that differs between identical builds)."""
    from shopping_companion.benchmark.synthesis.stats import write_stats

    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    (d / "manifest.json").unlink(missing_ok=True)
    write_lines_atomic(d / "tasks.jsonl", (t.model_dump_json() for t in out.tasks))
    write_lines_atomic(d / "sessions.jsonl", (out.sessions[k].model_dump_json() for k in sorted(out.sessions)))
    files = ["tasks.jsonl", "sessions.jsonl"]
    if out.stats:
        files += write_stats(d, out.stats, out.manifest.get("verification"))
    if out.build_log:
        (d / "build_log.json").write_text(json.dumps(out.build_log, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    write_manifest(d, out.manifest, files)
    return d


def kept_parts(out_dir: str | Path) -> tuple[int, Path]:
    """``(finished task records, their directory)`` of the unfinished build in ``out_dir``
    (:class:`PartStore`'s ``.partial/parts``; 0 when there is none)."""
    parts = Path(out_dir) / PARTIAL_DIR / "parts"
    return (len(list(parts.glob("*.json"))) if parts.is_dir() else 0), parts


class PartStore:
    """Finished task records of an interrupted or running directory build (``<out>/.partial``).

    Holds an exclusive lock (``flock``) while open, so two builds never write into one directory.
    A directory whose parts came from different inputs (another fingerprint) is refused unless
    ``fresh`` (then it is emptied).
    """

    def __init__(self, out_dir: Path, fingerprint: str, fresh: bool = False) -> None:
        self.dir = Path(out_dir) / PARTIAL_DIR
        self.parts = self.dir / "parts"
        self.dir.mkdir(parents=True, exist_ok=True)
        self._lock = open(self.dir / "lock", "w")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.close()
            raise SynthError(f"{out_dir}: another build is writing into this directory") from None
        fp_file = self.dir / "fingerprint"
        if fp_file.is_file() and fp_file.read_text().strip() != fingerprint:
            if not fresh:
                self.close()
                raise SynthError(
                    f"{out_dir} holds an unfinished build with different inputs or settings; rerun with "
                    "--fresh to discard it, or choose another output directory"
                )
            shutil.rmtree(self.parts, ignore_errors=True)
        elif fresh:
            shutil.rmtree(self.parts, ignore_errors=True)
        self.parts.mkdir(parents=True, exist_ok=True)
        fp_file.write_text(fingerprint + "\n")
        self.n_existing = len(list(self.parts.glob("*.json")))

    def _path(self, index: int) -> Path:
        return self.parts / f"{index:06d}.json"

    def get(self, index: int) -> dict[str, Any] | None:
        # None for a missing or torn file (should not happen: writes are atomic); rebuild the task
        return read_json(self._path(index))

    def put(self, index: int, record: dict[str, Any]) -> None:
        write_text_atomic(self._path(index), json.dumps(record, sort_keys=True, ensure_ascii=False))

    def close(self) -> None:
        if not self._lock.closed:
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()

    def remove(self) -> None:
        self.close()
        shutil.rmtree(self.dir, ignore_errors=True)
