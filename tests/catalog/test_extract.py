"""Attribute extraction with provenance (catalog/extract.py, catalog/extract_llm.py): real records
of every source, hand-built edge cases, the loader hook, the index text, product_view and the judge."""

from __future__ import annotations

from shopping_companion.types import Product

import gzip
import json
from pathlib import Path

import pytest

from shopping_companion.catalog import loader
from shopping_companion.catalog.extract import EXTRACTOR, enrich, extract_attributes, structured_keys
from shopping_companion.catalog.extract_llm import LLMExtractor, validate_items
from shopping_companion.catalog.index import contents_text
from shopping_companion.catalog.loader import LOADER_VERSION, load_products, record_to_product
from shopping_companion.envs.tools import product_record
from shopping_companion.judges.matching.product import default_reader
from shopping_companion.types import AttributeSource, Preference
from tests.openai_server import ScriptedOpenAIServer

#: real catalog records used below, by uid
REAL = {
    "bestbuy_algolia:5580410",  # Apple - iPhone 7 256GB - Gold (AT&T)
    "bestbuy_algolia:4575205",  # Urban Armor Gear - Case for Samsung Galaxy Note 5 Cell Phones - Red
    "bestbuy_algolia:4448555",  # Apple - iPhone 6s Plus 16GB - Rose Gold (Sprint): 5.5-inch display
    "bestbuy_algolia:4666209",  # Kanex - 3' 30-Pin Charge-and-Sync Cable - White
    "ikea_sa:50219044",  # FREDDE Desk, 185x74x146 cm
    "ikea_sa:39251988",  # HAVSTEN 4-seat conversation set
    "ikea_sa:39306288",  # LERHAMN Table and 2 chairs
    "bigbasket:12098",  # Gourmets Delite Wafers - Cappuccino 150 gm Pouch
    "bigbasket:19136",  # Mayonnaise - Eggless (Gluten Free)
    "adidas_us:S29055",  # Terrex Trailmaker Primegreen Hiking Shoes, Men
    "adidas_us:H45131",  # HEAT.RDY Running Tank Top
    "myntra_catalog:10274041",  # ONLY Women White & Red Checked Top: "has a V-neck, long sleeves"
    "myntra_styles:7783",  # Urban Yoga track pant "made of 95% cotton and 5% elastane"
    "amazon2018_minionerec:Office_Products:794",  # Pendaflex ... (Pack of 30)
}


@pytest.fixture(scope="module")
def real(catalog_path: Path) -> dict[str, Product]:
    if not catalog_path.exists():
        pytest.skip(f"catalog not found at {catalog_path}")
    out: dict[str, Product] = {}
    with gzip.open(catalog_path, "rt", encoding="utf-8") as fh:
        for line in fh:
            if not any(u.split(":", 1)[1] in line for u in REAL):
                continue
            rec = json.loads(line)
            if rec.get("uid") in REAL:
                out[rec["uid"]] = record_to_product(rec)[0]
    assert set(out) == REAL
    return out


def _p(**kw) -> Product:
    base = dict(product_id="t:1", title="Thing", source="test", shop="Shop", shop_id="shop")
    base.update(kw)
    return Product(**base)


def _check_spans(p: Product, found: dict) -> None:
    fields = {
        "title": p.title,
        "description": p.description or "",
        "features": " | ".join(p.features),
        "category": " > ".join(p.category_path),
        "details": " ".join(p.attributes.values()),
    }
    for key, (_value, src) in found.items():
        assert src.extractor == EXTRACTOR
        assert 0 < len(src.span) <= 120
        assert src.span in fields[src.source], (key, src)


# --------------------------------------------------------------------------- real records per source


def test_bestbuy_phone_and_case(real):
    phone = extract_attributes(real["bestbuy_algolia:5580410"])
    assert phone["carrier"][0] == "AT&T" and phone["storage"][0] == "256 GB" and phone["colour"][0] == "Gold"
    assert "compatible model" not in phone  # a phone is not "for" a device
    case = extract_attributes(real["bestbuy_algolia:4575205"])
    assert case["colour"][0] == "Red" and case["colour"][1].source == "title"
    assert case["compatible model"][0] == "Samsung Galaxy Note 5"
    assert "storage" not in case and "screen size" not in case and "carrier" not in case
    big = extract_attributes(real["bestbuy_algolia:4448555"])
    assert big["screen size"][0] == "5.5 inch" and big["screen size"][1].source == "description"
    cable = extract_attributes(real["bestbuy_algolia:4666209"])
    assert cable["cable length"][0] == "3 ft"
    for uid in ("bestbuy_algolia:5580410", "bestbuy_algolia:4575205", "bestbuy_algolia:4448555"):
        _check_spans(real[uid], extract_attributes(real[uid]))


