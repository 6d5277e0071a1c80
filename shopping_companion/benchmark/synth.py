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
* :func:`build_benchmark` — resumable directory build (what ``shopcomp synth`` runs);
* :func:`load_benchmark` — read a complete directory (refuses one without ``manifest.json``);
* :func:`load_synth_config` — a YAML config (``configs/benchmark/*.yaml``).

Deterministic: the same inputs, config and seed give byte-identical ``tasks.jsonl``,
``sessions.jsonl``, ``stats.*`` and ``manifest.json``. Session ids shown to the agent are opaque
(``s_<hash>``) so the source of a session (a real chat or a needle) cannot be read off its id;
``Session.source`` keeps the provenance (the real session's id, or ``<generator>-needle:<task>``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict

from shopping_companion.benchmark.synthesis.build import (
    FORMAT_VERSION,
    SynthOutput,
    Synthesizer,
    build_benchmark,
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

__all__ = [
    "FORMAT_VERSION",
    "Benchmark",
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
    "count_tokens",
    "load_benchmark",
    "load_synth_config",
    "make_generator",
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
    synth = Synthesizer(products, pool, config, searcher=searcher, generator=generator, embedder=embedder,
                        sources=sources)
    return synth.run(None, progress)


class Benchmark(BaseModel):
    """A benchmark directory loaded into memory."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    tasks: list[Task]
    sessions: dict[str, Session]
    manifest: dict[str, Any]


def load_benchmark(directory: str | Path) -> Benchmark:
    """Load a benchmark directory written by :func:`write_benchmark` / :func:`build_benchmark`.

    Raises:
        FileNotFoundError: the directory or its manifest is missing (an incomplete build).
    """
    d = Path(directory)
    if not (d / "manifest.json").is_file():
        raise FileNotFoundError(
            f"{d}: no manifest.json, so this is not a complete benchmark directory "
            "(build it with `shopcomp synth --out DIR`; an interrupted build resumes when rerun)"
        )
    for name in ("tasks.jsonl", "sessions.jsonl"):
        if not (d / name).is_file():
            raise FileNotFoundError(f"{d}: no {name}, so this is not a Shopping Companion benchmark directory "
                                    "(make one with `shopcomp synth --out DIR`)")
    manifest = json.loads((d / "manifest.json").read_text())
    tasks = [Task.model_validate_json(line) for line in open(d / "tasks.jsonl", encoding="utf-8") if line.strip()]
    sessions = {}
    for line in open(d / "sessions.jsonl", encoding="utf-8"):
        if line.strip():
            s = Session.model_validate_json(line)
            sessions[s.session_id] = s
    return Benchmark(tasks=tasks, sessions=sessions, manifest=manifest)
