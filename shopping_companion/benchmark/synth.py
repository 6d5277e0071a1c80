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
  data directory (what ``shopcomp synth`` and ``quickstart`` run; a finished build with the same
  settings, :func:`finished_build`, is returned as it is);
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
from pathlib import Path
from typing import Any, Callable


from rich.markup import escape

from shopping_companion.benchmark.synthesis.build import Synthesizer, build_benchmark, make_generator
from shopping_companion.benchmark.synthesis.directory import FORMAT_VERSION, SynthOutput, kept_parts, write_benchmark
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
from shopping_companion.assembly.data import Benchmark, load_benchmark, missing_gold_products  # noqa: F401 - re-exported
from shopping_companion.runs import file_sha256
from shopping_companion.types import Product, Session
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
    "finished_build",
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


def same_build(manifest: dict[str, Any], cfg: SynthConfig) -> bool:
    """Whether a benchmark's ``manifest.json`` records a build with ``cfg`` (and this format). A
    build that had to relax ``min_attributes`` to 1 on an attribute-poor catalog counts as the same;
    a setting the manifest lacks (added after that build) counts as its default."""
    want = cfg.model_dump(mode="json")
    defaults = type(cfg).model_construct().model_dump(mode="json", warnings=False)
    built = {k: v for k, v in defaults.items() if k in want} | dict(manifest.get("config") or {})
    if built.get("min_attributes") == 1:
        built["min_attributes"] = want.get("min_attributes")
    return manifest.get("format_version") == FORMAT_VERSION and built == want


def finished_build(out: str | Path, cfg: SynthConfig, console: Any = None) -> SynthOutput | None:
    """The benchmark at ``out`` when it is complete (its files match the manifest's SHA-256) and
    was built with ``cfg`` (:func:`same_build`), else None; an inconsistent one is noted on
    ``console`` (it will be rebuilt). What a rerun of a finished build returns instead of building
    again (the data are not re-read: ``--fresh`` rebuilds after they change)."""
    try:
        bench = load_benchmark(out)
    except FileNotFoundError:
        return None
    except BenchmarkError as e:
        if console is not None:
            console.print(f"[yellow]note:[/] {escape(str(e))}; rebuilding the benchmark", soft_wrap=True)
        return None
    if not same_build(bench.manifest, cfg):
        return None
    try:
        log = json.loads((Path(out) / "build_log.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        log = {}
    log.setdefault("timings", {})
    return SynthOutput(tasks=bench.tasks, sessions=bench.sessions, manifest=bench.manifest, build_log=log)


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
    """``shopcomp synth`` / ``quickstart``'s build: resolve the data (:func:`shopping_companion.assembly.data.resolve_sources`),
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
    from rich.progress import Progress

    from shopping_companion.assembly.data import (
        load_catalog,
        load_pool,
        make_embedder,
        open_product_search,
        resolve_sources,
    )
    from shopping_companion.console import console as default_console
    from shopping_companion.phases import phase

    console = console or default_console
    out = Path(out)
    if keep_other_finished:
        _refuse_other_finished(out, cfg)
    if not fresh:
        done = finished_build(out, cfg, console)
        if done is not None:
            console.print(
                f"{escape(str(out))} already holds this build (same settings): nothing to do (--fresh rebuilds it)",
                soft_wrap=True,
            )
            return done
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
        except KeyboardInterrupt:
            kept, parts = kept_parts(out)
            console.print(
                f"interrupted: {kept} of {cfg.n_tasks} tasks are kept in {escape(str(parts))}; rerun the same "
                "command to resume from them (--fresh discards them)",
                soft_wrap=True,
            )
            raise
        except SynthError as e:
            if not relax_min_attributes or cfg.min_attributes == 1 or not str(e).startswith("no product can be"):
                raise
            console.print(f"[yellow]note:[/] {e}; retrying with min_attributes=1")
            return build(cfg.model_copy(update={"min_attributes": 1}), fresh=True)
