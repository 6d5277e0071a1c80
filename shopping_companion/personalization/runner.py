"""Run the assistant variants over a built dataset (`shopcomp personalize run`).

``dialogues.jsonl`` gets one record per (case, variant, memory mode) — the whole dialogue with
every :class:`~.agents.TurnRecord` — appended, flushed and fsynced as each dialogue finishes. A
rerun skips keys already present without an error (errored dialogues are retried). ``run.json``
holds the run identity (engine, embedder, retrieval depths, dataset manifest hash); resuming with
a different identity raises :class:`ConfigError` instead of mixing results, and so does a non-empty
``dialogues.jsonl`` whose ``run.json`` is missing or corrupt (unless ``force=True`` adopts the
current identity). While a run writes it holds an exclusive ``flock`` on ``dialogues.jsonl``
itself, so a second writer is refused even if files next to it are deleted, and a
``dialogues.jsonl`` deleted or replaced during the run stops it
(:class:`~shopping_companion.errors.RunFileReplacedError`). Every record is encoded and read back
before it is written; one that fails is written as an error record. The run-file mechanics are
those of every runner (:mod:`shopping_companion.runs`).

By default memory ablations (Table 11) run for the ``full`` variant only; the other variants use
``memory="full"``.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Callable

import numpy as np

from shopping_companion import runs
from shopping_companion.errors import ConfigError, RunLockedError
from shopping_companion.personalization.agents import VARIANTS, Assistant, RoleEngine
from shopping_companion.personalization.build import Case, load_cases, load_item_reviews, load_items
from shopping_companion.personalization.metrics import first_hit_turn, retrieval_correct
from shopping_companion.personalization.retrieval import (
    ProductIndex,
    ReviewIndex,
    TextEmbedder,
    build_product_index,
    review_text,
)

__all__ = ["dialogue_key", "read_dialogues", "repair_torn_tail", "run_dialogues"]


def repair_torn_tail(path: str | os.PathLike[str]) -> int:
    """Make a dialogues (or judgments) JSONL file end with a newline before appending to it
    (:func:`shopping_companion.runs.repair_torn_tail`): a complete record that only lacks its newline
    is kept; a torn last line (a write interrupted by a crash or ``kill -9``) is cut off and kept in
    ``<name>.torn``, so the next record starts on its own line. Returns the number of bytes cut.
    Call under the file's lock."""
    return runs.repair_torn_tail(path, lambda raw: isinstance(json.loads(raw), dict))


def dialogue_key(rec: dict[str, Any]) -> tuple[str, str, str]:
    """``(case_id, variant, memory)``."""
    return rec["case_id"], rec["variant"], rec["memory"]


def _parse_dialogue(raw: bytes) -> dict[str, Any]:
    rec = json.loads(raw)
    if not isinstance(rec, dict) or not all(k in rec for k in ("case_id", "variant", "memory")):
        raise ValueError("not a dialogue record (a JSON object with case_id, variant and memory)")
    return rec


