"""Rule-based attribute extraction: canonical attributes, with provenance, from a product's text.

Only Myntra styles carry rich structured attributes; the other sources state their properties in
titles, descriptions and category paths ("Case for Apple iPhone 7 - Pink/Red", "GRÖNLID 4-seat
sofa", "Grey Solid Leather Ballerinas ... has a V-neck, sleeveless"). :func:`extract_attributes`
reads them into the canonical keys of the value matcher's lexicon
(``judges/matching/data/keys.yaml``), each with an
:class:`~shopping_companion.types.AttributeSource` naming the field, the verbatim span and the
extractor (:data:`EXTRACTOR`); :func:`enrich` stores them in ``Product.attributes`` /
``Product.attribute_sources`` so that the BM25 index, ``product_view`` and the rule judge see
them like structured fields.

Principles (precision first; measured by ``benchmarks/bench_extraction.py``):

* **Vocabulary decides.** Concepts are found by the lexicon's own vocabularies
  (:meth:`Vocabulary.find` in prose mode, which skips negated mentions: "non-leather",
  "without polyester") and quantities by its quantity parser (:func:`parse_quantities`, pint).
  No second matcher: this module only decides *which text* to read and *where* the mention is.
* **One reading or none.** A single-valued key is extracted only when the read text names one
  concept (or a chain of one concept and its broader ones, e.g. "navy blue" + "blue": the
  narrower is kept); two unrelated concepts ("white and black") are ambiguous and skipped.
* **The product's own text.** Values belonging to another product are never taken: for Best Buy
  and Amazon titles only the head before *for* / *compatible with* / *with* describes the
  product (a "Case for iPhone 6s 64GB" has no 64 GB); the part after *for* is the
  ``compatible model``. A sofa *cover for* a 3-seat sofa has no seats.
* **Structured fields win.** A key is extracted only when no structured field of the product
  resolves to the same canonical key (``base_colour`` is ``colour``; IKEA ``width_cm`` is
  ``width``); an extracted value never overrides one.
* **Verbatim spans.** Every span is a substring of the field it names (at most 120 characters);
  a mention that cannot be located verbatim is dropped.

What is read per source is listed in :data:`SOURCE_RULES` and in ``docs/catalog.md``.
Speed: patterns are compiled once per process; the full catalog (98,730 products) is extracted in
a few seconds (``benchmarks/bench_extraction.py`` prints the time).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

from shopping_companion.judges.matching.lexicon import Vocabulary
from shopping_companion.judges.matching.normalize import tokens
from shopping_companion.judges.matching.quantity import parse_quantities
from shopping_companion.judges.matching.values import ValueMatcher, default_matcher
from shopping_companion.types import AttributeOrigin, AttributeSource, Product

__all__ = [
    "EXTRACTOR",
    "RULES_VERSION",
    "SOURCE_RULES",
    "MAX_SPAN",
    "extract_attributes",
    "enrich",
    "enrich_all",
    "structured_keys",
]

#: Version of the rules; bump on every change of what is extracted (the loader's
#: ``LOADER_VERSION`` includes it, so indexes built with other rules are rebuilt).
RULES_VERSION = 2  # 2: no sport from "table runner" or adidas "Run" names, no material in beauty titles
#: The ``extractor`` written into every :class:`AttributeSource` of this module.
EXTRACTOR = f"rules-v{RULES_VERSION}"
#: Longest span kept (characters), as :class:`AttributeSource` allows.
MAX_SPAN = 120

#: What each source's records are read for (documentation and the benchmark's coverage table).
SOURCE_RULES: dict[str, tuple[str, ...]] = {
    "bestbuy_algolia": (
        "compatible model",
        "colour",
        "carrier",
        "storage",
        "battery capacity",
        "connectivity",
        "cable length",
        "screen size",
        "material",
    ),
    "ikea_sa": ("width", "depth", "height", "seats"),
    "bigbasket": ("net quantity", "pack count", "flavour", "diet", "gender", "colour", "material"),
    "amazon2018_minionerec": ("colour", "material", "pack count", "width", "height", "depth"),
    "amazon2023": ("colour", "material", "pack count", "width", "height", "depth"),
    "adidas_us": ("gender", "sport", "material"),
    "myntra_catalog": ("colour", "material", "neck", "sleeve length", "pattern", "fit", "closure", "sport"),
    "myntra_styles": ("material", "neck", "sleeve length", "pattern", "fit", "closure", "sport"),
}

Found = dict[str, tuple[str, AttributeSource]]

# --------------------------------------------------------------------------- patterns (compiled once)

#: the head of a title: the words before the first "for" / "compatible with" / "with" / "fits"
_HEAD_SPLIT = re.compile(r"\s+(?:for|compatible\s+with|with|fits|designed\s+for|w/)\s+", re.IGNORECASE)
#: the "for ..." segment of a title up to the next " - ", "(" or end
_FOR_SEGMENT = re.compile(r"\b(?:for|compatible\s+with|fits)\s+(.+?)(?=\s+[-–|]\s+|\s*\(|,|$)", re.IGNORECASE)
_TITLE_PARTS = re.compile(r"\s+[-–|]\s+")
_PAREN = re.compile(r"\(([^()]{2,40})\)")
_NEGATED_BEFORE = re.compile(r"\b(?:not|no|non|never|without|isn't|aren't|nor|n't)\W*(?:\w+\W+){0,1}$", re.IGNORECASE)
_COMPARATIVE_BEFORE = re.compile(
    r"\b(?:than|like|unlike|instead\s+of|rather\s+than|alternative\s+to|compared\s+to|vs\.?|versus|"
    r"looks?\s+like|feels?\s+like|imitation|faux|fake|artificial|mock)\W*(?:\w+\W+){0,1}$",
    re.IGNORECASE,
)
#: words right after a material word that make it something else than the product's material
_MATERIAL_NOT_AFTER = frozenset(
    {
        "effect",
        "look",
        "finish",
        "print",
        "printed",
        "style",
        "pattern",
        "imitation",
        "like",
        "colour",
        "color",
        "coloured",
        "colored",
        "tone",
        "toned",
        "cleaner",
        "care",
        "conditioner",
        "polish",
        "repair",
        "glue",
        "adhesive",
        "cutter",
        "cutting",
        "tape",
        "paint",
        "detergent",
        "softener",
        "wash",
        "remover",
        "protector",
        "scissors",
        "saw",
        "drill",
        "marker",
        "printer",
        "tag",
        "label",
    }
)
#: one-word material forms too ambiguous in titles ("PC", "PP", "down", "net", "gold" colour, …)
_MATERIAL_TITLE_SKIP = frozenset(
    {"pc", "pp", "down", "net", "fabric", "abs", "gold", "silver", "stone", "lace", "mesh", "feather", "metallic"}
)
#: a BigBasket title suffix naming the product itself ("Organic - Chilli Powder"), not a flavour
_PRODUCT_NOUN = re.compile(
    r"\b(?:powder|paste|oil|sauce|masala|pickle|seeds?|whole|flakes|leaves|pudi|dal|flour|atta|juice|tea|honey|"
    r"jam|syrup|vinegar|extract|essence)\b",
    re.IGNORECASE,
)
_RECYCLED_FROM = re.compile(r"\b(?:recycled|upcycled|ocean|waste|parley)\b", re.IGNORECASE)
#: concepts too generic to be a product's material ("made of soft fabric")
_GENERIC_MATERIALS = frozenset({"fabric", "blended", "synthetic"})
#: Myntra products that have no neck or sleeves (bags, shoes, watches, jewellery, eyewear, …)
_NOT_GARMENT = re.compile(
    r"\b(?:bag|backpack|wallet|clutch|shoe|sneaker|sandal|flats|heels|boots?|slipper|flip[- ]?flops?|watch|"
    r"sunglasses|frames|earrings?|necklace|bracelet|ring|bangles?|pendant|belt|cap|hat|socks|mug|perfume|"
    r"deodorant|lipstick|nail|bottle|purse|handbag|tote|trolley|luggage|duffel|sling|pouch|case|cover|"
    r"ballerinas|loafers|moccasins|mojaris|juttis|clogs|slides|brooch|anklet|scarf|stole|dupatta|mask)s?\b",
    re.IGNORECASE,
)
_MADE_OF = re.compile(
    r"\b(?:made\s+(?:up\s+)?(?:of|from|out\s+of)|crafted\s+(?:from|of|in)|constructed\s+(?:of|from)|"
    r"manufactured\s+(?:from|of)|fashioned\s+from|material\s*[:\-]|fabric\s*[:\-]|composition\s*[:\-]|"
    r"upper\s*[:\-])\s+",
    re.IGNORECASE,
)
_MATERIAL_WORD_AFTER = re.compile(r"\b([A-Za-z][A-Za-z\-]{1,20})\s+(?:material|construction|body|build)\b", re.I)
_CLAUSE_END = re.compile(r"[.;:,(\n]|\s(?:with|for|that|which|to|has|so|while|on|in)\s|\s-\s")
_SEATS = re.compile(r"\b(\d{1,2})[- ](?:seat|seater)s?\b", re.IGNORECASE)
#: words before "2-seat" naming an accessory of the seat ("Storage box 2-seat sofa-bed", "Cover 3-seat")
_SEAT_ACCESSORY = re.compile(
    r"\b(?:cover|box|cushion|pad|frame|legs?|slipcover|armrests?|protector|mattress|backrest|throw)\b", re.I
)
_CHAIRS = re.compile(r"\btable\s+(?:and|&|with)\s+(\d{1,2})\s+(?:chairs|stools|benches)\b", re.IGNORECASE)
_DIMS3 = re.compile(r"(?<![\d/.\-])\b(\d{1,4}(?:\.\d{1,2})?)x(\d{1,4}(?:\.\d{1,2})?)x(\d{1,4}(?:\.\d{1,2})?)\s*cm\b")
_DETAIL_DIM = re.compile(r"(\d{1,4}(?:\.\d{1,3})?)\s*(?:\"|''|in(?:ches)?|cm|mm)?\s*([LWHD])\b")
_DETAIL_UNIT = re.compile(r"\b(inches|inch|in|cm|mm|centimeters|millimeters)\b|\"", re.IGNORECASE)
_PACK = re.compile(
    r"\b(?:pack\s+of|set\s+of|box\s+of)\s+(\d{1,4})\b|(?<![#\d.])\b(\d{1,4})[- ]?(?:pack|pk|count|ct|pcs|pieces)\b(?!\s+of)",
    re.IGNORECASE,
)
_GB = re.compile(r"\b(\d{1,4})\s?(GB|TB)\b")
_MAH = re.compile(r"\b(\d{1,2},?\d{3}|\d{3,5})\s?mAh\b", re.IGNORECASE)
_CABLE_FT = re.compile(r"(?<![\d.])(\d{1,2}(?:\.\d)?)\s?(?:'|’|ft\.?|feet|foot)(?=[\s\-])", re.IGNORECASE)
_CABLE_M = re.compile(r"(?<![\d.])(\d{1,2}(?:\.\d)?)\s?(?:m|meter|metre)(?=[\s\-])", re.IGNORECASE)
_SCREEN = re.compile(
    r"(?<![\d.])(\d{1,2}(?:\.\d{1,2})?)\s?(?:-?inch|-?in\.|\"|”|″)\s*(?:[\w\-]+\s+){0,4}?(?:display|screen|touchscreen)\b",
    re.IGNORECASE,
)
#: sport forms that are adidas model names of lifestyle shoes ("Hoops 2.0 Mid Shoes")
_SPORT_NAME_SKIP = frozenset({"hoops", "run"})  # "Swift Run", "Run 60s" are shoe names
#: flavour words that name a taste family too loosely in pack titles ("Sour Cream & Chives" is not sour)
_FLAVOUR_SKIP = frozenset({"sour", "hot", "plain", "natural flavour"})
_FLAVOUR_WORD = re.compile(r"\b([A-Za-z][A-Za-z &]{1,30}?)\s+flavou?r(?:ed)?\b", re.IGNORECASE)
_FOR_GENDER = re.compile(r"\bfor\s+(men|women|girls|boys|kids|ladies|gents|babies|baby)\b", re.IGNORECASE)
_CLOSURE = re.compile(r"\b([A-Za-z\-]+(?:\s+(?!closure|fastening)[A-Za-z\-]+){0,2})\s+(?:closure|fastening)s?\b", re.I)
#: Myntra's composition field "Fit Regular" / "Fit: Slim"
_FIT_FIELD = re.compile(
    r"\bFit:?\s+(Regular|Slim|Skinny|Loose|Relaxed|Tailored|Comfort|Oversized|Straight|Tapered|Boxy)\b"
)
#: a closure of a part (pocket flaps, cuffs), not of the product
_PART_BEFORE = re.compile(r"\b(?:pockets?|flaps?|cuffs?|compartments?)\b", re.IGNORECASE)
_FIT_ONLY = re.compile(r"\bfit\b", re.IGNORECASE)
_SLEEVE_WORD = re.compile(r"sleeve", re.IGNORECASE)
_FIT_WORD = re.compile(r"\bfit\b|\bfitted\b", re.IGNORECASE)
_NECK_HINT = re.compile(r"neck|collar|lapel|shoulder|strapless|halter")
#: neck-vocabulary concepts that describe other parts in prose (bags and bras have shoulder straps)
_NECK_DESC_SKIP = frozenset({"shoulder straps", "shoulder strap", "straps", "hood", "hooded"})
_DEVICE_TAIL = re.compile(r"\s+(?:cell\s+phones?|smartphones?|smart\s+phones?|phones?|devices?|models?)\s*$", re.I)
_NON_FOOD = ("Beauty & Hygiene", "Kitchen, Garden & Pets", "Cleaning & Household", "Baby Care")
_FOOD = (
    "Gourmet & World Food",
    "Snacks & Branded Foods",
    "Foodgrains, Oil & Masala",
    "Beverages",
    "Bakery, Cakes & Dairy",
    "Fruits & Vegetables",
    "Eggs, Meat & Fish",
)
_ACCESSORY_WORDS = re.compile(
    r"\b(?:case|cover|protector|charger|cable|mount|holder|adapter|stand|skin|sleeve|folio|dock|stylus|strap|band)s?\b",
    re.IGNORECASE,
)


def _span(text: str, start: int, end: int) -> str:
    s = text[start:end].strip()
    return s[:MAX_SPAN].rstrip()


def _src(source: AttributeOrigin, span: str) -> AttributeSource:
    return AttributeSource(source=source, span=span[:MAX_SPAN], extractor=EXTRACTOR)


#: between two tokens of a form: punctuation/space, and the stop words the normaliser drops
_JOIN = r"(?:[\W_]+(?:(?:and|or|of|the|a|an|for|with|in|on|to|&)[\W_]+)*|[\W_]*)"


@lru_cache(maxsize=4096)
def _concept_regex(vocab_name: str, concept: str, forms: tuple[str, ...]) -> re.Pattern[str]:
    """A regex locating any surface form of one concept in raw text (tokens of a form joined by
    optional punctuation/space, optional plural ``s``/``es`` after a word)."""
    alts = []
    for f in sorted(forms, key=len, reverse=True):
        toks = tokens(f)
        if not toks:
            continue
        parts = [re.escape(t) + (r"(?:e?s)?" if t.isalpha() else "") for t in toks]
        alts.append(_JOIN.join(parts))
    return re.compile(r"(?<![A-Za-z0-9])(?:" + "|".join(alts) + r")(?![A-Za-z0-9])", re.IGNORECASE)


def _locate(vocab: Vocabulary, concept: str, text: str) -> re.Match[str] | None:
    """The first verbatim mention of ``concept`` in ``text`` that the vocabulary reads as it."""
    c = vocab.concepts.get(concept)
    if c is None:
        return None
    rx = _concept_regex(vocab.name, concept, (c.name, *c.forms))
    for m in rx.finditer(text):
        if concept in vocab.find(m.group(0)):
            return m
    return None


def _single(vocab: Vocabulary, found: Iterable[str]) -> str | None:
    """The one concept a mention list names: every concept must lie on one broader-chain; the
    most specific is returned. None when two unrelated concepts are named (ambiguous)."""
    distinct = list(dict.fromkeys(found))
    if not distinct:
        return None
    best = distinct[0]
    for c in distinct[1:]:
        if vocab.is_a(best, c):
            best = c  # "leather and nubuck": both are leather, the broader is what is certain
        elif not vocab.is_a(c, best):
            return None
    return best


def _clean_before(text: str, start: int) -> bool:
    """No negation or comparison in the few words before position ``start``."""
    before = re.split(r"[.;!?|]", text[max(0, start - 40) : start])[-1]  # the same sentence only
    return not (_NEGATED_BEFORE.search(before) or _COMPARATIVE_BEFORE.search(before))


def _strip_brand(title: str, brand: str | None) -> str:
    """The title with the brand's own words blanked (same length, so spans keep positions)."""
    if brand and brand.strip() and len(brand.strip()) < len(title):
        b = brand.strip()
        i = title.lower().find(b.lower())
        if i >= 0:
            return title[:i] + " " * len(b) + title[i + len(b) :]
    return title


