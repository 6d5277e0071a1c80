"""The catalog's view and matcher, built once per process for the builds that share a catalog.

A build (:class:`~shopping_companion.benchmark.synthesis.build.Synthesizer`) needs a
:class:`~.catalog_view.CatalogView` (product types, features, eligibility, add-on shop groups)
and a :class:`~.verify.CatalogMatcher` (its token indexes, built lazily): together about 6 s of
CPU over the 98,729 products of the shared catalog (three builds of 3 tasks: 34.8 CPU-s with a
view per build, 22.6 with one). Both are
pure functions of the product list and two settings, and neither changes after it is built, so
:func:`view_and_matcher` keeps the last :data:`KEPT` of them, keyed by the identity of the product
list (:func:`~shopping_companion.catalog.cache.load_catalog` hands every caller in a process the
same list) and the settings. A second build over the same catalog in the same process (a test
session, ``shopcomp quickstart`` after ``synth``) starts from them.

The list must not change after a view of it is built (the catalog's lists never do); a list of
another length, or another list object, gets its own view.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import NamedTuple

from shopping_companion.benchmark.synthesis.catalog_view import CatalogView
from shopping_companion.benchmark.synthesis.verify import CatalogMatcher
from shopping_companion.types import Product

__all__ = ["KEPT", "ViewAndMatcher", "view_and_matcher"]

#: how many (product list, settings) views are kept in the process
KEPT = 2


class ViewAndMatcher(NamedTuple):
    view: CatalogView
    matcher: CatalogMatcher


_kept: OrderedDict[tuple[int, int, int, bool], tuple[list[Product], ViewAndMatcher]] = OrderedDict()
_lock = threading.Lock()


def view_and_matcher(products: list[Product], min_attributes: int, allow_unpriced: bool) -> ViewAndMatcher:
    """The :class:`CatalogView` of ``products`` (``min_attributes``, ``allow_unpriced``: as
    :class:`CatalogView` takes them) and the :class:`CatalogMatcher` of its products; built on the
    first call for this list object and settings, then reused (module docstring)."""
    key = (id(products), len(products), int(min_attributes), bool(allow_unpriced))
    with _lock:
        hit = _kept.get(key)
        if hit is not None and hit[0] is products:
            _kept.move_to_end(key)
            return hit[1]
        view = CatalogView(products, min_attributes, allow_unpriced=allow_unpriced)
        out = ViewAndMatcher(view, CatalogMatcher(view.products))
        _kept[key] = (products, out)  # the list is held, so its id cannot be reused while kept
        while len(_kept) > KEPT:
            _kept.popitem(last=False)
        return out
