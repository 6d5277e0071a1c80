"""Catalog sources other than our ``products.jsonl.gz``, and one entry point for all of them.

:func:`load_catalog_file` reads any supported catalog file into
:class:`~shopping_companion.types.Product` records with a
:class:`~shopping_companion.catalog.loader.LoadReport`:

=============== ==========================================================================================
``format``      input
=============== ==========================================================================================
``products``    our normalised ``catalog/products.jsonl.gz`` (:mod:`shopping_companion.catalog.loader`)
``amazon2023``  Amazon Reviews 2023 item metadata, ``meta_<Category>.jsonl[.gz]`` (McAuley Lab): one
                object a line with ``parent_asin, title, main_category, price, store, features,
                description, details, categories, images, average_rating, rating_number`` (also
                ``videos, bought_together, subtitle, author``, ignored or kept as attributes)
``amazon2018``  Amazon Reviews 2018 item metadata, ``meta_<Category>.json[.gz]``: one object a line
                with ``asin, title, brand, price, category, main_cat, description, feature, details,
                image`` (``also_buy, also_view, rank, date, tech1, tech2, fit, similar_item`` ignored)
``csv``         a CSV file (``.csv``, ``.tsv``; gzip allowed) with a header row, read with a
                user-given :class:`FieldMapping`
``jsonl``       any JSON-lines file (gzip allowed), read with a :class:`FieldMapping`
``parquet``     a Parquet file, read with a :class:`FieldMapping` (needs ``pyarrow``)
=============== ==========================================================================================

``format="auto"`` picks the format from the file name and its first record (see
:func:`detect_format`). Every loader counts rejected records by reason in the report (never
silently dropped, never raised) and repaired values in ``report.fixed``; colour variants are linked
afterwards for every format (:func:`~shopping_companion.catalog.loader.link_colour_variants`).

Amazon mapping (2023 and 2018): ``product_id`` = ``amazon2023_<Category>:<parent_asin>`` (2018:
``amazon2018_<Category>:<asin>``); ``source`` = the part before the colon; ``shop`` =
``"Amazon.com"``; ``brand`` = ``store`` (2018: ``brand``); ``shop_id`` = the brand's store at
Amazon (``amazon-com/brand-<store>``, or ``amazon-com`` without a store); ``price`` in USD from a
number or a string such as ``"$12.99"`` (``None``/``""``/``"None"`` mean no price; a range
``"$5.99 - $9.99"`` keeps its lower bound and an unparseable string is dropped, both counted in
``report.fixed``); ``category_path`` = ``categories`` (2018: ``category``), else
``[main_category]``; ``details`` (a dict, or its JSON text as in the Hub's Parquet conversion)
become ``attributes`` (rankings, review counts, ASINs and shipping boilerplate dropped); detail
keys naming a variant dimension (Color, Size, Style, Flavor, Scent, Pattern, ...) also become
``options`` (``{"colour": ["Black"]}``); ``features`` and ``description`` lists are kept (the
description joined by newlines); ``rating`` = ``average_rating``, ``rating_count`` =
``rating_number``; ``image`` = the first image's large URL; ``url`` = the product page.
"""

from __future__ import annotations

import csv
import html
import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from shopping_companion.catalog.loader import (
    LOADER_VERSION,
    BadRecord,
    LoadReport,
    _clean_str,
    _clean_strs,
    open_text,
    _opt_number,
    _json_lines,
    _split_list,
    _stream,
    catalog_hash,
    collect_products,
    file_hash,
    make_product,
)
from shopping_companion.types import Product
from shopping_companion.errors import CatalogFormatError  # noqa: F401 - re-exported

#: Bump when a mapping of this module changes (part of :func:`source_hash`).
SOURCES_VERSION = 1

CatalogFormat = Literal["products", "amazon2023", "amazon2018", "csv", "jsonl", "parquet"]
FORMATS: tuple[str, ...] = ("products", "amazon2023", "amazon2018", "csv", "jsonl", "parquet")
MAPPED_FORMATS = ("csv", "jsonl", "parquet")

AMAZON_SHOP = "Amazon.com"
_MAX_EXAMPLES = 20


# --------------------------------------------------------------------------- shared record stream


