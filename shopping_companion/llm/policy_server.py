"""Serve any chat backend as an OpenAI-compatible endpoint on this machine (stdlib HTTP server).

:class:`PolicyServer` answers ``POST /v1/chat/completions`` (non-streaming) and ``GET /v1/models``
with the replies of a :class:`~shopping_companion.llm.base.ChatBackend` (anything with
``chat(messages, tools, sampling)``): the CPU pipeline serves its scripted teacher this way, so SFT
collection goes through the real OpenAI client path (:class:`~shopping_companion.llm.openai_backend.OpenAIBackend`)
exactly as it would with a vLLM or hosted teacher.

The request's ``temperature``, ``top_p``, ``top_k`` (a vLLM extension), ``max_tokens`` and
``seed`` become the backend's :class:`~shopping_companion.llm.base.Sampling`. A backend error is
answered as HTTP 400 with an OpenAI-style error body (the client records it and does not retry a
4xx); a body that is not a JSON chat request is a 400 naming the field. It binds 127.0.0.1 by
default and an ephemeral port unless one is given; ``with PolicyServer(...) as srv`` starts and
stops it (``srv.base_url`` is ``http://127.0.0.1:<port>/v1``).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from shopping_companion.llm.base import BackendError, Sampling

__all__ = ["PolicyServer"]

_MAX_BODY = 64 * 1024 * 1024


class PolicyServer:
    """An OpenAI-compatible HTTP endpoint over ``backend`` (module docstring).

    Args:
        backend: the policy; its ``chat(messages, tools, sampling)`` returns an
            :class:`~shopping_companion.llm.base.AssistantMessage`.
        model: the served model name (``/v1/models``; requests may name any model).
        host: interface to bind (default loopback only).
        port: TCP port (0: an ephemeral one).
    """

    def __init__(self, backend: Any, *, model: str = "policy", host: str = "127.0.0.1", port: int = 0) -> None:
        self.backend = backend
        self.model = model
        self.host = host
        self._port = port
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.requests = 0

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("PolicyServer is not started")
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        """``http://<host>:<port>/v1`` (IPv6 hosts in brackets)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/v1"

    def start(self) -> PolicyServer:
        server = self

        class Handler(_Handler):
            owner = server

        self._httpd = ThreadingHTTPServer((self.host, self._port), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="policy-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> PolicyServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        """The ``chat.completion`` object for one request body. Raises ``ValueError`` naming the
        field of a malformed request and :class:`BackendError` when the backend fails."""
        messages = body.get("messages")
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            raise ValueError("messages: must be a list of message objects")
        tools = body.get("tools")
        if tools is not None and not isinstance(tools, list):
            raise ValueError("tools: must be a list of function schemas")
        fields = {
            k: body[k] for k in ("temperature", "top_p", "top_k", "max_tokens", "seed") if body.get(k) is not None
        }
        try:
            sampling = Sampling(**fields)
        except ValueError as e:
            raise ValueError(f"sampling: {' '.join(str(e).split())[:300]}") from None
        reply = self.backend.chat(messages, tools, sampling)
        self.requests += 1
        content = reply.content or ""
        prompt_tokens = reply.prompt_tokens if reply.prompt_tokens is not None else 0
        completion_tokens = reply.completion_tokens if reply.completion_tokens is not None else len(content.split())
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model") or self.model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": reply.finish_reason or "stop",
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }


class _Handler(BaseHTTPRequestHandler):
    owner: PolicyServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet by design
        return

    def _json(self, status: int, obj: Any) -> None:
        data = json.dumps(obj, ensure_ascii=False).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str, kind: str = "invalid_request_error") -> None:
        self._json(status, {"error": {"message": message, "type": kind, "param": None, "code": None}})

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path.rstrip("/") == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": self.owner.model, "object": "model"}]})
        else:
            self._error(404, f"no route {self.path}; routes: GET /v1/models, POST /v1/chat/completions")

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._error(404, f"no route {self.path}; routes: GET /v1/models, POST /v1/chat/completions")
            return
        n = int(self.headers.get("Content-Length") or 0)
        if n > _MAX_BODY:
            self._error(413, f"request body of {n} bytes is over the {_MAX_BODY} byte limit")
            return
        try:
            body = json.loads(self.rfile.read(n) or b"null")
        except ValueError:
            self._error(400, "the request body is not JSON")
            return
        if not isinstance(body, dict):
            self._error(400, "the request body must be a JSON object")
            return
        if body.get("stream"):
            self._error(400, "stream: streaming is not supported by this server; send stream false")
            return
        try:
            self._json(200, self.owner.complete(body))
        except ValueError as e:
            self._error(400, str(e))
        except BackendError as e:
            self._error(400, f"backend: {e}")
        except Exception as e:  # noqa: BLE001 - the client gets a 500 naming the cause, the server goes on
            self._error(500, f"{type(e).__name__}: {str(e)[:300]}", "server_error")
