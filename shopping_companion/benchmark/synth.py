"""Shopping Companion Bench construction (§4, App. A): the public API.

The five synthesis steps live in :mod:`shopping_companion.benchmark.synthesis`:

1. product and voucher sampling (:mod:`~.synthesis.catalog_view`, :mod:`~.synthesis.build`),
2. instruction generation and 3. preference dialogues with denoising (:mod:`~.synthesis.generators`
   — the offline template generator, :mod:`~.synthesis.llm_generator` — any OpenAI-compatible
   endpoint, :mod:`~.synthesis.conflicts` — the rule-based conflict detector),
4. injection into long dated histories of real conversations (:mod:`~.synthesis.haystack`),
5. verification — resolvable, searchable, conflict-free, gold accepted by the rule judge,
   alternatives counted (:mod:`~.synthesis.verify`),

plus statistics like the paper's App. A.1 (:mod:`~.synthesis.stats`).

Entry points:

* :func:`synthesize` — build in memory (returns :class:`SynthOutput`); :func:`write_benchmark`
  writes it to a directory;
* :func:`build_benchmark` — resumable directory build; :func:`build_from_data` — the same from a
  data directory (what ``shopcomp synth`` and ``quickstart`` run);
* :func:`load_benchmark` — read a complete directory (refuses one without ``manifest.json``, files
  that do not match its SHA-256, duplicate task ids, missing sessions); :func:`missing_gold_products`
  — gold ids a catalog lacks;
* :func:`load_synth_config` — a YAML config (``configs/benchmark/*.yaml``).

Deterministic: the same inputs, config and seed give byte-identical ``tasks.jsonl``,
``sessions.jsonl``, ``stats.*`` and ``manifest.json``. Session ids shown to the agent are opaque
(``s_<hash>``) so the source of a session (a real chat or a needle) cannot be read off its id;
``Session.source`` keeps the provenance (the real session's id, or ``<generator>-needle:<task>``).
"""

from __future__ import annotations

import functools
import json
import warnings
from collections import Counter
from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict

from shopping_companion.benchmark.synthesis.build import (
    FORMAT_VERSION,
    SynthOutput,
    Synthesizer,
    build_benchmark,
    file_sha256,
    make_generator,
    write_benchmark,
)
from shopping_companion.benchmark.synthesis.common import (
    GenerationError,
    Searcher,
    SynthError,
    count_tokens,
    opaque_id,
    searchable_query,
)
from shopping_companion.benchmark.synthesis.config import GeneratorConfig, LLMEndpoint, SynthConfig, load_synth_config
from shopping_companion.benchmark.synthesis.generators import Generator, TemplateGenerator
from shopping_companion.types import Product, Session, Task
from shopping_companion.errors import BenchmarkError, BenchmarkMissingError  # noqa: F401 - re-exported

__all__ = [
    "FORMAT_VERSION",
    "Benchmark",
    "BenchmarkError",
    "GenerationError",
    "Generator",
    "GeneratorConfig",
    "LLMEndpoint",
    "Searcher",
    "SynthConfig",
    "SynthError",
    "SynthOutput",
    "Synthesizer",
    "TemplateGenerator",
    "build_benchmark",
    "build_from_data",
    "same_build",
    "count_tokens",
    "load_benchmark",
    "load_synth_config",
    "make_generator",
    "missing_gold_products",
    "opaque_id",
    "searchable_query",
    "synthesize",
    "write_benchmark",
]


