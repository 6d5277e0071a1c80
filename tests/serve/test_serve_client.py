"""The ``shopcomp serve`` client (serve/client.py) and the remote tools, judge and rubric
(serve/remote.py) against a REAL HTTP server on 127.0.0.1 (tests/serve_server.py) that speaks
serve/api.py over our real in-process ProductSearch, MemoryStore, rule judge and rubric.

What a remote run must guarantee: the agent sees byte-identical observations, an episode gives the
same result as in process, transient faults are retried away, an outage is never blamed on the
agent (backend error / unscored judge failure, both retried on resume), the token is required, and
connect() refuses a service that cannot serve this run, naming what is wrong."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest

from shopping_companion.benchmark.evaluate import EvalSettings, run_episode
from shopping_companion.benchmark.report import error_kind
from shopping_companion.assembly.data import benchmark_tasks_sha256
from shopping_companion.assembly.reward_spec import build_rubric
from shopping_companion.benchmark.run_config import ServiceConfig
from shopping_companion.envs.env import EnvConfig
from shopping_companion.envs.scripted import GoldPolicy
from shopping_companion.envs.tools import ToolBox
from shopping_companion.errors import ConfigError, JudgeFailedError, ToolInputError, ToolServiceError
from shopping_companion.serve import api
from shopping_companion.serve.client import ServiceClient, ServiceRefusedError
from shopping_companion.serve.remote import RemoteJudge, RemoteMemory, RemoteProducts, RemoteRubric, connect
from shopping_companion.types import ToolCall
from tests.env_support import EnvKit, make_single_tasks
from tests.serve_server import Bench, ServeServer

pytestmark = pytest.mark.slow

BENCH = "b1"


@pytest.fixture(scope="module")
def world(catalog_products, sgd_sessions):
    return make_single_tasks(catalog_products, sgd_sessions, n=2, seed=23)


@pytest.fixture(scope="module")
def kit(world, product_search, embedder):
    return EnvKit(product_search, embedder, world[1])


@pytest.fixture(scope="module")
def server(world, product_search, embedder):
    tasks, pool = world
    with ServeServer(product_search, {BENCH: Bench(tasks, pool)}, embedder) as srv:
        yield srv


def fast_client(url: str, **kw: Any) -> ServiceClient:
    # a first mem_search builds a MiniLM store: 16 s measured with a cold model on a loaded 2-core machine
    opts = dict(timeout_s=60.0, retries=4, backoff_s=0.01, deadline_s=120.0)
    opts.update(kw)
    return ServiceClient(url, **opts)


def strip_times(x: Any) -> Any:
    """``x`` (a model dump) without wall-clock fields (they differ between any two runs)."""
    if isinstance(x, dict):
        return {k: strip_times(v) for k, v in x.items() if k not in ("wall_s", "latency_s")}
    if isinstance(x, list):
        return [strip_times(v) for v in x]
    return x


class Remote:
    """Remote tools, judge and rubric of one server, through one client."""

    def __init__(self, client: ServiceClient) -> None:
        self.client = client
        info = client.info()
        self.products = RemoteProducts(client)
        self.judge = RemoteJudge(client, BENCH, info.reward.judge)
        self.rubric = RemoteRubric(client, BENCH, info.reward.rubric, info.reward.spec)

    def memory(self, task) -> RemoteMemory:
        return RemoteMemory(self.client, BENCH, task.task_id)


def _calls(task, other_ids: list[str]) -> list[tuple[ToolCall, int | None]]:
    ref = task.reference_product_ids[0]
    needle = task.needle_session_ids[0]
    hist = [r.session_id for r in task.history][:3]
    specs: list[tuple[str, dict[str, Any], int | None]] = [
        ("product_search", {"query": task.slots[0].product_type, "top_k": 5}, None),
        ("product_search", {"query": task.slots[0].product_type, "top_k": 50}, None),
        ("product_search", {"query": task.slots[0].product_type, "top_k": 50}, 900),  # truncated, ids follow
        ("product_search", {"query": "shirt", "min_price": 10, "max_price": 2000.5, "top_k": "7"}, None),
        ("product_search", {"query": "zzqxv nothing matches this", "top_k": 3}, None),
        ("product_search", {"query": "   "}, None),  # the catalog's own ToolInputError
        ("product_search", {"query": "x" * 3000}, None),
        ("product_search", {"query": "shirt", "top_k": 0}, None),  # refused by the tool box itself
        ("product_view", {"product_ids": [ref]}, None),
        ("product_view", {"product_ids": [ref, "no-such-id", ref]}, None),
        ("product_view", {"product_ids": ["no-such-id", "nope"]}, None),
        ("product_view", {"product_ids": [ref, "", 7]}, None),
        ("product_view", {"product_ids": [ref] + other_ids[:3]}, 700),
        ("mem_search", {"queries": [task.instruction], "top_k": 10}, None),
        ("mem_search", {"queries": "what colour do I like", "top_k": 20}, 600),
        ("mem_search", {"queries": ["  "]}, None),
        ("mem_view", {"session_ids": [needle]}, None),
        ("mem_view", {"session_ids": hist + ["unknown-session"]}, None),
        ("mem_view", {"session_ids": ["unknown-session"]}, None),
        ("mem_view", {"session_ids": hist}, 500),
        ("no_such_tool", {}, None),
    ]
    return [(ToolCall(name=n, arguments=a, call_id=f"c{i}"), m) for i, (n, a, m) in enumerate(specs)]


ALLOWED = ("mem_search", "mem_view", "product_search", "product_view")


def test_remote_toolbox_observations_are_identical_to_local(world, kit, server):
    tasks, _ = world
    remote = Remote(fast_client(server.base_url))
    for task in tasks:
        local_box = ToolBox(kit.products, kit.memory(task))
        remote_box = ToolBox(remote.products, remote.memory(task))
        other = [t.reference_product_ids[0] for t in tasks if t is not task]
        errors = 0
        for call, max_chars in _calls(task, other):
            want = local_box.execute(call, ALLOWED, max_chars=max_chars)
            got = remote_box.execute(call, ALLOWED, max_chars=max_chars)
            assert got.model_dump() == want.model_dump(), call
            errors += want.error is not None
        assert errors >= 6  # the bad-argument calls really were errors, on both sides
    assert server.routes("product_search") >= 10 and server.routes("mem_view") >= 6


def test_tool_input_error_text_is_the_local_one(kit, server):
    remote = RemoteProducts(fast_client(server.base_url))
    with pytest.raises(ToolInputError) as local:
        kit.products.search("   ")
    with pytest.raises(ToolInputError) as got:
        remote.search("   ")
    assert str(got.value) == str(local.value) and got.value.field == local.value.field == "query"


def _episode(task, policy, products, memory, judge, rubric, mode="two_stage", hint="none"):
    settings = EvalSettings(env=EnvConfig(mode=mode, hint=hint), reward_fn=rubric, seed=5)
    return run_episode(task, policy, products, memory, judge, settings)


@pytest.mark.parametrize("mode,hint", [("two_stage", "none"), ("two_stage", "high"), ("one_stage", "none")])
def test_remote_episode_equals_local(world, kit, server, mode, hint):
    tasks, _ = world
    rubric = build_rubric("paper", kit.lookup)
    remote = Remote(fast_client(server.base_url))
    task = tasks[0]
    wrong = GoldPolicy(task, recommend=[tasks[1].reference_product_ids[0]])
    for policy in (GoldPolicy(task), wrong):
        want = _episode(task, policy, kit.products, kit.memory(task), kit.judge, rubric, mode, hint)
        got = _episode(task, policy, remote.products, remote.memory(task), remote.judge, remote.rubric, mode, hint)
        assert got.error is None and want.error is None
        assert strip_times(got.model_dump()) == strip_times(want.model_dump())
    assert want.succ is False  # the wrong product really failed (and was scored, not errored)
    assert remote.rubric.describe() == rubric.describe()


@pytest.mark.parametrize("mode", ["reset", "ray503", "503", "500"])
def test_transient_faults_are_retried_and_results_equal(world, kit, product_search, embedder, mode):
    tasks, pool = world
    task = tasks[1]
    rubric = build_rubric("paper", kit.lookup)
    want = _episode(task, GoldPolicy(task), kit.products, kit.memory(task), kit.judge, rubric)
    with ServeServer(product_search, {BENCH: Bench(tasks, pool)}, embedder, fail_first=3, fail_mode=mode) as srv:
        remote = Remote(fast_client(srv.base_url))  # info() meets the faults first
        got = _episode(task, GoldPolicy(task), remote.products, remote.memory(task), remote.judge, remote.rubric)
        assert srv.failed == 3
    assert got.error is None
    assert strip_times(got.model_dump()) == strip_times(want.model_dump())


def test_faults_on_every_route_are_retried(world, kit, product_search, embedder):
    """Each route's first answer is a Ray 503: every kind of call retries (tools, judge, reward)."""
    tasks, pool = world
    task = tasks[0]
    rubric = build_rubric("paper", kit.lookup)
    want = _episode(task, GoldPolicy(task), kit.products, kit.memory(task), kit.judge, rubric)
    with ServeServer(product_search, {BENCH: Bench(tasks, pool)}, embedder) as srv:
        remote = Remote(fast_client(srv.base_url))
        for route in ("product_search", "product_view", "mem_search", "mem_view", "judge", "reward"):
            srv.fail_left, srv.fail_mode, srv.fail_routes = 1, "ray503", {route}
            got = _episode(task, GoldPolicy(task), remote.products, remote.memory(task), remote.judge, remote.rubric)
            assert srv.fail_left == 0, route
            assert strip_times(got.model_dump()) == strip_times(want.model_dump()), route


