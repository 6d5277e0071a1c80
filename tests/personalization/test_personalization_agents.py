"""Each variant's call graph through a local OpenAI-compatible server with scripted answers, the
leakage control asserted on every prompt (over the wire and in the extractive engine), the LLM
profile / question generators and the trajectory judge."""

from __future__ import annotations

import json
import re
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

from shopping_companion.llm.openai_backend import OpenAIBackend
from shopping_companion.personalization.agents import VARIANTS, Assistant, ExtractiveRoles, LLMRoles
from shopping_companion.personalization.build import (
    BuildConfig,
    SourceConfig,
    build_dataset,
    load_cases,
    load_items,
    load_item_reviews,
)
from shopping_companion.personalization.judge import TrajectoryJudge
from shopping_companion.personalization.llmjson import JSONAsker, JSONAskError
from shopping_companion.personalization.profiles import LLMProfileBuilder, UserProfile
from shopping_companion.personalization.queries import LLMQueryGenerator
from shopping_companion.personalization.retrieval import ReviewIndex, build_product_index, review_text
from shopping_companion.personalization.selection import SelectionConfig, assert_no_leak

_REPO = str(Path(__file__).resolve().parents[2])
if _REPO not in sys.path:
    sys.path.insert(0, _REPO)
from tests.openai_server import ScriptedOpenAIServer  # noqa: E402


class HashingEmbedder:
    """Bag-of-words feature hashing (512 buckets, crc32), L2-normalised: a fast deterministic
    lexical embedder implementing the TextEmbedder protocol."""

    def encode(self, texts):
        m = np.zeros((len(texts), 512), np.float32)
        for i, t in enumerate(texts):
            for w in re.findall(r"[a-z0-9]+", t.lower()):
                m[i, zlib.crc32(w.encode()) % 512] += 1
        n = np.linalg.norm(m, axis=1, keepdims=True)
        return np.divide(m, n, out=np.zeros_like(m), where=n > 0)


