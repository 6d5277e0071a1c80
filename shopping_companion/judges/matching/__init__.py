"""The value-matching layer: the one place where attribute values are compared.

Stage 1 and stage 2 of the rule judge, the tool-wise semantic fallback, synthesis verification
and the LLM judge's post-checks all call it (nothing else compares attribute values):

- :mod:`.normalize` — text normalisation (case, accents, plurals, hyphen/space/joined forms,
  number words);
- :mod:`.lexicon` — canonical attribute keys with aliases and value vocabularies with synonyms and
  families, loaded from the package's data files (``data/``, versioned and reviewed);
- :mod:`.quantity` — numbers with units and comparison operators (pint);
- :mod:`.values` — value equivalence and satisfaction rules, with an embedding fallback
  (:mod:`.similarity`, MiniLM) at a threshold calibrated on a labelled set;
- :mod:`.product` — reading a product's fields and text for a preference, and its product type.

The rules are written out in ``docs/judge.md``.
"""

from shopping_companion.judges.matching.lexicon import Lexicon, ResolvedKey, load_lexicon
from shopping_companion.judges.matching.normalize import compact, padded, phrase, tokens
from shopping_companion.judges.matching.product import Evidence, ProductReader, default_reader
from shopping_companion.judges.matching.quantity import Constraint, Quantity, parse_constraint, parse_quantities
from shopping_companion.judges.matching.values import Value, ValueMatcher, default_matcher

__all__ = [
    "Constraint",
    "Evidence",
    "Lexicon",
    "ProductReader",
    "Quantity",
    "ResolvedKey",
    "Value",
    "ValueMatcher",
    "compact",
    "default_matcher",
    "default_reader",
    "load_lexicon",
    "padded",
    "parse_constraint",
    "parse_quantities",
    "phrase",
    "tokens",
]
