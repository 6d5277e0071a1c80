"""Downloading Amazon Reviews 2023 categories and the no-data-directory fallback, against a real
HTTP server on 127.0.0.1 that lays files out like the Hugging Face hub (``/datasets/<repo>/resolve/
<revision>/<path>`` answering with a redirect to a CDN path, and the LFS SHA-256 in
``X-Linked-Etag`` when asked to)."""

from __future__ import annotations

import gzip
import hashlib
import json
import socket

import pytest

from shopping_companion.catalog.download import (
    KNOWN_SHA256,
    DownloadError,
    amazon2023_repo_path,
    amazon2023_url,
    download_file,
    fetch_amazon2023,
    file_sha256,
    verify_cached,
)
from shopping_companion.catalog.fallback import iter_amazon2023_reviews, prepare_amazon2023, ReviewReport
from shopping_companion.catalog.index import read_manifest
from shopping_companion.catalog.search import ProductSearch
from shopping_companion.catalog.download import HF_REPO
from tests.hub_server import HubServer


@pytest.fixture()
def hub(monkeypatch):
    with HubServer() as srv:
        monkeypatch.setenv("SHOPCOMP_HF_ENDPOINT", srv.endpoint)
        yield srv


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


# --------------------------------------------------------------------------- URLs


def test_urls_follow_the_release_layout(monkeypatch):
    monkeypatch.delenv("SHOPCOMP_HF_ENDPOINT", raising=False)
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    assert amazon2023_url("meta", "All_Beauty") == (
        "https://huggingface.co/datasets/McAuley-Lab/Amazon-Reviews-2023/resolve/main/"
        "raw/meta_categories/meta_All_Beauty.jsonl"
    )
    assert amazon2023_repo_path("reviews", "All_Beauty") == "raw/review_categories/All_Beauty.jsonl"
    monkeypatch.setenv("SHOPCOMP_HF_ENDPOINT", "http://mirror.local:8080/")
    assert amazon2023_url("reviews", "Toys_and_Games").startswith("http://mirror.local:8080/datasets/")
    for bad in ("../etc", "All Beauty", ""):
        with pytest.raises(ValueError, match="category"):
            amazon2023_repo_path("meta", bad)
    with pytest.raises(ValueError, match="kind"):
        amazon2023_repo_path("images", "All_Beauty")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- checksums + cache


@pytest.fixture(scope="module")
def real_reviews(data_dir) -> bytes:
    """The official Subscription_Boxes review file (the data directory's copy is byte-identical
    to the release, gzipped)."""
    return gzip.decompress((data_dir / "reviews" / "amazon2023_Subscription_Boxes.jsonl.gz").read_bytes())


def test_known_checksum_of_the_real_review_file(hub, tmp_path, real_reviews):
    path = amazon2023_repo_path("reviews", "Subscription_Boxes")
    assert _sha(real_reviews) == KNOWN_SHA256[path]  # the table entry is the release's hash
    hub.files[path] = real_reviews
    r = fetch_amazon2023("Subscription_Boxes", "reviews", cache=tmp_path, progress=True)
    assert r.downloaded and r.verified_against == "known" and r.size == len(real_reviews) == 8_953_020
    assert r.path == tmp_path / "Subscription_Boxes" / "Subscription_Boxes.jsonl"
    assert r.path.read_bytes() == real_reviews
    side = json.loads(r.path.with_name(r.path.name + ".sha256.json").read_text())
    assert side["sha256"] == r.sha256 == KNOWN_SHA256[path] and side["size"] == len(real_reviews)
    assert hub.count(path) == 1
    # reused, re-verified, not downloaded again
    again = fetch_amazon2023("Subscription_Boxes", "reviews", cache=tmp_path)
    assert not again.downloaded and again.sha256 == r.sha256 and hub.count(path) == 1
    # a damaged cached copy is detected and replaced
    data = bytearray(r.path.read_bytes())
    data[100] ^= 0x01
    r.path.write_bytes(bytes(data))
    assert verify_cached(r.path) is None
    fixed = fetch_amazon2023("Subscription_Boxes", "reviews", cache=tmp_path)
    assert fixed.downloaded and hub.count(path) == 2 and r.path.read_bytes() == real_reviews
    # the reviews themselves are readable: 16,216 reviews of 641 items
    report = ReviewReport(path=str(r.path))
    reviews = list(iter_amazon2023_reviews(r.path, report))
    assert report.n_loaded == len(reviews) == 16216 and report.bad == {}
    assert len({x["parent_asin"] for x in reviews}) == 641


def test_checksum_mismatch_leaves_nothing(hub, tmp_path, real_reviews):
    path = amazon2023_repo_path("reviews", "Subscription_Boxes")
    tampered = bytearray(real_reviews)
    tampered[5000] ^= 0x20
    hub.files[path] = bytes(tampered)
    with pytest.raises(DownloadError, match="checksum mismatch") as e:
        fetch_amazon2023("Subscription_Boxes", "reviews", cache=tmp_path, progress=False)
    assert KNOWN_SHA256[path] in str(e.value)
    d = tmp_path / "Subscription_Boxes"
    assert not (d / "Subscription_Boxes.jsonl").exists()
    assert [p.name for p in d.iterdir() if not p.name.endswith(".lock")] == []  # no partial file


