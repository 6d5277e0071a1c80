"""The LLM generator against a scripted OpenAI-compatible server on 127.0.0.1 (tests/openai_server.py).

The script plays a model that follows our prompts: it reads what the prompt asks for (the product
types, amounts and the quoted preference values) and answers with JSON, sometimes after invalid
answers, so validation, feedback retries, caching, LLM conflict checks and failure handling are
exercised over real HTTP with the real OpenAI client.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from shopping_companion.benchmark.synth import GeneratorConfig, LLMEndpoint, SynthConfig, SynthError, build_benchmark
from shopping_companion.benchmark.synthesis.llm_generator import LLMGenerator
from shopping_companion.llm.replies import extract_json
from shopping_companion.benchmark.synthesis.verify import gold_accepted, leaked_values, unstated_features
from tests.openai_server import ScriptedOpenAIServer
from tests.benchmark.test_synthesis import amazon_products


def _prompt(body):
    return body["messages"][1]["content"]


def answer(body, conflict_word: str | None = None) -> str:
    """What a cooperative model would answer to one of our prompts."""
    p = _prompt(body)
    if p.startswith("Write the message a shopper types"):
        if "add-on deal" in p:
            shop = re.search(r"Shop: (.*) \(shop id: (.*)\)", p)
            disc, low = re.search(r"Voucher: (\S+) off an order of at least (\S+) ", p).groups()
            budget = re.search(r"Budget after the discount: at most (\S+)", p).group(1)
            items = re.findall(r"^\s+\d+\. (.*)$", p, flags=re.M)
            text = (
                f"I have a coupon from {shop.group(1)} (shop id {shop.group(2)}): {disc} off once I spend {low}. "
                f"I'd like {', then '.join(items)}. After the discount I can pay at most {budget}. Choose for me!"
            )
        else:
            item = re.search(r"exactly one item: (.*)\.\n", p).group(1)
            text = f"Could you find me a {item}? You know my taste."
        return json.dumps({"instruction": text})
    if p.startswith("Write one past conversation between a user and an AI assistant in which the user changes"):
        old = re.search(r'^Before: the user liked .*? "(.*)"\.$', p, flags=re.M).group(1)
        new = re.search(r'^Now: the user wants .*? "(.*)"\.$', p, flags=re.M).group(1)
        turns = [
            {"role": "user", "content": "Guess what, I changed jobs."},
            {"role": "assistant", "content": "Congratulations! How is it going?"},
            {
                "role": "user",
                "content": f"Good. I used to go for {old}, but not anymore. These days it's {new} for me.",
            },
            {"role": "assistant", "content": "Makes sense, tastes change."},
        ]
        return json.dumps({"turns": turns})
    if p.startswith("Write one sentence a shopper adds"):
        when = re.search(r"in their conversation of (.*?)\.\n", p)
        if when:
            return json.dumps({"sentence": f"Go by what I told you back in {when.group(1)}."})
        label = re.search(r"pick the (.*?) the shopper usually likes", p).group(1)
        return json.dumps({"sentence": f"And use the {label} I always like."})
    if p.startswith("Write "):
        blocks = re.split(r"Conversation \d+ must reveal:\n", p)[1:]
        sessions = []
        for b in blocks:
            turns = [
                {"role": "user", "content": "Long week at work, finally some quiet."},
                {"role": "assistant", "content": "Glad you can rest a little."},
            ]
            for _label, value, about in re.findall(r'^- (.*?): "(.*?)"(?: \(about (.*?)\))?$', b, flags=re.M):
                turns += [
                    {"role": "user", "content": f"Funny, whenever I pick {about or 'something'} I go for {value}."},
                    {"role": "assistant", "content": "That sounds like a solid habit."},
                ]
            sessions.append({"turns": turns})
        return "<think>plan the chat</think>```json\n" + json.dumps({"sessions": sessions}) + "\n```"
    if p.startswith("A user is about to buy"):
        conflicts = []
        for idx, text in re.findall(r"^\[(\d+)\] user: (.*)$", p, flags=re.M):
            if conflict_word and conflict_word in text.lower():
                conflicts.append(
                    {"turn_index": int(idx), "statement": text[:80], "feature": "colour", "reason": "test"}
                )
                break
        return json.dumps({"conflicts": conflicts})
    return "?"


@pytest.fixture(scope="module")
def products():
    return amazon_products()


@pytest.fixture(scope="module")
def pool(sgd_sessions):
    return sgd_sessions[:400]


def llm_config(srv, tmp_path, **kw) -> SynthConfig:
    g = dict(
        kind="llm",
        endpoints=[LLMEndpoint(model="scripted", base_url=srv.base_url)],
        max_invalid=3,
        http_retries=0,
        cache_path=str(tmp_path / "llm.sqlite"),
    )
    g.update(kw.pop("gen", {}))
    gen = GeneratorConfig(**g)
    base = dict(n_tasks=6, addon_share=0.5, seed=4, sessions_per_user=8, max_session_tokens=400, generator=gen)
    base.update(kw)
    return SynthConfig(**base)


def test_extract_json_tolerates_fences_and_thinking():
    assert extract_json('<think>{"x": 0}</think> sure: ```json\n{"a": [1, {"b": 2}]}\n```', which="first") == {
        "a": [1, {"b": 2}]
    }
    with pytest.raises(ValueError):
        extract_json("no object here [1, 2]", which="first")


def test_llm_build_is_valid_cached_and_reproducible(products, pool, tmp_path):
    by_id = {p.product_id: p for p in products}
    with ScriptedOpenAIServer(lambda body: answer(body)) as srv:
        cfg = llm_config(srv, tmp_path)
        out = build_benchmark(tmp_path / "a", products, pool, cfg, generator=LLMGenerator(cfg.generator))
        n_requests = len(srv.bodies)
        bodies = list(srv.bodies)
    assert len(out.tasks) == 6 and n_requests > 0
    assert (
        out.manifest["generator"]["kind"] == "llm" and out.manifest["generator"]["endpoints"][0]["model"] == "scripted"
    )
    for t in out.tasks:
        assert gold_accepted(t, by_id)[0]
        assert not unstated_features(t.preferences, [out.sessions[s] for s in t.needle_session_ids])
        assert not leaked_values(t.preferences, t.instruction)
        needle = out.sessions[t.needle_session_ids[0]]
        assert needle.source.startswith("llm-needle:") and needle.turns[0].content.startswith("Long week")
        if t.task_type == "addon":
            assert t.voucher.shop_id in t.instruction
    # the requests are chat completions with our prompts and a per-task seed, no tools
    assert all(b["messages"][0]["role"] == "system" and "JSON" in b["messages"][0]["content"] for b in bodies)
    assert all("tools" not in b and isinstance(b.get("seed"), int) for b in bodies)
    assert any(_prompt(b).startswith("A user is about to buy") for b in bodies)  # conflict checks ran (cued)

    # a rebuild reads every answer from the cache: no request, byte-identical files; the cache is
    # rewritten in the format of the generator's cache before the one ReplyCache (table ``calls``),
    # which is migrated with its keys (model, messages, temperature, top_p, max_tokens, seed)
    old = tmp_path / "old.sqlite"
    _as_old_generator_cache(tmp_path / "llm.sqlite", old)
    with ScriptedOpenAIServer(["unused"]) as srv2:
        cfg2 = cfg.model_copy(
            update={
                "generator": cfg.generator.model_copy(
                    update={
                        "endpoints": [LLMEndpoint(model="scripted", base_url=srv2.base_url)],
                        "cache_path": str(old),
                    }
                )
            }
        )
        gen2 = LLMGenerator(cfg2.generator)
        build_benchmark(tmp_path / "b", products, pool, cfg2, generator=gen2)
        assert srv2.bodies == [] and gen2.stats["requests"] == 0 and gen2.stats["cache_hits"] > 0
    for name in ("tasks.jsonl", "sessions.jsonl", "stats.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    # another temperature is another call: every answer is asked again
    with ScriptedOpenAIServer(lambda body: answer(body)) as srv3:
        gen = cfg.generator.model_copy(
            update={"endpoints": [LLMEndpoint(model="scripted", base_url=srv3.base_url)], "temperature": 0.5}
        )
        gen3 = LLMGenerator(gen)
        cfg3 = cfg.model_copy(update={"generator": gen, "n_tasks": 2})  # the same first tasks, fewer
        build_benchmark(tmp_path / "c", products, pool, cfg3, generator=gen3)
        assert gen3.stats["cache_hits"] == 0 and gen3.stats["requests"] == len(srv3.bodies) > 0


def _as_old_generator_cache(new: Path, old: Path) -> None:
    """Copy the replies of ``new`` into ``old`` in the generator's earlier format (table ``calls``)."""
    import sqlite3

    from shopping_companion.llm.replies import ReplyCache

    with sqlite3.connect(new) as db:
        rows = db.execute(f"SELECT key, model, reply, created FROM {ReplyCache.TABLE}").fetchall()
    assert rows
    with sqlite3.connect(old) as db:
        db.execute("CREATE TABLE calls (key TEXT PRIMARY KEY, model TEXT, response TEXT, created REAL)")
        db.executemany("INSERT INTO calls VALUES (?, ?, ?, ?)", rows)