def test_a_service_down_past_the_deadline_is_a_backend_error_not_an_observation(world, product_search, embedder):
    tasks, pool = world
    task = tasks[0]
    with ServeServer(product_search, {BENCH: Bench(tasks, pool)}, embedder) as srv:
        client = fast_client(srv.base_url, retries=50, backoff_s=0.05, deadline_s=1.0)
        remote = Remote(client)
        srv.down_routes.add("mem_search")
        t0 = time.monotonic()
        with pytest.raises(ToolServiceError) as e:
            remote.memory(task).search(["x"])
        took = time.monotonic() - t0
        msg = str(e.value)
        assert f"{srv.base_url}/v1/mem_search" in msg and "attempt(s)" in msg and "HTTP 503" in msg
        assert took < 3.0  # the deadline bounds the call, not the 50 retries
        box = ToolBox(remote.products, remote.memory(task))
        with pytest.raises(ToolServiceError):
            box.execute(ToolCall(name="mem_search", arguments={"queries": ["x"]}, call_id="c"), ALLOWED)
        res = _episode(task, GoldPolicy(task), remote.products, remote.memory(task), remote.judge, remote.rubric)
    assert res.error is not None and res.error.startswith("tool service:") and error_kind(res) == "backend"
    assert not res.stages  # nothing was scored
    # a server that is gone altogether (connection refused)
    dead = fast_client(srv.base_url, retries=2, backoff_s=0.01, deadline_s=2.0)
    with pytest.raises(ToolServiceError, match=r"no answer after 3 attempt\(s\).*ConnectError"):
        RemoteProducts(dead).search("shirt")


