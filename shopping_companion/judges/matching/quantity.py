"""Numbers with units and comparison operators (pint does the unit arithmetic).

A preference such as ``"no wider than 150 cm"`` is a :class:`Constraint` (``width ≤ 1.5 m``); a
product field such as ``width_cm: 146`` or a title's ``"500 g"`` is a :class:`Quantity`.
:func:`parse_constraint` reads

====================================================  ====================
text                                                  constraint
====================================================  ====================
``150 cm``, ``= 150 cm``, ``exactly 1.5 m``            ``= 150 cm`` (±2 %)
``<= 150 cm``, ``at most``, ``up to``, ``no more
than``, ``max``, ``maximum``, ``not over``, ``no
wider/taller/longer/deeper/heavier/bigger than``       ``≤ 150 cm``
``< 150 cm``, ``under``, ``less than``, ``below``,
``smaller/lighter/narrower/shorter than``              ``< 150 cm``
``>= 64 GB``, ``at least``, ``min``, ``minimum``, ``no
less/shorter/smaller than``, ``or more`` / ``or
above`` / ``or longer`` (after)                        ``≥ 64 GB``
``> 2 m``, ``over``, ``more than``, ``above``,
``bigger/larger/wider/longer/heavier than``            ``> 2 m``
``between 100 and 150 cm``, ``100-150 cm``,
``100 to 150 cm``                                      ``100 cm ≤ x ≤ 150 cm``
====================================================  ====================

Units are read by a small alias table (``cm``, ``mm``, ``m``, ``in``/``inch``/``"`` (also ``''``, ``”``, ``″``), ``ft``/``'`` (a prime after a number:
``10' cable``; ``10's`` is no unit; also ``’``, ``′``), ``kg``,
``g``/``gm``/``gms``, ``mg``, ``lb``/``lbs``, ``oz``, ``ml``, ``l``/``ltr``/``litre``, ``gb``, ``tb``,
``mb``, ``mah``, ``w``, ``v``, ``hz``) mapped to pint units; magnitudes are converted to pint's base
units once, so comparisons are float comparisons. A number without a unit takes ``default_unit``
(e.g. ``cm`` for an IKEA ``width_cm`` field) or stays dimensionless (``3`` seats, ``2`` pieces).
Equality allows a relative tolerance of :data:`REL_TOL` (catalogs round: 15.6 in = 39.6 cm).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from shopping_companion.judges.matching.normalize import NUMBER_WORDS

__all__ = ["Quantity", "Constraint", "parse_constraint", "parse_quantities", "unit_dimension", "unit_info", "REL_TOL"]

REL_TOL = 0.02
#: Tolerance at the bound of an inequality or range: only the rounding of a unit conversion
#: (15.6 in = 39.62 cm), so 153 cm is not "at most 150 cm".
BOUND_TOL = 0.005

Op = Literal["=", "<=", "<", ">=", ">", "range"]

#: unit spelling (lower case) -> pint unit name
UNIT_ALIASES: dict[str, str] = {
    "mm": "millimeter",
    "millimeter": "millimeter",
    "millimetre": "millimeter",
    "millimeters": "millimeter",
    "millimetres": "millimeter",
    "cm": "centimeter",
    "cms": "centimeter",
    "centimeter": "centimeter",
    "centimetre": "centimeter",
    "centimeters": "centimeter",
    "centimetres": "centimeter",
    "m": "meter",
    "meter": "meter",
    "metre": "meter",
    "meters": "meter",
    "metres": "meter",
    "mtr": "meter",
    "km": "kilometer",
    "in": "inch",
    "inch": "inch",
    "inches": "inch",
    '"': "inch",
    "″": "inch",
    "''": "inch",
    "’’": "inch",
    "′′": "inch",
    "”": "inch",
    "“": "inch",
    "ft": "foot",
    "'": "foot",
    "′": "foot",
    "’": "foot",
    "feet": "foot",
    "foot": "foot",
    "mg": "milligram",
    "g": "gram",
    "gm": "gram",
    "gms": "gram",
    "gram": "gram",
    "grams": "gram",
    "gr": "gram",
    "kg": "kilogram",
    "kgs": "kilogram",
    "kilo": "kilogram",
    "kilos": "kilogram",
    "kilogram": "kilogram",
    "kilograms": "kilogram",
    "lb": "pound",
    "lbs": "pound",
    "pound": "pound",
    "pounds": "pound",
    "oz": "ounce",
    "ounce": "ounce",
    "ounces": "ounce",
    "ml": "milliliter",
    "millilitre": "milliliter",
    "milliliter": "milliliter",
    "milliliters": "milliliter",
    "millilitres": "milliliter",
    "l": "liter",
    "ltr": "liter",
    "ltrs": "liter",
    "litre": "liter",
    "liter": "liter",
    "litres": "liter",
    "liters": "liter",
    "cl": "centiliter",
    "kb": "kilobyte",
    "mb": "megabyte",
    "gb": "gigabyte",
    "tb": "terabyte",
    "floz": "fluid_ounce",
    "mah": "milliampere_hour",
    "ah": "ampere_hour",
    "w": "watt",
    "watt": "watt",
    "watts": "watt",
    "kw": "kilowatt",
    "v": "volt",
    "volt": "volt",
    "volts": "volt",
    "hz": "hertz",
    "khz": "kilohertz",
    "mhz": "megahertz",
    "ghz": "gigahertz",
}

_NUM = r"(\d{1,12}(?:[.,]\d{1,6})?)"  # bounded digit runs: no quadratic backtracking on "1111…"
_UNIT = (
    r"(mm|millimet(?:er|re)s?|cms?|centimet(?:er|re)s?|km|met(?:er|re)s?|mtr|m|inch(?:es)?|in|''|’’|′′|\"|″|”|“|ft|feet|foot|'|′|’|"
    r"mg|kgs?|kilos?|kilograms?|grams?|gms?|gr|g|lbs?|pounds?|ounces?|oz|ml|millilit(?:er|re)s?|cl|ltrs?|"
    r"lit(?:er|re)s?|l|kb|mb|gb|tb|mah|ah|kw|watts?|w|volts?|v|khz|mhz|ghz|hz)(?![a-z])"
)
_QTY_RE = re.compile(_NUM + r"\s*-?\s*" + _UNIT, re.IGNORECASE)
#: a number followed by a unit, or a comparison word / sign: the text states a quantity
HAS_UNIT_OR_OP = re.compile(
    r"\d\s*-?\s*" + _UNIT + r"|"
    r"\b(?:at\s+most|at\s+least|up\s+to|under|below|over|above|less\s+than|more\s+than|no\s+more|no\s+less|"
    r"between|max(?:imum)?|min(?:imum)?|no\s+\w+er\s+than)\b|[<>≤≥]",
    re.IGNORECASE,
)
_RANGE_RE = re.compile(
    r"(?:between\s+)?" + _NUM + r"\s*" + r"(?:" + _UNIT + r")?\s*(?:-|–|to|and)\s*" + _NUM + r"\s*" + _UNIT + r"?",
    re.IGNORECASE,
)
_BARE_NUM_RE = re.compile(_NUM)
_PACK_BEFORE = re.compile(r"(\d{1,4})\s*x\s*$")
_PACK_OF = re.compile(r"\b(?:pack|set|box|case)\s+of\s+(\d{1,4})\b|\b(\d{1,4})\s*(?:pcs|pieces|packs)\b")

_LE = re.compile(
    r"\b(?:at\s+most|up\s+to|no\s+more\s+than|not\s+more\s+than|max(?:imum)?|not\s+over|"
    r"no\s+(?:wider|taller|longer|deeper|heavier|bigger|larger|higher|broader|thicker)\s+than|"
    r"(?:nothing|not|never|can'?t\s+be|cannot\s+be|mustn'?t\s+be|shouldn'?t\s+be)\s+(?:any\s+)?"
    r"(?:over|above|more\s+than|(?:wider|taller|longer|deeper|heavier|bigger|larger|higher|broader|thicker)"
    r"(?:\s+than)?)|"
    r"within)\b|<=|≤|=<"
)
_LT = re.compile(
    r"\b(?:under|less\s+than|below|smaller\s+than|lighter\s+than|narrower\s+than|shorter\s+than|"
    r"lower\s+than|fewer\s+than)\b|<"
)
_GE = re.compile(
    r"\b(?:at\s+least|min(?:imum)?|no\s+less\s+than|not\s+less\s+than|or\s+more|or\s+above|"
    r"no\s+(?:shorter|smaller|narrower|lighter|lower|fewer|thinner|shallower)\s+than|"
    r"or\s+bigger|or\s+larger|and\s+above|"
    r"(?:nothing|not|never|can'?t\s+be|cannot\s+be|mustn'?t\s+be|shouldn'?t\s+be)\s+(?:any\s+)?"
    r"(?:under|below|less\s+than|fewer\s+than|(?:smaller|narrower|shorter|lighter|lower)(?:\s+than)?))\b|>=|≥|=>"
)
_GT = re.compile(
    r"\b(?:over|more\s+than|above|bigger\s+than|larger\s+than|wider\s+than|longer\s+than|"
    r"heavier\s+than|higher\s+than|taller\s+than|greater\s+than)\b|>"
)


@lru_cache(maxsize=1)
def _registry():
    import pint

    return pint.UnitRegistry()


@lru_cache(maxsize=256)
def unit_info(unit: str) -> tuple[float, str]:
    """``(factor to base units, dimensionality string)`` of a unit alias (lower case)."""
    name = UNIT_ALIASES[unit.lower()]
    ureg = _registry()
    q = ureg.Quantity(1.0, name).to_base_units()
    dim = str(q.dimensionality)
    if name.endswith("byte"):
        dim = "[information]"  # pint counts bits as dimensionless; keep storage apart from plain counts
    return float(q.magnitude), dim


def unit_dimension(unit: str | None) -> str | None:
    """pint's dimensionality of a unit alias (``"cm"`` → ``"[length]"``), None when unknown."""
    if not unit or unit.lower() not in UNIT_ALIASES:
        return None
    return unit_info(unit.lower())[1]


