"""Wall-clock deadlines, the circuit breaker, context-length refusals and key scrubbing of
:class:`OpenAIBackend`, against real local HTTP servers that misbehave (tests/openai_server.py)."""

from __future__ import annotations

import logging
import re
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from shopping_companion.errors import ConfigError
from shopping_companion.llm.base import BackendError, CircuitOpenError, ContextLengthError
from shopping_companion.llm.breaker import CircuitBreaker, breaker_for, reset_breakers
from shopping_companion.llm.openai_backend import OpenAIBackend, OpenAIBackendConfig, is_context_length_error

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.openai_server import ScriptedOpenAIServer  # noqa: E402

MESSAGES = [{"role": "user", "content": "hello"}]
KEY = "sk-proj-Zq8v3LmN0pRt7Wx2Yc5Bd9Fg4Hk6Js1Ae"


@pytest.fixture(autouse=True)
def _fresh_breakers(monkeypatch: pytest.MonkeyPatch):
    for var in ("OPENAI_API_KEY", "SHOPCOMP_TIMEOUT_S", "SHOPCOMP_DEADLINE_S", "SHOPCOMP_BREAKER_THRESHOLD"):
        monkeypatch.delenv(var, raising=False)
    reset_breakers()
    yield
    reset_breakers()


def make(url: str, **kw) -> OpenAIBackend:
    kw.setdefault("timeout_s", 5)
    kw.setdefault("max_retries", 2)
    kw.setdefault("backoff_s", 0.01)
    kw.setdefault("backoff_jitter", 0.0)
    return OpenAIBackend("test-model", base_url=url, **kw)


def dead_url() -> str:
    srv = ScriptedOpenAIServer([]).start()
    url = srv.base_url
    srv.stop()  # nothing listens there any more: connection refused
    return url


# --------------------------------------------------------------------------- deadlines


def test_trickling_body_is_cut_at_the_attempt_timeout() -> None:
    """Before: one byte every 0.3 s passed every per-read timeout, so a 1 s request took minutes."""
    with (
        ScriptedOpenAIServer([{"trickle_s": 0.3, "content": "x" * 50}]) as srv,
        make(srv.base_url, timeout_s=1.0, max_retries=0) as backend,
    ):
        start = time.monotonic()
        with pytest.raises(BackendError, match="timed out after 1s") as info:
            backend.chat(MESSAGES)
        elapsed = time.monotonic() - start
    assert 0.9 <= elapsed <= 1.6
    assert info.value.attempts == 1


def test_trickling_headers_are_cut_at_the_attempt_timeout() -> None:
    with (
        ScriptedOpenAIServer([{"trickle_s": 0.3, "trickle_headers": True}]) as srv,
        make(srv.base_url, timeout_s=1.0, max_retries=0) as backend,
    ):
        start = time.monotonic()
        with pytest.raises(BackendError, match="timed out"):
            backend.chat(MESSAGES)
        assert time.monotonic() - start <= 1.6
        # the watchdog shut the attempt's socket down: its worker thread ends too (no leak)
        time.sleep(0.5)
        assert not [t for t in threading.enumerate() if t.name == f"{backend.name}-attempt"]


def test_deadline_bounds_all_attempts_of_a_hung_server() -> None:
    """Before: every attempt got its full timeout, so 10 retries of 0.5 s took 5 s + backoff."""
    script = [{"hang": True}] * 20
    with (
        ScriptedOpenAIServer(script) as srv,
        make(
            srv.base_url, timeout_s=0.5, max_retries=10, deadline_s=1.2, breaker=CircuitBreaker("isolated", 100)
        ) as backend,
    ):
        start = time.monotonic()
        with pytest.raises(BackendError, match="deadline_s=1.2") as info:
            backend.chat(MESSAGES)
        elapsed = time.monotonic() - start
        assert len(srv.bodies) == info.value.attempts == 3  # 0.5 + 0.5 + the 0.2 s left
    assert 1.1 <= elapsed <= 1.6


