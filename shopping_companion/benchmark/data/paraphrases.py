"""The paraphrase lexicon: how a user says a wanted value without the catalog's words.

``paraphrases.yaml`` (next to this module) holds, per canonical attribute key of the value matcher
(:mod:`shopping_companion.judges.matching`, ``keys.yaml``) and per value *concept* of that key's
vocabulary (``values/<vocabulary>.yaml``), user statements in three styles:

``paraphrase``
    other words for the value (``"half sleeves"`` for short sleeves), often a synonym the
    vocabulary itself lists;
``family``
    the value placed in its family or described by relation (navy: "in the blue family but really
    deep, the colour of a night sky");
``experience``
    what happens to the user with other values, from which the value follows ("anything past the
    elbow stays in the cupboard").

It also holds phrasing banks for numeric wishes (``numeric``): per gold label (``width``,
``capacity``, ...) or per pint dimension (``length``, ``mass``, ``volume``, ``information``,
``dimensionless``) and per direction (``le``: at most, ``ge``: at least, ``eq``: exactly), sentences
with a ``{limit}`` placeholder that the generator fills with the limit in a unit it chooses.

Synthesis verification (:mod:`shopping_companion.benchmark.synthesis.verify`) reads a statement of
this lexicon back from a user turn (:meth:`ParaphraseLexicon.find`: all normalised tokens of the
statement occur contiguously in the turn), so a needle is checked from its text alone.

:func:`validate` lists every problem of the file (the unit tests require none): the key must be a
canonical key with a vocabulary, the concept must exist in it, a statement must not contain the
concept's own name (then it is not a paraphrase), must not mention another concept of the same
vocabulary that is neither broader nor narrower (it would state a different value) nor any value of
the vocabularies in :data:`CROSS_CHECKED` (the attributes most often wanted together), and must not
appear under two concepts of one key; numeric templates must have exactly one ``{limit}``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

import yaml

from shopping_companion.errors import ConfigError
from shopping_companion.judges.matching import Lexicon, load_lexicon, tokens

__all__ = ["DIRECTIONS", "STYLES", "ParaphraseLexicon", "Phrase", "direction_of", "load_paraphrases", "validate"]

#: Statement styles, in the order the file lists them.
STYLES: tuple[str, ...] = ("paraphrase", "family", "experience")
#: Directions of a numeric wish: ``le`` (at most / below), ``ge`` (at least / above), ``eq`` (exactly).
DIRECTIONS: tuple[str, ...] = ("le", "ge", "eq")
#: Vocabularies whose values a statement of ANOTHER key must not mention: the attributes most often
#: wanted together, so a colour sentence naming a fabric could contradict a wanted fabric.
CROSS_CHECKED: tuple[str, ...] = (
    "colour",
    "material",
    "pattern",
    "neck",
    "sleeve_length",
    "fit",
    "occasion",
    "closure",
)
#: pint dimensionality strings (as :mod:`~shopping_companion.judges.matching.quantity` writes them)
#: -> the dimension name used as a fallback bank in the file.
DIMENSION_NAMES: dict[str, str] = {
    "[length]": "length",
    "[mass]": "mass",
    "[length] ** 3": "volume",
    "[information]": "information",
    "": "dimensionless",
}


@dataclass(frozen=True)
class Phrase:
    """One statement of the lexicon: canonical ``key``, ``concept`` of its vocabulary, ``style``
    (one of :data:`STYLES`), the ``text`` as written and its normalised ``tokens``."""

    key: str
    concept: str
    style: str
    text: str
    tokens: tuple[str, ...]


def direction_of(op: str) -> str:
    """The bank direction of a constraint operator: ``<=``/``<`` → ``le``, ``>=``/``>`` → ``ge``,
    ``=`` → ``eq``. Raises ``ValueError`` for ``range`` or anything else."""
    if op in ("<=", "<"):
        return "le"
    if op in (">=", ">"):
        return "ge"
    if op == "=":
        return "eq"
    raise ValueError(f"operator {op!r}: no phrasing bank (allowed: <=, <, >=, >, =)")


def _contains(hay: Sequence[str], needle: Sequence[str]) -> bool:
    n = len(needle)
    if not n or n > len(hay):
        return False
    first = needle[0]
    return any(hay[i] == first and tuple(hay[i : i + n]) == tuple(needle) for i in range(len(hay) - n + 1))


class ParaphraseLexicon:
    """The parsed lexicon (module docstring). ``statements``: key → concept → phrases;
    ``numeric``: label or dimension name → direction → templates; ``source``: the file read."""

    def __init__(
        self, statements: dict[str, dict[str, list[Phrase]]], numeric: dict[str, dict[str, list[str]]], source: str
    ) -> None:
        self.statements = statements
        self.numeric = numeric
        self.source = source
        self._by_first: dict[str, dict[str, list[Phrase]]] = {}
        for key, concepts in statements.items():
            idx: dict[str, list[Phrase]] = {}
            for phrases in concepts.values():
                for p in phrases:
                    if p.tokens:
                        idx.setdefault(p.tokens[0], []).append(p)
            self._by_first[key] = idx

    def phrases(self, key: str, concept: str, styles: Sequence[str] = STYLES) -> list[Phrase]:
        """Statements of ``concept`` under canonical ``key`` in the given styles (may be empty)."""
        return [p for p in self.statements.get(key, {}).get(concept, []) if p.style in styles]

    def find(self, key: str, text_tokens: Sequence[str]) -> list[Phrase]:
        """Statements of ``key`` whose normalised tokens occur contiguously in ``text_tokens``."""
        idx = self._by_first.get(key)
        if not idx:
            return []
        out = []
        for i, t in enumerate(text_tokens):
            for p in idx.get(t, ()):
                if tuple(text_tokens[i : i + len(p.tokens)]) == p.tokens:
                    out.append(p)
        return out

    def numeric_templates(self, label: str, dimension: str, direction: str) -> list[str]:
        """Templates for a numeric wish: the label's own bank for ``direction`` if it has one, else
        the bank of the pint ``dimension`` (``"[length]"`` or a name such as ``"length"``)."""
        own = self.numeric.get(label.strip().lower(), {}).get(direction)
        if own:
            return list(own)
        name = DIMENSION_NAMES.get(dimension, dimension)
        return list(self.numeric.get(name, {}).get(direction, []))


class _UniqueKeyLoader(yaml.SafeLoader):
    """A safe YAML loader that refuses a mapping with the same key twice (a second ``sport:``
    block would silently replace the first)."""


def _unique_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: set = set()
    for key_node, _value in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.YAMLError(f"duplicate key {key!r} at line {key_node.start_mark.line + 1}")
        seen.add(key)
    return loader.construct_mapping(node, deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


def _default_path() -> Path:
    return Path(str(resources.files("shopping_companion.benchmark.data") / "paraphrases.yaml"))


@lru_cache(maxsize=4)
def load_paraphrases(path: str | None = None) -> ParaphraseLexicon:
    """Read the lexicon (once per process and path; default: the package's ``paraphrases.yaml``).
    Raises :class:`~shopping_companion.errors.ConfigError` naming the file and entry when the file
    is not valid YAML or not of the documented shape (content rules: :func:`validate`)."""
    p = Path(path) if path else _default_path()
    try:
        doc = yaml.load(p.read_text(encoding="utf-8"), Loader=_UniqueKeyLoader) or {}
    except FileNotFoundError:
        raise ConfigError(f"paraphrase lexicon {p}: file not found") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"paraphrase lexicon {p}: not valid YAML ({e})") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"paraphrase lexicon {p}: the top level must be a mapping (statements, numeric)")
    extra = set(doc) - {"version", "statements", "numeric"}
    if extra:
        raise ConfigError(
            f"paraphrase lexicon {p}: unknown top-level fields {sorted(extra)}; allowed: version, statements, numeric"
        )
    statements: dict[str, dict[str, list[Phrase]]] = {}
    for key, concepts in (doc.get("statements") or {}).items():
        if not isinstance(concepts, dict):
            raise ConfigError(f"paraphrase lexicon {p}: statements.{key} must map concepts to styles")
        out_c: dict[str, list[Phrase]] = {}
        for concept, styles in concepts.items():
            if not isinstance(styles, dict):
                raise ConfigError(f"paraphrase lexicon {p}: statements.{key}.{concept} must map styles to lists")
            bad = set(styles) - set(STYLES)
            if bad:
                raise ConfigError(
                    f"paraphrase lexicon {p}: statements.{key}.{concept}: unknown styles {sorted(bad)}; "
                    f"allowed: {', '.join(STYLES)}"
                )
            phrases = []
            for style in STYLES:
                for text in styles.get(style) or []:
                    if not isinstance(text, str) or not text.strip():
                        raise ConfigError(
                            f"paraphrase lexicon {p}: statements.{key}.{concept}.{style}: entries must be non-empty strings"
                        )
                    phrases.append(Phrase(str(key), str(concept), style, text.strip(), tokens(text)))
            out_c[str(concept)] = phrases
        statements[str(key)] = out_c
    numeric: dict[str, dict[str, list[str]]] = {}
    for label, banks in (doc.get("numeric") or {}).items():
        if not isinstance(banks, dict) or set(banks) - set(DIRECTIONS):
            raise ConfigError(
                f"paraphrase lexicon {p}: numeric.{label} must map directions ({', '.join(DIRECTIONS)}) to lists"
            )
        numeric[str(label).lower()] = {d: [str(t).strip() for t in banks.get(d) or []] for d in DIRECTIONS}
    return ParaphraseLexicon(statements, numeric, str(p))


def validate(lex: ParaphraseLexicon | None = None, matcher_lexicon: Lexicon | None = None) -> list[str]:
    """Every content problem of the paraphrase lexicon (module docstring), as readable lines naming
    the entry; an empty list means the file is valid."""
    lex = lex or load_paraphrases()
    ml = matcher_lexicon or load_lexicon()
    problems: list[str] = []
    for key, concepts in lex.statements.items():
        rk = ml.resolve_key(key)
        if rk.spec is None or rk.spec.name != key:
            problems.append(f"statements.{key}: not a canonical key of the matcher (resolves to {rk.name!r})")
            continue
        vocab = ml.vocabulary(rk)
        if vocab is None:
            problems.append(f"statements.{key}: the key has no value vocabulary")
            continue
        owner: dict[tuple[str, ...], str] = {}
        for concept, phrases in concepts.items():
            if concept not in vocab.concepts:
                problems.append(f"statements.{key}.{concept}: no such concept in vocabulary {vocab.name!r}")
                continue
            if not phrases:
                problems.append(f"statements.{key}.{concept}: no statements")
            name = tokens(concept)
            for ph in phrases:
                where = f"statements.{key}.{concept}.{ph.style}: {ph.text!r}"
                if "{" in ph.text or "}" in ph.text:
                    problems.append(f"{where}: placeholders are not allowed in statements")
                if _contains(ph.tokens, name):
                    problems.append(f"{where}: states the value {concept!r} verbatim")
                foreign = [c for c in vocab.find(ph.text, prose=True) if not vocab.related(c, concept)]
                if foreign:
                    problems.append(f"{where}: mentions other values of {vocab.name!r}: {foreign}")
                for other in CROSS_CHECKED:
                    ov = ml.vocabularies.get(other)
                    if other == vocab.name or ov is None:
                        continue
                    found = ov.find(ph.text, prose=True)
                    if found:
                        problems.append(f"{where}: mentions values of {other!r}: {list(found)}")
                prev = owner.setdefault(ph.tokens, concept)
                if prev != concept:
                    problems.append(f"{where}: also listed under {prev!r}")
    for label, banks in lex.numeric.items():
        for d, templates in banks.items():
            for t in templates:
                if t.count("{limit}") != 1 or t.replace("{limit}", "").count("{"):
                    problems.append(f"numeric.{label}.{d}: {t!r}: needs exactly one {{limit}} and no other placeholder")
    return problems