def test_server_linked_etag_is_checked(hub, tmp_path):
    body = b'{"parent_asin": "B1", "title": "x"}\n'
    path = amazon2023_repo_path("meta", "Tiny_Cat")
    hub.files[path] = body
    hub.etags[path] = _sha(body)
    r = fetch_amazon2023("Tiny_Cat", "meta", cache=tmp_path, progress=False)
    assert r.downloaded and r.verified_against == "server" and r.sha256 == _sha(body)
    hub.etags[path] = _sha(b"something else")
    with pytest.raises(DownloadError, match="checksum mismatch"):
        download_file(amazon2023_url("meta", "Tiny_Cat"), tmp_path / "other.jsonl", progress=False)
    assert not (tmp_path / "other.jsonl").exists()
    # no hash known anywhere: downloaded, hash recorded, verified against it on reuse
    del hub.etags[path]
    r2 = download_file(amazon2023_url("meta", "Tiny_Cat"), tmp_path / "third.jsonl", progress=False)
    assert r2.verified_against == "none" and verify_cached(r2.path) == _sha(body)
    with pytest.raises(ValueError, match="expected_sha256"):
        download_file(amazon2023_url("meta", "Tiny_Cat"), tmp_path / "x.jsonl", expected_sha256="abc")


def test_offline_404_and_truncated_downloads_fail_clearly(hub, tmp_path):
    url = f"http://127.0.0.1:{_closed_port()}/datasets/{HF_REPO}/resolve/main/raw/meta_categories/meta_X.jsonl"
    with pytest.raises(DownloadError, match="No network") as e:
        download_file(url, tmp_path / "x.jsonl", progress=False, retries=0, timeout=5)
    assert "--data-dir" in str(e.value) and "SHOPCOMP_HF_ENDPOINT" in str(e.value)
    with pytest.raises(DownloadError, match="HTTP 404.*category name"):
        fetch_amazon2023("No_Such_Category", "meta", cache=tmp_path, progress=False)
    path = amazon2023_repo_path("meta", "Cut_Off")
    hub.files[path] = b"x" * 10_000
    hub.truncate.add(path)
    with pytest.raises(DownloadError, match="5000 of 10000 bytes"):
        download_file(amazon2023_url("meta", "Cut_Off"), tmp_path / "cut.jsonl", progress=False, retries=1)
    assert hub.count(path) == 2  # retried once
    assert not (tmp_path / "cut.jsonl").exists()
    assert not [p for p in tmp_path.iterdir() if ".part-" in p.name]


# --------------------------------------------------------------------------- fallback end to end


def _meta_record(i: int) -> dict:
    colours = ["Black", "Sage Green", "Ivory"]
    kinds = ["Candle Box", "Snack Box", "Sock Club", "Tea Sampler"]
    return {
        "main_category": "Subscription Boxes",
        "title": f"Monthly {kinds[i % 4]} No. {i}",
        "average_rating": 3.5 + (i % 3) / 2,
        "rating_number": 10 + i,
        "features": [f"Ships on day {i % 28 + 1}"],
        "description": [f"A curated {kinds[i % 4].lower()} delivered every month."],
        "price": None if i % 5 == 0 else f"${9 + i}.99",
        "images": [],
        "videos": [],
        "store": ["Hearth Co", "Pantry Post", "Toe Society", "Leaf Letter"][i % 4],
        "categories": [],
        "details": {"Color": colours[i % 3], "Subscription Length": f"{1 + i % 3} months"},
        "parent_asin": f"B0BOX{i:05d}",
        "bought_together": None,
    }


@pytest.fixture()
def test_boxes(hub):
    """A small category in the release's record format, served like the hub (with LFS etags)."""
    meta = ("\n".join(json.dumps(_meta_record(i)) for i in range(24)) + "\n").encode()
    reviews = "".join(
        json.dumps(
            {
                "rating": float(1 + i % 5),
                "title": "ok",
                "text": f"review {i}",
                "images": [],
                "asin": f"B0BOX{i % 24:05d}",
                "parent_asin": f"B0BOX{i % 24:05d}",
                "user_id": f"U{i % 7}",
                "timestamp": 1600000000000 + i,
                "helpful_vote": 0,
                "verified_purchase": True,
            }
        )
        + "\n"
        for i in range(60)
    ).encode()
    for kind, body in (("meta", meta), ("reviews", reviews)):
        path = amazon2023_repo_path(kind, "Test_Boxes")
        hub.files[path] = body
        hub.etags[path] = _sha(body)
    return hub