def test_judge_or_reward_unreachable_is_an_unscored_judge_failure(world, product_search, embedder):
    tasks, pool = world
    task = tasks[0]
    with ServeServer(product_search, {BENCH: Bench(tasks, pool)}, embedder) as srv:
        remote = Remote(fast_client(srv.base_url, retries=2, backoff_s=0.01, deadline_s=2.0))
        for route, text in (("judge", "judge failed: JudgeFailedError: judge service"), ("reward", "reward service")):
            srv.down_routes = {route}
            res = _episode(task, GoldPolicy(task), remote.products, remote.memory(task), remote.judge, remote.rubric)
            assert res.error is not None and text in res.error and error_kind(res) == "judge", res.error
            assert res.stages and all(s.reward.components.get("judge_failed") == 1.0 for s in res.stages)
        srv.down_routes = set()
        with pytest.raises(JudgeFailedError):  # a failed verdict is refused by the service's rubric (409)
            verdict = remote.judge.judge(task, res.stages[0].trajectory).model_copy(update={"failed": True})
            remote.rubric(task, res.stages[0].trajectory, verdict)


def test_bearer_token(world, product_search, embedder, monkeypatch):
    tasks, pool = world
    with ServeServer(product_search, {BENCH: Bench(tasks, pool)}, embedder, token="s3cret") as srv:
        assert fast_client(srv.base_url).health().status == "ok"  # liveness needs no token
        with pytest.raises(ServiceRefusedError, match=r"requires a bearer token: set \$MY_TOKEN") as e:
            fast_client(srv.base_url, token_env="MY_TOKEN").info()
        assert e.value.status == 401 and isinstance(e.value, ConfigError) and e.value.exit_code == 2
        with pytest.raises(ServiceRefusedError, match=r"refused the bearer token in \$MY_TOKEN"):
            fast_client(srv.base_url, token="wrong", token_env="MY_TOKEN").info()
        n = len(srv.requests)
        ok = fast_client(srv.base_url, token="s3cret")
        assert ok.info().benchmarks[0].name == BENCH
        assert RemoteProducts(ok).search("shirt", top_k=2)
        assert srv.requests[n][2] == "Bearer s3cret"
        assert sum(1 for _, r, _ in srv.requests if r == "info") == 3  # 401s are never retried
        monkeypatch.setenv("MY_TOKEN", "s3cret")
        svc = connect(
            f"serve:{srv.base_url}",
            ServiceConfig(token_env="MY_TOKEN"),
            benchmark_dir=None,
            reward_spec="paper",
            tasks_sha256=benchmark_tasks_sha256(tasks),
        )
        assert svc.benchmark == BENCH and svc.judge.name == "rule"


