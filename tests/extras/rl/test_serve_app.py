"""``shopcomp serve``'s Ray Serve application (shopping_companion/serve/app.py) on a real local Ray
cluster, over real HTTP: every route answers what the in-process services answer (the BM25
ProductSearch, MemoryStore.from_pool, the reward spec's judge and rubric on a gold trajectory),
concurrent mem_search requests are batched and give the sequential results, the bearer token,
the error bodies and statuses of serve/api.py, the OpenAPI schema, and a killed ProductTools
replica that Serve restarts. Runs in .venv-rl (``ray[serve]``); the application is deployed
once for the module, on the session's Ray cluster (conftest.ray_cluster)."""

from __future__ import annotations

import asyncio
import json
import os
import time

import pytest

from tests.extras.rl.conftest import free_port, require

require("ray.serve", "httpx")

import httpx  # noqa: E402

from shopping_companion.errors import ConfigError  # noqa: E402
from shopping_companion.serve import api  # noqa: E402
from shopping_companion.serve.config import ServeConfig, load_serve_config  # noqa: E402
from shopping_companion.types import Product, RewardBreakdown, Session, Verdict  # noqa: E402

pytestmark = pytest.mark.slow

TOKEN_ENV = "SHOPCOMP_TEST_SERVE_TOKEN"
TOKEN = "s3cret-token-for-the-serve-test"
BENCH = "b1"


@pytest.fixture(scope="module")
def bench(synth_bench):
    return synth_bench(2, seed=43, sessions_per_user=30)


@pytest.fixture(scope="module")
def bench_dir(bench, tmp_path_factory):
    from shopping_companion.benchmark.synth import write_benchmark

    return write_benchmark(bench, tmp_path_factory.mktemp("serveapp") / "bench")


@pytest.fixture(scope="module")
def service(bench_dir, catalog_index_dir, data_dir, embedder, ray_connection):
    """The application on the session's local Ray cluster (conftest: 2 CPUs), token set; yields
    (Deployed, cfg). Serve is shut down at the module's end (the cluster stays)."""
    from ray import serve

    from shopping_companion.serve.app import deploy, shutdown

    old = os.environ.get(TOKEN_ENV)
    os.environ[TOKEN_ENV] = TOKEN
    port = free_port()
    small = {"num_replicas": 1, "num_cpus": 0.1, "max_ongoing_requests": 64}
    cfg = load_serve_config(
        {
            "benchmarks": {BENCH: str(bench_dir)},
            "data": {"data_dir": str(data_dir), "index_dir": str(catalog_index_dir)},
            "reward_config": "paper",
            "host": "127.0.0.1",
            "port": port,
            "token_env": TOKEN_ENV,
            "memory_cache": 8,
            "batch": {"max_batch_size": 16, "batch_wait_timeout_s": 0.05},
            "deployments": {k: small for k in ("products", "memory", "scoring", "ingress")},
        }
    )
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        deployed = deploy(cfg, blocking=False)
        print(f"\nshopcomp serve cold start: {deployed.cold_start_s:.1f} s (4 deployments, 1 replica each)")
        yield deployed, cfg
    finally:
        try:
            shutdown()
        finally:
            if old is None:
                os.environ.pop(TOKEN_ENV, None)
            else:
                os.environ[TOKEN_ENV] = old


@pytest.fixture(scope="module")
def http(service):
    deployed, _ = service
    with httpx.Client(
        base_url=deployed.url + api.API_PREFIX, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60
    ) as c:
        yield c


@pytest.fixture(scope="module")
def scoring(product_search, bench, embedder):
    from shopping_companion.pipeline import product_lookup
    from shopping_companion.rewards.spec import load_reward_spec

    spec = load_reward_spec("paper")
    lookup = product_lookup(product_search)
    return spec.build_judge(lookup, bench.sessions, embedder), spec.build_rubric({"lookup": lookup})


