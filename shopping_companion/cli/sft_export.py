"""``shopcomp sft stats`` and ``shopcomp sft export``: step-level examples of a collection's kept
stages, counted or written as LLaMA-Factory data (:mod:`~shopping_companion.cli.sft` registers both;
docs/sft.md). Errors are raised, never printed here (the group's one handler prints them).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Optional

import typer
from rich.markup import escape

from shopping_companion.cli.common import console, option, sets_of
from shopping_companion.errors import ConfigError, DataError

__all__ = ["export", "stats"]


def _policy(keep: str, min_acc: float, stages: str) -> Any:
    from shopping_companion.sft.collect import KeepPolicy

    return KeepPolicy.parse(keep, min_acc, stages)  # ConfigError names the field


def _load_examples(
    collect_dir: Path, keep: Optional[str], min_acc: float, stages: str, drop_malformed: bool, drop_error_calls: bool
) -> tuple[list, list]:
    from shopping_companion.sft.collect import read_kept, reselect
    from shopping_companion.sft.examples import step_examples

    try:
        # re-selection is read-only: kept.jsonl keeps the rule collect.json records
        kept = reselect(collect_dir, _policy(keep, min_acc, stages), write=False) if keep else read_kept(collect_dir)
    except FileNotFoundError as e:
        raise DataError(f"--collect {collect_dir}: {e}") from None
    return kept, step_examples(kept, drop_malformed=drop_malformed, drop_error_calls=drop_error_calls)


_COLLECT = typer.Option(..., "--collect", metavar="DIR", help="Collect directory written by `shopcomp sft collect`.")
_KEEP = typer.Option(None, "--keep", metavar="RULE", help="Re-select kept stages first: succ | stage | pref_acc.")
_MIN_ACC = option(1.0, "--min-acc", metavar="X", help="Stage-1 Acc threshold of pref_acc, in [0, 1] (default 1.0).")
_STAGES = option("1,2", "--stages", metavar="LIST", help="Stages to keep: 1,2 (default) | 1 | 2.")
_DROP_MALFORMED = option(True, help="Malformed turns are not targets (default on).")
_DROP_ERROR_CALLS = option(False, help="Turns with a rejected tool call are not targets (default off).")


def stats(
    collect_dir: Path = _COLLECT,
    keep: Optional[str] = _KEEP,
    min_acc: float = _MIN_ACC,
    stages: str = _STAGES,
    drop_malformed: bool = _DROP_MALFORMED,
    drop_error_calls: bool = _DROP_ERROR_CALLS,
) -> None:
    """Print step-level example counts by stage, tool and turn (JSON on stdout)."""
    from shopping_companion.sft.examples import example_stats

    kept, examples = _load_examples(collect_dir, keep, min_acc, stages, drop_malformed, drop_error_calls)
    print(json.dumps({"kept_stages": len(kept), "examples": example_stats(examples)}, indent=2))


def _manifest(collect_dir: Path) -> dict[str, Any]:
    """The collection's ``collect.json`` (``{}`` when there is none)."""
    from shopping_companion.sft.collect import MANIFEST

    path = collect_dir / MANIFEST
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, ValueError) as e:
        raise DataError(f"{path}: unreadable ({e}); rerun `shopcomp sft collect` to rewrite it") from None


def _collect_bench(collect_dir: Path, manifest: dict[str, Any]) -> Path:
    """The benchmark a collection ran on: its ``config.yaml`` (``bench.path``), else (collections
    of earlier releases) the identity in ``collect.json``."""
    from shopping_companion.config import load_config

    if (collect_dir / "config.yaml").is_file():
        path = (load_config(collect_dir / "config.yaml").get("bench") or {}).get("path")
        if path:
            return Path(path)
    path = (manifest.get("identity") or {}).get("bench")
    if not path:
        raise ConfigError(f"--bench is required: {collect_dir} has no config.yaml or collect.json naming the benchmark")
    return Path(path)


