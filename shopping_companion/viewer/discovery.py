"""Finding runs: the run files under the directories (or the files) given to ``shopcomp view``,
their kinds and run ids, and :class:`RunCatalog`, which indexes each on first use.

Kinds of runs (:data:`~shopping_companion.viewer.models.RunKind`), found by file name (names
holding ``.stale-`` are ignored):

- ``eval``: a directory holding ``results.jsonl`` (one ``EpisodeResult`` per line);
- ``sft_rollouts``: ``rollouts.jsonl`` of an SFT collection (``EpisodeResult`` lines too);
- ``sft_kept``: ``kept.jsonl`` of an SFT collection (one :class:`~shopping_companion.sft.collect.KeptStage`
  per line: one stage trajectory and its verdict, no reward);
- ``grpo_val``: a verl validation dump ``<step>.jsonl`` (lines with ``input``, ``output``,
  ``gts``, ``score`` and the reward's extra keys). Each step file is a run of its own (run id
  ``<dir>/<step>.jsonl``), so two steps can be compared like two evaluations
  (:mod:`~shopping_companion.viewer.verl_dumps`).

Run ids: the relative POSIX path of the run directory under the target that was searched (an
explicitly given run directory: its own name), each segment reduced to ``[A-Za-z0-9._-]``; a
second run file in the same directory (``kept.jsonl`` next to ``rollouts.jsonl``, every GRPO step
file) gets ``<dir id>/<file name>``; duplicates get ``-2``, ``-3``. Ids never hold an absolute path
or ``..``.
"""

from __future__ import annotations

import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from shopping_companion.errors import ConfigError
from shopping_companion.viewer.files import first_json_line
from shopping_companion.viewer.index import RunIndex
from shopping_companion.viewer.models import RunKind, RunSummary

__all__ = ["RUNS_CACHE_S", "MAX_DEPTH", "RunCatalog"]

#: Seconds :meth:`RunCatalog.runs` answers from its last discovery while no target directory and
#: no run file changed (monotonic clock).
RUNS_CACHE_S = 1.0
#: Largest depth below a runs directory that discovery searches.
MAX_DEPTH = 4
_PRIMARY: dict[str, RunKind] = {"results.jsonl": "eval", "rollouts.jsonl": "sft_rollouts", "kept.jsonl": "sft_kept"}
_STEP_FILE = re.compile(r"^\d+\.jsonl$")
_SEGMENT_BAD = re.compile(r"[^A-Za-z0-9._-]")


def _segment(s: str) -> str:
    s = _SEGMENT_BAD.sub("_", s) or "_"
    return "_" if s in (".", "..") else s


@dataclass
class _Found:
    """A discovered run file; ``root``: the resolved directory it was found in (its file, and the
    side files read beside it, must resolve inside it)."""

    path: Path
    kind: RunKind
    run_id: str
    name: str
    root: Path | None = None


def _looks_grpo(p: Path) -> bool:
    """The first non-blank line of ``p`` is a JSON object with ``input``, ``output`` and ``score``."""
    d = first_json_line(p, None)
    return isinstance(d, dict) and {"input", "output", "score"} <= d.keys()


def _sniff_kind(p: Path) -> RunKind:
    if p.name in _PRIMARY:
        return _PRIMARY[p.name]
    d = first_json_line(p, None)
    if isinstance(d, dict) and {"input", "output", "score"} <= d.keys():
        return "grpo_val"
    if isinstance(d, dict) and {"trajectory", "verdict"} <= d.keys():
        return "sft_kept"
    return "eval"


def _check_run_file(target: Path) -> None:
    """Refuse an explicitly given file that is not a run file: it must be a regular ``.jsonl``
    file named ``results.jsonl``, ``rollouts.jsonl``, ``kept.jsonl`` or ``<step>.jsonl``, or one
    whose first non-blank line is a JSON object. Raises ``ConfigError`` naming the path."""
    kinds = "results.jsonl, rollouts.jsonl, kept.jsonl, <step>.jsonl, or a .jsonl file of JSON objects"
    if not target.name.endswith(".jsonl"):
        raise ConfigError(f"{target}: not a run file (a run file is {kinds}; or give a run or runs directory)")
    if target.name in _PRIMARY or _STEP_FILE.match(target.name):
        return
    if not isinstance(first_json_line(target, None), dict):
        raise ConfigError(f"{target}: not a run file: its first line is not a JSON object (a run file is {kinds})")