def _store(bench, task, embedder):
    from shopping_companion.memory.store import MemoryStore

    return MemoryStore.from_pool(bench.sessions, task.history, embedder)


def _jsonable(x):
    return json.loads(json.dumps(x))


def _error(r: httpx.Response, type_: str) -> api.ErrorBody:
    assert r.status_code == api.ERROR_STATUS[type_], (r.status_code, r.text)
    body = api.ErrorResponse.model_validate(r.json()).error
    assert body.type == type_
    return body


# --------------------------------------------------------------------------- config (no Ray)


def test_config_refuses_an_exposed_host_without_a_token_and_unknown_keys(bench_dir, monkeypatch):
    monkeypatch.delenv("SHOPCOMP_NO_SUCH_TOKEN", raising=False)
    base = {"benchmarks": {BENCH: str(bench_dir)}, "token_env": "SHOPCOMP_NO_SUCH_TOKEN"}
    with pytest.raises(ConfigError) as e:
        load_serve_config(base, host="0.0.0.0")
    assert "host" in str(e.value) and "token_env" in str(e.value) and "SHOPCOMP_NO_SUCH_TOKEN" in str(e.value)
    monkeypatch.setenv("SHOPCOMP_NO_SUCH_TOKEN", "x" * 32)
    assert load_serve_config(base, host="0.0.0.0").token() == "x" * 32
    with pytest.raises(ConfigError, match="deployments"):
        load_serve_config({**base, "deployments": {"prodcts": {}}})
    with pytest.raises(ConfigError, match="benchmarks"):
        load_serve_config({"benchmarks": {}})
    with pytest.raises(ConfigError, match="reward_config"):
        load_serve_config({**base, "reward_config": "no_such_rubric_zz"})
    cfg = load_serve_config(base, ["batch.max_batch_size=1", "port=8123"])
    assert isinstance(cfg, ServeConfig) and cfg.batch.max_batch_size == 1 and cfg.port == 8123


# --------------------------------------------------------------------------- GET routes


def test_health_ready_info_and_openapi(service, http, bench, catalog_index_dir):
    from shopping_companion.assembly.data import benchmark_tasks_sha256
    from shopping_companion.rewards.spec import load_reward_spec

    deployed, cfg = service
    assert httpx.get(deployed.url + "/v1/health").json() == {"status": "ok"}  # no token needed
    r = http.get("/ready")
    assert r.status_code == 200 and r.json()["ready"] is True
    assert set(r.json()["deployments"]) == {"ProductTools", "MemoryTools", "Scoring"}
    info = api.InfoResponse.model_validate(http.get("/info").json())
    assert [b.name for b in info.benchmarks] == [BENCH]
    assert info.benchmarks[0].tasks_sha256 == benchmark_tasks_sha256(list(bench.tasks))
    assert info.benchmarks[0].n_tasks == len(bench.tasks)
    assert info.catalog.index_dir == str(catalog_index_dir)
    assert info.reward.spec == load_reward_spec("paper").to_json()
    assert info.memory_cache == 8 and info.deployments["MemoryTools"] == 1
    schema = http.get("/openapi.json").json()
    routes = {(m.upper(), p) for p, ops in schema["paths"].items() for m in ops}
    want = {("GET", f"/v1/{r}") for r in ("health", "ready", "info")} | {
        ("POST", f"/v1/{r}") for r in ("product_search", "product_view", "mem_search", "mem_view", "judge", "reward")
    }
    assert want <= routes, want - routes
    assert "MemSearchRequest" in schema["components"]["schemas"]


# --------------------------------------------------------------------------- tools equal in-process calls


