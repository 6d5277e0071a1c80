"""User simulators (paper §5.1, §6.3, App. B.3): hint semantics, no value leaks, the LLM plug-in
against the local scripted OpenAI-compatible server, the registry, and EnvConfig validation."""

from __future__ import annotations

import json
import random

import pytest

from shopping_companion.envs.env import EnvConfig
from shopping_companion.envs.simulator import (
    LLMSimulator,
    ScriptedSimulator,
    check_preferences,
    find_key_mentions,
    find_value_leaks,
    make_simulator,
    simulator_feedback,
)
from shopping_companion.llm.openai_backend import OpenAIBackend
from shopping_companion.types import Preference, ProductSlot, SessionRef, Task
from tests.openai_server import ScriptedOpenAIServer


def _task(prefs, n_slots=1, instruction="Please find me something nice to wear.", task_id="t-1"):
    slots = [
        ProductSlot(product_type=t, category_path=["Apparel", t], reference_product_id=f"x:{i}")
        for i, t in enumerate(["shirt", "shoes", "cap"][:n_slots])
    ]
    return Task(
        task_id=task_id,
        task_type="addon" if n_slots > 1 else "single",
        instruction=instruction,
        user_id="u",
        history=[SessionRef(session_id="s1", date="2024-01-01")],
        needle_session_ids=["s1"],
        preferences=prefs,
        slots=slots,
    )


P = Preference
GOLD = [
    P(attribute="base_colour", value="Navy Blue"),
    P(attribute="fabric", value="Cotton"),
    P(attribute="sleeve_length", value="Short Sleeves"),
]


def test_hint_none_gives_no_feedback():
    sim = ScriptedSimulator()
    assert sim.feedback(_task(GOLD), [], "none") is None


def test_bad_hint_is_rejected():
    with pytest.raises(ValueError, match="hint"):
        ScriptedSimulator().feedback(_task(GOLD), [], "medium")


def test_check_follows_the_judge_matching():
    ident = [
        P(attribute="colour", value="navy blue shade"),  # matches gold 0 (value tokens ⊆)
        P(attribute="brand", value="Linen"),  # no gold key "brand": an extra item
        P(attribute="sleeve length", value="Long Sleeves"),
    ]  # same key, wrong value
    chk = check_preferences(_task(GOLD), ident)
    assert chk.n_correct == 1
    assert [g.attribute for g in chk.wrong] == ["sleeve_length"]
    assert [g.attribute for g in chk.missing] == ["fabric"]
    assert chk.extra == [1]
    # the judge's key synonyms apply: "material" addresses gold "fabric" (wrong value, not missing)
    chk2 = check_preferences(_task(GOLD), [P(attribute="material", value="Linen")])
    assert [g.attribute for g in chk2.wrong] == ["fabric"] and chk2.extra == []
    assert chk.has_omissions and chk.has_errors and not chk.perfect


def test_low_hint_says_only_whether_there_are_omissions_or_errors():
    sim, task = ScriptedSimulator(seed=0), _task(GOLD)
    perfect = sim.feedback(task, list(GOLD), "low")
    omissions = sim.feedback(task, GOLD[:1], "low")
    errors = sim.feedback(task, list(GOLD) + [P(attribute="brand", value="Puma")], "low")
    both = sim.feedback(task, GOLD[:1] + [P(attribute="brand", value="Puma")], "low")
    nothing = sim.feedback(task, None, "low")
    assert "nothing is missing or wrong" in perfect.lower() or "nothing missing" in perfect.lower()
    assert "missed" in omissions or "left out" in omissions or "not on your list" in omissions
    assert "wrong" in errors or "not right" in errors or "not what i want" in errors.lower()
    assert len({perfect, omissions, errors, both, nothing}) == 5
    for text in (perfect, omissions, errors, both, nothing):
        assert not find_value_leaks(text, task)
        assert not find_key_mentions(text, task), text  # low never names a dimension
        assert "colour" not in text and "fabric" not in text and "sleeve" not in text