@dataclass(frozen=True)
class Quantity:
    """A magnitude in base units with its dimensionality (``""`` = dimensionless)."""

    value: float
    dim: str
    text: str = ""
    #: a pack or combo total derived from several stated quantities ("2 x 5 kg", "Pack of 12")
    total: bool = False


@dataclass(frozen=True)
class Constraint:
    """``op`` applied to ``lo`` (and ``hi`` for ranges), magnitudes in base units of ``dim``."""

    op: Op
    lo: float
    hi: float | None
    dim: str
    text: str = ""

    def admits(self, q: Quantity) -> bool:
        """Whether the quantity ``q`` meets the constraint (same dimensionality required)."""
        if q.dim != self.dim:
            return False
        x = q.value
        tol = REL_TOL * max(abs(self.lo), abs(self.hi or 0.0), 1e-12)
        if self.op == "=":
            return abs(x - self.lo) <= tol
        tol = BOUND_TOL * max(abs(self.lo), abs(self.hi or 0.0), 1e-12)  # unit-conversion rounding only
        if self.op == "<=":
            return x <= self.lo + tol
        if self.op == "<":
            return x < self.lo
        if self.op == ">=":
            return x >= self.lo - tol
        if self.op == ">":
            return x > self.lo
        assert self.hi is not None
        return self.lo - tol <= x <= self.hi + tol

    def admits_product(self, qs: tuple[Quantity, ...] | list[Quantity], per_item: bool = False) -> bool:
        """Whether a product whose text states the quantities ``qs`` meets the constraint: for ``=``
        one of them; for bounds the largest of the right dimension — including pack and combo totals
        for the amount bought ("10 kg (2 x 5 kg)" is not "at most 5 kg"), without them when the
        property is per item (``per_item``: a bottle's capacity in a "Pack of 12")."""
        same = [q for q in qs if q.dim == self.dim and not (per_item and q.total)]
        if not same:
            return False
        if self.op == "=":
            return any(self.admits(q) for q in same)
        return self.admits(max(same, key=lambda q: q.value))

    def same_as(self, other: Constraint) -> bool:
        """Two constraints say the same (operator and bounds within tolerance)."""
        if self.dim != other.dim:
            return False
        ops = {self.op, other.op}
        if len(ops) != 1 and ops not in ({"<=", "<"}, {">=", ">"}):
            return False

        def close(a: float | None, b: float | None) -> bool:
            if a is None or b is None:
                return a is None and b is None
            return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=1e-12)

        return close(self.lo, other.lo) and close(self.hi, other.hi)


