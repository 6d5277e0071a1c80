"""The versioned HTTP/JSON API of ``shopcomp serve`` (docs/cluster.md): request and response
models shared by the service (:mod:`shopping_companion.serve.app`) and its client
(:mod:`shopping_companion.serve.client`).

Every route lives under :data:`API_PREFIX` (``/v1``). Bodies are JSON; products, sessions, tasks,
trajectories, verdicts and reward breakdowns use the package's own pydantic models
(:mod:`shopping_companion.types`), so a remote call returns exactly what the in-process call
returns.

Routes (all ``POST`` take and return JSON; ``GET`` routes take no body):

==========================  =========================================================================
``GET  /v1/health``         liveness: 200 ``{"status": "ok"}`` as soon as the ingress runs (no token)
``GET  /v1/ready``          readiness: 200 when every deployment has loaded its data, else 503
``GET  /v1/info``           :class:`InfoResponse`: loaded benchmarks, catalog, reward spec
``GET  /v1/openapi.json``   the OpenAPI schema of these routes
``GET  /v1/endpoints``      :class:`EndpointsResponse`: the replicas' direct endpoints
``POST /v1/product_search`` :class:`ProductSearchRequest` -> :class:`SearchResponse`
``POST /v1/product_view``   :class:`ProductViewRequest` -> :class:`ProductViewResponse`
``POST /v1/mem_search``     :class:`MemSearchRequest` -> :class:`SearchResponse`
``POST /v1/mem_view``       :class:`MemViewRequest` -> :class:`MemViewResponse`
``POST /v1/judge``          :class:`JudgeRequest` -> :class:`JudgeResponse`
``POST /v1/reward``         :class:`RewardRequest` -> :class:`RewardResponse`
==========================  =========================================================================

Errors are ``{"error": ErrorBody}`` with the status of :data:`ERROR_STATUS`: a tool input the
backend refuses (400, ``field`` set: the client raises
:class:`~shopping_companion.errors.ToolInputError` with the same text, so the agent's observation
is identical to the local one), a benchmark or task the service has not loaded (404), a missing
or wrong bearer token (401), a failed verdict given to ``/v1/reward`` (409), data not loaded yet
(503) and a server fault (500). 503 and 500 are retried by the client; 4xx never are.
"""

from __future__ import annotations

import json
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt
from pydantic_core import PydanticSerializationError

from shopping_companion.types import Product, RewardBreakdown, Session, Task, Trajectory, Verdict

#: Version of the wire format; every route is under :data:`API_PREFIX`.
API_VERSION = "v1"
API_PREFIX = f"/{API_VERSION}"

#: Largest request body the service and the direct endpoints read (bytes; larger: 413).
MAX_BODY_BYTES = 64 * 1024 * 1024

#: Environment variable holding the bearer token (service and clients), unless configured otherwise.
DEFAULT_TOKEN_ENV = "SHOPCOMP_SERVE_TOKEN"

ErrorType = Literal["tool_input", "not_loaded", "unauthorized", "judge_failed", "bad_request", "not_ready", "internal"]

#: HTTP status of each error type.
ERROR_STATUS: dict[str, int] = {
    "tool_input": 400,
    "bad_request": 422,
    "unauthorized": 401,
    "not_loaded": 404,
    "judge_failed": 409,
    "not_ready": 503,
    "internal": 500,
}


def encode_json(model: BaseModel) -> bytes:
    """``model`` as JSON bytes, what the service answers and the client sends: pydantic's own
    encoder, or ``json.dumps`` of its dump (``\\uXXXX`` escapes) when a string holds what UTF-8
    cannot encode (a lone surrogate, which a model's tool-call JSON can carry): the receiver then
    decodes the same string and refuses it as the in-process code does, instead of the sender
    failing."""
    try:
        return model.model_dump_json().encode()
    except (PydanticSerializationError, UnicodeEncodeError):
        return json.dumps(model.model_dump(mode="json")).encode()


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ErrorBody(_Body):
    """``type``: one of :data:`ErrorType`; ``message``: one line for a person; ``field``: the
    request field at fault (``tool_input``: the tool argument, e.g. ``"queries"``; its message is
    ``str(ToolInputError)``, i.e. ``"<field>: <what is wrong>"``)."""

    type: ErrorType
    message: str
    field: str | None = None


class ErrorResponse(_Body):
    error: ErrorBody


class HealthResponse(_Body):
    status: Literal["ok"] = "ok"


class ReadyResponse(_Body):
    """``ready``: every deployment loaded; ``deployments``: name -> ``"ready"`` or what it waits for."""

    ready: bool
    deployments: dict[str, str] = Field(default_factory=dict)


class DirectEndpoint(_Body):
    """One replica's direct endpoint (:mod:`~shopping_companion.serve.direct`): the
    ``deployment`` whose routes it serves (``ProductTools``: ``product_*``; ``MemoryTools``:
    ``mem_*``; ``Scoring``: ``judge``, ``reward``), its ``url`` (``http://host:port``; the same
    ``/v1/<route>`` paths, token and error bodies as the service), the Serve ``replica`` id, the
    ``node_ip`` of its node and the ``nonce`` that ``GET <url>/v1/direct`` answers."""

    deployment: Literal["ProductTools", "MemoryTools", "Scoring"]
    url: str
    replica: str
    node_ip: str
    nonce: str


class EndpointsResponse(_Body):
    """``enabled``: the service runs direct endpoints (``direct.enabled``); ``endpoints``: those of
    the replicas alive now (empty when disabled or none started)."""

    enabled: bool
    endpoints: list[DirectEndpoint] = Field(default_factory=list)