# --------------------------------------------------------------------------- value helpers

_TAG = re.compile(r"<[^>]{0,2000}>")
_PRICE_NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?|\.\d+")


def _text(v: Any) -> str | None:
    """A cleaned single-line-ish text: HTML entities decoded, tags removed, whitespace collapsed."""
    s = _clean_str(v)
    if s is None:
        return None
    if "<" in s or "&" in s:
        s = _TAG.sub(" ", html.unescape(s))
    s = " ".join(s.split())
    return s if s and s.lower() not in {"na", "n/a", "none", "null", "nan", "-"} else None


def _text_list(v: Any) -> list[str]:
    if v is None:
        return []
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, (list, tuple)):
        return []
    out: list[str] = []
    for x in v:
        t = _text(x)
        if t and t not in out:
            out.append(t)
    return out


def parse_price(v: Any) -> tuple[float | None, str | None]:
    """A source price as ``(price, fix)``.

    Numbers (finite, >= 0) pass through; strings such as ``"$12.99"``, ``"12.99"``,
    ``"1,299.00"`` are parsed; ``None``, ``""``, ``"None"``, ``"-"`` mean no price
    (``(None, None)``). A range ``"$5.99 - $9.99"`` gives its lower bound with fix
    ``"price_range_lower_bound"``; anything else unparseable (e.g. scraped HTML) gives
    ``(None, "unparseable_price_dropped")``. Raises :class:`BadRecord` (``negative_price``) for a
    negative number.
    """
    if v is None or isinstance(v, bool):
        return None, None
    if isinstance(v, (int, float)):
        if not math.isfinite(float(v)):
            return None, "unparseable_price_dropped"
        if v < 0:
            raise BadRecord("negative_price", f"price={v!r}")
        return float(v), None
    if not isinstance(v, str):
        return None, "unparseable_price_dropped"
    s = v.strip()
    if not s or s.lower() in {"none", "null", "nan", "na", "n/a", "-", "—"}:
        return None, None
    if len(s) > 40:
        return None, "unparseable_price_dropped"
    if s.lstrip().startswith("-"):
        raise BadRecord("negative_price", f"price={v!r}")
    nums = _PRICE_NUMBER.findall(s)
    rest = _PRICE_NUMBER.sub("", s)
    words = set(re.findall(r"[A-Za-z]+", rest.lower())) - {"from", "to", "usd", "us"}
    if not nums or any(len(w) >= 3 for w in words):
        return None, "unparseable_price_dropped"
    vals = [float(x.replace(",", "")) for x in nums]
    if len(vals) == 1:
        return vals[0], None
    if len(vals) == 2 and re.search(r"[-–—]|\bto\b", rest):
        return min(vals), "price_range_lower_bound"
    return None, "unparseable_price_dropped"


# Detail keys that carry no product property (rankings, review counters, identifiers, shipping).
_DROP_DETAIL_KEYS = {
    "best sellers rank",
    "customer reviews",
    "asin",
    "upc",
    "domestic shipping",
    "international shipping",
    "amazon best sellers rank",
    "discontinued by manufacturer",
}

#: Detail keys (case-insensitive) naming a variant dimension -> option name.
VARIANT_DETAIL_KEYS = {
    "color": "colour",
    "colour": "colour",
    "color name": "colour",
    "size": "size",
    "size name": "size",
    "style": "style",
    "style name": "style",
    "flavor": "flavour",
    "flavour": "flavour",
    "flavor name": "flavour",
    "scent": "scent",
    "scent name": "scent",
    "pattern": "pattern",
    "pattern name": "pattern",
    "item package quantity": "package quantity",
    "number of items": "package quantity",
}


def _clean_key(k: Any) -> str | None:
    if not isinstance(k, str):
        return None
    key = " ".join(k.split()).strip().rstrip(":").strip()
    key = _text(key)
    return key or None


def _detail_value(v: Any) -> str | None:
    if isinstance(v, dict):
        parts = [f"{_clean_key(k)}: {_detail_value(x)}" for k, x in v.items() if _clean_key(k) and _detail_value(x)]
        return "; ".join(parts) or None
    if isinstance(v, (list, tuple)):
        return ", ".join(x for x in (_detail_value(y) for y in v) if x) or None
    return _text(v)


