"""Direct endpoints of ``shopcomp serve`` replicas (docs/cluster.md, "Request path"): the tool,
judge and reward routes served by each ``ProductTools`` / ``MemoryTools`` / ``Scoring`` replica
itself, over plain HTTP, next to Ray Serve's request path.

Why: a call through Ray Serve crosses its HTTP proxy, the ingress replica and one more replica,
two Ray actor calls plus Serve's routing. Measured on a 2-CPU machine that is 40-53 ms per tool
call (a bare Ray actor call alone is 1.5 ms there, a Serve hello-world 11 ms), while a FastAPI app
under uvicorn answers in about 1 ms. So every replica also runs a small uvicorn server, in a
daemon thread of its own process, with the same routes, models, bearer token and error bodies as
the ingress (:func:`route_table`, :func:`install_error_handlers`); clients
(:class:`~shopping_companion.serve.client.ServiceClient`) learn these endpoints from
``GET /v1/endpoints`` and send tool calls straight to a replica, falling back to the Serve path
when a replica does not answer. Ray Serve still places, restarts, health-checks and scales the
replicas; the direct server lives and dies with its replica.

Discovery: each replica registers ``{deployment, url, replica, node_ip, nonce}`` with one named
actor per application (:class:`EndpointRegistry`, no CPUs reserved). ``GET /v1/endpoints``
(ingress) lists the entries whose replica actor is still alive. A client checks an endpoint
before its first use: ``GET <url>/v1/direct`` must return the entry's ``nonce``, so a loopback
address advertised by a replica on another node (or any port reused by another process) is never
used.

Binding: a service bound to a loopback host binds its direct servers to ``127.0.0.1``; any other
host binds them to ``0.0.0.0`` (``::``, dual-stack, for an IPv6 host: all interfaces of the
replica's node; a token is then required, as for the service) and advertises the node's IP
address. Ports are ephemeral (chosen by the OS).
"""

import asyncio
import logging
import secrets
import socket
import threading
from typing import Any, Callable

from shopping_companion.serve import api

__all__ = ["DirectServer", "EndpointRegistry", "ROUTES", "deployment_of", "registry_name", "route_table"]

logger = logging.getLogger("ray.serve")

#: Deployment (class name) -> the POST routes its replicas serve directly (:data:`api.POST_ROUTES`).
ROUTES: dict[str, tuple[str, ...]] = {
    dep: tuple(r for r, route in api.POST_ROUTES.items() if route.deployment == dep)
    for dep in dict.fromkeys(route.deployment for route in api.POST_ROUTES.values())
}


def deployment_of(route: str) -> str | None:
    """The deployment whose replicas serve the POST ``route`` directly, or None."""
    found = api.POST_ROUTES.get(route.strip("/"))
    return found.deployment if found is not None else None


def registry_name(app_name: str) -> str:
    """The Ray actor name of the endpoint registry of the Serve application ``app_name``."""
    return f"shopcomp-endpoints-{app_name}"


def route_table(instance: Any, deployment: str) -> dict[str, tuple[type, Callable[..., Any]]]:
    """``route -> (request model, bound coroutine method)`` of ``deployment`` on ``instance``."""
    return {
        r: (api.POST_ROUTES[r].request, getattr(instance, f"direct_{r}", None) or getattr(instance, r))
        for r in ROUTES[deployment]
    }


class EndpointRegistry:
    """The direct endpoints of one application's replicas (a named Ray actor; module docstring).
    Entries: ``{deployment, url, replica, node_ip, nonce}``; ``replica`` is the Serve replica's
    actor name (namespace ``serve``), used to drop entries of replicas that died."""

    def __init__(self) -> None:
        self._entries: dict[str, dict[str, str]] = {}

    def register(self, entry: dict[str, str]) -> None:
        self._entries[entry["replica"]] = dict(entry)

    def unregister(self, replica: str) -> None:
        self._entries.pop(replica, None)

    def list(self) -> list[dict[str, str]]:
        """Entries of replicas whose actor is alive (dead ones are dropped)."""
        import ray

        alive = []
        for name, e in list(self._entries.items()):
            try:
                ray.get_actor(name, namespace="serve")
            except ValueError:
                self._entries.pop(name, None)
                continue
            alive.append(e)
        return alive


