"""Per-turn latency of each assistant variant against a local OpenAI-compatible test server.

The server answers instantly with scripted text, so the numbers are our own overhead: query and
summary embeddings (MiniLM, warm cache), the three retrievals, prompt building, HTTP round trips
through the openai client, and parsing. Prints the median and p95 per variant in milliseconds.

    /work/venv/bin/python benchmarks/bench_personalization.py [--cases 4] [--data-dir ../shared/data]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
from pathlib import Path

_REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(_REPO))

from shopping_companion.llm.openai_backend import OpenAIBackend  # noqa: E402
from shopping_companion.paths import resolve_data_dir  # noqa: E402
from shopping_companion.personalization.agents import VARIANTS, Assistant, LLMRoles  # noqa: E402
from shopping_companion.personalization.build import (  # noqa: E402
    BuildConfig,
    SourceConfig,
    build_dataset,
    load_cases,
    load_item_reviews,
    load_items,
)
from shopping_companion.personalization.retrieval import ReviewIndex, build_product_index, review_text  # noqa: E402
from shopping_companion.personalization.selection import SelectionConfig  # noqa: E402
from shopping_companion.pipeline import make_embedder  # noqa: E402
from tests.openai_server import ScriptedOpenAIServer  # noqa: E402


def _script(body):
    sys_text = body["messages"][0]["content"]
    user = body["messages"][-1]["content"]
    ids = re.findall(r"id ([A-Z0-9]{10})", user)
    if "conversation tracker" in sys_text:
        n = re.search(r"\[Round (\d+)\]", user).group(1)
        return f"[Round {n}] The shopper is looking for options."
    if "product selector" in sys_text:
        return json.dumps({"ranking": ids, "rationale": "ok"})
    return "Here are some picks: " + ", ".join(f"({i})" for i in ids[:3])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=4)
    ap.add_argument("--data-dir", default=None)
    args = ap.parse_args()
    data = resolve_data_dir(args.data_dir)
    tmp = Path(tempfile.mkdtemp())
    cfg = BuildConfig(
        sources=[
            SourceConfig(
                kind="multicategory",
                path="reviews/amazon2023_multicategory_user_histories.jsonl.gz",
                categories=["Video_Games"],
            )
        ],
        selection=SelectionConfig(users_per_category=args.cases),
    )
    build_dataset(cfg, data, tmp / "ds")
    cases = load_cases(tmp / "ds")
    emb = make_embedder()
    items = load_items(tmp / "ds", "Video_Games")
    pidx = build_product_index(items, load_item_reviews(tmp / "ds", "Video_Games"), emb)
    for c in cases:  # warm the query path
        emb.encode_queries(c.trajectory.queries)
    lat: dict[str, list[float]] = {v: [] for v in VARIANTS}
    with ScriptedOpenAIServer(_script) as srv:
        engine = LLMRoles(OpenAIBackend("bench", base_url=srv.base_url, max_retries=0, send_top_k=False))
        for rep in range(2):
            for c in cases:
                revs = c.case.visible_reviews
                ridx = ReviewIndex(revs, emb.encode([review_text(r) for r in revs]))
                for v in VARIANTS:
                    a = Assistant(v, "full", engine, emb, pidx, items, ridx)
                    for t in a.run(c.trajectory.queries):
                        if rep:  # first pass warms summaries and connections
                            lat[v].append(t.latency_s * 1000)
    print(f"per-turn latency against the local test server ({len(cases)} cases, {len(lat['full'])} turns per variant)")
    print(f"{'variant':<10} {'calls/turn':>10} {'median ms':>10} {'p95 ms':>8}")
    calls = {"baseline": 1, "single": 1, "textrag": 4, "norev": 4, "full": 4}
    for v, xs in lat.items():
        xs.sort()
        print(f"{v:<10} {calls[v]:>10} {statistics.median(xs):>10.2f} {xs[int(0.95 * (len(xs) - 1))]:>8.2f}")


if __name__ == "__main__":
    main()
