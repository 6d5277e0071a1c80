"""LLM attribute extraction over any OpenAI-compatible endpoint, every answer checked by rules.

The rule extractor (:mod:`shopping_companion.catalog.extract`) is the offline default. This
module asks a model for the attributes a product's text states, as strict JSON::

    {"attributes": [{"key": "colour", "value": "Pink/Red", "source": "title", "span": "Pink/Red"}]}

and keeps an item only when all checks pass (the rest are dropped and counted by reason in
:attr:`LLMExtractor.stats`):

``bad_item``
    not an object with string ``key``, ``value``, ``source``, ``span``;
``unknown_key``
    the key resolves to no canonical key of the lexicon (``default_matcher().key``);
``structured``
    a structured field of the product already states that key (never overridden);
``bad_source``
    ``source`` is not ``title`` / ``description`` / ``features`` / ``category``;
``span_not_found``
    the span (≤ 120 characters) is not a verbatim substring of the named field (hallucinated);
``negated``
    a negation or comparison stands in or right before the span ("not leather", "like suede");
``value_not_in_span``
    the value matcher does not read the value in the span (:meth:`ValueMatcher.mentions`);
``duplicate_key``
    a valid value for that key came earlier in the answer.

Answers are cached in SQLite (:class:`~shopping_companion.llm.replies.ReplyCache`) under the SHA-256 of
``(model, prompt version, product text)``; only answers that parse as JSON are cached. HTTP,
deadlines and retries are :class:`~shopping_companion.llm.openai_backend.OpenAIBackend`'s.

Usage::

    ex = LLMExtractor("Qwen/Qwen3-8B", base_url="http://localhost:8000/v1")
    product = ex.enrich(product)          # extracted attributes with extractor "llm:<model>"
    ex.stats                              # requests, cache hits, accepted, dropped reasons
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

from shopping_companion.catalog.extract import _COMPARATIVE_BEFORE, _NEGATED_BEFORE, MAX_SPAN, structured_keys
from shopping_companion.judges.matching.values import ValueMatcher, default_matcher
from shopping_companion.types import AttributeSource, Product

__all__ = ["PROMPT_VERSION", "SYSTEM_PROMPT", "LLMExtractor", "product_text", "validate_items"]

#: Bump on every change of the prompt or of :func:`product_text` (part of the cache key).
PROMPT_VERSION = 1

SYSTEM_PROMPT = (
    "You read one product listing of an online shop and list the product attributes that its text "
    "states explicitly. Rules:\n"
    "1. Only attributes of THIS product. A 'case for iPhone 7' is not an iPhone: its compatible model "
    "is iPhone 7, and the phone's storage or screen are not the case's. Ignore accessories that are "
    "sold separately or mentioned for comparison.\n"
    "2. Never report negated or compared values ('not leather', 'feels like suede', 'lighter than "
    "steel').\n"
    "3. 'span' must be copied character for character from the field named in 'source' (title, "
    "description, features or category), at most 120 characters, and must contain the value.\n"
    "4. Use these attribute keys where they fit: {keys}.\n"
    "5. Answer with one JSON object and nothing else: "
    '{{"attributes": [{{"key": "...", "value": "...", "source": "title|description|features|category", '
    '"span": "..."}}]}}. An empty list is a fine answer.'
)

_SOURCES = ("title", "description", "features", "category")
_NEGATION_IN_SPAN = re.compile(r"\b(?:not|no|non|without|never|unlike|instead\s+of)\b", re.IGNORECASE)
#: keys the prompt offers (common shopper properties; any other lexicon key is still accepted)
PROMPT_KEYS = (
    "colour",
    "material",
    "pattern",
    "neck",
    "sleeve length",
    "fit",
    "closure",
    "gender",
    "sport",
    "occasion",
    "compatible model",
    "connectivity",
    "storage",
    "screen size",
    "battery capacity",
    "cable length",
    "width",
    "depth",
    "height",
    "weight",
    "seats",
    "net quantity",
    "pack count",
    "flavour",
    "diet",
    "size",
)


def product_text(p: Product, max_description: int = 1500, max_features: int = 1000) -> dict[str, str]:
    """The fields shown to the model (and searched for spans): ``title``, ``category`` (the path
    joined by " > "), ``description`` and ``features`` (blocks joined by " | "), each cut to the
    given number of characters; empty fields are left out."""
    out = {"title": p.title}
    if p.category_path:
        out["category"] = " > ".join(p.category_path)
    if p.description:
        out["description"] = p.description[:max_description]
    if p.features:
        out["features"] = " | ".join(p.features)[:max_features]
    return out


def validate_items(
    product: Product, items: Any, extractor: str, matcher: ValueMatcher | None = None, stats: Counter | None = None
) -> dict[str, tuple[str, AttributeSource]]:
    """The valid items of a model's ``attributes`` list (module docstring), keyed by canonical
    key; every rejected item is counted in ``stats`` under its reason."""
    m = matcher or default_matcher()
    stats = stats if stats is not None else Counter()
    fields = product_text(product)
    taken = structured_keys(product, m)
    out: dict[str, tuple[str, AttributeSource]] = {}
    if not isinstance(items, list):
        stats["bad_item"] += 1
        return out
    for it in items:
        if not isinstance(it, dict) or not all(isinstance(it.get(k), str) for k in ("key", "value", "source", "span")):
            stats["bad_item"] += 1
            continue
        rk = m.key(it["key"])
        if rk.spec is None:
            stats["unknown_key"] += 1
            continue
        key = rk.spec.name
        if key in taken:
            stats["structured"] += 1
            continue
        source, span, value = it["source"].strip().lower(), it["span"].strip(), " ".join(it["value"].split())
        if source not in _SOURCES:
            stats["bad_source"] += 1
            continue
        text = fields.get(source, "")
        pos = text.find(span) if span and len(span) <= MAX_SPAN else -1
        if pos < 0:
            stats["span_not_found"] += 1
            continue
        before = text[max(0, pos - 40) : pos]
        if _NEGATION_IN_SPAN.search(span) or _NEGATED_BEFORE.search(before) or _COMPARATIVE_BEFORE.search(before):
            stats["negated"] += 1
            continue
        if not value or not m.mentions(rk, value, span):
            stats["value_not_in_span"] += 1
            continue
        if key in out:
            stats["duplicate_key"] += 1
            continue
        out[key] = (value, AttributeSource(source=source, span=span, extractor=extractor))  # type: ignore[arg-type]
        stats["accepted"] += 1
    return out


class LLMExtractor:
    """Attribute extraction by a model behind an OpenAI-compatible endpoint (module docstring).

    Args:
        model: the model name sent to the endpoint (also in the cache key and in
            ``AttributeSource.extractor`` as ``"llm:<model>"``).
        base_url: the endpoint (``None``: the OpenAI default).
        api_key_env: environment variable holding the key (never stored).
        backend: a ready :class:`~shopping_companion.llm.base.ChatBackend` (default: an
            :class:`~shopping_companion.llm.openai_backend.OpenAIBackend` with ``timeout_s`` /
            ``max_retries`` / ``deadline_s``).
        cache_path: SQLite cache file (default ``<cache dir>/llm/extractions.sqlite``).
        max_tokens: answer budget per product.

    Raises :class:`~shopping_companion.errors.BackendError` /
    :class:`~shopping_companion.errors.CircuitOpenError` when the endpoint fails after its retries
    (an extraction run should stop, not silently lose products).
    """

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        *,
        backend: Any = None,
        cache_path: str | Path | None = None,
        timeout_s: float = 60,
        max_retries: int = 2,
        deadline_s: float | None = 180,
        max_tokens: int = 800,
        matcher: ValueMatcher | None = None,
    ) -> None:
        if not model:
            raise ValueError("LLMExtractor: model must be a non-empty model name")
        from shopping_companion.llm.replies import ReplyCache

        self.model = model
        self.extractor = f"llm:{model}"
        self.max_tokens = int(max_tokens)
        self.matcher = matcher or default_matcher()
        if backend is None:
            from shopping_companion.llm.openai_backend import OpenAIBackend

            http = {"timeout_s": timeout_s, "max_retries": max_retries, "deadline_s": deadline_s}
            backend = OpenAIBackend.for_role("extract", model, base_url=base_url, api_key_env=api_key_env, **http)
        self.backend = backend
        if cache_path is None:
            from shopping_companion.paths import cache_dir

            cache_path = cache_dir() / "llm" / "extractions.sqlite"
        self.cache = ReplyCache(cache_path)
        self.stats: Counter[str] = Counter()

    def _messages(self, fields: dict[str, str]) -> list[dict[str, Any]]:
        listing = "\n".join(f"{k}: {v}" for k, v in fields.items())
        return [
            {"role": "system", "content": SYSTEM_PROMPT.format(keys=", ".join(PROMPT_KEYS))},
            {"role": "user", "content": f"Product listing:\n{listing}"},
        ]

    def ask(self, product: Product) -> Any:
        """The model's ``attributes`` list for ``product`` (cached), or None when the answer is
        not a JSON object with such a list (counted as ``invalid_json``)."""
        from shopping_companion.llm.replies import extract_json
        from shopping_companion.llm.base import Sampling

        fields = product_text(product)
        key = self.cache.key({"model": self.model, "prompt_version": PROMPT_VERSION, "text": fields})
        text = self.cache.get(key)
        if text is None:
            msg = self.backend.chat(
                self._messages(fields),
                None,
                Sampling(temperature=0.0, top_p=1.0, top_k=None, max_tokens=self.max_tokens, seed=0),
            )
            self.stats["requests"] += 1
            text = msg.content or ""
            cache = True
        else:
            self.stats["cache_hits"] += 1
            cache = False
        try:
            obj = extract_json(text, which="first")
        except ValueError:
            self.stats["invalid_json"] += 1
            return None
        if cache:
            self.cache.put(key, text, model=self.model)
        items = obj.get("attributes")
        if not isinstance(items, list):
            self.stats["invalid_json"] += 1
            return None
        return items

    def extract(self, product: Product) -> dict[str, tuple[str, AttributeSource]]:
        """Validated attributes ``{canonical key: (value, AttributeSource)}`` (module docstring)."""
        items = self.ask(product)
        if items is None:
            return {}
        self.stats["items"] += len(items)
        return validate_items(product, items, self.extractor, self.matcher, self.stats)

    def enrich(self, product: Product) -> Product:
        """``product`` with the validated attributes added under canonical keys (structured fields
        and earlier extractions are kept); the same object when nothing is added."""
        found = {k: v for k, v in self.extract(product).items() if k not in product.attributes}
        if not found:
            return product
        return product.model_copy(
            update={
                "attributes": {**product.attributes, **{k: v for k, (v, _) in found.items()}},
                "attribute_sources": {**product.attribute_sources, **{k: s for k, (_, s) in found.items()}},
            }
        )

    def close(self) -> None:
        self.cache.close()
