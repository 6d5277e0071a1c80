"""Run files: the append-only JSONL results of a run and the files next to it, handled once.

Every runner that appends one record per line (the evaluation runner's ``results.jsonl``, SFT
collection's ``rollouts.jsonl``, the personalization runner's ``dialogues.jsonl``) uses these:

- :func:`exclusive`: an exclusive, non-blocking ``flock`` on the results file *itself* (not on a
  side file that could be deleted), held while the run writes; :func:`check_still_ours` notices
  a results path deleted or replaced under the open file.
- :func:`repair_torn_tail`: before appending, an unterminated last line is either a complete valid
  record (kept, its newline added) or a write torn by a crash / ``kill -9`` (cut off, its bytes
  kept in ``<name>.torn``), so the next line never gets glued to a fragment.
- :func:`encode_verified_line` / :func:`append_line`: every line is encoded as UTF-8 JSON, read
  back before it is written, then written, flushed and ``fsync``'d in one piece.
- :func:`check_identity`: the run identity (``<stem>.identity.json``) refuses to mix results of
  a different configuration into one file; :func:`archive_stale` moves a stale run aside instead.
- :func:`scan_jsonl`: reading a JSONL file back, with the line numbers of unreadable lines;
  :func:`read_lines`: its lines with their byte offsets, from any offset on (the viewer's
  incremental index reads results files with it).
- :func:`append_error_log`: tracebacks of failures go to ``<stem>.errors.log``.
- :func:`write_lines_atomic` / :func:`write_text_atomic`: whole-file rewrites (temp file,
  ``fsync``, ``os.replace``) for files that are regenerated rather than appended to.
- :func:`file_sha256`: the hex SHA-256 of a file (benchmark manifests, downloads, provenance).

Errors raised: :class:`~shopping_companion.errors.RunLockedError`,
:class:`~shopping_companion.errors.RunFileReplacedError`,
:class:`~shopping_companion.errors.RunIdentityError` (a ``ConfigError``).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import threading
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, BinaryIO, Callable, Generic, Iterable, Iterator, TypeVar

from shopping_companion.errors import RunFileReplacedError, RunIdentityError, RunLockedError

__all__ = [
    "exclusive",
    "check_still_ours",
    "repair_torn_tail",
    "identity_path",
    "errors_log_path",
    "check_identity",
    "identity_changes",
    "archive_stale",
    "encode_verified_line",
    "append_line",
    "JsonlScan",
    "read_lines",
    "scan_jsonl",
    "append_error_log",
    "write_lines_atomic",
    "write_text_atomic",
    "read_json",
    "file_sha256",
]

logger = logging.getLogger(__name__)
R = TypeVar("R")
PathLike = str | os.PathLike[str]


# --------------------------------------------------------------------------- the lock


@contextmanager
def exclusive(path: PathLike, *, what: str = "evaluation", option: str = "--name") -> Iterator[BinaryIO]:
    """Open ``path`` for appending (binary, created if missing) and hold an exclusive ``flock`` on
    that file while the block runs; yields the open file (write lines with :func:`append_line`).

    ``what`` / ``option`` only word the error: the kind of run and the CLI option that picks
    another run. Raises :class:`RunLockedError` naming ``path`` when another process holds it.
    Interrupted (``KeyboardInterrupt``) while other threads of the process run, the lock is kept
    until the process exits: those threads may still write into the run.
    """
    p = Path(path)
    fh = open(p, "ab")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.close()
        raise RunLockedError(
            f"{p} is being written by another running {what} (it holds a lock on the file); "
            f"wait for it to finish or use another {option}"
        ) from None
    try:
        yield fh
    except KeyboardInterrupt:
        if threading.active_count() > 1:
            # worker threads may still be finishing an episode and writing: the lock stays held
            # until this process exits (the OS releases it), so a rerun cannot take the run over
            _HELD_UNTIL_EXIT.append(fh)
            raise
        _release(fh)
        raise
    except BaseException:
        _release(fh)
        raise
    else:
        _release(fh)


#: Lock files an interrupted process keeps until it exits (see :func:`exclusive`).
_HELD_UNTIL_EXIT: list[BinaryIO] = []


def _release(fh: BinaryIO) -> None:
    try:
        fcntl.flock(fh, fcntl.LOCK_UN)
    finally:
        fh.close()


def check_still_ours(path: PathLike, fh: Any) -> None:
    """Raise :class:`RunFileReplacedError` unless ``path`` is still the file ``fh`` has open (same
    device and inode): a deleted or replaced path would silently swallow every later line."""
    mine = os.fstat(fh.fileno())
    try:
        now = os.stat(path)
    except FileNotFoundError:
        now = None
    if now is None or (now.st_dev, now.st_ino) != (mine.st_dev, mine.st_ino):
        raise RunFileReplacedError(
            f"{path} was {'deleted' if now is None else 'replaced'} while this run was writing it; the run "
            "stopped so that no further result is lost (results written to the removed file are gone with it). "
            "Rerun the same command to resume from what the path holds now"
        )


# --------------------------------------------------------------------------- torn tails


def repair_torn_tail(path: PathLike, is_valid_line: Callable[[bytes], bool] | None = None) -> int:
    """Make an append-only JSONL file end with a newline; returns the number of bytes cut (0 if none).

    An unterminated last line for which ``is_valid_line(raw_bytes)`` is true (a complete record
    that only lacks its newline, e.g. after an editor save) is kept and terminated; any other one
    (``is_valid_line`` false or raising, or no validator given) is a torn write: it is cut off,
    its bytes are appended to ``<name>.torn`` and a warning is logged. Call it under the file's
    lock (:func:`exclusive`). A missing or empty file is left alone.
    """
    p = Path(path)
    if not p.is_file() or p.stat().st_size == 0:
        return 0
    with open(p, "rb+") as f:
        size = f.seek(0, os.SEEK_END)
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return 0
        keep, pos, block = 0, size, 1 << 16  # the start of the last line: scan backwards in blocks
        while pos > 0:
            start = max(0, pos - block)
            f.seek(start)
            i = f.read(pos - start).rfind(b"\n")
            if i >= 0:
                keep = start + i + 1
                break
            pos = start
        f.seek(keep)
        tail = f.read()
        try:
            valid = bool(is_valid_line(tail)) if is_valid_line is not None else False
        except Exception:  # noqa: BLE001 - torn, not JSON, not a record: cut it (kept aside)
            valid = False
        if valid:
            f.seek(0, os.SEEK_END)
            f.write(b"\n")
        else:
            with open(p.with_name(p.name + ".torn"), "ab") as side:
                side.write(tail + b"\n")
            logger.warning("%s: cut a torn last line of %d bytes (kept in %s.torn)", p, len(tail), p.name)
            f.truncate(keep)
        f.flush()
        os.fsync(f.fileno())
    return 0 if valid else len(tail)


# --------------------------------------------------------------------------- identity


def identity_path(results_path: PathLike) -> Path:
    """``<results stem>.identity.json`` next to the results file."""
    p = Path(results_path)
    return p.with_name(p.stem + ".identity.json")


def errors_log_path(results_path: PathLike) -> Path:
    """``<results stem>.errors.log`` next to the results file: tracebacks of failures."""
    p = Path(results_path)
    return p.with_name(p.stem + ".errors.log")


def _normalise(identity: dict[str, Any]) -> Any:
    """``identity`` as it reads back from its JSON file (keys sorted, non-JSON values as ``str``)."""
    return json.loads(json.dumps(identity, sort_keys=True, default=str))


_MISSING = object()


def identity_changes(old: Any, new: Any, prefix: str = "") -> list[str]:
    """What differs between two identities, as ``"dotted.key: old → new"`` lines, descending into
    nested mappings (so a changed sampling temperature reads
    ``config.backend.sampling.temperature: 0.6 → 0.7``, not the whole config twice); the
    ``config_sha256`` line comes last."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for k in sorted(set(old) | set(new), key=str):
            a, b = old.get(k, _MISSING), new.get(k, _MISSING)
            if a != b:
                out += identity_changes(a, b, f"{prefix}{k}.")
        sha = [c for c in out if c.startswith(f"{prefix}config_sha256:")]
        return [c for c in out if c not in sha] + sha  # the specific fields first, the hash last

    def shown(v: Any) -> str:
        text = "(absent)" if v is _MISSING else repr(v)
        return text if len(text) <= 120 else text[:117] + "..."

    return [f"{prefix[:-1] or '(identity)'}: {shown(old)} → {shown(new)}"]


