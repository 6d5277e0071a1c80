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
that export listed are replaced and nothing else is touched. ``DIR`` may not lie inside the run's
directory (the viewer never writes under a run), and no file or folder of the bundle may be a
symlink (nothing is written through one to outside ``DIR``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from shopping_companion.errors import ConfigError
from shopping_companion.viewer.app import STATIC_DIR, Pages, jsonable, row_json
from shopping_companion.viewer.discovery import RunCatalog
from shopping_companion.viewer.index import RunIndex
from shopping_companion.viewer.links import BundleLinks
from shopping_companion.viewer.models import MAX_LIMIT, EpisodeRow

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


#: The entries of a bundle directory an export writes (checked for symlinks before anything is written).
_BUNDLE_ENTRIES = ("index.html", MARKER, "episodes", "static")


def _check_placement(out: Path, run_dir: Path) -> None:
    """Raises :class:`ConfigError` naming ``out`` when it is ``run_dir`` or inside it (after
    resolving symlinks), or when an entry of the bundle in it (``index.html``, the marker,
    ``episodes/``, ``static/`` or a file in those two folders) is a symlink. Writes nothing."""
    root, run_root = out.resolve(), run_dir.resolve()
    if root == run_root or root.is_relative_to(run_root):
        raise ConfigError(
            f"--export {out}: is inside the run's directory {run_dir}; the viewer never writes under a run: "
            "pass a directory outside it (nothing was written)"
        )
    for name in _BUNDLE_ENTRIES:
        entry = out / name
        links = [entry] if entry.is_symlink() else []
        if name in ("episodes", "static") and not links and entry.is_dir():
            links = [p for p in entry.iterdir() if p.is_symlink()]
        if links:
            raise ConfigError(
                f"--export {out}: {links[0]} is a symlink; an export writes only plain files and folders inside "
                "DIR: remove the link or pass a new directory (nothing was written)"
            )


def _write_bytes(path: Path, data: bytes, written: list[str], out: Path) -> None:
    """``data`` into ``path`` (a file under ``out``), never through a symlink: the folders between
    ``out`` and ``path`` must be real ones and ``path`` is opened with ``O_NOFOLLOW`` (a link made
    after the check fails with ``OSError``, ELOOP). Appends ``path`` relative to ``out`` to ``written``."""
    rel = path.relative_to(out)
    folder = out
    for part in rel.parts[:-1]:
        folder = folder / part
        if folder.is_symlink():
            raise ConfigError(f"--export {out}: {folder} is a symlink; an export does not write through links")
        folder.mkdir(exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    written.append(rel.as_posix())


def _write(path: Path, text: str, written: list[str], out: Path) -> None:
    _write_bytes(path, text.encode("utf-8"), written, out)


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
    (naming it: a file, a non-empty directory that is not an export, a directory inside the run's
    directory, or one whose bundle entries are symlinks); ``OSError`` when writing fails."""
    try:
        index = catalog.get(run_id)
    except KeyError:
        known = ", ".join(s.run_id for s in catalog.runs()) or "(none)"
        raise ConfigError(f"--export: no run {run_id!r}; runs found: {known}") from None
    _check_placement(out, index.run_dir)
    previous = _check_out_dir(out)
    for f in previous:
        (out / f).unlink(missing_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    exported = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    written: list[str] = []

    def marker(files: list[str]) -> None:
        data = {"format": 1, "run_id": run_id, "exported": exported, "files": files}
        _write(out / MARKER, json.dumps(data, indent=1), [], out)

    marker(previous)  # a bundle cut short by a crash is still recognised as one next time
    index.refresh()
    summary = index.summary
    pages = Pages()
    for name in _STATIC_FILES:
        _write_bytes(out / "static" / name, (STATIC_DIR / name).read_bytes(), written, out)
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
