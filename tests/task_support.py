"""A small Task builder shared by tests that need tasks without a benchmark."""

from __future__ import annotations

from shopping_companion.types import Preference, ProductSlot, SessionRef, Task


def shoe_task(i: int, split: str = "train", **extra: object) -> Task:
    """Task ``t{i}``: one needle session ``s{i}``, one preference (base_colour Black), one slot
    (Shoes, reference product ``p:{i}``); ``extra`` sets any other Task field."""
    return Task(
        task_id=f"t{i}",
        split=split,
        instruction=f"I need shoes number {i}.",
        user_id=f"u{i}",
        history=[SessionRef(session_id=f"s{i}", date="2024-01-01")],
        needle_session_ids=[f"s{i}"],
        preferences=[Preference(attribute="base_colour", value="Black")],
        slots=[ProductSlot(product_type="Shoes", reference_product_id=f"p:{i}")],
        **extra,
    )
