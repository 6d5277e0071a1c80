"""``shopcomp view --export DIR RUN``: one run as a static, self-contained HTML bundle
(docs/viewer.md).

The bundle opens from ``file://`` with no server::

    DIR/index.html                 the run's summary and every episode row; filters run in the page
                                   over the rows embedded as JSON (no requests)
    DIR/episodes/<line>.html       one page per line of the results file (the server's episode page)
    DIR/static/viewer.css, .js     the viewer's stylesheet and script (copied)
    DIR/.shopcomp-view-export      marker: JSON {"format", "run_id", "exported", "files"}

Every link is relative. Texts are cut as on the server (:data:`~shopping_companion.viewer.app.RESULT_CAP`
characters each); a bundle has no "full text" links (the page says the rest is in the run's file).
A non-empty ``DIR`` is only written when it holds a previous export (the marker); then the files
that export listed are replaced and nothing else is touched.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from shopping_companion.errors import ConfigError
from shopping_companion.viewer.app import STATIC_DIR, BundleLinks, Pages, jsonable, row_json
from shopping_companion.viewer.store import MAX_LIMIT, EpisodeRow, RunCatalog, RunIndex

__all__ = ["MARKER", "ExportReport", "export_run"]

#: The marker file that makes a directory a previous export (safe to overwrite).
MARKER = ".shopcomp-view-export"
_STATIC_FILES = ("viewer.css", "viewer.js")


@dataclass
class ExportReport:
    """What :func:`export_run` wrote: ``out`` (the bundle's directory), ``index`` (its
    index.html), ``n_episodes`` (episode pages written), ``n_failed`` (pages that show an error
    box because their data could not be rendered)."""

    out: Path
    index: Path
    n_episodes: int
    n_failed: int


def _check_out_dir(out: Path) -> list[str]:
    """The files a previous export in ``out`` listed (``[]`` for a new or empty directory).
    Raises :class:`ConfigError` naming ``out`` when it is a file, or non-empty and not an export."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--export {out}: exists and is not a directory; pass a new or empty directory")
    if not out.exists() or not any(out.iterdir()):
        return []
    marker = out / MARKER
    if not marker.is_file():
        raise ConfigError(
            f"--export {out}: the directory is not empty and holds no previous export ({MARKER} is missing); "
            "pass a new or empty directory (nothing was written)"
        )
    try:
        data = json.loads(marker.read_text(encoding="utf-8"))
        files = [str(f) for f in data.get("files", [])]
    except (OSError, ValueError, AttributeError) as e:
        raise ConfigError(
            f"--export {out}: the export marker {marker} is unreadable ({e}); remove the directory"
        ) from e
    root = out.resolve()
    safe = []
    for f in files:  # only paths inside the bundle, as an export writes them
        p = (out / f).resolve()
        if p.is_relative_to(root) and p != root and not Path(f).is_absolute():
            safe.append(f)
    return safe


def _write(path: Path, text: str, written: list[str], out: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    written.append(path.relative_to(out).as_posix())


def _all_rows(index: RunIndex) -> list[EpisodeRow]:
    """Every row of the run in file order: superseded attempts and a torn last line included."""
    rows: list[EpisodeRow] = []
    while True:
        page = index.query(include_superseded=True, offset=len(rows), limit=MAX_LIMIT)
        rows += page.rows
        if not page.rows or len(rows) >= page.total:
            return rows


def export_run(
    catalog: RunCatalog, run_id: str, out: Path, *, progress: Callable[[int, int], None] | None = None
) -> ExportReport:
    """Write run ``run_id`` of ``catalog`` as a static bundle in ``out`` (layout: module docstring).

    ``progress(done, total)`` is called after each episode page. Raises :class:`ConfigError`
    when ``run_id`` is not in the catalog (naming the known ids) or ``out`` cannot be used
    (naming it); ``OSError`` when writing fails."""
    try:
        index = catalog.get(run_id)
    except KeyError:
        known = ", ".join(s.run_id for s in catalog.runs()) or "(none)"
        raise ConfigError(f"--export: no run {run_id!r}; runs found: {known}") from None
    previous = _check_out_dir(out)
    for f in previous:
        (out / f).unlink(missing_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    exported = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    written: list[str] = []

    def marker(files: list[str]) -> None:
        data = {"format": 1, "run_id": run_id, "exported": exported, "files": files}
        (out / MARKER).write_text(json.dumps(data, indent=1), encoding="utf-8")

    marker(previous)  # a bundle cut short by a crash is still recognised as one next time
    index.refresh()
    summary = index.summary
    pages = Pages()
    for name in _STATIC_FILES:
        (out / "static").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(STATIC_DIR / name, out / "static" / name)
        written.append(f"static/{name}")
    rows = _all_rows(index)
    episode_links = BundleLinks("../")
    n_failed = 0
    for i, row in enumerate(rows, 1):
        try:
            html = pages.episode(episode_links, summary, index.episode(row.line))
        except Exception as e:  # noqa: BLE001 - one bad line must not stop the bundle
            n_failed += 1
            html = pages.error(episode_links, 500, "Could not render", f"line {row.line}: {type(e).__name__}: {e}")
        _write(out / "episodes" / f"{row.line}.html", html, written, out)
        if progress is not None:
            progress(i, len(rows))
    index_html = pages.render(
        "export_index.html",
        BundleLinks(""),
        summary=summary,
        rows=rows,
        rows_data=[row_json(r) for r in rows],
        facets=jsonable(index.facets()),
        exported=exported,
    )
    _write(out / "index.html", index_html, written, out)
    marker(written)
    return ExportReport(out=out, index=out / "index.html", n_episodes=len(rows), n_failed=n_failed)
