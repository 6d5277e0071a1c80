"""A small, scripted, OpenAI-compatible HTTP server for tests (stdlib only).

This is a real HTTP server on ``127.0.0.1`` (ephemeral port) that speaks the subset of the OpenAI
REST API a chat backend uses: ``POST /v1/chat/completions`` and ``GET /v1/models``. It does not
know anything about our client: tests point the real ``openai`` client (through
:class:`shopping_companion.llm.openai_backend.OpenAIBackend`) at it and check what went over the wire.

The server is *scripted*. Each ``POST /v1/chat/completions`` takes the next entry of the script (a
list), or calls the script (a callable ``(request_json) -> spec``). A spec is one of:

* ``"some text"``: an assistant message with that content (it may contain ``<tool_call>...``
  text; it is sent verbatim).
* ``{"content": ..., "reasoning_content": ..., "tool_calls": [...], "finish_reason": ...,
  "usage": {...}}``: any subset. ``tool_calls`` entries are ``{"name": ..., "arguments": str |
  dict, "id": optional}`` (a dict is JSON-encoded; a string is sent as is, even if malformed;
  ``"id": None`` sends the call without an ``id`` field, ``""`` with an empty one).
  ``finish_reason`` defaults to ``"tool_calls"`` when there are tool calls, else ``"stop"``.
  ``usage`` overrides the computed token counts; ``"usage": None`` omits the field.
* ``{"status": 500}`` / ``{"status": 429}`` (any non-2xx code): an OpenAI-style error body;
  optional ``"message"`` and ``"headers"`` (e.g. ``{"retry-after": "0"}``).
* ``{"delay_s": 2.0}``: wait that long before answering (to trigger client timeouts). Any other
  keys in the same dict are then served as above; with none, the answer is ``"(delayed)"``.
* ``{"raw": "not json"}``: send that body verbatim with status 200 (or ``"status"``) and
  ``Content-Type: application/json`` (or ``"content_type"``).
* ``{"status": 400, "message": "...", "code": "context_length_exceeded"}``: an error body with
  that ``code`` (OpenAI's context-length refusal; vLLM sends only the message).

Hostile modes (the fault suite's servers):

* ``{"hang": True}``: read the request, then never answer (until the server stops).
* ``{"trickle_s": 2.0, ...}``: send the status line and headers at once (with the full
  ``Content-Length``), then the body one byte every ``trickle_s`` seconds; with
  ``"trickle_headers": True`` the status line and headers trickle too. Other keys: as above.
* ``{"echo_key": 12}``: HTTP 401 (or ``"status"``) whose message and ``X-Echo`` header echo the
  first 12 characters of the bearer token the client sent (``None``: the whole token), the way
  providers echo "Incorrect API key provided: sk-abc...".
* ``ScriptedOpenAIServer(script, strict_tool_ids=True)``: every chat request's messages are
  checked the way OpenAI checks them before the script is consulted (:func:`tool_id_problem`): an
  assistant message's ``tool_calls`` ids must be non-empty and distinct, and the tool messages
  right after it must answer each of them exactly once; a tool message anywhere else, or with an
  id its assistant message does not have, is refused. A request that breaks a rule gets HTTP 400
  ``invalid_request_error`` with OpenAI's wording (recorded in
  :attr:`ScriptedOpenAIServer.rejected`); it consumes no script entry.
* ``ScriptedOpenAIServer(script, refuse_first=N)``: the first ``N`` TCP connections are reset
  (``SO_LINGER`` 0) before anything is read, like a server that is down and comes back;
  :attr:`ScriptedOpenAIServer.refused` counts them.

When a list script runs out the server answers HTTP 500 with a message saying so (and records it in
:attr:`ScriptedOpenAIServer.errors`), so a test that sends more requests than it scripted fails
loudly instead of hanging.

Every request is recorded (:attr:`requests`, :attr:`bodies`, :attr:`authorizations`) so tests can
assert exactly what the client sent.

Usage::

    with ScriptedOpenAIServer(["hello", {"status": 500}]) as srv:
        client = OpenAI(base_url=srv.base_url, api_key="k")
        ...
        assert srv.bodies[0]["temperature"] == 0.6
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ResponseSpec = str | dict[str, Any]
Script = Iterable[ResponseSpec] | Callable[[dict[str, Any]], ResponseSpec]

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_exceeded",
}


@dataclass
class RecordedRequest:
    """One HTTP request the server received."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any = None  # parsed JSON, or the raw text when it was not JSON, or None
    received_at: float = field(default_factory=time.monotonic)

    @property
    def authorization(self) -> str | None:
        return self.headers.get("authorization")