def test_product_routes_equal_product_search(http, product_search):
    for args in ({"query": "wireless headphones", "top_k": 7}, {"query": "coffee", "max_price": 30.0, "top_k": 5}):
        r = http.post("/product_search", json=args)
        assert r.status_code == 200, r.text
        local = product_search.search(**args)
        assert local and r.json()["results"] == _jsonable(local)
    ids = [h["product_id"] for h in product_search.search("laptop", top_k=3)] + ["no-such-product-zz"]
    r = http.post("/product_view", json={"product_ids": ids})
    got = api.ProductViewResponse.model_validate(r.json())
    products, unknown = product_search.view(ids)
    assert got.products == products and got.unknown == unknown == ["no-such-product-zz"]
    assert all(isinstance(p, Product) for p in got.products)


def test_memory_routes_equal_memory_store(http, bench, embedder):
    for task in bench.tasks:
        store = _store(bench, task, embedder)
        queries = [p.value for p in task.preferences][:3] + [task.slots[0].product_type]
        body = {"benchmark": BENCH, "task_id": task.task_id, "queries": queries, "top_k": 8}
        r = http.post("/mem_search", json=body)
        assert r.status_code == 200, r.text
        local = store.search(queries, top_k=8)
        assert len(local) == 8 and r.json()["results"] == _jsonable(local)
        sids = store.session_ids[:2] + ["no-such-session"]
        r = http.post("/mem_view", json={"benchmark": BENCH, "task_id": task.task_id, "session_ids": sids})
        got = api.MemViewResponse.model_validate(r.json())
        sessions, unknown = store.view(sids)
        assert got.sessions == sessions and got.unknown == unknown == ["no-such-session"]
        assert all(isinstance(s, Session) for s in got.sessions)


def test_concurrent_mem_searches_are_batched_and_equal_sequential(service, bench, embedder):
    from ray import serve

    deployed, _ = service
    task = bench.tasks[0]
    words = [p.value for p in task.preferences] + [s.product_type for s in task.slots]
    queries = [f"{words[i % len(words)]} {w}" for i, w in enumerate(["price", "size", "color", "brand"] * 4)]
    fresh = [f"{q} for the batch" for q in queries]  # never encoded by the replica before the concurrent phase
    body = lambda q: {"benchmark": BENCH, "task_id": task.task_id, "queries": [q], "top_k": 5}  # noqa: E731
    assert len(queries) == 16
    store = _store(bench, task, embedder)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    mem = serve.get_deployment_handle("MemoryTools", app_name="shopcomp")
    with httpx.Client(base_url=deployed.url + api.API_PREFIX, headers=headers, timeout=60) as c:
        c.post("/mem_search", json=body(queries[0]))  # the store is built; the concurrent requests only search
        sequential = [c.post("/mem_search", json=body(q)).json()["results"] for q in queries]
        before = mem.stats.remote().result()
        again = [c.post("/mem_search", json=body(q)).json()["results"] for q in queries]  # from the query cache
    before_batch = mem.stats.remote().result()
    assert again == sequential == [_jsonable(store.search(q, top_k=5)) for q in queries]
    assert before_batch["cached"] - before["cached"] == 16 and before_batch["requests"] == before["requests"]

    async def concurrent():
        async with httpx.AsyncClient(base_url=deployed.url + api.API_PREFIX, headers=headers, timeout=60) as c:
            rs = await asyncio.gather(*(c.post("/mem_search", json=body(q)) for q in fresh))
        return [r.json()["results"] for r in rs]

    together = asyncio.run(concurrent())
    after = mem.stats.remote().result()
    assert together == [_jsonable(store.search(q, top_k=5)) for q in fresh]
    assert after["batching"] is True
    assert after["requests"] - before_batch["requests"] == 16
    assert after["batches"] - before_batch["batches"] < 16  # some requests shared one encoder call
    assert after["max_batch"] >= 2


