"""How a build spreads its reference products over the catalog: departments, source quotas and
numeric limits (Shopping Companion §4 step 1; the paper's benchmark spans automotive, beauty,
electronics accessories, tools and home, grocery and fashion).

* :func:`department` maps a product to one of a fixed set of top-level departments
  (:data:`DEPARTMENTS`), the same for every source, so that "Apparel" at Myntra and "Clothing" at
  adidas count as one department and the breadth of a benchmark can be compared across catalogs.
* :func:`source_quotas` splits ``n`` tasks over the sources that can host them: weights by
  ``balance`` (``uniform``, ``sqrt`` of the number of eligible products, or ``proportional``),
  capped at ``max_share`` of the tasks with the excess given to the others (largest remainder
  rounding), so no source dominates a benchmark.
* :func:`numeric_limit` turns a product's own quantity (a width of 146 cm, a storage of 64 GB) into
  the limit a shopper states ("at most 150 cm", "at least 64 GB"), in the direction
  :data:`NUMERIC_DIRECTION` gives for the canonical key.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from shopping_companion.types import Product

__all__ = ["DEPARTMENTS", "NUMERIC_DIRECTION", "department", "numeric_limit", "source_quotas"]

#: The top-level departments, in display order.
DEPARTMENTS: tuple[str, ...] = (
    "Apparel",
    "Footwear",
    "Accessories & Jewellery",
    "Beauty & Personal Care",
    "Grocery & Gourmet Food",
    "Beverages",
    "Household & Cleaning",
    "Kitchen, Garden & Pets",
    "Baby & Kids",
    "Furniture & Home",
    "Cell Phones & Accessories",
    "Office Products",
    "Industrial & Scientific",
    "Sports & Outdoors",
    "Other",
)

#: First (non-audience) category level, lower case -> department.
_LEVEL_DEPARTMENT: dict[str, str] = {
    # Myntra styles
    "apparel": "Apparel",
    "footwear": "Footwear",
    "accessories": "Accessories & Jewellery",
    "personal care": "Beauty & Personal Care",
    "sporting goods": "Sports & Outdoors",
    "home": "Furniture & Home",
    # adidas
    "clothing": "Apparel",
    "shoes": "Footwear",
    # BigBasket
    "beauty & hygiene": "Beauty & Personal Care",
    "gourmet & world food": "Grocery & Gourmet Food",
    "snacks & branded foods": "Grocery & Gourmet Food",
    "foodgrains, oil & masala": "Grocery & Gourmet Food",
    "bakery, cakes & dairy": "Grocery & Gourmet Food",
    "fruits & vegetables": "Grocery & Gourmet Food",
    "eggs, meat & fish": "Grocery & Gourmet Food",
    "beverages": "Beverages",
    "cleaning & household": "Household & Cleaning",
    "kitchen, garden & pets": "Kitchen, Garden & Pets",
    "baby care": "Baby & Kids",
    # Best Buy, Amazon
    "cell phones": "Cell Phones & Accessories",
    "cell phones & accessories": "Cell Phones & Accessories",
    "electronics": "Cell Phones & Accessories",
    "office products": "Office Products",
    "industrial & scientific": "Industrial & Scientific",
    "beauty": "Beauty & Personal Care",
    "all beauty": "Beauty & Personal Care",
    "grocery & gourmet food": "Grocery & Gourmet Food",
    "home & kitchen": "Kitchen, Garden & Pets",
    "sports & outdoors": "Sports & Outdoors",
    "clothing, shoes & jewelry": "Apparel",
    "amazon fashion": "Apparel",
    "toys & games": "Baby & Kids",
    "baby products": "Baby & Kids",
    "pet supplies": "Kitchen, Garden & Pets",
    "tools & home improvement": "Industrial & Scientific",
}

#: Category levels that name an audience, a collection or a sport rather than a department.
_AUDIENCE = frozenset(
    {"men", "women", "kids", "unisex", "boys", "girls", "unisex kids", "baby", "originals", "training", "soccer"}
)
_SPORT_LEVELS = frozenset({"running", "swim", "tennis", "basketball", "golf", "outdoor", "yoga", "cycling"})

#: Sources whose whole catalog is one department.
_SOURCE_DEPARTMENT: dict[str, str] = {"ikea_sa": "Furniture & Home", "bestbuy_algolia": "Cell Phones & Accessories"}

_FOOTWEAR_WORDS = re.compile(
    r"\b(shoes?|sneakers?|sandals?|heels|flats|boots?|loafers|slippers|flip[- ]?flops|ballerinas|slides|clogs|mules)\b",
    re.IGNORECASE,
)
_ACCESSORY_WORDS = re.compile(
    r"\b(watch|bag|handbag|backpack|wallet|belt|earrings?|necklace|bracelet|ring|sunglasses|cap|hat|scarf|"
    r"clutch|pendant|bangles?|jewellery|jewelry|socks|tie)\b",
    re.IGNORECASE,
)
_BEAUTY_WORDS = re.compile(r"\b(lipstick|perfume|deodorant|nail|eyeliner|kajal|foundation|lotion|cream|serum)\b", re.I)


def department(p: Product) -> str:
    """The top-level department of ``p`` (one of :data:`DEPARTMENTS`).

    The first category level that names a department (audience levels such as ``Men`` or
    ``Originals`` skipped); for a source that is one department (IKEA, Best Buy) that department;
    for a category path that names only an audience (Myntra's 2019 catalog) the title decides
    between footwear, accessories, beauty and apparel."""
    if p.source in _SOURCE_DEPARTMENT:
        return _SOURCE_DEPARTMENT[p.source]
    levels = [c.strip().lower() for c in p.category_path if c and c.strip()]
    for level in levels:
        if level in _LEVEL_DEPARTMENT:
            return _LEVEL_DEPARTMENT[level]
        if level in _SPORT_LEVELS:
            return "Sports & Outdoors"
        if level not in _AUDIENCE:
            break
    if not levels or all(level in _AUDIENCE for level in levels):
        title = p.title or ""
        if _FOOTWEAR_WORDS.search(title):
            return "Footwear"
        if _ACCESSORY_WORDS.search(title):
            return "Accessories & Jewellery"
        if _BEAUTY_WORDS.search(title):
            return "Beauty & Personal Care"
        return "Apparel" if levels else "Other"
    return "Other"


def source_quotas(
    eligible: Mapping[str, int], n: int, *, balance: str = "sqrt", max_share: float = 0.35
) -> dict[str, int]:
    """Split ``n`` tasks over the sources in ``eligible`` (source -> number of products or shop
    groups that can host a task; sources with 0 get nothing).

    ``balance``: ``uniform`` (equal weights), ``sqrt`` (weight √count, the default: big sources get
    more tasks, but not in proportion) or ``proportional`` (weight = count). Each source's share is
    then capped at ``max_share`` (0 < max_share ≤ 1) and the excess shared by the other sources in
    proportion to their weights, repeatedly, until no share exceeds the cap. When the cap cannot be
    met (fewer than 1 / ``max_share`` sources) every source gets an equal share. Counts are rounded by largest remainder,
    so they sum to ``n``; the order of the result is the sorted source names.

    Raises ``ValueError`` for an unknown ``balance`` or a ``max_share`` outside (0, 1].
    """
    if balance not in ("uniform", "sqrt", "proportional"):
        raise ValueError(f"source_balance: {balance!r} is not one of 'uniform', 'sqrt', 'proportional'")
    if not (0 < max_share <= 1):
        raise ValueError(f"max_source_share: must be in (0, 1], got {max_share}")
    names = sorted(s for s, c in eligible.items() if c > 0)
    if not names or n <= 0:
        return {s: 0 for s in sorted(eligible)}
    w = {
        s: 1.0 if balance == "uniform" else math.sqrt(eligible[s]) if balance == "sqrt" else float(eligible[s])
        for s in names
    }
    total = sum(w.values())
    share = {s: w[s] / total for s in names}
    if len(names) * max_share < 1:  # the cap cannot be met: the most even split
        share = {s: 1 / len(names) for s in names}
    for _ in range(len(names)):
        over = {s for s in names if share[s] > max_share + 1e-12}
        if not over:
            break
        free = [s for s in names if s not in over and share[s] < max_share - 1e-12]
        if not free:
            break
        excess = sum(share[s] - max_share for s in over)
        for s in over:
            share[s] = max_share
        wf = sum(w[s] for s in free)
        for s in free:
            share[s] += excess * w[s] / wf
    raw = {s: share[s] * n for s in names}
    out = {s: int(math.floor(raw[s])) for s in names}
    for s in sorted(names, key=lambda s: (-(raw[s] - out[s]), s))[: n - sum(out.values())]:
        out[s] += 1
    return {s: out.get(s, 0) for s in sorted(eligible)}


#: Canonical quantity key -> the side of the product's value a shopper limits: ``max`` ("no wider
#: than"), ``min`` ("at least"). Keys not listed give no numeric preference.
NUMERIC_DIRECTION: dict[str, str] = {
    "width": "max",
    "depth": "max",
    "height": "max",
    "weight": "max",
    "heel height": "max",
    "laptop size": "min",
    "storage": "min",
    "ram": "min",
    "screen size": "min",
    "cable length": "min",
    "net quantity": "min",
    "volume": "min",
    "battery capacity": "min",
    "capacity": "min",
    "seats": "min",
    "spf": "min",
}

_NUM_UNIT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z\"']*)")


def _step(x: float, parts: int = 10) -> float:
    """A round step for a limit near ``x``: the smallest 1, 2 or 5 × 10^k ≥ ``x / parts``."""
    if x <= 0:
        return 1.0
    raw = x / parts
    base = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if m * base >= raw:
            return m * base
    return 10 * base


def _fmt_number(x: float) -> str:
    return f"{x:.10g}"


def numeric_limit(value: str, unit: str | None, direction: str) -> tuple[str, str] | None:
    """``(limit, quantity)`` for a product's numeric field: ``limit`` is the constraint a shopper
    states (``"at most 150 cm"`` for a width of 146 cm with ``direction="max"``: the smallest round
    number ≥ the value; ``"at least 64 GB"`` with ``"min"``: the largest round number ≤ it, the value
    itself when it is a whole number with at most two significant digits or a power of two);
    ``quantity`` is the product's value with its unit (``"146 cm"``). ``value``: the field's text,
    a number with or without a unit; ``unit``: the unit of a bare number (from the key). None when
    the text holds no positive number or no unit is known."""
    m = _NUM_UNIT.match(str(value))
    if not m:
        return None
    x = float(m.group(1))
    u = m.group(2) or unit
    if x <= 0 or not u:
        return None
    if direction == "max":  # a fine step: 146 cm -> 150, 228 cm -> 230
        step = _step(x, 30)
        lim = math.ceil(x / step - 1e-9) * step
        word = "at most"
    else:
        whole = x == int(x)
        digits = len(str(int(x)).rstrip("0")) if whole else 99
        if whole and (digits <= 2 or (int(x) & (int(x) - 1)) == 0):
            lim = x
        else:  # a coarse step: 4.7 in -> 4.5
            step = _step(x, 10)
            lim = max(step, math.floor(x / step + 1e-9) * step)
        word = "at least"
    lim = round(lim, 6)
    return f"{word} {_fmt_number(lim)} {u}", f"{_fmt_number(x)} {u}"
