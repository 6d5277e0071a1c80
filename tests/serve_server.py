"""A real HTTP server on 127.0.0.1 that speaks ``shopcomp serve``'s wire format
(:mod:`shopping_companion.serve.api`) over our REAL in-process services: the BM25
:class:`ProductSearch`, :class:`MemoryStore` per task, the reward spec's judge and rubric. Stdlib
``ThreadingHTTPServer`` (HTTP/1.1 keep-alive), no Ray: the client tests run in the main ``.venv``.

It is not the service (``serve/app.py`` is); it is an independent implementation of the same
contract, so the client is tested against the wire format, plus fault injection:

* ``fail_first=N, fail_mode="reset" | "503" | "ray503" | "500"``: the first N requests (of the
  routes in ``fail_routes``, default all but health) have their connection reset before anything
  is read (``reset``), or get our JSON 503 / 500, or Ray Serve's own plain-text 503;
* ``down_routes``: routes answering Ray's plain 503 for as long as they are in the set (tests add
  and remove names while the server runs); ``gone_routes``: likewise with a plain-text 404, as
  Ray Serve's proxy answers while the application is deleted on shutdown;
* ``token``: every route but ``/v1/health`` needs ``Authorization: Bearer <token>``;
* ``direct=N``: N more servers on 127.0.0.1 play the replicas' direct endpoints
  (:mod:`shopping_companion.serve.direct`): each serves the POST routes and ``GET /v1/direct``
  (its nonce), and ``GET /v1/endpoints`` lists each under the three deployments; ``bad_nonce``
  adds a listed endpoint whose nonce check fails (the client must never use it). Without
  ``direct``, ``/v1/endpoints`` answers ``enabled: false``. :meth:`ServeServer.stop_direct`
  stops one (a replica that died); ``legacy`` drops ``/v1/endpoints`` (a service of an older
  version: 404); ``drop_idle``: the direct servers close every connection after answering,
  without saying so (``Connection: close``), as a replica does with a kept-alive connection that
  sat idle past its timeout (the client must reopen it, not count the endpoint as dead).

Every request is recorded in :attr:`ServeServer.requests` as ``(method, route, authorization)``;
those of the direct servers in :attr:`ServeServer.direct_requests` as ``(port, route)``. Fault
injection never applies to ``/v1/health``, ``/v1/endpoints`` or the direct servers.
"""

from __future__ import annotations

import json
import secrets
import socket
import struct
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from shopping_companion.errors import JudgeFailedError, ToolInputError
from shopping_companion.serve import api
from shopping_companion.types import Session, Task


@dataclass
class Bench:
    """A benchmark the server holds: ``tasks`` and the session ``sessions`` pool (and a ``path``)."""

    tasks: list[Task]
    sessions: dict[str, Session]
    path: str = "(in memory)"
    by_id: dict[str, Task] = field(init=False)

    def __post_init__(self) -> None:
        self.by_id = {t.task_id: t for t in self.tasks}


class _NotLoaded(Exception):
    pass