def test_ikea_dimensions_and_seats(real):
    desk = real["ikea_sa:50219044"]
    found = extract_attributes(desk)
    # the structured fields that are real (not the dropped "1" placeholders) are never overridden
    dims_missing = {k for k in ("width", "depth", "height") if f"{k}_cm" not in desk.attributes}
    assert dims_missing and {"width", "depth", "height"} & set(found) == dims_missing
    raw = desk.model_copy(update={"attributes": {k: v for k, v in desk.attributes.items() if not k.endswith("_cm")}})
    dims = extract_attributes(raw)
    assert (dims["width"][0], dims["depth"][0], dims["height"][0]) == ("185 cm", "74 cm", "146 cm")
    assert extract_attributes(real["ikea_sa:39251988"])["seats"][0] == "4"
    assert extract_attributes(real["ikea_sa:39306288"])["seats"][0] == "2"


def test_ikea_dimensions_that_contradict_the_title_are_dropped():
    # the dump shifts the fields: depth 1 (a placeholder), width holding the real depth
    rec = {
        "uid": "ikea_sa:20399777",
        "source": "ikea_sa",
        "shop": "IKEA",
        "title": "NISSAFORS Trolley, 50.5x30x83 cm",
        "attributes": {"width_cm": 30, "depth_cm": 1, "height_cm": 83},
    }
    p, fixes = record_to_product(rec)
    assert "width_cm" not in p.attributes and p.attributes["height_cm"] == "83"
    assert "ikea_dimension_contradicts_title" in fixes
    from shopping_companion.catalog.extract import enrich
    from shopping_companion.judges.matching import default_reader
    from shopping_companion.types import Preference

    q = enrich(p)
    assert q.attributes["width"] == "50.5 cm" and q.attribute_sources["width"].source == "title"
    assert not default_reader().check(q, Preference(attribute="width", value="at most 40 cm")).satisfied
    # without a WxDxH title a width next to a placeholder depth is suspect
    r, fixes = record_to_product({**rec, "title": "NISSAFORS Trolley", "attributes": {"width_cm": 30, "depth_cm": 1}})
    assert "width_cm" not in r.attributes and "ikea_width_next_to_placeholder_depth" in fixes


def test_table_runner_is_not_a_sport_and_beauty_titles_have_no_material():
    runner = Product(
        product_id="myntra_catalog:10018905", title="SEJ by Nisha Gupta Printed Table Runner", source="myntra_catalog",
        shop="Myntra (India)", shop_id="myntra-india/x", category_path=["Unisex"],
    )  # fmt: skip
    assert "sport" not in extract_attributes(runner)
    wash = Product(
        product_id="bigbasket:10778", title="Acnoklin-Ds Foam Face Wash", source="bigbasket", shop="BigBasket (India)",
        shop_id="bigbasket-india/x", category_path=["Beauty & Hygiene", "Skin Care", "Face Care"],
    )  # fmt: skip
    assert "material" not in extract_attributes(wash)


def test_ikea_placeholder_dimension_dropped_by_loader():
    rec = {
        "uid": "ikea_sa:1",
        "source": "ikea_sa",
        "shop": "IKEA",
        "title": "LYCKSELE MURBO Mattress, 140x188x10 cm",
        "attributes": {"width_cm": 1, "depth_cm": 1, "height_cm": 1, "designer": "IKEA of Sweden"},
    }
    p, fixes = record_to_product(rec)
    assert "width_cm" not in p.attributes and fixes.count("ikea_placeholder_dimension") == 3
    assert extract_attributes(p)["depth"][0] == "188 cm"


def test_bigbasket_pack_diet_flavour(real):
    wafers = extract_attributes(real["bigbasket:12098"])
    assert wafers["net quantity"][0] == "150 gm" and wafers["flavour"][0] == "Cappuccino"
    mayo = extract_attributes(real["bigbasket:19136"])
    assert mayo["diet"][0] == "Eggless, Gluten Free"
    _check_spans(real["bigbasket:19136"], mayo)


def test_adidas_gender_and_sport(real):
    shoes = extract_attributes(real["adidas_us:S29055"])
    assert shoes["gender"] == ("Men", AttributeSource(source="category", span="Men", extractor=EXTRACTOR))
    assert shoes["sport"][0] == "Hiking"
    assert extract_attributes(real["adidas_us:H45131"])["sport"][0] == "Running"
    assert "colour" not in shoes  # structured colour wins


