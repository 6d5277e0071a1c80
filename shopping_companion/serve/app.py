"""The Ray Serve application of ``shopcomp serve`` (docs/cluster.md): the four tools, the judge
and the rewards behind the HTTP/JSON API of :mod:`shopping_companion.serve.api`, so that rollout
workers and evaluation processes on any node share ONE product index, MiniLM model and set of
memory stores instead of each loading their own.

Deployments (each a pool of replica processes, sized by
:class:`~shopping_companion.serve.config.DeploymentsConfig`):

``ProductTools``
    the BM25 :class:`~shopping_companion.catalog.search.ProductSearch` (``product_search``,
    ``product_view``), opened as ``shopcomp eval`` opens it (built on first use).
``MemoryTools``
    every configured benchmark's tasks and session pool and the MiniLM embedder; one
    :class:`~shopping_companion.memory.store.MemoryStore` per (benchmark, task history), built on
    first use and kept in an LRU of ``memory_cache`` stores. The MiniLM query encodings of
    concurrent ``mem_search`` requests are batched (``@serve.batch``; ``batch`` settings) and the
    store ranks with :meth:`~shopping_companion.memory.store.MemoryStore.search_vectors`, whose
    results equal :meth:`~shopping_companion.memory.store.MemoryStore.search`.
``Scoring``
    the reward spec's judge (one per benchmark, over its sessions) and rubric, built as
    :meth:`~shopping_companion.trainers.resources.EnvResources.with_reward` builds them
    (``judge``, ``reward``).
``Ingress``
    the FastAPI app (``/v1/...``): bearer-token check, request validation, error bodies
    (:class:`~shopping_companion.serve.api.ErrorResponse`) and the fan-out to the three above.

Blocking work (Lucene, MiniLM, store builds, the judge) runs in worker threads, never on a
replica's event loop: :class:`~shopping_companion.catalog.search.SearchThreadPool` where Java may
be called (its threads detach from the JVM when it shuts down), ``asyncio.to_thread`` for query
encoding and ranking (long turns' snippets are encoded), a thread pool for store builds. Viewing
a built store's sessions (lookups, well under a millisecond) runs on the loop.

Expected failures cross deployment boundaries as :class:`~shopping_companion.serve.api.ErrorBody`
values (never as exceptions), so the ingress maps them to statuses without unwrapping Ray's
exception types: ``ToolInputError`` -> 400 ``tool_input`` (with ``field``), an unknown benchmark
or task -> 404 ``not_loaded`` naming the loaded ones, ``JudgeFailedError`` -> 409
``judge_failed``. A replica that died or a deployment with no replica up -> 503 ``not_ready``;
anything else -> 500 ``internal`` (logged with its traceback).

:func:`deploy` runs the application on the connected (or a new local) Ray cluster and returns its
URL; :func:`shutdown` removes it. Importing this module needs ``ray[serve]``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable

import numpy as np
from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse, Response
from ray import serve

from shopping_companion.errors import JudgeFailedError, ToolInputError, VerdictMismatchError
from shopping_companion.serve import api
from shopping_companion.serve.config import ServeConfig
from shopping_companion.serve.http import (
    ApiError,
    install_error_handlers,
    internal_message,
    protected_route,
    short_repr,
    to_response,
)

__all__ = [
    "APP_NAME",
    "Deployed",
    "Ingress",
    "MemoryTools",
    "ProductTools",
    "Scoring",
    "build_app",
    "deploy",
    "fastapi_app",
    "shutdown",
]

#: The Serve application name ``shopcomp serve`` deploys under.
APP_NAME = "shopcomp"
#: Seconds ``/v1/ready`` waits for each deployment's answer.
READY_TIMEOUT_S = 5.0
#: Environment variables copied from the driver to every replica (when set there).
_ENV_PREFIXES = ("SHOPCOMP_", "HF_", "TRANSFORMERS_", "SENTENCE_TRANSFORMERS_", "ANSERINI_", "OPENAI_", "JAVA_")

logger = logging.getLogger("ray.serve")


# --------------------------------------------------------------------------- shared helpers


class _NotLoaded(Exception):
    """A benchmark or task this service has not loaded (-> 404 ``not_loaded``)."""


def _error_of(e: BaseException) -> api.ErrorBody | None:
    """The error body of an expected failure, or None for a fault."""
    if isinstance(e, ToolInputError):
        return api.ErrorBody(type="tool_input", message=str(e), field=e.field)
    if isinstance(e, _NotLoaded):
        return api.ErrorBody(type="not_loaded", message=str(e))
    if isinstance(e, VerdictMismatchError):  # the request's verdict does not fit its task / trajectory
        return api.ErrorBody(type="bad_request", message=f"invalid request: {e.field}: {e}", field=e.field)
    if isinstance(e, JudgeFailedError):
        return api.ErrorBody(type="judge_failed", message=str(e))
    return None


async def _guarded(work: Callable[[], Awaitable[Any]]) -> Any:
    """``await work()``, with an expected failure returned as its :class:`api.ErrorBody`."""
    try:
        return await work()
    except Exception as e:  # noqa: BLE001 - expected ones become bodies, the rest propagate
        body = _error_of(e)
        if body is None:
            raise
        return body


async def _in_pool(pool: Any, fn: Callable[..., Any], *args: Any) -> Any:
    """Run ``fn(*args)`` on the executor ``pool`` (a thread pool) without blocking the loop."""
    return await asyncio.get_running_loop().run_in_executor(pool, lambda: fn(*args))


def _whoami() -> dict[str, Any]:
    """This replica's process id and Serve replica id (``SERVE_REPLICA::...``, the actor name)."""
    ctx = serve.get_replica_context()
    return {"pid": os.getpid(), "replica": ctx.replica_id.to_full_id_str()}


