"""Remote tools, judge and rubric: the in-process objects' protocols over a ``shopcomp serve``
service (docs/cluster.md), so the environment, the evaluation runner and the trainers do not know
where their services run.

* :class:`RemoteProducts` — :class:`~shopping_companion.envs.tools.ProductBackend` (``search``,
  ``view``) plus ``get`` / :meth:`RemoteProducts.lookup` (what the judges and reports read);
* :class:`RemoteMemory` — :class:`~shopping_companion.envs.tools.MemoryBackend` of one task's user
  history (the service builds and caches the store);
* :class:`RemoteJudge` — the :class:`~shopping_companion.judges.base.Judge` protocol;
* :class:`RemoteRubric` — the rubric callable ``(task, trajectory, verdict) -> RewardBreakdown``
  with ``describe()`` (the service's rubric, so run identities equal local ones);
* :func:`connect` — checks the service is ready, holds the caller's benchmark and scores with the
  caller's reward spec, and returns a :class:`RemoteService` that makes the four.

Failure semantics (the client's retries and deadline come first, :mod:`~shopping_companion.serve.client`):
a tool call that cannot reach the service raises :class:`~shopping_companion.errors.ToolServiceError`
(the tool box lets it through: the episode ends as a backend error, retried on resume); a judge or
reward call that cannot reach it raises :class:`~shopping_companion.errors.JudgeFailedError`, so the
stage is recorded unscored ("judge failed", retried on resume) exactly as a local judge that failed.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from shopping_companion.errors import ConfigError, JudgeFailedError, ToolServiceError
from shopping_companion.serve import api
from shopping_companion.serve.client import ServiceClient
from shopping_companion.types import Product, RewardBreakdown, Session, Task, Trajectory, Verdict

__all__ = [
    "RemoteJudge",
    "RemoteMemory",
    "RemoteProducts",
    "RemoteRubric",
    "RemoteService",
    "connect",
    "same_reward_spec",
    "service_url",
]

#: Most ids one ``/v1/product_view`` request names (the tool's own limit).
_VIEW_CHUNK = 20


def service_url(tools: str) -> str:
    """The URL of a ``serve:URL`` tools selection (``tools`` as
    :func:`~shopping_companion.assembly.endpoints.check_tools` returns it). Raises
    :class:`ConfigError` for ``local`` or anything else."""
    from shopping_companion.assembly.endpoints import check_tools

    try:
        value = check_tools(tools)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if not value.startswith("serve:"):
        raise ConfigError(f"tools: {tools!r} names no service (expected serve:URL)")
    return value[len("serve:") :]


class RemoteProducts:
    """The product catalog of a service (``/v1/product_search``, ``/v1/product_view``), as
    :class:`~shopping_companion.catalog.search.ProductSearch` answers in process: same hits, same
    products, same :class:`~shopping_companion.errors.ToolInputError` for bad arguments.
    ``cache``: product records kept for :meth:`get` / :meth:`lookup` (LRU; products do not change
    while a service runs). Thread-safe."""

    def __init__(self, client: ServiceClient, cache: int = 4096) -> None:
        self.client = client
        self._cache: OrderedDict[str, Product] = OrderedDict()
        self._cache_size = max(0, int(cache))
        self._lock = threading.Lock()

    def __deepcopy__(self, memo: dict[int, Any]) -> "RemoteProducts":
        return self

    def search(
        self,
        query: str,
        shop_id: str | None = None,
        min_price: float | None = None,
        max_price: float | None = None,
        top_k: int = 10,
    ) -> list[dict[str, Any]]:
        """BM25 hits, best first (dicts as ``ProductSearch.search`` returns them)."""
        req = api.ProductSearchRequest(
            query=query, shop_id=shop_id, min_price=min_price, max_price=max_price, top_k=top_k
        )
        return self.client.post("product_search", req, api.ProductSearchResponse).results

    def view(self, product_ids: list[str]) -> tuple[list[Product], list[str]]:
        """``(known products in request order, unknown ids)`` of 1..20 ids."""
        resp = self.client.post(
            "product_view", api.ProductViewRequest(product_ids=product_ids), api.ProductViewResponse
        )
        self._remember(resp.products)
        return resp.products, resp.unknown

    def get(self, product_id: str) -> Product | None:
        """The product with this id, or None."""
        return self.lookup([product_id]).get(product_id)

    def lookup(self, ids: list[str]) -> dict[str, Product]:
        """``{id: product}`` for the ids the catalog holds (others left out), 20 per request,
        cached records first: what judges, rubrics and reports read."""
        out: dict[str, Product] = {}
        todo: list[str] = []
        with self._lock:
            for pid in dict.fromkeys(ids):
                p = self._cache.get(pid)
                if p is not None:
                    self._cache.move_to_end(pid)
                    out[pid] = p
                elif isinstance(pid, str) and pid.strip():
                    todo.append(pid)
        for i in range(0, len(todo), _VIEW_CHUNK):
            products, _unknown = self.view(todo[i : i + _VIEW_CHUNK])
            out.update({p.product_id: p for p in products})
        return {pid: out[pid] for pid in dict.fromkeys(ids) if pid in out}

    def _remember(self, products: list[Product]) -> None:
        if not self._cache_size:
            return
        with self._lock:
            for p in products:
                self._cache[p.product_id] = p
                self._cache.move_to_end(p.product_id)
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)


class RemoteMemory:
    """The memory store of task ``task_id`` of the service's benchmark ``benchmark``
    (``/v1/mem_search``, ``/v1/mem_view``), as :class:`~shopping_companion.memory.store.MemoryStore`
    answers in process. Making one costs nothing (the service builds its store on first use)."""

    def __init__(self, client: ServiceClient, benchmark: str, task_id: str) -> None:
        self.client = client
        self.benchmark = benchmark
        self.task_id = task_id

    def __deepcopy__(self, memo: dict[int, Any]) -> "RemoteMemory":
        return self

    def search(self, queries: list[str] | str, top_k: int = 10) -> list[dict[str, Any]]:
        """The best-matching turns of the user's history (dicts as ``MemoryStore.search``)."""
        req = api.MemSearchRequest(benchmark=self.benchmark, task_id=self.task_id, queries=queries, top_k=top_k)
        return self.client.post("mem_search", req, api.MemSearchResponse).results

    def view(self, session_ids: list[str]) -> tuple[list[Session], list[str]]:
        """``(known sessions in request order, ids not in this history)``."""
        req = api.MemViewRequest(benchmark=self.benchmark, task_id=self.task_id, session_ids=session_ids)
        resp = self.client.post("mem_view", req, api.MemViewResponse)
        return resp.sessions, resp.unknown