@pytest.fixture(scope="module")
def dataset(data_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("pz") / "ds"
    cfg = BuildConfig(
        sources=[
            SourceConfig(kind="reviews", path="reviews/amazon2023_Subscription_Boxes.jsonl.gz"),
            SourceConfig(
                kind="multicategory",
                path="reviews/amazon2023_multicategory_user_histories.jsonl.gz",
                categories=["Video_Games"],
            ),
        ],
        selection=SelectionConfig(users_per_category=2),
        max_reviews_per_item=3,
    )
    man = build_dataset(cfg, data_dir, out)
    assert man["n_cases"] == 4
    return out


def _assistant(dataset, case, variant, memory, engine, emb):
    items = load_items(dataset, case.case.category)
    pidx = build_product_index(items, load_item_reviews(dataset, case.case.category), emb)
    revs = case.case.visible_reviews
    return Assistant(
        variant,
        memory,
        engine,
        emb,
        pidx,
        items,
        ReviewIndex(revs, emb.encode([review_text(r) for r in revs])),
        record_messages=True,
    )


def _role(body) -> str:
    sys_text = body["messages"][0]["content"]
    for key, role in (
        ("conversation tracker", "dialogue"),
        ("product selector", "recommend"),
        ("explainer", "reason"),
        ("voice of a shopping", "reply"),
        ("In one reply, do everything", "single"),
        ("friendly shopping assistant", "baseline"),
    ):
        if key in sys_text:
            return role
    raise AssertionError(sys_text[:80])


def _script(body):
    role = _role(body)
    user = body["messages"][-1]["content"]
    ids = re.findall(r"id ([A-Z0-9]{10})", user)
    if role == "dialogue":
        n = re.search(r"\[Round (\d+)\]", user).group(1)
        return f"[Round {n}] SUMMARY-{n} of what the shopper wants."
    if role == "recommend":
        return json.dumps({"ranking": list(reversed(ids)), "rationale": "RATIONALE-X"})
    if role == "reason":
        return "EXPLANATION-X ties picks to reviews."
    if role == "reply":
        return "Here you go: " + ", ".join(f"({i})" for i in ids[:3])
    if role == "single":
        return "Single answer " + (f"({ids[-1]})" if ids else "")
    return "Generic advice without products."


EXPECTED = {
    "baseline": ["baseline"],
    "single": ["single"],
    "textrag": ["dialogue", "recommend", "reason", "reply"],
    "norev": ["dialogue", "recommend", "reason", "reply"],
    "full": ["dialogue", "recommend", "reason", "reply"],
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_variant_call_graph_over_http_and_no_leak(dataset, variant):
    emb = HashingEmbedder()
    case = load_cases(dataset)[0]
    queries = case.trajectory.queries[:3]
    with ScriptedOpenAIServer(_script) as srv:
        engine = LLMRoles(OpenAIBackend("m", base_url=srv.base_url, max_retries=0, send_top_k=False))
        a = _assistant(dataset, case, variant, "full", engine, emb)
        turns = a.run(queries)
        roles = [_role(b) for b in srv.bodies]
        assert roles == EXPECTED[variant] * len(queries)
        for t in turns:
            assert [c.role for c in t.calls] == EXPECTED[variant]
        # the target review never reaches the assistant: every request body over the wire
        assert_no_leak(
            case.case, [json.dumps(b) for b in srv.bodies] + [m["content"] for b in srv.bodies for m in b["messages"]]
        )
        assert_no_leak(case.case, a.prompts())
    spec = VARIANTS[variant]
    for t in turns:
        assert (len(t.retrieved) == 5) == spec.product_retrieval
        assert bool(t.user_reviews) == spec.review_retrieval
    if variant in ("full", "textrag", "norev"):
        t1, t2 = turns[0], turns[1]
        assert t1.summary.startswith("[Round 1]") and t2.summary.startswith("[Round 2]")
        assert t1.recommended == list(reversed(t1.retrieved))  # the Recommend agent's order is used
        assert t1.rationale == "RATIONALE-X" and t1.explanation.startswith("EXPLANATION-X")
        reply_prompt = t1.calls[3].messages[1]["content"]
        assert "Round: 1" in reply_prompt and "EXPLANATION-X" in reply_prompt
        assert "SUMMARY-1" in t2.calls[0].messages[1]["content"]  # running summary reaches round 2
        assert t2.prior_turn == 1
    if variant == "single":
        assert turns[0].recommended == [turns[0].retrieved[-1]]
    if variant == "baseline":
        assert turns[0].calls[0].messages[1]["content"] == queries[0]


def test_memory_modes_change_what_the_dialogue_agent_sees(dataset):
    emb = HashingEmbedder()
    case = load_cases(dataset)[1]
    seen = {}
    for mem in ("full", "none", "summary", "top1"):
        with ScriptedOpenAIServer(_script) as srv:
            engine = LLMRoles(OpenAIBackend("m", base_url=srv.base_url, max_retries=0, send_top_k=False))
            a = _assistant(dataset, case, "full", mem, engine, emb)
            a.run(case.trajectory.queries[:2])
            seen[mem] = a.turns[1].calls[0].messages[1]["content"]
    assert "SUMMARY-1" in seen["full"] and "Most related earlier exchange" in seen["full"]
    assert "SUMMARY-1" not in seen["none"] and "Most related" not in seen["none"]
    assert "SUMMARY-1" in seen["summary"] and "Most related" not in seen["summary"]
    assert "SUMMARY-1" not in seen["top1"] and "Most related earlier exchange" in seen["top1"]


def test_invalid_recommend_reply_falls_back_to_retrieval_order(dataset):
    emb = HashingEmbedder()
    case = load_cases(dataset)[0]

    def script(body):
        return "not json at all" if _role(body) == "recommend" else _script(body)

    with ScriptedOpenAIServer(script) as srv:
        a = _assistant(
            dataset, case, "full", "full", LLMRoles(OpenAIBackend("m", base_url=srv.base_url, max_retries=0)), emb
        )
        t = a.turn(case.trajectory.queries[0])
    assert t.recommended == t.retrieved and t.calls[1].fallback


def test_extractive_engine_on_real_cases_never_leaks_and_greets_once(dataset):
    emb = HashingEmbedder()
    for case in load_cases(dataset):
        for variant in VARIANTS:
            a = _assistant(dataset, case, variant, "full", ExtractiveRoles(), emb)
            turns = a.run(case.trajectory.queries)
            assert_no_leak(case.case, a.prompts())
            assert_no_leak(case.case, [t.reply for t in turns])
            if variant != "baseline":
                assert turns[0].reply.startswith("Hi there!")
                assert all(not t.reply.startswith("Hi there!") for t in turns[1:])
                assert all(3 <= len(re.findall(r"^\d\. ", t.reply, re.M)) <= 5 for t in turns)


def test_llm_profile_and_question_generators_over_http(dataset):
    case = load_cases(dataset)[2]
    prof_json = {
        "style": "Casual",
        "budget": "Mid-range",
        "size": None,
        "quality_priorities": "Durability",
        "dislikes": "Not specified",
        "pain_points": None,
        "additional_notes": None,
    }
    bad_qs = {"product_type": "game", "questions": ["Which game should I buy?"] * 1}
    qs = {
        "product_type": "video game",
        "questions": [f"Question {i}: which video game suits my evenings?" for i in range(6)],
    }
    with ScriptedOpenAIServer([json.dumps(prof_json), json.dumps(bad_qs), json.dumps(qs)]) as srv:
        asker = JSONAsker(OpenAIBackend("m", base_url=srv.base_url, max_retries=0))
        items = load_items(dataset, case.case.category)
        prof = LLMProfileBuilder(asker).build(case.case.visible_reviews, items)
        traj = LLMQueryGenerator(asker).generate(case.case.case_id, case.target_item, prof, "game", [])
        prompts = [m["content"] for b in srv.bodies for m in b["messages"]]
    assert prof.dislikes is None and prof.style == "Casual"
    assert traj.queries == qs["questions"] and traj.generator == "llm"
    assert any("need 5-8" in p for p in prompts)  # the rule violation was sent back
    assert_no_leak(case.case, prompts[:2])  # the profile prompt sees visible reviews only


def test_trajectory_judge_strict_json_over_http():
    prof = UserProfile(
        style="Casual",
        budget=None,
        size=None,
        quality_priorities=None,
        dislikes=None,
        pain_points=None,
        additional_notes=None,
    )
    good = {"gpc": 4, "cis": 5, "it": 3, "tc": 5, "reasons": "ok"}
    with ScriptedOpenAIServer([json.dumps({**good, "gpc": 7}), "```json\n" + json.dumps(good) + "\n```"]) as srv:
        judge = TrajectoryJudge(JSONAsker(OpenAIBackend("j", base_url=srv.base_url, max_retries=0)))
        s = judge.judge(prof, [("q1", "r1"), ("q2", "r2")])
        assert (s.gpc, s.cis, s.it, s.tc, s.overall) == (4, 5, 3, 5, 4.25)
        assert "less than or equal to 5" in srv.bodies[1]["messages"][-1]["content"]
        assert (
            "Style: Casual" in srv.bodies[0]["messages"][1]["content"]
            and "[Turn 2] Assistant: r2" in srv.bodies[0]["messages"][1]["content"]
        )
    with ScriptedOpenAIServer(["no", "still no", "nope"]) as srv:
        judge = TrajectoryJudge(JSONAsker(OpenAIBackend("j", base_url=srv.base_url, max_retries=0), max_retries=2))
        with pytest.raises(JSONAskError, match="TrajectoryScores"):
            judge.judge(prof, [("q", "r")])
