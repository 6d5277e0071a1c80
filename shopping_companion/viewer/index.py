"""The index of one run file (:class:`RunIndex`): its rows, its summary, its episodes.

Indexing: every line is parsed once with ``json.loads`` into a light
:class:`~shopping_companion.viewer.models.EpisodeRow` (:mod:`~shopping_companion.viewer.rows`)
plus its byte offset, read with :func:`shopping_companion.runs.read_lines`; later reads are
incremental (only bytes appended after the last complete line are read; an unterminated last line
is ``torn`` until it is completed; a file that shrank, was replaced (another inode) or was
rewritten in place is indexed again; a run file that is not a regular file or resolves outside
the directory its run was found in is never read: :attr:`~shopping_companion.viewer.models.RunSummary.problem` says
why). Pydantic parses only the one line an episode page opens (:meth:`RunIndex.episode`), seeking to its offset.
Nothing under a run is ever written, locked or moved.

Line status: ``ok`` (a record of the run's kind), ``error`` (an ``EpisodeResult`` with ``error``
set: a backend, judge or episode error, never scored), ``unreadable`` (not JSON), ``foreign``
(JSON but not a record of the kind: the structural check at indexing, or the full pydantic
validation when the line is opened, names the problem), ``torn`` (the last line, no newline yet),
``superseded`` (an attempt that a later line of the same ``benchmark.report.result_key`` replaced,
chosen as :func:`~shopping_companion.benchmark.report.final_results` does; hidden unless asked).

Metrics of a run (:class:`~shopping_companion.viewer.models.RunSummary`) are over the final, scored episodes
(:func:`shopping_companion.benchmark.metrics.scored`), computed with
:func:`~shopping_companion.benchmark.metrics.acc_succ` and
:func:`~shopping_companion.benchmark.metrics.pass_k_table`. Taxonomy classes of failures:
:mod:`~shopping_companion.viewer.failure_classes` (a page classifies its own rows within
:data:`PAGE_CLASSIFY_BUDGET_S`; :attr:`~shopping_companion.viewer.models.Page.unclassified` says how many are still
waiting).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from shopping_companion.benchmark.report import result_key
from shopping_companion.runs import read_lines
from shopping_companion.types import EpisodeResult, Task
from shopping_companion.viewer.benchmarks import (
    declared_checkpoint,
    find_benchmark,
    load_tasks,
    policy_step,
    run_config,
)
from shopping_companion.viewer.episodes import bad_view, dump_view, kept_view, result_view
from shopping_companion.viewer.failure_classes import FailureClasses
from shopping_companion.viewer.files import RunUnreadableError, display_path, is_live, open_regular
from shopping_companion.viewer.models import EpisodeRow, EpisodeView, Page, RowStatus, RunKind, RunSummary
from shopping_companion.viewer.rows import (
    ROW_BUILDERS,
    annotate_task,
    check_query,
    row_facets,
    run_metrics,
    select_rows,
    stand_in,
)
from shopping_companion.viewer.values import short_error, validation_problem

__all__ = ["PAGE_CLASSIFY_BUDGET_S", "RunIndex"]

#: Seconds a page request may spend classifying its own rows' failures (the rest: in the background).
PAGE_CLASSIFY_BUDGET_S = 0.5
_CHUNK = 16 << 20
_ANCHOR_BYTES = 64 << 10


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="seconds")


def _digest(b: bytes) -> bytes:
    return hashlib.blake2b(b, digest_size=16).digest()


class RunIndex:
    """The index of one run file (see the module docstring). Thread-safe.

    Built by :class:`~shopping_companion.viewer.discovery.RunCatalog`; ``path`` is the run file, ``run_dir`` its
    directory, ``root`` the resolved directory the run was found in (default: the resolved ``run_dir``): the run file
    and its side files (``taxonomy.jsonl``, ``config.yaml``, ``summary.json``) are read only while
    they are regular files whose real path lies inside it, so a symlink put in their place later
    is never followed out of it. Public counters for tests and diagnostics: ``end_offset`` (bytes
    up to the end of the last complete line indexed) and ``last_read`` (``(start, stop)`` byte
    range read by the last :meth:`refresh` that read anything).
    """

    def __init__(
        self,
        run_id: str,
        kind: RunKind,
        path: Path,
        name: str,
        *,
        background_taxonomy: bool = True,
        root: Path | None = None,
    ) -> None:
        self.run_id = run_id
        self.background_taxonomy = background_taxonomy
        self.kind: RunKind = kind
        self.path = Path(path)
        self.run_dir = self.path.parent
        self.root = Path(root) if root is not None else Path(os.path.realpath(self.run_dir))
        self.name = name
        self._lock = threading.RLock()
        self._tasks: dict[str, Task] | None = None
        self._tasks_sha256: str | None = None
        self._bench_dir: Path | None = None
        self._bench_declared: str | None = None
        self._checkpoint: tuple[str | None, int | None] = (None, None)
        self._summary: RunSummary | None = None
        self._classes = FailureClasses(
            self,
            lock=self._lock,
            taxonomy_file=self.run_dir / "taxonomy.jsonl" if kind == "eval" else None,
            root=self.root,
            background=background_taxonomy,
            thread_name=f"viewer-taxonomy:{run_id}",
        )
        self._reset()
        self.refresh()

    # ------------------------------------------------------------------ indexing

    def _reset(self) -> None:
        self._classes.forget()
        self._rows: list[EpisodeRow] = []
        self._by_line: dict[int, EpisodeRow] = {}
        self._loc: dict[int, tuple[int, int]] = {}
        self._torn: EpisodeRow | None = None
        self._torn_loc: tuple[int, int] | None = None
        self._final: dict[tuple, int] = {}
        self.end_offset = 0
        self.last_read: tuple[int, int] | None = None
        self._next_line = 1
        self._ident: tuple[int, int] | None = None
        self._seen: tuple[int, int] | None = None  # (size, mtime_ns) at the last read
        self._mtime = 0.0
        self._summary = None
        self._problem: str | None = None  # why the run file cannot be read (None: it can)
        # (offset, length, digest of the first _ANCHOR_BYTES) of the first and the last indexed line
        self._anchors: list[tuple[int, int, bytes] | None] = [None, None]

    def _ensure_tasks(self) -> dict[str, Task]:
        if self._tasks is None:
            config = run_config(self.run_dir, self.root)
            self._checkpoint = declared_checkpoint(config)
            self._bench_dir, self._bench_declared = find_benchmark(self.run_dir, self.root, config)
            if self._bench_dir is not None:
                self._tasks, self._tasks_sha256 = load_tasks(self._bench_dir)
            else:
                self._tasks, self._tasks_sha256 = {}, None
        return self._tasks

    @property
    def tasks_digest(self) -> str | None:
        """SHA-256 of the benchmark's ``tasks.jsonl`` as it was loaded (None: no benchmark read)."""
        with self._lock:
            self._ensure_tasks()
            return self._tasks_sha256

    @property
    def tasks(self) -> dict[str, Task]:
        """``task_id -> Task`` of the run's benchmark (empty when it cannot be found)."""
        with self._lock:
            return self._ensure_tasks()

    @property
    def benchmark_dir(self) -> Path | None:
        """The benchmark directory found for the run (None: not found)."""
        with self._lock:
            self._ensure_tasks()
            return self._bench_dir

    def refresh(self) -> bool:
        """Read what was appended since the last call (complete lines; an unterminated last line
        becomes a ``torn`` row); index from scratch when the file shrank or is another file
        (inode), or when the first or last indexed line no longer holds the bytes it was indexed
        from (rewritten in place, even if longer); reload ``taxonomy.jsonl`` when it changed.
        Returns True when anything changed. A missing file is an empty run; a file that cannot be
        read (not a regular file, outside :attr:`root`, open failed) is an empty run whose
        :attr:`~shopping_companion.viewer.models.RunSummary.problem` says why. Never raises for the file's contents."""
        with self._lock:
            changed = self._classes.reload_file(self._rows)
            if changed:
                self._summary = None
            try:
                st = os.stat(self.path)
            except OSError:
                if self._rows or self._torn is not None or self._problem is not None:
                    self._reset()
                    return True
                return changed
            ident = (st.st_dev, st.st_ino)
            if self._ident is not None and (ident != self._ident or st.st_size < self.end_offset):
                self._reset()
                changed = True
            if self._seen == (st.st_size, st.st_mtime_ns) and self._ident == ident:
                return changed
            if self._ident is not None and not self._anchors_hold():
                self._reset()
            self._read(ident)
            self._seen = (st.st_size, st.st_mtime_ns)
            self._mtime = st.st_mtime
            self._summary = None
            self._classes.kick()
            return True

    def _anchors_hold(self) -> bool:
        """The first and the last indexed line still start with the bytes they were indexed from
        and still end in a newline where they ended (a rewrite in place moved them otherwise).
        True when there is nothing to check or the file cannot be opened (:meth:`_read` says so)."""
        checks = [a for a in self._anchors if a is not None]
        if not checks:
            return True
        try:
            with open_regular(self.path, self.root) as f:
                for off, n, digest in checks:
                    f.seek(off)
                    head = f.read(min(n, _ANCHOR_BYTES))
                    f.seek(off + n)
                    if _digest(head) != digest or f.read(1) != b"\n":
                        return False
        except (RunUnreadableError, OSError):
            return True
        return True

    def _set_anchor(self, which: int, offset: int, raw: bytes) -> None:
        self._anchors[which] = (offset, len(raw), _digest(raw[:_ANCHOR_BYTES]))

    def _unreadable(self, problem: str, ident: tuple[int, int]) -> None:
        """Forget every row: the run file cannot be read (``problem`` says why)."""
        self._reset()
        self._problem = problem[:500]
        self._ident = ident

    def _read(self, ident: tuple[int, int]) -> None:
        tasks = self._ensure_tasks()
        build = ROW_BUILDERS[self.kind]
        start = self.end_offset
        try:
            f = open_regular(self.path, self.root)
        except RunUnreadableError as e:
            if isinstance(e.__cause__, FileNotFoundError):
                return  # removed between stat and open: the next refresh sees it missing
            self._unreadable(str(e), ident)
            return
        self._problem = None
        with f:
            fst = os.fstat(f.fileno())
            if (fst.st_dev, fst.st_ino) != ident and self._ident is not None:
                self._reset()  # replaced between stat and open
                start = 0
            self._ident = (fst.st_dev, fst.st_ino)
            self._torn, self._torn_loc = None, None
            stop = start  # the end of the last line read, an unterminated one included
            last: tuple[int, bytes] | None = None
            try:
                for offset, raw, complete in read_lines(f, start, chunk=_CHUNK):
                    stop = offset + len(raw) + complete
                    if not complete:
                        self._set_torn(offset, raw)
                        continue
                    if raw.strip():
                        self._add(self._next_line, raw, offset, build, tasks)
                        last = (offset, raw)
                        if self._anchors[0] is None:
                            self._set_anchor(0, offset, raw)
                    self._next_line += 1
                    self.end_offset = stop  # per line: an error later never adds a line twice
            except OSError as e:
                where = f"read failed at byte {self.end_offset}"
                self._problem = f"{display_path(self.path)}: {where} ({e.strerror or e})"[:500]
            finally:
                if last is not None:
                    self._set_anchor(1, *last)
            self.last_read = (start, stop)

    def _set_torn(self, offset: int, raw: bytes) -> None:
        """The unterminated last line at ``offset``: a ``torn`` row unless it is blank."""
        if raw.strip():
            self._torn = EpisodeRow(
                line=self._next_line,
                status="torn",
                problem=f"incomplete last line ({len(raw)} bytes, no newline yet): still being "
                "written, or a write cut short by a crash",
            )
            self._torn_loc = (offset, len(raw))

    def _add(self, line: int, raw: bytes, offset: int, build: Any, tasks: dict[str, Task]) -> None:
        try:
            d = json.loads(raw)
        except (ValueError, RecursionError) as e:
            row = EpisodeRow(line=line, status="unreadable", problem=f"not JSON: {short_error(e)}")
        else:
            try:
                row = build(line, d)
            except Exception as e:  # noqa: BLE001 - a line the builder cannot read is foreign, never a crash
                row = EpisodeRow(
                    line=line, status="foreign", problem=f"not a record of this run: {short_error(e, 160)}"
                )
            if row.status in ("ok", "error"):
                annotate_task(row, tasks.get(row.task_id or ""))
                if self.kind in ("eval", "sft_rollouts"):
                    self._supersede(row)
                    if row.scored and row.success is False:
                        self._classes.note(row)
        self._rows.append(row)
        self._by_line[line] = row
        self._loc[line] = (offset, len(raw))

    def _supersede(self, row: EpisodeRow) -> None:
        """Apply :func:`~shopping_companion.benchmark.report.final_results`' choice incrementally:
        per result key the last line without an error, else the last errored one."""
        key = result_key(stand_in(row))
        prev_line = self._final.get(key)
        if prev_line is None:
            self._final[key] = row.line
            return
        prev = self._by_line[prev_line]
        if row.status == "ok" or prev.status != "ok":
            self._final[key] = row.line
            self._mark_superseded(prev, row.line)
        else:
            self._mark_superseded(row, prev_line)

    def _mark_superseded(self, row: EpisodeRow, by: int) -> None:
        row.superseded_by = by
        row.problem = f"superseded by line {by}" + (f" (this attempt: {row.problem})" if row.problem else "")
        row.status = "superseded"
        self._classes.discard(row.line)

    @property
    def unclassified(self) -> int:
        """Scored failures whose taxonomy class is not known yet (the background classifier works
        on them); 0 once every failure is classified."""
        with self._lock:
            return len(self._classes.pending)

    def classify_pending(self) -> int:
        """Classify every scored failure whose taxonomy class is not known yet, now (blocking);
        returns how many were classified. (A background worker does the same when
        ``background_taxonomy`` is on.)"""
        with self._lock:
            pending = sorted(self._classes.pending)
            self._classes.resolve(pending)
            return len(pending)

    # ------------------------------------------------------------------ reading one line

    def raw(self, line: int) -> bytes:
        """The stored bytes of result line ``line`` (1-based), exactly as in the file (no newline);
        the torn last line too. Raises ``KeyError`` for a line that does not exist and
        :class:`~shopping_companion.viewer.files.RunUnreadableError` (one line: path and reason) when the run file
        cannot be read now or is no longer the file that was indexed; never ``OSError``."""
        with self._lock:
            return self._raw(line)

    def _raw(self, line: int) -> bytes:
        if self._problem is not None:
            raise RunUnreadableError(self._problem)
        if self._torn is not None and line == self._torn.line and self._torn_loc is not None:
            off, n = self._torn_loc
        elif line in self._loc:
            off, n = self._loc[line]
        else:
            raise KeyError(line)
        try:
            with open_regular(self.path, self.root) as f:
                fst = os.fstat(f.fileno())
                if self._ident is not None and (fst.st_dev, fst.st_ino) != self._ident:
                    raise RunUnreadableError(
                        f"{display_path(self.path)}: replaced since it was indexed; reload the page"
                    )
                f.seek(off)
                return f.read(n)
        except OSError as e:
            raise RunUnreadableError(f"{display_path(self.path)}: cannot be read ({e.strerror or e})") from None

    def _load_result(self, line: int) -> EpisodeResult | None:
        """The ``EpisodeResult`` of ``line`` (pydantic), or None: the row becomes ``foreign``."""
        row = self._by_line[line]
        try:
            return EpisodeResult.model_validate_json(self._raw(line))
        except RunUnreadableError:
            raise
        except ValidationError as e:
            self._set_bad(row, "foreign", validation_problem("EpisodeResult", e))
        except (ValueError, OSError) as e:
            self._set_bad(row, "unreadable", short_error(e))
        return None

    def _set_bad(self, row: EpisodeRow, status: RowStatus, problem: str) -> None:
        row.status, row.problem, row.scored = status, problem, False
        self._summary = None

    def mark_foreign(self, line: int, problem: str) -> None:
        """Line ``line`` turned out not to be a record of the run (``problem`` says why, e.g. the
        full validation of a failure being classified): status ``foreign``, not scored."""
        with self._lock:
            self._set_bad(self._by_line[line], "foreign", problem)

    # ------------------------------------------------------------------ public queries

    @property
    def summary(self) -> RunSummary:
        """The run's :class:`~shopping_companion.viewer.models.RunSummary` as of the last :meth:`refresh` (``live``
        is current)."""
        with self._lock:
            if self._summary is None:
                self._summary = self._summarize()
            s = self._summary
            s.live = is_live(self.path)
            return s

    def _summarize(self) -> RunSummary:
        self._ensure_tasks()
        rows = self._rows
        final = [r for r in rows if r.status in ("ok", "error")]
        scored = [r for r in final if r.scored]
        acc, succ, pass_hat, components = run_metrics(self.kind, scored)
        policies = Counter(r.policy for r in final if r.policy)
        policy = policies.most_common(1)[0][0] if policies else None
        bench = self._bench_declared or (display_path(self._bench_dir) if self._bench_dir else None)
        ckpt, ckpt_step = self._checkpoint
        if ckpt is not None and policy is not None and ckpt in policy:
            ckpt = None  # the policy name says it already
        step = policy_step(policy)
        if step is None:
            step = int(self.path.stem) if self.kind == "grpo_val" and self.path.stem.isdigit() else ckpt_step
        return RunSummary(
            run_id=self.run_id,
            kind=self.kind,
            name=self.name,
            path=display_path(self.path),
            policy=policy,
            benchmark=bench,
            strategies=sorted({r.strategy for r in final if r.strategy}),
            trials=max((r.trial for r in final if r.trial is not None), default=-1) + 1,
            n_lines=len(rows) + (1 if self._torn is not None else 0),
            n_episodes=len(final),
            n_scored=len(scored),
            n_errors=sum(1 for r in final if r.status == "error"),
            n_unreadable=sum(1 for r in rows if r.status in ("unreadable", "foreign")),
            acc=acc,
            succ=succ,
            pass_hat_k=pass_hat,
            components=components,
            updated=_iso(self._mtime) if self._mtime else "",
            live=False,
            n_foreign=sum(1 for r in rows if r.status == "foreign"),
            n_superseded=sum(1 for r in rows if r.status == "superseded"),
            torn=self._torn is not None,
            benchmark_found=self._bench_dir is not None,
            benchmark_used=str(Path(self._bench_dir).resolve()) if self._bench_dir is not None else None,
            problem=self._problem,
            step=step,
            checkpoint=ckpt,
        )

    def _all_rows(self) -> list[EpisodeRow]:
        return self._rows + ([self._torn] if self._torn is not None else [])

    def query(
        self,
        *,
        failed_only: bool = False,
        task_type: str | None = None,
        taxonomy: str | None = None,
        strategy: str | None = None,
        q: str | None = None,
        sort: str = "line",
        ability: str | None = None,
        stress: str | None = None,
        desc: bool = False,
        offset: int = 0,
        limit: int = 50,
        include_superseded: bool = False,
        status: str | None = None,
    ) -> Page:
        """Filter, sort and page the rows (in memory; nothing is read from disk).

        ``failed_only``: scored episodes that did not succeed. ``task_type`` / ``taxonomy`` /
        ``strategy`` / ``stress`` / ``status``: exact values (see :meth:`facets`); ``ability``: one of
        the task's abilities; the taxonomy filter and sort
        see the classes known so far (``Page.unclassified`` failures are still being classified). ``q``:
        case-insensitive substring of the instruction or task id. ``sort``: one of
        :data:`~shopping_companion.viewer.models.SORT_FIELDS` (None values last in either direction). ``offset`` >=
        0, ``limit`` in 1..:data:`~shopping_companion.viewer.models.MAX_LIMIT`. ``include_superseded``: also rows of
        replaced attempts (always shown when ``status`` is ``superseded``). Raises ``ValueError`` naming the
        parameter and the allowed values.
        """
        check_query(sort=sort, offset=offset, limit=limit, status=status)
        with self._lock:
            out = select_rows(
                self._all_rows(),
                failed_only=failed_only,
                task_type=task_type,
                taxonomy=taxonomy,
                strategy=strategy,
                ability=ability,
                stress=stress,
                q=q,
                sort=sort,
                desc=desc,
                include_superseded=include_superseded,
                status=status,
            )
            page = out[offset : offset + limit]
            self._classes.resolve((r.line for r in page), budget_s=PAGE_CLASSIFY_BUDGET_S)
            self._classes.kick()
            return Page(rows=page, total=len(out), offset=offset, limit=limit, unclassified=len(self._classes.pending))

    def rows_after(self, line: int) -> list[EpisodeRow]:
        """Rows of complete lines after ``line`` (any status), in file order: what a live page
        appends. Call :meth:`refresh` first to see new lines."""
        with self._lock:
            rows = [r for r in self._rows if r.line > line]
            self._classes.resolve((r.line for r in rows), budget_s=PAGE_CLASSIFY_BUDGET_S)
            return rows

    def row(self, line: int) -> EpisodeRow:
        """The row of ``line``; KeyError when no row has that line number."""
        with self._lock:
            if self._torn is not None and line == self._torn.line:
                return self._torn
            return self._by_line[line]

    @property
    def last_line(self) -> int:
        """The line number of the last complete line indexed (0 when none)."""
        with self._lock:
            return self._rows[-1].line if self._rows else 0

    def facets(self) -> dict[str, list[str]]:
        """Values for the filter menus (:func:`~shopping_companion.viewer.rows.row_facets`)."""
        with self._lock:
            return row_facets(self._all_rows())

    def episode(self, line: int) -> EpisodeView:
        """The annotated episode of ``line`` (:mod:`~shopping_companion.viewer.episodes`). KeyError
        for a line that has no row (blank, or past the end);
        :class:`~shopping_companion.viewer.files.RunUnreadableError` when the run file cannot be read now (never
        ``OSError``). Bad lines give a view with ``raw`` and no stages."""
        with self._lock:
            if self._problem is not None:
                raise RunUnreadableError(self._problem)
            row = self.row(line)
            tasks = self._ensure_tasks()
            if row.status in ("unreadable", "foreign", "torn"):
                return self._bad_view(row)
            if self.kind in ("eval", "sft_rollouts"):
                res = self._load_result(line)
                if res is None:
                    return self._bad_view(row)
                if row.scored and row.success is False:
                    self._classes.resolve([line])
                return result_view(row, res, tasks.get(res.task_id), self._classes.detail.get(line))
            raw = self._raw(line)
            if self.kind == "sft_kept":
                from shopping_companion.sft.collect import KeptStage

                try:
                    kept = KeptStage.model_validate_json(raw)
                except ValidationError as e:
                    row.status, row.problem = "foreign", validation_problem("KeptStage", e)
                    return self._bad_view(row)
                return kept_view(row, kept, tasks.get(kept.task_id), json.loads(raw))
            return dump_view(row, json.loads(raw), tasks)

    def _bad_view(self, row: EpisodeRow) -> EpisodeView:
        try:
            data = self._raw(row.line)
        except (OSError, KeyError):
            data = None
        return bad_view(row, data)

    def final_rows(self) -> list[EpisodeRow]:
        """The final, scored episode rows (status ``ok``, counted by the metrics), in file order."""
        with self._lock:
            return [r for r in self._rows if r.status == "ok" and r.scored]

    def __len__(self) -> int:
        with self._lock:
            return len(self._rows) + (1 if self._torn is not None else 0)