def test_backoff_never_sleeps_past_the_deadline() -> None:
    script = [{"status": 429, "headers": {"retry-after": "20"}}] * 3
    with ScriptedOpenAIServer(script) as srv, make(srv.base_url, deadline_s=2, max_backoff_s=30) as backend:
        start = time.monotonic()
        with pytest.raises(BackendError, match="no time left for a retry in 20") as info:
            backend.chat(MESSAGES)
        assert time.monotonic() - start < 1.0  # gave up at once instead of sleeping 20 s
        assert len(srv.bodies) == 1
    assert info.value.status_code == 429


def test_default_deadline() -> None:
    assert OpenAIBackend("m", timeout_s=120, max_retries=3).deadline_s == 480
    assert OpenAIBackend("m", timeout_s=300, max_retries=3).deadline_s == 600
    assert OpenAIBackend("m", timeout_s=900, max_retries=0).deadline_s == 900
    assert OpenAIBackend("m", timeout_s=5, max_retries=2, deadline_s=7).deadline_s == 7


@pytest.mark.parametrize("value", [None, "soon", 0, -3, float("nan"), float("inf"), True])
def test_bad_timeout_is_a_config_error_naming_the_field(value) -> None:
    """Before: timeout_s=None raised TypeError ('<=' not supported between NoneType and int)."""
    with pytest.raises(ConfigError, match="timeout_s: must be"):
        OpenAIBackend("m", timeout_s=value)
    with pytest.raises(ConfigError, match="timeout_s: must be"):
        OpenAIBackendConfig(model="m", timeout_s=value)
    with pytest.raises(ConfigError, match="deadline_s: must be"):
        OpenAIBackend("m", deadline_s=value if value is not None else "none")


def test_bad_time_from_env_is_a_config_error_naming_the_variable() -> None:
    for var, raw in (
        ("SHOPCOMP_TIMEOUT_S", "0"),
        ("SHOPCOMP_TIMEOUT_S", "None"),
        ("SHOPCOMP_DEADLINE_S", "-1"),
        ("SHOPCOMP_BREAKER_THRESHOLD", "0"),
    ):
        with pytest.raises(ConfigError, match=var):
            OpenAIBackendConfig.from_env({"SHOPCOMP_MODEL": "m", var: raw})
    cfg = OpenAIBackendConfig.from_env(
        {"SHOPCOMP_MODEL": "m", "SHOPCOMP_DEADLINE_S": "30", "SHOPCOMP_BREAKER_THRESHOLD": "2"}
    )
    backend = cfg.build()
    assert (backend.deadline_s, backend.breaker.threshold) == (30.0, 2)


# --------------------------------------------------------------------------- context length


@pytest.mark.parametrize(
    "spec",
    [
        {
            "status": 400,
            "message": "This model's maximum context length is 4096 tokens. However, you requested "
            "5000 tokens (4000 in the messages, 1000 in the completion). Please reduce the "
            "length of the messages or completion.",
        },
        {"status": 400, "message": "Request too large for model", "code": "context_length_exceeded"},
        {"status": 400, "message": "The input (5000 tokens) is longer than the model's context length (4096 tokens)."},
        {
            "status": 422,
            "message": "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096. "
            "Given: 4000 `inputs` tokens and 1000 `max_new_tokens`",
        },
        {"status": 400, "message": "prompt is too long: 210000 tokens > 200000 maximum"},
        {"status": 400, "message": "the request exceeds the available context size, try increasing it"},
    ],
)
def test_context_length_refusals_raise_context_length_error(spec) -> None:
    with ScriptedOpenAIServer([spec, "unused"]) as srv, make(srv.base_url) as backend:
        with pytest.raises(ContextLengthError) as info:
            backend.chat(MESSAGES)
        assert len(srv.bodies) == 1  # not retried
    assert info.value.status_code == spec["status"] and info.value.attempts == 1
    assert "context" in str(info.value)