def _head(title: str) -> str:
    """The title's head: the part before *for* / *compatible with* / *with* (same positions)."""
    m = _HEAD_SPLIT.search(title)
    return title[: m.start()] if m else title


class _Ctx:
    """Per-product extraction state: the fields read and the keys already settled."""

    def __init__(self, product: Product, m: ValueMatcher) -> None:
        self.p = product
        self.m = m
        self.taken = structured_keys(product, m)
        self.out: Found = {}

    def want(self, key: str) -> bool:
        return key not in self.taken and key not in self.out

    def add(self, key: str, value: str, source: AttributeOrigin, span: str) -> None:
        value = " ".join(value.split())
        span = " ".join(span.split()) if span else span
        if not value or not span or not self.want(key):
            return
        self.out[key] = (value, _src(source, span))

    def vocab(self, key: str) -> Vocabulary:
        v = self.m.vocab_for(self.m.key(key))
        assert v is not None, key
        return v

    # -------------------------------------------------- generic readers
    def concept(
        self,
        key: str,
        text: str | None,
        source: AttributeOrigin,
        *,
        skip_surfaces: frozenset[str] = frozenset(),
        not_after: frozenset[str] = frozenset(),
        span_text: str | None = None,
        require: re.Pattern[str] | None = None,
    ) -> bool:
        """Extract ``key`` when ``text`` names one concept of its vocabulary (verbatim span;
        negated / comparative mentions skipped). ``span_text`` is the original field when
        ``text`` is a blanked copy of it (same positions)."""
        if not text or not self.want(key):
            return False
        vocab = self.vocab(key)
        found = vocab.find(text, prose=True)
        if not found:
            return False
        raw = span_text if span_text is not None else text
        kept: list[tuple[str, re.Match[str]]] = []
        for c in dict.fromkeys(found):
            mt = _locate(vocab, c, text)
            if mt is None:
                return False  # cannot quote it verbatim: do not guess
            surface = mt.group(0).lower()
            if surface in skip_surfaces:
                continue
            after = raw[mt.end() : mt.end() + 25].lower().split()
            if after and after[0].strip(".,;:!)") in not_after:
                continue
            if not _clean_before(raw, mt.start()):
                continue
            if require is not None and not require.search(mt.group(0)):
                continue
            kept.append((c, mt))
        one = _single(vocab, [c for c, _ in kept])
        if one is None:
            return False
        mt = next(mt for c, mt in kept if c == one)
        surface = _span(raw, mt.start(), mt.end())
        self.add(key, surface, source, surface)
        return True