@pytest.mark.slow
def test_prepare_amazon2023_downloads_once_and_builds_index(test_boxes, tmp_path):
    data = prepare_amazon2023("Test_Boxes", cache=tmp_path / "dl", index_dir=tmp_path / "idx", progress=False)
    assert data.catalog_format == "amazon2023" and data.n_products == 24
    assert data.catalog_path.name == "meta_Test_Boxes.jsonl" and data.reviews_path.name == "Test_Boxes.jsonl"
    assert {k: (r.downloaded, r.verified_against) for k, r in data.downloads.items()} == {
        "meta": (True, "server"),
        "reviews": (True, "server"),
    }
    m1 = read_manifest(data.index_dir)
    assert m1.source_format == "amazon2023" and m1.catalog_path == str(data.catalog_path.resolve())
    with ProductSearch(data.index_dir) as s:
        hits = s.search("sock club sage green", top_k=3)
        assert hits[0]["product_id"] == "amazon2023_Test_Boxes:B0BOX00010"
        assert hits[0]["shop_id"] == "amazon-com/brand-toe-society" and hits[0]["price"] is None  # i % 5 == 0
        assert s.get("amazon2023_Test_Boxes:B0BOX00011").price == 20.99
    n_meta = test_boxes.count(amazon2023_repo_path("meta", "Test_Boxes"))
    again = prepare_amazon2023("Test_Boxes", cache=tmp_path / "dl", index_dir=tmp_path / "idx", progress=False)
    assert not any(r.downloaded for r in again.downloads.values())
    assert test_boxes.count(amazon2023_repo_path("meta", "Test_Boxes")) == n_meta == 1
    assert read_manifest(again.index_dir).built_at == m1.built_at  # index reused
    assert file_sha256(again.catalog_path) == again.downloads["meta"].sha256


@pytest.fixture()
def no_local_data(monkeypatch, tmp_path):
    """A machine without a data directory: no $SHOPCOMP_DATA_DIR, no ../shared/data next to the
    working directory or the package."""
    import shopping_companion.paths as paths

    work = tmp_path / "home" / "project"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    monkeypatch.delenv("SHOPCOMP_DATA_DIR", raising=False)
    monkeypatch.delenv("SHOPCOMP_NO_DOWNLOAD", raising=False)
    monkeypatch.setattr(paths, "_REPO_ROOT", work)
    return work


@pytest.mark.slow
def test_resolve_sources_falls_back_to_a_download(test_boxes, no_local_data, monkeypatch):
    from shopping_companion.paths import DataDirError
    from shopping_companion.pipeline import load_pool, open_product_search, resolve_sources

    monkeypatch.setenv("SHOPCOMP_NO_DOWNLOAD", "1")
    with pytest.raises(DataDirError, match="no data directory found"):
        resolve_sources()
    monkeypatch.delenv("SHOPCOMP_NO_DOWNLOAD")
    monkeypatch.setenv("SHOPCOMP_FALLBACK_CATEGORY", "Test_Boxes")
    src = resolve_sources()
    assert src.fallback and src.catalog_format == "amazon2023" and src.sgd_path is None
    assert src.category == "Test_Boxes" and src.reviews_path.is_file()
    assert src.index_dir.name == "amazon2023-Test_Boxes-bm25"
    search = open_product_search(sources=src)
    assert len(search) == 24 and search.search("tea sampler", top_k=1)[0]["title"].startswith("Monthly Tea Sampler")
    search.close()
    sessions, info = load_pool(sources=src, sharegpt=True, sharegpt_limit=30)
    assert len(sessions) == 30 and "sgd" not in info and info["sharegpt"]["sessions"] == 30
    with pytest.raises(ValueError, match="ShareGPT"):
        load_pool(sources=src, sharegpt=False)
    # an explicit --data-dir never falls back
    with pytest.raises(DataDirError, match="does not exist"):
        resolve_sources(no_local_data / "missing")
    # offline: the error names both problems
    monkeypatch.setenv("SHOPCOMP_HF_ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    monkeypatch.setenv("SHOPCOMP_FALLBACK_CATEGORY", "Other_Boxes")
    import shopping_companion.retry as retry

    monkeypatch.setattr(retry.time, "sleep", lambda s: None)  # no back-off waits in the test
    with pytest.raises(DataDirError, match="(?s)no data directory found.*fallback download failed.*No network"):
        resolve_sources()


@pytest.mark.slow
def test_cli_build_index_uses_the_fallback(test_boxes, no_local_data, monkeypatch):
    from typer.testing import CliRunner

    from shopping_companion.cli import app

    monkeypatch.setenv("SHOPCOMP_FALLBACK_CATEGORY", "Test_Boxes")
    result = CliRunner().invoke(app, ["build-index"])
    assert result.exit_code == 0, result.output
    assert "index ready: 24 products from meta_Test_Boxes.jsonl" in result.output
    result = CliRunner().invoke(app, ["build-index", "--rebuild"])
    assert result.exit_code == 0, result.output
