"""OpenAI-compatible chat backend (vLLM, SGLang, OpenAI or any compatible provider). docs/architecture.md, backends.

:class:`OpenAIBackend` implements :class:`~shopping_companion.llm.base.ChatBackend` on top of the
official ``openai`` client (``chat.completions``):

* **Requests.** ``messages`` (OpenAI-style dicts, as the environment produces them: system / user /
  assistant with optional ``tool_calls`` / tool with ``tool_call_id``) are sent unchanged;
  ``tools`` (OpenAI function schemas) are sent when non-empty. Sampling maps to ``temperature``,
  ``top_p``, ``max_tokens`` and ``seed`` (only when set); ``top_k`` is not an OpenAI parameter, so it
  travels in ``extra_body`` (vLLM / SGLang read it from there), together with any ``extra_body``
  given to the constructor (e.g. ``{"chat_template_kwargs": {"enable_thinking": False}}``).
* **Responses.** ``content`` (``None`` becomes ``""``; text is kept verbatim, including any
  ``<think>`` / ``<tool_call>`` / ``<answer>`` blocks), separate reasoning text
  (``reasoning_content`` or ``reasoning``, as vLLM reasoning parsers return it), structured
  ``tool_calls`` (arguments kept as the raw string the server sent; ids as sent, ``""`` when
  missing: :func:`~shopping_companion.envs.parsing.parse_action` gives every call of a turn its
  unique id), usage tokens, latency of the successful attempt, and ``finish_reason``.
* **Time.** Two wall-clock limits, both *total* (connect, sending, waiting and reading, however
  slowly the server trickles bytes), not per-read timeouts: ``timeout_s`` bounds one attempt and
  ``deadline_s`` bounds the whole call (every attempt and every backoff sleep; default
  ``min(600, (max_retries + 1) * timeout_s)``, never below ``timeout_s``). Each attempt runs in a
  worker thread the caller waits on for at most the time left; when it is up the attempt's socket
  is shut down (so the worker ends too) and the attempt counts as a timeout. A backoff never sleeps
  past the deadline.
* **Retries.** The client's built-in retries are switched off (``max_retries=0``) and this class
  retries itself, so the policy is explicit and counts are exact: timeouts, connection errors,
  HTTP 408/409/429/5xx, and unparseable bodies (invalid JSON, no choices, an error object in a
  200) are retried up to ``max_retries`` times with exponential backoff
  (``backoff_s * 2**k``, capped at ``max_backoff_s``, plus up to ``backoff_jitter`` relative jitter;
  a ``Retry-After`` header on a 429/503 is honoured up to ``max_backoff_s``), while the deadline
  allows. Other HTTP errors (401 bad key, 404 unknown model, ...) fail at once; an HTTP 400/413/422
  saying the prompt exceeds the model's context (vLLM, OpenAI, SGLang, TGI, llama.cpp, Anthropic
  wordings) raises :class:`~shopping_companion.llm.base.ContextLengthError` (not retried). Either
  way the caller gets a :class:`~shopping_companion.llm.base.BackendError` (it carries ``attempts``
  and ``status_code`` attributes).
* **Circuit breaker.** Connection failures and timeouts are counted per endpoint across the whole
  process (:mod:`shopping_companion.llm.breaker`, shared by every backend and thread using that
  endpoint); any HTTP answer resets the count. ``breaker_threshold`` (default 5) consecutive ones
  open it: that call, calls sleeping in a backoff and every later call raise
  :class:`~shopping_companion.llm.base.CircuitOpenError` at once (the run stops).
* **Secrets.** Every message, error and log line this class writes is scrubbed: the key itself,
  any run of 8 or more of its characters that a server echoes back (a prefix in "Incorrect API key
  provided: sk-abc123...", a suffix, a middle part) and any ``Bearer`` token.
* **Keys.** ``api_key`` if given, else the environment variable ``api_key_env``, else the placeholder
  ``"EMPTY"`` (a local vLLM server without ``--api-key`` accepts anything). The key is never shown in
  ``repr()``.

``OpenAIBackend.from_env()`` builds one from ``SHOPCOMP_MODEL`` / ``SHOPCOMP_BASE_URL`` /
``SHOPCOMP_API_KEY_ENV`` (plus optional ``SHOPCOMP_TIMEOUT_S`` / ``SHOPCOMP_DEADLINE_S`` /
``SHOPCOMP_MAX_RETRIES`` / ``SHOPCOMP_BREAKER_THRESHOLD``), and
:class:`OpenAIBackendConfig` is the same settings as a validated config object (for YAML files).
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from shopping_companion.errors import ConfigError
from shopping_companion.llm.base import (
    AssistantMessage,
    BackendError,
    CircuitOpenError,
    ContextLengthError,
    Messages,
    Sampling,
    StructuredToolCall,
    ToolSchemas,
)
from shopping_companion.llm.bounded import CallTimeout, call_within
from shopping_companion.llm.breaker import (
    DEFAULT_BREAKER_THRESHOLD,
    ENV_BREAKER_THRESHOLD,
    CircuitBreaker,
    breaker_for,
    positive_int,
    positive_seconds,
)
from shopping_companion.resources import Closeable
from shopping_companion.retry import Attempts, Backoff, default_deadline_s, is_retryable_status
from shopping_companion.retry import RETRYABLE_4XX as RETRYABLE_STATUS
from shopping_companion.retry import retry_after_s as _retry_after_header

if TYPE_CHECKING:  # the openai package is imported lazily (it is slow to import)
    from openai import OpenAI

log = logging.getLogger(__name__)

PLACEHOLDER_API_KEY = "EMPTY"
DEFAULT_API_KEY_ENV = "OPENAI_API_KEY"

ENV_MODEL = "SHOPCOMP_MODEL"
ENV_BASE_URL = "SHOPCOMP_BASE_URL"
ENV_API_KEY_ENV = "SHOPCOMP_API_KEY_ENV"
ENV_TIMEOUT_S = "SHOPCOMP_TIMEOUT_S"
ENV_MAX_RETRIES = "SHOPCOMP_MAX_RETRIES"
ENV_DEADLINE_S = "SHOPCOMP_DEADLINE_S"

#: Shortest key run (characters) scrubbed when a server echoes part of the key.
MIN_SECRET_RUN = 8

_MAX_ERROR_CHARS = 500
_BEARER_RE = re.compile(r"(?i)(bearer\s+)[^\s'\",}]+")


class _Unparseable(Exception):
    """The server answered 2xx but the body is not a usable chat completion."""


class _AttemptTimeout(Exception):
    """One attempt used up its wall-clock budget (our own watchdog, not a per-read timeout)."""


#: Wordings of "the prompt does not fit the context window" (lower-cased substrings / patterns):
#: vLLM ("This model's maximum context length is 4096 tokens. However, you requested ..."),
#: OpenAI (code ``context_length_exceeded``), SGLang ("The input (5000 tokens) is longer than the
#: model's context length (4096 tokens)", "Requested token count exceeds the model's maximum
#: context length"), TGI ("`inputs` tokens + `max_new_tokens` must be <= 4096", "`inputs` must
#: have less than 4096 tokens"), llama.cpp ("exceeds the available context size",
#: ``exceed_context_size_error``), Anthropic ("prompt is too long").
_CONTEXT_LENGTH_RE = re.compile(
    r"maximum context length|context_length_exceeded|context length exceeded|prompt is too long"
    r"|longer than the model'?s context length|exceeds? the model'?s (?:maximum )?context"
    r"|`inputs` tokens \+ `max_new_tokens` must be|`inputs` must have less than \d+ tokens"
    r"|exceeds? the available context size|exceed_context_size|input is too long|too many input tokens"
    r"|reduce the length of the (?:messages|prompt)",
    re.IGNORECASE,
)
_CONTEXT_LENGTH_STATUS = frozenset({400, 413, 422})


def is_context_length_error(status: int | None, text: str) -> bool:
    """True when an HTTP ``status`` (400, 413 or 422) with body / message ``text`` says the
    prompt exceeds the model's context window (see ``_CONTEXT_LENGTH_RE`` for the wordings)."""
    return status in _CONTEXT_LENGTH_STATUS and bool(_CONTEXT_LENGTH_RE.search(text or ""))