def structured_keys(product: Product, m: ValueMatcher | None = None) -> set[str]:
    """Canonical keys (lexicon key names) that the product's own structured fields — attributes
    without provenance, options, and the brand — already state."""
    m = m or default_matcher()
    out: set[str] = set()
    for k in product.attributes:
        if k in product.attribute_sources:
            continue
        rk = m.key(k)
        if rk.spec is not None:
            out.add(rk.spec.name)
    for k in product.options:
        rk = m.key(k)
        if rk.spec is not None:
            out.add(rk.spec.name)
    if product.brand:
        out.add("brand")
    return out


# --------------------------------------------------------------------------- per-source rules


def _title_suffix_colour(ctx: _Ctx, title: str) -> None:
    """Best Buy: "… - Pink/Red" or "… - Space Gray (Verizon)": the last `` - `` part, when every
    ``/``-separated piece of it is a colour."""
    parts = _TITLE_PARTS.split(title)
    if len(parts) < 2:
        return
    last = _PAREN.sub("", parts[-1]).strip()
    vocab = ctx.vocab("colour")
    pieces = [x.strip() for x in re.split(r"/|\band\b|&", last) if x.strip()]
    if pieces and all(vocab.lookup(x) for x in pieces) and len(last) <= 40:
        ctx.add("colour", last, "title", last)


