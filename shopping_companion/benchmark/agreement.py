"""Judge agreement over finished runs (paper App. E): re-judge the stage trajectories of one or
more ``results.jsonl`` files with several judges and write per-field agreement, Cohen's κ and OPC
(the statistics are :mod:`shopping_companion.benchmark.judge_agreement`; this module loads the runs,
builds the judges and writes ``agreement.md`` / ``agreement.json``). ``shopcomp judge-agreement``
is its command line."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Optional

from rich.console import Console

from shopping_companion.errors import ConfigError, DataError, ServiceError

__all__ = ["STAGES", "parse_judge_specs", "run_agreement"]

#: ``--stage`` values and the stages they compare.
STAGES = {"1": (1,), "2": (2,), "all": (1, 2)}


def parse_judge_specs(
    specs: list[str], default_base_url: Optional[str]
) -> list[tuple[str, Optional[str], Optional[str]]]:
    """``rule`` | ``recorded`` | ``llm:MODEL`` | ``llm:MODEL@BASE_URL`` → (kind, model, base_url);
    raises :class:`ConfigError` naming the bad spec and the allowed forms."""
    out = []
    for spec in specs:
        s = spec.strip()
        if s in ("rule", "recorded"):
            out.append((s, None, None))
        elif s.startswith("llm:") and len(s) > 4:
            model, _, url = s[4:].partition("@")
            if not model:
                raise ConfigError(f"--judge {spec!r}: the model name after 'llm:' is empty")
            out.append(("llm", model, url or default_base_url))
        else:
            raise ConfigError(f"--judge {spec!r}: allowed values are rule, recorded, llm:MODEL or llm:MODEL@BASE_URL")
    kinds = [(k, m) for k, m, _ in out]
    if len(set(kinds)) != len(kinds):
        raise ConfigError(f"--judge: each judge may be named once (got {', '.join(specs)})")
    if len(out) < 2:
        raise ConfigError("--judge: agreement needs at least two judges, e.g. --judge recorded --judge rule")
    return out


def _episodes(results: list[Path], bench: Path, bench_hash: str) -> list:
    from shopping_companion.benchmark.evaluate import identity_path
    from shopping_companion.benchmark.report import read_results

    eps = []
    for path in results:
        if not Path(path).is_file():
            raise DataError(f"--results {path}: no such file")
        # task ids repeat across benchmarks (sc-<seed>-NNNNN): the hash the eval recorded tells them apart
        try:
            recorded_hash = json.loads(identity_path(path).read_text()).get("benchmark_tasks_sha256")
        except (OSError, ValueError, AttributeError):
            recorded_hash = None
        if recorded_hash and recorded_hash != bench_hash:
            raise DataError(
                f"--results {path} do not belong to --bench {bench}: they were evaluated on a benchmark "
                f"whose tasks hash to {recorded_hash} ({identity_path(path).name}), --bench's tasks hash "
                f"to {bench_hash}"
            )
        eps += [r for r in read_results(path) if r.error is None]
    return eps


def run_agreement(
    bench: Path,
    results: list[Path],
    specs: list[tuple[str, Optional[str], Optional[str]]],
    *,
    stage: str = "all",
    opc_by: str = "system",
    out: Optional[Path] = None,
    api_key_env: str = "OPENAI_API_KEY",
    concurrency: int = 8,
    data_dir: Optional[Path] = None,
    index_dir: Optional[Path] = None,
    console: Console | None = None,
) -> tuple[Any, Path]:
    """Re-judge the error-free episodes of ``results`` (evaluated on ``bench``) with the judges of
    ``specs`` (:func:`parse_judge_specs`), for ``stage`` (``1``, ``2`` or ``all``); OPC over
    ``opc_by`` (``system``: the paper's, over systems' success rates; ``item``; ``none``). Writes
    ``agreement.md`` and ``agreement.json`` into ``out`` (default: the first results file's
    directory; LLM verdicts are cached in ``judge_cache.sqlite`` there). Returns
    ``(AgreementReport, out_dir)``.

    Raises :class:`ConfigError` for a bad ``stage`` / ``opc_by``, :class:`DataError` when the results
    do not belong to ``bench`` or hold no judged stage, :class:`ServiceError` when every verdict of a
    judge failed (its endpoint is likely down)."""
    from shopping_companion.assembly.data import benchmark_tasks_sha256, product_lookup
    from shopping_companion.assembly.data import load_benchmark
    from shopping_companion.benchmark.judge_agreement import agreement_report, items_from_results, judge_all
    from shopping_companion.assembly.data import open_product_search, resolve_sources, write_json
    from shopping_companion.assembly.judging import make_rule_judge
    from shopping_companion.console import console as default_console

    console = console or default_console
    stages = STAGES.get(stage)
    if stages is None:
        raise ConfigError(f"--stage must be 1, 2 or all (got {stage!r})")
    if opc_by not in ("system", "item", "none"):
        raise ConfigError(f"--opc-by must be system, item or none (got {opc_by!r})")
    b = load_benchmark(bench)
    eps = _episodes(results, bench, benchmark_tasks_sha256(b.tasks))
    tasks = {t.task_id: t for t in b.tasks}
    try:
        items, recorded = items_from_results(eps, tasks, stages=stages)
    except KeyError as e:
        raise DataError(f"--results do not belong to --bench {bench}: {e.args[0]}") from None
    if not items:
        raise DataError("no judged stages in the results given (episodes that ended with an error are left out)")
    out_dir = Path(out) if out else Path(results[0]).parent
    out_dir.mkdir(parents=True, exist_ok=True)
    lookup = None
    if any(k != "recorded" for k, _, _ in specs):
        sources = resolve_sources(data_dir, console=console)
        lookup = product_lookup(open_product_search(index_dir=index_dir, console=console, sources=sources))
    table: dict = {}
    judge_objs = []
    for kind, model, url in specs:
        if kind == "recorded":
            table["recorded"] = recorded
        elif kind == "rule":
            judge_objs.append(make_rule_judge(lookup, b.sessions))
        else:
            from shopping_companion.judges.llm import LLMJudge

            judge_objs.append(
                LLMJudge.from_openai(
                    model,
                    url,
                    api_key_env=api_key_env,
                    lookup=lookup,
                    concurrency=concurrency,
                    cache_path=out_dir / "judge_cache.sqlite",
                )
            )
    t0 = time.perf_counter()
    with console.status(f"judging {len(items)} stage trajectories with {len(judge_objs)} judge(s)"):
        table.update(judge_all(judge_objs, items))
    wall = time.perf_counter() - t0
    for name, verdicts in table.items():
        if verdicts and all(v.failed for v in verdicts.values()):
            first = next(iter(verdicts.values()))
            raise ServiceError(
                f"--judge {name}: all {len(verdicts)} verdicts failed, nothing to compare (first: "
                f"{'; '.join(first.reasons[:1]) or 'no reason given'}); check the judge's endpoint "
                "(llm:MODEL@BASE_URL or --judge-base-url) and --judge-api-key-env"
            )
    try:
        rep = agreement_report(
            table,
            opc_by=None if opc_by == "none" else opc_by,  # type: ignore[arg-type]
            opc_stage=2 if 2 in stages else 1,
        )
    except ValueError as e:
        raise DataError(str(e)) from None
    md = rep.to_markdown()
    header = (
        f"# Judge agreement\n\nBenchmark: `{bench}` · results: {', '.join(f'`{p}`' for p in results)} · "
        f"stages: {stage} · judging wall time {wall:.1f}s\n\n"
    )
    (out_dir / "agreement.md").write_text(header + md, encoding="utf-8")
    write_json(out_dir / "agreement.json", {**rep.to_dict(), "stages": list(stages), "judging_wall_s": round(wall, 3)})
    return rep, out_dir