def test_judge_and_reward_equal_the_spec_on_a_gold_trajectory(http, bench, product_search, embedder, scoring):
    from shopping_companion.envs.env import EnvConfig, ShoppingCompanionEnv
    from shopping_companion.envs.scripted import GoldPolicy
    from shopping_companion.envs.tools import ToolBox
    from tests.env_support import run

    judge, rubric = scoring
    task = bench.tasks[0]
    env = ShoppingCompanionEnv(
        task, ToolBox(product_search, _store(bench, task, embedder)), judge, EnvConfig(), reward_fn=rubric
    )
    run(env, GoldPolicy(task))
    assert [r.trajectory.stage for r in env.results] == [1, 2]
    for res in env.results:
        req = {
            "benchmark": BENCH,
            "task": task.model_dump(mode="json"),
            "trajectory": res.trajectory.model_dump(mode="json"),
        }
        r = http.post("/judge", json=req)
        assert r.status_code == 200, r.text
        verdict = Verdict.model_validate(r.json()["verdict"])
        assert verdict == judge.judge(task, res.trajectory) == res.verdict
        r = http.post("/reward", json={**req, "verdict": verdict.model_dump(mode="json")})
        assert r.status_code == 200, r.text
        reward = RewardBreakdown.model_validate(r.json()["reward"])
        assert reward == rubric(task, res.trajectory, verdict) == res.reward
    assert env.results[1].verdict.success  # the gold recommendation is judged a success
    failed = env.results[1].verdict.model_copy(update={"failed": True})
    r = http.post("/reward", json={**req, "verdict": failed.model_dump(mode="json")})
    assert "cannot be scored" in _error(r, "judge_failed").message
    # a verdict that does not fit the task or the stage is the request's fault: 422 naming the field
    good = env.results[1].verdict
    for field, bad in (("verdict.b", {"b": 1 - good.b}), ("verdict.stage", {"stage": 1})):
        r = http.post("/reward", json={**req, "verdict": good.model_copy(update=bad).model_dump(mode="json")})
        assert _error(r, "bad_request").field == field, r.text


# --------------------------------------------------------------------------- direct endpoints


def _endpoints(http) -> list[api.DirectEndpoint]:
    r = http.get("/endpoints")
    assert r.status_code == 200, r.text
    body = api.EndpointsResponse.model_validate(r.json())
    assert body.enabled is True
    return body.endpoints


def test_direct_endpoints_answer_like_the_service_and_need_the_token(service, http, bench, embedder):
    from ray import serve

    from shopping_companion.serve.client import ServiceClient

    eps = _endpoints(http)
    assert sorted(e.deployment for e in eps) == ["MemoryTools", "ProductTools", "Scoring"]
    by = {e.deployment: e for e in eps}
    for e in eps:
        assert e.url.startswith("http://127.0.0.1:")  # a loopback service binds its replicas to loopback
        assert httpx.get(f"{e.url}{api.API_PREFIX}/direct").json() == {"nonce": e.nonce}
    prod = by["ProductTools"].url + api.API_PREFIX
    body = {"query": "running shoes", "top_k": 5}
    assert _error(httpx.post(f"{prod}/product_search", json=body), "unauthorized").message.startswith("missing")
    right = {"Authorization": f"Bearer {TOKEN}"}
    direct = httpx.post(f"{prod}/product_search", json=body, headers=right)
    assert direct.status_code == 200 and direct.json() == http.post("/product_search", json=body).json()
    # the same error bodies as the service: 400 tool_input with field, 422 bad_request, 404 not_loaded
    assert _error(httpx.post(f"{prod}/product_search", json={"query": "  "}, headers=right), "tool_input").field
    assert _error(httpx.post(f"{prod}/product_search", json={"top_k": 3}, headers=right), "bad_request").field
    mem = by["MemoryTools"].url + api.API_PREFIX
    task = bench.tasks[0]
    r = httpx.post(f"{mem}/mem_view", json={"benchmark": "nope", "task_id": "x", "session_ids": ["s"]}, headers=right)
    assert "nope" in _error(r, "not_loaded").message
    # the client sends tool calls there, and concurrent mem_searches on the direct loop are batched
    client = ServiceClient(service[0].url, TOKEN)
    words = [p.value for p in task.preferences] + [s.product_type for s in task.slots]
    queries = [f"{words[i % len(words)]} {w}" for i, w in enumerate(["price", "size", "color", "brand"] * 4)]
    store = _store(bench, task, embedder)
    want = [_jsonable(store.search(q, top_k=5)) for q in queries]
    req = lambda q: api.MemSearchRequest(benchmark=BENCH, task_id=task.task_id, queries=[q], top_k=5)  # noqa: E731
    assert [
        client.post("mem_search", req(q), api.MemSearchResponse).model_dump(mode="json")["results"] for q in queries
    ] == want
    assert client.direct_requests == len(queries)
    handle = serve.get_deployment_handle("MemoryTools", app_name="shopcomp")
    before = handle.stats.remote().result()

    fresh = [f"{q} on the direct loop" for q in queries]  # not in the replica's query cache yet

    async def concurrent():
        async with httpx.AsyncClient(base_url=mem, headers=right, timeout=60) as c:
            rs = await asyncio.gather(*(c.post("/mem_search", json=req(q).model_dump()) for q in fresh))
        return [r.json()["results"] for r in rs]

    assert asyncio.run(concurrent()) == [_jsonable(store.search(q, top_k=5)) for q in fresh]
    after = handle.stats.remote().result()
    assert after["requests"] - before["requests"] == 16 and after["batches"] - before["batches"] < 16