def _details(raw: Any, fixes: list[str]) -> tuple[dict[str, str], dict[str, list[str]]]:
    """``(attributes, options)`` from an Amazon ``details`` dict (or its JSON text)."""
    if raw is None or raw == "":
        return {}, {}
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError:
            fixes.append("details_not_json_dropped")
            return {}, {}
    if not isinstance(raw, dict):
        fixes.append("details_not_an_object_dropped")
        return {}, {}
    attributes: dict[str, str] = {}
    options: dict[str, list[str]] = {}
    for k, v in raw.items():
        key = _clean_key(k)
        if not key or key.lower() in _DROP_DETAIL_KEYS:
            continue
        val = _detail_value(v)
        if not val:
            continue
        attributes[key] = val
        opt = VARIANT_DETAIL_KEYS.get(key.lower())
        if opt and opt not in options:
            options[opt] = [val]
    return attributes, options


def _first_image(images: Any) -> str | None:
    if isinstance(images, list):
        for im in images:
            if isinstance(im, dict):
                for k in ("large", "hi_res", "thumb"):
                    u = _clean_str(im.get(k))
                    if u:
                        return u
            elif isinstance(im, str) and im.strip():
                return im.strip()
    return None


def _main_category(v: Any) -> str | None:
    """2018's ``main_cat`` is sometimes an ``<img ... alt="AMAZON FASHION"/>`` tag: use its alt text."""
    if isinstance(v, str) and "<img" in v:
        m = re.search(r'alt="([^"]+)"', v)
        return _text(m.group(1).title()) if m else None
    return _text(v)


def _category_path(v: Any, fallback: str | None) -> tuple[list[str], list[str]]:
    """``(category_path, sentences)``: 2018 category lists sometimes carry feature sentences
    after the category names (longer than 60 characters or ending in a full stop); those are
    returned separately. Repeated neighbouring levels are collapsed."""
    path: list[str] = []
    sentences: list[str] = []
    for c in _text_list(v):
        if len(c) > 60 or c.endswith(".") or ". " in c:
            sentences.append(c)
        elif not path or path[-1] != c:
            path.append(c)
    if not path and fallback:
        path = [fallback]
    return path, sentences


@dataclass(frozen=True)
class _AmazonSchema:
    """Which field of an Amazon Reviews metadata record holds what, per release (``rating`` /
    ``rating_count``: None where the release has no such field). ``title``, ``price``,
    ``description``, ``details`` and ``images`` / ``image`` are named alike in both."""

    release: str
    item_id: str
    brand: str
    categories: str
    features: str
    rating: str | None = None
    rating_count: str | None = None


_AMAZON2023 = _AmazonSchema(
    "amazon2023",
    item_id="parent_asin",
    brand="store",
    categories="categories",
    features="features",
    rating="average_rating",
    rating_count="rating_number",
)
_AMAZON2018 = _AmazonSchema("amazon2018", item_id="asin", brand="brand", categories="category", features="feature")