def _segment_colour(ctx: _Ctx, title: str, segments: list[str]) -> None:
    """A comma/dash/parenthesised title segment that is wholly one colour ("…, Black")."""
    vocab = ctx.vocab("colour")
    flavours = ctx.vocab("flavour")
    hits = [
        s
        for s in segments
        if s and len(s) <= 30 and vocab.lookup(s) and not flavours.lookup(s) and "finish" not in s.lower()
    ]
    names = {vocab.lookup(s) for s in hits}
    if len(names) == 1 and hits[0] in title:
        ctx.add("colour", hits[0], "title", hits[0])


def _segments(title: str) -> list[str]:
    segs: list[str] = []
    for part in _TITLE_PARTS.split(title)[1:]:
        segs += [s.strip() for s in part.split(",")]
    segs += [s.strip() for s in title.split(",")[1:]]
    segs += [m.group(1).strip() for m in _PAREN.finditer(title)]
    return segs


def _compatible(ctx: _Ctx, title: str) -> None:
    """The device a "for …" title segment names ("Case for Apple iPhone 6 and 6s")."""
    if not ctx.want("compatible model"):
        return
    vocab = ctx.vocab("compatible model")
    for mt in _FOR_SEGMENT.finditer(title):
        seg = _DEVICE_TAIL.sub("", mt.group(1)).strip(" .")
        if not seg or len(seg) > 80:
            continue
        if vocab.find(seg):
            ctx.add("compatible model", seg, "title", seg)
            return


