"""The LLM judge against the local scripted OpenAI-compatible server (no network, no mocks)."""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from pathlib import Path

import pytest

from shopping_companion.errors import ConfigError
from shopping_companion.judges.base import JudgeFailedError
from shopping_companion.judges.llm import LLMJudge, parse_json_reply
from shopping_companion.llm.base import Sampling
from shopping_companion.llm.openai_backend import OpenAIBackend
from shopping_companion.rewards import compute_reward, paper_rubric, safe_reward, stage1_reward, stage2_reward
from shopping_companion.types import (
    Preference,
    Product,
    ProductSlot,
    SessionRef,
    Step,
    Task,
    ToolCall,
    ToolResult,
    Trajectory,
    Verdict,
    Voucher,
)

_REPO = str(Path(__file__).resolve().parents[2])
if _REPO not in sys.path:
    sys.path.insert(0, _REPO)
from tests.openai_server import ScriptedOpenAIServer  # noqa: E402

SHIRTS = ["Apparel", "Topwear", "Shirts"]


def P(pid, title, cat=SHIRTS, shop="S1", price=1000.0, **attrs):
    return Product(
        product_id=pid,
        title=title,
        source="test",
        shop="T",
        shop_id=shop,
        brand="Roadster",
        price=price,
        currency="INR",
        category_path=list(cat),
        attributes=attrs,
        options={"size": ["M", "L"]},
        description="Soft breathable cotton shirt for daily wear.",
    )


CATALOG = {
    p.product_id: p
    for p in [
        P("m:1", "Roadster Men Navy Checked Casual Shirt", base_colour="Navy Blue", Fabric="Cotton"),
        P("b:jeans", "Levis Men Slim Fit Jeans", cat=["Apparel", "Bottomwear", "Jeans"], price=1200, Fit="Slim Fit"),
        P("b:belt", "Woodland Brown Leather Belt", cat=["Accessories", "Belts"], price=500, Material="Leather"),
    ]
}


def lookup(ids):
    return {i: CATALOG[i] for i in ids if i in CATALOG}


def single_task(tid="s1", instruction="I need a casual shirt for work"):
    return Task(
        task_id=tid,
        instruction=instruction,
        user_id="u",
        history=[SessionRef(session_id="h1", date="2024-01-01")],
        needle_session_ids=["h1"],
        preferences=[
            Preference(attribute="colour", value="navy"),
            Preference(attribute="size", value="M"),
            Preference(attribute="fabric", value="cotton"),
        ],
        slots=[ProductSlot(product_type="shirt", category_path=SHIRTS, reference_product_id="m:1")],
    )


def addon_task():
    return Task(
        task_id="a1",
        task_type="addon",
        instruction="A shirt, jeans and a belt from one shop, please",
        user_id="u",
        history=[SessionRef(session_id="h1", date="2024-01-01")],
        needle_session_ids=["h1"],
        preferences=[
            Preference(slot=0, attribute="colour", value="navy"),
            Preference(slot=1, attribute="fit", value="slim"),
            Preference(slot=2, attribute="material", value="leather", polarity="want"),
        ],
        slots=[
            ProductSlot(product_type="shirt", category_path=SHIRTS, reference_product_id="m:1"),
            ProductSlot(
                product_type="jeans", category_path=["Apparel", "Bottomwear", "Jeans"], reference_product_id="b:jeans"
            ),
            ProductSlot(product_type="belt", category_path=["Accessories", "Belts"], reference_product_id="b:belt"),
        ],
        voucher=Voucher(shop_id="S1", min_spend=2000, discount=300),
        budget=2500.0,
        currency="INR",
    )


def stage1_traj(
    answer='{"preferences": [{"attribute": "colour", "value": "navy"}, {"attribute": "fabric", "value": "cotton"}]}',
):
    return Trajectory(
        task_id="s1",
        stage=1,
        final_answer=answer,
        termination="answered",
        identified_preferences=[
            Preference(attribute="colour", value="navy"),
            Preference(attribute="fabric", value="cotton"),
        ],
        steps=[Step(assistant_text="<answer>..</answer>")],
    )


def stage2_traj(rec):
    step = Step(
        assistant_text="..",
        tool_calls=[ToolCall(name="product_search", arguments={"query": "q"}, call_id="c0")],
        tool_results=[ToolResult(call_id="c0", name="product_search", content="..", returned_ids=list(rec))],
    )
    answer = " ".join(f"@REC::{r}@" for r in rec)
    return Trajectory(
        task_id="t",
        stage=2,
        recommended_ids=list(rec),
        final_answer=f"My pick: {answer}",
        termination="answered",
        steps=[step, Step(assistant_text=f"<answer>{answer}</answer>")],
    )