def _yaml_overrides(sets: Optional[list[str]]) -> dict[str, str]:
    """``--set key=value`` of ``sft export`` as ``{key: value}``; raises ConfigError for an item
    without ``=`` or key."""
    overrides = {}
    for item in sets_of(sets):
        k, sep, v = item.partition("=")
        if not sep or not k.strip():
            raise ConfigError(f"--set expects key=value, got {item!r}")
        overrides[k.strip()] = v
    return overrides


def _print_summary(summary: Any, n_kept: int) -> None:
    """Print an export's dropped trajectories, counts, decontamination, lengths and warnings."""
    for d in summary.dropped:
        console.print(
            f"dropped trajectory {escape(d['trajectory'])} (task {escape(d['task_id'])}, trial {d['trial']}, "
            f"stage {d['stage']}, {d['examples']} examples): {d['findings']} finding(s) {d['kinds']} of test "
            f"task(s) {escape(', '.join(d['test_tasks']))}; e.g. {escape(d['first'])}"
        )
    s = summary.stats
    dc = summary.decontamination
    lg = summary.lengths
    console.print(
        f"{summary.examples} step-level examples (by stage {s['by_stage']}, by tool {s['by_tool']}) from "
        f"{n_kept} kept stages; skipped {summary.skipped or 'none'}; decontamination: "
        f"{dc['test_tasks']} test tasks, 0 violations in the written data "
        f"({dc['dropped_trajectories']} trajectories dropped), {dc['shared_with_train']} test texts owned by train, "
        f"{dc['exposures']} observation-only product exposures"
    )
    label = "ESTIMATED lengths" if lg["method"] == "estimate" else f"token lengths ({escape(str(lg['tokenizer']))})"
    console.print(
        f"{label}: min {lg['min']}, median {lg['median']}, p90 {lg['p90']}, p99 {lg['p99']}, max {lg['max']}; "
        f"{lg['over_cutoff']} of {lg['n']} ({lg['over_cutoff_share']:.1%}) exceed cutoff_len {lg['cutoff_len']}"
        + (f" [{escape(lg['note'])}]" if lg["note"] else "")
    )
    for note in summary.tied_embeddings.get("notes") or []:
        console.print(f"note: {escape(note)}", soft_wrap=True)
    for w in summary.warnings:
        console.print(f"[yellow]warning:[/] {escape(w)}", soft_wrap=True)