def _endpoint_of(url: str) -> str:
    """``url`` without user info, query or fragment (what breaker messages name)."""
    from urllib.parse import urlsplit, urlunsplit

    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        if parts.port:
            host = f"{host}:{parts.port}"
        return urlunsplit((parts.scheme, host, parts.path.rstrip("/"), "", ""))
    except ValueError:
        return "<unparseable base_url>"


class _Attempt:
    """Sockets one attempt uses, so the watchdog can shut them down when its time is up."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sockets: list[Any] = []
        self.aborted = False

    def add(self, sock: Any) -> None:
        if sock is None:
            return
        with self._lock:
            self._sockets.append(sock)
            aborted = self.aborted
        if aborted:
            _shutdown(sock)

    def abort(self) -> None:
        with self._lock:
            self.aborted = True
            socks = list(self._sockets)
        for sock in socks:
            _shutdown(sock)


def _shutdown(sock: Any) -> None:
    import socket

    try:
        sock.shutdown(socket.SHUT_RDWR)  # wakes a recv() blocked in the worker thread
    except OSError:
        pass


_current = threading.local()  # .attempt: the _Attempt the worker thread is running


def _trace(event: str, info: dict[str, Any]) -> None:
    """httpcore trace hook: register a freshly connected socket with the running attempt."""
    attempt = getattr(_current, "attempt", None)
    if attempt is None or not event.endswith("connect_tcp.complete"):
        return
    stream = info.get("return_value")
    get = getattr(stream, "get_extra_info", None)
    if get is not None:
        attempt.add(get("socket"))


def _on_request(request: Any) -> None:
    if getattr(_current, "attempt", None) is not None:
        request.extensions["trace"] = _trace


def _on_response(response: Any) -> None:
    """Register the socket of a reused keep-alive connection (headers are in, body is not)."""
    attempt = getattr(_current, "attempt", None)
    stream = response.extensions.get("network_stream") if attempt is not None else None
    get = getattr(stream, "get_extra_info", None)
    if get is not None:
        attempt.add(get("socket"))


def is_endpoint_url(url: str) -> bool:
    """Whether ``url`` can be an OpenAI-compatible endpoint's base URL: ``http://`` or
    ``https://`` with a host (the one rule behind :meth:`OpenAIBackend.ping` and the configs'
    ``base_url`` fields)."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return parts.scheme in ("http", "https") and bool(parts.hostname)