def J(**kw):
    return json.dumps(kw)


GOOD1 = J(q1=1, h1=0, m1=2, matched=[1, 3], reasons=["colour and fabric found", "size missing"])


def judge_for(srv, **kw):
    backend = OpenAIBackend("judge-model", base_url=srv.base_url, api_key="k", max_retries=0, timeout_s=10)
    kw.setdefault("backoff_s", 0.0)
    return LLMJudge(backend, lookup, **kw)


def user_prompt(body):
    return [m for m in body["messages"] if m["role"] == "user"][0]["content"]


# --------------------------------------------------------------------------- parsing & prompts


def test_parse_json_reply_is_strict():
    assert parse_json_reply('<think>hmm {"x": 1}</think>\n```json\n{"a": 1}\n```') == {"a": 1}
    assert parse_json_reply('reasoning here</think>{"a": 2}') == {"a": 2}
    # a prose preamble or trailer around one object is read since issue 13 (item 7); a reply with
    # no JSON object at all is still rejected
    for bad in ("[1, 2]", "", "Sure, here it is: [1, 2]", "no json at all", "{not json}", '[{"a": 1}]'):
        with pytest.raises(ValueError):
            parse_json_reply(bad)


def test_stage1_single_verdict_and_request():
    with ScriptedOpenAIServer([GOOD1]) as srv:
        judge = judge_for(srv)
        v = judge.judge(single_task(), stage1_traj())
        body = srv.bodies[0]
    assert (v.judge, v.stage, v.F, v.N, v.b, v.q1, v.m1, v.c1, v.failed) == (
        "llm:judge-model",
        1,
        3,
        1,
        0,
        1,
        2,
        None,
        False,
    )
    assert v.matched == ["colour=navy", "fabric=cotton"] and not v.success
    assert stage1_reward(v) == pytest.approx((1 + 2) / 4)
    assert body["temperature"] == 0.0 and "tools" not in body
    prompt = user_prompt(body)
    assert "I need a casual shirt for work" in prompt
    assert "1. wants colour = navy" in prompt and "2. wants size = M" in prompt
    assert "F = 3" in prompt and '"m1"' in prompt and '"maximum": 3' in prompt
    assert "c1" not in prompt  # single-product prompt


def test_stage2_addon_prompt_has_records_deal_terms_and_facts():
    reply = J(p2=1, q2=1, m2=3, n2=3, u2=1, matched=[1, 2, 3], reasons=["all good"])
    with ScriptedOpenAIServer([reply]) as srv:
        v = judge_for(srv).judge(addon_task(), stage2_traj(["m:1", "b:jeans", "b:belt"]))
        prompt = user_prompt(srv.bodies[0])
    assert (v.p2, v.q2, v.m2, v.n2, v.u2, v.success, v.b, v.N) == (1, 1, 3, 3, 1, True, 1, 3)
    assert stage2_reward(v) == pytest.approx(1.0)
    for needle in (
        "Levis Men Slim Fit Jeans",
        "Fit: Slim Fit",
        "shop_id: S1",
        "300 INR off",
        "at least 2000 INR",
        "Budget: 2500 INR",
        "Sum of the listed prices: 2700 INR",
        "[for product 2: jeans]",
        "b:belt: found in the catalog; returned",
        '"n2"',
        '"u2"',
        "Distinct product ids recommended: 3",
    ):
        assert needle in prompt, needle


def test_stage2_single_failure_fields_give_no_success():
    reply = J(p2=1, q2=0, m2=3, matched=[1, 2, 3], reasons=["not a shirt"])
    with ScriptedOpenAIServer([reply]) as srv:
        v = judge_for(srv).judge(single_task(), stage2_traj(["m:1"]))
    assert (v.p2, v.q2, v.n2, v.u2, v.success) == (1, 0, None, None, False)
    # p2 is a fact the environment knows (one id, in the catalog, returned by the search): a model
    # that calls it invented is overruled by the post-check
    reply = J(p2=0, q2=1, m2=3, matched=[1, 2, 3], reasons=["id invented"])
    with ScriptedOpenAIServer([reply]) as srv:
        v = judge_for(srv).judge(single_task(), stage2_traj(["m:1"]))
    assert (v.p2, v.success) == (1, True) and any(r.startswith("post-check: p2 = 1") for r in v.reasons)


# --------------------------------------------------------------------------- validation & retries