def test_invalid_json_is_fed_back_and_retried(products, pool, tmp_path):
    state = {"n": 0}

    def script(body):
        state["n"] += 1
        if state["n"] in (1, 2):
            return "Sure! Here is the instruction: buy stuff"  # not JSON
        if state["n"] == 3:
            return json.dumps({"instruction": 42})  # JSON but the wrong type
        return answer(body)

    with ScriptedOpenAIServer(script) as srv:
        cfg = llm_config(srv, tmp_path, n_tasks=1, addon_share=0.0, gen={"max_invalid": 4})
        gen = LLMGenerator(cfg.generator)
        out = build_benchmark(tmp_path / "r", products, pool, cfg, generator=gen)
        bodies = srv.bodies
    assert len(out.tasks) == 1 and gen.stats["invalid"] == 3
    second = bodies[1]["messages"]
    assert second[-2]["role"] == "assistant" and second[-2]["content"].startswith("Sure!")
    assert "not acceptable" in second[-1]["content"] and "no JSON object" in second[-1]["content"]
    assert "instruction" in bodies[3]["messages"][-1]["content"]  # the pydantic error names the field


def test_model_that_never_answers_in_json_stops_the_build(products, pool, tmp_path):
    with ScriptedOpenAIServer(lambda body: "I cannot do that.") as srv:
        cfg = llm_config(srv, tmp_path, n_tasks=4, gen={"max_invalid": 2, "max_consecutive_failures": 3})
        with pytest.raises(SynthError, match=r"3 calls in a row gave no valid answer.*model 'scripted'"):
            build_benchmark(tmp_path / "x", products, pool, cfg, generator=LLMGenerator(cfg.generator))
        assert len(srv.bodies) == 3 * 2
    assert not (tmp_path / "x" / "manifest.json").exists()