def read_dialogues(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Complete, readable records of a dialogues file (others are skipped); the newest per key wins."""
    out: dict[tuple, dict] = {}
    for rec in runs.scan_jsonl(path, _parse_dialogue).records:
        out[dialogue_key(rec)] = rec
    return list(out.values())


def _encode_record(rec: dict[str, Any]) -> bytes:
    """``rec`` as one UTF-8 JSON line that reads back; an unwritable record (lone surrogates, NaN,
    too deep) becomes an error record with the same key."""
    try:
        return runs.encode_verified_line(json.dumps(rec, ensure_ascii=False, allow_nan=False).encode("utf-8"))
    except (ValueError, TypeError, RecursionError) as e:
        keep = {
            k: rec.get(k)
            for k in (
                "case_id",
                "category",
                "user_id",
                "variant",
                "memory",
                "engine",
                "engine_kind",
                "embedder",
                "target_asin",
            )
        }
        keep["error"] = f"record could not be written: {type(e).__name__}: {e}"[:500]
        keep = {
            k: (_utf8(v) if isinstance(v, str) else v if v is None or isinstance(v, (int, float)) else _utf8(str(v)))
            for k, v in keep.items()
        }
        return json.dumps(keep, ensure_ascii=False, allow_nan=False).encode("utf-8") + b"\n"


def _utf8(text: str) -> str:
    return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def _identity(dataset: Path, engine: RoleEngine, embedder_name: str, k: tuple[int, int, int]) -> dict[str, Any]:
    man = (dataset / "manifest.json").read_bytes() if (dataset / "manifest.json").exists() else b""
    cases = (dataset / "cases.jsonl").read_bytes()
    return {
        "engine": engine.name,
        "engine_kind": engine.kind,
        "embedder": embedder_name,
        "k_d": k[0],
        "k_p": k[1],
        "k_r": k[2],
        "dataset_sha256": hashlib.sha256(man + cases).hexdigest()[:16],
    }


def run_dialogues(
    dataset_dir: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    engine: RoleEngine,
    embedder: TextEmbedder,
    *,
    variants: list[str] | None = None,
    memory_modes: list[str] | None = None,
    ablation_variants: tuple[str, ...] = ("full",),
    embedder_name: str = "minilm",
    k_d: int = 1,
    k_p: int = 5,
    k_r: int = 5,
    categories: list[str] | None = None,
    max_cases: int | None = None,
    concurrency: int = 1,
    record_messages: bool = False,
    progress: Callable[[dict[str, Any]], None] | None = None,
    force: bool = False,
) -> Path:
    """Run every (case, variant, memory) dialogue not yet in ``<out_dir>/dialogues.jsonl``.

    ``variants``: names (default all five); ``memory_modes``: applied to ``ablation_variants``
    (default ``["full"]``: no ablation). ``categories`` / ``max_cases``: restrict the cases.
    ``concurrency``: dialogues in flight (threads; useful with an LLM endpoint). Returns the
    dialogues path. ``force``: adopt the current identity for existing dialogues whose ``run.json``
    is missing or corrupt. Raises :class:`ConfigError` for unknown names, a foreign run identity, a
    missing or corrupt one beside existing dialogues (without ``force``; both
    :class:`~shopping_companion.errors.RunIdentityError`), or another process writing the same
    file; :class:`~shopping_companion.errors.RunFileReplacedError` when ``dialogues.jsonl`` is
    deleted or replaced while the run writes it.
    """
    dataset = Path(dataset_dir)
    out = Path(out_dir)
    if not (dataset / "cases.jsonl").is_file():
        raise ConfigError(
            f"dataset: {str(dataset / 'cases.jsonl')!r} missing; run `shopcomp personalize build --out {dataset}` first"
        )
    variants = variants or list(VARIANTS)
    for v in variants:
        if v not in VARIANTS:
            raise ConfigError(f"variants: unknown {v!r}; allowed {list(VARIANTS)}")
    memory_modes = memory_modes or ["full"]
    cases = load_cases(dataset)
    if categories:
        known = sorted({c.case.category for c in cases})
        unknown = [c for c in categories if c not in known]
        if unknown:
            raise ConfigError(f"categories: {unknown} not in the dataset; available: {', '.join(known)}")
        cases = [c for c in cases if c.case.category in set(categories)]
    if max_cases is not None:
        cases = cases[:max_cases]
    ident = _identity(dataset, engine, embedder_name, (k_d, k_p, k_r))
    out.mkdir(parents=True, exist_ok=True)
    path = out / "dialogues.jsonl"
    with ExitStack() as stack:
        try:  # the lock is on the results file itself, not on a side file
            fh = stack.enter_context(runs.exclusive(path, what="personalization run", option="--out"))
        except RunLockedError:
            raise ConfigError(
                f"run: another process is writing {path}; wait for it to finish or use another --out"
            ) from None
        runs.check_identity(path, ident, force, identity_file=out / "run.json", option="--out")
        repair_torn_tail(path)  # an interrupted run may have left half a line
        return _run_locked(
            path,
            fh,
            cases,
            dataset,
            engine,
            embedder,
            variants,
            memory_modes,
            ablation_variants,
            embedder_name,
            k_d,
            k_p,
            k_r,
            concurrency,
            record_messages,
            progress,
        )


def _run_locked(
    path: Path,
    fh: Any,
    cases: list[Case],
    dataset: Path,
    engine: RoleEngine,
    embedder: TextEmbedder,
    variants: list[str],
    memory_modes: list[str],
    ablation_variants: tuple[str, ...],
    embedder_name: str,
    k_d: int,
    k_p: int,
    k_r: int,
    concurrency: int,
    record_messages: bool,
    progress: Callable[[dict[str, Any]], None] | None,
) -> Path:
    done = {dialogue_key(r) for r in read_dialogues(path) if not r.get("error")}
    jobs = [
        (c, v, m)
        for c in cases
        for v in variants
        for m in (memory_modes if v in ablation_variants else ["full"])
        if (c.case.case_id, v, m) not in done
    ]
    indexes: dict[str, tuple[ProductIndex, dict]] = {}

    def index_for(cat: str) -> tuple[ProductIndex, dict]:
        if cat not in indexes:
            items = load_items(dataset, cat)
            indexes[cat] = (build_product_index(items, load_item_reviews(dataset, cat), embedder), items)
        return indexes[cat]

    # build indexes up front (single-threaded; the embedder cache is shared)
    for cat in sorted({c.case.category for c, _, _ in jobs}):
        index_for(cat)
    review_idx: dict[str, ReviewIndex] = {}
    for c in {c.case.case_id: c for c, _, _ in jobs}.values():
        revs = c.case.visible_reviews
        vecs = embedder.encode([review_text(r) for r in revs]) if revs else np.zeros((0, 1), np.float32)
        review_idx[c.case.case_id] = ReviewIndex(revs, vecs)

    def one(job: tuple[Case, str, str]) -> dict[str, Any]:
        c, v, m = job
        pidx, items = indexes[c.case.category]
        t0 = time.perf_counter()
        rec: dict[str, Any] = {
            "case_id": c.case.case_id,
            "category": c.case.category,
            "user_id": c.case.user_id,
            "variant": v,
            "memory": m,
            "engine": engine.name,
            "engine_kind": engine.kind,
            "embedder": embedder_name,
            "target_asin": c.case.target_asin,
            "target_title": c.target_item.title,
            "title_source": c.target_item.title_source,
            "error": None,
        }
        a = Assistant(
            v,
            m,
            engine,
            embedder,
            pidx,
            items,
            review_idx[c.case.case_id],
            k_d=k_d,
            k_p=k_p,
            k_r=k_r,
            record_messages=record_messages,
        )
        try:
            a.run(c.trajectory.queries)
        except Exception as e:  # noqa: BLE001 - recorded per dialogue; the run goes on
            rec["error"] = f"{type(e).__name__}: {e}"[:500]
        turns = a.turns
        rec["turns"] = [t.model_dump(exclude_none=True) for t in turns]
        rec["n_turns"] = len(turns)
        rec["first_hit_turn"] = first_hit_turn([t.retrieved for t in turns], c.case.target_asin)
        rec["first_rec_hit_turn"] = first_hit_turn([t.recommended for t in turns], c.case.target_asin)
        ok, best = retrieval_correct(c.target_item.title, [t.reply for t in turns])
        rec["overlap_max"], rec["retrieval_correct"] = best, ok
        rec["wall_s"] = time.perf_counter() - t0
        return rec

    def write(rec: dict[str, Any]) -> None:
        runs.append_line(fh, path, _encode_record(rec))
        if progress:
            progress(rec)

    if concurrency <= 1:
        for j in jobs:
            write(one(j))
    else:
        with ThreadPoolExecutor(concurrency) as ex:
            for rec in ex.map(one, jobs):
                write(rec)
    return path