def _run_files(d: Path, root: Path) -> list[tuple[Path, RunKind]]:
    """Run files directly in directory ``d`` (no symlink resolving outside ``root``)."""
    out: list[tuple[Path, RunKind]] = []
    try:
        entries = sorted(os.scandir(d), key=lambda e: e.name)
    except OSError:
        return out
    steps: list[Path] = []
    for e in entries:
        if ".stale-" in e.name or not e.name.endswith(".jsonl"):
            continue
        p = Path(e.path)
        try:
            if not p.is_file() or (e.is_symlink() and not p.resolve().is_relative_to(root)):
                continue
        except OSError:
            continue
        if e.name in _PRIMARY:
            out.append((p, _PRIMARY[e.name]))
        elif _STEP_FILE.match(e.name):
            steps.append(p)
    order = list(_PRIMARY.values())
    out.sort(key=lambda x: order.index(x[1]))
    out += [(p, "grpo_val") for p in sorted(steps, key=lambda p: int(p.stem)) if _looks_grpo(p)]
    return out


def _walk(target: Path, root: Path, base_id: str | None, depth: int, seen: set[Path]) -> list[_Found]:
    """Runs in ``target`` and below (``depth`` levels left); ``base_id``: the id of ``target``
    itself (None: the searched root, whose own runs take ``root_name``)."""
    found: list[_Found] = []
    try:
        real = target.resolve()
    except OSError:
        return found
    if real in seen:
        return found
    seen.add(real)
    files = _run_files(target, root)
    dir_id = base_id if base_id is not None else _segment(target.name)
    for n, (p, kind) in enumerate(files):
        primary = n == 0 and kind != "grpo_val"
        rid = dir_id if primary else f"{dir_id}/{_segment(p.name)}"
        name = target.name if primary else f"{target.name}/{p.name}"
        found.append(_Found(p, kind, rid, name, root))
    if depth <= 0:
        return found
    try:
        subdirs = sorted((e for e in os.scandir(target) if e.is_dir()), key=lambda e: e.name)
    except OSError:
        return found
    for e in subdirs:
        if e.name.startswith(".") or e.name == "__pycache__":
            continue
        sub = Path(e.path)
        try:
            if e.is_symlink() and not sub.resolve().is_relative_to(root):
                continue
        except OSError:
            continue
        child_id = _segment(e.name) if base_id is None else f"{base_id}/{_segment(e.name)}"
        found += _walk(sub, root, child_id, depth - 1, seen)
    return found


def _discover(target: Path) -> list[_Found]:
    if not target.exists():
        raise ConfigError(f"{target}: does not exist (give a runs directory, a run directory or a run file)")
    if not target.is_file() and not target.is_dir():
        raise ConfigError(
            f"{target}: neither a regular file nor a directory (give a runs directory, a run directory or a run file)"
        )
    if target.is_file():
        _check_run_file(target)
        kind = _sniff_kind(target)
        parent = _segment(target.resolve().parent.name)
        primary = target.name in ("results.jsonl", "rollouts.jsonl")
        rid = parent if primary else f"{parent}/{_segment(target.name)}"
        name = target.parent.name if primary else f"{target.parent.name}/{target.name}"
        return [_Found(target, kind, rid, name, target.resolve().parent)]
    root = target.resolve()
    own = _run_files(target, root)
    if own:  # a run directory given itself: its runs are named after it, runs below it after their path
        found = _walk(target, root, _segment(target.resolve().name), MAX_DEPTH, set())
    else:
        found = []
        seen: set[Path] = {root}
        try:
            subdirs = sorted((e for e in os.scandir(target) if e.is_dir()), key=lambda e: e.name)
        except OSError as ex:
            raise ConfigError(f"{target}: cannot be read ({ex.strerror})") from None
        for e in subdirs:
            if e.name.startswith(".") or e.name == "__pycache__":
                continue
            sub = Path(e.path)
            if e.is_symlink() and not sub.resolve().is_relative_to(root):
                continue
            found += _walk(sub, root, _segment(e.name), MAX_DEPTH - 1, seen)
    return found


