"""The HTTP plumbing of ``shopcomp serve``, shared by the ingress (:mod:`.app`) and the replicas'
direct endpoints (:mod:`.direct`): the bearer-token check, the service's JSON error bodies for
every failure (API errors, requests that do not validate, 404 / 405, internal errors), the
request-body limit, and a deployment method's result as an HTTP answer (docs/cluster.md)."""

from __future__ import annotations

import logging
import secrets
from typing import Annotated, Any, Callable

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.exceptions import HTTPException as StarletteHTTPException

from shopping_companion.serve import api

__all__ = [
    "ERRORS",
    "PROTECTED",
    "ApiError",
    "BodyLimit",
    "install_error_handlers",
    "internal_message",
    "protected_route",
    "set_token",
    "short_repr",
    "to_response",
]

logger = logging.getLogger("ray.serve")


def _cut(text: str, limit: int) -> str:
    """``text`` cut to about ``limit`` characters (error messages never echo unbounded input)."""
    return text if len(text) <= limit else text[: max(1, limit - 16)] + f"... ({len(text)} chars)"


def short_repr(value: Any, limit: int = 80) -> str:
    """``repr(value)`` cut to about ``limit`` characters."""
    return _cut(repr(value), limit)


_bearer = HTTPBearer(auto_error=False, description=f"the token in ${api.DEFAULT_TOKEN_ENV} (or token_env)")


#: This replica's token (set by :class:`Ingress`; one ingress per replica process).
_TOKEN: dict[str, str | None] = {"token": None}


class ApiError(Exception):
    """An API error to answer with: its :class:`~shopping_companion.serve.api.ErrorBody` and HTTP
    ``status`` (default: the status of the body's type)."""

    def __init__(self, body: api.ErrorBody, status: int | None = None) -> None:
        super().__init__(body.message)
        self.body = body
        self.status = status or api.ERROR_STATUS[body.type]


def _error_response(body: api.ErrorBody, status: int | None = None) -> JSONResponse:
    return JSONResponse(
        api.ErrorResponse(error=body).model_dump(mode="json"), status_code=status or api.ERROR_STATUS[body.type]
    )


async def _api_error(_: Request, e: ApiError) -> JSONResponse:
    return _error_response(e.body, e.status)


async def _bad_request(_: Request, e: RequestValidationError) -> JSONResponse:
    errs = e.errors()
    if errs and errs[0].get("type") == "json_invalid":
        body = api.ErrorBody(type="bad_request", message="invalid request: the body is not valid JSON")
        return _error_response(body)
    parts = []
    for err in errs[:5]:
        loc = ".".join(str(x) for x in err.get("loc", ()) if x != "body") or "body"
        parts.append(f"{loc}: {err.get('msg', 'invalid')}")
    more = f" (+{len(errs) - 5} more)" if len(errs) > 5 else ""
    field = None
    if errs:
        loc = [str(x) for x in errs[0].get("loc", ()) if x != "body"]
        field = ".".join(loc) or None
    body = api.ErrorBody(type="bad_request", message="invalid request: " + "; ".join(parts) + more, field=field)
    return _error_response(body)


async def _http_error(request: Request, e: StarletteHTTPException) -> JSONResponse:
    if e.status_code == 404:
        routes = getattr(request.app.state, "direct_routes", None)
        where = (
            f"this direct endpoint serves POST {', '.join(routes)} (the service lists every route at "
            f"{api.API_PREFIX}/openapi.json)"
            if routes
            else f"see {api.API_PREFIX}/openapi.json"
        )
        body = api.ErrorBody(
            type="not_loaded", message=f"no route {request.method} {_cut(request.url.path, 200)}; {where}"
        )
    elif request.scope.get(_TOO_BIG):  # FastAPI reports a body read that BodyLimit cut as a 400
        return _error_response(_too_big_body(request.scope[_TOO_BIG]), 413)
    else:  # a body FastAPI could not parse (400 there) is a bad request like any other: 422
        body = api.ErrorBody(
            type="bad_request", message=f"{request.method} {_cut(request.url.path, 200)}: {_cut(str(e.detail), 300)}"
        )
        return _error_response(body, api.ERROR_STATUS["bad_request"] if e.status_code == 400 else e.status_code)
    return _error_response(body, e.status_code)


def internal_message(e: BaseException) -> str:
    """One line for a 500 ``internal`` answer: the type and first line of the error, or of the
    error a Ray task raised (``RayTaskError.cause``), without terminal colour codes, at most 300
    characters (never a traceback or an actor's repr)."""
    import re

    cause = getattr(e, "cause", None)
    if isinstance(cause, BaseException):
        e = cause
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(e))
    first = text.strip().splitlines()[0] if text.strip() else ""
    return _cut(f"{type(e).__name__}: {first}" if first else type(e).__name__, 300)


