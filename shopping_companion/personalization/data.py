"""Amazon Reviews 2023 review, metadata and user-history files -> reviews and item records.

Paper: "Personalization Matters" §4 and App. A.1 (Amazon Reviews 2023, Hou et al. 2024).

Inputs (all JSON lines, gzip allowed, detected by magic bytes):

``reviews``         the official 2023 review file ``<Category>.jsonl[.gz]``: one review a line with
                    ``rating, title, text, images, asin, parent_asin, user_id, timestamp,
                    helpful_vote, verified_purchase`` (``timestamp`` in Unix milliseconds).
``meta``            the official 2023 metadata file ``meta_<Category>.jsonl[.gz]``, read with the
                    catalog loader (:func:`shopping_companion.catalog.sources.iter_amazon2023`).
``user_histories``  ``{user_id, history: [official review], target: official review}`` per line
                    (``shared/data/reviews/amazon2023_Beauty_user_histories.jsonl.gz``); history
                    and target are pooled: target selection is ours (:mod:`.selection`).
``multicategory``   ``{user_id, category, history: [{parent_asin, rating, timestamp_ms,
                    review_title, review_full, product: {title, brand, price, main_category}}],
                    heldout: {...}}`` per line; history and heldout are pooled, and the ``product``
                    block becomes the item's title/brand/price (``title_source="history"``).

Every loader returns :class:`Review` records and a :class:`ReviewLoadReport` that counts rejected
records by reason (never silently dropped). Item records (:class:`ItemRecord`) come from metadata
where present, else from the product block of history files, else from what the review files carry
(``title_source="reviews"``: a placeholder title naming the category and ASIN, the most helpful
review titles as description); the source of each title is recorded so that title-based metrics
can be restricted to real titles.

Downloads: :func:`fetch_category_files` fetches ``<Category>.jsonl`` and ``meta_<Category>.jsonl``
from the McAuley Lab release on the Hugging Face hub through
:func:`shopping_companion.catalog.download.fetch_amazon2023` (checksums, progress, cache).
"""

from __future__ import annotations

import json
import os
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from shopping_companion.catalog.loader import LoadReport, open_text
from shopping_companion.errors import ConfigError

__all__ = [
    "ItemRecord",
    "Review",
    "ReviewLoadReport",
    "SourceKind",
    "SOURCE_KINDS",
    "build_items",
    "category_from_review_path",
    "fetch_category_files",
    "iter_reviews_2023",
    "load_meta_2023",
    "load_multicategory_histories",
    "load_user_histories_2023",
]

SourceKind = Literal["reviews", "user_histories", "multicategory"]
#: Allowed values of a source's ``kind``.
SOURCE_KINDS: tuple[str, ...] = get_args(SourceKind)


class Review(BaseModel):
    """One user review (official 2023 fields, normalised).

    ``rating`` in [1, 5] stars; ``timestamp`` in Unix milliseconds; ``review_id`` is
    ``<user_id>:<parent_asin>:<timestamp>`` (unique in every file of the release we checked;
    duplicates are counted and dropped). ``product`` carries the item fields a history file gives
    with the review (title, brand, price, main_category), else None.
    """

    model_config = ConfigDict(extra="forbid")
    review_id: str
    user_id: str
    parent_asin: str
    asin: str | None = None
    category: str
    rating: float = Field(ge=1, le=5)
    title: str = ""
    text: str = ""
    timestamp: int = 0
    helpful_vote: int = 0
    verified_purchase: bool | None = None
    image_urls: list[str] = Field(default_factory=list)
    product: dict[str, Any] | None = None

    @property
    def content(self) -> str:
        """``"<title>. <text>"`` with HTML line breaks removed (what embeddings and prompts see)."""
        t = _clean_html(self.text)
        return f"{self.title.strip()}. {t}".strip(". ").strip() if self.title.strip() else t


class ItemRecord(BaseModel):
    """A candidate product of a category (the retrieval pool D^prd of Eq. 8).

    ``title_source``: ``"metadata"`` (a ``meta_<Category>`` record), ``"history"`` (the product
    block of a history file) or ``"reviews"`` (no product title known: a placeholder).
    ``image_urls``: product images from metadata (none otherwise). ``image_description``: text
    from a vision-language model (:mod:`.vision`), None when not produced.
    """

    model_config = ConfigDict(extra="forbid")
    asin: str
    category: str
    title: str
    title_source: Literal["metadata", "history", "reviews"]
    brand: str | None = None
    price: float | None = None
    categories: list[str] = Field(default_factory=list)
    features: list[str] = Field(default_factory=list)
    description: str | None = None
    average_rating: float | None = None
    rating_number: float | None = None
    image_urls: list[str] = Field(default_factory=list)
    image_description: str | None = None

    def metadata_text(self, max_chars: int = 1200) -> str:
        """Title, brand, price, category path, features and description as one text (for e^m)."""
        parts = [self.title]
        if self.brand:
            parts.append(f"Brand: {self.brand}")
        if self.price is not None:
            parts.append(f"Price: ${self.price:.2f}")
        if self.categories:
            parts.append("Category: " + " > ".join(self.categories))
        if self.features:
            parts.append("Features: " + " ".join(self.features))
        if self.description:
            parts.append(self.description)
        return "\n".join(parts)[:max_chars]