def _count_tokens(text: str | None) -> int:
    return len(text.split()) if text else 0


def _prompt_tokens(body: dict[str, Any]) -> int:
    total = 0
    for msg in body.get("messages") or []:
        if not isinstance(msg, dict):
            continue
        content = msg.get("content")
        if isinstance(content, str):
            total += _count_tokens(content)
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    total += _count_tokens(part["text"])
        for call in msg.get("tool_calls") or []:
            fn = (call.get("function") or {}) if isinstance(call, dict) else {}
            total += _count_tokens(str(fn.get("arguments") or ""))
    return total


class ScriptedOpenAIServer:
    """An OpenAI-compatible HTTP server answering from a script; see the module docstring."""

    def __init__(
        self,
        script: Script,
        *,
        model: str = "scripted-model",
        host: str = "127.0.0.1",
        port: int = 0,
        embed: Callable[[str], list[float]] | None = None,
        refuse_first: int = 0,
        strict_tool_ids: bool = False,
    ) -> None:
        if callable(script):
            self._script_fn: Callable[[dict[str, Any]], ResponseSpec] | None = script
            self._script: list[ResponseSpec] = []
        else:
            self._script_fn = None
            self._script = list(script)
        self.model = model
        #: text -> vector for POST /v1/embeddings (no route without it)
        self.embed = embed
        #: connections still to reset before the server answers (dead-and-back)
        self.refuse_first = int(refuse_first)
        #: connections reset so far
        self.refused = 0
        #: check tool-call ids like OpenAI (module docstring)
        self.strict_tool_ids = bool(strict_tool_ids)
        #: the messages of the requests refused for their tool-call ids
        self.rejected: list[str] = []
        self._host = host
        self._port = port
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._next = 0
        self.requests: list[RecordedRequest] = []
        self.errors: list[str] = []
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ----------------------------------------------------------------- lifecycle
    def start(self) -> ScriptedOpenAIServer:
        if self._httpd is not None:
            return self
        server = self

        class Handler(_Handler):
            owner = server

        class Server(ThreadingHTTPServer):
            def verify_request(self, request: Any, client_address: Any) -> bool:  # noqa: ANN401
                with server._lock:
                    refuse = server.refused < server.refuse_first
                    if refuse:
                        server.refused += 1
                if refuse:  # RST instead of FIN: the client sees a reset connection
                    request.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                return not refuse

        self._stop.clear()
        self._httpd = Server((self._host, self._port), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is None:
            return
        self._stop.set()  # wakes handlers sleeping on a delay fault
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = None
        self._thread = None

    def __enter__(self) -> ScriptedOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ----------------------------------------------------------------- inspection
    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("server is not running")
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{self._host}:{self.port}"

    @property
    def base_url(self) -> str:
        """The URL to give an OpenAI client (ends in ``/v1``)."""
        return f"{self.url}/v1"

    @property
    def chat_requests(self) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.path.rstrip("/").endswith("/chat/completions")]

    @property
    def bodies(self) -> list[Any]:
        """The JSON bodies of the chat-completion requests, in arrival order."""
        return [r.body for r in self.chat_requests]

    @property
    def authorizations(self) -> list[str | None]:
        """The ``Authorization`` header of every chat-completion request, in arrival order."""
        return [r.authorization for r in self.chat_requests]

    @property
    def remaining(self) -> int:
        """Script entries not yet consumed (0 for a callable script)."""
        with self._lock:
            return max(0, len(self._script) - self._next)

    # ----------------------------------------------------------------- internals
    def _record(self, req: RecordedRequest) -> None:
        with self._lock:
            self.requests.append(req)

    def _next_spec(self, body: dict[str, Any]) -> ResponseSpec:
        if self._script_fn is not None:
            return self._script_fn(body)
        with self._lock:
            if self._next >= len(self._script):
                msg = f"scripted server: script exhausted after {len(self._script)} responses"
                self.errors.append(msg)
                return {"status": 500, "message": msg}
            spec = self._script[self._next]
            self._next += 1
            return spec

    def _completion(self, body: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
        content = spec.get("content")
        message: dict[str, Any] = {"role": "assistant", "content": content}
        for key in ("reasoning_content", "reasoning"):
            if key in spec:
                message[key] = spec[key]
        calls = []
        for i, call in enumerate(spec.get("tool_calls") or []):
            args = call.get("arguments", "{}")
            if not isinstance(args, str):
                args = json.dumps(args)
            entry = {
                "id": call.get("id", f"call_{uuid.uuid4().hex[:12]}_{i}"),
                "type": "function",
                "function": {"name": call["name"], "arguments": args},
            }
            if entry["id"] is None:  # "id": None in the spec: a call without an id field
                del entry["id"]
            calls.append(entry)
        if calls:
            message["tool_calls"] = calls
        finish = spec.get("finish_reason", "tool_calls" if calls else "stop")
        out: dict[str, Any] = {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model") or self.model,
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
        }
        if "usage" in spec:
            if spec["usage"] is not None:
                out["usage"] = spec["usage"]
        else:
            completion = _count_tokens(content) + sum(_count_tokens(c["function"]["arguments"]) for c in calls)
            prompt = _prompt_tokens(body)
            out["usage"] = {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            }
        return out


def tool_id_problem(messages: Any) -> str | None:
    """What an OpenAI-strict server says about the tool-call ids of a request's ``messages``, or
    None when they are valid: each assistant ``tool_calls`` id is non-empty and distinct, the tool
    messages that directly follow that assistant message answer each of its ids exactly once, and
    no tool message answers an id its assistant message lacks or stands anywhere else."""
    if not isinstance(messages, list):
        return None
    open_ids: list[str] | None = None  # ids of the last assistant message still to be answered
    open_at = -1

    def unanswered() -> str:
        return (
            "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
            f"'tool_call_id'. The following tool_call_ids did not have response messages: {', '.join(open_ids or [])} "
            f"(messages.[{open_at}].role)."
        )

    for i, m in enumerate(messages):
        role = m.get("role") if isinstance(m, dict) else None
        if role == "tool":
            cid = m.get("tool_call_id")
            if open_ids is None:
                return (
                    f"Invalid parameter: messages with role 'tool' must be a response to a preceeding message "
                    f"with 'tool_calls' (messages.[{i}].role)."
                )
            if cid not in open_ids:
                return f"Invalid parameter: 'tool_call_id' of '{cid}' not found in 'tool_calls' of previous message."
            open_ids.remove(cid)
            continue
        if open_ids:
            return unanswered()
        open_ids = None
        if role == "assistant" and m.get("tool_calls"):
            ids = [c.get("id") if isinstance(c, dict) else None for c in m["tool_calls"]]
            for k, cid in enumerate(ids):
                if not isinstance(cid, str) or not cid:
                    return (
                        f"Invalid 'messages[{i}].tool_calls[{k}].id': empty string. Expected a string with "
                        "minimum length 1, but got an empty string instead."
                    )
            dup = sorted({c for c in ids if ids.count(c) > 1})
            if dup:
                return f"Invalid 'messages[{i}].tool_calls': duplicate tool call id(s) {', '.join(dup)}."
            open_ids, open_at = list(ids), i
    return unanswered() if open_ids else None


class _Handler(BaseHTTPRequestHandler):
    owner: ScriptedOpenAIServer
    protocol_version = "HTTP/1.0"  # one request per connection: nothing lingers after stop()
    server_version = "ScriptedOpenAI/1.0"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - keep tests quiet
        pass

    # ---------------------------------------------------------------- helpers
    def _send(
        self, status: int, payload: bytes, content_type: str = "application/json", headers: dict[str, str] | None = None
    ) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            for k, v in (headers or {}).items():
                self.send_header(k, str(v))
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
            pass  # the client gave up (e.g. it timed out on a delay fault)

    def _send_json(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
        self._send(status, json.dumps(obj).encode("utf-8"), headers=headers)

    def _send_error_json(
        self, status: int, message: str, headers: dict[str, str] | None = None, code: str | None = None
    ) -> None:
        err_type = _ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
        self._send_json(
            status, {"error": {"message": message, "type": err_type, "param": None, "code": code}}, headers=headers
        )

    def _trickle(
        self, status: int, payload: bytes, every_s: float, headers_too: bool, content_type: str = "application/json"
    ) -> None:
        """Send the response one byte every ``every_s`` seconds (body only, or everything)."""
        head = (
            f"HTTP/1.0 {status} {HTTPStatus(status).phrase}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(payload)}\r\n\r\n"
        ).encode("ascii")
        try:
            if not headers_too:
                self.wfile.write(head)
                self.wfile.flush()
                data = payload
            else:
                data = head + payload
            for i in range(len(data)):
                self.wfile.write(data[i : i + 1])
                self.wfile.flush()
                if self.owner._stop.wait(every_s):
                    return
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, OSError):
            pass  # the client gave up

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    # ---------------------------------------------------------------- routes
    def do_GET(self) -> None:  # noqa: N802
        self.owner._record(RecordedRequest("GET", self.path, {k.lower(): v for k, v in self.headers.items()}))
        if self.path.rstrip("/").split("?")[0] in ("/v1/models", "/models"):
            self._send_json(
                200,
                {
                    "object": "list",
                    "data": [{"id": self.owner.model, "object": "model", "created": 0, "owned_by": "tests"}],
                },
            )
        else:
            self._send_error_json(404, f"no route for GET {self.path}")

    def do_POST(self) -> None:  # noqa: N802
        raw = self._read_body()
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        self.owner._record(RecordedRequest("POST", self.path, {k.lower(): v for k, v in self.headers.items()}, body))
        path = self.path.split("?")[0].rstrip("/")
        if path in ("/v1/embeddings", "/embeddings") and self.owner.embed is not None:
            self._embeddings(body)
            return
        if path not in ("/v1/chat/completions", "/chat/completions"):
            self._send_error_json(404, f"no route for POST {self.path}")
            return
        if not isinstance(body, dict):
            self._send_error_json(400, "request body is not a JSON object")
            return
        if self.owner.strict_tool_ids:
            problem = tool_id_problem(body.get("messages"))
            if problem is not None:
                with self.owner._lock:
                    self.owner.rejected.append(problem)
                self._send_error_json(400, problem)
                return
        try:
            spec = self.owner._next_spec(body)
        except Exception as exc:  # a broken callable script: report it, do not kill the thread
            msg = f"scripted server: script raised {type(exc).__name__}: {exc}"
            self.owner.errors.append(msg)
            self._send_error_json(500, msg)
            return
        self._serve(body, spec)

    def _embeddings(self, body: Any) -> None:
        """OpenAI embeddings response for ``body["input"]`` (a string or a list of strings), vectors
        from the owner's ``embed`` function, returned in reverse order to exercise ``index``."""
        if not isinstance(body, dict) or not isinstance(body.get("input"), (str, list)):
            self._send_error_json(400, "input: must be a string or a list of strings")
            return
        inputs = [body["input"]] if isinstance(body["input"], str) else body["input"]
        data = [
            {"object": "embedding", "index": i, "embedding": list(self.owner.embed(str(t)))}
            for i, t in enumerate(inputs)
        ]
        self._send_json(
            200,
            {
                "object": "list",
                "data": data[::-1],
                "model": body.get("model", self.owner.model),
                "usage": {"prompt_tokens": 0, "total_tokens": 0},
            },
        )

    def _serve(self, body: dict[str, Any], spec: ResponseSpec) -> None:
        if isinstance(spec, str):
            spec = {"content": spec}
        if not isinstance(spec, dict):
            msg = f"scripted server: bad spec {spec!r}"
            self.owner.errors.append(msg)
            self._send_error_json(500, msg)
            return
        spec = dict(spec)
        if spec.pop("hang", False):
            self.owner._stop.wait()  # never answers while the server runs
            return
        if "echo_key" in spec:
            n = spec.pop("echo_key")
            auth = self.headers.get("Authorization") or ""
            token = auth.split(" ", 1)[1] if " " in auth else auth
            shown = token if n is None else token[: int(n)]
            self._send_error_json(
                int(spec.get("status", 401)),
                f"Incorrect API key provided: {shown}...",
                headers={"X-Echo": f"Bearer {shown}"},
            )
            return
        trickle = spec.pop("trickle_s", None)
        if trickle:
            headers_too = bool(spec.pop("trickle_headers", False))
            if not spec:
                spec = {"content": "(trickled)"}
            status = int(spec.get("status", 200))
            payload = json.dumps(self.owner._completion(body, spec)).encode("utf-8")
            self._trickle(status, payload, float(trickle), headers_too)
            return
        delay = spec.pop("delay_s", None)
        if delay:
            if self.owner._stop.wait(float(delay)):
                return  # server is stopping
            if not spec:
                spec = {"content": "(delayed)"}
        headers = spec.get("headers")
        if "raw" in spec:
            raw = spec["raw"]
            payload = raw if isinstance(raw, bytes) else str(raw).encode("utf-8")
            self._send(
                int(spec.get("status", 200)),
                payload,
                content_type=spec.get("content_type", "application/json"),
                headers=headers,
            )
            return
        status = int(spec.get("status", 200))
        if status >= 300:
            try:
                phrase = HTTPStatus(status).phrase
            except ValueError:
                phrase = "error"
            message = spec.get("message") or f"scripted error {status} ({phrase})"
            self._send_error_json(status, message, headers=headers, code=spec.get("code"))
            return
        self._send_json(status, self.owner._completion(body, spec), headers=headers)


__all__ = ["RecordedRequest", "ResponseSpec", "Script", "ScriptedOpenAIServer", "tool_id_problem"]