def _bind_host(service_host: str) -> str:
    """``127.0.0.1`` for a loopback service; ``::`` (IPv6 and, dual-stack, IPv4) for a service on
    an IPv6 address; else ``0.0.0.0``."""
    from shopping_companion.serve.config import is_loopback

    if is_loopback(service_host):
        return "127.0.0.1"
    return "::" if ":" in service_host.strip("[]") else "0.0.0.0"


def _advertised_host(bind_host: str) -> str:
    if bind_host == "127.0.0.1":
        return bind_host
    import ray

    return ray.util.get_node_ip_address()


def _make_app(routes: dict[str, tuple[type, Callable[..., Any]]], nonce: str) -> Any:
    """The FastAPI app of one replica's direct server: ``GET /v1/direct`` (the nonce, no token)
    and a ``POST /v1/<route>`` per route, with the ingress's token check and error bodies."""
    from fastapi import FastAPI
    from fastapi.responses import Response

    from shopping_companion.serve.http import install_error_handlers, protected_route, to_response

    app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)
    app.state.direct_routes = [f"{api.API_PREFIX}/{r}" for r in routes]  # named by its 404 answer
    install_error_handlers(app)

    @app.get(f"{api.API_PREFIX}/direct")
    async def direct() -> dict[str, str]:
        return {"nonce": nonce}

    def add(route: str, model: type, method: Callable[..., Any]) -> None:
        async def handler(req: Any) -> Response:
            return to_response(await method(req))

        handler.__annotations__ = {"req": model, "return": Response}
        handler.__name__ = f"direct_{route}"
        protected_route(app, "post", route)(handler)

    for route, (model, method) in routes.items():
        add(route, model, method)
    return app


def _new_loop() -> asyncio.AbstractEventLoop:
    """uvloop's event loop when it is installed (Ray Serve brings it), else asyncio's."""
    try:
        import uvloop

        return uvloop.new_event_loop()
    except ImportError:
        return asyncio.new_event_loop()


class DirectServer:
    """A uvicorn server of one replica's routes in a daemon thread (module docstring).

    Args:
        routes: :func:`route_table` of the replica.
        service_host: the service's ``host`` (loopback -> bind ``127.0.0.1``; else ``0.0.0.0``).

    Attributes: ``url`` (``http://host:port``, what clients use), ``nonce`` (random, what
    ``GET /v1/direct`` returns), ``loop`` (the server thread's event loop, once started).
    Raises ``OSError`` when no port can be bound and ``RuntimeError`` when the server does not
    start within 30 s.
    """

    def __init__(self, routes: dict[str, tuple[type, Callable[..., Any]]], service_host: str) -> None:
        import uvicorn

        bind = _bind_host(service_host)
        self.sock = socket.socket(socket.AF_INET6 if ":" in bind else socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if ":" in bind:
            self.sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)  # IPv4 clients too
        self.sock.bind((bind, 0))
        self.sock.listen(1024)
        port = self.sock.getsockname()[1]
        host = _advertised_host(bind)
        self.url = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
        self.nonce = secrets.token_hex(16)
        config = uvicorn.Config(
            _make_app(routes, self.nonce),
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_keep_alive=30,
            limit_concurrency=4096,
        )
        self.server = uvicorn.Server(config)
        self.loop: asyncio.AbstractEventLoop | None = None
        started = threading.Event()

        def run() -> None:
            self.loop = _new_loop()
            asyncio.set_event_loop(self.loop)
            self.loop.call_soon(started.set)
            try:
                self.loop.run_until_complete(self.server.serve(sockets=[self.sock]))
            except Exception:  # noqa: BLE001 - the replica keeps serving through Serve
                logger.exception("shopcomp serve: the direct server of this replica stopped")

        self.thread = threading.Thread(target=run, name="shopcomp-direct", daemon=True)
        self.thread.start()
        if not started.wait(30.0):
            raise RuntimeError("the direct server did not start within 30 s")

    def entry(self, deployment: str, replica: str) -> dict[str, str]:
        """The registry entry of this server for ``deployment``'s replica ``replica``."""
        import ray

        return {
            "deployment": deployment,
            "url": self.url,
            "replica": replica,
            "node_ip": ray.util.get_node_ip_address(),
            "nonce": self.nonce,
        }

    def stop(self) -> None:
        """Ask the server to exit (it finishes open requests first)."""
        self.server.should_exit = True