def test_myntra_sources(real):
    top = extract_attributes(real["myntra_catalog:10274041"])
    assert top["neck"][0] == "V-neck" and top["sleeve length"][0] == "long sleeves" and top["pattern"][0] == "Checked"
    assert "colour" not in top  # primary_color is structured
    pant = real["myntra_styles:7783"]
    found = extract_attributes(pant)
    assert found["material"][0] == "95% cotton and 5% elastane"
    assert not structured_keys(pant) & set(found)
    _check_spans(pant, found)


def test_amazon_pack_count(real):
    assert extract_attributes(real["amazon2018_minionerec:Office_Products:794"])["pack count"][0] == "30"


def test_rule_judge_reads_extracted_attribute(real):
    case = enrich(real["bestbuy_algolia:4575205"])
    assert case.attributes["colour"] == "Red" and case.extracted("colour")
    ev = default_reader().check(case, Preference(attribute="colour", value="red"))
    assert ev.satisfied and ev.source == "attribute"
    assert not default_reader().check(case, Preference(attribute="color", value="black")).satisfied
    ev = default_reader().check(case, Preference(attribute="compatible device", value="Galaxy Note 5"))
    assert ev.satisfied and ev.source == "attribute"


# --------------------------------------------------------------------------- hand-built edge cases


def test_negated_and_comparative_text_is_not_extracted():
    p = _p(source="amazon2023", title="Wallet", description="This wallet is not made of leather, it is vegan.")
    assert "material" not in extract_attributes(p)
    p = _p(source="amazon2023", title="Bag", description="Looks like suede. Crafted from cotton canvas.")
    assert extract_attributes(p)["material"][0].lower() == "cotton canvas"
    p = _p(source="myntra_catalog", title="Roadster Women Non-Leather Black Flats", brand="Roadster")
    assert "material" not in extract_attributes(p)


def test_values_of_another_product_are_not_taken():
    p = _p(source="bestbuy_algolia", title="Acme - Case for Apple iPhone 6s 64GB - Black")
    found = extract_attributes(p)
    assert "storage" not in found and found["compatible model"][0] == "Apple iPhone 6s 64GB"
    p = _p(source="ikea_sa", title="KIVIK Cover for 3-seat sofa")
    assert "seats" not in extract_attributes(p)
    p = _p(source="bestbuy_algolia", title="Acme - Wall Charger Compatible with Lightning Devices - White")
    assert "connectivity" not in extract_attributes(p)


def test_two_readings_are_ambiguous():
    p = _p(source="amazon2023", title="Bag", description="Made of cotton, polyester or nylon depending on colour.")
    assert "material" not in extract_attributes(p)


def test_units_and_quantities():
    p = _p(source="bestbuy_algolia", title="Acme - 10,000mAh Portable Charger - Black")
    assert extract_attributes(p)["battery capacity"][0] == "10000 mAh"
    p = _p(source="bigbasket", title="Basmati Rice 1 kg", category_path=["Foodgrains, Oil & Masala", "Rice"])
    assert extract_attributes(p)["net quantity"][0] == "1 kg"
    p = _p(source="amazon2023", title="Desk", attributes={"Product Dimensions": '24"L x 12"W x 30"H'})
    found = extract_attributes(p)
    assert found["width"][0] == "12 inch" and found["height"][0] == "30 inch" and found["width"][1].source == "details"


def test_structured_fields_take_precedence_and_enrich_is_idempotent():
    p = _p(source="bestbuy_algolia", title="Acme - Case for iPhone 7 - Pink/Red", attributes={"color": "Rose"})
    q = enrich(p)
    assert q.attributes["color"] == "Rose" and "colour" not in q.attributes
    assert q.attributes["compatible model"] == "iPhone 7" and q.attribute_sources["compatible model"].source == "title"
    assert enrich(q) is q
    plain = _p(title="Thing")
    assert enrich(plain) is plain


def test_attribute_sources_must_name_attributes_and_old_json_loads():
    with pytest.raises(ValueError, match="attribute_sources"):
        _p(attribute_sources={"colour": {"source": "title", "span": "Red", "extractor": "x"}})
    with pytest.raises(ValueError):
        AttributeSource(source="url", span="x", extractor="x")
    old = _p(attributes={"colour": "Red"}).model_dump()
    del old["attribute_sources"]
    assert Product.model_validate(old).attribute_sources == {}


# --------------------------------------------------------------------------- loader, index, product_view


def _write_catalog(tmp_path: Path) -> Path:
    rec = {
        "uid": "bestbuy_algolia:1",
        "source": "bestbuy_algolia",
        "shop": "Best Buy (US)",
        "title": "Acme - Case for Apple iPhone 7 - Pink/Red",
        "brand": "Acme",
        "attributes": {"sku": "1"},
    }
    path = tmp_path / "products.jsonl"
    path.write_text(json.dumps(rec) + "\n")
    return path


