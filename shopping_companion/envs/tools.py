"""The four tools of the Shopping Companion agent (paper App. B.1; docs/architecture.md, tools).

Every tool validates its arguments with a pydantic model and never raises into the episode: bad
arguments, unknown ids or unknown tool names become a :class:`ToolResult` with ``error`` set and a
JSON observation that names the problem and the allowed values. Every result records the ids it
returned (``returned_ids``) so the tool-wise reward (Eqs. 8–9) can be computed exactly.

Observations are JSON text (``content``), truncated at ``max_observation_chars`` (or the smaller
per-call ``max_chars`` the environment passes) with a visible marker (:data:`TRUNCATION_MARKER`).
When an observation is cut, ``returned_ids`` keeps only the ids that still appear in the visible
text (an id listed k times, as many times as it still appears, at most k), so the tool-wise reward
counts exactly what the agent was shown. ``mem_search`` lists one session id per retrieved turn
(Eq. 8 counts retrieved items); the other tools list each returned session/product once.
``product_view`` with some unknown, empty or non-string ids returns the known products and an
``errors`` list with one entry per bad id; only a call with no known product at all is an error.
"""

from __future__ import annotations

import copy
import functools

import json
import logging
from typing import Any, Callable, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from shopping_companion.errors import CircuitOpenError, ToolInputError, ToolServiceError
from shopping_companion.tool_args import MAX_QUERIES, MAX_SESSION_IDS, MAX_TOP_K, MAX_VIEW_IDS
from shopping_companion.types import Product, Session, ToolCall, ToolResult

_log = logging.getLogger(__name__)

TRUNCATION_MARKER = "\n…[observation truncated: {n} more characters not shown]"


def truncate_text(text: str, limit: int) -> str:
    """``text`` cut to its first ``limit`` characters plus :data:`TRUNCATION_MARKER` (which states
    how many characters were dropped); unchanged when ``len(text) <= limit``. ``limit`` >= 0."""
    if len(text) <= limit:
        return text
    kept = text[: max(0, limit)]
    return kept + TRUNCATION_MARKER.format(n=len(text) - len(kept))


MEMORY_TOOLS = ("mem_search", "mem_view")
PRODUCT_TOOLS = ("product_search", "product_view")


class ProductBackend(Protocol):
    """The catalog behind the product tools, as :class:`~shopping_companion.catalog.search.ProductSearch`
    implements it (its ``search``/``view`` state arguments, defaults and errors). The tool box always
    passes every ``search`` argument (from :class:`ProductSearchArgs`), so none needs a default here."""

    def search(
        self, query: str, shop_id: str | None, min_price: float | None, max_price: float | None, top_k: int
    ) -> list[dict[str, Any]]: ...

    def view(self, product_ids: list[str]) -> tuple[list[Product], list[str]]: ...


class MemoryBackend(Protocol):
    """The user's memory behind the memory tools, as :class:`~shopping_companion.memory.store.MemoryStore`
    implements it (its ``search``/``view`` state arguments and errors)."""

    def search(self, queries: list[str] | str, top_k: int = 10) -> list[dict[str, Any]]: ...

    def view(self, session_ids: list[str]) -> tuple[list[Session], list[str]]: ...


# --------------------------------------------------------------------------- argument models


