"""OpenAIBackend against a real (scripted) OpenAI-compatible HTTP server on 127.0.0.1."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import pytest

from shopping_companion.errors import ConfigError
from shopping_companion.llm.base import AssistantMessage, BackendError, ChatBackend, Sampling
from shopping_companion.llm.openai_backend import OpenAIBackend, OpenAIBackendConfig, backend_from_env

_REPO = str(Path(__file__).resolve().parents[2])
if _REPO not in sys.path:
    sys.path.insert(0, _REPO)
from tests.openai_server import ScriptedOpenAIServer  # noqa: E402

SECRET = "sk-test-SECRET-0123456789abcdef"

MESSAGES = [
    {"role": "system", "content": "You are a shopping assistant."},
    {"role": "user", "content": "Find me a red scarf under 30 dollars"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "search_products", "arguments": '{"query": "red scarf"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": '[{"id": "P1", "price": 25.0}]'},
]

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search_products",
            "description": "Search the catalogue.",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
        },
    }
]


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in (
        "OPENAI_API_KEY",
        "MY_KEY",
        "SHOPCOMP_MODEL",
        "SHOPCOMP_BASE_URL",
        "SHOPCOMP_API_KEY_ENV",
        "SHOPCOMP_TIMEOUT_S",
        "SHOPCOMP_MAX_RETRIES",
    ):
        monkeypatch.delenv(var, raising=False)


def make(srv: ScriptedOpenAIServer, **kw) -> OpenAIBackend:
    kw.setdefault("timeout_s", 5)
    kw.setdefault("max_retries", 2)
    kw.setdefault("backoff_s", 0.01)
    kw.setdefault("backoff_jitter", 0.0)
    return OpenAIBackend("test-model", base_url=srv.base_url, **kw)


# --------------------------------------------------------------------------- responses


def test_text_with_tool_call_blocks_comes_back_verbatim() -> None:
    text = (
        "<think>The user wants a scarf.</think>\n"
        '<tool_call>\n{"name": "search_products", "arguments": {"query": "red scarf"}}\n</tool_call>'
    )
    with ScriptedOpenAIServer([text]) as srv, make(srv) as backend:
        msg = backend.chat(MESSAGES, TOOLS)
    assert isinstance(msg, AssistantMessage)
    assert msg.content == text
    assert msg.tool_calls == []
    assert msg.reasoning is None
    assert msg.finish_reason == "stop"
    assert msg.latency_s is not None and msg.latency_s > 0
    # whitespace token counts from the server
    assert msg.completion_tokens == len(text.split())
    expected_prompt = sum(len(m["content"].split()) for m in MESSAGES) + len(
        MESSAGES[2]["tool_calls"][0]["function"]["arguments"].split()
    )
    assert msg.prompt_tokens == expected_prompt


def test_structured_tool_calls_are_converted() -> None:
    script = [
        {
            "content": None,
            "reasoning_content": "I should search first.",
            "tool_calls": [
                {"id": "call_a", "name": "search_products", "arguments": '{"query": "red scarf"}'},
                {"id": "call_b", "name": "view_product", "arguments": '{"product_id": "P1"'},  # malformed
                {"id": "call_c", "name": "view_product", "arguments": {"product_id": "P2"}},
            ],
        }
    ]
    with ScriptedOpenAIServer(script) as srv, make(srv) as backend:
        msg = backend.chat(MESSAGES, TOOLS)
    assert msg.content == ""  # None -> ""
    assert msg.reasoning == "I should search first."
    assert msg.finish_reason == "tool_calls"
    assert [(c.id, c.name) for c in msg.tool_calls] == [
        ("call_a", "search_products"),
        ("call_b", "view_product"),
        ("call_c", "view_product"),
    ]
    assert msg.tool_calls[0].arguments == '{"query": "red scarf"}'
    assert msg.tool_calls[1].arguments == '{"product_id": "P1"'  # raw, malformed kept as sent
    assert json.loads(msg.tool_calls[2].arguments) == {"product_id": "P2"}


def test_reasoning_field_and_explicit_usage() -> None:
    script = [
        {
            "content": "<answer>P1</answer>",
            "reasoning": "cheapest red scarf",
            "finish_reason": "length",
            "usage": {"prompt_tokens": 1234, "completion_tokens": 56, "total_tokens": 1290},
        },
        {"content": "no usage here", "usage": None},
    ]
    with ScriptedOpenAIServer(script) as srv, make(srv) as backend:
        first = backend.chat(MESSAGES)
        second = backend.chat(MESSAGES)
    assert first.reasoning == "cheapest red scarf"
    assert first.finish_reason == "length"
    assert (first.prompt_tokens, first.completion_tokens) == (1234, 56)
    assert second.content == "no usage here"
    assert (second.prompt_tokens, second.completion_tokens) == (None, None)


# --------------------------------------------------------------------------- requests


def test_sampling_params_reach_the_server() -> None:
    sampling = Sampling(temperature=0.3, top_p=0.8, top_k=40, max_tokens=321, seed=7)
    with (
        ScriptedOpenAIServer(["ok", "ok"]) as srv,
        make(
            srv, extra_body={"chat_template_kwargs": {"enable_thinking": False}, "repetition_penalty": 1.05}
        ) as backend,
    ):
        backend.chat(MESSAGES, sampling=sampling)
        backend.chat(MESSAGES, sampling=Sampling(top_k=None))  # defaults, no seed, no top_k
        first, second = srv.bodies
    assert first["model"] == "test-model"
    assert first["temperature"] == 0.3
    assert first["top_p"] == 0.8
    assert first["max_tokens"] == 321
    assert first["seed"] == 7
    assert first["top_k"] == 40  # via extra_body, top level of the JSON as vLLM expects
    assert first["chat_template_kwargs"] == {"enable_thinking": False}
    assert first["repetition_penalty"] == 1.05
    assert "stream" not in first or first["stream"] is False

    defaults = Sampling()
    assert second["temperature"] == defaults.temperature
    assert second["top_p"] == defaults.top_p
    assert second["max_tokens"] == defaults.max_tokens
    assert "seed" not in second
    assert "top_k" not in second
    assert second["chat_template_kwargs"] == {"enable_thinking": False}


def test_default_sampling_and_openai_style_options() -> None:
    with ScriptedOpenAIServer(["ok", "ok"]) as srv:
        with make(srv) as backend:
            backend.chat(MESSAGES)  # sampling=None -> Sampling() defaults, top_k=20 sent
        with make(srv, send_top_k=False, max_tokens_param="max_completion_tokens") as backend:
            backend.chat(MESSAGES, sampling=Sampling(max_tokens=99))
        default_body, openai_body = srv.bodies
    assert default_body["top_k"] == Sampling().top_k
    assert "top_k" not in openai_body
    assert openai_body["max_completion_tokens"] == 99
    assert "max_tokens" not in openai_body


def test_tools_and_messages_reach_the_server_unchanged() -> None:
    messages = [dict(m) for m in MESSAGES]
    with ScriptedOpenAIServer(["ok", "ok", "ok"]) as srv:
        with make(srv) as backend:
            backend.chat(messages, TOOLS)
            backend.chat(messages, [])  # no tools -> field omitted
        with make(srv, tool_choice="auto") as backend:
            backend.chat(messages, TOOLS)
        with_tools, without_tools, with_choice = srv.bodies
    assert with_tools["tools"] == TOOLS
    assert with_tools["messages"] == MESSAGES
    assert with_tools["messages"][3]["tool_call_id"] == "call_1"
    assert with_tools["messages"][2]["tool_calls"] == MESSAGES[2]["tool_calls"]
    assert "tool_choice" not in with_tools
    assert "tools" not in without_tools
    assert with_choice["tool_choice"] == "auto"
    assert messages == MESSAGES  # the caller's list was not modified


# --------------------------------------------------------------------------- retries


def test_retries_on_500_then_succeeds() -> None:
    with ScriptedOpenAIServer([{"status": 500}, "recovered"]) as srv, make(srv) as backend:
        msg = backend.chat(MESSAGES)
        assert len(srv.bodies) == 2
        assert srv.remaining == 0
    assert msg.content == "recovered"


def test_retries_on_429_and_honours_retry_after() -> None:
    script = [{"status": 429, "headers": {"retry-after": "0.3"}}, "ok"]
    with ScriptedOpenAIServer(script) as srv, make(srv, backoff_s=0.0, max_backoff_s=5) as backend:
        start = time.monotonic()
        msg = backend.chat(MESSAGES)
        elapsed = time.monotonic() - start
        assert len(srv.bodies) == 2
    assert msg.content == "ok"
    assert elapsed >= 0.3


def test_retries_exhausted_raises_backend_error() -> None:
    script = [{"status": 500}, {"status": 503}, {"status": 502}]
    with ScriptedOpenAIServer(script) as srv, make(srv, max_retries=2) as backend:
        with pytest.raises(BackendError) as info:
            backend.chat(MESSAGES)
        assert len(srv.bodies) == 3
        assert srv.errors == []  # the client did not go past the script
    err = info.value
    assert "3 attempt" in str(err)
    assert "502" in str(err)
    assert err.attempts == 3
    assert err.status_code == 502


def test_backoff_is_exponential_and_capped() -> None:
    with (
        ScriptedOpenAIServer([{"status": 500}] * 3 + ["ok"]) as srv,
        make(srv, max_retries=3, backoff_s=0.05, max_backoff_s=0.15) as backend,
    ):
        assert [backend._retry_backoff.delay(k) for k in range(4)] == [0.05, 0.1, 0.15, 0.15]
        start = time.monotonic()
        assert backend.chat(MESSAGES).content == "ok"
        elapsed = time.monotonic() - start
        times = [r.received_at for r in srv.chat_requests]
    assert elapsed >= 0.05 + 0.1 + 0.15
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert gaps[0] >= 0.05 and gaps[1] >= 0.1 and gaps[2] >= 0.15


def test_client_errors_are_not_retried() -> None:
    script = [{"status": 400, "message": "maximum context length is 32768 tokens"}, "unused"]
    with ScriptedOpenAIServer(script) as srv, make(srv) as backend:
        with pytest.raises(BackendError) as info:
            backend.chat(MESSAGES)
        assert len(srv.bodies) == 1
    assert "400" in str(info.value)
    assert "maximum context length" in str(info.value)
    assert info.value.status_code == 400
    assert info.value.attempts == 1


def test_timeout_is_retried_then_backend_error() -> None:
    script = [{"delay_s": 2.0}, {"delay_s": 2.0}]
    with ScriptedOpenAIServer(script) as srv, make(srv, timeout_s=0.2, max_retries=1) as backend:
        start = time.monotonic()
        with pytest.raises(BackendError) as info:
            backend.chat(MESSAGES)
        elapsed = time.monotonic() - start
        assert len(srv.bodies) == 2
    assert "timed out" in str(info.value)
    assert info.value.attempts == 2
    assert elapsed < 1.5  # did not wait for the server's delay


def test_timeout_then_success() -> None:
    script = [{"delay_s": 2.0}, "fast answer"]
    with ScriptedOpenAIServer(script) as srv, make(srv, timeout_s=0.2) as backend:
        msg = backend.chat(MESSAGES)
        assert len(srv.bodies) == 2
    assert msg.content == "fast answer"
    assert msg.latency_s is not None and msg.latency_s < 0.2  # latency of the successful attempt


def test_slow_but_in_time_response_is_accepted() -> None:
    with ScriptedOpenAIServer([{"delay_s": 0.1, "content": "slow"}]) as srv, make(srv, timeout_s=2) as backend:
        msg = backend.chat(MESSAGES)
    assert msg.content == "slow"
    assert msg.latency_s >= 0.1


def test_invalid_json_is_retried_then_succeeds() -> None:
    with ScriptedOpenAIServer([{"raw": "not json"}, "parsed"]) as srv, make(srv) as backend:
        msg = backend.chat(MESSAGES)
        assert len(srv.bodies) == 2
    assert msg.content == "parsed"


def test_unparseable_responses_exhaust_retries() -> None:
    script = [
        {"raw": "not json"},
        {"raw": '{"id": "chatcmpl-x", "choices": []}'},
        {"raw": '{"error": {"message": "engine overloaded"}}'},
    ]
    with ScriptedOpenAIServer(script) as srv, make(srv, max_retries=2) as backend:
        with pytest.raises(BackendError) as info:
            backend.chat(MESSAGES)
        assert len(srv.bodies) == 3
    assert "unparseable" in str(info.value)
    assert "engine overloaded" in str(info.value)


def test_connection_refused_is_retried_then_backend_error() -> None:
    srv = ScriptedOpenAIServer([]).start()
    base_url = srv.base_url
    srv.stop()  # nothing listens on that port any more
    backend = OpenAIBackend(
        "test-model", base_url=base_url, timeout_s=1, max_retries=1, backoff_s=0.01, backoff_jitter=0
    )
    with backend, pytest.raises(BackendError) as info:
        backend.chat(MESSAGES)
    assert "connection error" in str(info.value)
    assert info.value.attempts == 2


# --------------------------------------------------------------------------- keys


def test_api_key_from_env_is_sent_but_never_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    script = [
        "ok",
        {"status": 500, "message": f"upstream rejected Authorization: Bearer {SECRET}"},
        {"status": 401, "message": f"Incorrect API key provided: {SECRET}"},
    ]
    with ScriptedOpenAIServer(script) as srv, make(srv, max_retries=0) as backend:
        assert backend.chat(MESSAGES).content == "ok"
        with pytest.raises(BackendError) as retryable:
            backend.chat(MESSAGES)
        with pytest.raises(BackendError) as fatal:
            backend.chat(MESSAGES)
        assert srv.authorizations == [f"Bearer {SECRET}"] * 3
    for err in (retryable.value, fatal.value):
        assert SECRET not in str(err)
        assert SECRET not in repr(err)
        assert err.__cause__ is None  # no chained client exception carrying request headers
    assert "401" in str(fatal.value)
    assert SECRET not in repr(backend)
    assert SECRET not in str(backend)
    assert "api_key=<env>" in repr(backend)


def test_custom_key_env_explicit_key_and_placeholder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_KEY", "sk-from-my-env")
    with ScriptedOpenAIServer(["a", "b", "c"]) as srv:
        with make(srv) as backend:  # no key anywhere (local vLLM)
            backend.chat(MESSAGES)
            assert "api_key=<placeholder>" in repr(backend)
        with make(srv, api_key_env="MY_KEY") as backend:
            backend.chat(MESSAGES)
        with make(srv, api_key_env="MY_KEY", api_key="sk-explicit") as backend:
            backend.chat(MESSAGES)
            assert "sk-explicit" not in repr(backend)
        assert srv.authorizations == ["Bearer EMPTY", "Bearer sk-from-my-env", "Bearer sk-explicit"]


# --------------------------------------------------------------------------- construction


def test_name_protocol_and_validation() -> None:
    backend = OpenAIBackend("Qwen/Qwen3-8B", base_url="http://127.0.0.1:9/v1")
    assert backend.name == "openai:Qwen/Qwen3-8B"
    assert isinstance(backend, ChatBackend)
    assert OpenAIBackend("m", base_url="http://127.0.0.1:9/v1", name="policy-a").name == "policy-a"
    backend.close()
    with pytest.raises(ConfigError):
        OpenAIBackend("")
    with pytest.raises(ConfigError):
        OpenAIBackend("m", max_retries=-1)
    with pytest.raises(ConfigError):
        OpenAIBackend("m", max_tokens_param="tokens")


def test_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="SHOPCOMP_MODEL"):
        OpenAIBackend.from_env()
    with ScriptedOpenAIServer(["from env"]) as srv:
        monkeypatch.setenv("SHOPCOMP_MODEL", "served-model")
        monkeypatch.setenv("SHOPCOMP_BASE_URL", srv.base_url)
        monkeypatch.setenv("SHOPCOMP_API_KEY_ENV", "MY_KEY")
        monkeypatch.setenv("SHOPCOMP_TIMEOUT_S", "7.5")
        monkeypatch.setenv("SHOPCOMP_MAX_RETRIES", "1")
        monkeypatch.setenv("MY_KEY", "sk-env-key")
        with OpenAIBackend.from_env(backoff_s=0.01) as backend:
            assert backend.model == "served-model"
            assert backend.timeout_s == 7.5
            assert backend.max_retries == 1
            assert backend.backoff_s == 0.01
            assert backend.chat(MESSAGES).content == "from env"
        assert srv.bodies[0]["model"] == "served-model"
        assert srv.authorizations == ["Bearer sk-env-key"]

    cfg = OpenAIBackendConfig.from_env({"SHOPCOMP_MODEL": "m2"}, max_retries=5)
    assert (cfg.model, cfg.base_url, cfg.api_key_env, cfg.max_retries) == ("m2", None, "OPENAI_API_KEY", 5)
    with pytest.raises(ConfigError, match="SHOPCOMP_TIMEOUT_S"):
        OpenAIBackendConfig.from_env({"SHOPCOMP_MODEL": "m", "SHOPCOMP_TIMEOUT_S": "soon"})
    explicit = backend_from_env({}, model="m3", base_url="http://127.0.0.1:9/v1")
    assert explicit.name == "openai:m3"
    explicit.close()


def test_concurrent_calls_share_one_backend() -> None:
    def echo(body: dict) -> str:
        return "echo: " + body["messages"][-1]["content"]

    with ScriptedOpenAIServer(echo) as srv, make(srv) as backend:
        results: dict[int, str] = {}

        def worker(i: int) -> None:
            msg = backend.chat([{"role": "user", "content": f"q{i}"}])
            results[i] = msg.content

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=10)
        assert len(srv.bodies) == 8
    assert results == {i: f"echo: q{i}" for i in range(8)}


def test_server_helper_models_endpoint_and_exhaustion() -> None:
    from openai import OpenAI

    with ScriptedOpenAIServer(["only one"], model="served") as srv:
        client = OpenAI(base_url=srv.base_url, api_key="k", max_retries=0)
        assert [m.id for m in client.models.list()] == ["served"]
        first = client.chat.completions.create(model="x", messages=[{"role": "user", "content": "hi"}])
        assert first.id.startswith("chatcmpl-")
        assert first.choices[0].message.content == "only one"
        assert first.usage is not None and first.usage.prompt_tokens == 1
        import openai

        with pytest.raises(openai.APIError):  # the exhausted script answers with an HTTP error
            client.chat.completions.create(model="x", messages=[{"role": "user", "content": "hi"}])
        assert srv.errors and "exhausted" in srv.errors[0]
        client.close()


def test_ping_names_an_endpoint_that_does_not_answer_and_accepts_any_http_reply():
    import socket

    from shopping_companion.llm.base import BackendError
    from shopping_companion.llm.openai_backend import OpenAIBackend
    from tests.openai_server import ScriptedOpenAIServer

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dead = OpenAIBackend("m", base_url=f"http://127.0.0.1:{port}/v1", api_key="k", max_retries=5)
    with pytest.raises(BackendError, match=f"cannot reach http://127.0.0.1:{port}/v1"):
        dead.ping(connect_timeout_s=2)
    with ScriptedOpenAIServer([]) as srv:
        OpenAIBackend("m", base_url=srv.base_url, api_key="k").ping()  # /v1/models answers
        OpenAIBackend("m", base_url=srv.base_url + "/nope", api_key="k").ping()  # a 404 is an answer too
        assert srv.chat_requests == [] and len(srv.requests) == 2  # two GETs, no chat request


def test_ping_lets_a_slow_models_route_through():
    """A server that accepts the connection but answers /models slowly is reachable (only a failure
    to connect is refused), and ping waits no longer than the backend's own timeout."""
    import http.server
    import threading

    from shopping_companion.llm.openai_backend import OpenAIBackend

    class Slow(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            time.sleep(1.5)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b'{"object": "list", "data": []}')

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}/v1"
        OpenAIBackend("m", base_url=url, api_key="k", timeout_s=5).ping(
            connect_timeout_s=1
        )  # slower than connect: fine
        OpenAIBackend("m", base_url=url, api_key="k", timeout_s=0.5).ping(
            connect_timeout_s=1
        )  # read timeout: a warning
    finally:
        srv.shutdown()


def test_ping_refuses_a_base_url_without_http_scheme_or_host():
    from shopping_companion.llm.base import BackendError
    from shopping_companion.llm.openai_backend import OpenAIBackend

    for url in ("127.0.0.1:8000/v1", "ftp://127.0.0.1:8000/v1", "http:///v1"):
        with pytest.raises(BackendError, match="http:// or https://"):
            OpenAIBackend("m", base_url=url, api_key="k").ping()


def test_for_role_names_the_role_and_sends_no_top_k() -> None:
    b = OpenAIBackend.for_role("judge", "m1", base_url="http://127.0.0.1:9/v1", timeout_s=7, max_retries=1)
    with b:
        assert (b.name, b.model, b.send_top_k, b.timeout_s, b.max_retries) == ("judge:m1", "m1", False, 7.0, 1)
        assert "top_k" not in json.dumps(b._request_kwargs([{"role": "user", "content": "x"}], None, Sampling(top_k=5)))
