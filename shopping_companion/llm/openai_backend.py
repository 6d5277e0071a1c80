"""OpenAI-compatible chat backend (vLLM, SGLang, OpenAI or any compatible provider). DESIGN.md §9.

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
  ``tool_calls`` (arguments kept as the raw string the server sent), usage tokens, latency of the
  successful attempt, and ``finish_reason``.
* **Retries.** The client's built-in retries are switched off (``max_retries=0``) and this class
  retries itself, so the policy is explicit and counts are exact: timeouts, connection errors,
  HTTP 408/409/429/5xx, and unparseable bodies (invalid JSON, no choices, an error object in a
  200) are retried up to ``max_retries`` times with exponential backoff
  (``backoff_s * 2**k``, capped at ``max_backoff_s``, plus up to ``backoff_jitter`` relative jitter;
  a ``Retry-After`` header on a 429/503 is honoured up to ``max_backoff_s``). Other HTTP errors
  (400 context too long, 401 bad key, 404 unknown model, ...) fail at once. Either way the caller
  gets :class:`~shopping_companion.llm.base.BackendError`, whose message never contains the API key
  (it carries ``attempts`` and ``status_code`` attributes).
* **Keys.** ``api_key`` if given, else the environment variable ``api_key_env``, else the placeholder
  ``"EMPTY"`` (a local vLLM server without ``--api-key`` accepts anything). The key is never shown in
  ``repr()``.

``OpenAIBackend.from_env()`` builds one from ``SHOPCOMP_MODEL`` / ``SHOPCOMP_BASE_URL`` /
``SHOPCOMP_API_KEY_ENV`` (plus optional ``SHOPCOMP_TIMEOUT_S`` / ``SHOPCOMP_MAX_RETRIES``), and
:class:`OpenAIBackendConfig` is the same settings as a validated config object (for YAML files).
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from shopping_companion.errors import ConfigError
from shopping_companion.llm.base import AssistantMessage, BackendError, Sampling, StructuredToolCall

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

#: HTTP statuses worth retrying (request timeout, conflict/lock, rate limit, server errors).
RETRYABLE_STATUS = frozenset({408, 409, 429})
_MAX_ERROR_CHARS = 500
_BEARER_RE = re.compile(r"(?i)(bearer\s+)[^\s'\",}]+")


class _Unparseable(Exception):
    """The server answered 2xx but the body is not a usable chat completion."""


def _is_retryable_status(status: int) -> bool:
    return status in RETRYABLE_STATUS or status >= 500


class OpenAIBackend:
    """A :class:`~shopping_companion.llm.base.ChatBackend` for any OpenAI-compatible server.

    Args:
        model: model name the server knows (for vLLM: the ``--served-model-name``).
        base_url: server URL ending in ``/v1`` (e.g. ``http://localhost:8000/v1``); ``None`` lets the
            client use ``OPENAI_BASE_URL`` or OpenAI's own endpoint.
        api_key_env: environment variable the key is read from when ``api_key`` is not given.
        api_key: the key itself (takes precedence). Neither set: the placeholder ``"EMPTY"``.
        timeout_s: per-attempt HTTP timeout in seconds.
        max_retries: retries after the first attempt (so ``max_retries + 1`` attempts at most).
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
    ) -> None:
        if not model:
            raise ConfigError("model: must be a non-empty model name")
        if timeout_s <= 0:
            raise ConfigError(f"timeout_s: must be > 0, got {timeout_s}")
        if max_retries < 0:
            raise ConfigError(f"max_retries: must be >= 0, got {max_retries}")
        if backoff_s < 0 or max_backoff_s < 0 or backoff_jitter < 0:
            raise ConfigError("backoff_s, max_backoff_s, backoff_jitter: must be >= 0")
        if max_tokens_param not in ("max_tokens", "max_completion_tokens"):
            raise ConfigError(
                f"max_tokens_param: must be 'max_tokens' or 'max_completion_tokens', got {max_tokens_param!r}"
            )
        self.model = model
        self.base_url = base_url
        self.api_key_env = api_key_env
        self.timeout_s = float(timeout_s)
        self.max_retries = int(max_retries)
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

        from openai import OpenAI

        self._client: OpenAI = OpenAI(
            api_key=key,
            base_url=base_url,
            timeout=self.timeout_s,
            max_retries=0,  # retries are ours (see chat())
            default_headers=dict(default_headers) if default_headers else None,
        )
        self._rng = random.Random()
        self._rng_lock = threading.Lock()

    # ------------------------------------------------------------------ construction helpers
    @classmethod
    def from_env(
        cls, env: Mapping[str, str] | None = None, **overrides: Any
    ) -> OpenAIBackend:
        """Build a backend from ``SHOPCOMP_*`` environment variables; ``overrides`` win.

        ``SHOPCOMP_MODEL`` (required unless ``model=`` is passed), ``SHOPCOMP_BASE_URL``,
        ``SHOPCOMP_API_KEY_ENV`` (name of the variable holding the key; default
        ``OPENAI_API_KEY``), ``SHOPCOMP_TIMEOUT_S``, ``SHOPCOMP_MAX_RETRIES``.
        """
        fields = OpenAIBackendConfig.model_fields
        config = OpenAIBackendConfig.from_env(
            env, **{k: v for k, v in overrides.items() if k in fields}
        )
        return config.build(**{k: v for k, v in overrides.items() if k not in fields})

    def close(self) -> None:
        """Close the underlying HTTP connection pool."""
        self._client.close()

    def __enter__(self) -> OpenAIBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(name={self.name!r}, model={self.model!r}, "
            f"base_url={self.base_url!r}, api_key_env={self.api_key_env!r}, "
            f"api_key=<{self._key_source}>, timeout_s={self.timeout_s}, max_retries={self.max_retries})"
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
        from urllib.parse import urlsplit

        url = self._scrub(str(self.base_url))
        parts = urlsplit(str(self.base_url))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise self._error(f"{self.name}: base_url {url!r} is not an http:// or https:// URL with a host "
                              "(e.g. http://localhost:8000/v1)", 1, None)
        timeout = openai.Timeout(self.timeout_s, connect=connect_timeout_s)
        try:
            self._client.with_options(timeout=timeout, max_retries=0).models.list()
        except openai.APIConnectionError as exc:  # includes APITimeoutError
            cause = exc.__cause__ or exc.__context__
            # the HTTP library's ConnectError / ConnectTimeout (matched by name: openai 1.x uses
            # httpx, later versions another package with the same exception names)
            if cause is not None and type(cause).__name__ in ("ConnectError", "ConnectTimeout", "UnsupportedProtocol",
                                                              "InvalidURL"):
                detail = self._scrub(str(cause)) or type(cause).__name__
                raise self._error(f"{self.name}: cannot reach {url}: {type(cause).__name__}: {detail} "
                                  "(is a server listening there, with that scheme?)", 1, None) from None
            log.warning("%s: %s answered GET /models oddly (%s); going on", self.name, url, self._describe(exc))
        except Exception:  # noqa: BLE001 - an HTTP error or an answer we cannot parse: the server is there
            return

    # ------------------------------------------------------------------ the protocol
    def chat(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        sampling: Sampling | None = None,
    ) -> AssistantMessage:
        """One assistant turn; raises :class:`BackendError` when retries are exhausted."""
        import openai

        kwargs = self._request_kwargs(messages, tools, sampling or Sampling())
        attempts = self.max_retries + 1
        last_error = "no attempt made"
        last_status: int | None = None
        for attempt in range(attempts):
            retry_after: float | None = None
            start = time.perf_counter()
            try:
                raw = self._client.chat.completions.with_raw_response.create(**kwargs)
                text = raw.http_response.text
                latency = time.perf_counter() - start
                return self._parse(text, latency)
            except openai.APITimeoutError:
                last_status = None
                last_error = f"timed out after {self.timeout_s:g}s"
            except openai.APIConnectionError as exc:
                last_status = None
                last_error = f"connection error: {self._describe(exc)}"
            except openai.APIStatusError as exc:
                last_status = exc.status_code
                last_error = f"HTTP {exc.status_code}: {self._describe(exc)}"
                if not _is_retryable_status(exc.status_code):
                    raise self._error(
                        f"{self.name}: request rejected ({last_error}); not retried",
                        attempt + 1,
                        last_status,
                    ) from None
                retry_after = _retry_after_s(exc)
            except _Unparseable as exc:
                last_status = None
                last_error = f"unparseable response: {self._scrub(str(exc))}"
            except openai.OpenAIError as exc:  # anything else from the client: not retryable
                raise self._error(
                    f"{self.name}: client error {type(exc).__name__}: {self._describe(exc)}",
                    attempt + 1,
                    None,
                ) from None
            if attempt + 1 < attempts:
                delay = self._backoff(attempt, retry_after)
                log.warning(
                    "%s: attempt %d/%d failed (%s); retrying in %.2fs",
                    self.name, attempt + 1, attempts, last_error, delay,
                )
                if delay > 0:
                    time.sleep(delay)
        raise self._error(
            f"{self.name}: failed after {attempts} attempt(s); last error: {last_error}",
            attempts,
            last_status,
        )

    # ------------------------------------------------------------------ internals
    def _request_kwargs(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        sampling: Sampling,
    ) -> dict[str, Any]:
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
        except ValueError:
            raise _Unparseable(f"body is not JSON: {text[:200]!r}") from None
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
                StructuredToolCall(
                    id=str(call.get("id") or f"call_{i}"),
                    name=str(fn.get("name") or ""),
                    arguments=args,
                )
            )

        usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
        return AssistantMessage(
            content=content,
            reasoning=reasoning,
            tool_calls=calls,
            prompt_tokens=_int_or_none(usage.get("prompt_tokens")),
            completion_tokens=_int_or_none(usage.get("completion_tokens")),
            latency_s=latency,
            finish_reason=choice.get("finish_reason"),
        )

    def _backoff(self, retry_index: int, retry_after: float | None) -> float:
        delay = min(self.max_backoff_s, self.backoff_s * (2**retry_index))
        if self.backoff_jitter:
            with self._rng_lock:
                delay *= 1 + self._rng.uniform(0, self.backoff_jitter)
            delay = min(delay, self.max_backoff_s)
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.max_backoff_s))
        return delay

    def _scrub(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        text = _BEARER_RE.sub(r"\1***", text)
        if len(text) > _MAX_ERROR_CHARS:
            text = text[:_MAX_ERROR_CHARS] + "..."
        return text

    def _describe(self, exc: BaseException) -> str:
        message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
        body = getattr(exc, "body", None)
        if isinstance(body, dict):
            inner = body.get("error", body)
            if isinstance(inner, dict) and inner.get("message"):
                message = str(inner["message"])
        return self._scrub(str(message))

    def _error(self, message: str, attempts: int, status: int | None) -> BackendError:
        err = BackendError(self._scrub(message))
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


def _int_or_none(value: Any) -> int | None:
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None


def _retry_after_s(exc: Any) -> float | None:
    """Seconds from a ``Retry-After``/``retry-after-ms`` header of a 429/503, if numeric."""
    response = getattr(exc, "response", None)
    if response is None or getattr(exc, "status_code", None) not in (429, 503):
        return None
    headers = response.headers
    for header, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(header)
        if value is None:
            continue
        try:
            seconds = float(value) / divisor
        except ValueError:
            continue
        if seconds >= 0:
            return seconds
    return None


class OpenAIBackendConfig(BaseModel):
    """Settings of an :class:`OpenAIBackend` (for config files); :meth:`build` makes the backend."""

    model_config = ConfigDict(extra="forbid")
    model: str = Field(min_length=1)
    base_url: str | None = None
    api_key_env: str = DEFAULT_API_KEY_ENV
    timeout_s: float = Field(default=120, gt=0)
    max_retries: int = Field(default=3, ge=0)
    extra_body: dict[str, Any] = Field(default_factory=dict)
    name: str | None = None
    backoff_s: float = Field(default=1.0, ge=0)
    max_backoff_s: float = Field(default=30.0, ge=0)
    send_top_k: bool = True
    max_tokens_param: str = "max_tokens"
    tool_choice: str | dict[str, Any] | None = None

    @classmethod
    def from_env(
        cls, env: Mapping[str, str] | None = None, **overrides: Any
    ) -> OpenAIBackendConfig:
        """Read ``SHOPCOMP_MODEL`` (required unless ``model=`` is given), ``SHOPCOMP_BASE_URL``,
        ``SHOPCOMP_API_KEY_ENV``, ``SHOPCOMP_TIMEOUT_S`` and ``SHOPCOMP_MAX_RETRIES`` (``env``
        defaults to ``os.environ``); keyword ``overrides`` win over the environment."""
        env = os.environ if env is None else env
        model = overrides.get("model") or env.get(ENV_MODEL, "").strip()
        if not model:
            raise ConfigError(f"{ENV_MODEL}: not set; name the served model (e.g. Qwen/Qwen3-8B)")
        values: dict[str, Any] = {"model": model}
        if env.get(ENV_BASE_URL, "").strip():
            values["base_url"] = env[ENV_BASE_URL].strip()
        if env.get(ENV_API_KEY_ENV, "").strip():
            values["api_key_env"] = env[ENV_API_KEY_ENV].strip()
        for var, key, conv in ((ENV_TIMEOUT_S, "timeout_s", float), (ENV_MAX_RETRIES, "max_retries", int)):
            raw = env.get(var, "").strip()
            if raw:
                try:
                    values[key] = conv(raw)
                except ValueError:
                    raise ConfigError(f"{var}: expected a number, got {raw!r}") from None
        values.update(overrides)
        return cls(**values)

    def build(self, **kwargs: Any) -> OpenAIBackend:
        """Make the backend; ``kwargs`` (e.g. ``api_key=``, ``default_headers=``) are passed on."""
        return OpenAIBackend(**self.model_dump(), **kwargs)


def backend_from_env(env: Mapping[str, str] | None = None, **overrides: Any) -> OpenAIBackend:
    """Shorthand for :meth:`OpenAIBackend.from_env`."""
    return OpenAIBackend.from_env(env, **overrides)


__all__ = [
    "OpenAIBackend",
    "OpenAIBackendConfig",
    "PLACEHOLDER_API_KEY",
    "RETRYABLE_STATUS",
    "backend_from_env",
]
