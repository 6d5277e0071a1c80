"""What synthesis needs to know about the catalog (Shopping Companion §4 step 1).

:class:`CatalogView` is built from the product list, once per process and catalog (``reuse.py``). It
decides, for every product:

* its **product type** as a shopper says it (:func:`product_type`): the curated name of its finest
  category when known (Myntra), otherwise a phrase derived from the finest non-generic category level
  (``"Face Moisturizers"`` → ``"face moisturizer"``, ``"Sofas & armchairs"`` → ``"sofa"``,
  ``["Women", "Shoes"]`` → ``"pair of women's shoes"``), so any catalog works, e.g. one built
  from Amazon Reviews 2023 metadata;
* its **phrasable features** (:func:`product_features`): real attribute values a user could prefer,
  with a canonical label that the rule judge's key matching ties back to the attribute (e.g.
  ``base_colour`` → ``colour``), plus the brand and a size the product is offered in;
* whether it is **eligible** as a reference product: priced (> 0), with a product type and at
  least ``min_attributes`` phrasable attribute features;
* which **shops** can host an add-on deal: a shop with eligible products of at least two product
  types for the same audience (gender group).

The eligibility report (counts by reason) is what the build prints when the catalog is too poor.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from functools import lru_cache

from shopping_companion.benchmark import templates as T
from shopping_companion.benchmark.synthesis.breadth import _LEVEL_DEPARTMENT, NUMERIC_DIRECTION, numeric_limit
from shopping_companion.judges.rule import key_matches, normalize_tokens
from shopping_companion.types import Product

__all__ = ["CatalogView", "Feature", "ShopGroup", "domain_of", "item_synonyms", "product_features", "product_type"]


@dataclass(frozen=True)
class Feature:
    """A phrasable real attribute value of a product.

    ``key``: the attribute key it comes from (``"@brand"`` for the brand, ``"@option:size"`` for an
    option); ``label``: the canonical attribute name stored in gold preferences (it key-matches
    ``key`` under the rule judge); ``value``: the real value; ``weight``: sampling weight.
    ``kind``: ``"category"`` (a value such as ``"Short Sleeves"``) or ``"numeric"`` (a limit drawn
    from a real quantity: ``value`` is a constraint such as ``"at most 150 cm"`` or ``"at least
    64 GB"`` that :func:`~shopping_companion.judges.matching.parse_constraint` reads, and
    ``quantity`` the product's own value, e.g. ``"146 cm"``). ``provenance``: where the product
    value comes from: ``"attribute"`` (the source's structured field), ``"option"``, ``"brand"``,
    or the field an extractor read it from (``"title"``, ``"description"``, ``"features"``,
    ``"category"``, ``"details"``, ``"llm"``).
    """

    key: str
    label: str
    value: str
    weight: float = field(default=1.0, compare=False)
    kind: str = "category"
    quantity: str | None = None
    provenance: str = "attribute"

    @property
    def spoken_label(self) -> str:
        return T.LABEL_SPOKEN.get(self.label, self.label)


#: Labels that describe the same property: a product keeps only the first of them.
_CONCEPT = {"fabric": "material", "material": "material"}

#: Sizes a person says they wear (letters, waist/shoe numbers): not "150ml" or "Onesize".
_WEARABLE_SIZE = re.compile(r"^(?:(?:uk|us|eu|euro)\s?)?\d{1,2}(?:\.5)?$|^(?:x{0,3}[sml]|xxl|xl|xxxl|[2-5]xl)$", re.I)

#: Sampling weight of a numeric limit among a product's features (a colour weighs 3).
NUMERIC_WEIGHT = 1.5

_NUMERIC = re.compile(r"^[\d\s.,%/+-]+$")
_SPLIT = re.compile(r"\s*(?:&|\band\b|,|/|\|)\s*", re.IGNORECASE)


@lru_cache(maxsize=4096)
def _key_blocked(key: str) -> bool:
    k = key.strip().lower()
    return k in T.BLOCKED_KEYS or k.startswith("number of ")


@lru_cache(maxsize=4096)
def label_for(key: str) -> str:
    """The canonical label of a raw attribute key in gold preferences (``base_colour`` -> ``colour``):
    ``templates.LABEL_FOR_KEY``, else the key with spaces, kept only when the rule judge's key
    matching ties it back to ``key``."""
    k = key.strip().lower()
    label = T.LABEL_FOR_KEY.get(k) or k.replace("_", " ")
    if label != k and not key_matches(label, key):
        label = k.replace("_", " ")
    return label


@lru_cache(maxsize=65536)
def _value_ok(v: str) -> bool:
    v = v.strip()
    if not v or v.lower() in T.UNINFORMATIVE_VALUES or len(v) > 32 or len(v.split()) > 4:
        return False
    if _NUMERIC.match(v) or not re.search(r"[A-Za-z]", v):
        return False
    return True


def _house_brand(p: Product) -> bool:
    """The brand is the retailer itself (every IKEA product is IKEA, every adidas.com one adidas):
    not a preference anyone states."""
    return bool(p.brand) and p.brand.strip().lower() in p.shop.lower()


@lru_cache(maxsize=65536)
def _garbled(label: str, value: str) -> bool:
    """A value nobody would say as a preference: a word repeated ("Black stained black stained"),
    or, for a colour or material of several words, a word its vocabulary does not know (IKEA
    colour strings with fabric names: "Brown orrsta light grey", "White sannidal ridabu")."""
    from shopping_companion.judges.matching import default_matcher

    toks = normalize_tokens(value)
    if len(set(toks)) < len(toks):
        return True
    m = default_matcher()
    key = m.key(label)
    if key.spec is None or key.spec.name not in _CLOSED_VOCABULARIES:
        return False  # a model name ("Galaxy Note 5") says more than its vocabulary concept
    vocab = m.vocab_for(key)
    return vocab is not None and len(toks) > 1 and bool(vocab.uncovered(value))


#: Keys whose values are words of their vocabulary alone (a colour, a material): an unknown word
#: in a multi-word value is a catalog artefact, not a shade nobody has heard of.
_CLOSED_VOCABULARIES = frozenset({"colour", "material"})


def is_wearable_size(value: str) -> bool:
    """A size a person says they wear: ``M``, ``XL``, ``32``, ``UK8``, ``EURO42`` (not ``150ml``)."""
    return bool(_WEARABLE_SIZE.match(value.strip()))


def product_features(p: Product, allow_brand: bool = True) -> list[Feature]:
    """Phrasable features of ``p``, one per canonical label (fabric and material count as one), in
    attribute order.

    Skipped: keys in ``templates.BLOCKED_KEYS``; values that are uninformative (``Regular``,
    ``NA``, yes/no, ...), numeric, longer than 32 characters or 4 words. Then the brand (when
    ``allow_brand`` and the product has one) and a size option a person wears (letters, or a waist
    or shoe number such as ``32`` / ``UK8``; the middle one offered).
    """
    out: list[Feature] = []
    seen: set[str] = set()
    for key, value in p.attributes.items():
        if _key_blocked(key) or not _value_ok(str(value)):
            continue
        label = label_for(key)
        if _garbled(label, str(value)):
            continue
        if label == "brand" and not allow_brand:
            continue
        concept = _CONCEPT.get(label, label)
        if concept in seen:
            continue
        seen.add(concept)
        out.append(
            Feature(
                key=key,
                label=label,
                value=str(value).strip(),
                weight=T.LABEL_WEIGHTS.get(label, 1.0),
                provenance=_provenance(p, key),
            )
        )
    if allow_brand and p.brand and "brand" not in seen and _value_ok(p.brand) and not _house_brand(p):
        seen.add("brand")
        out.append(Feature(key="@brand", label="brand", value=p.brand.strip(), weight=T.LABEL_WEIGHTS["brand"]))
    sizes = [s for s in p.options.get("size", []) if is_wearable_size(s)]
    if sizes and "size" not in seen:
        out.append(
            Feature(key="@option:size", label="size", value=sizes[len(sizes) // 2], weight=T.LABEL_WEIGHTS["size"])
        )
    out.extend(numeric_features(p, seen))
    return out


def _provenance(p: Product, key: str) -> str:
    src = p.attribute_sources.get(key) if getattr(p, "attribute_sources", None) else None
    return getattr(src, "source", None) or "attribute"


_DIMS_IN_TITLE = re.compile(r"(\d+(?:\.\d+)?)(?:\s*x\s*(\d+(?:\.\d+)?))+\s*cm", re.IGNORECASE)


def _plausible_length(p: Product, quantity: str) -> bool:
    """A length field agrees with the product: at least 3 (of its unit), and, when the title states
    dimensions (``"46x30x145 cm"``), one of them (catalog fields are sometimes wrong: a table with
    ``depth_cm: 1``)."""
    num = float(quantity.split()[0])
    if num < 3:
        return False
    m = _DIMS_IN_TITLE.search(p.title or "")
    if m is None:
        return True
    dims = {float(x) for x in re.findall(r"\d+(?:\.\d+)?", m.group(0))}
    return num in dims


def numeric_features(p: Product, seen: set[str] | None = None) -> list[Feature]:
    """Numeric limits a shopper could state about ``p``, one per canonical quantity key listed in
    :data:`~.breadth.NUMERIC_DIRECTION` (width, depth, height, weight, storage, screen size, pack
    size, ...): ``value`` is the limit (``"at most 150 cm"`` for a width of 146 cm, see
    :func:`~.breadth.numeric_limit`), ``quantity`` the product's own value, ``kind="numeric"``.
    A limit is kept only when the rule judge's reading of the product
    (:meth:`~shopping_companion.judges.matching.ProductReader.check`) finds the product satisfies
    it, so the reference always meets its own numeric preference. Labels already in ``seen`` are
    skipped (and added)."""
    from shopping_companion.judges.matching import default_reader
    from shopping_companion.types import Preference

    reader = default_reader()
    seen = seen if seen is not None else set()
    out: list[Feature] = []
    for key, value in p.attributes.items():
        rk = reader.m.key(key)
        spec = rk.spec
        if spec is None or spec.kind != "quantity" or rk.role != "primary":
            continue
        direction = NUMERIC_DIRECTION.get(spec.name)
        if direction is None or spec.name in seen:
            continue
        lim = numeric_limit(str(value), rk.unit, direction)
        if lim is None:
            continue
        if spec.dimension and "length" in spec.dimension and not _plausible_length(p, lim[1]):
            continue
        limit, quantity = lim
        if not reader.check(p, Preference(slot=0, attribute=spec.name, value=limit)).satisfied:
            continue
        seen.add(spec.name)
        out.append(
            Feature(
                key=key,
                label=spec.name,
                value=limit,
                weight=NUMERIC_WEIGHT,
                kind="numeric",
                quantity=quantity,
                provenance=_provenance(p, key),
            )
        )
    return out


def _singular(word: str) -> str:
    w = word
    if w in T.PAIR_NOUNS or len(w) <= 3 or not w.endswith("s") or w.endswith(("ss", "us", "is")):
        return w
    if w.endswith("ies") and len(w) > 4:
        return w[:-3] + "y"
    if w.endswith(("ches", "shes", "sses", "xes", "zes")):
        return w[:-2]
    if w.endswith("ves") and w[:-3] in ("shel", "kni", "lea", "hal", "scar", "wol"):
        return w[:-3] + ("f" if w[:-3] in ("shel", "lea", "hal", "scar", "wol") else "fe")
    return w[:-1]


def _plural(phrase: str) -> str:
    words = phrase.split()
    if not words:
        return phrase
    w = words[-1]
    if w.endswith("s") or w in T.PAIR_NOUNS:
        return phrase
    if w.endswith("y") and len(w) > 2 and w[-2] not in "aeiou":
        w = w[:-1] + "ies"
    elif w.endswith(("ch", "sh", "x", "z")):
        w += "es"
    else:
        w += "s"
    return " ".join(words[:-1] + [w])


def _clean_case(word: str) -> str:
    return word if (word.isupper() and 1 < len(word) <= 4) else word.lower()


def _derive_type(category_path: list[str]) -> str | None:
    """A product-type phrase from the finest non-generic category level (None if none)."""
    for level in reversed(category_path):
        name = level.strip()
        if not name or name.lower() in T.GENERIC_CATEGORIES:
            continue
        first = next((part for part in _SPLIT.split(name) if part.strip()), "").strip()
        words = [_clean_case(w) for w in re.findall(r"[A-Za-z0-9'\-]+", first)]
        if not words:
            continue
        if "of" in words[1:-1]:  # "Chests of drawers" -> "chest of drawers": the head is before "of"
            i = words.index("of", 1)
            words[i - 1] = _singular(words[i - 1])
            return " ".join(words)
        last = words[-1].lower()
        if last in T.PAIR_NOUNS:
            return "pair of " + " ".join(words)
        words[-1] = _singular(words[-1]) if words[-1].islower() else words[-1]
        phrase = " ".join(words)
        if last.endswith(T.MASS_SUFFIXES):
            phrase += " product"
        return phrase
    return None


#: Head nouns of titles that name a part or fitting sold for another product ("MÖLLARP Handle,
#: 106 mm", "STUBBARP Leg", "SKÅDIS Connector for ALGOT", "SELSVIKEN Drawer front"): such a
#: product is not the kind of thing its category names, so it is never a reference product.
_PART_NOUNS = frozenset(
    {
        "handle", "handles", "knob", "knobs", "leg", "legs", "foot", "feet", "connector", "connectors", "front",
        "fronts", "door", "doors", "hinge", "hinges", "bracket", "brackets", "rail", "rails", "castor", "castors",
        "caster", "casters", "screw", "screws", "hook", "hooks", "insert", "inserts", "fitting", "fittings",
        "plinth", "plinths", "panel", "panels", "underframe", "cover",
        "covers", "slipcover", "pad", "pads", "glide", "glides", "suspension", "strap", "straps", "clip", "clips",
        "post", "posts", "bar", "bars", "cap", "caps",
    }
)  # fmt: skip
_PART_HEAD = re.compile(r"^(?:[A-ZÅÄÖÜÉ][A-ZÅÄÖÜÉ0-9/\- ]+\s+)?([^,]+?)(?:,|\s+for\s+|$)")


def _is_part(p: Product) -> bool:
    """IKEA lists parts and fittings under the furniture they fit: the title's head noun (after
    the upper-case product name, before the comma or "for") is a :data:`_PART_NOUNS` word."""
    if p.source != "ikea_sa":
        return False
    m = _PART_HEAD.match(p.title or "")
    head = (m.group(1) if m else p.title or "").strip().lower().split()
    return bool(head) and head[-1] in _PART_NOUNS


def _prefer_title_type(p: Product, name: str | None) -> str | None:
    """The category-derived ``name`` or the type the title names, whichever says more: the title's
    type when the category names none (``"Children's furniture"``, no category at all) or a broader
    one (``"Sofas & armchairs"`` for a sofa bed); the category's otherwise, including when the two
    disagree (the rule judge's relevance test then decides whether the product can be a reference)."""
    from shopping_companion.judges.matching import default_reader

    reader = default_reader()
    tt = reader.title_type(p)
    if not tt:
        return name
    if not name:
        return _title_type_phrase(p)
    cat = reader.types.find(name.replace("pair of ", ""), prose=True)
    if not cat or (tt != cat[-1] and reader.types.is_a(tt, cat[-1])):
        return _title_type_phrase(p) or name
    return name  # the same type: the category's words ("coffee mug") say more than the type's ("mug")


def _title_type_phrase(p: Product) -> str | None:
    """The product type the title names (the value matcher's product-type vocabulary), phrased as
    an item: ``"t shirt"`` -> ``"t-shirt"``, ``"trousers"`` -> ``"pair of trousers"``; None when the
    title names no known type."""
    from shopping_companion.judges.matching import default_reader

    t = default_reader().title_type(p)
    if not t:
        return None
    phrase = re.sub(r"\bt shirt", "t-shirt", t)
    last = phrase.split()[-1]
    return ("pair of " + phrase) if last in T.PAIR_NOUNS else phrase


def _gender_word(p: Product) -> str:
    g = p.attributes.get("gender", "")
    if g in T.GENDER_WORDS:
        return T.GENDER_WORDS[g]
    for level in p.category_path[:-1] if len(p.category_path) > 1 else []:
        if level in T.GENDER_WORDS:
            return T.GENDER_WORDS[level]
    return ""


def product_type(p: Product) -> str | None:
    """How a shopper names one item of ``p`` (e.g. ``"men's t-shirt"``, ``"pair of women's heels"``,
    ``"coffee mug"``), or None when the product has no usable category (also for giveaways, whose
    top category is a ``templates.NOT_FOR_SALE_CATEGORIES`` one)."""
    if p.category_path and p.category_path[0].strip().lower() in T.NOT_FOR_SALE_CATEGORIES:
        return None
    if _is_part(p):
        return None
    name = T.ITEM_NAMES.get(p.category)
    if not name:
        name = _derive_type(p.category_path)
        if name and (len(p.category_path) == 1 and p.category.strip().lower() in _LEVEL_DEPARTMENT):
            name = None  # a department ("Office Products"), not a product type
        if name and name.startswith("all "):
            name = name[4:]
        name = _prefer_title_type(p, name)
    if not name:
        return None
    gender = _gender_word(p)
    if gender and gender.split("'")[0].lower() not in name.lower():
        if name.startswith("pair of "):
            return f"pair of {gender} {name[len('pair of ') :]}"
        if name.startswith("pack of "):
            return f"pack of {gender} {name[len('pack of ') :]}"
        return f"{gender} {name}"
    return name


def item_synonyms(p: Product, item: str) -> list[str]:
    """Plural ways to refer to the product type in conversation (needle scoping)."""
    syn = T.ITEM_SYNONYMS.get(p.category)
    if syn:
        return list(syn)
    group = T.GROUP_SYNONYMS.get(p.category_path[1], []) if len(p.category_path) > 2 else []
    base = item
    for prefix in ("pair of ", "pack of "):
        if base.startswith(prefix):
            base = base[len(prefix) :]
    for g in T.GENDER_WORDS.values():
        if base.startswith(g + " "):
            base = base[len(g) + 1 :]
    return [_plural(base), *group]


def with_article(item: str) -> str:
    """``"a t-shirt"``, ``"an umbrella"``, ``"a pair of jeans"``."""
    low = item.lower()
    vowel_sound = low[:1] in "aeiou" and not low.startswith(("uni", "use", "usb", "eu", "one", "uk"))
    return ("an " if vowel_sound or low.startswith(("hour", "honest")) else "a ") + item


def domain_of(p: Product) -> str:
    """A coarse domain used to pick a needle's opening topic: clothing, footwear, accessories,
    beauty, home, electronics, grocery or generic."""
    text = " ".join(p.category_path).lower()
    if any(w in text for w in ("footwear", "shoe", "sandal", "heel", "flip flop", "sneaker", "boot")):
        return "footwear"
    if any(w in text for w in ("apparel", "topwear", "bottomwear", "clothing", "dress", "innerwear", "saree")):
        return "clothing"
    if any(w in text for w in ("beauty", "personal care", "skin", "hair", "makeup", "fragrance", "lips", "nails")):
        return "beauty"
    if any(w in text for w in ("accessor", "watch", "bag", "wallet", "jewel", "eyewear", "belt")):
        return "accessories"
    if any(w in text for w in ("kitchen", "home", "furniture", "table", "sofa", "bed", "storage", "decor", "garden")):
        return "home"
    if any(w in text for w in ("electronic", "phone", "computer", "camera", "audio", "tv", "cable")):
        return "electronics"
    if any(w in text for w in ("grocery", "food", "snack", "beverage", "tea", "coffee", "masala")):
        return "grocery"
    return "generic"


def shop_display_name(p: Product) -> str:
    """A human shop name: ``"the Nike store on Myntra"`` / ``"FashionTech on Myntra"``."""
    retailer = re.sub(r"\s*\([^)]*\)\s*$", "", p.shop).strip() or p.shop
    own = p.seller or p.brand
    if own and own.strip().lower() in retailer.lower():
        return retailer  # the retailer's own store: "IKEA Saudi Arabia", not "IKEA on IKEA Saudi Arabia"
    if p.seller:
        return f"{p.seller} on {retailer}"
    if p.brand:
        return f"the {p.brand} store on {retailer}"
    return retailer


@dataclass
class ShopGroup:
    """Eligible priced products of one shop for one audience: ``types`` maps a product type to
    products (sorted by id), all from the catalog source ``source``."""

    shop_id: str
    audience: str
    types: dict[str, list[Product]] = field(default_factory=dict)
    source: str = ""


class CatalogView:
    """Eligibility, product types, features and add-on shops of a catalog (module docstring).

    ``products`` in any order (the view sorts by id). ``min_attributes``: phrasable attribute
    features (brand and size not counted; numeric limits counted) a reference product needs.
    ``allow_unpriced``: a product without a price can still be the reference of a single-product
    task (an add-on deal always needs prices).
    Attributes: ``by_id``; ``eligible`` (sorted by id); ``single_types`` (product type → eligible
    products); ``by_source`` (source → product type → eligible products); ``addon_groups`` (shop
    groups of priced products with ≥ 2 product types); ``report`` (counts of ineligible products by
    reason, and ``eligible_unpriced``); ``vocab`` (label → {normalised value tokens} seen in ≥ 2
    eligible products, used by the conflict detector).
    """

    def __init__(self, products: list[Product], min_attributes: int = 2, allow_unpriced: bool = True) -> None:
        self.min_attributes = min_attributes
        self.products = sorted(products, key=lambda p: p.product_id)
        self.by_id: dict[str, Product] = {p.product_id: p for p in self.products}
        self.report: Counter[str] = Counter()
        self.eligible: list[Product] = []
        self._type: dict[str, str] = {}
        self._features: dict[str, list[Feature]] = {}
        self.single_types: dict[str, list[Product]] = defaultdict(list)
        groups: dict[tuple[str, str], dict[str, list[Product]]] = defaultdict(lambda: defaultdict(list))
        vocab_counts: Counter[tuple[str, tuple[str, ...]]] = Counter()
        self.by_source: dict[str, dict[str, list[Product]]] = defaultdict(lambda: defaultdict(list))
        for p in self.products:
            priced = p.price is not None and p.price > 0
            if not priced and not allow_unpriced:
                self.report["no_price"] += 1
                continue
            item = product_type(p)
            if item is None:
                self.report["no_product_type"] += 1
                continue
            feats = product_features(p)
            n_attr = sum(1 for f in feats if not f.key.startswith("@"))
            if n_attr < min_attributes:
                self.report["too_few_attributes"] += 1
                continue
            self.report["eligible"] += 1
            self.eligible.append(p)
            self._type[p.product_id] = item
            self._features[p.product_id] = feats
            self.single_types[item].append(p)
            self.by_source[p.source][item].append(p)
            if not priced:
                self.report["eligible_unpriced"] += 1  # single-product tasks only
                continue
            audience = p.attributes.get("gender", "") or "any"
            groups[(p.shop_id, p.source, audience)][item].append(p)
            for f in feats:
                if f.kind != "numeric":
                    vocab_counts[(f.label, normalize_tokens(f.value))] += 1
        self.vocab: dict[str, set[tuple[str, ...]]] = defaultdict(set)
        for (label, toks), n in vocab_counts.items():
            if n >= 2 and toks:
                self.vocab[label].add(toks)
        # add-on groups: unisex products join every audience group of the same shop
        self.addon_groups: list[ShopGroup] = []
        # one source per group (a Myntra brand store sells products of both Myntra dumps): a deal's
        # products come from one catalog source, as the source quotas count them
        shops: dict[tuple[str, str], dict[str, dict[str, list[Product]]]] = defaultdict(dict)
        for (shop, source, aud), types in groups.items():
            shops[(shop, source)][aud] = types
        for shop, source in sorted(shops):
            auds = shops[(shop, source)]
            shared = auds.get("Unisex", {})
            for aud in sorted(auds):
                types: dict[str, list[Product]] = defaultdict(list)
                for item, ps in auds[aud].items():
                    types[item].extend(ps)
                if aud != "Unisex":
                    for item, ps in shared.items():
                        types[item].extend(ps)
                if len(types) >= 2:
                    ordered = {k: sorted(v, key=lambda x: x.product_id) for k, v in sorted(types.items())}
                    self.addon_groups.append(ShopGroup(shop, aud, ordered, source))
        # plain dicts from here on: a view shared by several builds (reuse.py) never grows a key on a read
        self.single_types = dict(self.single_types)
        self.by_source = {s: dict(types) for s, types in self.by_source.items()}
        self.vocab = dict(self.vocab)

    def item(self, p: Product) -> str:
        """The product type of an eligible product."""
        return self._type[p.product_id]

    def features(self, p: Product, allow_brand: bool = True) -> list[Feature]:
        """Phrasable features of an eligible product (brand dropped unless ``allow_brand``)."""
        feats = self._features[p.product_id]
        return [f for f in feats if allow_brand or f.label != "brand"]

    def max_addon_products(self) -> int:
        """The largest number of product types any add-on shop group offers (0: none)."""
        return max((len(g.types) for g in self.addon_groups), default=0)

    def describe(self) -> str:
        """One line: eligible products and rejected ones by reason."""
        r = self.report
        return (
            f"{r['eligible']} of {len(self.products)} products can be reference products "
            f"({r['eligible_unpriced']} of them unpriced, single-product tasks only; "
            f"no price: {r['no_price']}, no product type: {r['no_product_type']}, fewer than "
            f"{self.min_attributes} phrasable attributes: {r['too_few_attributes']}); "
            f"{len(self.addon_groups)} shop groups offer ≥ 2 product types for add-on deals"
        )