def test_connect_refusals_name_what_is_wrong(world, product_search, embedder):
    tasks, pool = world
    sha = benchmark_tasks_sha256(tasks)
    with ServeServer(product_search, {BENCH: Bench(tasks, pool, "/srv/bench-b1")}, embedder) as srv:
        tools, cfg = f"serve:{srv.base_url}", ServiceConfig(retries=0)
        ok = connect(tools, cfg, benchmark_dir=None, reward_spec="paper", tasks_sha256=sha)
        assert ok.benchmark == BENCH and ok.rubric.describe()["name"] == build_rubric("paper").describe()["name"]
        with pytest.raises(ConfigError) as e:
            connect(tools, cfg, benchmark_dir=None, reward_spec="paper", tasks_sha256="0123456789abcdef")
        msg = str(e.value)
        assert "has not loaded the benchmark" in msg and "0123456789abcdef" in msg
        assert f"b1 (/srv/bench-b1, 2 tasks, tasks_sha256 {sha})" in msg
        with pytest.raises(ConfigError) as e:
            connect(tools, cfg, benchmark_dir=None, reward_spec="outcome_only", tasks_sha256=sha)
        msg = str(e.value)
        assert "another reward spec" in msg and 'service rubric="paper"' in msg and 'rubric="outcome_only"' in msg, msg
        # unknown task of a loaded benchmark: refused (404), and the tool box does not blame the agent
        ghost = tasks[0].model_copy(update={"task_id": "ghost"})
        with pytest.raises(ServiceRefusedError, match="not in benchmark"):
            ToolBox(ok.products, ok.memory(ghost)).execute(
                ToolCall(name="mem_search", arguments={"queries": ["x"]}, call_id="c"), ALLOWED
            )
    with pytest.raises(ToolServiceError, match=rf"tools=serve:{srv.base_url}: the tool service does not answer"):
        connect(tools, ServiceConfig(retries=1, backoff_s=0.01), benchmark_dir=None, reward_spec="paper")
    with pytest.raises(ConfigError, match="serve:URL"):
        connect("local", cfg, benchmark_dir=None, reward_spec="paper")