#: Ray namespace of the endpoint registries (:mod:`shopping_companion.serve.direct`).
REGISTRY_NAMESPACE = "shopcomp"


def _start_direct(instance: Any, deployment: str, direct: dict[str, Any] | None) -> Any:
    """Start this replica's direct server (:mod:`shopping_companion.serve.direct`) and register it
    with the application's endpoint registry. ``direct``: ``{host, app, token_env}`` or None (off).
    Returns ``(server, registry, replica)`` or None; a server that cannot start is logged and
    left out (clients then use the Serve path only)."""
    if not direct:
        return None
    import ray

    from shopping_companion.serve import http
    from shopping_companion.serve.direct import DirectServer, EndpointRegistry, registry_name, route_table

    http.set_token(os.environ.get(direct["token_env"]) or None)
    try:
        server = DirectServer(route_table(instance, deployment), direct["host"])
        registry = (
            ray.remote(num_cpus=0)(EndpointRegistry)
            .options(
                name=registry_name(direct["app"]), namespace=REGISTRY_NAMESPACE, get_if_exists=True, lifetime="detached"
            )
            .remote()
        )
        replica = _whoami()["replica"]
        ray.get(registry.register.remote(server.entry(deployment, replica)), timeout=60)
    except Exception:  # noqa: BLE001 - the Serve path still serves this replica
        logger.exception("shopcomp serve: %s: no direct endpoint for this replica", deployment)
        return None
    logger.info("shopcomp serve: %s direct endpoint %s", deployment, server.url)
    return server, registry, replica


def _stop_direct(direct: Any) -> None:
    if direct is None:
        return
    server, registry, replica = direct
    server.stop()
    try:
        registry.unregister.remote(replica)
    except Exception:  # noqa: BLE001 - Ray may be shutting down; dead replicas are dropped anyway
        pass


@dataclass
class _Bench:
    name: str
    path: str
    tasks: dict[str, Any]
    sessions: dict[str, Any]
    info: api.BenchmarkInfo


def _load_benches(benchmarks: dict[str, str]) -> dict[str, _Bench]:
    from shopping_companion.assembly.data import benchmark_tasks_sha256
    from shopping_companion.assembly.data import load_benchmark

    out: dict[str, _Bench] = {}
    for name, path in benchmarks.items():
        b = load_benchmark(Path(path))
        info = api.BenchmarkInfo(
            name=name,
            path=str(path),
            n_tasks=len(b.tasks),
            n_sessions=len(b.sessions),
            tasks_sha256=benchmark_tasks_sha256(list(b.tasks)),
        )
        out[name] = _Bench(name, str(path), {t.task_id: t for t in b.tasks}, dict(b.sessions), info)
    return out


def _bench_of(benches: dict[str, _Bench], name: str) -> _Bench:
    try:
        return benches[name]
    except KeyError:
        raise _NotLoaded(
            f"benchmark {short_repr(name)} is not loaded by this service (loaded: {sorted(benches)})"
        ) from None


