"""Where data and caches live.

Data directory (read-only inputs: catalog, conversations, reviews), first match wins:
1. the path passed explicitly (``--data-dir``),
2. ``$SHOPCOMP_DATA_DIR`` (when set, it must exist: a missing one is an error, not a fall-through),
3. ``../shared/data`` relative to the working directory, then relative to the repository root.

Cache directory (indexes, embedding cache; reused across runs): ``$SHOPCOMP_CACHE_DIR`` or
``~/.cache/shopping_companion``.
"""

from __future__ import annotations

import os
from pathlib import Path
from shopping_companion.errors import DataDirError  # noqa: F401 - re-exported

_REPO_ROOT = Path(__file__).resolve().parent.parent


#: The SGD conversations (the built-in haystack pool) inside the data directory.
SGD_RELATIVE_PATH = Path("conversations") / "sgd_dialogues.jsonl.gz"


def resolve_data_dir(explicit: str | os.PathLike[str] | None = None) -> Path:
    """Return the data directory, or raise :class:`DataDirError` naming every place tried."""
    tried: list[str] = []
    candidates: list[Path] = []
    if explicit is not None:
        p = Path(explicit).expanduser()
        if not p.is_dir():
            raise DataDirError(f"data directory {str(p)!r} (from --data-dir or data.data_dir) does not exist")
        return p.resolve()
    env = os.environ.get("SHOPCOMP_DATA_DIR", "").strip()
    if env:
        p = Path(env).expanduser()
        if not p.is_dir():  # a named directory that is not there is a mistake, never a silent fall-through
            raise DataDirError(
                f"data directory {str(p)!r} (from $SHOPCOMP_DATA_DIR) does not exist; fix the "
                "variable, unset it, or pass --data-dir PATH"
            )
        return p.resolve()
    candidates += [Path.cwd() / ".." / "shared" / "data", _REPO_ROOT / ".." / "shared" / "data"]
    for c in candidates:
        shown = str(c.resolve())
        if shown in tried:  # run from the repository root, both candidates are one directory
            continue
        tried.append(shown)
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