def test_unreachable_endpoint_is_a_precise_error(products, pool, tmp_path):
    with ScriptedOpenAIServer(lambda body: {"status": 500, "message": "overloaded"}) as srv:
        cfg = llm_config(srv, tmp_path, n_tasks=2)
        with pytest.raises(SynthError, match=r"endpoint 'scripted' at http://127\.0\.0\.1:\d+/v1 failed .*HTTP 500"):
            build_benchmark(tmp_path / "y", products, pool, cfg, generator=LLMGenerator(cfg.generator))
    assert not (tmp_path / "y" / "manifest.json").exists()


def test_llm_conflict_check_replaces_sessions_and_records_it(products, pool, tmp_path):
    word = "movie"  # in ~10% of these SGD sessions
    with ScriptedOpenAIServer(lambda body: answer(body, conflict_word=word)) as srv:
        cfg = llm_config(srv, tmp_path, n_tasks=6, gen={"conflict_scope": "all"})
        out = build_benchmark(tmp_path / "c", products, pool, cfg, generator=LLMGenerator(cfg.generator))
    changes = [c for t in out.tasks for c in t.changes]
    assert changes and all(c.kind == "session_replaced" and c.detector == "llm" for c in changes)
    pool_ids = {s.session_id for s in pool}
    for t in out.tasks:
        for ref in t.history:
            s = out.sessions[ref.session_id]
            if ref.session_id in t.needle_session_ids or "-distractor:" in s.source:
                continue  # needles and generated topic distractors are not pool sessions
            assert s.source in pool_ids
            assert not any(word in x.content.lower() for x in s.turns if x.role == "user")
        for c in t.changes:
            assert c.session_id in pool_ids and c.replacement_id in pool_ids and "llm" in c.detail
    assert out.stats["changes"]["sessions_replaced"] == len(changes)


def test_llm_generator_writes_every_ability(products, pool, tmp_path):
    with ScriptedOpenAIServer(lambda body: answer(body)) as srv:
        cfg = llm_config(srv, tmp_path, n_tasks=5, abilities="all")
        out = build_benchmark(tmp_path / "a", products, pool, cfg, generator=LLMGenerator(cfg.generator))
        prompts = [_prompt(b) for b in srv.bodies]
    by = {t.abilities[0]: t for t in out.tasks}
    assert sorted(by) == sorted(["extraction", "knowledge_update", "multi_session", "temporal", "abstention"])
    assert any(p.startswith("Write one past conversation") and "changes a preference" in p for p in prompts)
    ku = by["knowledge_update"]
    revision = [out.sessions[s] for s in ku.needle_session_ids if out.sessions[s].turns[0].content.startswith("Guess")]
    assert revision and "used to go for" in revision[0].turns[2].content
    assert "Go by what I told you back in" in by["temporal"].instruction
    assert f"use the {by['abstention'].unstated[0].attribute}" in by["abstention"].instruction.lower()
    for t in out.tasks:
        assert t.verification.resolvable and t.verification.conflict_free
        assert not unstated_features(t.preferences, [out.sessions[s] for s in t.needle_session_ids])
