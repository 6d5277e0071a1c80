"""The tools' argument limits and shared checks (shopping_companion/tool_args.py), as the tool
box's argument models, ProductSearch and MemoryStore use them."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from shopping_companion.envs.tools import MemSearchArgs, MemViewArgs, ProductSearchArgs, ProductViewArgs
from shopping_companion.errors import ToolInputError
from shopping_companion.tool_args import (
    MAX_QUERIES,
    MAX_SESSION_IDS,
    MAX_TOP_K,
    MAX_VIEW_IDS,
    check_id_list,
    check_top_k,
)


def test_top_k_in_range():
    assert check_top_k(1) == 1 and check_top_k(MAX_TOP_K) == MAX_TOP_K
    got = check_top_k(np.int64(7))
    assert got == 7 and type(got) is int
    assert check_top_k(10.0, integral_float=True) == 10  # ProductSearch takes 10.0, MemoryStore does not


@pytest.mark.parametrize("bad", [0, MAX_TOP_K + 1, -3, True, False, "5", None, 2.0, 2.5, [3]])
def test_top_k_refused_names_the_field_and_range(bad):
    with pytest.raises(ToolInputError) as e:
        check_top_k(bad)
    assert e.value.field == "top_k" and f"1 to {MAX_TOP_K}" in str(e.value)


@pytest.mark.parametrize("bad", [2.5, MAX_TOP_K + 1.0, float("nan"), True])
def test_top_k_integral_float_still_needs_a_whole_number_in_range(bad):
    with pytest.raises(ToolInputError):
        check_top_k(bad, integral_float=True)


def test_id_list_shape():
    assert check_id_list("session_ids", ("a", "b"), 3, "session") == ["a", "b"]
    assert check_id_list("product_ids", [1, None], 3, "product") == [1, None]  # items are the caller's check
    for bad, says in [
        ("a", "must be a list of 1–3 session id strings, got str"),
        ({"a": 1}, "got dict"),
        (None, "got NoneType"),
        ([], "must hold 1–3 session ids, got an empty list"),
        (["a"] * 4, "at most 3 ids per call, got 4"),
    ]:
        with pytest.raises(ToolInputError, match=says) as e:
            check_id_list("session_ids", bad, 3, "session")
        assert e.value.field == "session_ids"


def test_the_argument_models_hold_the_same_limits():
    MemSearchArgs(queries=["q"] * MAX_QUERIES, top_k=MAX_TOP_K)
    MemViewArgs(session_ids=["s"] * MAX_SESSION_IDS)
    ProductSearchArgs(query="q", top_k=MAX_TOP_K)
    ProductViewArgs(product_ids=["p"] * MAX_VIEW_IDS)
    for make in (
        lambda: MemSearchArgs(queries=["q"] * (MAX_QUERIES + 1)),
        lambda: MemSearchArgs(queries=["q"], top_k=MAX_TOP_K + 1),
        lambda: MemViewArgs(session_ids=["s"] * (MAX_SESSION_IDS + 1)),
        lambda: ProductSearchArgs(query="q", top_k=MAX_TOP_K + 1),
        lambda: ProductViewArgs(product_ids=["p"] * (MAX_VIEW_IDS + 1)),
    ):
        with pytest.raises(ValidationError):
            make()


def test_check_at_least_returns_the_value_or_names_field_bound_and_value():
    from shopping_companion.errors import ConfigError, check_at_least

    assert check_at_least("max_batch", 1, 1) == 1 and check_at_least("max_wait_s", 0.5, 0) == 0.5
    with pytest.raises(ValueError, match=r"^max_batch: must be >= 1, got 0$"):
        check_at_least("max_batch", 0, 1)
    with pytest.raises(ConfigError, match=r"^workers: must be >= 1, got -2$"):
        check_at_least("workers", -2, 1, ConfigError)
