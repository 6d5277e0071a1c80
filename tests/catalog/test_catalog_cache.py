"""The catalog is parsed once per process and cached on disk for the next one
(``shopping_companion/catalog/cache.py``).

Parses are counted by the real loader (:func:`shopping_companion.catalog.loader.parse_count`), never
by replacing our code; the catalog is the head of the real ``products.jsonl.gz``.
"""

from __future__ import annotations

import gzip
import itertools
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from shopping_companion.catalog import cache
from shopping_companion.catalog.loader import parse_count, products_hash

ROOT = Path(__file__).resolve().parents[2]
N_PRODUCTS = 400


@pytest.fixture()
def catalog(data_dir, tmp_path) -> Iterator[Path]:
    """The first products of the real catalog in a file of their own (its own cache entries)."""
    with gzip.open(data_dir / "catalog" / "products.jsonl.gz", "rt", encoding="utf-8") as f:
        head = list(itertools.islice(f, N_PRODUCTS))
    p = tmp_path / "data" / "catalog" / "products.jsonl.gz"
    p.parent.mkdir(parents=True)
    with gzip.open(p, "wt", encoding="utf-8") as f:
        f.writelines(head)
    yield p
    cache.clear_memory_cache(p)


@pytest.fixture()
def cache_home(tmp_path, monkeypatch) -> Path:
    d = tmp_path / "cache"
    monkeypatch.setenv("SHOPCOMP_CACHE_DIR", str(d))
    monkeypatch.delenv(cache.ENV_DISK_CACHE, raising=False)
    return d


def _other_process(catalog: Path, cache_home: Path) -> dict:
    """Load ``catalog`` in a fresh Python process; its parse count, size and products hash."""
    code = (
        "import json, sys\n"
        "from shopping_companion.catalog.cache import load_catalog\n"
        "from shopping_companion.catalog.loader import parse_count, products_hash\n"
        "products, report = load_catalog(sys.argv[1])\n"
        "print(json.dumps({'parses': parse_count(), 'n': len(products), 'hash': products_hash(products),"
        " 'n_loaded': report.n_loaded}))\n"
    )
    env = {**os.environ, "SHOPCOMP_CACHE_DIR": str(cache_home)}
    out = subprocess.run(
        [sys.executable, "-c", code, str(catalog)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_every_caller_shares_one_parse(catalog, cache_home, tmp_path):
    """The index build, the synthesis's and the reference policy's loads ("auto" and the resolved
    format alike) get one parse and the same list."""
    from shopping_companion.catalog.index import open_or_build
    from shopping_companion.pipeline import load_catalog as pipeline_load

    before = parse_count()
    open_or_build(catalog, tmp_path / "index")  # no index yet: parses the catalog to build it
    a, report = cache.load_catalog(catalog)
    b, _ = cache.load_catalog(catalog, "products")
    c, _ = pipeline_load(catalog, "auto")
    assert parse_count() - before == 1
    assert a is b is c and len(a) == report.n_loaded == N_PRODUCTS
    assert cache.cache_file(catalog).is_file()


def test_a_second_process_reads_the_disk_cache(catalog, cache_home):
    before = parse_count()
    products, _ = cache.load_catalog(catalog)
    assert parse_count() - before == 1
    other = _other_process(catalog, cache_home)
    assert other == {"parses": 0, "n": N_PRODUCTS, "hash": products_hash(products), "n_loaded": N_PRODUCTS}


def test_products_from_the_cache_equal_a_fresh_parse(catalog, cache_home):
    from shopping_companion.catalog.sources import load_catalog_file

    cached_once, report = cache.load_catalog(catalog)
    cache.clear_memory_cache(catalog)
    before = parse_count()
    from_disk, report2 = cache.load_catalog(catalog)
    assert parse_count() == before and from_disk is not cached_once
    fresh, fresh_report = load_catalog_file(catalog)
    assert [p.model_dump() for p in from_disk] == [p.model_dump() for p in fresh]
    assert [p.model_fields_set for p in from_disk] == [p.model_fields_set for p in fresh]
    assert from_disk == fresh and cached_once == fresh
    assert report2.summary() == fresh_report.summary() and report2.examples == fresh_report.examples
    # equal values are one object (memory): the field-name sets, shop and attribute key strings
    for got in (cached_once, from_disk):
        assert len({id(p.__pydantic_fields_set__) for p in got}) <= 3
        assert len({id(p.shop) for p in got}) == len({p.shop for p in got})
        keys = [k for p in got for k in p.attributes]
        assert len({id(k) for k in keys}) == len(set(keys))


def test_a_changed_catalog_is_parsed_again(catalog, cache_home):
    old, _ = cache.load_catalog(catalog)
    with gzip.open(catalog, "rt", encoding="utf-8") as f:
        lines = f.readlines()
    rec = json.loads(lines[0])
    rec["title"] = "Renamed " + rec["title"]
    lines[0] = json.dumps(rec) + "\n"
    with gzip.open(catalog, "wt", encoding="utf-8") as f:
        f.writelines(lines)
    before = parse_count()
    new, _ = cache.load_catalog(catalog)  # same path, same process: the content decides
    assert parse_count() - before == 1
    assert new[0].title.startswith("Renamed ") and not old[0].title.startswith("Renamed ")
    assert _other_process(catalog, cache_home)["parses"] == 0  # the rewritten cache file serves the new content


@pytest.mark.parametrize("damage", ["flip_payload_byte", "truncate", "garbage", "empty", "header_key"])
def test_a_corrupt_cache_file_is_rebuilt_not_trusted(catalog, cache_home, damage):
    good, _ = cache.load_catalog(catalog)
    f = cache.cache_file(catalog)
    data = bytearray(f.read_bytes())
    if damage == "flip_payload_byte":
        data[len(data) // 2] ^= 0xFF
    elif damage == "truncate":
        data = data[: len(data) - 100]
    elif damage == "garbage":
        data = bytearray(b"\x80\x05not a cache file at all" * 10)
    elif damage == "empty":
        data = bytearray()
    else:  # a header naming another key (a stale file) is not used either
        at = data.index(b'"key": "') + len(b'"key": "')
        data[at] = ord("0") if data[at] != ord("0") else ord("1")
    f.write_bytes(bytes(data))
    cache.clear_memory_cache(catalog)
    before = parse_count()
    again, _ = cache.load_catalog(catalog)
    assert parse_count() - before == 1
    assert [p.model_dump() for p in again] == [p.model_dump() for p in good]
    cache.clear_memory_cache(catalog)
    cache.load_catalog(catalog)  # rewritten: read back without a parse
    assert parse_count() - before == 1


def test_changed_parse_code_makes_the_cache_stale(catalog, cache_home, monkeypatch):
    cache.load_catalog(catalog)
    cache.clear_memory_cache(catalog)
    monkeypatch.setattr(cache, "_fingerprint", "another version of the extractor")
    before = parse_count()
    cache.load_catalog(catalog)
    assert parse_count() - before == 1


def test_settings_are_part_of_the_key(catalog, cache_home):
    before = parse_count()
    raw, _ = cache.load_catalog(catalog, extract=False)
    enriched, _ = cache.load_catalog(catalog)
    assert parse_count() - before == 2 and raw is not enriched
    assert cache.cache_file(catalog, extract=False) != cache.cache_file(catalog)
    assert sum(bool(p.attribute_sources) for p in enriched) > sum(bool(p.attribute_sources) for p in raw) == 0


def test_concurrent_processes_leave_one_valid_cache_file(catalog, cache_home):
    code = "import sys; from shopping_companion.catalog.cache import load_catalog; load_catalog(sys.argv[1])"
    env = {**os.environ, "SHOPCOMP_CACHE_DIR": str(cache_home)}
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(catalog)], cwd=ROOT, env=env, stderr=subprocess.PIPE)
        for _ in range(3)
    ]
    for p in procs:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err.decode()
    files = sorted(x.name for x in (cache_home / "catalogs").iterdir())
    assert files == [cache.cache_file(catalog).name]  # no temporary file left behind
    before = parse_count()
    products, _ = cache.load_catalog(catalog)
    assert parse_count() == before and len(products) == N_PRODUCTS


