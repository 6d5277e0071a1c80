"""Load the product catalog (``catalog/products.jsonl.gz``) into :class:`~shopping_companion.types.Product`.

Input: one JSON object per line (gzip or plain text), with the fields documented in the data README
(``uid, source, shop, id, title, brand, seller, price, list_price, currency, category_path,
description, features, attributes, rating, rating_count, url, image``).

Mapping to :class:`Product`:

* ``product_id`` = ``uid`` (globally unique, ``source:id``).
* ``attributes``: a flat ``dict[str, str]``. Missing values (``None``, ``""``, ``"NA"``, NaN) are
  dropped; numbers and booleans are stringified (``84``, ``1.5``, ``Yes``/``No``). Keys that carry
  no product property (image counts, popularity counters, internal SKUs, caption fragments) are
  dropped; variant lists move to ``options``.
* ``options``: purchasable variants: ``{"size": ["S", "M", "L"]}`` from Myntra's comma-separated
  ``sizes``; ``{"colour": [...]}`` where one model is sold in several colours as separate
  listings (see :func:`link_colour_variants`: adidas colours, IKEA colour/finish variants).
* IKEA records carry their colour/finish only in the product URL
  (``.../p/algot-bracket-white-20218545/``); it becomes ``attributes["colour"]`` (see
  :func:`ikea_colour_from_url`).
* ``shop_id``: a stable, readable store id (see :func:`make_shop_id`).
* IKEA ``width_cm`` / ``depth_cm`` / ``height_cm`` of exactly ``1`` are placeholders of the dump
  (a "Mattress, 140x188 cm" with depth 1 and height 1) and are dropped (``fixed``:
  ``ikea_placeholder_dimension``); the extractor then reads a ``WxDxH cm`` title.
* Extracted attributes: by default every loaded product is passed through
  :func:`~shopping_companion.catalog.extract.enrich` (canonical keys with provenance in
  ``Product.attribute_sources``; ``report.derived["attributes_extracted"]`` counts the products that
  got any). ``extract=False`` returns the raw records.

Bad records never crash the load and never vanish silently: each is counted by reason in the
:class:`LoadReport` (with the first few line numbers as examples) and logged as a warning.
"""

from __future__ import annotations

import functools
import gc
import gzip
import hashlib
import json
import logging
import math
import os
import re
import threading
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Callable, Iterable, Iterator

from pydantic import ValidationError

from shopping_companion.catalog.extract import RULES_VERSION, enrich, enrich_all
from shopping_companion.types import Product
from shopping_companion.errors import BadRecord  # noqa: F401 - re-exported

log = logging.getLogger(__name__)

#: Bump when the record -> Product mapping changes: indexes built by an older loader are stale.
#: v2: IKEA colour from the URL, colour variants as ``options["colour"]``.
#: v3: attributes extracted from text with provenance (:mod:`~shopping_companion.catalog.extract`,
#: rules v1), IKEA placeholder dimensions (``1`` cm) dropped. The extraction rules' version is part
#: of the number, so a change of the rules also makes built indexes stale. v4: IKEA dimension fields
#: that contradict the title's WxDxH are dropped (the title is read instead).
LOADER_VERSION = 3 + RULES_VERSION

#: Values that mean "no value" in the source dumps (compared case-insensitively after strip).
_MISSING = {"", "na", "n/a", "nan", "none", "null", "-"}

#: Attribute keys that describe no product property (counters, internal ids, caption fragments).
_DROP_ATTRIBUTES = {"num_images", "popularity", "sku", "Body or Garment Size", "taxMaterial"}

#: Attribute keys holding a comma-separated variant list -> option name.
_OPTION_ATTRIBUTES = {"sizes": "size"}

_MAX_EXAMPLES = 20

#: IKEA dimension fields whose value ``1`` is a placeholder (see the module docstring).
_IKEA_DIMENSIONS = {"width_cm", "depth_cm", "height_cm"}


# --------------------------------------------------------------------------- report


