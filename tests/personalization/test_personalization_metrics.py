"""Retrieval functions against hand-computed cosine rankings, the token-overlap metric on hand
cases, and the paired statistics against scipy on known inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from shopping_companion.errors import ConfigError
from shopping_companion.personalization.data import Review
from shopping_companion.personalization.metrics import (
    first_hit_turn,
    holm,
    paired_wilcoxon,
    rank_biserial,
    retrieval_correct,
    spearman,
    title_overlap,
)
from shopping_companion.personalization.retrieval import (
    DialogueMemory,
    ProductIndex,
    ReviewIndex,
    cosine,
    normalize,
    top_k,
)


class _TableEmbedder:
    """Looks texts up in a fixed table of vectors (an embedder over a known vocabulary)."""

    def __init__(self, table):
        self.table = table

    def encode(self, texts):
        return normalize(np.array([self.table[t] for t in texts], dtype=np.float32))


def test_cosine_and_top_k_by_hand():
    q = np.array([1.0, 0.0])
    m = np.array([[1.0, 1.0], [0.0, 2.0], [3.0, 0.0], [-1.0, 0.0], [2.0, 2.0]])
    c = cosine(q, m)
    assert np.allclose(c, [1 / math.sqrt(2), 0.0, 1.0, -1.0, 1 / math.sqrt(2)], atol=1e-6)
    assert top_k(c, 3) == [2, 0, 4]  # tie between rows 0 and 4 keeps index order
    assert top_k(c, 0) == [] and top_k(np.array([]), 2) == []


def test_product_retrieval_is_the_mean_of_view_cosines_eq7():
    q = np.array([1.0, 0.0, 0.0])
    meta = np.array([[1, 0, 0], [0, 1, 0], [1, 1, 0]], float)
    review = np.array([[0, 1, 0], [1, 0, 0], [0, 0, 0]], float)
    image = np.array([[0, 0, 1], [1, 0, 0], [1, 0, 0]], float)
    idx = ProductIndex(
        ["a", "b", "c"], {"meta": meta, "review": review, "image": image}, {"review": np.array([True, True, False])}
    )
    s, used = idx.scores(q, ("meta", "review", "image"))
    # a: (1 + 0 + 0)/3; b: (0 + 1 + 1)/3; c has no review view: (cos45 + 1)/2
    assert used == ["meta", "review", "image"]
    assert np.allclose(s, [1 / 3, 2 / 3, (1 / math.sqrt(2) + 1) / 2], atol=1e-6)
    assert [h["asin"] for h in idx.retrieve(q, ("meta", "review", "image"), 2)] == ["c", "b"]
    # text-only variant (TextRAG) uses the first two views
    s2, used2 = idx.scores(q, ("meta", "review"))
    assert used2 == ["meta", "review"] and np.allclose(s2, [0.5, 0.5, 1 / math.sqrt(2)], atol=1e-6)
    assert [h["asin"] for h in idx.retrieve(q, ("meta", "review"), 3)] == ["c", "a", "b"]
    with pytest.raises(ConfigError, match="view"):
        idx.scores(q, ("meta", "colour"))
    # a view no item has is dropped and reported
    idx2 = ProductIndex(["a"], {"meta": meta[:1]})
    assert idx2.scores(q, ("meta", "image"))[1] == ["meta"]


def test_dialogue_and_review_retrieval_by_hand():
    emb = _TableEmbedder({"q1": [1, 0], "q2": [0, 1], "q3": [0.6, 0.8]})
    mem = DialogueMemory(emb)
    assert mem.retrieve(np.array([1.0, 0.0])) == []
    mem.add("q1", "r1")
    mem.add("q2", "r2")
    top = mem.retrieve(emb.encode(["q3"])[0], k=1)
    assert top[0]["turn"] == 2 and top[0]["reply"] == "r2" and top[0]["score"] == pytest.approx(0.8, abs=1e-6)
    revs = [Review(review_id=f"u:{i}:0", user_id="u", parent_asin=str(i), category="C", rating=5) for i in range(7)]
    vecs = np.array([[math.cos(a), math.sin(a)] for a in np.linspace(0, math.pi, 7)])
    ri = ReviewIndex(revs, vecs)
    got = [r.parent_asin for r, _ in ri.retrieve(np.array([1.0, 0.0]), k=5)]
    assert got == ["0", "1", "2", "3", "4"]


def test_title_overlap_hand_cases():
    title = "Hops Craft Beer Enamel Pin"
    assert title_overlap(title, "Try the hops craft beer enamel pin!") == 1.0
    assert title_overlap(title, "an enamel pin for you") == pytest.approx(2 / 5)
    assert title_overlap(title, "nothing related") == 0.0
    assert title_overlap("the of and", "the of and") == 0.0  # stop words only: empty title set
    ok, best = retrieval_correct(title, ["enamel", "enamel pin hops"])
    assert ok and best == pytest.approx(3 / 5)
    # strictly greater than 0.3
    ok2, best2 = retrieval_correct("alpha beta gamma delta epsilon six seven eight nine ten", ["alpha beta gamma"])
    assert best2 == pytest.approx(0.3) and not ok2


def test_first_hit_turn():
    assert first_hit_turn([["a"], ["b", "T"], ["T"]], "T") == 2
    assert first_hit_turn([["a"], []], "T") is None


def test_wilcoxon_and_rank_biserial_against_scipy():
    x = [4, 5, 3, 5, 4, 5, 2, 5, 4, 3, 5, 4]
    y = [3, 4, 3, 2, 4, 3, 1, 4, 2, 3, 4, 5]
    res = paired_wilcoxon(x, y)
    ref = stats.wilcoxon(x, y, zero_method="wilcox", alternative="two-sided")
    assert res["p"] == pytest.approx(ref.pvalue) and res["statistic"] == pytest.approx(ref.statistic)
    assert res["n"] == 12 and res["n_nonzero"] == 9
    # by hand: non-zero d = [1,1,3,2,1,1,2,1,-1]; |d| ranks: 1s -> 3.5 (six ones), 2s -> 7.5, 3 -> 9
    # R+ = 3.5*5 + 9 + 7.5*2 = 41.5 ; R- = 3.5 ; r = 38/45
    assert res["r"] == pytest.approx(38 / 45)
    assert rank_biserial(y, x) == pytest.approx(-38 / 45)
    assert rank_biserial([1, 2], [1, 2]) == 0.0
    same = paired_wilcoxon([3, 3], [3, 3])
    assert math.isnan(same["p"]) and same["r"] == 0.0
    with pytest.raises(ConfigError, match="equal lengths"):
        paired_wilcoxon([1, 2], [1])


def test_holm_known_values():
    p = [0.01, 0.04, 0.03, 0.005]
    # sorted: 0.005*4=0.02, 0.01*3=0.03, 0.03*2=0.06, 0.04*1=0.04 -> monotone 0.06
    assert holm(p) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    out = holm([0.01, float("nan"), 0.02])
    assert out[0] == pytest.approx(0.02) and math.isnan(out[1]) and out[2] == pytest.approx(0.02)


def test_spearman_against_scipy():
    a = [5, 4, 4, 3, 5, 2, 1]
    b = [4, 4, 5, 3, 5, 1, 2]
    assert spearman(a, b) == pytest.approx(stats.spearmanr(a, b).statistic)
    assert math.isnan(spearman([5, 5, 5], [1, 2, 3]))


def test_openai_embedder_over_a_local_embeddings_endpoint(monkeypatch):
    """``openai:<model>`` embeddings: batched requests, rows put back in input order by ``index``,
    L2-normalised, the key sent as a bearer token; a failing endpoint raises BackendError."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from shopping_companion.llm.base import BackendError
    from shopping_companion.personalization.retrieval import make_text_embedder
    from tests.openai_server import ScriptedOpenAIServer

    table = {"red shoe": [3.0, 4.0, 0.0], "blue hat": [0.0, 0.0, 2.0], "red hat": [1.0, 0.0, 1.0]}
    monkeypatch.setenv("EMB_KEY", "k-123")
    with ScriptedOpenAIServer([], embed=lambda t: table[t]) as srv:
        emb = make_text_embedder("openai:emb-model", base_url=srv.base_url, api_key_env="EMB_KEY")
        emb.batch_size = 2
        m = emb.encode(["red shoe", "blue hat", "red hat"])
        posts = [r for r in srv.requests if r.method == "POST"]
        assert [r.body["input"] for r in posts] == [["red shoe", "blue hat"], ["red hat"]]
        assert all(r.body["model"] == "emb-model" for r in posts)
        assert {r.authorization for r in posts} == {"Bearer k-123"}
    np.testing.assert_allclose(m, [[0.6, 0.8, 0.0], [0.0, 0.0, 1.0], [2**-0.5, 0.0, 2**-0.5]], atol=1e-6)
    q = normalize(np.array([[1.0, 0.0, 0.0]], dtype=np.float32))[0]
    assert top_k(cosine(q, m), 2) == [2, 0]  # red hat (0.707) before red shoe (0.6)
    with ScriptedOpenAIServer([]) as srv:  # no embeddings route: HTTP 404
        emb = make_text_embedder("openai:emb-model", base_url=srv.base_url)
        with pytest.raises(BackendError, match="emb-model"):
            emb.encode(["x"])
    with pytest.raises(ConfigError, match="openai:<model>"):
        make_text_embedder("qwen3-embedding")