# --------------------------------------------------------------------------- errors


def test_token_is_required_on_every_route_but_health(service):
    deployed, _ = service
    url = deployed.url + api.API_PREFIX
    body = {"query": "tea", "top_k": 3}
    assert _error(httpx.post(f"{url}/product_search", json=body), "unauthorized").message.startswith("missing")
    wrong = {"Authorization": "Bearer not-the-token"}
    assert _error(httpx.post(f"{url}/product_search", json=body, headers=wrong), "unauthorized").message.startswith(
        "wrong"
    )
    for route in ("ready", "info", "openapi.json"):
        _error(httpx.get(f"{url}/{route}"), "unauthorized")
    right = {"Authorization": f"Bearer {TOKEN}"}
    assert httpx.post(f"{url}/product_search", json=body, headers=right).status_code == 200
    assert httpx.get(f"{url}/health").status_code == 200


def test_unknown_benchmark_or_task_is_404_naming_the_loaded_ones(http, bench):
    task = bench.tasks[0]
    r = http.post("/mem_search", json={"benchmark": "nope", "task_id": task.task_id, "queries": ["x"]})
    assert "nope" in (m := _error(r, "not_loaded").message) and BENCH in m
    r = http.post("/mem_view", json={"benchmark": BENCH, "task_id": "no-such-task", "session_ids": ["s"]})
    assert "no-such-task" in (m := _error(r, "not_loaded").message) and BENCH in m
    from shopping_companion.types import Trajectory

    traj = Trajectory(task_id=task.task_id, stage=1).model_dump(mode="json")
    r = http.post("/judge", json={"benchmark": "nope", "task": task.model_dump(mode="json"), "trajectory": traj})
    assert "nope" in (m := _error(r, "not_loaded").message) and BENCH in m
    other = task.model_copy(update={"task_id": "not-in-the-benchmark"}).model_dump(mode="json")
    r = http.post("/judge", json={"benchmark": BENCH, "task": other, "trajectory": traj})
    assert "not-in-the-benchmark" in _error(r, "not_loaded").message