def _amazon_product(
    rec: dict,
    category: str,
    schema: _AmazonSchema,
    main_category: str | None,
    extra_attributes: dict[str, Any] | None = None,
) -> tuple[Product, list[str]]:
    """``(Product, fixes)`` of one metadata record of the release ``schema`` describes."""
    source = f"{schema.release}_{category}"
    item_id = rec.get(schema.item_id)
    asin = _clean_str(item_id)
    if not asin:
        raise BadRecord("missing_uid", f"{schema.item_id}={item_id!r}"[:80])
    pid = f"{source}:{asin}"
    title = _text(rec.get("title"))
    if not title:
        raise BadRecord("missing_title", f"{pid}: title={rec.get('title')!r}"[:120])
    fixes: list[str] = []
    try:
        p, fix = parse_price(rec.get("price"))
    except BadRecord as e:
        raise BadRecord(e.reason, f"{pid}: {e.detail}") from None
    if fix:
        fixes.append(fix)
    store = _text(rec.get(schema.brand))
    attributes, options = _details(rec.get("details"), fixes)
    for k, v in (extra_attributes or {}).items():
        val = _detail_value(v)
        if val and k not in attributes:
            attributes[k] = val
    desc_parts = _text_list(rec.get("description"))
    category_path, sentences = _category_path(rec.get(schema.categories), main_category)
    feature_list = _text_list(rec.get(schema.features))
    if sentences:
        fixes.append("category_sentences_moved_to_features")
        feature_list += [x for x in sentences if x not in feature_list]
    rating_v = _opt_number(rec.get(schema.rating) if schema.rating else None)
    if rating_v is not None and not 0 <= rating_v <= 5:
        rating_v = None
        fixes.append("rating_out_of_range_dropped")
    product = make_product(
        product_id=pid,
        title=title,
        source=source,
        shop=AMAZON_SHOP,
        seller=None,
        brand=store,
        price=p,
        currency="USD" if p is not None else None,
        category_path=category_path,
        description="\n".join(desc_parts) or None,
        features=feature_list,
        attributes=attributes,
        options=options,
        rating=rating_v,
        rating_count=_opt_number(rec.get(schema.rating_count) if schema.rating_count else None),
        url=f"https://www.amazon.com/dp/{asin}",
        image=_first_image(rec.get("images") if "images" in rec else rec.get("image")),
    )
    return product, fixes


# --------------------------------------------------------------------------- Amazon 2023 / 2018


def _category_from_name(path: Path, pattern: str) -> str | None:
    m = re.search(pattern, path.name)
    return m.group(1) if m else None


def amazon2023_category(path: str | os.PathLike[str]) -> str | None:
    """``"All_Beauty"`` from ``meta_All_Beauty.jsonl[.gz]`` (any prefix), or None."""
    return _category_from_name(Path(path), r"meta_([A-Za-z0-9_&-]+?)\.jsonl(?:\.gz)?$")


def amazon2018_category(path: str | os.PathLike[str]) -> str | None:
    """``"Gift_Cards"`` from ``meta_Gift_Cards.json[.gz]`` / ``amazon2018_meta_Gift_Cards.json.gz``."""
    return _category_from_name(Path(path), r"meta_([A-Za-z0-9_&-]+?)\.jsonl?(?:\.gz)?$")


def amazon2023_record_to_product(rec: Any, category: str) -> tuple[Product, list[str]]:
    """One Amazon Reviews 2023 metadata record -> ``(Product, fixes)`` (see the module docstring).

    ``category``: the file's category (e.g. ``"All_Beauty"``), part of the product id. Raises
    :class:`BadRecord` (``not_an_object``, ``missing_uid``, ``missing_title``, ``negative_price``).
    """
    if not isinstance(rec, dict):
        raise BadRecord("not_an_object", type(rec).__name__)
    main = _text(rec.get("main_category"))
    extra: dict[str, Any] = {}
    author = rec.get("author")
    if isinstance(author, dict):
        author = author.get("name")
    if author:
        extra["Author"] = author
    if rec.get("subtitle"):
        extra["Edition"] = rec.get("subtitle")
    return _amazon_product(rec, category, _AMAZON2023, main, extra)


def amazon2018_record_to_product(rec: Any, category: str) -> tuple[Product, list[str]]:
    """One Amazon Reviews 2018 metadata record -> ``(Product, fixes)`` (see the module docstring)."""
    if not isinstance(rec, dict):
        raise BadRecord("not_an_object", type(rec).__name__)
    return _amazon_product(rec, category, _AMAZON2018, _main_category(rec.get("main_cat")))


def iter_amazon2023(path: str | os.PathLike[str], report: LoadReport, category: str | None = None) -> Iterator[Product]:
    """Stream products from an Amazon Reviews 2023 ``meta_<Category>.jsonl[.gz]`` file.

    ``category`` defaults to the one in the file name (``"unknown"`` if there is none).
    """
    p = Path(path)
    cat = category or amazon2023_category(p) or "unknown"
    return _stream(_json_lines(p), lambda r: amazon2023_record_to_product(r, cat), report)