def test_high_hint_names_keys_never_values():
    task = _task(GOLD)
    ident = [
        P(attribute="colour", value="navy blue"),
        P(attribute="sleeve_length", value="Long Sleeves"),
        P(attribute="brand", value="Puma"),
    ]
    text = ScriptedSimulator().feedback(task, ident, "high")
    assert "fabric" in text  # missing key named
    assert "sleeve length" in text  # wrong key named
    assert "brand" in text  # the agent's extra item
    assert "base colour" not in text  # the correct one is not reported
    low = text.lower()
    for v in ("navy", "cotton", "short", "long", "puma"):
        assert v not in low, (v, text)
    assert not find_value_leaks(text, task)


def test_high_hint_hides_a_key_that_contains_its_value():
    # the key would give the value away ("Cotton" inside "cotton content"): neutral wording
    task = _task(
        [
            P(attribute="cotton content", value="Cotton"),
            P(attribute="colour", value="Red"),
            P(attribute="navy collection", value="Navy Blue"),
        ]
    )
    text = ScriptedSimulator().feedback(task, [], "high")
    assert "cotton" not in text.lower() and "red" not in text.lower() and "navy" not in text.lower()
    assert "colour" in text and text.count("one of my preferences") == 2


def test_high_hint_for_addon_names_the_product_slot():
    gold = [P(attribute="colour", value="Blue", slot=0), P(attribute="colour", value="Black", slot=1)]
    task = _task(gold, n_slots=2, instruction="A shirt and shoes from one shop please, I have a voucher.")
    text = ScriptedSimulator().feedback(task, [P(attribute="colour", value="Blue", slot=0)], "high")
    assert "second product (shoes)" in text and "first product" not in text
    assert "black" not in text.lower() and "blue" not in text.lower()


def test_scripted_is_deterministic_and_seed_changes_only_wording():
    task = _task(GOLD)
    a = [ScriptedSimulator(seed=s).feedback(task, GOLD[:1], "low") for s in (1, 1, 2, 3, 4, 5)]
    assert a[0] == a[1]
    assert len(set(a)) >= 2  # some variety across seeds
    for t in a:
        assert "missed" in t or "left out" in t or "not on your list" in t


def test_no_value_ever_leaks_over_random_cases(catalog_products):
    """500 random (gold, identified) cases from real catalog attribute values, all hint levels."""
    rng = random.Random(0)
    pool = []
    for p in catalog_products[:5000]:
        for k, v in p.attributes.items():
            if v and len(v) < 30:
                pool.append((k, v))
    assert len(pool) > 1000
    sim = ScriptedSimulator(seed=7)
    n_checked = 0
    for i in range(500):
        gold = [P(attribute=k, value=v, slot=rng.randrange(2)) for k, v in rng.sample(pool, rng.randint(1, 4))]
        task = _task(gold, n_slots=2, task_id=f"t{i}", instruction="Two things from one shop, please.")
        ident = []
        for g in gold:
            r = rng.random()
            if r < 0.4:
                ident.append(g)
            elif r < 0.7:
                k2, v2 = rng.choice(pool)
                ident.append(P(attribute=g.attribute, value=v2, slot=g.slot))
        ident += [P(attribute=k, value=v) for k, v in rng.sample(pool, rng.randint(0, 2))]
        for hint in ("low", "high"):
            text = sim.feedback(task, ident, hint)
            assert text
            assert not find_value_leaks(text, task), (hint, gold, ident, text)
            if hint == "low":
                assert not find_key_mentions(text, task), (gold, text)
            n_checked += 1
    assert n_checked == 1000


def test_leak_detector_finds_values_and_ignores_public_ones():
    task = _task([P(attribute="colour", value="Navy Blue")], instruction="Find me a navy blue shirt.")
    assert find_value_leaks("You wanted navy blue.", task) == []  # already in the instruction
    task2 = _task([P(attribute="colour", value="Navy Blue")])
    assert [g.value for g in find_value_leaks("it should be NAVY-blue!", task2)] == ["Navy Blue"]
    assert find_value_leaks("it should be navy", task2) == []  # only part of the value


# --------------------------------------------------------------------------- LLM simulator


def _backend(srv, seed_model="sim-model"):
    return OpenAIBackend(model=seed_model, base_url=srv.base_url, api_key="k", backoff_s=0.01, max_retries=0)