@dataclass
class ReviewLoadReport:
    """Counts of one load: ``n_records`` read, ``n_loaded`` kept, ``bad`` rejected by reason
    (``invalid_json``, ``not_an_object``, ``missing_user_id``, ``missing_parent_asin``,
    ``invalid_rating``, ``duplicate_review``, ``empty_line``) with up to 20 ``examples``."""

    path: str
    n_records: int = 0
    n_loaded: int = 0
    bad: dict[str, int] = field(default_factory=dict)
    examples: list[tuple[int, str, str]] = field(default_factory=list)

    def reject(self, lineno: int, reason: str, detail: str = "") -> None:
        self.bad[reason] = self.bad.get(reason, 0) + 1
        if len(self.examples) < 20:
            self.examples.append((lineno, reason, detail[:120]))


_BR = re.compile(r"<br\s*/?>", re.I)
_TAG = re.compile(r"<[^>]+>")
_CAT_RE = re.compile(r"(?:amazon2023_)?([A-Za-z0-9_]+?)\.jsonl(?:\.gz)?$")


def _clean_html(s: str) -> str:
    return re.sub(r"\s+", " ", _TAG.sub(" ", _BR.sub(" ", s or ""))).strip()


def category_from_review_path(path: str | os.PathLike[str]) -> str | None:
    """``"Subscription_Boxes"`` from ``Subscription_Boxes.jsonl[.gz]`` or
    ``amazon2023_Subscription_Boxes.jsonl.gz``; None for ``meta_*`` files or other names."""
    name = Path(path).name
    if name.startswith("meta_"):
        return None
    m = _CAT_RE.fullmatch(name)
    return m.group(1) if m else None


def _json_records(path: Path, report: ReviewLoadReport) -> Iterator[tuple[int, dict]]:
    if not path.is_file():
        raise FileNotFoundError(f"review file {str(path)!r} does not exist")
    with open_text(path) as fh:
        for lineno, line in enumerate(fh, 1):
            report.n_records += 1
            if not line.strip():
                report.reject(lineno, "empty_line")
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                report.reject(lineno, "invalid_json", str(e))
                continue
            if not isinstance(obj, dict):
                report.reject(lineno, "not_an_object", type(obj).__name__)
                continue
            yield lineno, obj


def _image_urls(images: Any) -> list[str]:
    out = []
    for im in images or []:
        if isinstance(im, dict):
            u = im.get("large_image_url") or im.get("medium_image_url") or im.get("large") or im.get("hi_res")
            if isinstance(u, str) and u:
                out.append(u)
        elif isinstance(im, str):
            out.append(im)
    return out


def _official_review(obj: dict, category: str) -> Review:
    """Official 2023 review dict -> Review; raises ValueError(reason, detail)."""
    uid = obj.get("user_id")
    if not isinstance(uid, str) or not uid.strip():
        raise ValueError("missing_user_id", repr(uid))
    pa = obj.get("parent_asin") or obj.get("asin")
    if not isinstance(pa, str) or not pa.strip():
        raise ValueError("missing_parent_asin", repr(obj.get("parent_asin")))
    r = obj.get("rating")
    if isinstance(r, bool) or not isinstance(r, (int, float)) or not 1 <= float(r) <= 5:
        raise ValueError("invalid_rating", repr(r))
    ts = obj.get("timestamp", obj.get("timestamp_ms", 0))
    return Review(
        review_id=f"{uid}:{pa}:{int(ts or 0)}",
        user_id=uid,
        parent_asin=pa,
        asin=obj.get("asin") if isinstance(obj.get("asin"), str) else None,
        category=category,
        rating=float(r),
        title=str(obj.get("title") or ""),
        text=_clean_html(str(obj.get("text") or "")),
        timestamp=int(ts or 0),
        helpful_vote=int(obj.get("helpful_vote") or 0),
        verified_purchase=obj.get("verified_purchase") if isinstance(obj.get("verified_purchase"), bool) else None,
        image_urls=_image_urls(obj.get("images")),
    )