class RemoteJudge:
    """The service's judge (``/v1/judge``) over its benchmark ``benchmark``; ``name`` is the
    service's judge name (what its verdicts carry). A service that cannot be reached after the
    client's retries raises :class:`JudgeFailedError` (the stage is unscored, never 0)."""

    def __init__(self, client: ServiceClient, benchmark: str, name: str = "judge") -> None:
        self.client = client
        self.benchmark = benchmark
        self.name = name

    def __deepcopy__(self, memo: dict[int, Any]) -> "RemoteJudge":
        return self

    def judge(self, task: Task, trajectory: Trajectory) -> Verdict:
        """The verdict on one stage trajectory of ``task``."""
        req = api.JudgeRequest(benchmark=self.benchmark, task=task, trajectory=trajectory)
        try:
            return self.client.post("judge", req, api.JudgeResponse).verdict
        except ToolServiceError as e:
            raise JudgeFailedError(f"judge service: {e}") from None


class RemoteRubric:
    """The service's rubric (``/v1/reward``): ``rubric(task, trajectory, verdict) ->
    RewardBreakdown``. ``describe()`` is the service's rubric description (members and weights),
    ``spec`` its reward spec's JSON; :attr:`members` / :meth:`local` give the same rubric built in
    this process from that spec (for weighting logged components; imports its modules). A failed
    verdict, or a service that cannot be reached after the retries, raises
    :class:`JudgeFailedError` (unscored), as the local rubric does for a failed verdict."""

    def __init__(self, client: ServiceClient, benchmark: str, description: Any = None, spec: str | None = None) -> None:
        self.client = client
        self.benchmark = benchmark
        self._description = description
        self.spec = spec
        self._local: Any = None
        self.name = description.get("name") if isinstance(description, dict) else "remote"

    def __deepcopy__(self, memo: dict[int, Any]) -> "RemoteRubric":
        return self

    def describe(self) -> Any:
        """The service's rubric as a config mapping (``name``, ``rewards``), as ``Rubric.describe``."""
        if self._description is None:
            self._description = self.client.info().reward.rubric
        return self._description

    def __call__(self, task: Task, trajectory: Trajectory, verdict: Verdict) -> RewardBreakdown:
        req = api.RewardRequest(benchmark=self.benchmark, task=task, trajectory=trajectory, verdict=verdict)
        try:
            return self.client.post("reward", req, api.RewardResponse).reward
        except JudgeFailedError:
            raise
        except ToolServiceError as e:
            raise JudgeFailedError(f"reward service: {e}") from None

    def local(self) -> Any:
        """The :class:`~shopping_companion.rewards.rubric.Rubric` of :attr:`spec`, built here
        (once). Raises :class:`ConfigError` when no spec is known or it does not build here."""
        if self._local is None:
            from shopping_companion.assembly.reward_spec import load_reward_spec

            if self.spec is None:
                self.spec = self.client.info().reward.spec
            self._local = load_reward_spec(self.spec).build_rubric()
        return self._local

    @property
    def members(self) -> Any:
        return self.local().members


