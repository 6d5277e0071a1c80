"""Deadlines and the circuit breaker through every LLM user built on a backend: the LLM judge, the
personalization JSON asker and the LLM user simulator (real local servers, real code)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from pydantic import BaseModel

from shopping_companion.envs.simulator import LLMSimulator, simulator_feedback
from shopping_companion.errors import ConfigError
from shopping_companion.judges.llm import LLMJudge
from shopping_companion.llm.base import CircuitOpenError
from shopping_companion.llm.breaker import reset_breakers
from shopping_companion.llm.openai_backend import OpenAIBackend
from shopping_companion.personalization.llmjson import JSONAsker, JSONAskError

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.openai_server import ScriptedOpenAIServer  # noqa: E402
from tests.judges.test_llm_judge import GOOD1, lookup, single_task, stage1_traj  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh_breakers():
    reset_breakers()
    yield
    reset_breakers()


def hung(body):
    return {"hang": True}


def dead_url() -> str:
    srv = ScriptedOpenAIServer([]).start()
    url = srv.base_url
    srv.stop()
    return url


class Reply(BaseModel):
    ok: bool


def test_llm_judge_verdict_has_a_total_deadline() -> None:
    """Before: 6 attempts x 0.5 s against a hung judge (no total limit); now the verdict fails at
    its 1.2 s deadline, as a recorded judge failure."""
    with ScriptedOpenAIServer(hung) as srv:
        backend = OpenAIBackend("judge-model", base_url=srv.base_url, api_key="k", max_retries=0, timeout_s=10)
        judge = LLMJudge(backend, lookup, timeout_s=0.5, max_retries=5, deadline_s=1.2, backoff_s=0.0)
        start = time.monotonic()
        v = judge.judge(single_task(), stage1_traj())
        elapsed = time.monotonic() - start
    assert v.failed
    assert any("deadline of 1.2s" in r for r in v.reasons), v.reasons
    assert 1.1 <= elapsed <= 1.7


def test_llm_judge_still_answers_within_its_deadline() -> None:
    with ScriptedOpenAIServer([{"delay_s": 2.0, "content": GOOD1}, GOOD1]) as srv:
        backend = OpenAIBackend("judge-model", base_url=srv.base_url, api_key="k", max_retries=0, timeout_s=10)
        v = LLMJudge(backend, lookup, timeout_s=0.4, max_retries=1, deadline_s=5, backoff_s=0.0).judge(
            single_task(), stage1_traj()
        )
    assert not v.failed and v.m1 == 2


@pytest.mark.parametrize(
    "field,value", [("timeout_s", "5"), ("timeout_s", 0), ("deadline_s", -1), ("deadline_s", "soon")]
)
def test_llm_judge_bad_times_are_config_errors(field, value) -> None:
    backend = OpenAIBackend("judge-model", api_key="k")
    with pytest.raises(ConfigError, match=f"{field}: must be"):
        LLMJudge(backend, lookup, **{field: value})
    with pytest.raises(ConfigError, match="timeout_s: must be"):
        LLMJudge.from_openai("judge-model", http_timeout_s=None)


def test_llm_judge_default_deadline_and_from_openai_settings() -> None:
    judge = LLMJudge(OpenAIBackend("m", api_key="k"), lookup, timeout_s=180, max_retries=2)
    assert judge.deadline_s == 540
    j = LLMJudge.from_openai("m", "http://127.0.0.1:9/v1", http_timeout_s=7, http_deadline_s=20, breaker_threshold=3)
    assert (j.backend.timeout_s, j.backend.deadline_s, j.backend.breaker.threshold) == (7, 20, 3)


def test_open_circuit_stops_the_judge_instead_of_a_failed_verdict() -> None:
    backend = OpenAIBackend("judge-model", base_url=dead_url(), api_key="k", max_retries=0, breaker_threshold=2)
    judge = LLMJudge(backend, lookup, max_retries=3, backoff_s=0.0)
    with pytest.raises(CircuitOpenError, match="2 consecutive"):
        judge.judge(single_task(), stage1_traj())


def test_json_asker_has_a_total_deadline() -> None:
    with ScriptedOpenAIServer(hung) as srv:
        asker = JSONAsker(
            OpenAIBackend("m", base_url=srv.base_url, api_key="k", max_retries=0, timeout_s=10),
            max_retries=5,
            backoff_s=0.0,
            timeout_s=0.4,
            deadline_s=1.0,
        )
        start = time.monotonic()
        with pytest.raises(JSONAskError, match="deadline of 1s"):
            asker.ask([{"role": "user", "content": "json please"}], Reply)
        assert time.monotonic() - start <= 1.5
    with pytest.raises(ConfigError, match="deadline_s: must be"):
        JSONAsker(OpenAIBackend("m", api_key="k"), deadline_s=None)


def test_llm_simulator_propagates_an_open_circuit_but_falls_back_on_other_errors() -> None:
    """Before: CircuitOpenError was swallowed like any error, so a dead simulator endpoint made
    every episode silently use the scripted fallback."""
    task = single_task()
    backend = OpenAIBackend("sim", base_url=dead_url(), api_key="k", max_retries=0, breaker_threshold=2)
    sim = LLMSimulator(backend)
    first = sim.respond(task, [], "high")  # 1 failure: an ordinary backend error -> fallback
    assert first.source == "fallback" and "BackendError" in (first.reason or "")
    with pytest.raises(CircuitOpenError):
        sim.respond(task, [], "high")
    with pytest.raises(CircuitOpenError):  # and through the episode's wrapper
        simulator_feedback(sim, task, [], "high")


# --------------------------------------------------------------------------- the LLM task generator

from tests.benchmark.test_llm_generator import llm_config, pool, products  # noqa: E402,F401 - fixtures


def test_llm_generator_stops_with_a_synth_error_when_the_circuit_is_open(products, pool, tmp_path):  # noqa: F811
    """Before: CircuitOpenError (not a BackendError) escaped the build as a bare traceback."""
    from shopping_companion.benchmark.synth import SynthError, build_benchmark
    from shopping_companion.benchmark.synthesis.llm_generator import LLMGenerator
    from shopping_companion.llm.breaker import breaker_for

    with ScriptedOpenAIServer(["never sent"]) as srv:
        cfg = llm_config(srv, tmp_path, n_tasks=2)
        gen = LLMGenerator(cfg.generator)
        breaker = breaker_for(gen.backends[0].endpoint, gen.backends[0].breaker.threshold)
        assert breaker is gen.backends[0].breaker  # shared per endpoint
        for _ in range(breaker.threshold - 1):
            breaker.record_failure("connection error: refused")
        with pytest.raises(CircuitOpenError):
            breaker.record_failure("connection error: refused")
        with pytest.raises(SynthError, match="circuit open for http://127.0.0.1"):
            build_benchmark(tmp_path / "z", products, pool, cfg, generator=gen)
        assert srv.bodies == []