def test_rl_resources_through_the_service(world, kit, server, tmp_path):
    """trainers.resources with tools=serve:URL: tasks read here, tools/judge/rubric remote; an
    environment built from them plays the same episode as a local one; another reward spec is
    refused."""
    from shopping_companion.trainers.resources import ResourceSpec, build_resources

    tasks, pool = world
    bench = tmp_path / "bench"
    bench.mkdir()
    (bench / "tasks.jsonl").write_text("".join(t.model_dump_json() + "\n" for t in tasks))
    (bench / "sessions.jsonl").write_text("".join(s.model_dump_json() + "\n" for s in pool.values()))
    (bench / "manifest.json").write_text("{}")
    with pytest.raises(ConfigError, match="tools: must be local, or serve:URL"):
        ResourceSpec(benchmark=str(bench), tools="remote")
    with pytest.raises(ConfigError, match="service.retries"):
        ResourceSpec(benchmark=str(bench), tools=f"serve:{server.base_url}", retries=-1)
    res = build_resources(ResourceSpec(benchmark=str(bench), tools=f"serve:{server.base_url}/", backoff_s=0.01))
    assert res.embedder is None and isinstance(res.memory(tasks[0]), RemoteMemory)
    assert res.with_reward("paper") is res
    with pytest.raises(ConfigError, match="scores with the reward spec"):
        res.with_reward("outcome_only")
    task = tasks[0]
    from tests.env_support import run

    want = run(kit.env(task, mode="two_stage"), GoldPolicy(task), seed=3)
    env = res.make_env(task, max_turns=20, scoring_deadline_s=30)
    got = run(env, GoldPolicy(task), seed=3)
    assert got.error is None and got.succ == want.succ is True
    assert [s.reward.total for s in got.stages] == [s.reward.total for s in want.stages]


# --------------------------------------------------------------------------- direct endpoints


def _observations(remote: Remote, kit, tasks) -> list[dict]:
    out = []
    for task in tasks:
        box = ToolBox(remote.products, remote.memory(task))
        other = [t.reference_product_ids[0] for t in tasks if t is not task]
        out += [box.execute(call, ALLOWED, max_chars=m).model_dump() for call, m in _calls(task, other)]
    return out


def test_direct_endpoints_carry_the_calls_with_identical_observations(world, kit, product_search, embedder):
    tasks, pool = world
    with ServeServer(product_search, {BENCH: Bench(tasks, pool)}, embedder, direct=2, token="t0k") as srv:
        client = fast_client(srv.base_url, token="t0k")
        got = _observations(Remote(client), kit, tasks)
        via_url = _observations(Remote(fast_client(srv.base_url, token="t0k", direct=False)), kit, tasks)
        assert got == via_url
        # every tool call went to a direct server, spread over both (round robin); the service URL
        # saw only the listing of endpoints and the info call
        direct_ports = {p for p, r in srv.direct_requests if r != "direct"}
        assert len(direct_ports) == 2
        assert client.direct_requests == sum(1 for _, r in srv.direct_requests if r != "direct") > 30
        n_via_url_tools = len(_calls(tasks[0], [])) * len(tasks) - 2 * len(tasks)  # less the local refusals
        assert srv.routes("product_search") + srv.routes("mem_view") <= n_via_url_tools
        assert {r for _, r, _ in srv.requests[:2]} <= {"info", "endpoints"}
        # the verification of each endpoint's nonce happened once per endpoint
        assert sum(1 for _, r in srv.direct_requests if r == "direct") == 2


