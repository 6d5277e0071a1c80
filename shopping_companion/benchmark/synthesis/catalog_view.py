"""What synthesis needs to know about the catalog (Shopping Companion §4 step 1).

:class:`CatalogView` is built once per build from the product list. It decides, for every product:

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
from shopping_companion.judges.rule import key_matches, normalize_tokens
from shopping_companion.types import Product

__all__ = ["CatalogView", "Feature", "ShopGroup", "domain_of", "item_synonyms", "product_features", "product_type"]


@dataclass(frozen=True)
class Feature:
    """A phrasable real attribute value of a product.

    ``key``: the attribute key it comes from (``"@brand"`` for the brand, ``"@option:size"`` for an
    option); ``label``: the canonical attribute name stored in gold preferences (it key-matches
    ``key`` under the rule judge); ``value``: the real value; ``weight``: sampling weight.
    """

    key: str
    label: str
    value: str
    weight: float = 1.0

    @property
    def spoken_label(self) -> str:
        return T.LABEL_SPOKEN.get(self.label, self.label)


#: Labels that describe the same property: a product keeps only the first of them.
_CONCEPT = {"fabric": "material", "material": "material"}

#: Sizes a person says they wear (letters, waist/shoe numbers): not "150ml" or "Onesize".
_WEARABLE_SIZE = re.compile(r"^(?:(?:uk|us|eu|euro)\s?)?\d{1,2}(?:\.5)?$|^(?:x{0,3}[sml]|xxl|xl|xxxl|[2-5]xl)$", re.I)

_NUMERIC = re.compile(r"^[\d\s.,%/+-]+$")
_SPLIT = re.compile(r"\s*(?:&|\band\b|,|/|\|)\s*", re.IGNORECASE)


@lru_cache(maxsize=4096)
def _key_blocked(key: str) -> bool:
    k = key.strip().lower()
    return k in T.BLOCKED_KEYS or k.startswith("number of ")


@lru_cache(maxsize=4096)
def _label_for(key: str) -> str:
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
        label = _label_for(key)
        if label == "brand" and not allow_brand:
            continue
        concept = _CONCEPT.get(label, label)
        if concept in seen:
            continue
        seen.add(concept)
        out.append(Feature(key=key, label=label, value=str(value).strip(), weight=T.LABEL_WEIGHTS.get(label, 1.0)))
    if allow_brand and p.brand and "brand" not in seen and _value_ok(p.brand):
        seen.add("brand")
        out.append(Feature(key="@brand", label="brand", value=p.brand.strip(), weight=T.LABEL_WEIGHTS["brand"]))
    sizes = [s for s in p.options.get("size", []) if is_wearable_size(s)]
    if sizes and "size" not in seen:
        out.append(
            Feature(key="@option:size", label="size", value=sizes[len(sizes) // 2], weight=T.LABEL_WEIGHTS["size"])
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
        last = words[-1].lower()
        if last in T.PAIR_NOUNS:
            return "pair of " + " ".join(words)
        words[-1] = _singular(words[-1]) if words[-1].islower() else words[-1]
        phrase = " ".join(words)
        if last.endswith(T.MASS_SUFFIXES):
            phrase += " product"
        return phrase
    return None


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
    name = T.ITEM_NAMES.get(p.category) or _derive_type(p.category_path)
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
    if p.seller:
        return f"{p.seller} on {retailer}"
    if p.brand:
        return f"the {p.brand} store on {retailer}"
    return retailer


@dataclass
class ShopGroup:
    """Eligible products of one shop for one audience: ``types`` maps a product type to products
    (sorted by id)."""

    shop_id: str
    audience: str
    types: dict[str, list[Product]] = field(default_factory=dict)


class CatalogView:
    """Eligibility, product types, features and add-on shops of a catalog (module docstring).

    ``products`` in any order (the view sorts by id). ``min_attributes``: phrasable attribute
    features (brand and size not counted) a reference product needs.
    Attributes: ``by_id``; ``eligible`` (sorted by id); ``single_types`` (product type → eligible
    products); ``addon_groups`` (shop groups with ≥ 2 product types); ``report`` (counts of
    ineligible products by reason); ``vocab`` (label → {normalised value tokens} seen in ≥ 2
    eligible products, used by the conflict detector).
    """

    def __init__(self, products: list[Product], min_attributes: int = 2) -> None:
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
        for p in self.products:
            if p.price is None or p.price <= 0:
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
            audience = p.attributes.get("gender", "") or "any"
            groups[(p.shop_id, audience)][item].append(p)
            for f in feats:
                vocab_counts[(f.label, normalize_tokens(f.value))] += 1
        self.vocab: dict[str, set[tuple[str, ...]]] = defaultdict(set)
        for (label, toks), n in vocab_counts.items():
            if n >= 2 and toks:
                self.vocab[label].add(toks)
        # add-on groups: unisex products join every audience group of the same shop
        self.addon_groups: list[ShopGroup] = []
        shops: dict[str, dict[str, dict[str, list[Product]]]] = defaultdict(dict)
        for (shop, aud), types in groups.items():
            shops[shop][aud] = types
        for shop in sorted(shops):
            auds = shops[shop]
            shared = auds.get("Unisex", {})
            for aud in sorted(auds):
                types: dict[str, list[Product]] = defaultdict(list)
                for item, ps in auds[aud].items():
                    types[item].extend(ps)
                if aud != "Unisex":
                    for item, ps in shared.items():
                        types[item].extend(ps)
                if len(types) >= 2:
                    self.addon_groups.append(
                        ShopGroup(
                            shop, aud, {k: sorted(v, key=lambda x: x.product_id) for k, v in sorted(types.items())}
                        )
                    )

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
            f"(no price: {r['no_price']}, no product type: {r['no_product_type']}, fewer than "
            f"{self.min_attributes} phrasable attributes: {r['too_few_attributes']}); "
            f"{len(self.addon_groups)} shop groups offer ≥ 2 product types for add-on deals"
        )