def iter_amazon2018(path: str | os.PathLike[str], report: LoadReport, category: str | None = None) -> Iterator[Product]:
    """Stream products from an Amazon Reviews 2018 ``meta_<Category>.json[.gz]`` file (one JSON
    object a line; the official files' Python-literal variant is not supported)."""
    p = Path(path)
    cat = category or amazon2018_category(p) or "unknown"
    return _stream(_json_lines(p), lambda r: amazon2018_record_to_product(r, cat), report)


# --------------------------------------------------------------------------- generic mapping

ColumnSpec = str | list[str] | None


class FieldMapping(BaseModel):
    """How the columns of a CSV / JSON-lines / Parquet file become :class:`Product` fields.

    Every value names a source column (a top-level key for JSON lines; a dotted path such as
    ``"meta.brand"`` reaches into nested objects). Required: ``product_id`` and ``title``.

    * ``source``: the ``Product.source`` of every row (``"custom"``); product ids become
      ``"<source>:<id>"`` unless ``prefix_ids`` is False (then ids must be unique as they are).
    * ``shop`` (a column) or ``shop_name`` (a constant for every row; default: ``source``) gives
      the retailer; ``seller`` and ``brand`` columns make the shop id
      (:func:`~shopping_companion.catalog.loader.make_shop_id`).
    * ``price`` / ``list_price``: numbers or price strings (``"$12.99"``); ``currency`` a column,
      ``currency_code`` a constant.
    * ``category_path``: one column holding a list or a string split on ``category_separator``
      (``">"``), or several columns, coarse to fine.
    * ``description``: one or several columns (joined by newlines); ``features``: columns holding a
      string or a list.
    * ``attributes``: columns kept as attributes (list: the column name is the key; dict: attribute
      name -> column); ``"*"`` keeps every column not mapped to another field.
    * ``options``: option name -> column holding a list or a ``options_separator``-separated
      string (``","``), e.g. ``{"size": "sizes"}``.
    * ``rating``, ``rating_count``, ``url``, ``image``: single columns.
    """

    model_config = ConfigDict(extra="forbid")

    product_id: str
    title: str
    source: str = "custom"
    prefix_ids: bool = True
    shop: str | None = None
    shop_name: str | None = None
    seller: str | None = None
    brand: str | None = None
    price: str | None = None
    list_price: str | None = None
    currency: str | None = None
    currency_code: str | None = None
    category_path: ColumnSpec = None
    category_separator: str = ">"
    description: ColumnSpec = None
    features: ColumnSpec = None
    attributes: list[str] | dict[str, str] | Literal["*"] | None = None
    options: dict[str, str] = Field(default_factory=dict)
    options_separator: str = ","
    rating: str | None = None
    rating_count: str | None = None
    url: str | None = None
    image: str | None = None

    @model_validator(mode="after")
    def _check(self) -> "FieldMapping":
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", self.source):
            raise ValueError(f"source: {self.source!r} must be letters, digits, '_', '.' or '-'")
        if not self.category_separator or not self.options_separator:
            raise ValueError("category_separator and options_separator must not be empty")
        return self

    def mapped_columns(self) -> set[str]:
        cols: set[str] = set()
        for name in (
            "product_id",
            "title",
            "shop",
            "seller",
            "brand",
            "price",
            "list_price",
            "currency",
            "rating",
            "rating_count",
            "url",
            "image",
        ):
            v = getattr(self, name)
            if v:
                cols.add(v)
        for spec in (self.category_path, self.description, self.features):
            if isinstance(spec, str):
                cols.add(spec)
            elif isinstance(spec, list):
                cols.update(spec)
        if isinstance(self.attributes, list):
            cols.update(self.attributes)
        elif isinstance(self.attributes, dict):
            cols.update(self.attributes.values())
        cols.update(self.options.values())
        return cols


def _get(row: dict, col: str | None) -> Any:
    if not col:
        return None
    if col in row:
        return row[col]
    if "." in col:
        cur: Any = row
        for part in col.split("."):
            if not isinstance(cur, dict) or part not in cur:
                return None
            cur = cur[part]
        return cur
    return None


def _as_list(v: Any) -> list[Any]:
    if v is None:
        return []
    if isinstance(v, (list, tuple)):
        return list(v)
    if hasattr(v, "tolist"):  # numpy arrays from parquet
        return list(v.tolist())
    return [v]