def check_identity(
    path: PathLike,
    identity: dict[str, Any] | None,
    force: bool = False,
    *,
    identity_file: PathLike | None = None,
    option: str = "--name",
) -> None:
    """Store ``identity`` next to the results ``path`` on the first run; refuse a different one later.

    ``identity_file``: where it is stored (default :func:`identity_path`). ``None`` identity: no
    check. The stored and the given identity must be equal after a JSON round trip. A non-empty
    results file whose identity file is missing, corrupt, not a JSON object or ``{}`` is refused
    unless ``force``, which adopts ``identity`` for it (with a warning); ``force`` never overrides
    a readable, different identity. ``option`` words the hint (the CLI option that picks another
    run). Raises :class:`RunIdentityError` (also when the identity path is a directory).
    """
    if identity is None:
        return
    path = Path(path)
    ip = Path(identity_file) if identity_file is not None else identity_path(path)
    norm = _normalise(identity)
    old: Any = None
    problem: str | None = None
    if ip.is_dir():
        raise RunIdentityError(f"{ip} is a directory, not a run identity file; remove it (or use another {option})")
    if ip.exists():
        try:
            old = json.loads(ip.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            problem = f"is corrupt ({type(e).__name__}: {str(e)[:120]})"
        else:
            if not isinstance(old, dict):
                problem = f"is corrupt (a JSON {type(old).__name__}, not an object)"
            elif not old:
                problem = "is empty ({})"
    else:
        problem = "is missing"
    if problem is None:
        if old == norm:
            return
        changes = identity_changes(old, norm)
        details = "; ".join(changes[:8]) + (f"; … {len(changes) - 8} more" if len(changes) > 8 else "")
        raise RunIdentityError(
            f"{path} holds results of a different run configuration ({details}); "
            f"use another {option}, or delete the run directory to start over"
        )
    has_results = path.exists() and path.stat().st_size > 0
    if has_results and not force:
        raise RunIdentityError(
            f"{path} already holds results but its run identity {ip.name} {problem}, so nothing shows they "
            f"were produced by this configuration; use another {option}, or pass --force (API: force=True) to "
            "adopt the current configuration for this results file"
        )
    if has_results:
        logger.warning("%s: run identity %s %s; adopting the current configuration (force)", path, ip.name, problem)
    write_text_atomic(ip, json.dumps(norm, indent=2, sort_keys=True))


def archive_stale(results_path: PathLike, identity: dict[str, Any]) -> list[Path]:
    """Move a run with another identity aside instead of refusing or mixing it (the quickstart).

    When the results file or its identity file exists and the stored identity (:func:`identity_path`)
    is missing, unreadable or different from ``identity``, the results file, the identity file and
    the errors log are renamed to ``<file>.stale-<UTC time %Y%m%dT%H%M%SZ>`` — kept, never
    deleted. Returns the new paths (``[]`` when nothing was moved); prints nothing.
    """
    results_path = Path(results_path)
    ip = identity_path(results_path)
    if not results_path.exists() and not ip.exists():
        return []
    try:
        old = json.loads(ip.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        old = None
    if old == _normalise(identity):
        return []
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    moved = []
    for p in (results_path, ip, errors_log_path(results_path)):
        if p.exists():
            target = p.with_name(f"{p.name}.stale-{stamp}")
            p.replace(target)
            moved.append(target)
    return moved


# --------------------------------------------------------------------------- writing lines


def encode_verified_line(data: bytes, validate: Callable[[bytes], Any] | None = None) -> bytes:
    """``data`` (one serialised JSON record, UTF-8) plus its newline, after checking it reads back:
    no newline inside, ``json.loads`` accepts it, and ``validate(data)`` (the reader's own check,
    e.g. a pydantic ``model_validate_json``) does not raise. Raises ``ValueError`` (or whatever
    ``validate`` raises) otherwise, so the caller can write an error record instead."""
    if b"\n" in data:
        raise ValueError("the serialised record contains a newline")
    json.loads(data)
    if validate is not None:
        validate(data)
    return data + b"\n"


def append_line(fh: Any, path: PathLike, data: bytes) -> None:
    """Append the complete line ``data`` to ``fh`` (the file :func:`exclusive` yielded for
    ``path``): :func:`check_still_ours`, write, flush, ``fsync``. Raises :class:`RunFileReplacedError`."""
    check_still_ours(path, fh)
    fh.write(data)
    fh.flush()
    os.fsync(fh.fileno())


def append_error_log(log_path: PathLike, what: str, exc: BaseException) -> None:
    """Append ``=== <UTC time> <what>`` and ``exc``'s traceback to ``log_path``. Best effort: a
    failing log (disk full, read-only directory) is logged and never raises."""
    head = f"=== {datetime.now(timezone.utc).isoformat(timespec='seconds')} {what}\n"
    body = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    try:
        with open(log_path, "a", encoding="utf-8", errors="backslashreplace") as f:
            f.write(head + body + "\n")
    except OSError as e:  # pragma: no cover - disk full, read-only directory
        logger.error("could not write %s: %s", log_path, e)


def read_json(path: PathLike) -> Any:
    """The JSON value in ``path``, or None when the file is missing, unreadable or not JSON."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def file_sha256(path: PathLike) -> str:
    """Hex SHA-256 of a file's bytes, read in 1 MiB chunks (what a benchmark's ``manifest.json``
    records and ``load_benchmark`` checks, and what a download is verified against). Raises
    ``OSError`` when the file cannot be read."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_text_atomic(path: PathLike, text: str) -> None:
    """Replace ``path`` with ``text`` (UTF-8) atomically: ``<name>.tmp``, ``fsync``, ``os.replace``."""
    write_lines_atomic(path, [text], newline=False)


def write_lines_atomic(path: PathLike, lines: Iterable[str], *, newline: bool = True) -> None:
    """Replace ``path`` with ``lines`` (each followed by ``\\n`` when ``newline``) atomically:
    written to ``<name>.tmp``, ``fsync``'d, then ``os.replace``'d, so a reader sees the old or
    the new file, never half of one."""
    p = Path(path)
    tmp = p.with_name(p.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for line in lines:
            f.write(line + "\n" if newline else line)
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(p)


# --------------------------------------------------------------------------- reading lines


@dataclass
class JsonlScan(Generic[R]):
    """What :func:`scan_jsonl` found. ``records``: every readable line, parsed, in file order.
    ``unreadable``: ``(line number from 1, reason)`` of each complete line the parser refused.
    ``torn_tail``: the last line has no newline (an interrupted write; a resumed run cuts it off
    before appending) — if it cannot be parsed it is not counted in ``unreadable``."""

    records: list[R] = field(default_factory=list)
    unreadable: list[tuple[int, str]] = field(default_factory=list)
    torn_tail: bool = False

    def describe_unreadable(self, limit: int = 20) -> str:
        """``"N line(s) (line numbers 3, 7, …; first: <reason>)"`` or ``""`` when every line is readable."""
        if not self.unreadable:
            return ""
        nums = ", ".join(str(n) for n, _ in self.unreadable[:limit])
        more = f", … {len(self.unreadable) - limit} more" if len(self.unreadable) > limit else ""
        return f"{len(self.unreadable)} line(s) (line numbers {nums}{more}; first: {self.unreadable[0][1]})"


def read_lines(fh: BinaryIO, start: int = 0, *, chunk: int = 16 << 20) -> Iterator[tuple[int, bytes, bool]]:
    """``(byte offset, line without its newline, complete)`` of each line of the binary file ``fh``
    from byte ``start`` on (split on ``\\n`` only; blank lines included), read ``chunk`` bytes at a
    time. Only the last can be incomplete (``complete`` false): the bytes after the last newline,
    a write still going on or torn; none when the file ends with a newline. An ``OSError`` while
    reading is raised after the lines read before it (an unfinished one given as incomplete)."""
    fh.seek(start)
    pos, pending = start, b""  # pending: the bytes from ``pos`` on read after the last newline
    while True:
        try:
            block = fh.read(chunk)
        except OSError:
            if pending:
                yield pos, pending, False
            raise
        if not block:
            break
        data = pending + block if pending else block
        cut = data.rfind(b"\n")
        if cut < 0:
            pending = data
            continue
        i = 0
        while i <= cut:
            j = data.index(b"\n", i)
            yield pos + i, data[i:j], True
            i = j + 1
        pos += cut + 1
        pending = data[cut + 1 :]
    if pending:
        yield pos, pending, False


def scan_jsonl(path: PathLike, parse: Callable[[bytes], R]) -> JsonlScan[R]:
    """Read a JSONL file line by line (:func:`read_lines`: split on ``\\n`` only);
    ``parse(raw_line_bytes)`` turns a line into a record and raises ``ValueError`` (e.g. a pydantic
    ``ValidationError``) or ``RecursionError`` for a line that cannot be read back. Blank lines are
    skipped; a missing file gives an empty scan."""
    scan: JsonlScan[R] = JsonlScan()
    p = Path(path)
    if not p.exists():
        return scan
    with open(p, "rb") as fh:
        for i, (_, raw, complete) in enumerate(read_lines(fh), start=1):
            scan.torn_tail = not complete
            if not raw.strip():
                continue
            try:
                scan.records.append(parse(raw))
            except (ValueError, RecursionError) as e:
                if not complete:
                    continue
                reason = " ".join(str(e).split())[:200]
                scan.unreadable.append((i, f"{type(e).__name__}: {reason}"))
    return scan