def test_llm_simulator_passes_a_clean_message_and_records_model_and_seed():
    task = _task(GOLD)
    with ScriptedOpenAIServer(["<think>secret reasoning</think>You missed the fabric preference."]) as srv:
        sim = LLMSimulator(_backend(srv), seed=11)
        fb = sim.respond(task, GOLD[:1], "high")
        body = srv.bodies[0]
    assert fb.source == "llm" and not fb.redacted
    assert fb.text == "You missed the fabric preference."
    assert sim.model == "sim-model" and sim.seed == 11 and sim.name == "llm"
    assert body["seed"] == 11 and body["temperature"] == 0.0
    system, user = body["messages"][0]["content"], body["messages"][1]["content"]
    assert "Name only the attributes, never their values" in system
    assert "Navy Blue" in user  # the LLM gets the gold information
    assert fb.prompt_tokens is not None and fb.completion_tokens is not None


def test_llm_simulator_leak_is_replaced_by_the_scripted_message():
    task = _task(GOLD)
    with ScriptedOpenAIServer(["Your list is fine but I really want cotton, you know."]) as srv:
        fb = LLMSimulator(_backend(srv), seed=1).respond(task, GOLD[:1], "high")
    assert fb.source == "fallback" and fb.redacted and fb.leaked_attributes == ["fabric"]
    assert "cotton" not in fb.text.lower()
    assert fb.text == ScriptedSimulator(seed=1).feedback(task, GOLD[:1], "high")


def test_llm_simulator_low_hint_must_not_name_a_key():
    task = _task(GOLD)
    with ScriptedOpenAIServer(["Something about the fabric is missing."]) as srv:
        fb = LLMSimulator(_backend(srv)).respond(task, GOLD[:1], "low")
        system = srv.bodies[0]["messages"][0]["content"]
    assert "do not name any preference attribute" in system
    assert fb.source == "fallback" and fb.redacted and "fabric" not in fb.text


def test_llm_simulator_backend_failure_falls_back():
    task = _task(GOLD)
    with ScriptedOpenAIServer([{"status": 500}] * 3) as srv:
        fb = LLMSimulator(_backend(srv)).respond(task, [], "low")
    assert fb.source == "fallback" and not fb.redacted and "backend failed" in fb.reason
    assert fb.text == ScriptedSimulator(seed=0).feedback(task, [], "low")


def test_llm_simulator_hint_none_does_not_call_the_backend():
    with ScriptedOpenAIServer([]) as srv:
        assert LLMSimulator(_backend(srv)).feedback(_task(GOLD), [], "none") is None
        assert srv.bodies == []


# --------------------------------------------------------------------------- registry and config


class _Echo:
    name, model = "echo", None

    def __init__(self, seed=None):
        self.seed = seed

    def feedback(self, task, identified, hint):
        return json.dumps([p.value for p in task.preferences])  # leaks on purpose


def test_make_simulator_by_name_and_dotted_path():
    assert isinstance(make_simulator("scripted", seed=4), ScriptedSimulator)
    assert make_simulator("scripted", seed=4).seed == 4
    sim = make_simulator("tests.envs.test_env_simulator:_Echo", seed=9)
    assert type(sim).__name__ == "_Echo" and sim.seed == 9  # (pytest may import this file twice)
    with pytest.raises(ValueError, match="unknown user simulator"):
        make_simulator("nope")
    with pytest.raises(ValueError, match="backend"):
        make_simulator("llm")  # needs backend=
    from shopping_companion.registry import SIMULATORS

    assert SIMULATORS.get("scripted") is ScriptedSimulator and SIMULATORS.get("llm") is LLMSimulator


def test_a_custom_simulator_that_leaks_is_dropped():
    task = _task(GOLD)
    fb = simulator_feedback(_Echo(), task, [], "high")
    assert fb.text is None and fb.redacted and set(fb.leaked_attributes) == {"base_colour", "fabric", "sleeve_length"}


def test_envconfig_modes_and_hints():
    assert EnvConfig().mode == "two_stage" and EnvConfig().hint == "none" and EnvConfig().simulator == "scripted"
    for mode in ("two_stage", "one_stage", "oracle"):
        EnvConfig(mode=mode)
    for hint in ("none", "low", "high"):
        EnvConfig(hint=hint)
    with pytest.raises(ValueError, match="needs mode='two_stage'"):
        EnvConfig(mode="one_stage", hint="low")
    with pytest.raises(ValueError):
        EnvConfig(mode="three_stage")
    with pytest.raises(ValueError):
        EnvConfig(max_observation_chars=10)
