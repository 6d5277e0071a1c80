"""Rule-based profiles (rating-aware, missing fields explicit) and template query trajectories
(5-8 first-person questions that never name the target or state hidden preferences)."""

from __future__ import annotations

import pytest

from shopping_companion.personalization.data import ItemRecord, Review
from shopping_companion.personalization.profiles import RuleProfileBuilder, UserProfile
from shopping_companion.personalization.queries import QueryRuleError, TemplateQueryGenerator, check_queries
from shopping_companion.personalization.text import product_type


def _rv(i, rating, title, text, asin=None):
    return Review(
        review_id=f"u:{asin or i}:{i}",
        user_id="u",
        parent_asin=asin or f"P{i}",
        category="C",
        rating=rating,
        title=title,
        text=text,
        timestamp=i,
    )


REVIEWS = [
    _rv(1, 5, "Sturdy and cute", "Very durable and the design is cute. Fits my 10 inch tablet perfectly.", "P1"),
    _rv(2, 5, "Love it", "Cute modern look, well made, great quality for the price.", "P2"),
    _rv(3, 1, "Broke fast", "It broke after a week and the packaging was damaged.", "P3"),
    _rv(4, 2, "Flimsy", "Cheap plastic, broke again, packaging torn on arrival.", "P4"),
]
ITEMS = {
    f"P{i}": ItemRecord(asin=f"P{i}", category="C", title=f"Thing {i}", title_source="history", brand="Acme", price=p)
    for i, p in ((1, 20.0), (2, 30.0), (3, 9.0), (4, 11.0))
}


def test_rule_profile_is_rating_aware_and_explicit_about_missing_fields():
    prof = RuleProfileBuilder().build(REVIEWS, ITEMS)
    assert "durability" in prof.quality_priorities and "5 stars" in prof.quality_priorities
    assert "packaging" in prof.dislikes and "1 stars" in prof.dislikes or "2 stars" in prof.dislikes
    assert "Recurring complaints" in prof.pain_points and "durability" in prof.pain_points
    assert prof.style and "cute" in prof.style
    assert prof.budget.startswith("Mid-range") and "$15.50" in prof.budget
    assert "10 inch" in prof.size
    assert "rated Acme highly 2 times" in prof.additional_notes
    only_good = RuleProfileBuilder().build(REVIEWS[:1], {})
    assert only_good.dislikes is None and only_good.pain_points is None and only_good.budget is None
    assert "Dislikes: Not specified" in only_good.as_text()
    # "Not specified" from an LLM becomes None
    p = UserProfile.model_validate(
        {
            "style": "Not specified",
            "budget": "None",
            "size": "",
            "quality_priorities": "x",
            "dislikes": None,
            "pain_points": "No clear pattern.",
            "additional_notes": None,
        }
    )
    assert p.style is None and p.budget is None and p.size is None and p.pain_points is None


def test_template_questions_follow_the_rules():
    item = ItemRecord(
        asin="B0TARGET01",
        category="C",
        title="Acme Sturdy Tablet Stand, Aluminium",
        title_source="metadata",
        brand="Acme",
        features=["Durable aluminium"],
        description="Foldable tablet stand",
    )
    prof = RuleProfileBuilder().build(REVIEWS, ITEMS)
    lengths = set()
    for k in range(20):
        traj = TemplateQueryGenerator(seed=k).generate(f"C:u{k}", item, prof, "tablet stand", ["packaging", "taste"])
        lengths.add(len(traj.queries))
        assert 5 <= len(traj.queries) <= 8 and len(set(traj.queries)) == len(traj.queries)
        for q in traj.queries:
            assert "acme" not in q.lower() and "B0TARGET01" not in q
            assert "on taste" not in q and "about taste" not in q and "to taste" not in q  # not an aspect of this item
        check_queries(traj.queries, item, prof)
    assert len(lengths) >= 3
    a = TemplateQueryGenerator(seed=1).generate("C:u", item, prof, "tablet stand", [])
    assert a == TemplateQueryGenerator(seed=1).generate("C:u", item, prof, "tablet stand", [])


@pytest.mark.parametrize(
    "qs,rule",
    [
        (["Which stand is best for me?"] * 5, "distinct"),
        ([f"Which stand {i} is best?" for i in range(5)], "'me'"),
        ([f"Is the Acme one good for me {i}?" for i in range(5)], "brand"),
        ([f"Is a sturdy tablet stand good for me {i}?" for i in range(5)], "title words"),
        ([f"Would B0TARGET01 suit me {i}?" for i in range(5)], "ASIN"),
        ([f"Which stand for me {i}?" for i in range(4)], "5-8"),
    ],
)
def test_question_rule_violations_are_named(qs, rule):
    item = ItemRecord(
        asin="B0TARGET01", category="C", title="Acme Sturdy Tablet Stand", title_source="metadata", brand="Acme"
    )
    with pytest.raises(QueryRuleError, match=rule):
        check_queries(qs, item)


def test_hidden_profile_phrases_are_rejected():
    item = ItemRecord(asin="B0X", category="C", title="Lamp", title_source="metadata")
    prof = UserProfile(
        style="Loves warm amber vintage lighting",
        budget=None,
        size=None,
        quality_priorities=None,
        dislikes=None,
        pain_points=None,
        additional_notes=None,
    )
    qs = [f"Question {i} for me" for i in range(4)] + ["I want warm amber vintage lighting for me"]
    with pytest.raises(QueryRuleError, match="hidden profile phrase"):
        check_queries(qs, item, prof)


def test_product_type_does_not_name_the_product():
    titles = ["Velvet Hair Clip Set", "Pink Hair Clip for Girls", "Summer Crystal Hair Clip, Sequins", "Gold Hair Comb"]
    assert product_type("Summer Crystal Hair Clip Sparkling Sequins, Double", "All_Beauty", titles) == "hair clip"
    assert product_type("", "Subscription_Boxes") == "subscription box"
