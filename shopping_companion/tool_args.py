"""The limits of the four tools' arguments and the checks the tool backends share.

One place for what ``envs/tools.py``'s argument models (what the agent's calls are validated
against, and the function schemas it is shown), ``catalog/search.py``'s
:class:`~shopping_companion.catalog.search.ProductSearch` and ``memory/store.py``'s
:class:`~shopping_companion.memory.store.MemoryStore` (what the tool service calls too) each
wrote down: how many results, queries and ids a call may ask for, how long a query may be, and
the checks of ``top_k`` and of an id list. It sits below ``catalog/``, ``memory/`` and ``envs/``
(it imports only ``errors.py``), so each of them can use it.
"""

from __future__ import annotations

from numbers import Integral
from typing import Any

from shopping_companion.errors import ToolInputError

__all__ = [
    "MAX_QUERIES",
    "MAX_QUERY_CHARS",
    "MAX_SESSION_IDS",
    "MAX_TOP_K",
    "MAX_VIEW_IDS",
    "check_id_list",
    "check_top_k",
]

#: Longest query of ``product_search`` / one query of ``mem_search``, in characters.
MAX_QUERY_CHARS = 2000
#: Most results one ``product_search`` / ``mem_search`` call may ask for (``top_k``).
MAX_TOP_K = 50
#: Most queries of one ``mem_search`` call.
MAX_QUERIES = 10
#: Most session ids of one ``mem_view`` call.
MAX_SESSION_IDS = 10
#: Most product ids of one ``product_view`` call.
MAX_VIEW_IDS = 20


def check_top_k(top_k: Any, *, integral_float: bool = False) -> int:
    """``top_k`` as an ``int`` from 1 to :data:`MAX_TOP_K`. An ``int`` or a numpy integer counts
    (with ``integral_float``, so does a float such as ``10.0``); a bool or a string never does.

    Raises:
        ToolInputError: field ``top_k``, naming the allowed range.
    """
    if integral_float and isinstance(top_k, float) and top_k.is_integer():
        top_k = int(top_k)
    if isinstance(top_k, bool) or not isinstance(top_k, Integral):  # numpy integers are Integral
        raise ToolInputError("top_k", f"must be an integer from 1 to {MAX_TOP_K}, got {top_k!r}")
    if not 1 <= int(top_k) <= MAX_TOP_K:
        raise ToolInputError("top_k", f"must be from 1 to {MAX_TOP_K}, got {int(top_k)}")
    return int(top_k)


def check_id_list(field: str, ids: Any, limit: int, noun: str) -> list[Any]:
    """``ids`` as a list, when it is a list or tuple of 1 to ``limit`` items (what the items must
    be is the caller's check); ``noun`` names them in messages (``"session"``, ``"product"``).

    Raises:
        ToolInputError: naming ``field``: not a list or tuple (a string neither), empty, or more
            than ``limit`` items.
    """
    if not isinstance(ids, (list, tuple)):
        raise ToolInputError(field, f"must be a list of 1–{limit} {noun} id strings, got {type(ids).__name__}")
    if not ids:
        raise ToolInputError(field, f"must hold 1–{limit} {noun} ids, got an empty list")
    if len(ids) > limit:
        raise ToolInputError(field, f"at most {limit} ids per call, got {len(ids)}")
    return list(ids)
