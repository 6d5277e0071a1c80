"""Build the personalisation benchmark dataset (paper §3.3, §4; `shopcomp personalize build`).

Layout of the output directory::

    manifest.json              config, sources (path, sha256, load report), per-category counts,
                               profile builder, query generator, image-description status
    cases.jsonl                one line per target user: the case (visible reviews, hidden target
                               review), the profile, the query trajectory and the target item
    items/<Category>.jsonl     candidate pool D^prd of the category (ItemRecord per line)
    item_reviews/<Category>.jsonl  visible reviews per item used for e^r (target reviews removed,
                               at most ``max_reviews_per_item`` per item, most helpful first)

``cases.jsonl`` is appended case by case and a rerun skips finished cases (LLM profile and query
generation are the slow part); the other files are rewritten each time from the sources.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Callable, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from shopping_companion.errors import ConfigError
from shopping_companion.personalization.config import SectionLoader
from shopping_companion.personalization.data import (
    ItemRecord,
    Review,
    build_items,
    iter_reviews_2023,
    load_meta_2023,
    load_multicategory_histories,
    load_user_histories_2023,
)
from shopping_companion.personalization.profiles import ProfileBuilder, RuleProfileBuilder, UserProfile
from shopping_companion.personalization.queries import QueryGenerator, QueryTrajectory, TemplateQueryGenerator
from shopping_companion.personalization.selection import SelectionConfig, UserCase, select_cases, visible_corpus
from shopping_companion.personalization.text import aspects_in, product_type
from shopping_companion.runs import file_sha256, write_lines_atomic

__all__ = [
    "BuildConfig",
    "Case",
    "SourceConfig",
    "build_dataset",
    "load_cases",
    "load_items",
    "load_item_reviews",
    "load_build_config",
]


class SourceConfig(BaseModel):
    """One input file. ``kind``: ``reviews`` (official ``<Category>.jsonl[.gz]``; ``category``
    defaults to the file name's), ``user_histories`` (``category`` required), ``multicategory``
    (``categories``: keep these, None = all). ``meta``: optional ``meta_<Category>.jsonl[.gz]``
    (for ``reviews`` / ``user_histories``). Relative paths are relative to the data directory."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["reviews", "user_histories", "multicategory"]
    path: str
    category: str | None = None
    categories: list[str] | None = None
    meta: str | None = None

    @model_validator(mode="after")
    def _check(self) -> SourceConfig:
        if self.kind == "user_histories" and not self.category:
            raise ValueError("category: required for kind 'user_histories' (e.g. 'Beauty')")
        return self


class BuildConfig(BaseModel):
    """Build settings (paper defaults); YAML in ``configs/personalization/``."""

    model_config = ConfigDict(extra="forbid")
    sources: list[SourceConfig] = Field(min_length=1)
    selection: SelectionConfig = Field(default_factory=SelectionConfig)
    max_reviews_per_item: int = Field(default=10, ge=1)
    seed: int = 0


#: The resolved ``personalize build`` config: the ``build:`` section as a :class:`BuildConfig`
#: (:class:`~shopping_companion.personalization.config.SectionLoader`; default file
#: ``configs/personalization/default.yaml``).
load_build_config = SectionLoader(BuildConfig, "build")


class Case(BaseModel):
    """One benchmark instance: the user case, profile, trajectory and target item."""

    model_config = ConfigDict(extra="forbid")
    case: UserCase
    profile: UserProfile
    profile_builder: str
    trajectory: QueryTrajectory
    target_item: ItemRecord


def _resolve(data_dir: Path, p: str) -> Path:
    q = Path(p).expanduser()
    return q if q.is_absolute() else data_dir / q


def _load_source(src: SourceConfig, data_dir: Path) -> tuple[dict[str, list[Review]], dict[str, Any], dict[str, dict]]:
    path = _resolve(data_dir, src.path)
    if src.kind == "reviews":
        from shopping_companion.personalization.data import ReviewLoadReport

        rep = ReviewLoadReport(str(path))
        reviews = list(iter_reviews_2023(path, src.category, rep))
    elif src.kind == "user_histories":
        reviews, rep = load_user_histories_2023(path, src.category or "")
    else:
        reviews, rep = load_multicategory_histories(path, src.categories)
    by_cat: dict[str, list[Review]] = defaultdict(list)
    for r in reviews:
        by_cat[r.category].append(r)
    metas: dict[str, dict] = {}
    info: dict[str, Any] = {
        "kind": src.kind,
        "path": str(path),
        "sha256": file_sha256(path),
        "n_records": rep.n_records,
        "n_loaded": rep.n_loaded,
        "rejected": rep.bad,
    }
    if src.meta:
        mp = _resolve(data_dir, src.meta)
        for cat, revs in by_cat.items():
            meta, mrep = load_meta_2023(mp, cat, {r.parent_asin for r in revs})
            metas[cat] = meta
            info["meta"] = {
                "path": str(mp),
                "sha256": file_sha256(mp),
                "n_lines": mrep.n_lines,
                "n_matched": len(meta),
                "rejected": mrep.bad,
            }
    return by_cat, info, metas


def load_cases(out_dir: str | os.PathLike[str]) -> list[Case]:
    """Every case of a built dataset, in file order (a torn last line is ignored)."""
    p = Path(out_dir) / "cases.jsonl"
    if not p.is_file():
        raise ConfigError(f"dataset: {str(p)!r} missing; run `shopcomp personalize build` first")
    out = []
    for line in p.read_text(encoding="utf-8").splitlines():
        try:
            out.append(Case.model_validate_json(line))
        except ValueError:
            continue
    return out


def load_items(out_dir: str | os.PathLike[str], category: str) -> dict[str, ItemRecord]:
    """The candidate pool of ``category`` by ASIN."""
    p = Path(out_dir) / "items" / f"{category}.jsonl"
    return {
        it.asin: it
        for it in (
            ItemRecord.model_validate_json(line) for line in p.read_text(encoding="utf-8").splitlines() if line.strip()
        )
    }


def load_item_reviews(out_dir: str | os.PathLike[str], category: str) -> dict[str, list[Review]]:
    """Visible item reviews of ``category`` by ASIN."""
    p = Path(out_dir) / "item_reviews" / f"{category}.jsonl"
    out: dict[str, list[Review]] = defaultdict(list)
    for line in p.read_text(encoding="utf-8").splitlines():
        if line.strip():
            r = Review.model_validate_json(line)
            out[r.parent_asin].append(r)
    return dict(out)


def _write_jsonl(path: Path, rows: list[BaseModel]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_lines_atomic(path, (r.model_dump_json() for r in rows))


def build_dataset(
    config: BuildConfig,
    data_dir: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    profile_builder: ProfileBuilder | None = None,
    query_generator: QueryGenerator | None = None,
    describe: Callable[[dict[str, ItemRecord]], dict[str, int]] | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Build (or resume) the dataset in ``out_dir``; returns the manifest dict (module docstring).

    ``profile_builder`` defaults to :class:`RuleProfileBuilder`, ``query_generator`` to
    :class:`TemplateQueryGenerator` (seeded by ``config.seed``). ``describe``: fills image
    descriptions of a category's items (:func:`.vision.describe_images` bound to an endpoint);
    None records ``image_descriptions: "absent (no vision-language endpoint)"``.
    """
    data = Path(data_dir)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    pb = profile_builder or RuleProfileBuilder()
    qg = query_generator or TemplateQueryGenerator(seed=config.seed)
    say = progress or (lambda s: None)
    cases_path = out / "cases.jsonl"
    done: set[str] = set()
    if cases_path.exists():
        for c in load_cases(out):
            done.add(c.case.case_id)
    manifest: dict[str, Any] = {
        "config": config.model_dump(),
        "sources": [],
        "categories": {},
        "profile_builder": pb.name,
        "query_generator": qg.name,
        "built_at": time.time(),
        "image_descriptions": {},
    }
    t0 = time.perf_counter()
    with open(cases_path, "a", encoding="utf-8") as fh:
        for src in config.sources:
            by_cat, info, metas = _load_source(src, data)
            manifest["sources"].append(info)
            for cat in sorted(by_cat):
                reviews = by_cat[cat]
                try:
                    cases = select_cases(reviews, cat, config.selection)
                except ConfigError:
                    continue
                hidden = {c.target_review.review_id for c in cases} | {
                    r.review_id
                    for c in cases
                    for r in reviews
                    if r.user_id == c.user_id and r.parent_asin == c.target_asin
                }
                items = build_items(cat, reviews, metas.get(cat), hidden=hidden)
                if describe is not None:
                    manifest["image_descriptions"][cat] = describe(items)
                else:
                    manifest["image_descriptions"][cat] = {
                        "status": "absent (no vision-language endpoint)",
                        "items_with_images": sum(bool(i.image_urls) for i in items.values()),
                    }
                vis = visible_corpus(reviews, cases)
                by_item: dict[str, list[Review]] = defaultdict(list)
                for r in vis:
                    by_item[r.parent_asin].append(r)
                kept = [
                    r
                    for a in sorted(by_item)
                    for r in sorted(by_item[a], key=lambda r: (-r.helpful_vote, r.review_id))[
                        : config.max_reviews_per_item
                    ]
                ]
                _write_jsonl(out / "items" / f"{cat}.jsonl", [items[a] for a in sorted(items)])
                _write_jsonl(out / "item_reviews" / f"{cat}.jsonl", kept)
                titles = [it.title for it in items.values() if it.title_source != "reviews"]
                cat_aspects = [a for a, _ in sum((aspects_in(r.content) for r in vis[:400]), Counter()).most_common(6)]
                n_new = 0
                for c in cases:
                    if c.case_id in done:
                        continue
                    target = items[c.target_asin]
                    prof = pb.build(c.visible_reviews, items)
                    pt = (
                        product_type(target.title, cat, titles, target.brand)
                        if target.title_source != "reviews"
                        else product_type("", cat)
                    )
                    traj = qg.generate(c.case_id, target, prof, pt, cat_aspects)
                    rec = Case(case=c, profile=prof, profile_builder=pb.name, trajectory=traj, target_item=target)
                    fh.write(rec.model_dump_json() + "\n")
                    fh.flush()
                    os.fsync(fh.fileno())
                    done.add(c.case_id)
                    n_new += 1
                manifest["categories"][cat] = {
                    "source": src.kind,
                    "users_with_reviews": len({r.user_id for r in reviews}),
                    "target_users": len(cases),
                    "items": len(items),
                    "reviews": len(reviews),
                    "visible_item_reviews": len(kept),
                    "title_sources": dict(Counter(i.title_source for i in items.values())),
                }
                say(f"{cat}: {len(cases)} users ({n_new} new), {len(items)} items, {len(reviews)} reviews")
    all_cases = load_cases(out)
    for cat, st in manifest["categories"].items():
        cs = [c for c in all_cases if c.case.category == cat]
        st["trajectories"] = len(cs)
        st["queries"] = sum(len(c.trajectory.queries) for c in cs)
    manifest["n_cases"] = len(all_cases)
    manifest["build_s"] = round(time.perf_counter() - t0, 2)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True, default=str), encoding="utf-8")
    return manifest