def _quantity_once(ctx: _Ctx, key: str, rx: re.Pattern[str], text: str, source: AttributeOrigin, fmt) -> None:
    """``key`` from the one distinct match of ``rx`` in ``text`` (two different values: none)."""
    if not ctx.want(key):
        return
    ms = list(rx.finditer(text))
    vals = {fmt(mt) for mt in ms}
    if len(vals) == 1:
        mt = ms[0]
        ctx.add(key, vals.pop(), source, _span(text, mt.start(), mt.end()))


def _material_desc(ctx: _Ctx, text: str | None, source: AttributeOrigin) -> None:
    """Material stated by "made of …", "crafted from …", "Material: …" (one clause), or by
    "<material> material/construction/body" in ``text``."""
    if not text or not ctx.want("material"):
        return
    vocab = ctx.vocab("material")
    for mt in _MADE_OF.finditer(text):
        if not _clean_before(text, mt.start()):
            continue
        rest = text[mt.end() : mt.end() + 80]
        end = _CLAUSE_END.search(rest)
        clause = rest[: end.start()] if end else rest
        if "%" in clause:
            # a composition: keep the percentages ("90% acrylic and 10% wool") up to the clause end
            m2 = re.match(r"[\d%\sA-Za-z\-]+", rest)
            clause = m2.group(0) if m2 else clause
            clause = re.split(r"\s(?:with|for|that|which|to|has|so|while)\s|\s-\s|[.;(]", clause)[0]
        clause = clause.strip(" .")
        found = vocab.find(clause, prose=True)
        if not found:
            continue
        if "%" in clause and re.search(r"\d\s*%", clause):
            ctx.add("material", clause, source, _span(text, mt.start(), mt.end() + len(clause)))
            return
        one = _single(vocab, found)
        sentence = re.split(r"[.;\n]", rest, maxsplit=1)[0]
        others = [c for c in vocab.find(sentence, prose=True) if c not in _GENERIC_MATERIALS]
        if one is None or _single(vocab, [one, *others]) is None:
            return  # "made of cotton, polyester or nylon" names several: not one material
        if one in _GENERIC_MATERIALS:
            continue  # "made of soft fabric" names no material
        loc = _locate(vocab, one, clause)
        if loc is None:
            return
        if _RECYCLED_FROM.search(clause[: loc.start()]):
            return  # "made from upcycled plastic": the raw material of a yarn, not the product's material
        after = clause[loc.end() :].lower().split()
        if after and after[0] in _MATERIAL_NOT_AFTER:
            return
        ctx.add("material", loc.group(0), source, _span(text, mt.start(), mt.end() + loc.end()))
        return
    hits = []
    for mt in _MATERIAL_WORD_AFTER.finditer(text):
        c = vocab.lookup(mt.group(1))
        if (
            c
            and c not in _GENERIC_MATERIALS
            and mt.group(1).lower() not in _MATERIAL_TITLE_SKIP
            and _clean_before(text, mt.start())
        ):
            hits.append((c, mt))
    if hits and len({c for c, _ in hits}) == 1:
        mt = hits[0][1]
        ctx.add("material", mt.group(1), source, _span(text, mt.start(), mt.end()))