def _task_of(benches: dict[str, _Bench], name: str, task_id: str) -> Any:
    b = _bench_of(benches, name)
    try:
        return b.tasks[task_id]
    except KeyError:
        some = sorted(b.tasks)[:5]
        raise _NotLoaded(
            f"task {short_repr(task_id)} is not in benchmark {name!r} ({len(b.tasks)} tasks, e.g. {some}; loaded "
            f"benchmarks: {sorted(benches)})"
        ) from None


def _open_search(data_dir: str | None, index_dir: str | None) -> Any:
    from shopping_companion.assembly.data import open_product_search, resolve_sources

    sources = resolve_sources(data_dir)
    return open_product_search(index_dir=index_dir, sources=sources)


# --------------------------------------------------------------------------- deployments


class _Replica:
    """What a replica of every deployment answers besides its routes (``ready``, ``whoami``),
    and its clean-up: the direct server (``_direct``) stopped and the worker threads (``pool``)
    shut down."""

    def ready(self) -> str:
        return "ready"

    def whoami(self) -> dict[str, Any]:
        return _whoami()

    def __del__(self) -> None:
        _stop_direct(getattr(self, "_direct", None))
        pool = getattr(self, "pool", None)
        if pool is not None:
            pool.shutdown(wait=False)


@serve.deployment
class ProductTools(_Replica):
    """The BM25 product index (``product_search``, ``product_view``). ``data_dir`` /
    ``index_dir``: as ``shopcomp eval``'s ``data`` (None: the defaults); ``threads``: worker
    threads running Lucene (>= 1); ``direct``: the direct endpoint's settings (None: none)."""

    def __init__(
        self, data_dir: str | None, index_dir: str | None, threads: int, direct: dict[str, Any] | None = None
    ) -> None:
        from shopping_companion.catalog.search import SearchThreadPool

        self.search_ = _open_search(data_dir, index_dir)
        self.pool = SearchThreadPool(max_workers=threads, thread_name_prefix="serve-products")
        self._info = api.CatalogInfo(n_products=len(self.search_), index_dir=str(self.search_.index_dir))
        self._direct = _start_direct(self, "ProductTools", direct)

    async def product_search(self, req: api.ProductSearchRequest) -> Any:
        async def work() -> api.ProductSearchResponse:
            hits = await _in_pool(
                self.pool,
                lambda: self.search_.search(
                    req.query, shop_id=req.shop_id, min_price=req.min_price, max_price=req.max_price, top_k=req.top_k
                ),
            )
            return api.ProductSearchResponse(results=hits)

        return await _guarded(work)

    async def product_view(self, req: api.ProductViewRequest) -> Any:
        async def work() -> api.ProductViewResponse:
            products, unknown = await _in_pool(self.pool, self.search_.view, req.product_ids)
            return api.ProductViewResponse(products=products, unknown=unknown)

        return await _guarded(work)

    def info(self) -> api.CatalogInfo:
        return self._info