class BenchmarkInfo(_Body):
    """A benchmark the service loaded: its ``name`` (what requests name), the directory ``path``,
    ``n_tasks``, ``n_sessions`` and ``tasks_sha256`` (the first 16 hex characters of the SHA-256 of its tasks, as
    :func:`~shopping_companion.assembly.data.benchmark_tasks_sha256` computes it: a client checks
    it equals its own copy's)."""

    name: str
    path: str
    n_tasks: int
    n_sessions: int
    tasks_sha256: str


class CatalogInfo(_Body):
    """The product index: ``n_products`` documents, its ``index_dir`` on the service's hosts."""

    n_products: int
    index_dir: str


class RewardInfo(_Body):
    """How the service scores: ``spec`` (the reward spec's canonical JSON,
    :meth:`~shopping_companion.assembly.reward_spec.RewardSpec.to_json`), ``judge`` (the judge's ``name``
    that verdicts carry) and ``rubric`` (the rubric's ``describe()``: members and weights)."""

    spec: str
    judge: str
    rubric: Any


class InfoResponse(_Body):
    """``api_version``: :data:`API_VERSION`; ``package_version``: shopping_companion's version;
    ``benchmarks``, ``catalog``, ``reward``; ``deployments``: name -> number of replicas;
    ``memory_cache``: memory stores kept per replica (LRU)."""

    api_version: str = API_VERSION
    package_version: str
    benchmarks: list[BenchmarkInfo]
    catalog: CatalogInfo
    reward: RewardInfo
    deployments: dict[str, int] = Field(default_factory=dict)
    memory_cache: int


class ProductSearchRequest(_Body):
    """``product_search`` (the tool's own arguments: BM25 ``query``, optional ``shop_id`` and
    inclusive price bounds in the catalog's currency, ``top_k`` 1–50)."""

    query: str
    shop_id: str | None = None
    min_price: StrictFloat | None = None
    max_price: StrictFloat | None = None
    top_k: StrictInt = 10


class SearchResponse(_Body):
    """The hits exactly as the search returns them, best first: :meth:`ProductSearch.search`
    (``product_search``) or :meth:`MemoryStore.search` (``mem_search``)."""

    results: list[dict[str, Any]]


#: The response of ``product_search``.
ProductSearchResponse = SearchResponse


class ProductViewRequest(_Body):
    product_ids: list[str]


class ProductViewResponse(_Body):
    """``products``: the known products in request order; ``unknown``: ids not in the catalog."""

    products: list[Product]
    unknown: list[str]


class MemoryRequest(_Body):
    """A memory call is about one task's user history: ``benchmark`` (a loaded benchmark's name)
    and ``task_id`` (a task of it; its ``history`` selects the sessions the store holds)."""

    benchmark: str
    task_id: str


class MemSearchRequest(MemoryRequest):
    queries: list[str] | str
    top_k: StrictInt = 10


#: The response of ``mem_search``.
MemSearchResponse = SearchResponse


class MemViewRequest(MemoryRequest):
    session_ids: list[str]


class MemViewResponse(_Body):
    """``sessions``: the known sessions in request order; ``unknown``: ids not in this history."""

    sessions: list[Session]
    unknown: list[str]


class JudgeRequest(_Body):
    """Judge one stage trajectory of ``task`` (the full task, as the client holds it; its
    ``task_id`` must be a task of ``benchmark``, whose catalog and sessions the judge reads)."""

    benchmark: str
    task: Task
    trajectory: Trajectory


class JudgeResponse(_Body):
    verdict: Verdict


class RewardRequest(JudgeRequest):
    """Reward one judged stage trajectory with the service's rubric (a failed ``verdict`` is
    refused with ``judge_failed``, as the local rubric raises ``JudgeFailedError``)."""

    verdict: Verdict


class RewardResponse(_Body):
    reward: RewardBreakdown


class PostRoute(NamedTuple):
    """One ``POST /v1/<name>`` route: the ``deployment`` whose method ``<name>`` answers it, its
    ``request`` and ``response`` models and its ``doc`` (the route's description)."""

    deployment: str
    request: type[_Body]
    response: type[_Body]
    doc: str


#: The POST routes by name (table order): the ingress forwards each to its deployment, whose
#: replicas also serve it on their direct endpoints (:mod:`shopping_companion.serve.direct`).
POST_ROUTES: dict[str, PostRoute] = {
    "product_search": PostRoute(
        "ProductTools",
        ProductSearchRequest,
        ProductSearchResponse,
        "BM25 product search (the ``product_search`` tool).",
    ),
    "product_view": PostRoute(
        "ProductTools", ProductViewRequest, ProductViewResponse, "Full product records (the ``product_view`` tool)."
    ),
    "mem_search": PostRoute(
        "MemoryTools",
        MemSearchRequest,
        MemSearchResponse,
        "Dense search over one task's user history (the ``mem_search`` tool).",
    ),
    "mem_view": PostRoute(
        "MemoryTools",
        MemViewRequest,
        MemViewResponse,
        "Full sessions of one task's user history (the ``mem_view`` tool).",
    ),
    "judge": PostRoute("Scoring", JudgeRequest, JudgeResponse, "The verdict of one stage trajectory."),
    "reward": PostRoute(
        "Scoring", RewardRequest, RewardResponse, "The reward breakdown of one judged stage trajectory."
    ),
}


def tool_input_message(field: str, text: str) -> str:
    """The part of ``str(ToolInputError(field, message))`` after ``"<field>: "`` (``text``
    unchanged when it does not start so): what the client passes back to ``ToolInputError``."""
    prefix = f"{field}: "
    return text[len(prefix) :] if text.startswith(prefix) else text
