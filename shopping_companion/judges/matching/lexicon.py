"""The lexicons of the value-matching layer: canonical attribute keys and value vocabularies.

They are data files in the package (``judges/matching/data/``; format and provenance in its
``README.md``), loaded once per process by :func:`load_lexicon`:

``keys.yaml``
    canonical attribute keys, each with its aliases (product attribute keys, gold labels and the
    names an agent may write; an alias may carry a unit, e.g. ``width_cm`` → cm), the product
    fields holding *secondary* values of the same property (``colour1``, ``Fabric 2``), its value
    vocabulary, whether it is multi-valued, and its kind (``category`` | ``quantity`` | ``text``,
    with a pint dimension and default unit for quantities).
``values/<vocabulary>.yaml``
    concepts with their surface forms (catalog spellings and everyday paraphrases) and the
    broader concepts each is a kind of (navy → blue), plus modifier words ignored in comparisons.
``product_types.yaml``
    product-type nouns with forms and broader types (the relevance test q2).

Key resolution (:meth:`Lexicon.resolve_key`) is exact after normalisation — never token subset
(``"Fabric"`` and ``"Fabric 2"`` are different fields; ``"sole material"`` is not ``"material"``);
a key that is not in the table is retried without generic words (*type*, *style*, *preferred*, …)
and without a trailing unit (``"seat height (cm)"``), and otherwise stays an unknown key compared
by its normalised name.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from shopping_companion.errors import ConfigError
from shopping_companion.judges.matching.normalize import (
    compact,
    distribute_negation,
    negated_positions,
    split_denials,
    tokens,
)
from shopping_companion.judges.matching.quantity import UNIT_ALIASES

__all__ = [
    "Concept",
    "Vocabulary",
    "KeySpec",
    "ResolvedKey",
    "Lexicon",
    "load_lexicon",
    "GENERIC_KEY_WORDS",
    "COUNT_KEY_WORDS",
    "counted_part",
]

#: Words of an attribute name that name the count rather than the part counted ("number of wheels").
COUNT_KEY_WORDS = frozenset({"number", "count", "no", "num", "qty", "quantity", "total"})


def counted_part(name: str | None) -> tuple[str, ...]:
    """The part an attribute name counts, without its count words: "number of wheels", "wheels"
    and "wheel count" all give ``("wheel",)``."""
    return tuple(t for t in tokens(name) if t not in COUNT_KEY_WORDS)


#: Words that qualify an attribute name without changing it ("neck type" is "neck").
GENERIC_KEY_WORDS = frozenset(
    {
        "type",
        "style",
        "kind",
        "preference",
        "preferred",
        "choice",
        "option",
        "favourite",
        "favorite",
        "desired",
        "wanted",
        "required",
        "ideal",
        "main",
        "primary",
        "overall",
        "product",
        "item",
    }
)


@dataclass(frozen=True)
class Concept:
    """One value concept of a vocabulary: ``forms`` are normalised phrases, ``broader`` names;
    ``group``: a group of ingredients (dairy) that products carry without naming it, so a page
    that names none of its members does not say the product is free of it."""

    name: str
    vocabulary: str
    forms: tuple[str, ...]
    broader: tuple[str, ...] = ()
    contains: tuple[str, ...] = ()
    group: bool = False


class Vocabulary:
    """A closed set of value concepts (colours, materials, neck types, …).

    :meth:`find` locates concept mentions in a text (longest form first, non-overlapping, joined
    and spaced forms alike); :meth:`is_a` answers "is a ``c`` a kind of ``g``" through ``broader``.
    """

    def __init__(self, name: str, concepts: dict[str, Concept], modifiers: frozenset[str]) -> None:
        self.name = name
        self.concepts = concepts
        self.modifiers = modifiers
        self._by_compact: dict[str, str] = {}
        self.max_len = 1
        for c in concepts.values():
            for f in (c.name, *c.forms):
                toks = tokens(f)
                if not toks:
                    continue
                self._by_compact.setdefault("".join(toks), c.name)
                self.max_len = max(self.max_len, len(toks))
        self.ancestors: dict[str, frozenset[str]] = {}
        for n in concepts:
            self.ancestors[n] = frozenset(self._walk(n, set()))
        # A one-word form that is a longer form minus the dimension noun ("long" of "long sleeves",
        # "round" of "round neck") names the concept only as a whole field value, not in prose.
        dims = set(tokens(name.replace("_", " ")))
        self._value_only: set[str] = set()
        for c in concepts.values():
            multi = [tokens(f) for f in (c.name, *c.forms) if len(tokens(f)) > 1]
            for f in (c.name, *c.forms):
                t = tokens(f)
                if len(t) == 1 and any(m[0] == t[0] and set(m[1:]) & dims for m in multi):
                    self._value_only.add(t[0])
        self._scan = lru_cache(maxsize=65536)(self._scan_uncached)

    def _walk(self, name: str, seen: set[str]) -> set[str]:
        out: set[str] = set()
        for b in self.concepts[name].broader:
            if b in seen or b not in self.concepts:
                continue
            seen.add(b)
            out.add(b)
            out |= self._walk(b, seen)
        return out

    def is_a(self, c: str, g: str) -> bool:
        """``c`` is ``g`` or a kind of ``g`` (navy is a blue)."""
        return c == g or g in self.ancestors.get(c, ())

    def has(self, c: str, g: str) -> bool:
        """A ``c`` has ``g`` in it: ``c`` is a ``g``, or a component ``c`` contains is (polycotton
        has polyester; ``contains`` lists a blend's components)."""
        if self.is_a(c, g):
            return True
        concept = self.concepts.get(c)
        return concept is not None and any(self.is_a(x, g) for x in concept.contains)

    def related(self, a: str, b: str) -> bool:
        """One of ``a``, ``b`` is a kind of the other."""
        return self.is_a(a, b) or self.is_a(b, a)

    def lookup(self, text: str) -> str | None:
        """The concept a whole text names exactly (modifier words ignored), or None."""
        toks = [t for t in tokens(text) if t not in self.modifiers] or list(tokens(text))
        return self._by_compact.get("".join(toks))

    def find(self, text: str | None, prose: bool = False) -> tuple[str, ...]:
        """Concepts mentioned in ``text``, in order of appearance (longest forms first). ``prose``:
        the text is a title or description rather than a field value, so one-word forms that only
        shorten a longer one ("long" for long sleeves) are not read."""
        if not text:
            return ()
        return self._scan(text, prose)[0]

    def uncovered(self, text: str | None) -> tuple[str, ...]:
        """The tokens of a field value that no concept form (nor modifier) accounts for: a value
        such as ``"Galaxy S3"`` names more than the concept it mentions (the Galaxy family)."""
        if not text:
            return ()
        return self._scan(text, False)[1]

    def _scan_uncached(self, text: str, prose: bool) -> tuple[tuple[str, ...], tuple[str, ...]]:
        # prose: what a negation or a denial ("not compatible with …") covers is not stated
        toks = tokens(distribute_negation(split_denials(text)[0]) if prose else text)
        n = len(toks)
        negated = negated_positions(toks) if prose else frozenset()
        cands: list[tuple[int, int, int, str]] = []  # (-length, -specificity, start, concept)
        for i in range(n):
            for L in range(min(self.max_len, n - i), 0, -1):
                c = self._by_compact.get("".join(toks[i : i + L]))
                if c is None or (prose and L == 1 and toks[i] in self._value_only):
                    continue
                cands.append((-L, -len(self.ancestors.get(c, ())), i, c))
        # non-overlapping mentions, longest (then most specific) first: "Apple iPhone 7" is the
        # iPhone 7, not "apple iphone" + "7"
        cands.sort()
        taken = [False] * n
        picked: list[tuple[int, str]] = []
        for negL, _, i, c in cands:
            if any(taken[i : i - negL]):
                continue
            for k in range(i, i - negL):
                taken[k] = True
            if i not in negated:  # "leather-free", "non-leather", "without polyester" do not state it
                picked.append((i, c))
        picked.sort()
        rest = tuple(t for k, t in enumerate(toks) if not taken[k] and t not in self.modifiers)
        return tuple(c for _, c in picked), rest


@dataclass(frozen=True)
class KeySpec:
    """A canonical attribute key (``keys.yaml``)."""

    name: str
    vocabulary: str | None = None
    multi_valued: bool = False
    kind: str = "category"
    dimension: tuple[str, ...] | None = None
    unit: str | None = None


@dataclass(frozen=True)
class ResolvedKey:
    """What an attribute name means: its canonical :class:`KeySpec` (None when unknown), the
    normalised ``name`` it is compared by, whether the field holds the ``primary`` or a
    ``secondary`` value of the property, and the unit a bare number in it carries."""

    name: str
    spec: KeySpec | None = None
    role: str = "primary"
    unit: str | None = None
    _hash: int = field(default=0, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # a key is the lru-cache key of every value parse: hash its fields once, not on every lookup
        object.__setattr__(self, "_hash", hash((self.name, self.spec, self.role, self.unit)))

    def __hash__(self) -> int:
        return self._hash

    @property
    def known(self) -> bool:
        return self.spec is not None

    @property
    def kind(self) -> str:
        return self.spec.kind if self.spec else "text"

    def same_key(self, other: ResolvedKey) -> bool:
        """Both name the same property: equal canonical keys, or equal normalised names."""
        if self.spec is not None and other.spec is not None:
            return self.spec.name == other.spec.name
        if self.spec is None and other.spec is None:
            return compact(self.name) == compact(other.name) and bool(self.name)
        return False


@dataclass
class Lexicon:
    """Keys, vocabularies and product types (module docstring); ``version`` fingerprints the files."""

    keys: dict[str, KeySpec]
    vocabularies: dict[str, Vocabulary]
    product_types: Vocabulary
    version: str
    _alias: dict[str, tuple[str, str, str | None]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._resolve = lru_cache(maxsize=65536)(self._resolve_uncached)

    def vocabulary(self, key: ResolvedKey) -> Vocabulary | None:
        if key.spec is None or key.spec.vocabulary is None:
            return None
        return self.vocabularies.get(key.spec.vocabulary)

    def resolve_key(self, name: str | None) -> ResolvedKey:
        """The :class:`ResolvedKey` of an attribute name (module docstring)."""
        return self._resolve(name or "")

    def _resolve_uncached(self, raw: str) -> ResolvedKey:
        text = raw.replace("_", " ")
        toks = list(tokens(text))
        unit = None
        hit = self._alias.get("".join(toks))
        if hit is None and toks and toks[-1] in UNIT_ALIASES:
            unit = toks[-1]
            toks = toks[:-1]
            hit = self._alias.get("".join(toks))
        if hit is None:
            stripped = [t for t in toks if t not in GENERIC_KEY_WORDS]
            if stripped and stripped != toks:
                toks = stripped
                hit = self._alias.get("".join(toks))
        if hit is None:
            return ResolvedKey(name=" ".join(toks), unit=unit)
        key, role, alias_unit = hit
        spec = self.keys[key]
        return ResolvedKey(name=key, spec=spec, role=role, unit=alias_unit or unit or spec.unit)


# --------------------------------------------------------------------------- loading

_KEY_FIELDS = {"aliases", "secondary", "vocabulary", "multi_valued", "kind", "dimension", "unit", "note"}
_CONCEPT_FIELDS = {"forms", "broader", "contains", "group", "note"}


def _data_dir() -> Path:
    return Path(str(resources.files("shopping_companion.judges.matching") / "data"))


def _read_yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise ConfigError(f"lexicon file {path}: not valid YAML ({e})") from None


def _vocabulary(path: Path, name: str | None = None) -> Vocabulary:
    doc = _read_yaml(path) or {}
    if not isinstance(doc, dict) or not isinstance(doc.get("concepts"), dict):
        raise ConfigError(f"lexicon file {path}: needs a 'concepts' mapping")
    vname = str(doc.get("vocabulary") or name or path.stem)
    concepts: dict[str, Concept] = {}
    for cname, body in doc["concepts"].items():
        body = body or {}
        if not isinstance(body, dict):
            raise ConfigError(f"lexicon file {path}: concept {cname!r} must be a mapping (forms, broader)")
        extra = set(body) - _CONCEPT_FIELDS
        if extra:
            raise ConfigError(
                f"lexicon file {path}: concept {cname!r}: unknown fields {sorted(extra)}; allowed: forms, broader, contains, group, note"
            )
        forms = tuple(str(f) for f in body.get("forms") or [])
        broader = tuple(str(b) for b in body.get("broader") or [])
        contains = tuple(str(b) for b in body.get("contains") or [])
        group = body.get("group", False)
        if not isinstance(group, bool):
            raise ConfigError(f"lexicon file {path}: concept {cname!r}: group must be true or false")
        concepts[str(cname)] = Concept(str(cname), vname, forms, broader, contains, group)
    mods = frozenset(t for m in doc.get("modifiers") or [] for t in tokens(str(m)))
    return Vocabulary(vname, concepts, mods)


def _fingerprint(files: list[Path]) -> str:
    h = hashlib.sha256()
    for f in sorted(files):
        h.update(f.name.encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


@lru_cache(maxsize=4)
def load_lexicon(path: str | None = None) -> Lexicon:
    """Load (once per process and path) the lexicon from ``path`` (default: the package data).
    Raises :class:`~shopping_companion.errors.ConfigError` naming the file and field for a
    malformed file."""
    root = Path(path) if path else _data_dir()
    keys_doc = _read_yaml(root / "keys.yaml") if (root / "keys.yaml").exists() else {"keys": {}}
    vocab_files = sorted((root / "values").glob("*.yaml")) if (root / "values").exists() else []
    vocabularies = {}
    for f in vocab_files:
        v = _vocabulary(f)
        vocabularies[v.name] = v
    pt_file = root / "product_types.yaml"
    product_types = (
        _vocabulary(pt_file, "product_type") if pt_file.exists() else Vocabulary("product_type", {}, frozenset())
    )
    keys: dict[str, KeySpec] = {}
    alias: dict[str, tuple[str, str, str | None]] = {}
    for kname, body in (keys_doc.get("keys") or {}).items():
        body = body or {}
        extra = set(body) - _KEY_FIELDS
        if extra:
            raise ConfigError(
                f"lexicon keys.yaml: key {kname!r}: unknown fields {sorted(extra)}; allowed: {sorted(_KEY_FIELDS)}"
            )
        kind = str(body.get("kind") or "category")
        if kind not in ("category", "quantity", "text"):
            raise ConfigError(
                f"lexicon keys.yaml: key {kname!r}: kind must be category, quantity or text, got {kind!r}"
            )
        vocab = body.get("vocabulary")
        if vocab is not None and vocab not in vocabularies:
            raise ConfigError(f"lexicon keys.yaml: key {kname!r}: vocabulary {vocab!r} has no file values/{vocab}.yaml")
        unit = body.get("unit")
        if unit is not None and str(unit).lower() not in UNIT_ALIASES:
            raise ConfigError(f"lexicon keys.yaml: key {kname!r}: unknown unit {unit!r}")
        dim = body.get("dimension")
        dim = tuple(str(d) for d in dim) if isinstance(dim, list) else ((str(dim),) if dim else None)
        spec = KeySpec(
            str(kname), vocab, bool(body.get("multi_valued", False)), kind, dim, str(unit).lower() if unit else None
        )
        keys[spec.name] = spec
        entries = [(kname, "primary", None)]
        for role in ("aliases", "secondary"):
            for a in body.get(role) or []:
                if isinstance(a, dict):
                    entries.append(
                        (
                            a.get("name"),
                            "primary" if role == "aliases" else "secondary",
                            str(a["unit"]).lower() if a.get("unit") else None,
                        )
                    )
                else:
                    entries.append((a, "primary" if role == "aliases" else "secondary", None))
        for a, role, u in entries:
            if not a:
                continue
            k = compact(str(a).replace("_", " "))
            if k in alias and alias[k][0] != spec.name:
                raise ConfigError(f"lexicon keys.yaml: alias {a!r} is listed under {alias[k][0]!r} and {spec.name!r}")
            alias.setdefault(k, (spec.name, role, u))
    files = [p for p in [root / "keys.yaml", pt_file, *vocab_files] if p.exists()]
    return Lexicon(keys, vocabularies, product_types, _fingerprint(files) if files else "empty", alias)