@dataclass
class LoadReport:
    """What :func:`load_products` read.

    ``n_lines`` counts every line read (blank ones included); ``n_loaded`` products were returned;
    ``by_source`` counts loaded products per ``source``; ``bad`` counts rejected lines per reason
    (``invalid_json``, ``not_an_object``, ``missing_uid``, ``missing_title``, ``negative_price``,
    ``invalid_price``, ``duplicate_uid``, ``invalid_record``, ``empty_line``); ``fixed`` counts
    values repaired in kept products (e.g. ``negative_list_price`` set to None); ``derived``
    counts values derived from the catalog as a whole (``colour_variants_linked``: products that
    got ``options["colour"]``); ``examples`` holds up to 20 ``(line_number, reason, detail)``
    tuples (1-based line or record numbers). Invariant: ``n_lines == n_loaded + n_bad``.
    """

    path: str
    n_lines: int = 0
    n_loaded: int = 0
    by_source: dict[str, int] = field(default_factory=dict)
    bad: dict[str, int] = field(default_factory=dict)
    fixed: dict[str, int] = field(default_factory=dict)
    derived: dict[str, int] = field(default_factory=dict)
    examples: list[tuple[int, str, str]] = field(default_factory=list)

    @property
    def n_bad(self) -> int:
        """Number of rejected lines (all reasons)."""
        return sum(self.bad.values())

    def summary(self) -> str:
        """One human-readable line, e.g. for logs and CLI output."""
        s = f"{self.n_loaded} products loaded from {self.path} ({self.n_lines} lines)"
        if self.bad:
            s += "; rejected " + ", ".join(f"{k}={v}" for k, v in sorted(self.bad.items()))
        if self.fixed:
            s += "; repaired " + ", ".join(f"{k}={v}" for k, v in sorted(self.fixed.items()))
        if self.derived:
            s += "; " + ", ".join(f"{k}={v}" for k, v in sorted(self.derived.items()))
        return s


# --------------------------------------------------------------------------- helpers


def open_text(
    path: str | os.PathLike[str], encoding: str = "utf-8", newline: str | None = None, errors: str = "replace"
) -> IO[str]:
    """``path`` opened for reading text, gunzipped when its first bytes are the gzip magic
    (whatever its name). ``errors``: the codec's error handling, ``"replace"`` (default:
    undecodable bytes become U+FFFD) or ``"strict"`` (``UnicodeDecodeError``); ``newline`` as
    for :func:`open` (``""`` for the csv module). ``FileNotFoundError`` for a missing file."""
    with open(path, "rb") as fh:
        magic = fh.read(2)
    if magic == b"\x1f\x8b":
        return gzip.open(path, "rt", encoding=encoding, errors=errors, newline=newline)
    return open(path, encoding=encoding, errors=errors, newline=newline)