def test_the_disk_cache_can_be_turned_off(catalog, cache_home, monkeypatch):
    monkeypatch.setenv(cache.ENV_DISK_CACHE, "0")
    cache.load_catalog(catalog)
    assert not (cache_home / "catalogs").exists()


def test_an_amazon_category_named_or_read_from_the_file_name_is_one_parse(tmp_path, cache_home):
    """The index build names the fallback's category; synthesis and the reference policy read it
    from the file name: one parse for all of them."""
    recs = [
        {"parent_asin": f"B0{i:04d}", "title": f"Red cotton shirt {i}", "main_category": "Fashion", "price": 10.0 + i,
         "store": "Acme", "categories": ["Clothing", "Shirts"], "details": {"Material": "Cotton"}}
        for i in range(5)
    ]  # fmt: skip
    f = tmp_path / "meta_Fashion_Sample.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in recs))
    before = parse_count()
    try:
        a, _ = cache.load_catalog(f, "amazon2023", None, "Fashion_Sample")
        b, _ = cache.load_catalog(f)
        assert parse_count() - before == 1 and a is b
        assert a[0].product_id == "amazon2023_Fashion_Sample:B00000"
        c, _ = cache.load_catalog(f, "amazon2023", None, "Other")  # another category: other ids
        assert parse_count() - before == 2 and c[0].product_id == "amazon2023_Other:B00000"
    finally:
        cache.clear_memory_cache(f)


def test_a_copy_with_changes_leaves_the_shared_field_sets_alone(catalog, cache_home):
    products, _ = cache.load_catalog(catalog)
    before = [set(p.model_fields_set) for p in products]
    unset = next(n for n in type(products[0]).model_fields if n not in products[0].model_fields_set)
    changed = products[0].model_copy(update={unset: None})
    assert unset in changed.model_fields_set
    assert [set(p.model_fields_set) for p in products] == before