class OpenAIBackend(Closeable):
    """A :class:`~shopping_companion.llm.base.ChatBackend` for any OpenAI-compatible server.

    Args:
        model: model name the server knows (for vLLM: the ``--served-model-name``).
        base_url: server URL ending in ``/v1`` (e.g. ``http://localhost:8000/v1``); ``None`` lets the
            client use ``OPENAI_BASE_URL`` or OpenAI's own endpoint.
        api_key_env: environment variable the key is read from when ``api_key`` is not given.
        api_key: the key itself (takes precedence). Neither set: the placeholder ``"EMPTY"``.
        timeout_s: wall-clock limit of one attempt, in seconds (> 0; connect + send + the whole
            response, not a per-read timeout).
        max_retries: retries after the first attempt (so ``max_retries + 1`` attempts at most).
        deadline_s: wall-clock limit of one :meth:`chat` call over all attempts and backoffs, in
            seconds (> 0). ``None``: ``min(600, (max_retries + 1) * timeout_s)``, at least
            ``timeout_s``.
        breaker_threshold: consecutive connection failures / timeouts of this endpoint (across all
            backends of the process) that open its circuit breaker (>= 1; default 5).
        breaker: a :class:`~shopping_companion.llm.breaker.CircuitBreaker` to use instead of the
            endpoint's shared one (e.g. to isolate a probe).
        extra_body: extra JSON fields sent with every request (vLLM / SGLang extensions).
        name: policy name for reports; defaults to ``openai:<model>``.
        backoff_s: delay before the first retry; it doubles on each further retry.
        max_backoff_s: cap on any single retry delay (also caps an honoured ``Retry-After``).
        backoff_jitter: each delay is multiplied by ``1 + U(0, backoff_jitter)``.
        send_top_k: send ``Sampling.top_k`` in ``extra_body`` (turn off for OpenAI's own API,
            which rejects unknown parameters).
        max_tokens_param: request field for ``Sampling.max_tokens`` (``"max_tokens"``, or
            ``"max_completion_tokens"`` for OpenAI reasoning models).
        tool_choice: sent as ``tool_choice`` when tools are given (``None``: not sent, the
            server's default applies).
        default_headers: extra HTTP headers on every request.

    Raises:
        ConfigError: a bad setting, naming the field and the allowed values (``timeout_s=None`` too).
    """

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key_env: str = DEFAULT_API_KEY_ENV,
        api_key: str | None = None,
        timeout_s: float = 120,
        max_retries: int = 3,
        extra_body: Mapping[str, Any] | None = None,
        name: str | None = None,
        *,
        backoff_s: float = 1.0,
        max_backoff_s: float = 30.0,
        backoff_jitter: float = 0.1,
        send_top_k: bool = True,
        max_tokens_param: str = "max_tokens",
        tool_choice: str | dict[str, Any] | None = None,
        default_headers: Mapping[str, str] | None = None,
        deadline_s: float | None = None,
        breaker_threshold: int = DEFAULT_BREAKER_THRESHOLD,
        breaker: CircuitBreaker | None = None,
    ) -> None:
        if not model:
            raise ConfigError("model: must be a non-empty model name")
        timeout_s = positive_seconds("timeout_s", timeout_s)
        deadline_s = positive_seconds("deadline_s", deadline_s, allow_none=True)
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise ConfigError(f"max_retries: must be an integer >= 0, got {max_retries!r}")
        breaker_threshold = positive_int("breaker_threshold", breaker_threshold)
        for field, value in (
            ("backoff_s", backoff_s),
            ("max_backoff_s", max_backoff_s),
            ("backoff_jitter", backoff_jitter),
        ):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise ConfigError(f"{field}: must be a number >= 0, got {value!r}")
        if max_tokens_param not in ("max_tokens", "max_completion_tokens"):
            raise ConfigError(
                f"max_tokens_param: must be 'max_tokens' or 'max_completion_tokens', got {max_tokens_param!r}"
            )
        self.model = model
        self.base_url = base_url
        self.api_key_env = api_key_env
        self.timeout_s = float(timeout_s)
        self.max_retries = int(max_retries)
        if deadline_s is None:
            deadline_s = default_deadline_s(self.timeout_s, self.max_retries)
        self.deadline_s = float(deadline_s)
        self.breaker_threshold = breaker_threshold
        self.extra_body: dict[str, Any] = dict(extra_body or {})
        self.name = name or f"openai:{model}"
        self.backoff_s = float(backoff_s)
        self.max_backoff_s = float(max_backoff_s)
        self.backoff_jitter = float(backoff_jitter)
        self.send_top_k = send_top_k
        self.max_tokens_param = max_tokens_param
        self.tool_choice = tool_choice

        key = api_key if api_key else os.environ.get(api_key_env) if api_key_env else None
        self._key_source = "argument" if api_key else ("env" if key else "placeholder")
        key = key or PLACEHOLDER_API_KEY
        # Kept only to scrub it out of error messages.
        self._secrets = tuple(s for s in {key} if s and s != PLACEHOLDER_API_KEY)
        self._secret_grams = frozenset(
            s[i : i + MIN_SECRET_RUN] for s in self._secrets for i in range(len(s) - MIN_SECRET_RUN + 1)
        )

        import openai

        self._client: OpenAI = openai.OpenAI(
            api_key=key,
            base_url=base_url,
            timeout=self.timeout_s,
            max_retries=0,  # retries are ours (see chat())
            default_headers=dict(default_headers) if default_headers else None,
            # the hooks hand each attempt's sockets to its watchdog (see _bounded)
            http_client=openai.DefaultHttpxClient(event_hooks={"request": [_on_request], "response": [_on_response]}),
        )
        self.endpoint = self._scrub(_endpoint_of(str(self._client.base_url)))
        self._breaker = breaker if breaker is not None else breaker_for(self.endpoint, breaker_threshold)
        self._retry_backoff = Backoff(self.backoff_s, self.max_backoff_s, self.backoff_jitter)

    @property
    def breaker(self) -> CircuitBreaker:
        """The circuit breaker this backend reports to (shared per endpoint by default)."""
        return self._breaker

    # ------------------------------------------------------------------ construction helpers
    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> OpenAIBackend:
        """Build a backend from ``SHOPCOMP_*`` environment variables; ``overrides`` win.

        ``SHOPCOMP_MODEL`` (required unless ``model=`` is passed), ``SHOPCOMP_BASE_URL``,
        ``SHOPCOMP_API_KEY_ENV`` (name of the variable holding the key; default
        ``OPENAI_API_KEY``), ``SHOPCOMP_TIMEOUT_S``, ``SHOPCOMP_MAX_RETRIES``.
        """
        fields = OpenAIBackendConfig.model_fields
        config = OpenAIBackendConfig.from_env(env, **{k: v for k, v in overrides.items() if k in fields})
        return config.build(**{k: v for k, v in overrides.items() if k not in fields})

    @classmethod
    def for_role(cls, role: str, model: str, **settings: Any) -> OpenAIBackend:
        """A backend that serves a helper of the agent (``role``: ``judge``, ``extract``, ``synth``,
        ...), not the policy: named ``<role>:<model>`` in records and errors, and sending no
        ``top_k`` (the helper's sampling is its own); ``settings``: the constructor's other keyword
        arguments (``base_url``, ``api_key_env``, ``timeout_s``, ...)."""
        return cls(model, send_top_k=False, name=f"{role}:{model}", **settings)

    def close(self) -> None:
        """Close the underlying HTTP connection pool."""
        self._client.close()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(name={self.name!r}, model={self.model!r}, "
            f"base_url={self.base_url!r}, api_key_env={self.api_key_env!r}, "
            f"api_key=<{self._key_source}>, timeout_s={self.timeout_s}, deadline_s={self.deadline_s}, "
            f"max_retries={self.max_retries})"
        )

    def ping(self, connect_timeout_s: float = 10.0) -> None:
        """Check that the server can be reached at all, before a long run depends on it: one
        ``GET {base_url}/models`` without retries. Only a failure to connect — refused, unknown
        host, no TCP connection within ``connect_timeout_s`` seconds — raises
        :class:`BackendError` naming the endpoint (instead of minutes of per-request retries
        later). Any HTTP answer (also 401, 404, 500), a slow answer (read timeout ``timeout_s``) or
        a connection the server closes counts as reachable. Nothing is sent when ``base_url`` is
        None (the provider's default endpoint).
        """
        import openai

        if not self.base_url:
            return
        url = self._scrub(str(self.base_url))
        if not is_endpoint_url(str(self.base_url)):
            raise self._error(
                f"{self.name}: base_url {url!r} is not an http:// or https:// URL with a host "
                "(e.g. http://localhost:8000/v1)",
                1,
                None,
            )
        timeout = openai.Timeout(self.timeout_s, connect=connect_timeout_s)
        client = self._client.with_options(timeout=timeout, max_retries=0)
        try:
            self._bounded(client.models.list, self.timeout_s + connect_timeout_s)
        except _AttemptTimeout:
            log.warning(
                "%s: %s did not answer GET /models within %gs; going on",
                self.name,
                url,
                self.timeout_s + connect_timeout_s,
            )
        except openai.APIConnectionError as exc:  # includes APITimeoutError
            cause = exc.__cause__ or exc.__context__
            # the HTTP library's ConnectError / ConnectTimeout (matched by name: openai 1.x uses
            # httpx, later versions another package with the same exception names)
            if cause is not None and type(cause).__name__ in (
                "ConnectError",
                "ConnectTimeout",
                "UnsupportedProtocol",
                "InvalidURL",
            ):
                detail = self._scrub(str(cause)) or type(cause).__name__
                raise self._error(
                    f"{self.name}: cannot reach {url}: {type(cause).__name__}: {detail} "
                    "(is a server listening there, with that scheme?)",
                    1,
                    None,
                ) from None
            log.warning("%s: %s answered GET /models oddly (%s); going on", self.name, url, self._describe(exc))
        except Exception:  # noqa: BLE001 - an HTTP error or an answer we cannot parse: the server is there
            return

    # ------------------------------------------------------------------ the protocol
    def chat(
        self, messages: Messages, tools: ToolSchemas | None = None, sampling: Sampling | None = None
    ) -> AssistantMessage:
        """One assistant turn, within ``deadline_s`` seconds of wall clock (each attempt within
        ``timeout_s``).

        Raises:
            ContextLengthError: the server said the prompt exceeds the model's context (not retried).
            BackendError: retries or the deadline exhausted, or a non-retryable HTTP error.
            CircuitOpenError: this endpoint's circuit breaker is (or just became) open.
        """
        import openai

        self._breaker.check()
        kwargs = self._request_kwargs(messages, tools, sampling or Sampling())
        attempts = Attempts(self.max_retries, self._retry_backoff, self.deadline_s, sleep=self._breaker.sleep)
        last_error = "no attempt made"
        last_status: int | None = None
        for attempt in attempts:
            budget = attempts.budget(self.timeout_s)
            retry_after: float | None = None
            down = False  # a connection failure or timeout: counts towards the breaker
            start = time.perf_counter()
            try:
                text = self._bounded(
                    lambda: (
                        self._client.chat.completions.with_raw_response.create(
                            **kwargs, timeout=budget
                        ).http_response.text
                    ),
                    budget,
                )
                latency = time.perf_counter() - start
                self._breaker.record_success()
                return self._parse(text, latency)
            except (_AttemptTimeout, openai.APITimeoutError):
                last_status = None
                last_error = f"timed out after {round(budget, 2):g}s"
                down = True
            except openai.APIConnectionError as exc:
                last_status = None
                last_error = f"connection error: {self._describe(exc)}"
                down = True
            except openai.APIStatusError as exc:
                self._breaker.record_success()
                last_status = exc.status_code
                detail = self._describe(exc)
                last_error = f"HTTP {exc.status_code}: {detail}"
                if is_context_length_error(exc.status_code, f"{detail} {self._body_text(exc)}"):
                    raise self._error(
                        f"{self.name}: prompt exceeds the model's context ({last_error}); not retried",
                        attempts.made,
                        last_status,
                        ContextLengthError,
                    ) from None
                if not is_retryable_status(exc.status_code):
                    raise self._error(
                        f"{self.name}: request rejected ({last_error}); not retried", attempts.made, last_status
                    ) from None
                retry_after = _retry_after_s(exc)
            except _Unparseable as exc:
                self._breaker.record_success()
                last_status = None
                last_error = f"unparseable response: {self._scrub(str(exc))}"
            except openai.OpenAIError as exc:  # anything else from the client: not retryable
                raise self._error(
                    f"{self.name}: client error {type(exc).__name__}: {self._describe(exc)}", attempts.made, None
                ) from None
            if down:  # outside the except blocks: a CircuitOpenError carries no client exception
                self._breaker.record_failure(last_error)
            delay = attempts.next_delay(retry_after)
            if delay is None:
                if attempts.stop == "backoff":
                    last_error += f"; no time left for a retry in {attempts.delay:.2f}s"
                break
            log.warning(
                "%s: attempt %d/%d failed (%s); retrying in %.2fs",
                self.name,
                attempt + 1,
                self.max_retries + 1,
                last_error,
                delay,
            )
            attempts.wait(delay)
        elapsed = time.monotonic() - attempts.started
        raise self._error(
            f"{self.name}: failed after {attempts.made} attempt(s) in {elapsed:.1f}s (timeout_s={self.timeout_s:g}, "
            f"deadline_s={self.deadline_s:g}); last error: {last_error}",
            attempts.made,
            last_status,
        )

    def _bounded(self, fn: Any, budget: float) -> Any:
        """``fn()`` run in a worker thread (:func:`~shopping_companion.llm.bounded.call_within`);
        returns its result or re-raises its exception here, or raises :class:`_AttemptTimeout`
        after ``budget`` seconds of wall clock, shutting down the sockets the attempt opened or
        reused so the worker ends too."""
        attempt = _Attempt()

        def work() -> Any:
            _current.attempt = attempt
            try:
                return fn()
            finally:
                _current.attempt = None

        try:
            return call_within(work, budget, name=f"{self.name}-attempt")
        except CallTimeout:
            attempt.abort()
            raise _AttemptTimeout(f"no complete answer within {budget:g}s") from None

    # ------------------------------------------------------------------ internals
    def _request_kwargs(self, messages: Messages, tools: ToolSchemas | None, sampling: Sampling) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": list(messages),
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            self.max_tokens_param: sampling.max_tokens,
        }
        if sampling.seed is not None:
            kwargs["seed"] = sampling.seed
        if tools:
            kwargs["tools"] = list(tools)
            if self.tool_choice is not None:
                kwargs["tool_choice"] = self.tool_choice
        extra = dict(self.extra_body)
        if self.send_top_k and sampling.top_k is not None:
            extra["top_k"] = sampling.top_k
        if extra:
            kwargs["extra_body"] = extra
        return kwargs

    def _parse(self, text: str, latency: float) -> AssistantMessage:
        try:
            body = json.loads(text)
        except (ValueError, RecursionError):  # RecursionError: a body nested deeper than Python's limit
            raise _Unparseable(f"body is not JSON (or nested too deep): {self._scrub(text[:200])!r}") from None
        if not isinstance(body, dict):
            raise _Unparseable(f"body is not a JSON object: {text[:200]!r}")
        if body.get("error") and not body.get("choices"):
            raise _Unparseable(f"error object in a 2xx response: {str(body['error'])[:300]}")
        choices = body.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise _Unparseable("no choices in response")
        choice = choices[0]
        message = choice.get("message")
        if not isinstance(message, dict):
            raise _Unparseable("choices[0] has no message")

        content = _text_of(message.get("content"))
        reasoning = message.get("reasoning_content")
        if not reasoning:
            reasoning = message.get("reasoning")
        reasoning = _text_of(reasoning) or None

        calls: list[StructuredToolCall] = []
        raw_calls = message.get("tool_calls") or []
        if not isinstance(raw_calls, list):
            raise _Unparseable("tool_calls is not a list")
        for i, call in enumerate(raw_calls):
            if not isinstance(call, dict):
                raise _Unparseable(f"tool_calls[{i}] is not an object")
            fn = call.get("function") or {}
            if not isinstance(fn, dict):
                raise _Unparseable(f"tool_calls[{i}].function is not an object")
            args = fn.get("arguments")
            if args is None:
                args = "{}"
            elif not isinstance(args, str):  # some servers send an already-decoded object
                args = json.dumps(args, ensure_ascii=False)
            calls.append(
                StructuredToolCall(id=str(call.get("id") or ""), name=str(fn.get("name") or ""), arguments=args)
            )

        usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
        finish = choice.get("finish_reason")
        if self._secret_grams:
            calls = [
                c.model_copy(update={"name": self._scrub_reply(c.name), "arguments": self._scrub_reply(c.arguments)})
                for c in calls
            ]
        return AssistantMessage(
            content=self._scrub_reply(content) or "",
            reasoning=self._scrub_reply(reasoning),
            tool_calls=calls,
            prompt_tokens=_token_count(usage.get("prompt_tokens")),
            completion_tokens=_token_count(usage.get("completion_tokens")),
            latency_s=latency,
            finish_reason=finish[:64] if isinstance(finish, str) else None,
        )

    def _scrub(self, text: str, limit: int | None = _MAX_ERROR_CHARS) -> str:
        """``text`` without the key, any run of >= 8 of its characters (an echoed prefix, suffix or
        middle part), or any bearer token; cut to ``limit`` characters (500; None: not cut)."""
        for secret in self._secrets:
            text = text.replace(secret, "***")
        if (
            self._secret_grams and len(text) >= MIN_SECRET_RUN and any(g in text for g in self._secret_grams)
        ):  # fast C scans before the slow pass
            n = MIN_SECRET_RUN
            hit = [False] * len(text)
            for i in range(len(text) - n + 1):
                if text[i : i + n] in self._secret_grams:
                    hit[i : i + n] = [True] * n
            if any(hit):
                out: list[str] = []
                for i, ch in enumerate(text):
                    if not hit[i]:
                        out.append(ch)
                    elif i == 0 or not hit[i - 1]:
                        out.append("***")
                text = "".join(out)
        text = _BEARER_RE.sub(r"\1***", text)
        if limit is not None and len(text) > limit:
            text = text[:limit] + "..."
        return text

    def _scrub_reply(self, text: str | None) -> str | None:
        """Model text of a reply with the key scrubbed like an error (a server that echoes the
        request's key into the content must not get it written to results), not cut. Keys shorter
        than 8 characters (local placeholders such as ``"k"``) are left alone here: replacing every
        occurrence of them would destroy the model's text."""
        if not text or not self._secret_grams:
            return text
        return self._scrub(text, limit=None)

    def _describe(self, exc: BaseException) -> str:
        message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
        body = getattr(exc, "body", None)
        if isinstance(body, dict):
            inner = body.get("error", body)
            if isinstance(inner, dict) and inner.get("message"):
                message = str(inner["message"])
        return self._scrub(str(message))

    @staticmethod
    def _body_text(exc: BaseException) -> str:
        """The raw error body / code of an HTTP error (to recognise context-length refusals)."""
        body = getattr(exc, "body", None)
        if body is None:
            return ""
        try:
            return json.dumps(body) if not isinstance(body, str) else body
        except (TypeError, ValueError):
            return str(body)

    def _error(
        self, message: str, attempts: int, status: int | None, kind: type[BackendError] = BackendError
    ) -> BackendError:
        err = kind(self._scrub(message))
        err.attempts = attempts  # type: ignore[attr-defined]
        err.status_code = status  # type: ignore[attr-defined]
        return err