@serve.deployment
class MemoryTools(_Replica):
    """The benchmarks' memory (``mem_search``, ``mem_view``). ``benchmarks``: name -> directory;
    ``memory_cache``: stores kept (LRU, >= 1); ``batch``: ``{enabled, max_batch_size,
    batch_wait_timeout_s}`` of the query-encoding batcher; ``direct``: the direct endpoint's
    settings (None: none).

    Requests arrive on two event loops (Serve's and the direct server's thread), so the LRU, the
    builds in progress and the counters are guarded by one lock, stores are built on a thread
    pool shared by both, and each loop has its own batcher (``@serve.batch`` binds to a loop)."""

    def __init__(
        self, benchmarks: dict[str, str], memory_cache: int, batch: dict[str, Any], direct: dict[str, Any] | None = None
    ) -> None:
        import concurrent.futures
        import threading

        from shopping_companion.assembly.data import make_embedder

        self.benches = _load_benches(benchmarks)
        self.embedder = make_embedder()
        self.embedder.warm_up(queries=True)  # the first request pays no model load
        self.memory_cache = memory_cache
        self.batching = bool(batch.get("enabled", True)) and int(batch.get("max_batch_size", 1)) > 1
        for batched in (self._encode_batched, self._encode_batched_direct):
            batched.set_max_batch_size(int(batch.get("max_batch_size", 64)))
            batched.set_batch_wait_timeout_s(float(batch.get("batch_wait_timeout_s", 0.002)))
        self._lock = threading.RLock()
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="serve-memory")
        self._stores: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
        self._building: dict[tuple[Any, ...], concurrent.futures.Future] = {}
        self._stats = {"batches": 0, "requests": 0, "max_batch": 0, "stores_built": 0, "cached": 0}
        self._direct = _start_direct(self, "MemoryTools", direct)

    # ------------------------------------------------------------------ stores
    def _store_future(self, bench: str, task_id: str) -> Any:
        """A ``concurrent.futures.Future`` of ``task_id``'s store (done at once when cached;
        callers of one key share one build)."""
        import concurrent.futures

        from shopping_companion.memory.store import MemoryStore

        b = _bench_of(self.benches, bench)
        task = _task_of(self.benches, bench, task_id)
        key = (bench, task.user_id, tuple((r.session_id, r.date) for r in task.history))
        with self._lock:
            store = self._stores.get(key)
            if store is not None:
                self._stores.move_to_end(key)
                done: concurrent.futures.Future = concurrent.futures.Future()
                done.set_result(store)
                return done
            fut = self._building.get(key)
            if fut is None:
                fut = self.pool.submit(MemoryStore.from_pool, b.sessions, task.history, self.embedder)
                self._building[key] = fut
                fut.add_done_callback(lambda f, key=key: self._built(key, f))
            return fut

    def _built(self, key: tuple[Any, ...], fut: Any) -> None:
        with self._lock:
            self._building.pop(key, None)
            if fut.cancelled() or fut.exception() is not None:
                return  # the callers see the error; the next call builds again
            self._stats["stores_built"] += 1
            self._stores[key] = fut.result()
            while len(self._stores) > self.memory_cache:
                self._stores.popitem(last=False)

    async def _store(self, bench: str, task_id: str) -> Any:
        """The store of ``task_id``'s history (built once per LRU lifetime; a cancelled caller
        does not cancel the build)."""
        fut = self._store_future(bench, task_id)
        if fut.done():  # cached: no trip through the loop's thread-safe callbacks
            return fut.result()
        return await asyncio.shield(asyncio.wrap_future(fut))

    # ------------------------------------------------------------------ query encoding
    async def _encode_batch(self, batch: list[list[str]]) -> list[np.ndarray]:
        """One ``encode_queries`` call for the queries of a batch of requests; row-for-row the
        vectors of encoding each request alone (the query encoder runs one unpadded forward per
        query, so a vector does not depend on its batch)."""
        flat = [q for qs in batch for q in qs]
        vecs = await asyncio.to_thread(self.embedder.encode_queries, flat)
        with self._lock:
            self._stats["batches"] += 1
            self._stats["requests"] += len(batch)
            self._stats["max_batch"] = max(self._stats["max_batch"], len(batch))
        out, i = [], 0
        for qs in batch:
            out.append(vecs[i : i + len(qs)])
            i += len(qs)
        return out

    @serve.batch(max_batch_size=64, batch_wait_timeout_s=0.002)
    async def _encode_batched(self, batch: list[list[str]]) -> list[np.ndarray]:
        """The batcher of requests that came through Ray Serve."""
        return await self._encode_batch(batch)

    @serve.batch(max_batch_size=64, batch_wait_timeout_s=0.002)
    async def _encode_batched_direct(self, batch: list[list[str]]) -> list[np.ndarray]:
        """The batcher of requests that came to the direct server (its own event loop)."""
        return await self._encode_batch(batch)

    async def _encode(self, qs: list[str]) -> np.ndarray:
        cached = self.embedder.cached_queries(qs)  # repeated queries: no thread hop, no batch window
        if cached is not None:
            with self._lock:
                self._stats["cached"] += 1
            return cached
        if self.batching:
            direct_loop = self._direct[0].loop if self._direct is not None else None
            if direct_loop is not None and asyncio.get_running_loop() is direct_loop:
                return await self._encode_batched_direct(qs)
            return await self._encode_batched(qs)
        return (await self._encode_batch([qs]))[0]

    # ------------------------------------------------------------------ routes
    async def mem_search(self, req: api.MemSearchRequest) -> Any:
        from shopping_companion.memory.store import MemoryStore

        async def work() -> api.MemSearchResponse:
            store = await self._store(req.benchmark, req.task_id)
            qs, k = MemoryStore.check_search(req.queries, req.top_k)  # the service checks, not only the client
            if store.n_turns == 0:
                return api.MemSearchResponse(results=[])
            qvec = await self._encode(qs)
            results = await asyncio.to_thread(store.search_vectors, qs, qvec, k)  # may encode snippets
            return api.MemSearchResponse(results=results)

        return await _guarded(work)

    async def mem_view(self, req: api.MemViewRequest) -> Any:
        async def work() -> api.MemViewResponse:
            store = await self._store(req.benchmark, req.task_id)
            sessions, unknown = store.view(req.session_ids)  # lookups: no thread hop
            return api.MemViewResponse(sessions=sessions, unknown=unknown)

        return await _guarded(work)

    def info(self) -> list[api.BenchmarkInfo]:
        return [b.info for b in self.benches.values()]

    def stats(self) -> dict[str, Any]:
        """Counters of this replica: ``batches`` encoded, ``requests`` in them, ``max_batch``
        (most requests in one batch), ``cached`` (requests whose queries were all in the query
        cache: answered without the encoder or a batch), ``stores_built``, ``stores`` (in the LRU
        now)."""
        with self._lock:
            return {**self._stats, "stores": len(self._stores), "batching": self.batching}