def test_other_client_errors_are_plain_backend_errors() -> None:
    with (
        ScriptedOpenAIServer([{"status": 400, "message": "temperature: must be <= 2"}]) as srv,
        make(srv.base_url) as backend,
    ):
        with pytest.raises(BackendError) as info:
            backend.chat(MESSAGES)
    assert not isinstance(info.value, ContextLengthError)
    assert not is_context_length_error(500, "maximum context length")  # only 400/413/422


# --------------------------------------------------------------------------- secrets


@pytest.mark.parametrize("shown", [8, 12, 20, None])
def test_echoed_key_parts_are_scrubbed_everywhere(shown, caplog: pytest.LogCaptureFixture) -> None:
    """Before: only the whole key was scrubbed, so 'Incorrect API key provided: sk-proj-Zq8v...'
    went into errors and logs."""
    script = [{"echo_key": shown, "status": 500}, {"echo_key": shown, "status": 401}]
    with (
        caplog.at_level(logging.DEBUG, logger="shopping_companion"),
        ScriptedOpenAIServer(script) as srv,
        make(srv.base_url, api_key=KEY) as backend,
    ):
        with pytest.raises(BackendError) as info:
            backend.chat(MESSAGES)
        assert srv.authorizations[0] == f"Bearer {KEY}"  # the server did get (and echo) the key
    written = str(info.value) + "\n" + caplog.text + "\n" + repr(backend)
    assert "Incorrect API key provided" in written
    for i in range(len(KEY) - 7):
        assert KEY[i : i + 8] not in written, KEY[i : i + 8]
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_scrub_keeps_short_coincidences() -> None:
    backend = OpenAIBackend("m", api_key=KEY)
    assert backend._scrub("sk-proj and Ae") == "sk-proj and Ae"  # 7 characters of the key: kept
    assert backend._scrub("sk-proj-") == "***"  # 8: scrubbed
    assert backend._scrub(f"x{KEY[5:13]}y") == "x***y"


# --------------------------------------------------------------------------- circuit breaker


def _hammer(backend: OpenAIBackend, calls: int, concurrency: int) -> tuple[float, list[BaseException]]:
    def one(_: int) -> BaseException:
        try:
            backend.chat(MESSAGES)
        except BaseException as e:  # noqa: BLE001 - collected and checked by the test
            return e
        raise AssertionError("a call to a dead server succeeded")

    start = time.monotonic()
    with ThreadPoolExecutor(concurrency) as ex:
        errors = list(ex.map(one, range(calls)))
    return time.monotonic() - start, errors


def test_breaker_stops_100_calls_to_a_refusing_server_at_once() -> None:
    """Before: each of 100 calls made all its 4 attempts with backoff (1 + 2 + 4 s) against a dead
    server; now the 5th consecutive failure opens the circuit and every call fails at once."""
    backend = make(dead_url(), timeout_s=2, max_retries=3, backoff_s=1.0, breaker_threshold=5)
    elapsed, errors = _hammer(backend, 100, 8)
    assert all(isinstance(e, CircuitOpenError) for e in errors), {type(e).__name__ for e in errors}
    assert elapsed <= 5 * backend.deadline_s
    assert elapsed < backend.deadline_s  # less than one call's retry budget (in practice ~1 s)
    msg = str(errors[-1])
    # concurrent calls may add failures while it opens: the count is >= the threshold
    assert backend.endpoint in msg and "threshold 5" in msg and "SHOPCOMP_BREAKER_THRESHOLD" in msg
    assert int(re.search(r"(\d+) consecutive", msg).group(1)) >= 5


def test_breaker_stops_100_calls_to_a_hung_server_within_one_wave() -> None:
    """Before: 100 calls at concurrency 8 to a hung server took 13 waves x the whole retry budget."""
    with ScriptedOpenAIServer(lambda body: {"hang": True}) as srv:
        backend = make(srv.base_url, timeout_s=1.0, max_retries=3, backoff_s=0.2, breaker_threshold=5)
        elapsed, errors = _hammer(backend, 100, 8)
        sent = len(srv.bodies)
    assert all(isinstance(e, CircuitOpenError) for e in errors), {type(e).__name__ for e in errors}
    assert elapsed <= 5 * backend.deadline_s
    assert elapsed < 2 * backend.deadline_s  # about one wave of 1 s timeouts (before: 13 waves x 4 s)
    assert sent <= 16  # later calls never reached the server