def test_bad_bodies_are_422_and_tool_input_errors_are_400_with_field(http, bench):
    task = bench.tasks[0]
    r = http.post("/product_search", json={"query": "tea", "top_k": "many"})
    assert _error(r, "bad_request").field == "top_k"
    r = http.post("/product_search", json={"query": "tea", "colour": "red"})
    assert _error(r, "bad_request").field == "colour"
    r = http.post("/product_search", content=b"{not json", headers={"Content-Type": "application/json"})
    e = _error(r, "bad_request")
    assert e.field is None and "not valid JSON" in e.message
    for bad in (True, 3.0):  # no silent coercion of a bool or a float to top_k
        assert _error(http.post("/product_search", json={"query": "tea", "top_k": bad}), "bad_request").field == "top_k"
    # an unknown id is not echoed whole, a body over the limit is refused before it is parsed
    r = http.post("/mem_view", json={"benchmark": BENCH, "task_id": "t" * 1_000_000, "session_ids": ["s"]})
    assert r.status_code == 404 and len(r.content) < 2_000
    targets = [http.base_url] + [httpx.URL(e.url + api.API_PREFIX) for e in _endpoints(http)]
    huge = b'{"query": "' + b"x" * (api.MAX_BODY_BYTES + 10) + b'"}'
    for base in targets:
        r = http.post(f"{base}/product_search", content=huge, headers={"Content-Type": "application/json"})
        assert r.status_code == 413 and "over" in r.json()["error"]["message"], (base, r.text[:300])
    # values the tools refuse: the service checks them itself, whatever the client did
    mem = {"benchmark": BENCH, "task_id": task.task_id}
    e = _error(http.post("/mem_search", json={**mem, "queries": ["tea"], "top_k": 0}), "tool_input")
    assert e.field == "top_k" and e.message.startswith("top_k: ")
    e = _error(http.post("/mem_search", json={**mem, "queries": ["  "]}), "tool_input")
    assert e.field == "queries"
    e = _error(http.post("/product_search", json={"query": "tea", "top_k": 51}), "tool_input")
    assert e.field == "top_k"
    e = _error(http.post("/mem_view", json={**mem, "session_ids": []}), "tool_input")
    assert e.field == "session_ids"
    _error(http.get("/no_such_route"), "not_loaded")
    # a lone surrogate (a JSON escape can carry one) is the tools' 400, on the service and directly;
    # a body nested past the parser's limit is a 422 like any unreadable body
    by = {e.deployment: httpx.URL(e.url + api.API_PREFIX) for e in _endpoints(http)}
    raw = {"Content-Type": "application/json"}
    service = str(http.base_url).rstrip("/")
    for base, route, body, field in [
        (service, "product_search", b'{"query": "\\ud800 tea"}', "query"),
        (by["ProductTools"], "product_search", b'{"query": "tea", "shop_id": "a\\udfff"}', "shop_id"),
        (by["ProductTools"], "product_view", b'{"product_ids": ["\\ud83d"]}', "product_ids"),
        (service, "mem_search", json.dumps({**mem, "queries": ["\ud800"]}).encode(), "queries"),
        (by["MemoryTools"], "mem_search", json.dumps({**mem, "queries": ["tea \udc00"]}).encode(), "queries"),
        (by["MemoryTools"], "mem_view", json.dumps({**mem, "session_ids": ["\ud800"]}).encode(), "session_ids"),
    ]:
        r = http.post(f"{base}/{route}", content=body, headers=raw)
        e = _error(r, "tool_input")
        assert e.field == field and "unpaired surrogate" in e.message, (base, route, r.text[:300])
    deep = b'{"query": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    for base in (service, by["ProductTools"]):
        assert _error(http.post(f"{base}/product_search", content=deep, headers=raw), "bad_request")
    e = _error(http.get(f"{by['ProductTools']}/no_such_route"), "not_loaded")
    assert "this direct endpoint serves POST /v1/product_search, /v1/product_view" in e.message


# --------------------------------------------------------------------------- a replica dies