def _material_title(ctx: _Ctx, title: str, blanked: str) -> None:
    """Material named in the title head ("Grey Solid Leather Ballerinas", "Iron Tawa With Wooden
    Handle" → iron): one material, not followed by effect/look/cleaner/… ."""
    head = _head(blanked)
    ctx.concept(
        "material",
        head,
        "title",
        skip_surfaces=_MATERIAL_TITLE_SKIP,
        not_after=_MATERIAL_NOT_AFTER,
        span_text=title[: len(head)],
    )


def _bestbuy(ctx: _Ctx) -> None:
    p = ctx.p
    title = p.title
    head = _head(title)
    _title_suffix_colour(ctx, title)
    _compatible(ctx, title)
    if not _HEAD_SPLIT.search(title) and not _ACCESSORY_WORDS.search(title):
        # the product is itself a device (a phone): its carrier, its screen
        vocab = ctx.vocab("carrier")
        for mt in _PAREN.finditer(title):
            if vocab.lookup(mt.group(1)):
                ctx.add("carrier", mt.group(1).strip(), "title", mt.group(1).strip())
                break
        if p.description:
            _quantity_once(
                ctx, "screen size", _SCREEN, p.description, "description", lambda mt: f"{float(mt.group(1)):g} inch"
            )
    _quantity_once(ctx, "storage", _GB, head, "title", lambda mt: f"{mt.group(1)} {mt.group(2).upper()}")
    _quantity_once(ctx, "battery capacity", _MAH, head, "title", lambda mt: f"{mt.group(1).replace(',', '')} mAh")
    if re.search(r"\b(?:cable|cord)s?\b", head, re.IGNORECASE):
        _quantity_once(ctx, "cable length", _CABLE_FT, head, "title", lambda mt: f"{float(mt.group(1)):g} ft")
        _quantity_once(ctx, "cable length", _CABLE_M, head, "title", lambda mt: f"{float(mt.group(1)):g} m")
    _connectivity(ctx, title, head)
    _material_title(ctx, title, _strip_brand(head, p.brand))
    _material_desc(ctx, p.description, "description")


def _connectivity(ctx: _Ctx, title: str, head: str) -> None:
    """Connectors and wireless links named in the title head (multi-valued: all are kept)."""
    if not ctx.want("connectivity"):
        return
    vocab = ctx.vocab("connectivity")
    carriers = ctx.vocab("carrier")
    found = vocab.find(head, prose=True)
    vals, spans = [], []
    for c in dict.fromkeys(found):
        mt = _locate(vocab, c, head)
        if mt is None or not _clean_before(head, mt.start()):
            continue
        before = head[max(0, mt.start() - 12) : mt.start()]
        if c == "wireless" and carriers.find(before + mt.group(0)):
            continue  # "Verizon Wireless" is a carrier
        vals.append(mt.group(0))
        spans.append((mt.start(), mt.end()))
    if vals:
        s, e = min(a for a, _ in spans), max(b for _, b in spans)
        ctx.add("connectivity", ", ".join(dict.fromkeys(vals)), "title", _span(head, s, e))


def _ikea(ctx: _Ctx) -> None:
    p = ctx.p
    title = p.title
    head = _head(title)  # "Cover for 3-seat sofa": the cover has no seats
    mt = _DIMS3.search(title)
    if mt:
        span = _span(title, mt.start(), mt.end())
        for key, g in (("width", 1), ("depth", 2), ("height", 3)):
            ctx.add(key, f"{float(mt.group(g)):g} cm", "title", span)
    seat = _SEATS.search(head)
    if not (seat and _SEAT_ACCESSORY.search(head[: seat.start()])):
        _quantity_once(ctx, "seats", _SEATS, head, "title", lambda m: str(int(m.group(1))))
    _quantity_once(ctx, "seats", _CHAIRS, head, "title", lambda m: str(int(m.group(1))))


