"""Issue 32, item 3: the classes of disagreement with people's wording that a rule can close with
explicit evidence (polarity inside a value, glossed values, negation in product text, field/text
conflicts, spelling variants, food groups), and the ones it must leave uncertain."""

from __future__ import annotations

from shopping_companion.judges.matching import default_matcher, default_reader
from shopping_companion.judges.matching.normalize import phrase_occurs, tokens
from shopping_companion.judges.matching.values import readings, yes_no
from shopping_companion.judges.rule import match_preferences
from shopping_companion.types import Preference, Product, ProductSlot, Task

M = default_matcher()
R = default_reader()


def pref(attribute: str, value: str, polarity: str = "want") -> Preference:
    return Preference(slot=0, attribute=attribute, value=value, polarity=polarity)


def task(*gold: Preference) -> Task:
    return Task(
        task_id="t",
        instruction="x",
        user_id="u",
        history=[],
        needle_session_ids=[],
        preferences=list(gold),
        slots=[ProductSlot(product_type="item", reference_product_id="r")],
    )


def product(title: str, description: str = "", **attrs: str) -> Product:
    return Product(
        product_id="x:1",
        title=title,
        description=description,
        source="test",
        shop="s",
        shop_id="s",
        category_path=["Things"],
        attributes=attrs,
    )


def test_yes_no_and_readings():
    assert yes_no("No") is False and yes_no("none") is False and yes_no("not needed") is False
    assert yes_no("yes") is True and yes_no("navy") is None
    assert readings("solar (light-powered)") == ("solar (light-powered)", "solar", "light-powered")
    assert readings("Lightning (for iPhone)") == ("Lightning (for iPhone)", "Lightning")  # a qualifier
    assert readings("at most 81 cm (32 inches)")[-1] == "at most 32 inches"  # the bound's words kept
    assert readings("navy") == ("navy",)


def test_negated_phrases_in_prose():
    assert phrase_occurs("latex", "Powder-free, latex-free vinyl gloves") is False
    assert phrase_occurs("latex", "made without latex") is False
    assert phrase_occurs("latex", "natural latex gloves") is True
    assert phrase_occurs("latex", "vinyl gloves") is None


def test_british_and_american_spellings_read_alike():
    for a, b in [("analogue", "analog"), ("aluminium", "aluminum"), ("sulphate free", "sulfate free")]:
        assert tokens(a) == tokens(b)


def test_polarity_inside_a_value():
    # "glass: no" as a want is avoiding glass
    res = match_preferences(task(pref("material", "glass", "avoid")), [pref("glass", "no")])
    assert res.matches == [0] and not res.unsure_gold
    # avoiding laces is wanting a shoe with no laces (the closure vocabulary's slip-on)
    res = match_preferences(task(pref("fastening", "slip-on")), [pref("laces", "laces", "avoid")])
    assert res.matches == [0]
    # the same reading on both sides: avoid "Printed" (gold) is avoid "prints" (answer)
    res = match_preferences(task(pref("pattern", "Printed", "avoid")), [pref("pattern", "prints", "avoid")])
    assert res.matches == [0]


def test_glossed_gold_value_matches_either_reading():
    gold = task(pref("power source", "solar (light-powered)"))
    assert match_preferences(gold, [pref("power source", "light-powered")]).matches == [0]
    assert match_preferences(gold, [pref("power source", "solar")]).matches == [0]
    assert match_preferences(gold, [pref("power source", "battery")]).matches == [None]


def test_a_plain_quantity_for_a_bound_is_uncertain_a_bare_number_is_not():
    key = M.key("water resistance")
    d = M.compare(key, "at least 100 m", "100 m")
    assert not d.holds and not d.explicit
    d = M.compare(M.key("width"), "at most 150 cm", "150")
    assert not d.holds and d.explicit


def test_free_of_is_not_containing():
    p = product("Vinyl Exam Gloves, Powder-Free, Latex-Free, 100 Count")
    ev = R.check(p, pref("latex", "latex", "avoid"))
    assert ev.satisfied and ev.confident
    ev = R.check(p, pref("latex", "latex"))
    assert not ev.satisfied


def test_avoid_that_the_text_states_is_uncertain_not_accepted():
    # the field says viscose, the description says polyester: a conflict, never a confident yes
    p = product("Navy Tee", "Material and Care 100% polyester, machine wash", Fabric="Viscose Rayon")
    ev = R.check(p, pref("fabric", "polyester", "avoid"))
    assert not ev.confident and ev.reason == "field_text_conflict"
    # another property's field naming the avoided material
    p = product("Chest of 4 drawers, 78x124 cm", colour="White frosted glass")
    ev = R.check(p, pref("material", "glass", "avoid"))
    assert not ev.confident and ev.reason == "field_text_conflict"
    # nothing states it: the page's word (confident)
    ev = R.check(product("Chest of 4 drawers", colour="White"), pref("material", "glass", "avoid"))
    assert ev.satisfied and ev.confident


def test_unknown_key_value_only_in_prose_is_uncertain():
    p = product("Gel Pen, 0.7mm, Black Ink", "Comes in black or blue ink versions.")
    ev = R.check(p, pref("ink shade", "blue"))
    assert not ev.confident


def test_food_group_avoid_applies_to_a_member():
    ev = R.check(product("Cheese Nachos 150 g"), pref("flavour", "dairy", "avoid"))
    assert not ev.satisfied and ev.confident
    ev = R.check(product("Salted Nachos 150 g"), pref("flavour", "dairy", "avoid"))
    assert ev.satisfied
    # avoiding butter is not avoiding all dairy
    ev = R.check(product("Cheese Crackers"), pref("flavour", "butter", "avoid"))
    assert ev.satisfied