@serve.deployment
class Scoring(_Replica):
    """The judge and the rubric of the reward spec ``reward_config`` (``judge``, ``reward``):
    one judge per benchmark (over its sessions, with the product records of the index at
    ``data_dir`` / ``index_dir`` and the MiniLM embedder), one rubric. ``threads``: worker
    threads for judge and rubric calls (>= 1); ``direct``: the direct endpoint's settings (None:
    none)."""

    def __init__(
        self,
        benchmarks: dict[str, str],
        data_dir: str | None,
        index_dir: str | None,
        reward_config: str,
        threads: int,
        direct: dict[str, Any] | None = None,
    ) -> None:
        from shopping_companion.catalog.search import SearchThreadPool
        from shopping_companion.assembly.data import make_embedder, product_lookup
        from shopping_companion.assembly.reward_spec import load_reward_spec

        spec = load_reward_spec(reward_config)
        self.benches = _load_benches(benchmarks)
        self.search_ = _open_search(data_dir, index_dir)
        lookup = product_lookup(self.search_)
        self.embedder = make_embedder()
        self.judges = {n: spec.build_judge(lookup, b.sessions, self.embedder) for n, b in self.benches.items()}
        self.rubric = spec.build_rubric({"lookup": lookup})
        judge_name = str(getattr(next(iter(self.judges.values())), "name", "judge"))
        self._info = api.RewardInfo(spec=spec.to_json(), judge=judge_name, rubric=self.rubric.describe())
        self.pool = SearchThreadPool(max_workers=threads, thread_name_prefix="serve-scoring")
        self._direct = _start_direct(self, "Scoring", direct)

    def _check(self, req: api.JudgeRequest) -> None:
        _task_of(self.benches, req.benchmark, req.task.task_id)

    async def judge(self, req: api.JudgeRequest) -> Any:
        async def work() -> api.JudgeResponse:
            self._check(req)
            verdict = await _in_pool(self.pool, self.judges[req.benchmark].judge, req.task, req.trajectory)
            return api.JudgeResponse(verdict=verdict)

        return await _guarded(work)

    async def reward(self, req: api.RewardRequest) -> Any:
        async def work() -> api.RewardResponse:
            self._check(req)
            reward = await _in_pool(self.pool, self.rubric, req.task, req.trajectory, req.verdict)
            return api.RewardResponse(reward=reward)

        return await _guarded(work)

    def info(self) -> api.RewardInfo:
        return self._info


# --------------------------------------------------------------------------- the HTTP API

fastapi_app = FastAPI(
    title="shopcomp serve",
    description="Tools, judge and rewards of the Shopping Companion benchmark (docs/cluster.md).",
    version=api.API_VERSION,
    openapi_url=None,  # served by the ingress under /v1, behind the token
    docs_url=None,
    redoc_url=None,
)


install_error_handlers(fastapi_app)


def _is_unavailable(e: BaseException) -> bool:
    """A downstream replica died or none is up (retryable: 503)."""
    from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError
    from ray.serve.exceptions import BackPressureError, DeploymentUnavailableError

    return isinstance(
        e, (RayActorError, ActorDiedError, ActorUnavailableError, BackPressureError, DeploymentUnavailableError)
    )


