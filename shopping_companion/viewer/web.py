"""The HTTP plumbing of the viewer's web app: the errors a request can meet, query parameters
read and checked, the read-only guard with its security headers, and the ``Host`` names a server
answers to."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from starlette.responses import HTMLResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = [
    "CSP",
    "SECURITY_HEADERS",
    "LOCAL_HOST_NAMES",
    "BadParam",
    "NotFound",
    "param_bool",
    "param_int",
    "param_choice",
    "ReadOnlyGuard",
    "safe_run_id",
    "allowed_hosts_for",
]

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; object-src 'none'; "
    "base-uri 'none'; frame-ancestors 'none'; form-action 'self'"
)
SECURITY_HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
    "cache-control": "no-store",
}

_BOOLS = {"": False, "0": False, "false": False, "no": False, "off": False, "1": True, "true": True, "yes": True}
_BOOLS["on"] = True


class BadParam(ValueError):
    """A query parameter has a value the page cannot use; ``name`` is the parameter, ``allowed``
    a human-readable list of what it accepts."""

    def __init__(self, name: str, value: str, allowed: str) -> None:
        super().__init__(f"query parameter {name!r}: {value!r} is not allowed; allowed: {allowed}")
        self.name = name
        self.value = value
        self.allowed = allowed


class NotFound(KeyError):
    """The URL names a run, line or call that does not exist; ``what`` says which."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


# --------------------------------------------------------------------------- query parameters


def param_bool(params: Mapping[str, str], name: str) -> bool:
    """Query parameter ``name`` as a boolean (``0/1``, ``true/false``, ``yes/no``, ``on/off``;
    absent or empty: False); :class:`BadParam` for anything else."""
    raw = params.get(name, "")
    value = raw.strip().lower()
    if value not in _BOOLS:
        raise BadParam(name, raw, "0, 1, true, false, yes, no, on, off or empty")
    return _BOOLS[value]


def param_int(params: Mapping[str, str], name: str, default: int, lo: int, hi: int | None = None) -> int:
    """Query parameter ``name`` as an integer in ``lo..hi`` (``hi`` None: no upper bound; absent or
    empty: ``default``); :class:`BadParam` for anything else."""
    raw = params.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        value = None
    if value is None or value < lo or (hi is not None and value > hi):
        allowed = f"an integer {lo}..{hi}" if hi is not None else f"an integer >= {lo}"
        raise BadParam(name, raw, allowed)
    return value


def param_choice(params: Mapping[str, str], name: str, choices: Iterable[str]) -> str | None:
    """Query parameter ``name`` when it is one of ``choices`` (absent or empty: None);
    :class:`BadParam` listing them otherwise."""
    raw = params.get(name)
    if raw is None or raw == "":
        return None
    allowed = list(choices)
    if raw not in allowed:
        raise BadParam(name, raw, ", ".join(allowed) if allowed else "(none in this run)")
    return raw


# --------------------------------------------------------------------------- the guard and the hosts


class ReadOnlyGuard:
    """ASGI middleware: answers 405 to any method but GET and HEAD (``refusal(method)``: the HTML
    page saying so), and adds the security headers (CSP, nosniff, no referrer, no framing, no
    caching) to every response."""

    def __init__(self, app: ASGIApp, refusal: Callable[[str], str]) -> None:
        self.app = app
        self.refusal = refusal

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["method"] not in ("GET", "HEAD"):
            html = self.refusal(scope["method"])
            response = HTMLResponse(html, status_code=405, headers={"allow": "GET, HEAD"})
            await self._with_headers(response)(scope, receive, send)
            return

        async def send_with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", []) if k.decode().lower() not in SECURITY_HEADERS]
                headers += [(k.encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)

    @staticmethod
    def _with_headers(response: Response) -> Response:
        for k, v in SECURITY_HEADERS.items():
            response.headers[k] = v
        return response


def safe_run_id(run_id: str) -> str:
    """``run_id`` when it may name a run; :class:`NotFound` for an absolute path, ``..``, a
    backslash or an empty segment (the catalog would not know it either: this only answers early)."""
    parts = run_id.split("/")
    if not run_id or run_id.startswith("/") or "\\" in run_id or any(p in ("", ".", "..") for p in parts):
        raise NotFound(f"run {run_id!r}")
    return run_id


#: The ``Host`` header names a local server answers to (a browser sends these for the default
#: ``--host 127.0.0.1``, and for ``localhost`` / ``::1``), whatever the port.
LOCAL_HOST_NAMES = ("127.0.0.1", "localhost", "[::1]")
#: ``--host`` values that listen on every interface: the Host header cannot be checked then.
_ANY_ADDRESS = ("", "0.0.0.0", "::", "[::]")


def allowed_hosts_for(bind_host: str) -> list[str]:
    """The ``Host`` header names the server accepts when it listens on ``bind_host``:
    :data:`LOCAL_HOST_NAMES` plus ``bind_host`` itself (lower-cased; an IPv6 address in
    brackets, as a Host header carries it), or ``["*"]`` (any) for a wildcard address
    (``0.0.0.0``, ``::``), whose clients may use any name of the machine. A request with any other
    Host answers 400: a web page whose DNS name was re-bound to 127.0.0.1 cannot read the runs."""
    host = bind_host.strip().lower()
    if host in _ANY_ADDRESS:
        return ["*"]
    bare = host.strip("[]")
    named = f"[{bare}]" if ":" in bare else bare
    return list(dict.fromkeys([*LOCAL_HOST_NAMES, named]))