def test_loader_hook_and_opt_out(tmp_path):
    path = _write_catalog(tmp_path)
    products, report = load_products(path)
    assert products[0].attributes["colour"] == "Pink/Red" and report.derived["attributes_extracted"] == 1
    raw, report = load_products(path, extract=False)
    assert raw[0].attributes == {} and "attributes_extracted" not in report.derived
    streamed = list(loader.iter_products(path))
    assert streamed[0].attribute_sources["colour"].span == "Pink/Red"


def test_loader_version_includes_rules(tmp_path, monkeypatch):
    from shopping_companion.catalog import extract

    assert LOADER_VERSION == 3 + extract.RULES_VERSION
    path = _write_catalog(tmp_path)
    h = loader.catalog_hash(path)
    monkeypatch.setattr(loader, "LOADER_VERSION", LOADER_VERSION + 1)
    assert loader.catalog_hash(path) != h  # a rules bump makes built indexes stale


def test_index_text_and_product_view(tmp_path):
    p = load_products(_write_catalog(tmp_path))[0][0]
    text = contents_text(p)
    assert text.count("colour Pink/Red") == 1 and "compatible model Apple iPhone 7" in text
    rec = product_record(p)
    assert rec["attributes"]["colour"] == "Pink/Red (from title)"
    assert "attribute_sources" not in rec and "url" not in rec


# --------------------------------------------------------------------------- LLM extractor (real local server)


def _llm_product() -> Product:
    return _p(
        source="amazon2023", title="Acme Tote Bag, Navy", description="A roomy tote made of cotton canvas. Not leather."
    )


def _extractor(srv: ScriptedOpenAIServer, tmp_path: Path) -> LLMExtractor:
    from shopping_companion.llm.openai_backend import OpenAIBackend

    backend = OpenAIBackend(model="m", base_url=srv.base_url, api_key="k", max_retries=0, timeout_s=10)
    return LLMExtractor("m", backend=backend, cache_path=tmp_path / "x.sqlite")


def test_llm_extractor_validates_items_and_caches(tmp_path):
    answer = {
        "attributes": [
            {"key": "colour", "value": "navy", "source": "title", "span": "Navy"},
            {"key": "material", "value": "cotton canvas", "source": "description", "span": "made of cotton canvas"},
            {"key": "material", "value": "leather", "source": "description", "span": "Not leather"},
            {"key": "screen size", "value": "6 inch", "source": "description", "span": "6-inch screen"},
            {"key": "glitter level", "value": "high", "source": "title", "span": "Acme"},
            {"key": "pattern", "value": "striped", "source": "title", "span": "Acme Tote"},
            "junk",
        ]
    }
    with ScriptedOpenAIServer([json.dumps(answer)]) as srv:
        ex = _extractor(srv, tmp_path)
        found = ex.extract(_llm_product())
        again = ex.extract(_llm_product())  # from the cache: the server has no second answer
    assert found == again
    assert found["colour"] == ("navy", AttributeSource(source="title", span="Navy", extractor="llm:m"))
    assert found["material"][0] == "cotton canvas" and set(found) == {"colour", "material"}
    s = ex.stats
    assert s["requests"] == 1 and s["cache_hits"] == 1
    assert s["duplicate_key"] == 0 and s["negated"] == 2 and s["span_not_found"] == 2
    assert s["unknown_key"] == 2 and s["value_not_in_span"] == 2 and s["bad_item"] == 2
    assert ex.enrich(_llm_product()).attribute_sources["material"].extractor == "llm:m"
    assert srv.bodies[0]["temperature"] == 0.0


def test_llm_extractor_invalid_json_is_counted_not_cached(tmp_path):
    good = json.dumps({"attributes": [{"key": "colour", "value": "Navy", "source": "title", "span": "Navy"}]})
    with ScriptedOpenAIServer(["sure! here you go: attributes = colour navy", good]) as srv:
        ex = _extractor(srv, tmp_path)
        assert ex.extract(_llm_product()) == {}
        assert ex.stats["invalid_json"] == 1
        assert ex.extract(_llm_product())["colour"][0] == "Navy"  # the broken answer was not cached
    assert ex.stats["requests"] == 2


def test_validate_items_never_overrides_structured_fields():
    p = _p(title="Acme Tote Bag, Navy", attributes={"color": "Blue"})
    items = [{"key": "colour", "value": "Navy", "source": "title", "span": "Navy"}]
    from collections import Counter

    stats: Counter = Counter()
    assert validate_items(p, items, "llm:m", stats=stats) == {} and stats["structured"] == 1