def _text_of(value: Any) -> str:
    """Content as text: ``None`` → ``""``; a list of parts → their text joined."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        parts = []
        for part in value:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return "".join(parts)
    return str(value)


#: Largest token count a reply's ``usage`` may report (above it, or negative, or not a finite
#: number, the count is unknown: None). No model has a context anywhere near this.
MAX_TOKEN_COUNT = 100_000_000


def _token_count(value: Any) -> int | None:
    """A ``usage`` token count as a non-negative int <= :data:`MAX_TOKEN_COUNT`, else None (a server
    sending ``-5``, ``1e308``, ``NaN`` or ``"x"`` must not put absurd numbers into the results)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if not 0 <= value <= MAX_TOKEN_COUNT:
        return None
    return int(value)


def _retry_after_s(exc: Any) -> float | None:
    """Seconds from a ``Retry-After``/``retry-after-ms`` header of a 429/503, if numeric."""
    response = getattr(exc, "response", None)
    if response is None or getattr(exc, "status_code", None) not in (429, 503):
        return None
    return _retry_after_header(response.headers)


class OpenAIBackendConfig(BaseModel):
    """Settings of an :class:`OpenAIBackend` (for config files); :meth:`build` makes the backend.

    ``timeout_s`` (one attempt) and ``deadline_s`` (the whole call, ``None``: derived) are wall-clock
    seconds > 0; a missing, non-numeric or non-positive value raises :class:`ConfigError` naming
    the field (not a pydantic or type error).
    """

    model_config = ConfigDict(extra="forbid")
    model: str = Field(min_length=1)
    base_url: str | None = None
    api_key_env: str = DEFAULT_API_KEY_ENV
    timeout_s: float = Field(default=120, gt=0)
    deadline_s: float | None = Field(default=None, gt=0)
    max_retries: int = Field(default=3, ge=0)
    breaker_threshold: int = Field(default=DEFAULT_BREAKER_THRESHOLD, ge=1)
    extra_body: dict[str, Any] = Field(default_factory=dict)
    name: str | None = None
    backoff_s: float = Field(default=1.0, ge=0)
    max_backoff_s: float = Field(default=30.0, ge=0)
    send_top_k: bool = True
    max_tokens_param: str = "max_tokens"
    tool_choice: str | dict[str, Any] | None = None

    def __init__(self, **values: Any) -> None:
        # checked before pydantic so the caller gets a ConfigError naming the field, not a
        # ValidationError about NoneType (numeric strings from YAML/env are still accepted)
        for key, check in (
            ("timeout_s", positive_seconds),
            ("deadline_s", positive_seconds),
            ("breaker_threshold", positive_int),
        ):
            if key not in values:
                continue
            value = values[key]
            if isinstance(value, str):
                try:
                    value = int(value) if key == "breaker_threshold" else float(value)
                except ValueError:
                    raise ConfigError(f"{key}: must be a number, got {values[key]!r}") from None
            if key == "deadline_s" and value is None:
                continue
            check(key, value)
        super().__init__(**values)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> OpenAIBackendConfig:
        """Read ``SHOPCOMP_MODEL`` (required unless ``model=`` is given), ``SHOPCOMP_BASE_URL``,
        ``SHOPCOMP_API_KEY_ENV``, ``SHOPCOMP_TIMEOUT_S``, ``SHOPCOMP_DEADLINE_S`` (seconds > 0),
        ``SHOPCOMP_MAX_RETRIES`` and ``SHOPCOMP_BREAKER_THRESHOLD`` (``env`` defaults to
        ``os.environ``); keyword ``overrides`` win over the environment. Raises
        :class:`ConfigError` naming the variable for a value that is not a number or out of range."""
        env = os.environ if env is None else env
        model = overrides.get("model") or env.get(ENV_MODEL, "").strip()
        if not model:
            raise ConfigError(f"{ENV_MODEL}: not set; name the served model (e.g. Qwen/Qwen3-8B)")
        values: dict[str, Any] = {"model": model}
        if env.get(ENV_BASE_URL, "").strip():
            values["base_url"] = env[ENV_BASE_URL].strip()
        if env.get(ENV_API_KEY_ENV, "").strip():
            values["api_key_env"] = env[ENV_API_KEY_ENV].strip()
        for var, key, conv in (
            (ENV_TIMEOUT_S, "timeout_s", float),
            (ENV_DEADLINE_S, "deadline_s", float),
            (ENV_MAX_RETRIES, "max_retries", int),
            (ENV_BREAKER_THRESHOLD, "breaker_threshold", int),
        ):
            raw = env.get(var, "").strip()
            if raw:
                try:
                    values[key] = conv(raw)
                except ValueError:
                    raise ConfigError(f"{var}: expected a number, got {raw!r}") from None
                try:
                    check = (
                        positive_seconds if conv is float else (positive_int if key == "breaker_threshold" else None)
                    )
                    if check is not None:
                        check(key, values[key])
                except ConfigError as e:
                    raise ConfigError(f"{var}: {e}") from None
        values.update(overrides)
        return cls(**values)

    def build(self, **kwargs: Any) -> OpenAIBackend:
        """Make the backend; ``kwargs`` (e.g. ``api_key=``, ``default_headers=``) are passed on."""
        return OpenAIBackend(**self.model_dump(), **kwargs)


def backend_from_env(env: Mapping[str, str] | None = None, **overrides: Any) -> OpenAIBackend:
    """Shorthand for :meth:`OpenAIBackend.from_env`."""
    return OpenAIBackend.from_env(env, **overrides)


__all__ = [
    "CircuitOpenError",
    "ContextLengthError",
    "OpenAIBackend",
    "OpenAIBackendConfig",
    "PLACEHOLDER_API_KEY",
    "RETRYABLE_STATUS",
    "backend_from_env",
    "is_context_length_error",
]