def _forward(cls: type, name: str, route: api.PostRoute) -> Callable[..., Awaitable[Response]]:
    """The method of ``cls`` answering ``POST /v1/<name>``: the request goes to the method
    ``name`` of the deployment ``route.deployment`` (:meth:`Ingress._call`)."""

    async def forward(self: Any, req: Any) -> Response:
        return await self._call(getattr(self.deployments[route.deployment], name), req)

    forward.__annotations__ = {"req": route.request, "return": Response}  # FastAPI reads the body model here
    forward.__name__, forward.__doc__ = name, route.doc
    forward.__qualname__ = f"{cls.__qualname__}.{name}"  # how Serve finds the routes of the class
    return forward


def _with_post_routes(cls: type) -> type:
    """``cls`` with a method and a protected route per :data:`api.POST_ROUTES` entry (table order)."""
    for name, route in api.POST_ROUTES.items():
        method = protected_route(fastapi_app, "post", name, response_model=route.response)(_forward(cls, name, route))
        setattr(cls, name, method)
    return cls


@serve.deployment
@serve.ingress(fastapi_app)
@_with_post_routes
class Ingress:
    """The HTTP API (:mod:`shopping_companion.serve.api`) over handles to the three deployments
    (``deployments``: name -> handle); the POST routes forward to them (:func:`_with_post_routes`).
    ``token_env``: the variable holding the bearer token in this replica's environment (unset or
    empty: no token asked for); ``replicas``: deployment name -> replicas, and
    ``memory_cache``, for ``/v1/info``; ``direct_app``: the application whose endpoint registry
    ``/v1/endpoints`` lists (None: direct endpoints are off)."""

    def __init__(
        self,
        products: Any,
        memory: Any,
        scoring: Any,
        token_env: str,
        replicas: dict[str, int],
        memory_cache: int,
        direct_app: str | None = None,
    ) -> None:
        self.products, self.memory, self.scoring = products, memory, scoring
        self.deployments = {"ProductTools": products, "MemoryTools": memory, "Scoring": scoring}
        # Serve pickles this class by value (the module's name ``Ingress`` is the Deployment), so
        # its globals are copies: set the token where ``_auth`` (pickled by reference) reads it.
        from shopping_companion.serve import http

        http.set_token(os.environ.get(token_env) or None)
        self.replicas = replicas
        self.memory_cache = memory_cache
        self.direct_app = direct_app
        self._info: api.InfoResponse | None = None

    async def _call(self, method: Any, req: Any) -> Response:
        try:
            out = await method.remote(req)
        except Exception as e:  # noqa: BLE001 - turned into an error body
            if _is_unavailable(e):
                raise ApiError(
                    api.ErrorBody(type="not_ready", message=f"a replica is unavailable, retry: {e}")
                ) from None
            logger.exception("shopcomp serve: %s failed", getattr(method, "_method_name", method))
            raise ApiError(api.ErrorBody(type="internal", message=internal_message(e))) from None
        return to_response(out)

    # ------------------------------------------------------------------ GET
    @fastapi_app.get(f"{api.API_PREFIX}/health", response_model=api.HealthResponse)
    async def health(self) -> api.HealthResponse:
        """Liveness: answers as soon as the ingress runs (no token)."""
        return api.HealthResponse()

    @protected_route(
        fastapi_app,
        "get",
        "ready",
        response_model=api.ReadyResponse,
        responses={503: {"model": api.ReadyResponse}, 401: {"model": api.ErrorResponse}},
    )
    async def ready(self) -> JSONResponse:
        """Readiness: 200 when every deployment answers that its data is loaded, else 503 with
        what each one waits for."""

        async def probe(h: Any) -> str:
            return await h.ready.remote()

        answers = await asyncio.gather(
            *(asyncio.wait_for(probe(h), READY_TIMEOUT_S) for h in self.deployments.values()), return_exceptions=True
        )
        states = {}
        for name, a in zip(self.deployments, answers):
            if isinstance(a, BaseException):
                states[name] = f"not ready ({type(a).__name__}: {str(a).splitlines()[0] if str(a) else 'no answer'})"[
                    :300
                ]
            else:
                states[name] = str(a)
        ok = all(v == "ready" for v in states.values())
        body = api.ReadyResponse(ready=ok, deployments=states)
        return JSONResponse(body.model_dump(mode="json"), status_code=200 if ok else 503)

    @protected_route(fastapi_app, "get", "info", response_model=api.InfoResponse)
    async def info(self) -> JSONResponse:
        """Loaded benchmarks, catalog, reward spec, deployments."""
        if self._info is None:
            try:
                catalog, benches, reward = await asyncio.gather(
                    self.products.info.remote(), self.memory.info.remote(), self.scoring.info.remote()
                )
            except Exception as e:  # noqa: BLE001
                if _is_unavailable(e):
                    raise ApiError(api.ErrorBody(type="not_ready", message=f"a replica is unavailable: {e}")) from None
                raise
            from shopping_companion import __version__

            self._info = api.InfoResponse(
                package_version=__version__,
                benchmarks=benches,
                catalog=catalog,
                reward=reward,
                deployments=self.replicas,
                memory_cache=self.memory_cache,
            )
        return JSONResponse(self._info.model_dump(mode="json"))

    @protected_route(fastapi_app, "get", "endpoints", response_model=api.EndpointsResponse)
    async def endpoints(self) -> JSONResponse:
        """The direct endpoints of the replicas alive now (docs/cluster.md, "Request path")."""
        if self.direct_app is None:
            return JSONResponse(api.EndpointsResponse(enabled=False).model_dump(mode="json"))
        import ray

        from shopping_companion.serve.direct import registry_name

        try:
            registry = ray.get_actor(registry_name(self.direct_app), namespace=REGISTRY_NAMESPACE)
            entries = await asyncio.wait_for(registry.list.remote(), READY_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - no registry yet, a busy or dead one: no direct endpoints now
            entries = []
        body = api.EndpointsResponse(enabled=True, endpoints=[api.DirectEndpoint(**e) for e in entries])
        return JSONResponse(body.model_dump(mode="json"))

    @protected_route(fastapi_app, "get", "openapi.json", include_in_schema=False)
    async def openapi(self) -> JSONResponse:
        """FastAPI's OpenAPI schema of these routes."""
        return JSONResponse(fastapi_app.openapi())

    @fastapi_app.get(f"{api.API_PREFIX}/docs", include_in_schema=False)
    async def docs(self) -> HTMLResponse:
        """Swagger UI over ``/v1/openapi.json`` (a static page: it holds no data; the schema it
        loads needs the token when the service has one)."""
        return get_swagger_ui_html(openapi_url=f"{api.API_PREFIX}/openapi.json", title="shopcomp serve")


# --------------------------------------------------------------------------- deploy / shutdown


@dataclass
class Deployed:
    """A running application: ``url`` (``http://host:port``, the API under ``/v1``), ``docs_url``,
    ``handle`` (the ingress's DeploymentHandle), ``name`` (the Serve application) and
    ``cold_start_s`` (seconds from submitting the application until every replica was up)."""

    url: str
    docs_url: str
    handle: Any
    name: str
    cold_start_s: float


def _replica_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k.startswith(_ENV_PREFIXES)}
    env.update(extra or {})
    return env