class ServeServer:
    """See the module docstring. ``products``: a ProductSearch; ``benchmarks``: name -> :class:`Bench`;
    ``embedder``: the MiniLM embedder of the memory stores; ``reward_spec``: any
    ``load_reward_spec`` form (its judge and rubric score)."""

    def __init__(
        self,
        products: Any,
        benchmarks: dict[str, Bench],
        embedder: Any,
        reward_spec: Any = "paper",
        *,
        token: str | None = None,
        fail_first: int = 0,
        fail_mode: str = "503",
        fail_routes: set[str] | None = None,
        spec_json: str | None = None,
        direct: int = 0,
        bad_nonce: bool = False,
        legacy: bool = False,
        drop_idle: bool = False,
    ) -> None:
        from shopping_companion.pipeline import product_lookup
        from shopping_companion.rewards.spec import load_reward_spec

        self.products = products
        self.benchmarks = benchmarks
        self.embedder = embedder
        self.spec = load_reward_spec(reward_spec)
        self.spec_json = spec_json or self.spec.to_json()
        lookup = product_lookup(products)
        self.judges = {n: self.spec.build_judge(lookup, b.sessions, embedder) for n, b in benchmarks.items()}
        self.rubric = self.spec.build_rubric({"lookup": lookup})
        self.token = token
        self.fail_left = fail_first
        self.fail_mode = fail_mode
        self.fail_routes = fail_routes
        self.down_routes: set[str] = set()
        self.gone_routes: set[str] = set()
        self.failed = 0
        self.requests: list[tuple[str, str, str | None]] = []
        self._mem: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self.n_direct = direct
        self.legacy = legacy
        self.bad_nonce = bad_nonce
        self.drop_idle = drop_idle
        self.direct_requests: list[tuple[int, str]] = []
        self._direct: list[tuple[ThreadingHTTPServer, str]] = []  # (server, nonce)

    # ------------------------------------------------------------------ lifecycle
    @property
    def base_url(self) -> str:
        assert self._httpd is not None
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def __enter__(self) -> "ServeServer":
        self._httpd = self._start(self._handler(None))
        for _ in range(self.n_direct):
            nonce = secrets.token_hex(8)
            d = self._start(self._handler(nonce))
            d._drop_idle = self.drop_idle  # type: ignore[attr-defined]
            self._direct.append((d, nonce))
        return self

    def _handler(self, nonce: str | None) -> type:
        srv = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: Any) -> None:
                pass

            def do_GET(self) -> None:
                srv._handle(self, "GET", nonce)

            def do_POST(self) -> None:
                srv._handle(self, "POST", nonce)

        return Handler

    def _start(self, handler: type) -> ThreadingHTTPServer:

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def process_request_thread(self, request: Any, client_address: Any) -> None:
                try:
                    super().process_request_thread(request, client_address)
                finally:
                    from shopping_companion.catalog.jvm import detach_thread

                    detach_thread()  # the thread read the Lucene index

        httpd = Server(("127.0.0.1", 0), handler)
        threading.Thread(target=httpd.serve_forever, daemon=True, name="serve-test-server").start()
        return httpd

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def stop(self) -> None:
        for i in range(len(self._direct)):
            self.stop_direct(i)
        if self._httpd is not None:
            self._httpd._stopped = True  # type: ignore[attr-defined]  # kept-alive connections die too
            self._httpd.shutdown()
            self._httpd.server_close()

    def direct_urls(self) -> list[str]:
        """``http://127.0.0.1:port`` of each direct server (stopped ones included)."""
        return [f"http://127.0.0.1:{d.server_address[1]}" for d, _ in self._direct]

    def stop_direct(self, i: int) -> None:
        """Stop direct server ``i`` (its port then refuses connections); it stays listed."""
        d, _ = self._direct[i]
        if getattr(d, "_stopped", False):
            return
        d._stopped = True  # type: ignore[attr-defined]
        d.shutdown()
        d.server_close()

    def routes(self, name: str) -> int:
        """Requests of route ``name`` received so far."""
        return sum(1 for _, r, _ in self.requests if r == name)

    # ------------------------------------------------------------------ request handling
    def _send(self, h: BaseHTTPRequestHandler, status: int, body: Any, content_type: str = "application/json") -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        h.send_response(status)
        h.send_header("Content-Type", content_type)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)
        if getattr(h.server, "_drop_idle", False):
            h.close_connection = True  # closed after this answer, the client not told

    def _error(self, h: BaseHTTPRequestHandler, type_: str, message: str, field_: str | None = None) -> None:
        body = api.ErrorResponse(error=api.ErrorBody(type=type_, message=message, field=field_))  # type: ignore[arg-type]
        self._send(h, api.ERROR_STATUS[type_], body.model_dump(mode="json"))

    def _handle(self, h: BaseHTTPRequestHandler, method: str, nonce: str | None = None) -> None:
        if getattr(h.server, "_stopped", False):  # a dead replica: kept-alive connections die too
            h.close_connection = True
            h.connection.close()
            return
        route = h.path.split("?")[0].removeprefix(api.API_PREFIX + "/")
        auth = h.headers.get("Authorization")
        with self._lock:
            if nonce is not None:
                self.direct_requests.append((h.server.server_address[1], route))
            else:
                self.requests.append((method, route, auth))
            inject = (
                nonce is None
                and self.fail_left > 0
                and route not in ("health", "endpoints")
                and (self.fail_routes is None or route in self.fail_routes)
            )
            if inject:
                self.fail_left -= 1
                self.failed += 1
        if inject and self.fail_mode == "reset":
            h.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            h.close_connection = True
            h.connection.close()
            return
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        if nonce is None and route in self.gone_routes:
            return self._send(h, 404, b"Path '/v1/%s' not found." % route.encode(), "text/plain")
        if inject or route in self.down_routes:
            mode = "ray503" if route in self.down_routes else self.fail_mode
            if mode == "ray503":
                return self._send(h, 503, b"Service Unavailable", "text/plain")
            return self._error(h, "not_ready" if mode == "503" else "internal", f"injected {mode}")
        if self.token and route != "health" and auth != f"Bearer {self.token}":
            return self._error(h, "unauthorized", "missing or wrong bearer token")
        try:
            body = json.loads(raw) if raw else {}
            if nonce is not None and method == "GET" and route == "direct":
                return self._send(h, 200, {"nonce": nonce})
            if nonce is not None and method == "GET":
                raise _NotLoaded(f"no route {method} {route} on a direct endpoint")
            out = self._route(method, route, body)
        except ToolInputError as e:
            return self._error(h, "tool_input", str(e), e.field)
        except ValidationError as e:
            return self._error(h, "bad_request", str(e).splitlines()[0])
        except _NotLoaded as e:
            return self._error(h, "not_loaded", str(e))
        except JudgeFailedError as e:
            return self._error(h, "judge_failed", str(e))
        except Exception as e:  # noqa: BLE001 - a server fault
            return self._error(h, "internal", f"{type(e).__name__}: {e}")
        self._send(h, 200, out.model_dump(mode="json"))

    def _bench(self, name: str) -> Bench:
        if name not in self.benchmarks:
            raise _NotLoaded(f"benchmark {name!r} is not loaded (loaded: {sorted(self.benchmarks)})")
        return self.benchmarks[name]

    def _memory(self, bench: str, task_id: str) -> Any:
        from shopping_companion.memory.store import MemoryStore

        b = self._bench(bench)
        if task_id not in b.by_id:
            raise _NotLoaded(f"task {task_id!r} is not in benchmark {bench!r}")
        key = (bench, task_id)
        with self._lock:
            store = self._mem.get(key)
        if store is None:
            store = MemoryStore.from_pool(b.sessions, b.by_id[task_id].history, self.embedder)
            with self._lock:
                self._mem[key] = store
        return store

    def _route(self, method: str, route: str, body: dict[str, Any]) -> Any:
        from shopping_companion.assembly.data import benchmark_tasks_sha256

        if method == "GET" and route == "health":
            return api.HealthResponse()
        if method == "GET" and route == "endpoints" and not self.legacy:
            entries = [
                api.DirectEndpoint(deployment=dep, url=url, replica=f"replica-{i}", node_ip="127.0.0.1", nonce=n)
                for i, (url, (_, n)) in enumerate(zip(self.direct_urls(), self._direct))
                for dep in ("ProductTools", "MemoryTools", "Scoring")
            ]
            if self.bad_nonce:  # listed, but its nonce check fails: the main server has no /v1/direct
                entries += [
                    api.DirectEndpoint(deployment=dep, url=self.base_url, replica="impostor", node_ip="x", nonce="x")
                    for dep in ("ProductTools", "MemoryTools", "Scoring")
                ]
            return api.EndpointsResponse(enabled=bool(self._direct or self.bad_nonce), endpoints=entries)
        if method == "GET" and route == "ready":
            return api.ReadyResponse(ready=True, deployments={"tools": "ready", "judge": "ready"})
        if method == "GET" and route == "info":
            return api.InfoResponse(
                package_version="test",
                benchmarks=[
                    api.BenchmarkInfo(
                        name=n,
                        path=b.path,
                        n_tasks=len(b.tasks),
                        n_sessions=len(b.sessions),
                        tasks_sha256=benchmark_tasks_sha256(b.tasks),
                    )
                    for n, b in self.benchmarks.items()
                ],
                catalog=api.CatalogInfo(n_products=len(self.products), index_dir="(test)"),
                reward=api.RewardInfo(
                    spec=self.spec_json,
                    judge=next(iter(self.judges.values())).name if self.judges else "rule",
                    rubric=self.rubric.describe(),
                ),
                memory_cache=256,
            )
        if method != "POST":
            raise _NotLoaded(f"no route {method} {route}")
        if route == "product_search":
            r = api.ProductSearchRequest.model_validate(body)
            hits = self.products.search(
                r.query, shop_id=r.shop_id, min_price=r.min_price, max_price=r.max_price, top_k=r.top_k
            )
            return api.ProductSearchResponse(results=hits)
        if route == "product_view":
            r = api.ProductViewRequest.model_validate(body)
            products, unknown = self.products.view(r.product_ids)
            return api.ProductViewResponse(products=products, unknown=unknown)
        if route == "mem_search":
            r = api.MemSearchRequest.model_validate(body)
            return api.MemSearchResponse(results=self._memory(r.benchmark, r.task_id).search(r.queries, top_k=r.top_k))
        if route == "mem_view":
            r = api.MemViewRequest.model_validate(body)
            sessions, unknown = self._memory(r.benchmark, r.task_id).view(r.session_ids)
            return api.MemViewResponse(sessions=sessions, unknown=unknown)
        if route == "judge":
            r = api.JudgeRequest.model_validate(body)
            self._bench(r.benchmark)
            return api.JudgeResponse(verdict=self.judges[r.benchmark].judge(r.task, r.trajectory))
        if route == "reward":
            r = api.RewardRequest.model_validate(body)
            self._bench(r.benchmark)
            return api.RewardResponse(reward=self.rubric(r.task, r.trajectory, r.verdict))
        raise _NotLoaded(f"no route {method} {route}")


def bench_from_dir(path: str | Path) -> Bench:
    """A :class:`Bench` of a benchmark directory written by ``shopcomp synth``."""
    from shopping_companion.benchmark.synth import load_benchmark

    b = load_benchmark(Path(path))
    return Bench(list(b.tasks), dict(b.sessions), str(path))


def result_lines(path) -> list[dict]:
    """The result lines of ``path`` without what differs between two runs of the same episodes
    (``wall_s``, each step's ``latency_s``), sorted by (task, trial, mode, hint)."""
    out = []
    for line in Path(path).read_text().splitlines():
        d = json.loads(line)
        d.pop("wall_s", None)
        for st in d.get("stages", []):
            for step in st["trajectory"].get("steps", []):
                step.pop("latency_s", None)
        out.append(d)
    return sorted(out, key=lambda d: (d["task_id"], d["trial"], d["mode"], d["hint"]))
