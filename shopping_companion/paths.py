"""Where data and caches live.

Data directory (read-only inputs: catalog, conversations, reviews), first match wins:
1. the path passed explicitly (``--data-dir``),
2. ``$SHOPCOMP_DATA_DIR``,
3. ``../shared/data`` relative to the working directory, then relative to the repository root.

Cache directory (indexes, embedding cache; reused across runs): ``$SHOPCOMP_CACHE_DIR`` or
``~/.cache/shopping_companion``.
"""

from __future__ import annotations

import os
from pathlib import Path

_REPO_ROOT = Path(__file__).resolve().parent.parent


class DataDirError(FileNotFoundError):
    """Raised when no data directory can be found; the message says how to pass one."""


def resolve_data_dir(explicit: str | os.PathLike[str] | None = None) -> Path:
    """Return the data directory, or raise :class:`DataDirError` naming every place tried."""
    tried: list[str] = []
    candidates: list[Path] = []
    if explicit is not None:
        p = Path(explicit).expanduser()
        if not p.is_dir():
            raise DataDirError(f"data directory {str(p)!r} (from --data-dir) does not exist")
        return p.resolve()
    env = os.environ.get("SHOPCOMP_DATA_DIR")
    if env:
        candidates.append(Path(env).expanduser())
    candidates += [Path.cwd() / ".." / "shared" / "data", _REPO_ROOT / ".." / "shared" / "data"]
    for c in candidates:
        tried.append(str(c))
        if c.is_dir():
            return c.resolve()
    raise DataDirError(
        "no data directory found (tried: " + ", ".join(tried) + "). Pass --data-dir PATH or set "
        "SHOPCOMP_DATA_DIR to a directory holding catalog/products.jsonl.gz and conversations/."
    )


def cache_dir() -> Path:
    """Return (and create) the cache directory for indexes and embeddings."""
    p = Path(os.environ.get("SHOPCOMP_CACHE_DIR", Path.home() / ".cache" / "shopping_companion"))
    p = p.expanduser()
    p.mkdir(parents=True, exist_ok=True)
    return p