def test_out_of_range_reply_is_asked_again_never_clamped():
    bad = J(q1=1, h1=0, m1=5, matched=[1, 2, 3, 4, 5], reasons=["x"])
    with ScriptedOpenAIServer([bad, GOOD1]) as srv:
        judge = judge_for(srv)
        v = judge.judge(single_task(), stage1_traj())
        second = srv.bodies[1]["messages"]
    assert not v.failed and v.m1 == 2
    assert second[-2] == {"role": "assistant", "content": bad}
    assert "m1=5 exceeds the number of wanted features F=3" in second[-1]["content"]
    assert judge.stats["retries"] == 1 and judge.stats["requests"] == 2


@pytest.mark.parametrize(
    "bad",
    [
        "Here is my verdict: q1=1",  # not JSON
        J(q1=1, h1=0, m1=1.0, matched=[1], reasons=[]),  # float where an integer is required
        J(q1=True, h1=0, m1=1, matched=[1], reasons=[]),  # bool is not 0/1
        J(q1=2, h1=0, m1=1, matched=[1], reasons=[]),  # q1 out of {0, 1}
        J(q1=1, h1=0, m1=2, matched=[1], reasons=[]),  # matched disagrees with m1
        J(q1=1, h1=0, m1=1, matched=[1], reasons=[], confidence=0.9),  # extra key
        J(q1=1, matched=[], reasons=[]),  # missing field
    ],
)
def test_invalid_replies_end_in_a_failed_verdict_that_is_never_scored(bad):
    with ScriptedOpenAIServer([bad, bad]) as srv:
        judge = judge_for(srv, max_retries=1)
        task, traj = single_task(), stage1_traj()
        v = judge.judge(task, traj)
        assert len(srv.bodies) == 2
    assert v.failed and v.judge == "llm:judge-model" and v.q1 is None
    assert len(v.reasons) == 3 and "attempt 2: invalid reply" in v.reasons[2]
    with pytest.raises(JudgeFailedError):
        compute_reward(task, traj, v)
    assert safe_reward(task, traj, v) is None
    assert judge.stats["failures"] == 1


def test_server_errors_are_retried_with_backoff_but_bad_requests_are_not():
    with ScriptedOpenAIServer([{"status": 500}, {"status": 503}, GOOD1]) as srv:
        judge = judge_for(srv, max_retries=2, backoff_s=0.05)
        t = time.perf_counter()
        v = judge.judge(single_task(), stage1_traj())
        elapsed = time.perf_counter() - t
    assert not v.failed and v.m1 == 2 and len(srv.bodies) == 3
    assert elapsed >= 0.05 + 0.1 - 0.01  # two backoffs: 0.05, 0.10
    with ScriptedOpenAIServer([{"status": 401, "message": "bad key"}, GOOD1]) as srv:
        v = judge_for(srv, max_retries=3).judge(single_task(), stage1_traj())
        assert len(srv.bodies) == 1
    assert v.failed and any("401" in r for r in v.reasons)


def test_attempt_timeout_then_retry():
    with ScriptedOpenAIServer([{"delay_s": 10.0, "content": GOOD1}, GOOD1]) as srv:
        judge = judge_for(srv, timeout_s=0.4, max_retries=1)
        t = time.perf_counter()
        v = judge.judge(single_task(), stage1_traj())
        elapsed = time.perf_counter() - t
        assert len(srv.bodies) == 2  # the slow attempt was abandoned and retried
    assert not v.failed and v.m1 == 2
    assert 0.4 <= elapsed < 8.0  # waited for the attempt timeout, never for the 10 s reply
    with ScriptedOpenAIServer([{"delay_s": 2.0, "content": GOOD1}]) as srv:
        v = judge_for(srv, timeout_s=0.3, max_retries=0).judge(single_task(), stage1_traj())
    assert v.failed and "timeout" in v.reasons[1] and "0.3s" in v.reasons[1]


def test_catalog_failure_and_missing_lookup():
    def broken(ids):
        raise OSError("index gone")

    with ScriptedOpenAIServer([]) as srv:
        backend = OpenAIBackend("judge-model", base_url=srv.base_url, api_key="k", max_retries=0)
        v = LLMJudge(backend, broken).judge(single_task(), stage2_traj(["m:1"]))
        assert v.failed and "index gone" in v.reasons[0]
        with pytest.raises(ConfigError, match="lookup"):
            LLMJudge(backend).judge(single_task(), stage2_traj(["m:1"]))
        with pytest.raises(ValueError, match="stage"):
            LLMJudge(backend, lookup).judge(single_task(), stage2_traj(["m:1"]), stage=1)
        assert srv.bodies == []


# --------------------------------------------------------------------------- cache & concurrency