def mapped_record_to_product(row: Any, m: FieldMapping) -> tuple[Product, list[str]]:
    """One row (a dict of column -> value) -> ``(Product, fixes)`` under mapping ``m``.

    Raises :class:`BadRecord` (``not_an_object``, ``missing_uid``, ``missing_title``,
    ``negative_price``, ``invalid_price``, ``invalid_record``).
    """
    if not isinstance(row, dict):
        raise BadRecord("not_an_object", type(row).__name__)
    raw_id = _clean_str(_get(row, m.product_id))
    if not raw_id:
        raise BadRecord("missing_uid", f"{m.product_id}={_get(row, m.product_id)!r}"[:80])
    pid = f"{m.source}:{raw_id}" if m.prefix_ids else raw_id
    title = _text(_get(row, m.title))
    if not title:
        raise BadRecord("missing_title", f"{pid}: title={_get(row, m.title)!r}"[:120])
    fixes: list[str] = []
    try:
        price, fix = parse_price(_get(row, m.price))
    except BadRecord as e:
        raise BadRecord(e.reason, f"{pid}: {e.detail}") from None
    if fix == "unparseable_price_dropped":
        raise BadRecord("invalid_price", f"{pid}: price={_get(row, m.price)!r}"[:120])
    if fix:
        fixes.append(fix)
    try:
        list_price, fix = parse_price(_get(row, m.list_price))
    except BadRecord:
        list_price, fix = None, "negative_list_price"
    if fix:
        fixes.append(fix if fix == "negative_list_price" else f"list_{fix}")

    shop = _text(_get(row, m.shop)) or m.shop_name or m.source
    seller = _text(_get(row, m.seller))
    brand = _text(_get(row, m.brand))

    if isinstance(m.category_path, list):
        cats = [_text(_get(row, c)) for c in m.category_path]
        category_path = [c for c in cats if c]
    elif isinstance(m.category_path, str):
        v = _get(row, m.category_path)
        if isinstance(v, str):
            category_path = [c for c in (_text(x) for x in v.split(m.category_separator)) if c]
        else:
            category_path = _text_list(_as_list(v))
    else:
        category_path = []

    desc_cols = [m.description] if isinstance(m.description, str) else (m.description or [])
    description = "\n".join(t for t in (_text(_get(row, c)) for c in desc_cols) if t) or None
    feat_cols = [m.features] if isinstance(m.features, str) else (m.features or [])
    features: list[str] = []
    for c in feat_cols:
        for t in _text_list(_as_list(_get(row, c))):
            if t not in features:
                features.append(t)

    attributes: dict[str, str] = {}
    if m.attributes == "*":
        used = m.mapped_columns()
        attr_cols = {k: k for k in row if k not in used}
    elif isinstance(m.attributes, list):
        attr_cols = {c: c for c in m.attributes}
    else:
        attr_cols = dict(m.attributes or {})
    for key, col in attr_cols.items():
        val = _detail_value(_get(row, col))
        if val:
            attributes[key] = val

    options: dict[str, list[str]] = {}
    for name, col in m.options.items():
        v = _get(row, col)
        vals = _split_list(v) if isinstance(v, str) else _clean_strs(_as_list(v))
        vals = list(dict.fromkeys(vals))
        if vals:
            options[name] = vals

    product = make_product(
        product_id=pid,
        title=title,
        source=m.source,
        shop=shop,
        seller=seller,
        brand=brand,
        price=price,
        list_price=list_price,
        currency=_clean_str(_get(row, m.currency)) or m.currency_code,
        category_path=category_path,
        description=description,
        features=features,
        attributes=attributes,
        options=options,
        rating=_opt_number(_get(row, m.rating)),
        rating_count=_opt_number(_get(row, m.rating_count)),
        url=_clean_str(_get(row, m.url)),
        image=_clean_str(_get(row, m.image)),
    )
    return product, fixes