def test_a_killed_product_replica_is_restarted_and_requests_succeed_again(service, http, product_search):
    import ray
    from ray import serve

    h = serve.get_deployment_handle("ProductTools", app_name="shopcomp")
    first = h.whoami.remote().result()
    ray.kill(ray.get_actor(first["replica"], namespace="serve"), no_restart=True)
    body = {"query": "running shoes", "top_k": 5}
    want = _jsonable(product_search.search(**body))
    statuses: list[int] = []
    t0 = time.monotonic()
    while time.monotonic() - t0 < 120:
        try:
            r = http.post("/product_search", json=body, timeout=30)
        except httpx.HTTPError:
            statuses.append(-1)
        else:
            statuses.append(r.status_code)
            if r.status_code == 200:
                break
            assert r.status_code in (500, 503), r.text  # retryable while the replica is down
        time.sleep(0.5)
    assert statuses and statuses[-1] == 200, statuses
    assert r.json()["results"] == want
    second = h.whoami.remote().result()
    assert second["pid"] != first["pid"] and second["replica"] != first["replica"]
    # the dead replica's direct endpoint is no longer listed; the new one is
    listed = {e.replica for e in _endpoints(http) if e.deployment == "ProductTools"}
    assert listed == {second["replica"]}
    for _ in range(3):
        assert http.post("/product_search", json=body).json()["results"] == want
    print(f"\nProductTools restarted in {time.monotonic() - t0:.1f} s; statuses while down: {statuses}")


# --------------------------------------------------------------------------- episodes through the service


def test_eval_through_the_service_equals_local_while_replicas_are_killed(
    service, bench, bench_dir, catalog_index_dir, data_dir, tmp_path
):
    """The same evaluation in process and through the deployed service gives the same results
    (observations, verdicts, rewards) and identity; during the remote run the ProductTools and
    Scoring replicas are killed once each: the client's retries ride it out and no episode is
    lost or errored."""
    import threading

    import ray
    import yaml
    from ray import serve
    from typer.testing import CliRunner

    from shopping_companion.cli import app
    from tests.openai_server import ScriptedOpenAIServer
    from tests.scripted_policy import policy_script
    from tests.serve_server import result_lines

    deployed, _ = service
    runs = tmp_path / "runs"
    with ScriptedOpenAIServer(policy_script(bench.tasks)) as policy:
        base = {
            "bench": {"path": str(bench_dir)},
            "output": {"name": "local", "runs_dir": str(runs)},
            "backend": {"kind": "openai", "model": "m", "base_url": policy.base_url, "max_retries": 0},
            "strategies": ["two_stage:none", "one_stage", "oracle"],
            "trials": 2,
            "env": {"max_turns": 6},
            "concurrency": 2,
            "data": {"data_dir": str(data_dir), "index_dir": str(catalog_index_dir)},
            "service": {"token_env": TOKEN_ENV, "retries": 12, "backoff_s": 0.5, "deadline_s": 240},
        }
        cfg = tmp_path / "run.yaml"
        cfg.write_text(yaml.safe_dump(base))
        out = CliRunner().invoke(app, ["eval", "--config", str(cfg)])
        assert out.exit_code == 0, out.output

        killed: list[str] = []

        def killer() -> None:
            for name in ("ProductTools", "Scoring"):
                time.sleep(1.0)
                who = serve.get_deployment_handle(name, app_name="shopcomp").whoami.remote().result()
                ray.kill(ray.get_actor(who["replica"], namespace="serve"), no_restart=True)
                killed.append(name)

        t = threading.Thread(target=killer, daemon=True)
        t.start()
        args = ["eval", "--config", str(cfg), "--set", "output.name=remote", "--set", f"tools=serve:{deployed.url}"]
        out = CliRunner().invoke(app, args + ["--set", f"data.index_dir={tmp_path / 'no-index-here'}"])
        t.join(timeout=120)
        assert out.exit_code == 0, out.output
        assert killed == ["ProductTools", "Scoring"]
    local, remote = result_lines(runs / "local" / "results.jsonl"), result_lines(runs / "remote" / "results.jsonl")
    assert len(local) == len(bench.tasks) * 3 * 2
    assert all(d["error"] is None for d in remote), [d["error"] for d in remote if d["error"]]
    assert remote == local
    li = json.loads((runs / "local" / "results.identity.json").read_text())
    assert li == json.loads((runs / "remote" / "results.identity.json").read_text())
    assert not (tmp_path / "no-index-here").exists()


