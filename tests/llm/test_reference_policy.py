"""The reference policy's reading of add-on requests: deal terms, item phrases, slot assignment,
tool history (pure functions of the message list)."""

from __future__ import annotations

import json

from shopping_companion.llm.reference import ReferencePolicy, _best_slot, _deal_terms, _product_phrases, _tool_history


def user(text):
    return [{"role": "system", "content": "s"}, {"role": "user", "content": text}]


def test_deal_terms_from_the_environment_lines():
    msgs = user(
        "Shopping request: I need a cap and a wallet.\nNumber of products to recommend: 2\n"
        "Voucher: 1,250 INR off when spending at least 9,000 INR in shop myntra-india/brand-asics "
        "(every product must come from that shop)\nBudget: at most 8200 INR to pay after the voucher\n\n"
        "Identify my relevant preferences."
    )
    assert _deal_terms(msgs) == {
        "n": 2,
        "shop_id": "myntra-india/brand-asics",
        "discount": 1250.0,
        "min_spend": 9000.0,
        "budget": 8200.0,
    }
    assert _deal_terms(user("Shopping request: a shirt")) == {
        "n": 1,
        "shop_id": None,
        "discount": 0.0,
        "min_spend": 0.0,
        "budget": None,
    }


def test_product_phrases_from_the_request():
    r = (
        "There's a ₹400-off voucher in my account for Mayazen on Myntra (shop id myntra-india/mayazen). I need a "
        "pair of men's trousers, a pair of unisex flip flops, a unisex messenger bag and a pair of unisex "
        "sunglasses, all from that shop. Please choose ones that suit my taste."
    )
    assert _product_phrases(r, 4) == [
        "pair of men's trousers",
        "pair of unisex flip flops",
        "unisex messenger bag",
        "pair of unisex sunglasses",
    ]
    r = "I'd like to get a men's t-shirt and a pair of men's sports shoes there. My limit is ₹8,200."
    assert _product_phrases(r, 2) == ["men's t-shirt", "pair of men's sports shoes"]
    assert _product_phrases("I want something nice", 2) == []


def test_best_slot_by_shared_words_then_session():
    phrases = ["men's t-shirt", "pair of unisex socks"]
    assert _best_slot(phrases, "i only wear white socks", "") == 1
    assert _best_slot(phrases, "i love white", "talking about my socks drawer") == 1
    assert _best_slot(phrases, "i love white", "nothing related") == 0


def test_tool_history_pairs_calls_with_results():
    call = '<tool_call>{"name": "product_search", "arguments": {"query": "cap"}}</tool_call>'
    msgs = user("x") + [
        {"role": "assistant", "content": call},
        {"role": "tool", "content": json.dumps({"results": [{"product_id": "a"}]})},
        {"role": "assistant", "content": "<tool_call>{broken</tool_call>"},
        {"role": "tool", "content": "not json"},
    ]
    assert _tool_history(msgs) == [
        ("product_search", {"query": "cap"}, {"results": [{"product_id": "a"}]}),
        ("", {}, {}),
    ]


def test_bundle_answer_prefers_a_combination_within_budget():
    pol = ReferencePolicy({"navy": "colour"})
    terms = {"n": 2, "shop_id": "S", "discount": 100.0, "min_spend": 1000.0, "budget": 950.0}

    def prod(pid, price, title):
        return {"product_id": pid, "price": price, "shop_id": "S", "title": title, "currency": "INR"}

    views = [
        {"products": [prod("a1", 900.0, "Navy Shirt"), prod("a2", 400.0, "Grey Shirt")]},
        {
            "products": [
                prod("b1", 200.0, "Navy Cap"),
                prod("b2", 150.0, "Red Cap"),
                {**prod("x", 10.0, "Navy Cap"), "shop_id": "OTHER"},
            ]
        },
    ]
    prefs = [{"attribute": "colour", "value": "navy", "slot": 0}]
    text = pol._bundle_answer(views, prefs, terms)
    # a1+b1 = 1100 - 100 = 1000 > 950; a1+b2 = 1050 - 100 = 950 fits and keeps the navy shirt
    assert "@REC::a1@" in text and "@REC::b2@" in text and "@REC::x@" not in text
    assert "Total 1050 INR − voucher 100 = 950 INR (budget 950)" in text


def test_product_phrases_without_articles():
    r = "I want to buy bras and backpacks together from one shop, using the voucher."
    assert _product_phrases(r, 2) == ["bras", "backpacks"]