def test_an_endpoint_whose_nonce_check_fails_is_never_used(world, product_search, embedder):
    tasks, pool = world
    with ServeServer(product_search, {BENCH: Bench(tasks, pool)}, embedder, bad_nonce=True) as srv:
        client = fast_client(srv.base_url)
        assert RemoteProducts(client).search("shirt", top_k=2)
        assert client.direct_requests == 0
        assert srv.routes("direct") >= 1  # it was checked (and failed: the service has no /v1/direct)


def test_a_dead_direct_endpoint_falls_back_to_the_service_url_and_is_put_aside(world, kit, product_search, embedder):
    tasks, pool = world
    with ServeServer(product_search, {BENCH: Bench(tasks, pool)}, embedder, direct=1) as srv:
        client = fast_client(srv.base_url)
        products = RemoteProducts(client)
        want = kit.products.search("shirt", top_k=3)
        assert products.search("shirt", top_k=3) == want and client.direct_requests == 1
        srv.stop_direct(0)  # the replica died; it is still listed for a while
        before = srv.routes("product_search")
        for _ in range(5):
            assert products.search("shirt", top_k=3) == want
        assert srv.routes("product_search") == before + 5  # all answered through the service URL
        assert client.direct_requests == 2  # one failed direct attempt, then the endpoint is put aside


def test_a_kept_alive_connection_the_replica_closed_is_reopened_not_counted_dead(world, kit, product_search, embedder):
    tasks, pool = world
    with ServeServer(product_search, {BENCH: Bench(tasks, pool)}, embedder, direct=1, drop_idle=True) as srv:
        client = fast_client(srv.base_url)
        products = RemoteProducts(client)
        want = kit.products.search("shirt", top_k=3)
        for _ in range(6):  # from the second call on, each finds its pooled connection closed
            assert products.search("shirt", top_k=3) == want
        assert client.direct_requests == 6
        assert srv.routes("product_search") == 0  # none fell back to the service URL
        assert sum(1 for _, r in srv.direct_requests if r == "product_search") == 6


def test_a_plain_404_of_a_stopping_service_is_retried_and_opens_the_breaker(world, kit, product_search, embedder):
    from shopping_companion.errors import CircuitOpenError

    tasks, pool = world
    with ServeServer(product_search, {BENCH: Bench(tasks, pool)}, embedder) as srv:
        products = RemoteProducts(fast_client(srv.base_url, retries=20, backoff_s=0.05))
        want = kit.products.search("shirt", top_k=3)
        srv.gone_routes.add("product_search")  # Serve deletes the application; its proxy answers 404
        threading.Timer(0.3, srv.gone_routes.discard, ("product_search",)).start()
        assert products.search("shirt", top_k=3) == want  # retried until the route was back
        assert srv.routes("product_search") >= 2
        srv.gone_routes.add("product_search")  # for good: the breaker opens, the run would stop (exit 4)
        client = fast_client(srv.base_url, retries=10, backoff_s=0.01, breaker_threshold=3)
        with pytest.raises(CircuitOpenError):
            RemoteProducts(client).search("shirt", top_k=3)
        # a GET (the connect-time checks) keeps a 404 final: a URL that is not a service fails at once
        srv.gone_routes.add("info")
        t0 = time.monotonic()
        with pytest.raises(ServiceRefusedError, match="no such route"):
            fast_client(srv.base_url).info()
        assert time.monotonic() - t0 < 2.0