async def _internal_error(request: Request, e: Exception) -> JSONResponse:
    logger.error("shopcomp serve: %s %s failed: %s", request.method, request.url.path, internal_message(e))
    return _error_response(api.ErrorBody(type="internal", message=internal_message(e)))


class BodyLimit:
    """ASGI middleware: a request body over ``max_bytes`` gets 413 ``bad_request`` before it is
    parsed (by its ``Content-Length`` at once, else as soon as the bytes received pass it)."""

    def __init__(self, app: Any, max_bytes: int = api.MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") != "http":
            return await self.app(scope, receive, send)
        for k, v in scope.get("headers", ()):
            if k == b"content-length" and v.isdigit() and int(v) > self.max_bytes:
                return await _error_response(_too_big_body(self.max_bytes), 413)(scope, receive, send)
        seen = 0
        started = False

        async def counted() -> dict[str, Any]:
            nonlocal seen
            msg = await receive()
            if msg.get("type") == "http.request":
                seen += len(msg.get("body", b""))
                if seen > self.max_bytes:
                    scope[_TOO_BIG] = self.max_bytes
                    raise _BodyTooLarge
            return msg

        async def tracked_send(msg: dict[str, Any]) -> None:
            nonlocal started
            started = started or msg.get("type") == "http.response.start"
            await send(msg)

        try:
            await self.app(scope, counted, tracked_send)
        except _BodyTooLarge:
            if not started:
                await _error_response(_too_big_body(self.max_bytes), 413)(scope, receive, send)


class _BodyTooLarge(Exception):
    pass


_TOO_BIG = "shopcomp.body_too_large"


def _too_big_body(max_bytes: int = api.MAX_BODY_BYTES) -> api.ErrorBody:
    return api.ErrorBody(type="bad_request", message=f"the request body is over {max_bytes} bytes (the limit)")


def install_error_handlers(app: FastAPI) -> None:
    """Give ``app`` the service's error bodies: an API error, a request that does not validate
    (422 ``bad_request`` naming the first bad field; a body that is not JSON says so) and
    Starlette's own 404 / 405; and the request-body limit (:class:`BodyLimit`, 413)."""
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(RequestValidationError, _bad_request)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _internal_error)  # our JSON body, never a plain-text 500
    app.add_middleware(BodyLimit)


def to_response(out: Any) -> Response:
    """The HTTP answer of a deployment method's result: an :class:`api.ErrorBody` raises the
    error it names (its status), anything else is a pydantic model sent as JSON (200), encoded
    by pydantic itself (:func:`~shopping_companion.serve.api.encode_json`: the same values as
    ``json.dumps`` of its dump, floats round-trip exactly, in a fraction of the time)."""
    if isinstance(out, api.ErrorBody):
        raise ApiError(out)
    return Response(api.encode_json(out), media_type="application/json")


async def _auth(credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> None:
    """Refuse a request without the right bearer token when the service has one (401)."""
    token = _TOKEN["token"]
    if token is None:
        return
    given = credentials.credentials if credentials is not None else ""
    if not secrets.compare_digest(given.encode("utf-8"), token.encode("utf-8")):
        what = "wrong" if given else "missing"
        raise ApiError(
            api.ErrorBody(type="unauthorized", message=f"{what} bearer token (Authorization: Bearer <token>)")
        )


#: the dependencies of every protected route: the bearer-token check
PROTECTED = [Depends(_auth)]


#: the error answers documented on every route protected_route adds (the POST routes, /info, /endpoints)
ERRORS = {s: {"model": api.ErrorResponse} for s in (400, 401, 404, 409, 422, 500, 503)}


def protected_route(app: FastAPI, method: str, name: str, **options: Any) -> Callable[[Any], Any]:
    """The decorator of the route ``<method> /v1/<name>`` on ``app`` behind the bearer token
    (:data:`PROTECTED`), documenting the error bodies (:data:`ERRORS`) unless ``options`` give
    ``responses``; the other ``options`` (``response_model``, ...) go to FastAPI's ``api_route``."""
    options.setdefault("responses", ERRORS)
    return app.api_route(f"{api.API_PREFIX}/{name}", methods=[method.upper()], dependencies=PROTECTED, **options)


def set_token(token: str | None) -> None:
    """The bearer token requests must carry in this process (None: none asked for)."""
    _TOKEN["token"] = token