def synthesize(
    products: list[Product],
    pool: list[Session],
    config: SynthConfig,
    searcher: Any = None,
    sources: dict[str, Any] | None = None,
    *,
    generator: Generator | None = None,
    embedder: Any = None,
    progress: Callable[[int, int, dict[str, Any]], None] | None = None,
) -> SynthOutput:
    """Build ``config.n_tasks`` tasks in memory (single-product and add-on deals, §4).

    Args:
        products: the catalog (any order).
        pool: real haystack sessions (SGD / ShareGPT / any), ids unique.
        config: the build settings (:class:`SynthConfig`).
        searcher: BM25 search for the searchable check — a ``ProductSearch`` or a callable
            ``(query, top_k[, shop_id=])`` returning product ids; None skips the check.
        sources: provenance recorded in the manifest (paths, hashes).
        generator: overrides ``config.generator`` (e.g. an LLM generator for a test server).
        embedder: MiniLM embedder for the MiniLM needle top-1 statistic (optional).
        progress: called as ``progress(done, total, part_record)`` after each task.

    Raises:
        SynthError: the inputs cannot give the benchmark (empty pool, no eligible products, no shop
            for add-on deals, ...), with the counts that explain why.
    """
    synth = Synthesizer(
        products, pool, config, searcher=searcher, generator=generator, embedder=embedder, sources=sources
    )
    return synth.run(None, progress)


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
    """Load a benchmark directory written by :func:`write_benchmark` / :func:`build_benchmark`.

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


def same_build(manifest: dict[str, Any], cfg: SynthConfig) -> bool:
    """Whether a benchmark's ``manifest.json`` records a build with ``cfg`` (and this format). A
    build that had to relax ``min_attributes`` to 1 on an attribute-poor catalog counts as the same."""
    built = dict(manifest.get("config") or {})
    want = cfg.model_dump(mode="json")
    if built.get("min_attributes") == 1:
        built["min_attributes"] = want.get("min_attributes")
    return manifest.get("format_version") == FORMAT_VERSION and built == want


def _refuse_other_finished(out: Path, cfg: SynthConfig) -> None:
    """Raise :class:`SynthError` when ``out`` holds a finished benchmark built with other settings
    (replacing it would lose it), naming what differs."""
    try:
        manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return  # no finished benchmark there (or an unreadable one): nothing to keep
    if not isinstance(manifest, dict) or same_build(manifest, cfg):
        return
    from shopping_companion.runs import identity_changes

    changes = identity_changes(manifest.get("config") or {}, cfg.model_dump(mode="json"))
    shown = "; ".join(changes[:6]) + (f"; … {len(changes) - 6} more" if len(changes) > 6 else "")
    raise SynthError(
        f"{out} holds a finished benchmark built with other settings ({shown or 'another format'}); "
        "pass --fresh to replace it, or use another --out"
    )


def build_from_data(
    out: str | Path,
    cfg: SynthConfig,
    *,
    data_dir: str | Path | None = None,
    index_dir: str | Path | None = None,
    sharegpt: bool = True,
    fresh: bool = False,
    relax_min_attributes: bool = False,
    keep_other_finished: bool = False,
    console: Any = None,
) -> Any:
    """``shopcomp synth`` / ``quickstart``'s build: resolve the data (:func:`shopping_companion.pipeline.resolve_sources`),
    open the BM25 index, load the catalog and the conversation pool (SGD + ShareGPT when
    ``sharegpt``), then :func:`build_benchmark` into ``out`` (resumable; ``fresh`` discards an
    unfinished build) with a progress bar on ``console``.

    ``relax_min_attributes``: when no product has ``cfg.min_attributes`` phrasable attributes (an
    attribute-poor catalog such as one Amazon category), note it and build with
    ``min_attributes=1`` instead of failing. ``keep_other_finished``: refuse (:class:`SynthError`)
    when ``out`` holds a finished benchmark built with other settings, instead of replacing it
    (``shopcomp synth`` without ``--fresh``). Returns the build result (``manifest``,
    ``build_log``). Raises :class:`SynthError` / other :class:`~shopping_companion.errors.DataError`.
    """
    from rich.console import Console
    from rich.progress import Progress

    from shopping_companion.phases import phase
    from shopping_companion.pipeline import load_catalog, load_pool, make_embedder, open_product_search, resolve_sources

    console = console or Console(stderr=True, soft_wrap=True, emoji=False)
    out = Path(out)
    if keep_other_finished:
        _refuse_other_finished(out, cfg)
    sources = resolve_sources(data_dir, console=console)
    with phase("BM25 index (built and cached on first use)"):
        search = open_product_search(index_dir=index_dir, console=console, sources=sources)
    with phase("catalog (parsed once, cached)"), console.status("loading catalog"):
        products, report = load_catalog(sources.catalog_path, sources.catalog_format)
    with phase("conversations"):
        pool, pool_info = load_pool(sharegpt=sharegpt, console=console, sources=sources)
    prov = {
        "catalog": {
            "path": str(sources.catalog_path),
            "format": sources.catalog_format,
            "sha256": file_sha256(sources.catalog_path),
            "products": len(products),
            "bad_records": report.n_bad,
        },
        "conversations": pool_info,
    }
    if sharegpt and isinstance(pool_info.get("sharegpt"), dict):
        from shopping_companion.memory.loaders import sharegpt_default_path

        sg_path = sharegpt_default_path()
        pool_info["sharegpt"].update({"path": str(sg_path), "sha256": file_sha256(sg_path)})
    embedder = make_embedder() if cfg.minilm_tasks != 0 else None
    with Progress(console=console, transient=False) as bar:
        job = bar.add_task(f"synthesising {cfg.n_tasks} tasks → {out}", total=cfg.n_tasks)

        def progress(done: int, total: int, rec: dict) -> None:
            bar.update(job, completed=done)

        build = functools.partial(
            build_benchmark, out, products, pool, searcher=search, sources=prov, embedder=embedder, progress=progress
        )
        try:
            return build(cfg, fresh=fresh)
        except SynthError as e:
            if not relax_min_attributes or cfg.min_attributes == 1 or not str(e).startswith("no product can be"):
                raise
            console.print(f"[yellow]note:[/] {e}; retrying with min_attributes=1")
            return build(cfg.model_copy(update={"min_attributes": 1}), fresh=True)
