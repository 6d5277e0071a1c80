"""``shopcomp import-tasks``: a benchmark directory from tasks written by hand (docs/tasks.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from shopping_companion.cli.common import app, console, data_dir_option, option
from shopping_companion.errors import DataError

__all__ = ["import_tasks_cmd", "print_report"]


def print_report(result: Any) -> None:
    """The per-task table (line, task id, type, status, errors and warnings) and a summary line."""
    table = Table(title=f"import {escape(str(result.file))}", show_lines=False)
    for col in ("line", "task", "type", "status", "problems"):
        table.add_column(col, overflow="fold")
    for r in result.reports:
        status = {"imported": "[green]imported[/]", "invalid": "[red]invalid[/]", "skipped": "[yellow]skipped[/]"}
        problems = [f"[red]{escape(i.field or '(line)')}[/]: {escape(i.message)} [{i.check}]" for i in r.errors]
        problems += [f"[yellow]{escape(i.field or '(line)')}[/]: {escape(i.message)} [{i.check}]" for i in r.warnings]
        v = r.verification or {}
        if v:
            ranks = ",".join("-" if x is None else str(x) for x in v.get("search_ranks", []))
            problems.append(
                f"searchable={v.get('searchable')} (ranks {ranks}), alternatives={v.get('n_alternatives')}"
                + ("+" if v.get("alternatives_capped") else "")
            )
        table.add_row(
            str(r.line),
            escape(r.task_id or "?"),
            r.task_type or "?",
            status.get(r.status, r.status),
            "\n".join(problems),
        )
    # a log file gets the whole table at 160 columns (rich caps print(width=) at the console's width)
    (console if console.is_terminal else Console(stderr=True, width=160)).print(table)
    n_ok = sum(r.status == "imported" for r in result.reports)
    if result.out is not None:
        c = result.manifest.get("counts", {})
        console.print(
            f"benchmark written to {escape(str(result.out))}: {n_ok} of {len(result.reports)} task(s) "
            f"({c.get('single')} single, {c.get('addon')} add-on), {c.get('sessions')} sessions; report in "
            f"{escape(str(result.out / 'import_report.json'))}",
            soft_wrap=True,
        )


@app.command("import-tasks")
def import_tasks_cmd(
    file: Path = typer.Argument(
        ..., metavar="FILE.jsonl", help="Tasks, one JSON object a line (docs/tasks.md).", show_default=False
    ),
    out: Path = option(..., "--out", metavar="DIR", help="Benchmark directory to write."),
    sessions: Optional[Path] = option(
        None,
        "--sessions",
        metavar="S.jsonl",
        help="Haystack sessions, one Session JSON object a line (default: the built-in SGD + ShareGPT pool).",
    ),
    catalog: Optional[Path] = option(
        None, "--catalog", metavar="PATH", help="Catalog file (default: the data directory's products.jsonl.gz)."
    ),
    data_dir: Optional[Path] = data_dir_option(),
    index_dir: Optional[Path] = option(
        None, "--index", metavar="DIR", help="BM25 index directory (default: the cache; built when missing)."
    ),
    search: bool = option(True, "--search/--no-search", help="Run the searchable check (needs the index; default on)."),
    skip_invalid: bool = option(False, "--skip-invalid", help="Write the valid tasks, list the invalid ones."),
    allow_open: bool = option(
        False, "--allow-open", help="Read single tasks without a reference product (product_types names it)."
    ),
    seed: int = option(0, "--seed", metavar="N", help="Seed of haystacks, positions and dates (default 0)."),
    sessions_per_user: int = option(
        42, "--sessions-per-user", min=1, metavar="N", help="Real haystack sessions per task (default 42)."
    ),
    sharegpt: bool = option(
        True, "--sharegpt/--no-sharegpt", help="Built-in pool: include ShareGPT conversations (default on)."
    ),
    force: bool = option(False, "--force", help="Replace a finished, different benchmark in DIR."),
) -> None:
    """Import hand-written tasks: check every line (line and field named in each error), give the
    valid tasks haystacks of real sessions, verify them as synthesis does, and write a benchmark
    directory that eval, sft collect and grpo prepare read. Exit 2 when a line is invalid (nothing
    written unless --skip-invalid)."""
    from shopping_companion.benchmark.import_tasks import ImportSettings, import_tasks, load_session_file
    from shopping_companion.runs import file_sha256
    from shopping_companion.paths import cache_dir
    from shopping_companion.assembly.data import (
        DataSources,
        load_catalog,
        load_pool,
        open_product_search,
        resolve_sources,
    )

    if not file.is_file():
        raise DataError(f"task file {file} not found")
    settings = ImportSettings(
        seed=seed, sessions_per_user=sessions_per_user, search=search, skip_invalid=skip_invalid, allow_open=allow_open
    )
    if catalog is not None:
        if not catalog.is_file():
            raise DataError(f"--catalog {catalog}: file not found")
        sha = file_sha256(catalog)
        src = DataSources(catalog, "auto", None)
        idx = index_dir or cache_dir() / "indexes" / f"import-{sha[:12]}"
    else:
        src = resolve_sources(data_dir, console=console)
        sha = file_sha256(src.catalog_path)
        idx = index_dir
    with console.status("loading catalog"):
        products, report = load_catalog(src.catalog_path, src.catalog_format)
    searcher = open_product_search(index_dir=idx, console=console, sources=src) if search else None
    prov: dict[str, Any] = {
        "catalog": {
            "path": str(src.catalog_path),
            "sha256": sha,
            "products": len(products),
            "bad_records": report.n_bad,
        },
        "index": str(idx or src.index_dir) if search else None,
    }
    if sessions is not None:
        pool = load_session_file(sessions)
        prov["conversations"] = {"sessions_file": str(sessions), "sha256": file_sha256(sessions), "sessions": len(pool)}
    else:
        if src.sgd_path is None and catalog is not None:
            src = resolve_sources(data_dir, console=console)
        pool, info = load_pool(sharegpt=sharegpt, console=console, sources=src)
        prov["conversations"] = info
    with console.status(f"checking {file}"):
        result = import_tasks(
            file,
            out,
            products,
            pool,
            settings,
            searcher=searcher,
            sources=prov,
            force=force,
            catalog_name=str(src.catalog_path),
        )
    print_report(result)
    if not result.ok and not skip_invalid:
        raise DataError(result.error_summary())
    if result.out is None:
        raise DataError(f"{file}: no valid task to write ({result.n_invalid} invalid)")