_NUMBER_WORD_RE = re.compile(r"\b(" + "|".join(sorted(NUMBER_WORDS, key=len, reverse=True)) + r")\b")


_FRACTION_RE = re.compile(r"\b(\d+)\s*/\s*(\d+)\b")
_HALF_RE = re.compile(r"\b(?:half\s+(?:an?|of\s+an?)|a\s+half)\b")
_QUARTER_RE = re.compile(r"\b(?:a\s+)?quarter\s+(?:of\s+)?an?\b")


def _digits(s: str) -> str:
    """Number words and simple fractions as digits (``"three seats"`` → ``"3 seats"``, ``"1/2 oz"``
    and ``"half an ounce"`` → ``"0.5 oz"``)."""
    if "/" in s:
        s = _FRACTION_RE.sub(lambda m: f"{int(m.group(1)) / int(m.group(2)):g}" if int(m.group(2)) else m.group(0), s)
    if not any(c.isalpha() for c in s):
        return s
    s = _HALF_RE.sub("0.5", s)
    s = _QUARTER_RE.sub("0.25", s)
    return _NUMBER_WORD_RE.sub(lambda m: NUMBER_WORDS[m.group(1)], s)


def _num(s: str) -> float:
    return float(s.replace(",", "."))


def _to_base(
    value: float, unit: str | None, default_unit: str | None, volume: bool = False
) -> tuple[float, str] | None:
    u = unit or default_unit
    if not u:
        return value, ""
    u = u.lower()
    if volume and u in ("oz", "ounce", "ounces"):
        u = "floz"  # a capacity in ounces is fluid ounces
    if u not in UNIT_ALIASES:
        return None
    factor, dim = unit_info(u)
    return value * factor, dim