def _csv_rows(path: Path) -> Iterator[tuple[int, Any]]:
    delimiter = "\t" if re.search(r"\.tsv(\.gz)?$", path.name) else ","
    with open_text(path, encoding="utf-8-sig", newline="") as fh:
        reader = csv.DictReader(fh, delimiter=delimiter)
        if reader.fieldnames is None:
            return
        for n, row in enumerate(reader, 1):
            if None in row:  # more cells than header columns
                yield (
                    n,
                    BadRecord(
                        "invalid_row", f"row {n}: {len(row) - 1 + len(row[None])} cells, header has {len(row) - 1}"
                    ),
                )
                continue
            if all(v in (None, "") for v in row.values()):
                yield n, BadRecord("empty_line", "")
                continue
            yield n, {k: (v if v != "" else None) for k, v in row.items()}


def _parquet_rows(path: Path) -> Iterator[tuple[int, Any]]:
    try:
        import pyarrow.parquet as pq
    except ImportError as e:  # pragma: no cover - a declared dependency
        raise CatalogFormatError("reading parquet needs pyarrow: pip install pyarrow") from e
    n = 0
    for batch in pq.ParquetFile(path).iter_batches(batch_size=4096):
        for row in batch.to_pylist():
            n += 1
            yield n, row


def iter_mapped(
    path: str | os.PathLike[str], mapping: FieldMapping | dict, report: LoadReport, format: str
) -> Iterator[Product]:
    """Stream products from a CSV / JSON-lines / Parquet file under ``mapping``."""
    m = mapping if isinstance(mapping, FieldMapping) else FieldMapping.model_validate(mapping)
    p = Path(path)
    rows = {"csv": _csv_rows, "jsonl": _json_lines, "parquet": _parquet_rows}[format](p)
    return _stream(rows, lambda r: mapped_record_to_product(r, m), report)


# --------------------------------------------------------------------------- detection + entry point


def _first_record(path: Path) -> Any:
    try:
        with open_text(path) as fh:
            for i, line in enumerate(fh):
                if line.strip():
                    return json.loads(line)
                if i > 100:
                    break
    except (json.JSONDecodeError, UnicodeDecodeError, OSError, EOFError):
        return None
    return None


def detect_format(path: str | os.PathLike[str], mapping: FieldMapping | dict | None = None) -> str:
    """The catalog format of ``path`` (one of :data:`FORMATS`).

    ``.parquet`` -> ``parquet``; ``.csv``/``.tsv`` (optionally ``.gz``) -> ``csv``; otherwise the
    first JSON record decides: ``uid`` -> ``products``; ``parent_asin`` -> ``amazon2023``; ``asin``
    with 2018 fields (``main_cat``, ``feature``, ``also_buy``, ``category``) -> ``amazon2018``;
    any other JSON object -> ``jsonl`` (which needs a mapping). With a ``mapping``, a JSON-lines
    file is always ``jsonl``. Raises :class:`CatalogFormatError` when nothing fits.
    """
    p = Path(path)
    name = p.name.lower()
    if name.endswith(".parquet"):
        return "parquet"
    if re.search(r"\.(csv|tsv)(\.gz)?$", name):
        return "csv"
    rec = _first_record(p)
    if not isinstance(rec, dict):
        raise CatalogFormatError(
            f"cannot tell the catalog format of {str(p)!r}: its first record is not a JSON object; "
            f"pass format= one of {', '.join(FORMATS)}"
        )
    if mapping is not None:
        return "jsonl"
    if "uid" in rec:
        return "products"
    if "parent_asin" in rec:
        return "amazon2023"
    if "asin" in rec and ({"main_cat", "feature", "also_buy", "category"} & rec.keys()):
        return "amazon2018"
    return "jsonl"


def _mapping_json(mapping: FieldMapping | dict | None) -> str:
    if mapping is None:
        return "null"
    m = mapping if isinstance(mapping, FieldMapping) else FieldMapping.model_validate(mapping)
    return m.model_dump_json()