def _add(review: Review, seen: set[str], out: list[Review], report: ReviewLoadReport, lineno: int) -> None:
    if review.review_id in seen:
        report.reject(lineno, "duplicate_review", review.review_id)
        return
    seen.add(review.review_id)
    out.append(review)
    report.n_loaded += 1


def iter_reviews_2023(
    path: str | os.PathLike[str], category: str | None = None, report: ReviewLoadReport | None = None
) -> Iterator[Review]:
    """Stream :class:`Review` records from an official 2023 review file (module docstring).

    ``category`` defaults to the one in the file name; raises :class:`ConfigError` when neither
    gives one, ``FileNotFoundError`` for a missing file. Rejected lines are counted in ``report``.
    """
    p = Path(path)
    cat = category or category_from_review_path(p)
    if not cat:
        raise ConfigError(f"category: cannot infer it from {p.name!r}; pass category= (e.g. 'All_Beauty')")
    report = report if report is not None else ReviewLoadReport(str(p))
    seen: set[str] = set()
    for lineno, obj in _json_records(p, report):
        try:
            rv = _official_review(obj, cat)
        except ValueError as e:
            report.reject(lineno, *[str(a) for a in e.args])
            continue
        if rv.review_id in seen:
            report.reject(lineno, "duplicate_review", rv.review_id)
            continue
        seen.add(rv.review_id)
        report.n_loaded += 1
        yield rv


def _history_entries(obj: dict, last: str, lineno: int, report: ReviewLoadReport) -> Iterator[dict]:
    """The review objects of one user line: its ``history`` list, then its ``last`` entry
    (``target`` / ``heldout``) when that is an object; a history entry that is not an object is
    rejected in ``report`` (``not_an_object``)."""
    recs = list(obj.get("history") or [])
    if isinstance(obj.get(last), dict):
        recs.append(obj[last])
    for rec in recs:
        if not isinstance(rec, dict):
            report.reject(lineno, "not_an_object", type(rec).__name__)
            continue
        yield rec


def load_user_histories_2023(path: str | os.PathLike[str], category: str) -> tuple[list[Review], ReviewLoadReport]:
    """Reviews of a ``{user_id, history, target}`` file (history and target pooled).

    ``category``: the name given to every review (e.g. ``"Beauty"``). A history entry that is
    not a valid official review is counted in the report (reason as in :func:`iter_reviews_2023`).
    """
    p = Path(path)
    report = ReviewLoadReport(str(p))
    out: list[Review] = []
    seen: set[str] = set()
    for lineno, obj in _json_records(p, report):
        for rec in _history_entries(obj, "target", lineno, report):
            rec = dict(rec)
            rec.setdefault("user_id", obj.get("user_id"))
            try:
                rv = _official_review(rec, category)
            except ValueError as e:
                report.reject(lineno, *[str(a) for a in e.args])
                continue
            _add(rv, seen, out, report, lineno)
    return out, report


def load_multicategory_histories(
    path: str | os.PathLike[str], categories: Iterable[str] | None = None
) -> tuple[list[Review], ReviewLoadReport]:
    """Reviews of a ``{user_id, category, history, heldout}`` file (history and heldout pooled).

    ``categories``: keep only these (None: all). Each review's ``product`` block is kept.
    """
    p = Path(path)
    keep = set(categories) if categories is not None else None
    report = ReviewLoadReport(str(p))
    out: list[Review] = []
    seen: set[str] = set()
    for lineno, obj in _json_records(p, report):
        cat = obj.get("category")
        if not isinstance(cat, str) or not cat:
            report.reject(lineno, "missing_category", repr(cat))
            continue
        if keep is not None and cat not in keep:
            continue
        for rec in _history_entries(obj, "heldout", lineno, report):
            off = {
                "user_id": obj.get("user_id"),
                "parent_asin": rec.get("parent_asin"),
                "rating": rec.get("rating"),
                "title": rec.get("review_title"),
                "text": rec.get("review_full") or rec.get("review_excerpt"),
                "timestamp": rec.get("timestamp_ms", 0),
            }
            try:
                rv = _official_review(off, cat)
            except ValueError as e:
                report.reject(lineno, *[str(a) for a in e.args])
                continue
            prod = rec.get("product")
            if isinstance(prod, dict):
                rv.product = {k: prod.get(k) for k in ("title", "brand", "price", "main_category")}
            _add(rv, seen, out, report, lineno)
    return out, report


