"""Endpoints a run talks to (a policy or judge served over an OpenAI-compatible API, a
``shopcomp serve`` tool service): their URLs checked and shown without credentials, pinged before
anything slow is loaded, and the time limits their clients take from the environment
(docs/architecture.md, layers)."""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, Field, field_validator

from shopping_companion.config import STRICT
from shopping_companion.errors import ConfigError

__all__ = [
    "Endpoint",
    "ServiceConfig",
    "check_reachable",
    "check_tools",
    "endpoint_time_options",
    "endpoint_url",
    "scrub_url",
]


def scrub_url(url: str | None) -> str | None:
    """``url`` as messages, logs and reports may show it: user-info (``user:password@``), query
    string and fragment (where API keys and tokens ride) removed; ``None`` / ``""`` unchanged;
    ``"<unparseable url>"`` for text :func:`urllib.parse.urlsplit` refuses."""
    if not url:
        return url
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable url>"
    host = parts.netloc.rpartition("@")[2]  # host[:port] as written (IPv6 brackets kept)
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def endpoint_url(v: str | None) -> str | None:
    """An endpoint's base URL must be ``http://`` or ``https://`` with a host (or unset)."""
    from shopping_companion.llm.openai_backend import is_endpoint_url

    if v is not None and not is_endpoint_url(v):
        raise ValueError(f"must be an http:// or https:// URL with a host, e.g. http://localhost:8000/v1; got {v!r}")
    return v


class Endpoint(BaseModel):
    """A model served over an OpenAI-compatible API: ``model``, ``base_url`` (``http(s)://host…``;
    ``None``: the provider's default endpoint), ``api_key_env`` (the variable holding the key)."""

    model_config = STRICT
    model: str | None = None
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"

    @field_validator("base_url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        return endpoint_url(v)


def check_tools(v: Any, field: str = "tools") -> str:
    """``v`` as a tools selection: ``"local"`` (this process loads the index, the memory stores,
    the judge and the rubric) or ``"serve:URL"`` (a ``shopcomp serve`` service at ``URL``, an
    ``http://`` or ``https://`` address with a host, serves them; docs/cluster.md). Returns the
    value with the URL's trailing ``/`` removed; raises ``ValueError`` naming ``field`` and the
    allowed forms otherwise."""
    allowed = "local, or serve:URL with an http:// or https:// URL (e.g. serve:http://127.0.0.1:8000)"
    if not isinstance(v, str):
        raise ValueError(f"{field}: must be {allowed}; got {v!r}")
    text = v.strip()
    if text == "local":
        return text
    if not text.startswith("serve:"):
        raise ValueError(f"{field}: must be {allowed}; got {v!r}")
    url = text[len("serve:") :].rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{field}: must be {allowed}; got {v!r}")
    if parts.query or parts.fragment:
        raise ValueError(f"{field}: the service URL takes no query or fragment; got {v!r}")
    return "serve:" + url


def endpoint_time_options(deadline_s: float | None = None, breaker_threshold: int | None = None) -> dict[str, Any]:
    """``deadline_s`` / ``breaker_threshold`` for an OpenAI-compatible client: the values given, else
    ``$SHOPCOMP_DEADLINE_S`` / ``$SHOPCOMP_BREAKER_THRESHOLD``, else omitted (the client's defaults).
    Raises :class:`ConfigError` naming the variable when it is not a number > 0 (an integer >= 1)."""
    from shopping_companion.llm.breaker import ENV_BREAKER_THRESHOLD, positive_int, positive_seconds
    from shopping_companion.llm.openai_backend import ENV_DEADLINE_S

    out: dict[str, Any] = {}
    for key, value, var, conv, check in (
        ("deadline_s", deadline_s, ENV_DEADLINE_S, float, positive_seconds),
        ("breaker_threshold", breaker_threshold, ENV_BREAKER_THRESHOLD, int, positive_int),
    ):
        name = key
        if value is None and os.environ.get(var, "").strip():
            name, raw = var, os.environ[var].strip()
            try:
                value = conv(raw)
            except ValueError:
                raise ConfigError(f"{var}: must be a number, got {raw!r}") from None
        if value is not None:
            out[key] = check(name, value)
    return out


def check_reachable(backend: Any, option: str) -> Any:
    """``backend`` when its endpoint answers (``backend.ping()``); else raise
    :class:`~shopping_companion.errors.BackendError` naming ``option`` at once, instead of minutes
    of per-request retries inside the run."""
    from shopping_companion.errors import BackendError

    try:
        backend.ping()
    except BackendError as e:
        raise BackendError(f"{option}: {e}") from None
    return backend


class ServiceConfig(BaseModel):
    """How a client talks to a ``shopcomp serve`` service (used when ``tools`` is ``serve:URL``):
    ``token_env``: the environment variable holding the bearer token (unset or empty: no token is
    sent); ``timeout_s`` (> 0): seconds one HTTP request may take; ``retries`` (>= 0): further
    attempts after a connection failure, a timeout or a 5xx answer (exponential backoff from
    ``backoff_s``); ``deadline_s`` (> 0): seconds one call may take over all its attempts;
    ``direct``: send tool calls to the replicas' direct endpoints when the service lists them,
    falling back to its URL (docs/cluster.md, "Request path"; false: always its URL);
    ``breaker_threshold`` (>= 1, default 5; null: none): consecutive connection failures or
    timeouts of the service that stop the run (exit 4; rerun to resume) instead of every
    episode paying its own retries."""

    model_config = STRICT
    token_env: str = "SHOPCOMP_SERVE_TOKEN"
    timeout_s: float = Field(default=60.0, gt=0)
    retries: int = Field(default=4, ge=0, le=20)
    backoff_s: float = Field(default=0.5, ge=0)
    deadline_s: float = Field(default=180.0, gt=0)
    direct: bool = True
    breaker_threshold: int | None = Field(default=5, ge=1, le=1000)
