"""Hand-written preferences, tasks and products for the rule judge's unit tests."""

from __future__ import annotations

from shopping_companion.types import Preference, Product, ProductSlot, Task


def pref(attribute: str, value: str, polarity: str = "want") -> Preference:
    """A preference of slot 0."""
    return Preference(slot=0, attribute=attribute, value=value, polarity=polarity)


def task(*gold: Preference) -> Task:
    """A one-slot task whose gold preferences are ``gold``."""
    return Task(
        task_id="t",
        instruction="x",
        user_id="u",
        history=[],
        needle_session_ids=[],
        preferences=list(gold),
        slots=[ProductSlot(product_type="item", reference_product_id="r")],
    )


def product(title: str, description: str = "", features: tuple[str, ...] = (), **attrs: str) -> Product:
    """A product with ``title``, ``description``, ``features`` and the attributes ``attrs``."""
    return Product(
        product_id="x:1",
        title=title,
        description=description,
        features=list(features),
        source="test",
        shop="s",
        shop_id="s",
        category_path=["Things"],
        attributes=attrs,
    )