def test_cache_in_memory_and_on_disk(tmp_path):
    db = tmp_path / "judge_cache.sqlite"
    with ScriptedOpenAIServer([GOOD1]) as srv:
        judge = judge_for(srv, cache_path=db)
        v1 = judge.judge(single_task(), stage1_traj())
        v2 = judge.judge(single_task(), stage1_traj())
        assert len(srv.bodies) == 1 and v1 == v2 and judge.stats["cache_hits"] == 1
        judge.close()
    with ScriptedOpenAIServer([]) as srv:  # a new process would see the same file
        judge = judge_for(srv, cache_path=db)
        assert judge.judge(single_task(), stage1_traj()) == v1
        assert srv.bodies == []
        judge.close()
    with ScriptedOpenAIServer([GOOD1]) as srv:  # another prompt is another key
        judge = judge_for(srv, cache_path=db)
        judge.judge(single_task(instruction="Something else entirely"), stage1_traj())
        assert len(srv.bodies) == 1
        judge.close()


def test_a_judge_cache_of_the_old_format_still_hits_and_other_sampling_misses(tmp_path):
    """A cache file the judge wrote before the one ReplyCache (table ``replies``) is migrated with
    its keys: the same (model, sampling, messages) is a hit without a request; other sampling or
    another judge model is a miss."""
    import sqlite3

    from shopping_companion.llm.replies import ReplyCache

    new = tmp_path / "new.sqlite"
    with ScriptedOpenAIServer([GOOD1]) as srv:
        judge = judge_for(srv, cache_path=new)
        v1 = judge.judge(single_task(), stage1_traj())
        judge.close()
    with sqlite3.connect(new) as db:
        rows = db.execute(f"SELECT key, reply, created FROM {ReplyCache.TABLE}").fetchall()
    old = tmp_path / "old.sqlite"
    with sqlite3.connect(old) as db:
        db.execute("CREATE TABLE replies (key TEXT PRIMARY KEY, reply TEXT NOT NULL, created REAL)")
        db.executemany("INSERT INTO replies VALUES (?, ?, ?)", rows)
    with ScriptedOpenAIServer([]) as srv:
        judge = judge_for(srv, cache_path=old)
        assert judge.judge(single_task(), stage1_traj()) == v1 and srv.bodies == []
        assert judge.stats["cache_hits"] == 1
        judge.close()
    with ScriptedOpenAIServer([GOOD1, GOOD1]) as srv:
        sampling = Sampling(temperature=0.0, top_p=1.0, top_k=None, max_tokens=1024)
        judge = judge_for(srv, cache_path=old, sampling=sampling)
        judge.judge(single_task(), stage1_traj())
        judge.close()
        backend = OpenAIBackend("another-model", base_url=srv.base_url, api_key="k", max_retries=0, timeout_s=10)
        judge = LLMJudge(backend, lookup, cache_path=old, backoff_s=0.0)
        judge.judge(single_task(), stage1_traj())
        judge.close()
        assert len(srv.bodies) == 2


def test_failures_are_not_cached():
    with ScriptedOpenAIServer(["nope", GOOD1]) as srv:
        judge = judge_for(srv, max_retries=0)
        assert judge.judge(single_task(), stage1_traj()).failed
        assert not judge.judge(single_task(), stage1_traj()).failed
        assert len(srv.bodies) == 2


def test_judge_many_bounded_concurrency_keeps_order():
    lock = threading.Lock()
    state = {"now": 0, "max": 0}

    def script(body):
        with lock:
            state["now"] += 1
            state["max"] = max(state["max"], state["now"])
        time.sleep(0.15)
        with lock:
            state["now"] -= 1
        k = int(re.search(r"request number (\d+)", user_prompt(body)).group(1))
        if k == 5:
            return "not json"
        m = k % 4
        return J(q1=1, h1=0, m1=m, matched=list(range(1, m + 1)), reasons=[f"item {k}"])

    items = []
    for k in range(10):
        t = single_task(tid=f"t{k}", instruction=f"request number {k}")
        t = t.model_copy(update={"preferences": [Preference(attribute=f"a{i}", value=f"v{i}") for i in range(3)]})
        items.append((t, stage1_traj()))
    with ScriptedOpenAIServer(script) as srv:
        judge = judge_for(srv, concurrency=3, max_retries=0)
        verdicts = judge.judge_many(items)
        assert len(srv.bodies) == 10
    assert 2 <= state["max"] <= 3  # ran concurrently, never more than 3 at once
    for k, v in enumerate(verdicts):
        if k == 5:
            assert v.failed
        else:
            assert not v.failed and v.m1 == k % 4 and v.reasons == [f"item {k}"]


# --------------------------------------------------------------------------- semantic matching