@pytest.mark.parametrize("bad", ["\ud800 shirt", "shirt \udfff"])
def test_a_lone_surrogate_is_the_same_tool_input_error_locally_and_through_the_service(world, kit, server, bad):
    remote = Remote(fast_client(server.base_url))
    task = world[0][0]
    local_box = ToolBox(kit.products, kit.memory(task))
    remote_box = ToolBox(remote.products, remote.memory(task))
    calls = [
        ToolCall(name="product_search", arguments={"query": bad}, call_id="s0"),
        ToolCall(name="product_search", arguments={"query": "shirt", "shop_id": bad}, call_id="s1"),
        ToolCall(name="product_view", arguments={"product_ids": ["x", bad]}, call_id="s2"),
        ToolCall(name="mem_search", arguments={"queries": ["size", bad]}, call_id="s3"),
        ToolCall(name="mem_view", arguments={"session_ids": [bad]}, call_id="s4"),
    ]
    for call in calls:
        here = local_box.execute(call, ALLOWED).model_dump()
        there = remote_box.execute(call, ALLOWED).model_dump()
        assert strip_times(here) == strip_times(there)
        assert "unpaired surrogate" in json.dumps(here), (call, here)
    assert server.routes("product_search") >= 2  # the service was asked (and refused), not the client


def test_direct_off_and_a_service_without_endpoints_use_the_url_only(world, product_search, embedder):
    tasks, pool = world
    with ServeServer(product_search, {BENCH: Bench(tasks, pool)}, embedder, direct=1) as srv:
        client = fast_client(srv.base_url, direct=False)
        assert RemoteProducts(client).search("shirt", top_k=2)
        assert srv.routes("endpoints") == 0 and srv.direct_requests == []
    with ServeServer(product_search, {BENCH: Bench(tasks, pool)}, embedder, legacy=True) as srv:
        client = fast_client(srv.base_url)
        for _ in range(3):
            assert RemoteProducts(client).search("shirt", top_k=2)
        assert srv.routes("endpoints") == 1 and client.direct is False  # asked once, then never again


def test_a_dead_service_opens_the_circuit_breaker_and_the_run_stops(world, product_search, embedder):
    from shopping_companion.errors import CircuitOpenError

    tasks, pool = world
    task = tasks[0]
    with ServeServer(product_search, {BENCH: Bench(tasks, pool)}, embedder) as srv:
        client = fast_client(srv.base_url, retries=10, backoff_s=0.01, breaker_threshold=3)
        remote = Remote(client)
        assert remote.products.search("shirt", top_k=2)
        srv.down_routes.add("product_search")  # 503s are answers: they never open the breaker
        with pytest.raises(ToolServiceError):
            fast_client(srv.base_url, retries=4, backoff_s=0.01, breaker_threshold=3).post(
                "product_search", api.ProductSearchRequest(query="shirt"), api.ProductSearchResponse
            )
        srv.down_routes.clear()
    # the server is gone: 3 connection failures in a row open the breaker inside one call ...
    with pytest.raises(CircuitOpenError, match=r"3 consecutive connection failures.*service.breaker_threshold"):
        remote.products.search("shirt")
    # ... and every later call (any tool, the judge) fails at once, as does an episode: not an observation
    t0 = time.monotonic()
    with pytest.raises(CircuitOpenError):
        ToolBox(remote.products, remote.memory(task)).execute(
            ToolCall(name="mem_view", arguments={"session_ids": ["s"]}, call_id="c"), ALLOWED
        )
    with pytest.raises(CircuitOpenError):
        _episode(task, GoldPolicy(task), remote.products, remote.memory(task), remote.judge, remote.rubric)
    assert time.monotonic() - t0 < 1.0
    # the breaker is per service URL: connect() with the run's settings uses it (default threshold 5)
    from shopping_companion.llm.breaker import CircuitBreaker

    assert ServiceConfig().breaker_threshold == 5
    assert isinstance(ServiceClient.from_settings(srv.base_url, ServiceConfig()).breaker, CircuitBreaker)
    assert not isinstance(fast_client(srv.base_url).breaker, CircuitBreaker)  # no threshold: no breaker