def _comparable(spec_json: str) -> dict[str, Any]:
    """A reward spec's JSON without ``source`` (where the spec was read from, not what it does) and
    ``python_path`` (where its modules were found: a job of ``shopcomp grpo submit`` ships them and
    has none, as :meth:`RewardSpec.identity` leaves it out), and with a rubric YAML path that is
    readable here replaced by the mapping the file holds (such a job carries that mapping inline
    instead of the path)."""
    data = json.loads(spec_json)
    if isinstance(data, dict):
        data.pop("source", None)
        data.pop("python_path", None)
        rubric = data.get("rubric")
        if isinstance(rubric, str) and rubric.endswith((".yaml", ".yml")) and Path(rubric).is_file():
            from shopping_companion.config import load_config

            try:
                data["rubric"] = load_config(rubric)
            except ConfigError:
                pass  # compared by its path
    return data


def same_reward_spec(a: str, b: str) -> bool:
    """Whether two reward specs' JSON (:meth:`RewardSpec.to_json`) score alike: equal but for
    ``source`` (the file each was read from) and ``python_path``; a rubric YAML file and its
    content inline are the same rubric (:func:`_comparable`)."""
    return _comparable(a) == _comparable(b)


@dataclass
class RemoteService:
    """A checked connection to a service (:func:`connect`): the ``client``, its ``url``, the
    ``info`` it gave, the service's name of the caller's ``benchmark`` (None when no benchmark
    was checked), and the remote objects (one products backend and one judge and rubric shared by
    every episode; a memory backend per task)."""

    client: ServiceClient
    url: str
    info: api.InfoResponse
    benchmark: str | None
    products: RemoteProducts = field(init=False)

    def __post_init__(self) -> None:
        self.products = RemoteProducts(self.client)
        self._judge: RemoteJudge | None = None
        self._rubric: RemoteRubric | None = None

    def _bench(self) -> str:
        if self.benchmark is None:
            raise ConfigError(f"tools=serve:{self.url}: no benchmark was checked with connect(benchmark_dir=...)")
        return self.benchmark

    @property
    def judge(self) -> RemoteJudge:
        if self._judge is None:
            self._judge = RemoteJudge(self.client, self._bench(), self.info.reward.judge)
        return self._judge

    @property
    def rubric(self) -> RemoteRubric:
        if self._rubric is None:
            self._rubric = RemoteRubric(self.client, self._bench(), self.info.reward.rubric, self.info.reward.spec)
        return self._rubric

    def memory(self, task: Task) -> RemoteMemory:
        """The memory backend of ``task`` (its ``task_id`` in the service's benchmark)."""
        return RemoteMemory(self.client, self._bench(), task.task_id)

    def memory_factory(self) -> Callable[[Task], RemoteMemory]:
        """``task -> RemoteMemory``."""
        return self.memory

    def describe(self) -> str:
        """One line for reports: the judge and where it runs."""
        return f"{self.info.reward.judge} (shopcomp serve at {self.url})"

    def close(self) -> None:
        self.client.close()


def _spec_summary(spec_json: str) -> str:
    try:
        d = json.loads(spec_json)
    except ValueError:
        return spec_json[:200]
    judge = d.get("judge") or {}
    return (
        f"rubric={json.dumps(d.get('rubric'), sort_keys=True)[:200]}, judge={judge.get('kind')}"
        + (f":{judge.get('model')}" if judge.get("model") else "")
        + f", scoring_deadline_s={d.get('scoring_deadline_s')}"
    )