def _clean_str(v: Any) -> str | None:
    """A stripped, non-missing string or None (numbers are stringified, NaN is missing)."""
    if type(v) is str:
        s = v.strip()
        if len(s) <= 4 and s.lower() in _MISSING:
            return None
        return s
    if v is None:
        return None
    if isinstance(v, bool):
        return "Yes" if v else "No"
    if isinstance(v, float):
        if not math.isfinite(v):
            return None
        return str(int(v)) if v.is_integer() else repr(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return _clean_str(str(v))
    return None


def _clean_strs(values: Iterable[Any]) -> list[str]:
    """The :func:`_clean_str` of each of ``values`` that is not missing, in order."""
    return [s for s in map(_clean_str, values) if s]


def _opt_number(v: Any) -> float | None:
    """A finite float or None. Strings holding numbers are accepted."""
    if v is None or isinstance(v, bool):
        return None
    if isinstance(v, str):
        try:
            v = float(v.replace(",", "")) if v.strip() else None
        except ValueError:
            return None
    if isinstance(v, (int, float)) and math.isfinite(v):
        return float(v)
    return None


_SLUG_DROP = str.maketrans({"™": "", "®": "", "©": "", "'": "", "’": ""})


@functools.lru_cache(maxsize=65536)
def slugify(text: str) -> str:
    """Lower-case ASCII slug: ``"Myntra (India)" -> "myntra-india"``, ``"adidas.com (US)" ->
    "adidas-com-us"``. Text with no ASCII letters or digits becomes ``"x" + 8 hex digits`` of its
    SHA-1, so the slug is never empty and stays stable."""
    t = unicodedata.normalize("NFKD", text.translate(_SLUG_DROP))
    t = t.encode("ascii", "ignore").decode("ascii").lower()
    t = re.sub(r"[^a-z0-9]+", "-", t).strip("-")
    if not t:
        t = "x" + hashlib.sha1(text.encode("utf-8")).hexdigest()[:8]
    return t


def make_shop_id(shop: str, seller: str | None, brand: str | None) -> str:
    """The store identity used for shop filters and same-shop vouchers.

    * the seller at the retailer where ``seller`` is set: ``myntra-india/mayazen``;
    * else the brand's official store at the retailer: ``myntra-india/brand-nike``;
    * else the retailer itself: ``amazon-com``.
    """
    base = slugify(shop)
    if seller:
        return f"{base}/{slugify(seller)}"
    if brand:
        return f"{base}/brand-{slugify(brand)}"
    return base


def _split_list(v: str) -> list[str]:
    out: list[str] = []
    for part in v.split(","):
        p = part.strip()
        if p and p.lower() not in _MISSING and p not in out:
            out.append(p)
    return out


def _normalise_option_value(name: str, value: str) -> str:
    if name == "size" and value.lower() == "onesize":
        return "Onesize"
    return value


#: Attribute keys that hold a product's own colour, in order of preference.
COLOUR_KEYS = ("colour", "color", "Colour", "Color", "base_colour", "primary_color")

_IKEA_URL = re.compile(r"ikea\.com/.*/p/([a-z0-9-]+?)-([a-z]?\d{5,})/?$")
_IKEA_FOLD = str.maketrans({"ä": "ae", "ö": "oe", "å": "aa", "ü": "ue", "æ": "ae", "ø": "oe"})


def _ascii_words(text: str) -> set[str]:
    t = text.lower()
    folded = unicodedata.normalize("NFKD", t).encode("ascii", "ignore").decode("ascii")
    return set(re.findall(r"[a-z0-9]+", t.translate(_IKEA_FOLD))) | set(re.findall(r"[a-z0-9]+", folded))


_IKEA_TITLE_DIMS = re.compile(r"(\d+(?:[.,]\d+)?)\s*x\s*(\d+(?:[.,]\d+)?)\s*x\s*(\d+(?:[.,]\d+)?)\s*cm\b", re.I)


def _ikea_dimensions(title: str, attributes: dict[str, str], fixes: list[str]) -> None:
    """IKEA dimension fields that contradict the product: a title's ``WxDxH cm`` wins over
    ``width_cm`` / ``depth_cm`` / ``height_cm`` that disagree with it (the dump often shifts them:
    ``depth_cm: 1``, ``width_cm`` holding the depth), and without such a title a ``width_cm``
    next to a placeholder depth is dropped as suspect. Dropped fields are counted in ``fixes``;
    the extractor then reads the title."""
    m = _IKEA_TITLE_DIMS.search(title or "")
    if m:
        dims = [float(x.replace(",", ".")) for x in m.groups()]
        for key, want in zip(("width_cm", "depth_cm", "height_cm"), dims):
            got = attributes.get(key)
            try:
                bad = got is not None and abs(float(got) - want) > 1e-6
            except ValueError:
                bad = True
            if bad:
                del attributes[key]
                fixes.append("ikea_dimension_contradicts_title")
    elif "ikea_placeholder_dimension" in fixes and "depth_cm" not in attributes and "width_cm" in attributes:
        del attributes["width_cm"]
        fixes.append("ikea_width_next_to_placeholder_depth")


def ikea_colour_from_url(url: str, title: str) -> str | None:
    """The colour/finish an IKEA product URL names after the product name, or None.

    ``".../p/bagganaes-handle-brass-colour-00338407/"`` with title ``"BAGGANÄS Handle, 143 mm"``
    gives ``"Brass colour"``: the trailing slug words that are not words of the title (IKEA
    transliterates ä/ö/å as ae/oe/aa in slugs). Returns None for other URLs or when the slug adds
    nothing to the title.
    """
    m = _IKEA_URL.search(url)
    if not m:
        return None
    title_words = _ascii_words(title)
    out: list[str] = []
    for w in reversed(m.group(1).split("-")):
        if w in title_words:
            break
        out.append(w)
    if not out:
        return None
    colour = " ".join(reversed(out))
    return colour[0].upper() + colour[1:]


def product_colour(p: Product) -> str | None:
    """The product's own colour from its attributes (first of :data:`COLOUR_KEYS`), or None."""
    for k in COLOUR_KEYS:
        v = p.attributes.get(k)
        if v:
            return v
    return None


def link_colour_variants(products: list[Product]) -> int:
    """Record colour variants as ``options["colour"]``, in place; returns how many products got them.

    Several sources list each colour of one model as its own product (adidas: "Superstar Shoes"
    in White and in Blue; IKEA: "ALGOT Bracket" in white and in black). Products with the same
    shop id, brand, title (case-insensitive) and category path whose colours
    (:func:`product_colour`) differ are treated as one model: each gets ``options["colour"]`` =
    its own colour first, then the other colours in catalog order (distinct values,
    case-insensitive). A group where a title names a member's colour is skipped: such titles
    are generic descriptions (Myntra's "Nike Men White Polo Tshirts" is also listed in grey),
    not model names. Products without a colour or without a differently coloured sibling are
    left unchanged.
    """
    groups: dict[tuple, list[tuple[Product, str]]] = {}
    for p in products:
        colour = product_colour(p)
        if colour is None:
            continue
        key = (p.shop_id, (p.brand or "").casefold(), p.title.casefold(), tuple(p.category_path))
        groups.setdefault(key, []).append((p, colour))
    n = 0
    for members in groups.values():
        if len(members) < 2:
            continue
        distinct: dict[str, str] = {}
        for _, c in members:
            distinct.setdefault(c.casefold(), c)
        if len(distinct) < 2:
            continue
        title_words = set(re.findall(r"\w+", members[0][0].title.casefold()))
        if any(set(re.findall(r"\w+", k)) <= title_words for k in distinct):
            continue
        for p, own in members:
            others = [c for k, c in distinct.items() if k != own.casefold()]
            p.options = {**p.options, "colour": [own, *others]}
            n += 1
    return n


def record_to_product(rec: Any) -> tuple[Product, list[str]]:
    """Map one catalog record (a decoded JSON line) to a :class:`Product`.

    Returns ``(product, fixes)`` where ``fixes`` names values repaired on the way.
    Raises :class:`BadRecord` for a record that must be rejected.
    """
    if not isinstance(rec, dict):
        raise BadRecord("not_an_object", type(rec).__name__)
    uid = rec.get("uid")
    if isinstance(uid, (int, float)) and not isinstance(uid, bool):
        uid = _clean_str(uid)
    if not isinstance(uid, str) or not uid.strip():
        raise BadRecord("missing_uid", repr(uid)[:80])
    uid = uid.strip()
    title = rec.get("title")
    if not isinstance(title, str) or not title.strip():
        raise BadRecord("missing_title", f"{uid}: title={title!r}"[:120])
    title = " ".join(title.split())

    fixes: list[str] = []
    raw_price = rec.get("price")
    price = _opt_number(raw_price)
    if raw_price is not None and price is None:
        raise BadRecord("invalid_price", f"{uid}: price={raw_price!r}"[:120])
    if price is not None and price < 0:
        raise BadRecord("negative_price", f"{uid}: price={price}")
    list_price = _opt_number(rec.get("list_price"))
    if list_price is not None and list_price < 0:
        list_price = None
        fixes.append("negative_list_price")

    source = _clean_str(rec.get("source")) or uid.split(":", 1)[0]
    shop = _clean_str(rec.get("shop")) or source
    seller = _clean_str(rec.get("seller"))
    brand = _clean_str(rec.get("brand"))

    attributes: dict[str, str] = {}
    options: dict[str, list[str]] = {}
    raw_attrs = rec.get("attributes") or {}
    if not isinstance(raw_attrs, dict):
        fixes.append("attributes_not_an_object")
        raw_attrs = {}
    for k, v in raw_attrs.items():
        key = _clean_str(k) if isinstance(k, str) else None
        if not key or key in _DROP_ATTRIBUTES:
            continue
        if key in _OPTION_ATTRIBUTES:
            if isinstance(v, list):
                vals = _clean_strs(v)
            else:
                sv = _clean_str(v)
                vals = _split_list(sv) if sv else []
            name = _OPTION_ATTRIBUTES[key]
            vals = list(dict.fromkeys(_normalise_option_value(name, x) for x in vals))
            if vals:
                options[name] = vals
            continue
        if isinstance(v, list):
            sv = ", ".join(_clean_strs(v)) or None
        else:
            sv = _clean_str(v)
        if sv and key in _IKEA_DIMENSIONS and sv == "1" and str(rec.get("source") or uid).startswith("ikea"):
            fixes.append("ikea_placeholder_dimension")
            continue
        if sv:
            attributes[key] = sv

    if str(rec.get("source") or uid).startswith("ikea"):
        _ikea_dimensions(title, attributes, fixes)
    url = _clean_str(rec.get("url"))
    if url and not any(k in attributes for k in COLOUR_KEYS):
        colour = ikea_colour_from_url(url, title)
        if colour:
            attributes["colour"] = colour

    product = make_product(
        product_id=uid,
        title=title,
        source=source,
        shop=shop,
        seller=seller,
        brand=brand,
        price=price,
        list_price=list_price,
        currency=_clean_str(rec.get("currency")),
        category_path=_clean_strs(rec.get("category_path") or []),
        description=_clean_str(rec.get("description")),
        features=_clean_strs(rec.get("features") or []),
        attributes=attributes,
        options=options,
        rating=_opt_number(rec.get("rating")),
        rating_count=_opt_number(rec.get("rating_count")),
        url=url,
        image=_clean_str(rec.get("image")),
    )
    return product, fixes


def make_product(*, product_id: str, shop: str, seller: str | None, brand: str | None, **fields: Any) -> Product:
    """The :class:`Product` of one mapped record: ``shop_id`` from :func:`make_shop_id` of
    ``(shop, seller, brand)``, every other field as given (the record mappings of this module and
    :mod:`~shopping_companion.catalog.sources` all end here). A value the model rejects raises
    :class:`BadRecord` ``invalid_record`` naming the product id."""
    try:
        return Product(
            product_id=product_id,
            shop=shop,
            shop_id=make_shop_id(shop, seller, brand),
            seller=seller,
            brand=brand,
            **fields,
        )
    except ValidationError as e:
        raise BadRecord("invalid_record", f"{product_id}: {e.errors()[0].get('msg', e)}"[:160]) from e


# --------------------------------------------------------------------------- public API


def _stream(
    records: Iterable[tuple[int, Any]], to_product: Callable[[Any], tuple[Product, list[str]]], report: LoadReport
) -> Iterator[Product]:
    """Map ``(record_number, record)`` pairs to products; count every rejection in ``report``.

    A record is either a decoded object or a :class:`BadRecord` raised while decoding it (bad
    JSON, blank line). Duplicate product ids keep the first record (``duplicate_uid``).
    """
    bad: Counter[str] = Counter(report.bad)
    fixed: Counter[str] = Counter(report.fixed)
    by_source: Counter[str] = Counter(report.by_source)
    seen: set[str] = set()

    def reject(n: int, reason: str, detail: str) -> None:
        bad[reason] += 1
        if len(report.examples) < _MAX_EXAMPLES:
            report.examples.append((n, reason, detail))

    try:
        for n, rec in records:
            report.n_lines += 1
            if isinstance(rec, BadRecord):
                reject(n, rec.reason, rec.detail)
                continue
            try:
                product, fixes = to_product(rec)
            except BadRecord as e:
                reject(n, e.reason, e.detail)
                continue
            if product.product_id in seen:
                reject(n, "duplicate_uid", product.product_id)
                continue
            seen.add(product.product_id)
            for f in fixes:
                fixed[f] += 1
            by_source[product.source] += 1
            report.n_loaded += 1
            yield product
    finally:
        report.bad = dict(bad)
        report.fixed = dict(fixed)
        report.by_source = dict(by_source)


def _json_lines(path: Path) -> Iterator[tuple[int, Any]]:
    with open_text(path) as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                yield lineno, BadRecord("empty_line", "")
                continue
            try:
                yield lineno, json.loads(line)
            except json.JSONDecodeError as e:
                yield lineno, BadRecord("invalid_json", str(e)[:120])


def iter_products(
    path: str | os.PathLike[str], report: LoadReport | None = None, extract: bool = True
) -> Iterator[Product]:
    """Stream products from ``path``; bad lines are counted in ``report`` (if given) and skipped.

    Duplicate ``uid``s keep the first record and count the later ones as ``duplicate_uid``.
    Colour variants need the whole catalog and are linked by :func:`load_products` only.
    ``extract``: add extracted attributes (:func:`~shopping_companion.catalog.extract.enrich`)
    to each product; ``False`` streams the raw records.
    """
    p = Path(path)
    rep = report if report is not None else LoadReport(path=str(p))
    stream = _stream(_json_lines(p), record_to_product, rep)
    return (enrich(x) for x in stream) if extract else stream


def load_products(path: str | os.PathLike[str], extract: bool = True) -> tuple[list[Product], LoadReport]:
    """Load every valid product of a catalog JSONL(.gz) file.

    Returns ``(products, report)``: products in file order, and a :class:`LoadReport` with counts
    per source and per rejection reason (``report.derived["colour_variants_linked"]`` counts
    products given colour options by :func:`link_colour_variants`). Rejected lines are logged as
    one warning (never raised).
    Raises ``FileNotFoundError`` when ``path`` does not exist. The full catalog (98,730 products)
    loads in a few seconds, plus the attribute extraction (``extract=False``: raw records).
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"catalog file {str(p)!r} does not exist")
    report = LoadReport(path=str(p))
    return collect_products(iter_products(p, report, extract=False), report, extract=extract), report


def collect_products(stream: Iterable[Product], report: LoadReport, extract: bool = True) -> list[Product]:
    """Every product of a record stream (:func:`iter_products`, or any stream of
    :mod:`~shopping_companion.catalog.sources` writing to the same ``report``), in order, with
    colour variants linked (:func:`link_colour_variants`, counted in
    ``report.derived["colour_variants_linked"]``), then — unless ``extract`` is False — with
    extracted attributes (:func:`~shopping_companion.catalog.extract.enrich_all`, counted in
    ``report.derived["attributes_extracted"]``); rejected records are logged as one warning.
    Every call is one parse of a whole catalog, counted by :func:`parse_count`."""
    global _PARSES
    with _PARSES_LOCK:
        _PARSES += 1
    # The load allocates millions of small container objects that all stay alive; the cyclic
    # garbage collector would rescan them again and again (it doubles the load time).
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        products = list(stream)
        n_variants = link_colour_variants(products)
        n_extracted = enrich_all(products) if extract else 0
    finally:
        if gc_was_enabled:
            gc.enable()
    if n_variants:
        report.derived["colour_variants_linked"] = n_variants
    if n_extracted:
        report.derived["attributes_extracted"] = n_extracted
    if report.bad:
        log.warning("%s (first examples: %s)", report.summary(), report.examples[:3])
    return products


_PARSES = 0
_PARSES_LOCK = threading.Lock()


def parse_count() -> int:
    """How many whole catalogs this process has parsed (:func:`collect_products` calls, through
    :func:`load_products` or :func:`~shopping_companion.catalog.sources.load_catalog_file`):
    what :func:`shopping_companion.catalog.cache.load_catalog` keeps at one per catalog."""
    return _PARSES


def catalog_hash(path: str | os.PathLike[str]) -> str:
    """Content hash of a catalog file: ``"sha256:" + hex digest`` of its bytes, combined with
    :data:`LOADER_VERSION` so that a change of the record mapping also changes the hash."""
    return file_hash(path, f"loader-v{LOADER_VERSION}\n")


def file_hash(path: str | os.PathLike[str], header: str) -> str:
    """``"sha256:" + hex`` of ``header`` (UTF-8; what besides the bytes decides the loaded
    products: loader versions, format, mapping) followed by the file's bytes, read in 1 MiB
    chunks."""
    h = hashlib.sha256()
    h.update(header.encode())
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


def json_lines_hash(lines: Iterable[str]) -> str:
    """``"sha256:" + hex`` of the given JSON strings, one per line (order-sensitive)."""
    h = hashlib.sha256()
    for line in lines:
        h.update(line.encode("utf-8"))
        h.update(b"\n")
    return "sha256:" + h.hexdigest()


def products_hash(products: Iterable[Product]) -> str:
    """Content hash of an in-memory product list (order-sensitive), ``"sha256:" + hex``; the
    default ``catalog_hash`` of :func:`~shopping_companion.catalog.index.build_index`."""
    return json_lines_hash(p.model_dump_json() for p in products)
