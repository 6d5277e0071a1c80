"""A new user with network but no data directory: ``shopcomp quickstart`` downloads one Amazon
Reviews 2023 category (metadata + reviews, SHA-256 checked) from a hub-like HTTP server on
127.0.0.1, builds its BM25 index, synthesises tasks over a ShareGPT-only haystack, evaluates, and
writes the report; a second run reuses every download.

The served metadata file holds real products (the shared catalog's Myntra fashion records)
rewritten into the release's documented ``meta_<Category>.jsonl`` record format; the served review
file is the head of the real Amazon Reviews 2023 Subscription_Boxes review file."""

from __future__ import annotations

import gzip
import hashlib
import itertools
import json

import pytest
from typer.testing import CliRunner

from shopping_companion.catalog.download import amazon2023_repo_path
from shopping_companion.catalog.loader import parse_count
from tests.hub_server import HubServer

pytestmark = pytest.mark.slow
CATEGORY = "Fashion_Sample"
# The new user's command, with a small haystack per user: the quickstart still loads every ShareGPT
# session (the pool; asserted below) but encodes with MiniLM only the sampled users' histories, so
# 8 sessions of at most 400 tokens per user (instead of 42 of up to 1,500) keep every step of the
# flow while the MiniLM statistics and memory encodings cost a fraction (most of this test's CPU).
QUICKSTART = [
    "quickstart",
    "--n-tasks",
    "4",
    "--name",
    "qs",
    "--set",
    "synth.sessions_per_user=8",
    "--set",
    "synth.max_session_tokens=400",
]


def as_amazon2023_meta(p: dict) -> dict:
    """One record of the shared catalog in the Amazon Reviews 2023 metadata format."""
    details = {
        k: str(v)
        for k, v in (p.get("attributes") or {}).items()
        if v not in (None, "", "NA") and k not in ("year", "colour1", "colour2")
    }
    return {
        "main_category": (p.get("category_path") or ["Fashion"])[0],
        "title": p["title"],
        "average_rating": p.get("rating"),
        "rating_number": p.get("rating_count"),
        "features": list(p.get("features") or []),
        "description": [p["description"]] if p.get("description") else [],
        "price": p.get("price"),
        "images": [],
        "videos": [],
        "store": p.get("brand"),
        "categories": list(p.get("category_path") or []),
        "details": details,
        "parent_asin": "B0" + hashlib.sha1(p["uid"].encode()).hexdigest()[:8].upper(),
        "bought_together": None,
    }


@pytest.fixture()
def hub_with_category(data_dir, monkeypatch):
    with gzip.open(data_dir / "catalog" / "products.jsonl.gz", "rt", encoding="utf-8") as f:
        recs = [json.loads(line) for line in itertools.islice(f, 6000)]
    fashion = [
        r for r in recs if r["source"] == "myntra_styles" and r.get("price") and len(r.get("attributes") or {}) >= 5
    ]
    meta = "".join(json.dumps(as_amazon2023_meta(r)) + "\n" for r in fashion[:800]).encode()
    with gzip.open(data_dir / "reviews" / "amazon2023_Subscription_Boxes.jsonl.gz", "rb") as f:
        reviews = b"".join(itertools.islice(f, 500))
    with HubServer() as hub:
        for kind, body in (("meta", meta), ("reviews", reviews)):
            path = amazon2023_repo_path(kind, CATEGORY)
            hub.files[path] = body
            hub.etags[path] = hashlib.sha256(body).hexdigest()
        monkeypatch.setenv("SHOPCOMP_HF_ENDPOINT", hub.endpoint)
        monkeypatch.setenv("SHOPCOMP_FALLBACK_CATEGORY", CATEGORY)
        yield hub


@pytest.fixture()
def new_machine(monkeypatch, tmp_path):
    """No $SHOPCOMP_DATA_DIR and no ../shared/data beside the working directory or the package."""
    import shopping_companion.paths as paths

    work = tmp_path / "home" / "project"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    monkeypatch.delenv("SHOPCOMP_DATA_DIR", raising=False)
    monkeypatch.delenv("SHOPCOMP_NO_DOWNLOAD", raising=False)
    monkeypatch.setattr(paths, "_REPO_ROOT", work)
    return work


def test_quickstart_without_a_data_directory_downloads_and_runs(hub_with_category, new_machine):
    from shopping_companion.cli import app

    runner = CliRunner()
    parses = parse_count()
    out = runner.invoke(app, QUICKSTART)
    assert out.exit_code == 0, out.output
    # the catalog is parsed once (index build, synthesis and the reference policy share it), and
    # each phase prints its wall time
    assert parse_count() - parses == 1
    for name in ("BM25 index", "synthesis: tasks", "evaluation: episodes", "evaluation: report"):
        assert f"phase {name}" in out.output, out.output
    assert "quickstart finished in" in out.output
    assert "no data directory found" in out.output and CATEGORY in out.output
    meta_path = amazon2023_repo_path("meta", CATEGORY)
    assert hub_with_category.count(meta_path) == 1
    assert hub_with_category.count(amazon2023_repo_path("reviews", CATEGORY)) == 1
    run = new_machine / "runs" / "qs"
    manifest = json.loads((run / "bench" / "manifest.json").read_text())
    assert manifest["sources"]["catalog"]["format"] == "amazon2023"
    assert (
        "sgd" not in manifest["sources"]["conversations"]
        and manifest["sources"]["conversations"]["sharegpt"]["sessions"] > 1000
    )
    assert manifest["counts"]["tasks"] >= 1
    results = [json.loads(x) for x in (run / "results.jsonl").read_text().splitlines()]
    assert len(results) == manifest["counts"]["tasks"] and all(r["error"] is None for r in results)
    # every task's reference products come from the downloaded category
    tasks = [json.loads(x) for x in (run / "bench" / "tasks.jsonl").read_text().splitlines()]
    refs = [s["reference_product_id"] for t in tasks for s in t["slots"]]
    assert refs and all(r.startswith(f"amazon2023_{CATEGORY}:") for r in refs)
    report = (run / "report.md").read_text()
    assert "Acc" in report and "Succ" in report
    # a second run downloads nothing and reuses the benchmark (and the parsed catalog)
    parses = parse_count()
    again = runner.invoke(app, QUICKSTART)
    assert again.exit_code == 0, again.output
    assert parse_count() == parses
    assert hub_with_category.count(meta_path) == 1 and "reusing benchmark" in again.output