def test_open_breaker_fails_later_calls_without_contacting_the_server() -> None:
    with ScriptedOpenAIServer(["never sent"]) as srv:
        breaker = breaker_for(make(srv.base_url).endpoint, 5)
        for _ in range(5):
            with pytest.raises(CircuitOpenError) if _ == 4 else _nothing():
                breaker.record_failure("connection error: refused")
        with make(srv.base_url) as backend, pytest.raises(CircuitOpenError):
            backend.chat(MESSAGES)
        assert srv.bodies == []


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return False


def test_any_http_answer_resets_the_count_dead_and_back() -> None:
    """A server that resets 4 connections and then answers: the breaker (threshold 5) stays shut,
    the call succeeds; one that resets 5 opens it."""
    with (
        ScriptedOpenAIServer(["back"], refuse_first=4) as srv,
        make(srv.base_url, max_retries=5, breaker_threshold=5) as backend,
    ):
        assert backend.chat(MESSAGES).content == "back"
        assert srv.refused == 4 and backend.breaker.failures == 0 and not backend.breaker.is_open
    with (
        ScriptedOpenAIServer(["back"], refuse_first=5) as srv,
        make(srv.base_url, max_retries=5, breaker_threshold=5) as backend,
    ):
        with pytest.raises(CircuitOpenError, match="5 consecutive"):
            backend.chat(MESSAGES)
        assert srv.refused == 5 and srv.bodies == []


def test_breaker_wakes_calls_sleeping_in_a_backoff() -> None:
    """A call sleeping a 30 s backoff raises CircuitOpenError as soon as other calls open it."""
    url = dead_url()
    sleeper = make(url, max_retries=1, backoff_s=30, max_backoff_s=30, deadline_s=60)
    box: dict[str, BaseException] = {}

    def run() -> None:
        try:
            sleeper.chat(MESSAGES)
        except BaseException as e:  # noqa: BLE001
            box["e"] = e

    t = threading.Thread(target=run)
    start = time.monotonic()
    t.start()
    time.sleep(0.3)  # it failed once and sleeps
    others = make(url, max_retries=0)
    for _ in range(4):
        with pytest.raises((BackendError, CircuitOpenError)):
            others.chat(MESSAGES)
    t.join(5)
    assert not t.is_alive() and isinstance(box.get("e"), CircuitOpenError)
    assert time.monotonic() - start < 3


# --------------------------------------------------------------------------- the CLI's backends


def test_cli_policy_backend_takes_deadline_and_threshold_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    from pydantic import ValidationError

    from shopping_companion.benchmark.kit import build_backend
    from shopping_companion.benchmark.run_config import BackendConfig
    from shopping_companion.errors import ConfigError

    def cfg(**kw):
        return BackendConfig(kind="openai", base_url=srv.base_url, model="m", **kw)

    with ScriptedOpenAIServer([]) as srv:
        for var, raw in (
            ("SHOPCOMP_DEADLINE_S", "0"),
            ("SHOPCOMP_DEADLINE_S", "none"),
            ("SHOPCOMP_BREAKER_THRESHOLD", "-2"),
        ):
            monkeypatch.setenv(var, raw)
            with pytest.raises(ConfigError, match=var):
                build_backend(cfg())
            monkeypatch.delenv(var)
        monkeypatch.setenv("SHOPCOMP_DEADLINE_S", "9")
        monkeypatch.setenv("SHOPCOMP_BREAKER_THRESHOLD", "3")
        backend = build_backend(cfg(timeout_s=2))
        assert (backend.timeout_s, backend.deadline_s, backend.breaker.threshold) == (2, 9, 3)
        backend = build_backend(cfg(deadline_s=4, breaker_threshold=7))
        assert (backend.deadline_s, backend.breaker.threshold) == (4, 7)
        with pytest.raises(ValidationError, match="timeout_s"):  # timeout None is refused by the config
            cfg(timeout_s=None)