def _bigbasket(ctx: _Ctx) -> None:
    p = ctx.p
    title = p.title
    top = p.category_path[0] if p.category_path else ""
    food = top in _FOOD
    if "+" not in title:
        qs = [q for q in parse_quantities(title) if q.dim in ("[mass]", "[length] ** 3") and not q.total]
        texts = {q.text for q in qs}
        if len(texts) == 1 and len({(q.value, q.dim) for q in qs}) == 1:
            t = texts.pop()
            i = title.lower().find(t)
            if i >= 0:
                ctx.add("net quantity", t, "title", _span(title, i, i + len(t)))
    if "+" not in title:  # a combo: which item the count is of is unclear
        _quantity_once(ctx, "pack count", _PACK, title, "title", lambda m: str(int(m.group(1) or m.group(2))))
    g = _FOR_GENDER.search(title)
    if g:
        ctx.add("gender", g.group(1), "title", _span(title, g.start(), g.end()))
    if food:
        parts = _TITLE_PARTS.split(title)
        if len(parts) >= 2:
            suffix = parts[-1]
            off = title.rfind(suffix)
            if not _PRODUCT_NOUN.search(suffix):  # "Organic - Chilli Powder" names the product itself
                ctx.concept(
                    "flavour",
                    suffix,
                    "title",
                    span_text=title[off : off + len(suffix)],
                    skip_surfaces=frozenset(tokens(p.category)) | _FLAVOUR_SKIP,
                )
        fw = _FLAVOUR_WORD.search(title)
        if fw and ctx.want("flavour"):
            ctx.concept("flavour", fw.group(0), "title", skip_surfaces=_FLAVOUR_SKIP)
        _diet(ctx, title, "title")
        if p.category_path:
            _diet(ctx, p.category_path[-1], "category")
    elif top in _NON_FOOD:
        if top != "Beauty & Hygiene":  # "Deodorant Spray - Silver" names a variant, not a colour;
            _segment_colour(ctx, title, _segments(title))  # "Foam Face Wash" a form, not a material
            _material_title(ctx, title, _strip_brand(_head(title), p.brand))
        parts = _TITLE_PARTS.split(title)
        if len(parts) >= 2:
            for seg in parts[-1].split(","):
                seg = seg.strip()
                if seg and ctx.vocab("material").lookup(seg) and seg.lower() not in _MATERIAL_TITLE_SKIP:
                    ctx.add("material", seg, "title", seg)
                    break


def _diet(ctx: _Ctx, text: str, source: AttributeOrigin) -> None:
    """Dietary claims (multi-valued): "Sugar Free", "Organic", "Gluten Free" (field-value reading:
    "… free" names the claim itself; a negation right before it cancels it)."""
    if not ctx.want("diet"):
        return
    vocab = ctx.vocab("diet")
    vals, spans = [], []
    for c in dict.fromkeys(vocab.find(text)):
        mt = _locate(vocab, c, text)
        if mt is None or not _clean_before(text, mt.start()):
            continue
        vals.append(mt.group(0))
        spans.append((mt.start(), mt.end()))
    if vals:
        s, e = min(a for a, _ in spans), max(b for _, b in spans)
        ctx.add("diet", ", ".join(dict.fromkeys(vals)), source, _span(text, s, e))


def _amazon(ctx: _Ctx) -> None:
    p = ctx.p
    title = p.title
    _details(ctx)
    _segment_colour(ctx, title, _segments(title))
    _quantity_once(ctx, "pack count", _PACK, title, "title", lambda m: str(int(m.group(1) or m.group(2))))
    _material_title(ctx, title, _strip_brand(_head(title), p.brand))
    _material_desc(ctx, p.description, "description")
    for f in p.features:
        _material_desc(ctx, f, "features")


def _details(ctx: _Ctx) -> None:
    """Amazon ``details``: a "Product Dimensions" entry with explicit axis letters
    (``10"L x 5"W x 2"H``) gives width / height / depth (L, the length, has no key)."""
    for k, v in ctx.p.attributes.items():
        if k in ctx.p.attribute_sources or "dimension" not in k.lower() or "package" in k.lower():
            continue
        unit_m = _DETAIL_UNIT.search(v)
        if not unit_m:
            continue
        unit = {"inches": "inch", "inch": "inch", "in": "inch", '"': "inch", "centimeters": "cm"}.get(
            unit_m.group(0).lower(), unit_m.group(0).lower()
        )
        unit = {"millimeters": "mm"}.get(unit, unit)
        for mt in _DETAIL_DIM.finditer(v):
            key = {"W": "width", "H": "height", "D": "depth"}.get(mt.group(2))
            if key:
                ctx.add(key, f"{float(mt.group(1)):g} {unit}", "details", _span(v, mt.start(), mt.end()))


def _adidas(ctx: _Ctx) -> None:
    p = ctx.p
    if p.category_path:
        g = p.category_path[0]
        if ctx.vocab("gender").lookup(g):
            ctx.add("gender", g, "category", g)
    ctx.concept("sport", p.title, "title", skip_surfaces=_SPORT_NAME_SKIP)
    _material_desc(ctx, p.description, "description")