def test_match_products_for_the_tool_wise_fallback():
    reply = J(
        decisions=[
            {"product_id": "b:jeans", "matches": False, "reason": "not a shirt"},
            {"product_id": "m:1", "matches": True, "reason": "navy cotton shirt"},
        ]
    )
    task = single_task().model_copy(
        update={"slots": [ProductSlot(product_type="shirt", category_path=SHIRTS, reference_product_id="gone:1")]}
    )
    traj = stage2_traj(["m:1", "b:jeans"])
    with ScriptedOpenAIServer([J(decisions=[{"product_id": "m:1", "matches": True, "reason": "x"}]), reply]) as srv:
        judge = judge_for(srv, max_retries=1)
        assert judge.match_products(task, [CATALOG["b:jeans"], CATALOG["m:1"]]) == [False, True]
        assert "must cover each product exactly once" in srv.bodies[1]["messages"][-1]["content"]
        # through the rubric: the LLM decides which returned products count
        rubric = paper_rubric({"lookup": lookup, "llm_judge": judge}, semantic_fallback="auto", matcher="llm")
        v = Verdict(judge="t", stage=2, F=3, N=1, p2=1, q2=1, m2=3, success=True)
        rb = rubric(task, traj, v)  # served from the cache: the prompt is the same
        assert rb.per_tool_call == [0.5] and rb.components["tool_semantic_matched"] == 1.0
        assert len(srv.bodies) == 2
    with ScriptedOpenAIServer(["garbage"]) as srv:
        judge = judge_for(srv, max_retries=0)
        with pytest.raises(JudgeFailedError, match="product matching failed"):
            judge.match_products(task, [CATALOG["b:jeans"]])
        rubric = paper_rubric({"lookup": lookup, "llm_judge": judge}, semantic_fallback="auto", matcher="llm")
        v = Verdict(judge="t", stage=2, F=3, N=1, p2=1, q2=1, m2=3, success=True)
        assert safe_reward(task, stage2_traj(["b:jeans"]), v, rubric) is None  # judge failed: not scored


def test_stage1_addon_counts_products_and_rejects_c1_above_n():
    bad = J(q1=1, h1=0, m1=2, c1=4, matched=[1, 3], reasons=["x"])
    good = J(q1=1, h1=0, m1=2, c1=2, matched=[1, 3], reasons=["jeans preferences missing"])
    traj = stage1_traj().model_copy(update={"task_id": "a1"})
    with ScriptedOpenAIServer([bad, good]) as srv:
        v = judge_for(srv).judge(addon_task(), traj)
        prompt = user_prompt(srv.bodies[0])
        assert "c1=4 exceeds the number of requested products N=3" in srv.bodies[1]["messages"][-1]["content"]
    assert (v.q1, v.m1, v.c1, v.b, v.N, v.success) == (1, 2, 2, 1, 3, False)
    assert stage1_reward(v) == pytest.approx((1 + 2 + 2) / (1 + 3 + 3))
    assert "Products the request covers (N = 3)" in prompt and '"c1"' in prompt and "3. belt" in prompt


# --------------------------------------------------------------------------- post-checks (issue 13)


def test_stage1_post_check_counts_piled_values_the_model_missed():
    # the model says nothing is spurious, but the answer piles three colours on one attribute:
    # the structural post-check raises h1 and zeroes q1, so R1 cannot gain from the list
    piled = [Preference(attribute="colour", value=v) for v in ("navy", "black", "red")]
    traj = stage1_traj().model_copy(update={"identified_preferences": piled})
    reply = J(q1=1, h1=0, m1=1, matched=[1], reasons=["navy found"])
    with ScriptedOpenAIServer([reply]) as srv:
        v = judge_for(srv).judge(single_task(), traj)
    assert (v.q1, v.m1, v.h1, v.success) == (0, 1, 2, False)
    assert sum("post-check" in r for r in v.reasons) == 2
    assert stage1_reward(v) == 0.0  # (0 + max(0, 1 - 2)) / 4


def test_stage2_post_check_overrides_p2_for_an_id_no_tool_returned():
    traj = stage2_traj(["m:1"])
    traj = traj.model_copy(update={"steps": [traj.steps[1]]})  # the search step removed: m:1 never returned
    reply = J(p2=1, q2=1, m2=3, matched=[1, 2, 3], reasons=["all good"])
    with ScriptedOpenAIServer([reply]) as srv:
        v = judge_for(srv).judge(single_task(), traj)
    assert (v.p2, v.q2, v.m2, v.success) == (0, 1, 3, False)
    assert any(r.startswith("post-check: p2 = 0") for r in v.reasons)