# --------------------------------------------------------------------------- the command


def test_shopcomp_serve_command_serves_until_interrupted(bench_dir, catalog_index_dir, data_dir, tmp_path):
    """``shopcomp serve --bench DIR`` in its own process (its own private Ray cluster): it prints
    the URL, answers health and a tool call, and Ctrl-C (SIGINT) stops it with exit 0. An exposed
    host without a token and a directory that is not a benchmark are refused (exit 2) before Ray
    starts."""
    import signal
    import subprocess
    import sys

    exe = [sys.executable, "-m", "shopping_companion.cli"]
    env = {k: v for k, v in os.environ.items() if k not in (TOKEN_ENV, "SHOPCOMP_SERVE_TOKEN")}
    env["COLUMNS"] = "200"
    port = free_port()
    log = tmp_path / "serve.log"
    cmd = (
        exe
        + [
            "serve",
            "--bench",
            f"b={bench_dir}",
            "--port",
            str(port),
            "--num-cpus",
            "2",
            "--set",
            f"data.data_dir={data_dir}",
            "--set",
            f"data.index_dir={catalog_index_dir}",
        ]
        + [f"--set=deployments.{d}.num_cpus=0.1" for d in ("products", "memory", "scoring", "ingress")]
    )
    # the server starts first; the refusals (each its own process too) run while it loads
    with log.open("w") as f:
        proc = subprocess.Popen(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, cwd=tmp_path)
    try:
        r = subprocess.run(
            exe + ["serve", "--bench", str(bench_dir), "--host", "0.0.0.0"], env=env, capture_output=True, text=True
        )
        assert r.returncode == 2 and "SHOPCOMP_SERVE_TOKEN" in r.stderr, r.stderr
        r = subprocess.run(exe + ["serve", "--bench", str(tmp_path)], env=env, capture_output=True, text=True)
        assert r.returncode == 2 and "not a benchmark directory" in r.stderr, r.stderr
        r = subprocess.run(
            exe + ["serve", "--bench", f"q={bench_dir}", "--check"], env=env, capture_output=True, text=True
        )
        assert r.returncode == 0 and "benchmarks:" in r.stdout and "q:" in r.stdout, (r.stdout, r.stderr)
        assert "replicas reserve 1.85 CPUs" in " ".join(r.stderr.split() + r.stdout.split())
        # a private cluster too small for the replicas: refused at once (Serve would wait forever)
        other = next(p for p in iter(free_port, None) if p != port)  # not the starting server's port
        r = subprocess.run(
            exe
            + ["serve", "--bench", f"q={bench_dir}", "--num-cpus", "2", "--port", str(other)]
            + ["--set", "deployments.products.num_replicas=3"],
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        err = " ".join(r.stderr.split())
        assert r.returncode == 2 and "reserve 2.85 CPUs" in err and "has 2" in err, r.stderr
        t0 = time.monotonic()
        while "ready in" not in log.read_text() and time.monotonic() - t0 < 240:
            assert proc.poll() is None, log.read_text()
            time.sleep(0.2)
        text = log.read_text()
        assert f"http://127.0.0.1:{port}/v1" in text and "bearer token off" in " ".join(text.split()), text
        url = f"http://127.0.0.1:{port}/v1"
        assert httpx.get(f"{url}/health").json() == {"status": "ok"}
        r = httpx.post(f"{url}/product_search", json={"query": "coffee", "top_k": 2}, timeout=60)
        assert r.status_code == 200 and len(r.json()["results"]) == 2
        proc.send_signal(signal.SIGTERM)  # as systemd / Docker / Kubernetes stop it; Ctrl-C takes the same path
        assert proc.wait(timeout=120) == 0, log.read_text()
        assert "stopped" in log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