def _myntra(ctx: _Ctx) -> None:
    p = ctx.p
    title = _strip_brand(p.title, p.brand)
    desc = _lead(p.description or "", 360)
    low = desc.lower()
    if p.source == "myntra_catalog":
        types = ctx.m.lexicon.product_types
        skip = frozenset(w for w in tokens(title) if types.lookup(w))  # "Night Cream" is a cream
        ctx.concept("colour", title, "title", span_text=p.title, skip_surfaces=skip)
    ctx.concept("pattern", title, "title", span_text=p.title)
    if "fit" in title.lower():
        ctx.concept("fit", title, "title", span_text=p.title, require=_FIT_WORD)
    runner = frozenset({"runner", "runners"}) if re.search(r"\btable\s+runners?\b", title, re.I) else frozenset()
    ctx.concept("sport", title, "title", span_text=p.title, skip_surfaces=runner)  # a table runner is linen
    _material_title(ctx, p.title, title)
    _material_desc(ctx, desc, "description")
    if not _NOT_GARMENT.search(p.title):
        if _NECK_HINT.search(low):
            ctx.concept("neck", desc, "description", skip_surfaces=_NECK_DESC_SKIP)
        if "sleeve" in low:
            ctx.concept("sleeve length", desc, "description", require=_SLEEVE_WORD)
    fm = _FIT_FIELD.search(desc)
    if fm and ctx.want("fit"):
        ctx.concept("fit", f"{fm.group(1)} fit", "description", span_text=None)
        if "fit" in ctx.out:
            v, _ = ctx.out["fit"]
            ctx.out["fit"] = (v, _src("description", fm.group(0)))
    elif "fit" in low and "style note" not in low:
        ctx.concept("fit", desc, "description", require=_FIT_ONLY)
    if ctx.want("closure") and ("closure" in low or "fastening" in low):
        vocab = ctx.vocab("closure")
        hits = []
        for mt in _CLOSURE.finditer(desc):
            if not _clean_before(desc, mt.start()) or _PART_BEFORE.search(desc[max(0, mt.start() - 30) : mt.end()]):
                continue
            one = _single(vocab, vocab.find(mt.group(1), prose=True))
            if one:
                hits.append((one, mt))
        if hits and len({c for c, _ in hits}) == 1:
            mt = hits[0][1]
            loc = _locate(vocab, hits[0][0], mt.group(0))
            if loc is not None:
                ctx.add("closure", loc.group(0), "description", _span(desc, mt.start(), mt.end()))


def _lead(text: str, limit: int) -> str:
    """The first ``limit`` characters of ``text``, cut at a word boundary (Myntra descriptions
    describe the product first; care and model notes follow)."""
    if len(text) <= limit:
        return text
    cut = text.rfind(" ", 0, limit)
    return text[: cut if cut > 0 else limit]


_BY_SOURCE = {
    "bestbuy_algolia": _bestbuy,
    "ikea_sa": _ikea,
    "bigbasket": _bigbasket,
    "adidas_us": _adidas,
    "myntra_catalog": _myntra,
    "myntra_styles": _myntra,
}


def _rules_for(source: str):
    if source in _BY_SOURCE:
        return _BY_SOURCE[source]
    if source.startswith("amazon"):
        return _amazon
    return _amazon  # any other retailer: the generic title/description rules


# --------------------------------------------------------------------------- public API


def extract_attributes(product: Product, matcher: ValueMatcher | None = None) -> Found:
    """Attributes stated by ``product``'s text, keyed by canonical lexicon key.

    Returns ``{canonical key: (value, AttributeSource)}`` for keys that no structured field of the
    product states (:func:`structured_keys`); values are short strings the value matcher reads
    (``"Pink/Red"``, ``"146 cm"``, ``"3"``, ``"Apple iPhone 6 and 6s"``), spans are verbatim
    substrings (≤ :data:`MAX_SPAN` characters) of the field named by ``source``. Which fields are
    read depends on ``product.source`` (:data:`SOURCE_RULES`; an unknown source gets the generic
    Amazon-style title/description rules). Never raises on odd text: what cannot be read is left
    out.
    """
    m = matcher or default_matcher()
    ctx = _Ctx(product, m)
    _rules_for(product.source)(ctx)
    return ctx.out


def enrich(product: Product, matcher: ValueMatcher | None = None) -> Product:
    """``product`` with its extracted attributes added (canonical key names, provenance in
    ``attribute_sources``); the same object when nothing is added. Structured fields are never
    overridden, and a product enriched before keeps its earlier extractions (idempotent)."""
    found = extract_attributes(product, matcher)
    found = {k: v for k, v in found.items() if k not in product.attributes}
    if not found:
        return product
    attributes = {**product.attributes, **{k: v for k, (v, _) in found.items()}}
    sources = {**product.attribute_sources, **{k: s for k, (_, s) in found.items()}}
    return product.model_copy(update={"attributes": attributes, "attribute_sources": sources})


def enrich_all(products: list[Product], matcher: ValueMatcher | None = None) -> int:
    """Enrich every product of ``products`` in place (list items replaced); returns how many got
    at least one extracted attribute."""
    m = matcher or default_matcher()
    n = 0
    for i, p in enumerate(products):
        q = enrich(p, m)
        if q is not p:
            products[i] = q
            n += 1
    return n