def resolve_format(
    path: str | os.PathLike[str], format: str = "auto", mapping: FieldMapping | dict | None = None
) -> str:
    """``format`` checked against :data:`FORMATS` (``"auto"``: :func:`detect_format`); raises
    :class:`CatalogFormatError` for an unknown format, a mapped format without a mapping, or a
    mapping given for a format that does not use one."""
    fmt = detect_format(path, mapping) if format == "auto" else format
    if fmt not in FORMATS:
        raise CatalogFormatError(f"format: {format!r} is not one of auto, {', '.join(FORMATS)}")
    if fmt in MAPPED_FORMATS and mapping is None:
        raise CatalogFormatError(
            f"{str(path)!r} is a {fmt} catalog: pass mapping= (a FieldMapping or dict naming at least the "
            "product_id and title columns)"
        )
    if fmt not in MAPPED_FORMATS and mapping is not None:
        raise CatalogFormatError(
            f"format {fmt!r} has a fixed mapping; mapping= is only for {', '.join(MAPPED_FORMATS)}"
        )
    if mapping is not None and not isinstance(mapping, FieldMapping):
        try:
            FieldMapping.model_validate(mapping)
        except ValidationError as e:
            raise CatalogFormatError(f"mapping: {e.errors()[0].get('loc')}: {e.errors()[0].get('msg')}") from e
    return fmt


def source_hash(
    path: str | os.PathLike[str],
    format: str = "auto",
    mapping: FieldMapping | dict | None = None,
    category: str | None = None,
) -> str:
    """Content hash of a catalog source: ``"sha256:" + hex``.

    For ``products`` files it equals :func:`~shopping_companion.catalog.loader.catalog_hash`;
    for other formats it covers the file's bytes, the format, the mapping, the category and the
    loader versions, so any change that alters the loaded products changes the hash.
    """
    fmt = resolve_format(path, format, mapping)
    if fmt == "products":
        return catalog_hash(path)
    return file_hash(
        path,
        f"loader-v{LOADER_VERSION}/sources-v{SOURCES_VERSION}\n{fmt}\n{_mapping_json(mapping)}\n{category or ''}\n",
    )


def iter_catalog_file(
    path: str | os.PathLike[str],
    report: LoadReport,
    format: str = "auto",
    mapping: FieldMapping | dict | None = None,
    category: str | None = None,
) -> Iterator[Product]:
    """Stream the products of any supported catalog file (no colour-variant linking)."""
    p = Path(path)
    fmt = resolve_format(p, format, mapping)
    if fmt == "products":
        from shopping_companion.catalog.loader import iter_products

        return iter_products(p, report)
    if fmt == "amazon2023":
        return iter_amazon2023(p, report, category)
    if fmt == "amazon2018":
        return iter_amazon2018(p, report, category)
    assert mapping is not None
    return iter_mapped(p, mapping, report, fmt)


def load_catalog_file(
    path: str | os.PathLike[str],
    format: str = "auto",
    mapping: FieldMapping | dict | None = None,
    category: str | None = None,
    extract: bool = True,
) -> tuple[list[Product], LoadReport]:
    """Load every valid product of a catalog file of any supported format.

    ``format``: ``"auto"`` (:func:`detect_format`) or one of :data:`FORMATS`. ``mapping``: a
    :class:`FieldMapping` (or its dict) for ``csv`` / ``jsonl`` / ``parquet``. ``category``:
    the Amazon category used in product ids (default: from the file name). ``extract``: add the
    rule-based extractor's attributes with their provenance
    (:mod:`~shopping_companion.catalog.extract`); False gives the raw records.

    Returns ``(products, report)`` in file order; colour variants are linked
    (``report.derived["colour_variants_linked"]``). Bad records are counted by reason in the
    report and logged as one warning, never raised. Raises ``FileNotFoundError`` for a missing
    file and :class:`CatalogFormatError` for an unknown format or a missing/invalid mapping.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"catalog file {str(p)!r} does not exist")
    fmt = resolve_format(p, format, mapping)
    if fmt == "products":
        from shopping_companion.catalog.loader import load_products

        return load_products(p, extract=extract)
    report = LoadReport(path=str(p))
    return collect_products(iter_catalog_file(p, report, fmt, mapping, category), report, extract=extract), report


__all__ = [
    "FORMATS",
    "CatalogFormatError",
    "FieldMapping",
    "amazon2018_record_to_product",
    "amazon2023_record_to_product",
    "detect_format",
    "iter_catalog_file",
    "load_catalog_file",
    "parse_price",
    "resolve_format",
    "source_hash",
]