class _Args(BaseModel):
    """Lax validation (a numeric string such as ``"10"`` is accepted for a number, as models often
    quote numbers) except that booleans are never numbers (``top_k: true`` is an error)."""

    model_config = ConfigDict(extra="forbid", strict=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_numbers(cls, v: Any, info: Any) -> Any:
        if isinstance(v, bool):
            ann = cls.model_fields[info.field_name].annotation
            if ann in (int, float, int | None, float | None):
                raise ValueError("must be a number, not a boolean")
        return v


class MemSearchArgs(_Args):
    """Search the user's past conversations; returns the best-matching turns."""

    queries: list[str] = Field(
        min_length=1,
        max_length=MAX_QUERIES,
        description=f"1-{MAX_QUERIES} natural-language queries about what the user said before.",
    )
    top_k: int = Field(default=10, ge=1, le=MAX_TOP_K, description=f"Number of turns to return (1-{MAX_TOP_K}).")

    @field_validator("queries", mode="before")
    @classmethod
    def _one_query_is_a_list(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v


class MemViewArgs(_Args):
    """Read whole past sessions by id (ids come from mem_search results)."""

    session_ids: list[str] = Field(
        min_length=1, max_length=MAX_SESSION_IDS, description=f"1-{MAX_SESSION_IDS} session ids."
    )


class ProductSearchArgs(_Args):
    """BM25 search over the product catalog with optional shop and price filters."""

    query: str = Field(description="Keywords describing the product.")
    shop_id: str | None = Field(default=None, description="Only products of this shop.")
    min_price: float | None = Field(default=None, ge=0, description="Lowest price, inclusive.")
    max_price: float | None = Field(default=None, ge=0, description="Highest price, inclusive.")
    top_k: int = Field(default=10, ge=1, le=MAX_TOP_K, description=f"Number of products (1-{MAX_TOP_K}).")


class ProductViewArgs(_Args):
    """Full product records: description, attributes, options, shop."""

    product_ids: list[str] = Field(min_length=1, max_length=MAX_VIEW_IDS, description=f"1-{MAX_VIEW_IDS} product ids.")


ARG_MODELS: dict[str, type[_Args]] = {
    "mem_search": MemSearchArgs,
    "mem_view": MemViewArgs,
    "product_search": ProductSearchArgs,
    "product_view": ProductViewArgs,
}


#: How ``product_view`` names the field an extracted attribute was read from.
ORIGIN_LABEL = {
    "title": "from title",
    "description": "from description",
    "features": "from features",
    "category": "from category",
    "details": "from details",
    "llm": "read by a model",
}


def product_record(p: Product) -> dict[str, Any]:
    """The record ``product_view`` shows for one product: every field except ``url``, ``image``,
    ``source`` and empty ones; an attribute extracted from text (``p.attribute_sources``) is shown
    with its provenance in brackets, ``{"colour": "Pink/Red (from title)"}``, and the spans
    themselves are left out (they are in the shown text already)."""
    rec = p.model_dump(exclude={"url", "image", "source", "attribute_sources"}, exclude_none=True)
    if p.attribute_sources and "attributes" in rec:
        rec["attributes"] = {
            k: (
                f"{v} ({ORIGIN_LABEL.get(p.attribute_sources[k].source, 'extracted')})"
                if k in p.attribute_sources
                else v
            )
            for k, v in rec["attributes"].items()
        }
    return rec


def tool_schema(name: str) -> dict[str, Any]:
    """The OpenAI function schema of tool ``name``, generated from its pydantic model (once per
    process; each call returns a fresh copy the caller may change). KeyError for an unknown tool."""
    return copy.deepcopy(_tool_schema(name))


_SCHEMA_LISTS: dict[tuple[str, ...], list[dict[str, Any]]] = {}


@functools.cache
def _tool_schema(name: str) -> dict[str, Any]:
    model = ARG_MODELS[name]
    params = model.model_json_schema()
    params.pop("title", None)
    for prop in params.get("properties", {}).values():
        prop.pop("title", None)
    return {
        "type": "function",
        "function": {"name": name, "description": (model.__doc__ or "").strip(), "parameters": params},
    }


def _describe_validation_error(tool: str, err: ValidationError) -> str:
    model = ARG_MODELS[tool]
    parts = []
    for e in err.errors():
        loc = ".".join(str(x) for x in e["loc"]) or "(arguments)"
        field = str(e["loc"][0]) if e["loc"] else ""
        hint = ""
        if field in model.model_fields:
            desc = model.model_fields[field].description
            hint = f" (allowed: {desc})" if desc else ""
        elif e["type"] == "extra_forbidden":
            hint = f" (allowed arguments: {', '.join(model.model_fields)})"
        parts.append(f"argument '{loc}': {e['msg']}{hint}")
    return f"{tool}: " + "; ".join(parts)


def _dump(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(", ", ": "))


def _visible_ids(ids: list[str], visible: str) -> list[str]:
    """The ids still shown in a cut observation: an id listed k times (``mem_search`` lists a
    session once per retrieved turn) is kept as many times as it still appears, at most k."""
    left: dict[str, int] = {}
    out: list[str] = []
    for i in ids:
        if i not in left:
            left[i] = visible.count(_dump(i))
        if left[i] > 0:
            left[i] -= 1
            out.append(i)
    return out


def _split_product_ids(arguments: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """``product_view`` arguments with unusable ids (empty or blank strings, non-strings) taken out
    of ``product_ids``, and one ``{"product_id", "error"}`` per such id (its JSON text when it is
    not a string). Arguments whose ``product_ids`` is not a list, or holds more than the tool's
    maximum, are returned unchanged (the tool's validation reports them)."""
    ids = arguments.get("product_ids")
    if not isinstance(ids, list) or len(ids) > MAX_VIEW_IDS:
        return arguments, []
    good: list[str] = []
    errors: list[dict[str, str]] = []
    for x in ids:
        if isinstance(x, str) and x.strip():
            good.append(x)
        elif isinstance(x, str):
            errors.append({"product_id": x, "error": "empty product id"})
        else:
            errors.append(
                {
                    "product_id": json.dumps(x, ensure_ascii=False, default=str)[:80],
                    "error": f"a product id must be a string, got {type(x).__name__}",
                }
            )
    if not errors:
        return arguments, []
    return {**arguments, "product_ids": good}, errors


class ToolBox:
    """Executes tool calls for one episode.

    ``products`` serves product_search / product_view; ``memory`` (the user's own
    :class:`~shopping_companion.memory.store.MemoryStore`) serves mem_search / mem_view.
    ``allowed`` restricts which tools the current stage may call.
    """

    def __init__(
        self, products: ProductBackend, memory: MemoryBackend | None, max_observation_chars: int = 12_000
    ) -> None:
        if max_observation_chars < 200:
            raise ValueError("max_observation_chars: must be >= 200")
        self.products = products
        self.memory = memory
        self.max_observation_chars = max_observation_chars
        self._handlers: dict[str, Callable[[Any], tuple[Any, list[str]]]] = {
            "mem_search": self._mem_search,
            "mem_view": self._mem_view,
            "product_search": self._product_search,
            "product_view": self._product_view,
        }

    def __copy__(self) -> "ToolBox":
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> "ToolBox":
        """A tool box is stateless over shared read-only services (the Lucene index, a memory
        store); copies share them. (``gymnasium.make`` deep-copies an environment's kwargs.)"""
        return self

    def schemas(self, names: tuple[str, ...] | list[str]) -> list[dict[str, Any]]:
        """The function schemas of ``names``: one shared list per tool set (read-only: copy before
        changing it; :func:`tool_schema` gives private copies)."""
        key = tuple(names)
        cached = _SCHEMA_LISTS.get(key)
        if cached is None:
            cached = _SCHEMA_LISTS.setdefault(key, [tool_schema(n) for n in key])
        return cached

    def truncate(self, text: str, max_chars: int | None = None) -> str:
        """Cut ``text`` at ``min(max_observation_chars, max_chars)`` and append a visible marker."""
        return truncate_text(text, self._limit(max_chars))

    def _limit(self, max_chars: int | None) -> int:
        return self.max_observation_chars if max_chars is None else min(max_chars, self.max_observation_chars)

    def _error(self, call: ToolCall, message: str, max_chars: int | None = None) -> ToolResult:
        content = self.truncate(_dump({"error": message}), max_chars)
        return ToolResult(call_id=call.call_id, name=call.name, content=content, error=message)

    def execute(self, call: ToolCall, allowed: tuple[str, ...] | list[str], max_chars: int | None = None) -> ToolResult:
        """Run one tool call; never raises for bad model output. A
        :class:`~shopping_companion.errors.ToolServiceError` of a backend (a remote tool service
        that cannot be reached after its retries) propagates: it is no observation.

        ``allowed``: the tool names of the current stage (others get an error result naming the
        allowed ones). ``max_chars``: a per-call observation limit (the smaller of it and
        ``max_observation_chars`` applies). An observation that is cut keeps in ``returned_ids``
        only the ids still visible in ``content``.
        """
        if call.name not in allowed:
            known = "known" if call.name in ARG_MODELS else "unknown"
            return self._error(
                call,
                f"{known} tool {call.name!r} is not available in this stage; allowed tools: {', '.join(allowed)}",
                max_chars,
            )
        arguments, id_errors = call.arguments, []
        if call.name == "product_view":
            arguments, id_errors = _split_product_ids(call.arguments)
            if id_errors and not arguments.get("product_ids"):
                return self._error(
                    call,
                    "product_view: no usable product id: "
                    + "; ".join(f"{e['product_id']!r}: {e['error']}" for e in id_errors[:10]),
                    max_chars,
                )
        try:
            args = ARG_MODELS[call.name].model_validate(arguments)
        except ValidationError as e:
            return self._error(call, _describe_validation_error(call.name, e), max_chars)
        try:
            if id_errors:
                payload, ids = self._product_view(args, id_errors)  # type: ignore[arg-type]
            else:
                payload, ids = self._handlers[call.name](args)
        except ToolInputError as e:
            return self._error(call, f"{call.name}: {e}", max_chars)
        except (ToolServiceError, CircuitOpenError):  # the tool service is down: not the agent's fault
            raise
        except Exception as e:  # a backend bug must not end the episode; it is logged and shown
            _log.exception("tool %s failed on arguments %r", call.name, call.arguments)
            return self._error(
                call, f"{call.name}: internal error ({type(e).__name__}); try different arguments", max_chars
            )
        full = _dump(payload)
        content = self.truncate(full, max_chars)
        if len(content) != len(full):  # cut: count only what the agent can see
            visible = content[: self._limit(max_chars)]
            ids = _visible_ids(ids, visible)
        return ToolResult(call_id=call.call_id, name=call.name, content=content, returned_ids=ids)

    # ------------------------------------------------------------------ handlers

    def _need_memory(self) -> MemoryBackend:
        if self.memory is None:
            raise ToolInputError("tool", "this episode has no memory store (oracle mode)")
        return self.memory

    def _mem_search(self, a: MemSearchArgs) -> tuple[Any, list[str]]:
        """``returned_ids``: one session id per retrieved ITEM (a distinct ``(session_id,
        turn_index)`` hit), in rank order, so a session appears once per turn of it that was
        retrieved: Eq. 8's ``|I_u|`` counts retrieved turns and ``sess(i)`` maps each to its
        session (10 turns of a gold session + 5 turns of 5 other sessions -> 10/15)."""
        hits = self._need_memory().search(a.queries, top_k=a.top_k)
        items = dict.fromkeys((h["session_id"], h.get("turn_index")) for h in hits)
        ids = [sid for sid, _ in items]
        return {"results": hits, "n_results": len(hits)}, ids

    def _mem_view(self, a: MemViewArgs) -> tuple[Any, list[str]]:
        sessions, unknown = self._need_memory().view(a.session_ids)
        if not sessions:
            raise ToolInputError("session_ids", f"unknown session ids {unknown}; use ids returned by mem_search")
        payload: dict[str, Any] = {
            "sessions": [
                {
                    "session_id": s.session_id,
                    "date": s.date,
                    "turns": [{"role": t.role, "content": t.content} for t in s.turns],
                }
                for s in sessions
            ]
        }
        if unknown:
            payload["unknown_session_ids"] = unknown
        return payload, [s.session_id for s in sessions]

    def _product_search(self, a: ProductSearchArgs) -> tuple[Any, list[str]]:
        hits = self.products.search(
            a.query, shop_id=a.shop_id, min_price=a.min_price, max_price=a.max_price, top_k=a.top_k
        )
        payload: dict[str, Any] = {"results": hits, "n_results": len(hits)}
        if not hits:
            payload["note"] = (
                "no product matched; use plain descriptive keywords (search syntax such as AND, *, "
                "field:value is treated as text) or relax the shop/price filters"
            )
        return payload, [h["product_id"] for h in hits]

    def _product_view(self, a: ProductViewArgs, id_errors: list[dict[str, str]] | None = None) -> tuple[Any, list[str]]:
        """The known products, plus ``errors``: one ``{"product_id", "error"}`` per id that was
        empty, not a string (``id_errors``, found before validation) or not in the catalog; the
        call fails (error result) only when no requested id is a known product, so the known
        products of a partly bad call still count in the tool-wise reward (Eq. 9)."""
        products, unknown = self.products.view(a.product_ids)
        errors = list(id_errors or []) + [
            {"product_id": u, "error": "unknown product id; use ids returned by product_search"} for u in unknown
        ]
        if not products:
            detail = "; ".join(f"{e['product_id']!r}: {e['error']}" for e in errors[:10])
            raise ToolInputError(
                "product_ids",
                f"unknown product ids {unknown}; use ids returned by product_search"
                + (f" ({detail})" if id_errors else ""),
            )
        payload: dict[str, Any] = {"products": [product_record(p) for p in products]}
        if unknown:
            payload["unknown_product_ids"] = unknown
        if errors:
            payload["errors"] = errors
        return payload, [p.product_id for p in products]
