"""Catalog sources: Amazon Reviews 2023 / 2018 metadata, generic CSV / JSON lines / Parquet with a
field mapping, format detection, colour variants, and indexing a non-products source.

Amazon 2023 metadata files are not in the shared data directory, so the tests write small files
in the release's documented record format; the Amazon 2018 loader runs on the real
``reviews/amazon2018_meta_Gift_Cards.json.gz``.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from shopping_companion.catalog.index import contents_text, open_or_build, read_manifest
from shopping_companion.catalog.loader import (
    LoadReport,
    catalog_hash,
    ikea_colour_from_url,
    link_colour_variants,
    load_products,
)
from shopping_companion.catalog.search import ProductSearch
from shopping_companion.catalog.sources import (
    CatalogFormatError,
    FieldMapping,
    detect_format,
    load_catalog_file,
    parse_price,
    source_hash,
)
from shopping_companion.catalog.loader import BadRecord
from shopping_companion.types import Product

# --------------------------------------------------------------------------- Amazon 2023 records


def meta2023(parent_asin, title, **kw) -> dict:
    """A record in the Amazon Reviews 2023 item-metadata format."""
    rec = {
        "main_category": "All Beauty",
        "title": title,
        "average_rating": 4.3,
        "rating_number": 120,
        "features": [],
        "description": [],
        "price": None,
        "images": [],
        "videos": [],
        "store": None,
        "categories": [],
        "details": {},
        "parent_asin": parent_asin,
        "bought_together": None,
    }
    rec.update(kw)
    return rec


AMAZON2023_GOOD = [
    meta2023(
        "B0TEST0001",
        "Lavender Oat Body Wash, 16 fl oz",
        price=12.99,
        store="Meadow & Pine",
        features=["Colloidal oatmeal soothes dry skin", "Free of sulfates"],
        description=["A gentle wash for every day.", "Scented with <b>lavender</b> oil &amp; chamomile."],
        categories=["Beauty & Personal Care", "Skin Care", "Body", "Body Washes"],
        details={
            "Item Form": "Gel",
            "Scent": "Lavender",
            "Liquid Volume": "16 Fluid Ounces",
            "Best Sellers Rank": {"Beauty & Personal Care": 51234},
            "Date First Available": "March 3, 2021",
        },
        images=[
            {
                "thumb": "https://m.media-amazon.com/images/I/t1.jpg",
                "large": "https://m.media-amazon.com/images/I/l1.jpg",
                "variant": "MAIN",
                "hi_res": None,
            }
        ],
    ),
    meta2023(
        "B0TEST0002",
        "Bamboo Hair Brush with Cushion",
        price="$8.49",
        store="Kestrel Goods",
        details={"Color": "Natural Wood", "Size": "Large", "Material": "Bamboo"},
    ),
    meta2023(
        "B0TEST0003", "Travel Mirror", price="None", store="Kestrel Goods", categories=[], main_category="All Beauty"
    ),
    meta2023("B0TEST0004", "Nail File Set", price="$5.99 - $9.99", store=""),
    meta2023(
        "B0TEST0005",
        "Rose Water Toner",
        price="<span class='a-offscreen'>Currently unavailable</span>" * 3,
        details=json.dumps({"Skin Type": "Dry", "Color": "Pink"}),
    ),
]
AMAZON2023_BAD_RECORDS = [
    meta2023("B0TEST0001", "Duplicate of the body wash"),  # duplicate_uid
    meta2023(None, "No id at all"),  # missing_uid
    meta2023("B0TEST0006", "   "),  # missing_title
    meta2023("B0TEST0007", "Refund voucher", price=-3.0),  # negative_price
    ["not", "an", "object"],  # not_an_object
]
AMAZON2023_BAD_LINES = ["{broken json", ""]


def _write_jsonl(path: Path, records: list, raw_lines: list[str] = ()) -> Path:
    text = "\n".join([json.dumps(r) for r in records] + list(raw_lines)) + "\n"
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("name", ["meta_All_Beauty.jsonl", "meta_All_Beauty.jsonl.gz"])
def test_amazon2023_loader_maps_documented_fields(tmp_path, name):
    path = _write_jsonl(tmp_path / name, AMAZON2023_GOOD + AMAZON2023_BAD_RECORDS, AMAZON2023_BAD_LINES)
    assert detect_format(path) == "amazon2023"
    products, report = load_catalog_file(path)
    ids = [p.product_id for p in products]
    assert ids == [f"amazon2023_All_Beauty:B0TEST000{i}" for i in range(1, 6)]
    assert report.bad == {
        "duplicate_uid": 1,
        "missing_uid": 1,
        "missing_title": 1,
        "negative_price": 1,
        "not_an_object": 1,
        "invalid_json": 1,
        "empty_line": 1,
    }
    assert report.n_lines == 12 == report.n_loaded + report.n_bad
    assert report.fixed == {"price_range_lower_bound": 1, "unparseable_price_dropped": 1}
    assert report.by_source == {"amazon2023_All_Beauty": 5}

    wash, brush, mirror, files, toner = products
    assert wash.title == "Lavender Oat Body Wash, 16 fl oz"
    assert (wash.price, wash.currency, wash.shop, wash.brand) == (12.99, "USD", "Amazon.com", "Meadow & Pine")
    assert wash.shop_id == "amazon-com/brand-meadow-pine"
    assert wash.category_path == ["Beauty & Personal Care", "Skin Care", "Body", "Body Washes"]
    assert wash.description == "A gentle wash for every day.\nScented with lavender oil & chamomile."
    assert wash.features == ["Colloidal oatmeal soothes dry skin", "Free of sulfates"]
    assert wash.attributes == {
        "Item Form": "Gel",
        "Scent": "Lavender",
        "Liquid Volume": "16 Fluid Ounces",
        "Date First Available": "March 3, 2021",
    }  # the sales rank is not a product property
    assert wash.options == {"scent": ["Lavender"]}
    assert (wash.rating, wash.rating_count) == (4.3, 120.0)
    assert wash.image == "https://m.media-amazon.com/images/I/l1.jpg"
    assert wash.url == "https://www.amazon.com/dp/B0TEST0001"
    assert brush.price == 8.49 and brush.options == {"colour": ["Natural Wood"], "size": ["Large"]}
    assert brush.attributes["Material"] == "Bamboo"
    assert mirror.price is None and mirror.currency is None
    assert mirror.category_path == ["All Beauty"]  # main_category when categories is empty
    assert files.price == 5.99 and files.brand is None and files.shop_id == "amazon-com"
    assert toner.price is None  # scraped HTML instead of a price
    assert toner.attributes == {"Skin Type": "Dry", "Color": "Pink"}  # details given as JSON text
    assert toner.options == {"colour": ["Pink"]}
    # catalog-level: same ids whatever the file's compression; the category comes from the name
    assert all(p.source == "amazon2023_All_Beauty" for p in products)


def test_amazon2023_category_argument_and_unknown_name(tmp_path):
    path = _write_jsonl(tmp_path / "items.jsonl", AMAZON2023_GOOD[:2])
    assert detect_format(path) == "amazon2023"
    products, _ = load_catalog_file(path)
    assert products[0].product_id == "amazon2023_unknown:B0TEST0001"
    products, _ = load_catalog_file(path, "amazon2023", category="Beauty_and_Personal_Care")
    assert products[0].product_id == "amazon2023_Beauty_and_Personal_Care:B0TEST0001"
    assert source_hash(path, category="A") != source_hash(path, category="B")


@pytest.mark.parametrize(
    "raw,expected",
    [
        (12.99, (12.99, None)),
        (0, (0.0, None)),
        ("$12.99", (12.99, None)),
        ("12.99", (12.99, None)),
        ("$1,299.00", (1299.0, None)),
        ("None", (None, None)),
        ("", (None, None)),
        (None, (None, None)),
        ("—", (None, None)),
        ("$5.99 - $9.99", (5.99, "price_range_lower_bound")),
        ("from 3 to 7", (3.0, "price_range_lower_bound")),
        ("Currently unavailable", (None, "unparseable_price_dropped")),
        ("$1.00 $2.00 $3.00", (None, "unparseable_price_dropped")),
        (float("nan"), (None, "unparseable_price_dropped")),
        ({"value": 3}, (None, "unparseable_price_dropped")),
    ],
)
def test_parse_price(raw, expected):
    assert parse_price(raw) == expected


@pytest.mark.parametrize("raw", [-1, -0.01, "-$3.00"])
def test_parse_price_rejects_negative(raw):
    with pytest.raises(BadRecord) as e:
        parse_price(raw)
    assert e.value.reason == "negative_price"


# --------------------------------------------------------------------------- Amazon 2018


def test_amazon2018_loader_on_real_gift_cards(data_dir):
    path = data_dir / "reviews" / "amazon2018_meta_Gift_Cards.json.gz"
    assert detect_format(path) == "amazon2018"
    products, report = load_catalog_file(path)
    assert report.n_lines == 1547 == report.n_loaded  # the real file has no broken record
    assert report.bad == {}
    # some records carry scraped HTML/CSS instead of a price; those prices are dropped, counted
    assert report.fixed["unparseable_price_dropped"] == 4
    # category lists sometimes continue with feature sentences; they move to features, counted
    assert report.fixed["category_sentences_moved_to_features"] == 511
    by_id = {p.product_id: p for p in products}
    card = by_id["amazon2018_Gift_Cards:B001BKEWF2"]
    assert card.title == "Serendipity 3 $100.00 Gift Card"
    assert card.brand == "Serendipity 3" and card.shop_id == "amazon-com/brand-serendipity-3"
    assert card.category_path == ["Gift Cards"] and card.price is None
    assert "ASIN" not in card.attributes and card.attributes["Shipping Weight"] == "3 ounces"
    assert card.attributes["Product Dimensions"] == "3.4 x 2.1 inches ; 1.44 ounces"  # key whitespace cleaned
    pack = by_id["amazon2018_Gift_Cards:B001H53QE4"]
    assert pack.price == 1250.0 and pack.currency == "USD"
    priced = [p for p in products if p.price is not None]
    assert 300 < len(priced) < 400 and all(0 < p.price < 10_000 for p in priced)
    for p in products:
        assert p.category_path[0] == "Gift Cards" and all(len(c) <= 60 for c in p.category_path)
        assert "<" not in p.title and p.title == p.title.strip()


def test_amazon2018_bad_records_are_counted(tmp_path):
    good = {
        "asin": "B000000001",
        "title": "Coffee Shop eGift Card",
        "brand": "Bean There",
        "price": "$25.00",
        "category": ["Gift Cards", "Restaurants"],
        "main_cat": "Gift Cards",
        "description": ["Redeem in store."],
        "feature": ["No fees"],
        "details": {"\n    ASIN: ": "B000000001", "Item model number:": "BT-25"},
    }
    fashion = dict(
        good,
        asin="B000000002",
        title="Tote &amp; Card",
        category=[],
        main_cat='<img src="x.png" class="nav-categ-image" alt="AMAZON FASHION"/>',
    )
    path = _write_jsonl(
        tmp_path / "meta_Gift_Cards.json",
        [good, fashion, dict(good, title=""), dict(good, asin=""), dict(good, price="-$5.00", asin="B3")],
        ["not json"],
    )
    products, report = load_catalog_file(path)
    assert [p.product_id for p in products] == ["amazon2018_Gift_Cards:B000000001", "amazon2018_Gift_Cards:B000000002"]
    assert report.bad == {"missing_title": 1, "missing_uid": 1, "negative_price": 1, "invalid_json": 1}
    assert products[0].attributes == {"Item model number": "BT-25"}
    assert products[0].price == 25.0 and products[0].category_path == ["Gift Cards", "Restaurants"]
    assert products[1].title == "Tote & Card" and products[1].category_path == ["Amazon Fashion"]


# --------------------------------------------------------------------------- generic mapping

CSV_TEXT = """sku,name,maker,price,dept,colour,sizes,blurb,fabric
A-1,Linen Shirt,Northfold,$39.50,Men > Shirts > Casual,Sand,"S,M,L",Breathable summer shirt,Linen
A-2,Wool Beanie,Northfold,19,Accessories > Hats,Charcoal,,Ribbed knit,Merino wool
A-3,,Northfold,10,Accessories,Red,,No name,
A-4,Rain Jacket,Stormline,cheap,Men > Jackets,Blue,,Packable,Nylon
A-5,Canvas Tote,Stormline,-4,Bags,Beige,,Big,Canvas
A-1,Linen Shirt again,Northfold,41,Men > Shirts,Sand,,dup,Linen
A-6,Parka,Stormline,120,Men > Jackets,Olive,"M,L",Warm,Nylon,EXTRA
,,,,,,,,
"""

CSV_MAPPING = {
    "product_id": "sku",
    "title": "name",
    "source": "northshop",
    "shop_name": "North Shop (UK)",
    "brand": "maker",
    "price": "price",
    "currency_code": "GBP",
    "category_path": "dept",
    "description": "blurb",
    "attributes": {"colour": "colour", "Fabric": "fabric"},
    "options": {"size": "sizes"},
}


def test_generic_csv_with_mapping(tmp_path):
    path = tmp_path / "shop.csv"
    path.write_text(CSV_TEXT, encoding="utf-8")
    assert detect_format(path) == "csv"
    with pytest.raises(CatalogFormatError, match="mapping"):
        load_catalog_file(path)
    products, report = load_catalog_file(path, mapping=CSV_MAPPING)
    assert [p.product_id for p in products] == ["northshop:A-1", "northshop:A-2"]
    assert report.bad == {
        "missing_title": 1,
        "invalid_price": 1,
        "negative_price": 1,
        "duplicate_uid": 1,
        "invalid_row": 1,
        "empty_line": 1,
    }
    assert report.n_lines == 8 == report.n_loaded + report.n_bad
    shirt, beanie = products
    assert shirt.price == 39.5 and shirt.currency == "GBP" and shirt.shop == "North Shop (UK)"
    assert shirt.shop_id == "north-shop-uk/brand-northfold"
    assert shirt.category_path == ["Men", "Shirts", "Casual"]
    assert shirt.attributes == {"colour": "Sand", "Fabric": "Linen"}
    assert shirt.options == {"size": ["S", "M", "L"]} and beanie.options == {}
    assert shirt.description == "Breathable summer shirt"
    # gzip works the same
    gz = tmp_path / "shop.csv.gz"
    gz.write_bytes(gzip.compress(CSV_TEXT.encode()))
    assert [p.product_id for p in load_catalog_file(gz, mapping=CSV_MAPPING)[0]] == ["northshop:A-1", "northshop:A-2"]


def test_generic_jsonl_and_parquet_with_mapping(tmp_path):
    rows = [
        {
            "id": 1,
            "name": "Desk Lamp",
            "info": {"brand": "Lumo", "price": 24.0},
            "cats": ["Home", "Lighting"],
            "bullets": ["LED", "Dimmable"],
            "finish": "Matt black",
            "watts": 8,
        },
        {
            "id": 2,
            "name": "Floor Lamp",
            "info": {"brand": "Lumo", "price": "n/a"},
            "cats": ["Home", "Lighting"],
            "bullets": [],
            "finish": "Brass",
            "watts": None,
        },
        {"id": 3, "name": None, "info": {}, "cats": [], "bullets": [], "finish": None, "watts": None},
    ]
    mapping = FieldMapping(
        product_id="id",
        title="name",
        source="lampco",
        brand="info.brand",
        price="info.price",
        category_path="cats",
        features="bullets",
        attributes="*",
    )
    jl = _write_jsonl(tmp_path / "lamps.jsonl", rows)
    assert detect_format(jl) == "jsonl"
    with pytest.raises(CatalogFormatError, match="mapping"):
        load_catalog_file(jl)
    products, report = load_catalog_file(jl, mapping=mapping)
    assert [p.product_id for p in products] == ["lampco:1", "lampco:2"]
    assert report.bad == {"missing_title": 1}
    lamp = products[0]
    assert lamp.brand == "Lumo" and lamp.price == 24.0 and lamp.category_path == ["Home", "Lighting"]
    assert lamp.features == ["LED", "Dimmable"]
    assert lamp.attributes == {"finish": "Matt black", "watts": "8", "info": "brand: Lumo; price: 24"}
    assert products[1].price is None  # "n/a" means no price

    import pyarrow as pa
    import pyarrow.parquet as pq

    flat = [
        {"id": r["id"], "name": r["name"], "brand": r["info"].get("brand"), "cats": r["cats"], "finish": r["finish"]}
        for r in rows
    ]
    pq_path = tmp_path / "lamps.parquet"
    pq.write_table(pa.Table.from_pylist(flat), pq_path)
    assert detect_format(pq_path) == "parquet"
    pm = {
        "product_id": "id",
        "title": "name",
        "source": "lampco",
        "brand": "brand",
        "category_path": "cats",
        "attributes": ["finish"],
    }
    products, report = load_catalog_file(pq_path, mapping=pm)
    assert [(p.product_id, p.brand, p.category_path, p.attributes) for p in products] == [
        ("lampco:1", "Lumo", ["Home", "Lighting"], {"finish": "Matt black"}),
        ("lampco:2", "Lumo", ["Home", "Lighting"], {"finish": "Brass"}),
    ]
    assert report.bad == {"missing_title": 1} and report.n_lines == 3
    # the mapping is part of the source hash (a different mapping = a different catalog)
    assert source_hash(pq_path, mapping=pm) != source_hash(pq_path, mapping={**pm, "attributes": None})


def test_mapping_and_format_errors(tmp_path):
    path = _write_jsonl(tmp_path / "x.jsonl", [{"id": 1, "name": "A"}])
    with pytest.raises(CatalogFormatError, match="mapping"):
        load_catalog_file(path, mapping={"title": "name"})  # product_id missing
    with pytest.raises(CatalogFormatError, match="format"):
        load_catalog_file(path, format="xml")
    meta = _write_jsonl(tmp_path / "meta_X.jsonl", AMAZON2023_GOOD[:1])
    with pytest.raises(CatalogFormatError, match="fixed mapping"):
        load_catalog_file(meta, format="amazon2023", mapping={"product_id": "a", "title": "b"})
    # a mapping makes any JSON-lines file a generic one
    assert load_catalog_file(meta, mapping={"product_id": "parent_asin", "title": "title"})[0][0].product_id == (
        "custom:B0TEST0001"
    )
    (tmp_path / "junk.jsonl").write_text("hello\n")
    with pytest.raises(CatalogFormatError, match="not a JSON object"):
        load_catalog_file(tmp_path / "junk.jsonl")
    with pytest.raises(FileNotFoundError):
        load_catalog_file(tmp_path / "missing.jsonl")


def test_products_format_through_the_generic_entry_point(tmp_path, catalog_path):
    assert detect_format(catalog_path) == "products"
    assert source_hash(catalog_path) == catalog_hash(catalog_path)
    rec = {
        "uid": "t:1",
        "source": "t",
        "shop": "Test Shop",
        "id": "1",
        "title": "Kettle",
        "price": 10.0,
        "attributes": {"sizes": "1L,2L"},
    }
    path = _write_jsonl(tmp_path / "products.jsonl", [rec])
    a, ra = load_catalog_file(path)
    b, rb = load_products(path)
    assert a == b and a[0].options == {"size": ["1L", "2L"]} and ra.n_loaded == rb.n_loaded == 1


# --------------------------------------------------------------------------- colour variants


def test_ikea_colour_from_url():
    url = "https://www.ikea.com/sa/en/p/bagganaes-handle-brass-colour-00338407/"
    assert ikea_colour_from_url(url, "BAGGANÄS Handle,          143 mm") == "Brass colour"
    assert (
        ikea_colour_from_url("https://www.ikea.com/sa/en/p/algot-bracket-white-20218545/", "ALGOT Bracket, 38 cm")
        == "White"
    )
    assert ikea_colour_from_url("https://www.ikea.com/sa/en/p/poaeng-armchair-s19289341/", "POÄNG Armchair") is None
    assert ikea_colour_from_url("https://www.adidas.com/us/x/FJ5089.html", "Beach Shorts") is None


def test_colour_variants_on_real_catalog(catalog_products):
    by_id = {p.product_id: p for p in catalog_products}
    # adidas lists each colour of a model as its own product
    tank = by_id["adidas_us:H07758"]
    assert tank.attributes["color"] == "Purple"
    assert tank.options["colour"] == ["Purple", "Pink", "Green", "White"]
    assert by_id["adidas_us:GL0567"].options["colour"][0] == "White"
    # IKEA: the colour comes from the product URL, siblings share title and category
    assert by_id["ikea_sa:20218545"].attributes["colour"] == "White"
    assert by_id["ikea_sa:20218545"].options == {"colour": ["White", "Black"]}
    assert by_id["ikea_sa:10434187"].options == {"colour": ["Black", "White"]}
    # Myntra titles that name a colour are generic descriptions, not models: no colour options
    assert "colour" not in by_id["myntra_styles:10040"].options
    assert by_id["myntra_styles:10040"].options == {"size": ["S", "M", "L", "XL"]}
    linked = [p for p in catalog_products if "colour" in p.options]
    assert 1500 < len(linked) < 3000
    for p in linked:
        vals = p.options["colour"]
        assert len(vals) >= 2 and len({v.casefold() for v in vals}) == len(vals)
        own = p.attributes.get("colour") or p.attributes.get("color") or p.attributes.get("base_colour")
        assert vals[0] == own


def test_link_colour_variants_rules():
    def prod(pid, title, colour, shop="s/brand-x", cat=("Shoes",)):
        return Product(
            product_id=pid,
            title=title,
            source="s",
            shop="S",
            shop_id=shop,
            brand="X",
            category_path=list(cat),
            attributes={"color": colour} if colour else {},
        )

    ps = [
        prod("s:1", "Runner", "Black"),
        prod("s:2", "Runner", "White"),
        prod("s:3", "Runner", "black"),
        prod("s:4", "Runner", "Red", shop="s/other"),
        prod("s:5", "Runner", None),
        prod("s:6", "Red Tee", "Red"),
        prod("s:7", "Red Tee", "Blue"),
    ]
    assert link_colour_variants(ps) == 3
    assert ps[0].options == {"colour": ["Black", "White"]} and ps[2].options == {"colour": ["black", "White"]}
    assert ps[1].options == {"colour": ["White", "Black"]}
    assert ps[3].options == {} and ps[4].options == {}  # other shop; no colour
    assert ps[5].options == {} and ps[6].options == {}  # the title names a colour


def test_load_report_summary_mentions_derived():
    r = LoadReport(path="x", n_lines=2, n_loaded=2, derived={"colour_variants_linked": 2})
    assert "colour_variants_linked=2" in r.summary()


# --------------------------------------------------------------------------- indexing a non-products source


@pytest.mark.slow
def test_open_or_build_from_amazon2023_source(tmp_path):
    meta = _write_jsonl(tmp_path / "meta_All_Beauty.jsonl.gz", AMAZON2023_GOOD + AMAZON2023_BAD_RECORDS)
    idx = tmp_path / "idx"
    m = open_or_build(meta, idx)
    assert m.n_docs == 5 and m.source_format == "amazon2023" and m.catalog_hash == source_hash(meta)
    assert open_or_build(meta, idx) == m  # reused
    with ProductSearch(idx) as s:
        # found through details (attributes) and option values, not only the title
        hits = s.search("lavender gel", top_k=5)
        assert hits[0]["product_id"] == "amazon2023_All_Beauty:B0TEST0001"
        assert hits[0]["shop_id"] == "amazon-com/brand-meadow-pine" and hits[0]["category"] == "Body Washes"
        assert s.search("natural wood large", top_k=1)[0]["product_id"] == "amazon2023_All_Beauty:B0TEST0002"
        assert [h["product_id"] for h in s.search("brush", shop_id="amazon-com/brand-kestrel-goods")] == [
            "amazon2023_All_Beauty:B0TEST0002"
        ]
        (brush,), unknown = s.view(["amazon2023_All_Beauty:B0TEST0002"])
        assert unknown == [] and brush.options == {"colour": ["Natural Wood"], "size": ["Large"]}
    assert "colour Natural Wood" in contents_text(brush) and "Material Bamboo" in contents_text(brush)
    # a different mapping of the same bytes is another catalog: the index is rebuilt
    m2 = open_or_build(meta, idx, format="amazon2023", category="Beauty")
    assert m2.catalog_hash != m.catalog_hash and read_manifest(idx).n_docs == 5
    with ProductSearch(idx) as s:
        assert s.get("amazon2023_Beauty:B0TEST0001") is not None