def _abs(p: Path | None) -> str | None:
    return None if p is None else str(Path(p).expanduser().resolve())


def build_app(cfg: ServeConfig, name: str = APP_NAME) -> Any:
    """The bound Serve application of ``cfg`` (not running yet) under the application name
    ``name``. Paths become absolute (replicas may run in another directory); the reward spec
    travels as its JSON; the driver's ``SHOPCOMP_*`` / ``HF_*`` / ... variables are passed to the
    replicas (``runtime_env.env_vars``), and the token under ``cfg.token_env`` to the ingress and,
    with direct endpoints on (``cfg.direct.enabled``), to every replica. Raises ``ConfigError`` for
    a reward spec that does not load."""
    from shopping_companion.errors import DataDirError
    from shopping_companion.paths import resolve_data_dir
    from shopping_companion.assembly.reward_spec import load_reward_spec

    data_dir = _abs(cfg.data.data_dir)
    if data_dir is None:
        try:
            data_dir = str(resolve_data_dir(None))
        except DataDirError:
            data_dir = None  # the replicas fall back as `shopcomp eval` does
    index_dir = _abs(cfg.data.index_dir)
    benchmarks = {n: str(_abs(p)) for n, p in cfg.benchmarks.items()}
    spec = load_reward_spec(cfg.reward_config).to_json()
    env = _replica_env()
    env.pop(cfg.token_env, None)
    token = cfg.token()
    d = cfg.deployments

    def opts(dc: Any, env_vars: dict[str, str]) -> dict[str, Any]:
        return {
            "num_replicas": dc.num_replicas,
            "max_ongoing_requests": dc.max_ongoing_requests,
            "ray_actor_options": {"num_cpus": dc.num_cpus, "runtime_env": {"env_vars": env_vars}},
        }

    threads = lambda dc: max(1, min(16, dc.max_ongoing_requests))  # noqa: E731
    ingress_env = {**env, **({cfg.token_env: token} if token else {})}
    direct = {"host": cfg.host, "app": name, "token_env": cfg.token_env} if cfg.direct.enabled else None
    tools_env = ingress_env if direct else env  # a direct server checks the token itself
    products = ProductTools.options(**opts(d.products, tools_env)).bind(
        data_dir, index_dir, threads(d.products), direct
    )
    memory = MemoryTools.options(**opts(d.memory, tools_env)).bind(
        benchmarks, cfg.memory_cache, cfg.batch.model_dump(), direct
    )
    scoring = Scoring.options(**opts(d.scoring, tools_env)).bind(
        benchmarks, data_dir, index_dir, spec, threads(d.scoring), direct
    )
    replicas = {
        "ProductTools": d.products.num_replicas,
        "MemoryTools": d.memory.num_replicas,
        "Scoring": d.scoring.num_replicas,
        "Ingress": d.ingress.num_replicas,
    }
    return Ingress.options(**opts(d.ingress, ingress_env)).bind(
        products, memory, scoring, cfg.token_env, replicas, cfg.memory_cache, name if direct else None
    )