@lru_cache(maxsize=65536)
def parse_constraint(text: str, default_unit: str | None = None, volume: bool = False) -> Constraint | None:
    """The numeric constraint a preference value states (module docstring), or None when the
    text holds no number. ``default_unit`` applies to a number written without a unit;
    ``volume``: the property is a capacity, so ounces are fluid ounces."""
    if not text:
        return None
    s = _digits(text.strip().lower().replace("×", "x"))
    if not any(ch.isdigit() for ch in s):
        return None
    m = _RANGE_RE.search(s)
    if m and (m.group(2) or m.group(4) or default_unit) and "x" not in s[m.start() : m.end()]:
        unit_hi = m.group(4) or m.group(2)
        unit_lo = m.group(2) or unit_hi
        lo = _to_base(_num(m.group(1)), unit_lo, default_unit, volume)
        hi = _to_base(_num(m.group(3)), unit_hi, default_unit, volume)
        if lo and hi and lo[1] == hi[1] and lo[0] <= hi[0]:
            return Constraint("range", lo[0], hi[0], lo[1], text)
    qm = _QTY_RE.search(s)
    if qm:
        base = _to_base(_num(qm.group(1)), qm.group(2), default_unit, volume)
        start = qm.start()
    else:
        nm = _BARE_NUM_RE.search(s)
        if nm is None:
            return None
        base = _to_base(_num(nm.group(1)), None, default_unit)
        start = nm.start()
    if base is None:
        return None
    before, after = s[:start], s[start:]
    op: Op = "="
    if _LE.search(before):
        op = "<="
    elif _GE.search(before) or re.search(
        r"\b(?:or\s+(?:more|above|over|bigger|larger|longer|taller|wider|higher|greater|heavier|deeper|thicker)|"
        r"and\s+(?:above|over|up))\b|\+\s*$",
        after,
    ):
        op = ">="
    elif _LT.search(before):
        op = "<"
    elif _GT.search(before):
        op = ">"
    elif re.search(
        r"\b(?:or\s+(?:less|below|under|smaller|shorter|narrower|lighter|lower|fewer|thinner)|max(?:imum)?|"
        r"at\s+most|tops)\b",
        after,
    ):
        op = "<="
    elif re.search(r"\bat\s+least\b", after):
        op = ">="
    return Constraint(op, base[0], None, base[1], text)


@lru_cache(maxsize=65536)
def parse_quantities(text: str, default_unit: str | None = None, volume: bool = False) -> tuple[Quantity, ...]:
    """Every quantity with a unit in ``text`` (``"2 x 200 ml"`` gives 200 ml and the pack total
    400 ml), or — when the text is a bare number and ``default_unit`` is given (a ``width_cm`` field)
    — that number in ``default_unit``. Dimensionless bare numbers are returned only for a text that
    is a bare number (``"3"``)."""
    if not text:
        return ()
    s = _digits(text.strip().lower().replace("×", "x"))
    if not any(ch.isdigit() for ch in s):
        return ()
    out: list[Quantity] = []
    found: list[tuple[re.Match, float, str]] = []
    for m in _QTY_RE.finditer(s):
        base = _to_base(_num(m.group(1)), m.group(2), None, volume)
        if base is None:
            continue
        out.append(Quantity(base[0], base[1], m.group(0)))
        found.append((m, base[0], base[1]))
        pack = _PACK_BEFORE.search(s, max(0, m.start() - 16), m.start())
        if pack:
            out.append(Quantity(base[0] * int(pack.group(1)), base[1], pack.group(0) + m.group(0), True))
    pack_of = _PACK_OF.search(s)
    if pack_of and found:
        n = int(pack_of.group(1) or pack_of.group(2))
        out += [Quantity(v * n, d, f"{m.group(0)} x {n}", True) for m, v, d in found]
    for k in range(1, len(found)):  # "100 g + 250 g + …": the combo's total
        between = s[found[k - 1][0].end() : found[k][0].start()]
        if "+" in between and found[k][2] == found[0][2]:
            total = sum(v for _, v, d in found[: k + 1] if d == found[0][2])
            out.append(Quantity(total, found[0][2], "total", True))
    if not out and re.fullmatch(r"\s*" + _NUM + r"\s*", s):
        base = _to_base(_num(s.strip()), None, default_unit)
        if base is not None:
            out.append(Quantity(base[0], base[1], s.strip()))
    return tuple(out)