def connect(
    tools: str,
    service: Any,
    *,
    benchmark_dir: Path | str | None,
    reward_spec: Any,
    tasks_sha256: str | None = None,
    judge: Any = None,
    client: ServiceClient | None = None,
) -> RemoteService:
    """Connect to the service of ``tools`` (``serve:URL``) with the client settings ``service``
    (a :class:`~shopping_companion.assembly.endpoints.ServiceConfig`) and check it can serve
    this run:

    1. ``GET /v1/ready`` answers 200 (else :class:`ToolServiceError` naming the URL: down, or
       what it still loads);
    2. ``GET /v1/info`` lists a benchmark whose ``tasks_sha256`` equals the local benchmark's
       (``tasks_sha256``, else computed from the tasks of ``benchmark_dir`` with
       :func:`~shopping_companion.assembly.data.benchmark_tasks_sha256`; ``benchmark_dir`` None:
       not checked) — else :class:`ConfigError` naming the loaded ones;
    3. the service's reward spec equals ``reward_spec``'s
       (:func:`~shopping_companion.assembly.reward_spec.load_reward_spec` ``.to_json()``, ignoring
       ``source``) — else :class:`ConfigError` naming both; with ``judge`` (a
       :class:`~shopping_companion.assembly.judging.JudgeSpec`) also its kind and model.

    ``client``: an existing client (default: one made from ``service``). A 401 raises
    :class:`~shopping_companion.serve.client.ServiceRefusedError` (a ``ConfigError``) naming the
    token variable."""
    from shopping_companion.assembly.reward_spec import load_reward_spec

    url = service_url(tools)
    client = client or ServiceClient.from_settings(url, service)
    where = f"tools=serve:{client.url}"
    try:
        ready = client.ready()
    except ToolServiceError as e:
        if isinstance(e, ConfigError):
            raise
        raise ToolServiceError(f"{where}: the tool service does not answer ({e})") from None
    if not ready.ready:
        waiting = ", ".join(f"{k}: {v}" for k, v in ready.deployments.items() if v != "ready") or "(not said)"
        raise ToolServiceError(
            f"{where}: the service is up but not ready yet (waiting for {waiting}); retry once "
            f"GET {client.url}{api.API_PREFIX}/ready answers 200"
        )
    info = client.info()
    name: str | None = None
    if benchmark_dir is not None or tasks_sha256 is not None:
        if tasks_sha256 is None:
            from shopping_companion.assembly.data import benchmark_tasks_sha256
            from shopping_companion.assembly.data import load_benchmark

            tasks_sha256 = benchmark_tasks_sha256(load_benchmark(Path(benchmark_dir)).tasks)  # type: ignore[arg-type]
        matches = [b for b in info.benchmarks if b.tasks_sha256 == tasks_sha256]
        if not matches:
            loaded = "; ".join(
                f"{b.name} ({b.path}, {b.n_tasks} tasks, tasks_sha256 {b.tasks_sha256})" for b in info.benchmarks
            )
            raise ConfigError(
                f"{where}: the service has not loaded the benchmark {benchmark_dir or ''} (tasks_sha256 "
                f"{tasks_sha256}); it has: {loaded or 'none'}. Start `shopcomp serve` with this benchmark, or "
                "use the benchmark directory the service loaded"
            )
        if len(matches) > 1 and benchmark_dir is not None:
            here = Path(benchmark_dir).expanduser().resolve()
            same = [b for b in matches if Path(b.path).expanduser().resolve() == here or b.name == here.name]
            matches = same or matches
        name = matches[0].name
    try:
        local = load_reward_spec(reward_spec).to_json()
    except ConfigError as e:
        raise ConfigError(f"rubric: {e}") from None
    if not same_reward_spec(local, info.reward.spec):
        raise ConfigError(
            f"{where}: the service scores with another reward spec than this run: service "
            f"{_spec_summary(info.reward.spec)}; this run ({reward_spec!r}) {_spec_summary(local)}. Start the "
            "service with this run's reward spec, or run with the service's (rubric / --reward-config)"
        )
    if judge is not None:
        theirs = _comparable(info.reward.spec).get("judge") or {}
        if (theirs.get("kind"), theirs.get("model")) != (judge.kind, judge.model):
            raise ConfigError(
                f"{where}: the service judges with {theirs.get('kind')}"
                + (f":{theirs.get('model')}" if theirs.get("model") else "")
                + f" but this run's judge is {judge.kind}"
                + (f":{judge.model}" if judge.model else "")
                + " (judge.kind / judge.model); run with the service's judge"
            )
    return RemoteService(client, client.url, info, name)