def deploy(cfg: ServeConfig, *, blocking: bool = False, address: str | None = None, name: str = APP_NAME) -> Deployed:
    """Run the application of ``cfg`` on Ray Serve and return where it answers.

    Connects to Ray first when this process is not connected
    (:func:`~shopping_companion.assembly.cluster.connect`; ``address``: a cluster address
    such as ``ray://head:10001`` or ``auto``; None: a new local cluster), starts Serve's HTTP proxy
    on ``cfg.host``:``cfg.port`` (when Serve already runs, its proxy is kept) and waits until
    every replica has loaded its data. ``blocking``: then wait until Ctrl-C (and remove the
    application). Raises ``ConfigError`` for a bad reward spec and, on a private local cluster,
    when the replicas reserve more CPUs than it has (:func:`~shopping_companion.serve.config.fits_cluster`); a replica whose constructor fails
    (a missing benchmark, an index that cannot be built) fails the deployment with Ray's
    ``RuntimeError`` naming it."""
    from shopping_companion.assembly.cluster import connect
    from shopping_companion.errors import ConfigError
    from shopping_companion.serve.config import fits_cluster

    conn = connect(address or "local")  # no-op when connected; never with Ray's signal handler (the JVM)
    short = fits_cluster(cfg.deployments, conn.cpus)
    if short and conn.local:  # a private cluster never grows: Serve would wait for the replicas forever
        raise ConfigError(short)
    target = build_app(cfg, name)
    serve.start(http_options={"host": cfg.host, "port": cfg.port})
    t0 = time.perf_counter()
    handle = serve.run(target, name=name, route_prefix="/", blocking=False)
    cold = time.perf_counter() - t0
    host = cfg.host.strip("[]")
    if host in ("0.0.0.0", "::"):  # every interface: clients elsewhere reach this node's address
        import ray

        host = ray.util.get_node_ip_address()
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{cfg.port}"
    out = Deployed(url=url, docs_url=f"{url}{api.API_PREFIX}/docs", handle=handle, name=name, cold_start_s=cold)
    if blocking:
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
        finally:
            shutdown(name)
    return out


def shutdown(name: str = APP_NAME, *, serve_too: bool = True) -> None:
    """Remove the application ``name`` (its replicas stop) and, with ``serve_too``, Serve itself
    (controller and HTTP proxies). Does nothing when Ray is not connected."""
    import ray

    if not ray.is_initialized():
        return
    try:
        serve.delete(name, _blocking=True)
    finally:
        _kill_registry(name)
        if serve_too:
            serve.shutdown()


def _kill_registry(name: str) -> None:
    """Remove the application's endpoint registry (a detached actor) when there is one."""
    import ray

    from shopping_companion.serve.direct import registry_name

    try:
        ray.kill(ray.get_actor(registry_name(name), namespace=REGISTRY_NAMESPACE), no_restart=True)
    except Exception:  # noqa: BLE001 - none, or Ray is going away
        pass
