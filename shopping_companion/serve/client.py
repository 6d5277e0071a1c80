"""The one HTTP client of a ``shopcomp serve`` service (docs/cluster.md): what the remote tool
box, judge and rubric (:mod:`shopping_companion.serve.remote`) send every request through.

:class:`ServiceClient` wraps one :class:`httpx.Client` (HTTP/1.1, connection pooling and
keep-alive; thread-safe, so every episode thread of a process shares it). Every call:

* sends JSON with the bearer token (``Authorization: Bearer <token>``) when one is configured;
* is retried — with exponential backoff (``backoff_s * 2**k``, capped at ``max_backoff_s``, times
  ``1 + U(0, 0.1)`` jitter; a ``Retry-After`` header of a 503 is honoured up to the cap) — after a
  connection failure, a timeout, or an HTTP 500 / 502 / 503 / 504 answer (also Ray Serve's own
  503 while a replica restarts, whose body is not ours), at most ``retries`` times; so is a 404
  to a ``POST`` route whose body is not the service's error body (Ray Serve's proxy answers that
  while the application is deleted on shutdown or not deployed yet), which the breaker counts as
  a connection failure;
* never takes longer than ``deadline_s`` over all its attempts and backoffs (each attempt's
  timeouts are cut to the time left; a backoff that would pass the deadline is not slept);
* raises :class:`~shopping_companion.errors.ToolServiceError` naming the URL, the route, the
  attempts and the last error once the retries or the deadline are used up;
* with ``breaker_threshold`` set, counts connection failures and timeouts of the service URL in
  the process-wide circuit breaker of that URL (:mod:`shopping_companion.llm.breaker`; any HTTP
  answer resets the count): once that many came in a row, this and every later call raise
  :class:`~shopping_companion.errors.CircuitOpenError` at once (an evaluation then stops, exit 4,
  and resumes when rerun) instead of each episode paying its own retries against a dead service.

Direct endpoints (``direct=True``, the default; docs/cluster.md, "Request path"): when the service
lists its replicas' own endpoints (``GET /v1/endpoints``, re-read every
:data:`ENDPOINTS_TTL_S` seconds), a tool, judge or reward call goes straight to one of the
replicas of its deployment (round robin), skipping Ray Serve's proxy and ingress. An endpoint is
used only after ``GET <url>/v1/direct`` returned the nonce the service listed for it (so an
address that reaches another process is never used). A direct attempt that cannot connect or
times out puts that endpoint aside for :data:`ENDPOINT_DOWN_S` seconds and the call continues on
the service URL, with its retries and deadline as above; a 5xx answer of a replica is retried on
the service URL too. Answers of a direct endpoint are otherwise final, as the service's are. A
service without the route (an older version) is called through its URL only. Direct calls go
over the standard library's :mod:`http.client` (:class:`_DirectHTTP`: one keep-alive connection
per thread and endpoint; a pooled connection the replica closed while idle is reopened once, as
every direct route is idempotent): on loopback it costs about 0.5 ms per call where ``httpx``
costs about 1.0 ms (``benchmarks/bench_http_clients.py``), and the direct path exists for its
latency (``benchmarks/bench_serve.py``).
Direct endpoints are plain ``http://`` addresses inside the cluster, so no proxy variables
(``HTTP_PROXY``...) apply to them; the service URL honours them as ``httpx`` does.

Answers that are not retried: a 400 ``tool_input`` becomes the
:class:`~shopping_companion.errors.ToolInputError` the in-process backend raises (same ``field``,
same ``str()``, so the agent's observation is identical); a 409 ``judge_failed`` becomes
:class:`~shopping_companion.errors.JudgeFailedError`; a 401, a 404 (``not_loaded``, or a route
this server does not have), a 422 and any other 4xx become :class:`ServiceRefusedError`, a
:class:`~shopping_companion.errors.ConfigError` (exit code 2: fix the token, the URL or the
benchmark) that is also a ``ToolServiceError``, so inside an episode it ends the episode as a
backend error instead of becoming an observation the agent is blamed for.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import threading
import time
import weakref
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx
from pydantic import BaseModel, ValidationError

from shopping_companion.assembly.endpoints import scrub_url
from shopping_companion.errors import EXIT_USAGE, ConfigError, JudgeFailedError, ToolInputError, ToolServiceError
from shopping_companion.retry import Attempts, Backoff, retry_after_s
from shopping_companion.serve import api

__all__ = ["ENDPOINTS_TTL_S", "ENDPOINT_DOWN_S", "RETRY_STATUSES", "ServiceClient", "ServiceRefusedError"]

#: HTTP statuses that are retried (server faults, Ray Serve's 503 while a replica restarts).
RETRY_STATUSES = frozenset({500, 502, 503, 504})
#: Seconds a client keeps the list of direct endpoints before reading it again.
ENDPOINTS_TTL_S = 30.0
#: Seconds a direct endpoint that did not answer is put aside.
ENDPOINT_DOWN_S = 30.0
#: Seconds the nonce check of a direct endpoint may take.
_VERIFY_TIMEOUT_S = 2.0

M = TypeVar("M", bound=BaseModel)

_MAX_DETAIL = 300


class ServiceRefusedError(ConfigError, ToolServiceError):
    """The service answered, but refused the request for a reason a retry cannot fix: no or a wrong
    bearer token (401), a benchmark / task / route it does not have (404), a request it cannot
    read (422, e.g. a client and service of different versions) or another 4xx. ``status`` is the
    HTTP status, ``type`` the service's error type (``unauthorized``, ``not_loaded``,
    ``bad_request``; None when the body is not the service's). A :class:`ConfigError` (exit code
    2) that is also a :class:`ToolServiceError`, so an episode that meets it ends as a backend
    error, never as a tool observation."""

    exit_code = EXIT_USAGE

    def __init__(self, message: str, status: int, type: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.type = type


def _one_line(text: str, limit: int = _MAX_DETAIL) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class _Retry(Exception):
    """One attempt failed in a way worth retrying; ``detail`` says how."""

    def __init__(self, detail: str, retry_after: float | None = None, unreachable: bool = False) -> None:
        super().__init__(detail)
        self.detail = detail
        self.retry_after = retry_after
        self.unreachable = unreachable  # no answer at all (connection failed, timeout)


class _NoBreaker:
    """The breaker of a client without one (``breaker_threshold=None``): never opens."""

    def check(self) -> None:
        pass

    def record_failure(self, what: str) -> None:
        pass

    def record_success(self) -> None:
        pass

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class _Endpoint:
    """One verified direct endpoint (``url``) and until when it is put aside."""

    __slots__ = ("url", "down_until")

    def __init__(self, url: str) -> None:
        self.url = url
        self.down_until = 0.0


class _Answer:
    """What :meth:`ServiceClient._attempt` reads of an HTTP answer, for either transport."""

    __slots__ = ("status_code", "content", "headers")

    def __init__(self, status_code: int, content: bytes, headers: Any) -> None:
        self.status_code = status_code
        self.content = content
        self.headers = headers  # .get(name) is case-insensitive (httpx.Headers, http.client.HTTPMessage)

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self) -> Any:
        return json.loads(self.content)


class _NoDelayConnection(http.client.HTTPConnection):
    """An HTTP connection with Nagle's algorithm off (``TCP_NODELAY``), as asyncio and uvloop set
    it on the server side: a small request is never held back waiting for an ACK."""

    def connect(self) -> None:
        super().connect()
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _DirectHTTP:
    """POSTs to direct endpoints over :mod:`http.client` keep-alive connections, one per thread
    and endpoint URL (module docstring). Raises ``TimeoutError`` when an operation takes longer
    than ``timeout``, ``OSError`` / ``http.client.HTTPException`` when the endpoint cannot be
    reached or breaks the connection."""

    def __init__(self, headers: dict[str, str]) -> None:
        self.headers = {**headers, "Content-Type": "application/json"}
        self._local = threading.local()
        self._lock = threading.Lock()
        self._open: "weakref.WeakSet[http.client.HTTPConnection]" = weakref.WeakSet()

    def _conns(self) -> dict[str, http.client.HTTPConnection]:
        conns = getattr(self._local, "conns", None)
        if conns is None:
            conns = self._local.conns = {}
        return conns

    def post(self, url: str, path: str, body: bytes, timeout: float) -> _Answer:
        conns = self._conns()
        for attempt in (0, 1):
            conn = conns.get(url)
            reused = conn is not None and conn.sock is not None
            if conn is None:
                parts = urlsplit(url)
                conn = _NoDelayConnection(parts.hostname or "", parts.port or 80, timeout=timeout)
                conns[url] = conn
                with self._lock:
                    self._open.add(conn)
            conn.timeout = timeout
            if conn.sock is not None:
                conn.sock.settimeout(timeout)
            try:
                conn.request("POST", path, body=body, headers=self.headers)
                resp = conn.getresponse()
                content = resp.read()
            except TimeoutError:
                self._drop(conns, url)
                raise
            except (OSError, http.client.HTTPException):
                self._drop(conns, url)
                if reused and attempt == 0:  # the replica closed this idle connection: once more, on a new one
                    continue
                raise
            if resp.will_close:
                self._drop(conns, url)
            return _Answer(resp.status, content, resp.headers)
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    @staticmethod
    def _drop(conns: dict[str, http.client.HTTPConnection], url: str) -> None:
        conn = conns.pop(url, None)
        if conn is not None:
            conn.close()

    def close(self) -> None:
        """Close every open connection (of every thread; later posts open new ones)."""
        with self._lock:
            conns = list(self._open)
        for conn in conns:
            conn.close()


class ServiceClient:
    """HTTP client of one ``shopcomp serve`` service (module docstring); thread-safe.

    Args:
        base_url: the service's address, ``http(s)://host[:port][/prefix]`` (the routes of
            :mod:`~shopping_companion.serve.api` are appended: ``<base_url>/v1/...``).
        token: the bearer token to send (None or empty: none is sent).
        timeout_s: seconds one HTTP attempt may take (connect, write, read each), > 0.
        retries: further attempts after a retryable failure, >= 0.
        backoff_s: the first retry's delay in seconds (doubles on each further retry), >= 0.
        deadline_s: seconds one call may take over all its attempts and backoffs, > 0.
        max_backoff_s: cap on one retry delay (also on an honoured ``Retry-After``), >= 0.
        token_env: the environment variable the token came from (named by the 401 message).
        max_connections: pooled connections kept open to the service (>= 1).
        transport: an ``httpx`` transport (tests); default: the network.
        direct: send tool, judge and reward calls to the replicas' direct endpoints when the
            service lists them (module docstring); False: always through ``base_url``.
        breaker_threshold: consecutive connection failures / timeouts of ``base_url`` that open
            the circuit breaker (>= 1); None: no breaker (every call has its own retries only).

    Raises :class:`ConfigError` naming the argument for a base URL that is not http(s) with a
    host, or a number out of range.
    """

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        timeout_s: float = 60.0,
        retries: int = 4,
        backoff_s: float = 0.5,
        deadline_s: float = 180.0,
        max_backoff_s: float = 10.0,
        token_env: str = api.DEFAULT_TOKEN_ENV,
        max_connections: int = 64,
        transport: httpx.BaseTransport | None = None,
        direct: bool = True,
        breaker_threshold: int | None = None,
    ) -> None:
        from shopping_companion.llm.breaker import breaker_for, positive_int, positive_seconds

        parts = urlsplit(str(base_url).strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"base_url: must be an http:// or https:// URL with a host, got {base_url!r}")
        self.base_url = str(base_url).strip().rstrip("/")
        self.url = scrub_url(self.base_url)
        self.timeout_s = positive_seconds("timeout_s", timeout_s)
        self.deadline_s = positive_seconds("deadline_s", deadline_s)
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ConfigError(f"retries: must be an integer >= 0, got {retries!r}")
        for name, v in (("backoff_s", backoff_s), ("max_backoff_s", max_backoff_s)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 <= v < float("inf")):
                raise ConfigError(f"{name}: must be a finite number of seconds >= 0, got {v!r}")
        self.retries = retries
        self.backoff_s = float(backoff_s)
        self.max_backoff_s = float(max_backoff_s)
        self.token_env = token_env
        self.has_token = bool(token)
        headers = {"Accept": "application/json", "User-Agent": "shopcomp-serve-client"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        n = positive_int("max_connections", max_connections)
        self._http = httpx.Client(
            base_url=self.base_url,
            headers=headers,
            timeout=self.timeout_s,
            limits=httpx.Limits(max_connections=n, max_keepalive_connections=n, keepalive_expiry=30.0),
            http1=True,
            http2=False,
            transport=transport,
            follow_redirects=False,
        )
        self._direct_http = _DirectHTTP(headers)
        self._retry_backoff = Backoff(self.backoff_s, self.max_backoff_s, jitter=0.1)
        self.requests = 0  # HTTP attempts made (for tests and stats; approximate under threads)
        self.breaker = (
            _NoBreaker()
            if breaker_threshold is None
            else breaker_for(
                f"tool service {self.url}", breaker_threshold, advice="set service.breaker_threshold (null: no breaker)"
            )
        )
        self.direct = bool(direct)
        self.direct_requests = 0  # of which to a direct endpoint
        self._ep_lock = threading.Lock()
        self._endpoints: dict[str, list[_Endpoint]] = {}  # deployment -> verified endpoints
        self._endpoints_at = float("-inf")
        self._verified: dict[tuple[str, str], bool] = {}  # (url, nonce) -> nonce check passed
        self._rr = 0

    @classmethod
    def from_settings(cls, url: str, service: Any, **kwargs: Any) -> "ServiceClient":
        """A client of ``url`` with the settings of ``service`` (a
        :class:`~shopping_companion.assembly.endpoints.ServiceConfig` or anything with its
        fields: ``token_env``, ``timeout_s``, ``retries``, ``backoff_s``, ``deadline_s``,
        ``direct``, ``breaker_threshold``); the token is read from ``$<token_env>`` (unset or
        empty: none)."""
        token_env = str(getattr(service, "token_env", api.DEFAULT_TOKEN_ENV) or api.DEFAULT_TOKEN_ENV)
        return cls(
            url,
            os.environ.get(token_env, "").strip() or None,
            timeout_s=float(getattr(service, "timeout_s", 60.0)),
            retries=int(getattr(service, "retries", 4)),
            backoff_s=float(getattr(service, "backoff_s", 0.5)),
            deadline_s=float(getattr(service, "deadline_s", 180.0)),
            token_env=token_env,
            **(
                {
                    "direct": bool(getattr(service, "direct", True)),
                    "breaker_threshold": getattr(service, "breaker_threshold", None),
                }
                | kwargs
            ),
        )

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Close the pooled connections (later calls open new ones)."""
        self._http.close()
        self._direct_http.close()

    def __enter__(self) -> "ServiceClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __copy__(self) -> "ServiceClient":
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> "ServiceClient":
        return self  # one pool per process: copies (gymnasium.make deep-copies kwargs) share it

    def __repr__(self) -> str:
        return f"ServiceClient({self.url!r}, retries={self.retries}, deadline_s={self.deadline_s:g})"

    # ------------------------------------------------------------------ routes

    def health(self) -> api.HealthResponse:
        """``GET /v1/health`` (liveness). Raises :class:`ToolServiceError` when it does not answer."""
        return self.get("health", api.HealthResponse)

    def ready(self) -> api.ReadyResponse:
        """``GET /v1/ready``: ``ready`` True when every deployment has loaded its data. A 503
        answer is not retried here: it is returned as ``ready=False`` with what the service
        waits for (``deployments``). Raises :class:`ToolServiceError` when nothing answers after
        the retries."""
        try:
            return self.get("ready", api.ReadyResponse, retry_statuses=RETRY_STATUSES - {503})
        except _NotReady as e:
            return e.ready

    def info(self) -> api.InfoResponse:
        """``GET /v1/info``: loaded benchmarks, catalog, reward spec, deployments."""
        return self.get("info", api.InfoResponse)

    # ------------------------------------------------------------------ calls

    def get(self, route: str, model: type[M], *, retry_statuses: frozenset[int] = RETRY_STATUSES) -> M:
        """``GET /v1/<route>``, the answer validated as ``model``."""
        return self._parse(route, model, self.call("GET", route, None, retry_statuses=retry_statuses))

    def post(self, route: str, body: BaseModel, model: type[M]) -> M:
        """``POST /v1/<route>`` with ``body`` (a request model of :mod:`~shopping_companion.serve.api`),
        the answer validated as ``model``."""
        return self._parse(route, model, self.call("POST", route, api.encode_json(body)))

    def _parse(self, route: str, model: type[M], data: Any) -> M:
        try:
            return model.model_validate(data)
        except ValidationError as e:
            raise ServiceRefusedError(
                f"{self.url}{api.API_PREFIX}/{route}: the answer is not a {model.__name__} of API "
                f"{api.API_VERSION} (is the service another shopcomp version?): {_one_line(str(e))}",
                200,
            ) from None

    def call(
        self,
        method: str,
        route: str,
        json_body: bytes | None = None,
        *,
        retry_statuses: frozenset[int] = RETRY_STATUSES,
    ) -> Any:
        """One call of ``method`` ``/v1/<route>`` with retries and the deadline (module
        docstring); ``json_body``: the JSON bytes sent (None: no body); returns the decoded JSON
        answer of a 2xx.

        Raises :class:`ToolInputError` (400 ``tool_input``), :class:`JudgeFailedError` (409),
        :class:`ServiceRefusedError` (other 4xx), :class:`ToolServiceError` (retries or
        deadline used up), :class:`CircuitOpenError` (the breaker is or just became open)."""
        self.breaker.check()
        path = f"{api.API_PREFIX}/{route.lstrip('/')}"
        where = f"{self.url}{path}"
        attempts = Attempts(self.retries, self._retry_backoff, self.deadline_s, sleep=self.breaker.sleep)
        last = "no attempt made"
        ep = self._direct_endpoint(route) if method == "POST" else None
        if ep is not None:
            try:
                self.direct_requests += 1
                return self._attempt(
                    method,
                    path,
                    ep.url + path,
                    json_body,
                    min(self.timeout_s, self.deadline_s),
                    retry_statuses,
                    direct_url=ep.url,
                )
            except _Retry as r:  # on to the service URL, within the same deadline
                if r.unreachable:
                    ep.down_until = time.monotonic() + ENDPOINT_DOWN_S
                last = f"direct endpoint {ep.url}: {r.detail}"
        for _ in attempts:
            try:
                out = self._attempt(method, path, where, json_body, attempts.budget(self.timeout_s), retry_statuses)
            except _Retry as r:
                last = r.detail
                if r.unreachable:
                    self.breaker.record_failure(f"{where}: {r.detail}")  # raises when it opens
                else:
                    self.breaker.record_success()  # the service answered (a 5xx)
                if not attempts.backoff(r.retry_after):  # the breaker's sleep raises as soon as it opens
                    if attempts.stop == "backoff":
                        last += f"; no time left for a retry in {attempts.delay:.2f}s"
                    break
            except Exception:
                self.breaker.record_success()  # an answer the caller gets as an error (4xx)
                raise
            else:
                self.breaker.record_success()
                return out
        if attempts.stop == "deadline":
            last += "; the deadline was reached"
        raise ToolServiceError(
            f"{where}: no answer after {attempts.made} attempt(s) in {time.monotonic() - attempts.started:.1f}s "
            f"(retries={self.retries}, deadline_s={self.deadline_s:g}); last error: {last}. "
            "Is `shopcomp serve` running there and ready (GET /v1/ready)?"
        )

    def _attempt(
        self,
        method: str,
        path: str,
        where: str,
        json_body: bytes | None,
        timeout: float,
        retry_statuses: frozenset[int],
        direct_url: str | None = None,
    ) -> Any:
        self.requests += 1
        resp: httpx.Response | _Answer
        if direct_url is not None:  # the hot path: http.client (module docstring); POSTs only
            try:
                resp = self._direct_http.post(direct_url, path, json_body or b"{}", timeout)
            except TimeoutError as e:
                raise _Retry(f"timeout after {timeout:.1f}s ({type(e).__name__})", unreachable=True) from None
            except (OSError, http.client.HTTPException) as e:  # refused, reset, a broken answer
                raise _Retry(
                    f"{type(e).__name__}: {_one_line(str(e)) or 'connection failed'}", unreachable=True
                ) from None
        else:
            try:
                headers = {"Content-Type": "application/json"} if json_body is not None else None
                resp = self._http.request(method, path, content=json_body, headers=headers, timeout=timeout)
            except httpx.TimeoutException as e:
                raise _Retry(f"timeout after {timeout:.1f}s ({type(e).__name__})", unreachable=True) from None
            except httpx.TransportError as e:  # refused, reset, DNS, protocol error: the server may come back
                raise _Retry(
                    f"{type(e).__name__}: {_one_line(str(e)) or 'connection failed'}", unreachable=True
                ) from None
        status = resp.status_code
        if 200 <= status < 300:
            try:
                return resp.json()
            except ValueError:
                raise _Retry(f"HTTP {status} with a body that is not JSON: {_one_line(resp.text, 120)!r}") from None
        err = _error_body(resp)
        detail = f"HTTP {status}" + (f" {err.type}: {_one_line(err.message)}" if err else f": {_one_line(resp.text)}")
        if status == 404 and err is None and method == "POST":
            # Not our 404 (ours names what is not loaded): Ray Serve's proxy answers a plain 404
            # while the application is being deleted or not deployed yet. A tool route of a
            # service that once answered does not vanish, so this is the service going away:
            # retried, and counted by the breaker like a refused connection.
            raise _Retry(f"{detail} (not the service's answer: it is stopping or not deployed)", unreachable=True)
        if status in retry_statuses:
            raise _Retry(detail, retry_after_s(resp.headers))
        if status == 503 and path.endswith("/ready"):
            raise _NotReady(_ready_body(resp, detail))
        if status == 400 and err is not None and err.type == "tool_input":
            field = err.field or "arguments"
            raise ToolInputError(field, api.tool_input_message(field, err.message))
        if status == 409 or (err is not None and err.type == "judge_failed"):
            raise JudgeFailedError(f"{where}: {err.message if err else detail}")
        if status == 401:
            if self.has_token:
                msg = f"{where}: the service refused the bearer token in ${self.token_env} (HTTP 401); set the service's token"
            else:
                msg = f"{where}: the service requires a bearer token: set ${self.token_env} (HTTP 401)"
            raise ServiceRefusedError(msg, status, "unauthorized")
        if status == 404 and err is not None:
            raise ServiceRefusedError(f"{where}: {err.message} (HTTP 404 {err.type})", status, err.type)
        if status == 404:
            raise ServiceRefusedError(
                f"{where}: no such route (HTTP 404); is {self.url} a shopcomp serve service of API {api.API_VERSION}?",
                status,
            )
        raise ServiceRefusedError(
            f"{where}: the service refused the request ({detail})", status, err.type if err else None
        )

    # ------------------------------------------------------------------ direct endpoints

    def _direct_endpoint(self, route: str) -> _Endpoint | None:
        """A direct endpoint for ``route`` (round robin over those up), or None: direct calls are
        off, the route has none, or the service lists none."""
        from shopping_companion.serve.direct import deployment_of

        deployment = deployment_of(route)
        if not self.direct or deployment is None:
            return None
        with self._ep_lock:
            if time.monotonic() - self._endpoints_at >= ENDPOINTS_TTL_S:
                self._refresh_endpoints()
            now = time.monotonic()
            up = [e for e in self._endpoints.get(deployment, ()) if e.down_until <= now]
            if not up:
                return None
            self._rr += 1
            return up[self._rr % len(up)]

    def _refresh_endpoints(self) -> None:
        """Read ``GET /v1/endpoints`` and keep the endpoints whose nonce check passes (called
        with ``_ep_lock`` held). A service without the route turns direct calls off."""
        self._endpoints_at = time.monotonic()
        path = f"{api.API_PREFIX}/endpoints"
        try:
            answer = self._attempt("GET", path, self.url + path, None, min(self.timeout_s, 10.0), frozenset())
            listed = self._parse("endpoints", api.EndpointsResponse, answer)
        except ServiceRefusedError as e:
            if e.status == 404:
                self.direct = False  # a service of an older version: its URL only
            return
        except (_Retry, ToolServiceError, JudgeFailedError, ToolInputError):
            return  # keep what we have; the call itself meets the service's trouble
        old = {e.url: e for eps in self._endpoints.values() for e in eps}
        fresh: dict[str, list[_Endpoint]] = {}
        for item in listed.endpoints:
            key = (item.url, item.nonce)
            if key not in self._verified:
                self._verified[key] = self._nonce_ok(item.url, item.nonce)
            if self._verified[key]:
                fresh.setdefault(item.deployment, []).append(old.get(item.url) or _Endpoint(item.url))
        self._endpoints = fresh

    def _nonce_ok(self, url: str, nonce: str) -> bool:
        try:
            resp = self._http.get(f"{url}{api.API_PREFIX}/direct", timeout=_VERIFY_TIMEOUT_S)
            return resp.status_code == 200 and resp.json().get("nonce") == nonce
        except (httpx.HTTPError, ValueError, AttributeError):
            return False


class _NotReady(Exception):
    def __init__(self, ready: api.ReadyResponse) -> None:
        super().__init__("not ready")
        self.ready = ready


def _error_body(resp: "httpx.Response | _Answer") -> api.ErrorBody | None:
    """The service's :class:`~shopping_companion.serve.api.ErrorBody`, or None for another body
    (e.g. Ray Serve's own plain-text 503, a proxy's HTML page)."""
    try:
        return api.ErrorResponse.model_validate(resp.json()).error
    except (ValueError, ValidationError):
        return None


def _ready_body(resp: "httpx.Response | _Answer", detail: str) -> api.ReadyResponse:
    try:
        return api.ReadyResponse.model_validate(resp.json())
    except (ValueError, ValidationError):
        return api.ReadyResponse(ready=False, deployments={"service": detail})