def export(
    collect_dir: Path = _COLLECT,
    out: Path = option(
        Path("runs/sft/export"),
        metavar="DIR",
        help="Export directory: data/, train_lora.yaml, merge_lora.yaml (default runs/sft/export).",
    ),
    bench: Optional[Path] = typer.Option(
        None, metavar="DIR", help="Benchmark whose test split is checked (default: the collection's)."
    ),
    base_model: str = option(
        "Qwen/Qwen3-4B-Thinking-2507",
        metavar="NAME",
        help="Hub id or local path (default Qwen/Qwen3-4B-Thinking-2507).",
    ),
    template: str = option(
        "qwen3", metavar="NAME", help="LLaMA-Factory template: qwen3 (default) | qwen3_nothink | qwen."
    ),
    dataset: str = option(
        "shopcomp_sft", metavar="NAME", help="Dataset name in dataset_info.json (default shopcomp_sft)."
    ),
    keep: Optional[str] = _KEEP,
    min_acc: float = _MIN_ACC,
    stages: str = _STAGES,
    drop_malformed: bool = _DROP_MALFORMED,
    drop_error_calls: bool = _DROP_ERROR_CALLS,
    products: str = option(
        "assistant",
        metavar="WHERE",
        help="Test reference products fail the check when in: assistant (default) | all | none.",
    ),
    config: Optional[Path] = typer.Option(
        None,
        "--config",
        "-c",
        metavar="YAML",
        help="Base LLaMA-Factory YAML (default: the paper's settings, configs/sft/qwen3_4b_thinking_lora.yaml).",
    ),
    sets: Optional[list[str]] = typer.Option(
        None, "--set", metavar="KEY=VALUE", help="Override a training-YAML key, e.g. cutoff_len=8192; repeatable."
    ),
    drop_flagged: bool = typer.Option(
        False,
        "--drop-flagged",
        help="Leave out the trajectories in which a test task appears (each is listed) instead of failing.",
    ),
    tokenizer: Optional[str] = typer.Option(
        None,
        "--tokenizer",
        metavar="PATH",
        help="Tokenizer that measures example lengths (default: the model's; estimated when it is not local).",
    ),
    max_truncated_share: float = option(
        0.05,
        "--max-truncated-share",
        metavar="X",
        help="Refuse when more than this share of examples exceed cutoff_len, in [0, 1] (default 0.05).",
    ),
    allow_truncation: bool = typer.Option(
        False, "--allow-truncation", help="Write the config even when cutoff_len cuts more than that share."
    ),
    examples_kind: str = option(
        "step",
        "--examples",
        metavar="KIND",
        help="step: one example per assistant turn (the paper); trajectory: one per kept stage with every turn "
        "a target (mask_history false; the same targets, about 1/turns of the tokens).",
    ),
) -> None:
    """Write LLaMA-Factory ShareGPT-with-tools data, dataset_info.json and LoRA YAMLs; fails when a
    test-split task appears in the data (or drops those trajectories with --drop-flagged), and when
    cutoff_len would cut more than --max-truncated-share of the examples.

    Exit status: 0 written; 2 a configuration or data error (nothing written)."""
    from shopping_companion.assembly.data import load_benchmark
    from shopping_companion.config import load_config
    from shopping_companion.errors import ContaminationError
    from shopping_companion.sft.export import export_dataset

    if products not in ("assistant", "all", "none"):
        raise ConfigError(f"--products must be assistant, all or none; got {products!r}")
    if examples_kind not in ("step", "trajectory"):
        raise ConfigError(f"--examples must be step or trajectory; got {examples_kind!r}")
    overrides = _yaml_overrides(sets)
    base_config = load_config(config) if config is not None else None  # ConfigError names the file
    if not collect_dir.is_dir():
        raise DataError(
            f"--collect {collect_dir}: no such directory (run `shopcomp sft collect --out {collect_dir}` first)"
        )
    manifest = _manifest(collect_dir)
    bench = bench or _collect_bench(collect_dir, manifest)
    t0 = time.perf_counter()
    b = load_benchmark(bench)
    kept, examples = _load_examples(collect_dir, keep, min_acc, stages, drop_malformed, drop_error_calls)
    if examples_kind == "trajectory":
        from shopping_companion.sft.examples import trajectory_examples

        examples, left_out = trajectory_examples(examples)
        overrides.setdefault("mask_history", "false")
        if left_out:
            console.print(
                f"note: {left_out} kept stage(s) with a turn that is not a target are left out", soft_wrap=True
            )
    provenance = {
        "collect": str(collect_dir.resolve()),
        "bench": str(bench),
        "collect_identity": manifest.get("identity"),
        "keep": (manifest.get("keep") if keep is None else {"rule": keep, "min_acc": min_acc, "stages": stages}),
        "kept_stages": len(kept),
    }
    try:
        summary = export_dataset(
            examples,
            out,
            test_tasks=[t for t in b.tasks if t.split == "test"],
            train_tasks=[t for t in b.tasks if t.split == "train"],
            sessions=b.sessions,
            template=template,
            base_model=base_model,
            dataset=dataset,
            products=products,  # type: ignore[arg-type]
            overrides=overrides,
            base_config=base_config,
            provenance=provenance,
            drop_flagged=drop_flagged,
            tokenizer=tokenizer,
            max_truncated_share=max_truncated_share,
            allow_truncation=allow_truncation,
        )
    except ContaminationError as e:
        e.args = (f"{e} Or pass --drop-flagged to leave those trajectories out (each is listed).",)
        raise
    except OSError as e:
        raise DataError(f"--out {out}: cannot write the export ({e})") from None
    _print_summary(summary, len(kept))
    console.print(f"→ {escape(str(summary.train_yaml))} ({time.perf_counter() - t0:.1f}s)")