class RunCatalog:
    """Every run under the given targets (module docstring: kinds, ids).

    ``targets``: runs directories (searched recursively, depth <= :data:`MAX_DEPTH`, symlinks that
    resolve outside the target skipped), run directories, or run files. Raises
    :class:`~shopping_companion.errors.ConfigError` naming the path when a target does not exist
    or holds no run. Thread-safe; indexes are built on first use and refreshed incrementally.
    ``background_taxonomy``: classify failures of runs without ``taxonomy.jsonl`` in a background
    thread per run (off: only the rows a page shows, or
    :meth:`~shopping_companion.viewer.index.RunIndex.classify_pending`).
    """

    def __init__(self, targets: Sequence[Path | str], *, background_taxonomy: bool = True) -> None:
        if not targets:
            raise ConfigError("no runs given: name a runs directory, a run directory or a run file")
        self.targets = [Path(t) for t in targets]
        self.background_taxonomy = background_taxonomy
        self._lock = threading.RLock()
        self._ids: dict[str, _Found] = {}
        self._by_path: dict[Path, str] = {}
        self._indexes: dict[str, RunIndex] = {}
        self._runs_cache: tuple[float, tuple, list[RunSummary]] | None = None
        for t in self.targets:
            found = _discover(t)
            if not found:
                raise ConfigError(
                    f"{t}: holds no run (no results.jsonl, rollouts.jsonl, kept.jsonl or GRPO validation "
                    f"<step>.jsonl within {MAX_DEPTH} levels)"
                )
            self._register(found)

    def _register(self, found: Iterable[_Found]) -> None:
        for f in found:
            try:
                key = f.path.resolve()
            except OSError:
                continue
            if key in self._by_path:
                continue
            rid, n = f.run_id, 2
            while rid in self._ids:
                rid = f"{f.run_id}-{n}"
                n += 1
            f.run_id = rid
            self._ids[rid] = f
            self._by_path[key] = rid

    def _rediscover(self) -> None:
        for t in self.targets:
            try:
                self._register(_discover(t))
            except ConfigError:
                continue

    def run_ids(self) -> list[str]:
        """Every known run id, in discovery order (no indexing)."""
        with self._lock:
            return list(self._ids)

    def _stamp(self) -> tuple:
        """What a cached :meth:`runs` answer depends on: the modification time of every target and
        the size, modification time and inode of every known run file (one ``stat`` each)."""
        out: list[tuple] = []
        for p in [*self.targets, *(f.path for f in self._ids.values())]:
            try:
                st = os.stat(p)
                out.append((st.st_mtime_ns, st.st_size, st.st_ino))
            except OSError:
                out.append(None)
        return tuple(out)

    def runs(self) -> list[RunSummary]:
        """Summaries of every run (new runs are discovered; each index is refreshed; runs whose
        file disappeared are left out). Within :data:`RUNS_CACHE_S` seconds of the last call, and
        while no target and no run file changed (:meth:`_stamp`), the last answer is returned
        without walking the targets again (a new run nested below a target shows up after at most
        that long; a changed run file, or a new run directly in a target, at once)."""
        with self._lock:
            now = time.monotonic()
            cached = self._runs_cache
            stamp = self._stamp() if cached is not None and now - cached[0] < RUNS_CACHE_S else None
            if cached is not None and stamp == cached[1]:
                return list(cached[2])
            self._rediscover()
            started, stamp = time.monotonic(), self._stamp()  # before reading: a change meanwhile shows next time
            out = []
            for rid, f in self._ids.items():
                if not f.path.exists():
                    continue
                out.append(self.get(rid).summary)
            self._runs_cache = (started, stamp, out)
            return list(out)

    def get(self, run_id: str) -> RunIndex:
        """The refreshed index of ``run_id``; KeyError for an id that names no discovered run."""
        with self._lock:
            if run_id not in self._ids:
                self._rediscover()
            f = self._ids[run_id]
            idx = self._indexes.get(run_id)
            if idx is None:
                idx = self._indexes[run_id] = RunIndex(
                    run_id, f.kind, f.path, f.name, background_taxonomy=self.background_taxonomy, root=f.root
                )
            else:
                idx.refresh()
            return idx
