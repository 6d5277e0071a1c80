"""Reading the files of a run safely: only regular files (never a FIFO or a device, never
blocking), only inside the directory a run was found in, side files only up to a size cap.

Every file of a run the viewer opens goes through :func:`open_regular`; nothing here writes,
locks or moves a file.
"""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path
from typing import Any

__all__ = [
    "SIDE_FILE_CAP",
    "RunUnreadableError",
    "open_regular",
    "read_side",
    "first_json_line",
    "display_path",
    "is_locked",
    "LIVE_WINDOW_S",
    "is_live",
]

#: Largest size in bytes of a side file of a run that is read whole (``taxonomy.jsonl``,
#: ``config.yaml``, ``summary.json``); a larger one is ignored.
SIDE_FILE_CAP = 64 << 20
#: Largest size in bytes of a benchmark's ``tasks.jsonl``; a larger one counts as no benchmark.
TASKS_FILE_CAP = 512 << 20
#: A run whose file changed within this many seconds is ``live`` (unless its summary.json is newer).
LIVE_WINDOW_S = 120.0
#: Bytes of a file's first line read to tell its kind (a longer first line is not a JSON object).
_SNIFF_CAP = 32 << 20


class RunUnreadableError(ValueError):
    """A run file, or a line of it, cannot be read now: it is not a regular file (a directory, a
    FIFO, a device), it resolves outside the directory its run was found in (a symlink put in its
    place), or opening or reading it failed. The message is one line naming the path and why.
    :meth:`~shopping_companion.viewer.index.RunIndex.raw` and
    :meth:`~shopping_companion.viewer.index.RunIndex.episode` raise it;
    :attr:`~shopping_companion.viewer.models.RunSummary.problem` says the same on the runs page."""


def _file_type(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a plain file"


def _real_path(fd: int, path: Path) -> Path:
    """Where the open descriptor ``fd`` really points (``/proc/self/fd``; else ``path`` resolved)."""
    try:
        return Path(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:
        return Path(os.path.realpath(path))


def open_regular(path: Path, root: Path | None, cap: int | None = None) -> Any:
    """``path`` opened for binary reading, only if it is a regular file of at most ``cap`` bytes
    (None: any size) whose real path lies inside the resolved directory ``root`` (None: anywhere).
    Never blocks on a FIFO and never opens a device. Raises :class:`RunUnreadableError` naming the
    path and the reason (a missing file too: ``FileNotFoundError`` is its ``__cause__``)."""
    shown = display_path(path)
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            raise RunUnreadableError(f"{shown}: {_file_type(st.st_mode)}, not a regular file; not read")
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise RunUnreadableError(f"{shown}: cannot be read ({e.strerror or type(e).__name__})") from e
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise RunUnreadableError(f"{shown}: {_file_type(st.st_mode)}, not a regular file; not read")
        if cap is not None and st.st_size > cap:
            raise RunUnreadableError(f"{shown}: {st.st_size} bytes, more than the {cap} allowed; not read")
        if root is not None:
            real = _real_path(fd, path)
            if not real.is_relative_to(root):
                raise RunUnreadableError(f"{shown}: resolves to {real}, outside {root}; not read")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_side(path: Path, root: Path | None, cap: int = SIDE_FILE_CAP) -> bytes | None:
    """The bytes of a side file read whole (:func:`open_regular` rules), or None when it is
    missing or refused."""
    try:
        with open_regular(path, root, cap) as f:
            return f.read(cap + 1)[:cap]
    except (RunUnreadableError, OSError):
        return None


def first_json_line(p: Path, root: Path | None) -> Any:
    """The first non-blank line of ``p`` parsed as JSON (at most :data:`_SNIFF_CAP` bytes read);
    None when there is none, it is not JSON, or the file cannot be read."""
    try:
        with open_regular(p, root) as f:
            budget = _SNIFF_CAP
            while budget > 0:
                raw = f.readline(budget)
                if not raw:
                    return None
                budget -= len(raw)
                if raw.strip():
                    return json.loads(raw) if raw.endswith(b"\n") or budget > 0 else None
    except (RunUnreadableError, OSError, ValueError, RecursionError):
        return None
    return None


# --------------------------------------------------------------------------- small helpers


def display_path(p: Path) -> str:
    try:
        return Path(os.path.relpath(p)).as_posix() if p.is_relative_to(Path.cwd()) else str(p)
    except (OSError, ValueError):
        return str(p)


def is_locked(st: os.stat_result) -> bool:
    """A lock is held on the file (``/proc/locks``; read without taking a lock, so a starting
    writer is never refused because of the viewer). False where ``/proc/locks`` is absent."""
    try:
        text = Path("/proc/locks").read_text()
    except OSError:
        return False
    want = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    return any(len(p) > 5 and p[5] == want for p in (ln.split() for ln in text.splitlines()))


def is_live(path: Path) -> bool:
    """A writer holds a lock on the run file ``path``, or the file changed in the last
    :data:`LIVE_WINDOW_S` seconds and no ``summary.json`` beside it is as new or newer (a run
    writes its summary when it ends, so a finished run is not live)."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    if time.time() - st.st_mtime < LIVE_WINDOW_S:
        try:
            finished = os.stat(path.parent / "summary.json").st_mtime_ns >= st.st_mtime_ns
        except OSError:
            finished = False
        if not finished:
            return True
    return is_locked(st)