def load_meta_2023(
    path: str | os.PathLike[str], category: str | None = None, asins: set[str] | None = None
) -> tuple[dict[str, ItemRecord], LoadReport]:
    """Item records from an official ``meta_<Category>.jsonl[.gz]`` file via the catalog loader.

    ``asins``: keep only these parent ASINs (None: all). Returns ``({parent_asin: ItemRecord},
    LoadReport)``; rejected records are counted in the report as the catalog loader does.
    """
    from shopping_companion.catalog.sources import amazon2023_category, iter_amazon2023

    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"metadata file {str(p)!r} does not exist")
    cat = category or amazon2023_category(p) or "unknown"
    report = LoadReport(str(p))
    raw_images: dict[str, list[str]] = {}
    out: dict[str, ItemRecord] = {}
    for prod in iter_amazon2023(p, report, cat):
        asin = prod.product_id.split(":", 1)[1]
        if asins is not None and asin not in asins:
            continue
        out[asin] = ItemRecord(
            asin=asin,
            category=cat,
            title=prod.title,
            title_source="metadata",
            brand=prod.brand,
            price=prod.price,
            categories=list(prod.category_path),
            features=list(prod.features),
            description=prod.description,
            average_rating=prod.rating,
            rating_number=prod.rating_count,
            image_urls=[prod.image] if prod.image else [],
        )
    # all image URLs (the catalog Product keeps only the first)
    if out:
        with open_text(p) as fh:
            for line in fh:
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(obj, dict) and obj.get("parent_asin") in out:
                    urls = _image_urls(obj.get("images"))
                    if urls:
                        raw_images[obj["parent_asin"]] = urls
        for a, urls in raw_images.items():
            out[a].image_urls = urls
    return out, report


def _num(v: Any) -> float | None:
    from shopping_companion.catalog.sources import parse_price

    try:
        p, _ = parse_price(v)
    except Exception:  # noqa: BLE001 - a bad price is simply unknown here
        return None
    return p


def build_items(
    category: str,
    reviews: Iterable[Review],
    meta: dict[str, ItemRecord] | None = None,
    max_description_reviews: int = 3,
    hidden: set[str] | None = None,
) -> dict[str, ItemRecord]:
    """One :class:`ItemRecord` per parent ASIN reviewed in ``category`` (module docstring).

    ``reviews``: every review of the category (so target items are in the pool). ``hidden``: review
    ids that must not be shown; a placeholder description never quotes them (a history file's
    product block is item metadata and may come from any review). ``meta``: metadata by ASIN.
    """
    hidden = hidden or set()
    by_item: dict[str, list[Review]] = defaultdict(list)
    for r in reviews:
        if r.category == category:
            by_item[r.parent_asin].append(r)
    out: dict[str, ItemRecord] = {}
    for asin, revs in by_item.items():
        if meta and asin in meta:
            out[asin] = meta[asin]
            continue
        prod = next((r.product for r in revs if r.product and r.product.get("title")), None)
        if prod:
            out[asin] = ItemRecord(
                asin=asin,
                category=category,
                title=str(prod["title"]),
                title_source="history",
                brand=prod.get("brand") or None,
                price=_num(prod.get("price")),
                categories=[prod["main_category"]] if prod.get("main_category") else [],
            )
            continue
        top = sorted(
            (r for r in revs if r.review_id not in hidden), key=lambda r: (-r.helpful_vote, -r.rating, r.review_id)
        )[:max_description_reviews]
        titles = [r.title.strip() for r in top if r.title.strip()]
        out[asin] = ItemRecord(
            asin=asin,
            category=category,
            title=f"{category.replace('_', ' ')} item {asin}",
            title_source="reviews",
            description=("Reviewers say: " + "; ".join(titles)) if titles else None,
        )
    return out


def fetch_category_files(
    category: str,
    *,
    cache: str | os.PathLike[str] | None = None,
    endpoint: str | None = None,
    meta: bool = True,
    progress: bool = True,
) -> dict[str, Path]:
    """Download (or reuse from the cache) ``<Category>.jsonl`` and, with ``meta``,
    ``meta_<Category>.jsonl`` from the McAuley Lab release. Returns ``{"reviews": path,
    "meta": path}``. Raises :class:`shopping_companion.catalog.download.DownloadError` when offline
    (the message says how to use local files instead)."""
    from shopping_companion.catalog.download import fetch_amazon2023

    out = {"reviews": fetch_amazon2023(category, "reviews", cache=cache, endpoint=endpoint, progress=progress).path}
    if meta:
        out["meta"] = fetch_amazon2023(category, "meta", cache=cache, endpoint=endpoint, progress=progress).path
    return out
