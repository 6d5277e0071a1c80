"""Hostile-endpoint fault kinds shared by the fault suite (tests/llm/test_fault_suite.py)
and ``benchmarks/bench_faults.py``.

Each :class:`Fault` names a misbehaving server (a :class:`~tests.openai_server.ScriptedOpenAIServer`
script, or no server at all), the backend settings it is met with, and what must come of one
``chat()`` call: a reply or the exception type. :func:`run_fault` makes that call against a fresh
real server and measures its wall-clock time; the configured ``deadline_s`` is what the time is
compared with.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from shopping_companion.llm.base import BackendError, CircuitOpenError, ContextLengthError
from shopping_companion.llm.breaker import CircuitBreaker
from shopping_companion.llm.openai_backend import OpenAIBackend
from tests.openai_server import ScriptedOpenAIServer

MESSAGES = [{"role": "user", "content": "hello"}]

#: Settings every fault is met with (seconds): 1 s per attempt, 3 retries, 3 s in all.
BACKEND = {"timeout_s": 1.0, "max_retries": 3, "deadline_s": 3.0, "backoff_s": 0.1, "backoff_jitter": 0.0}


@dataclass(frozen=True)
class Fault:
    """One fault kind: ``script`` (``None``: nothing listens, connection refused), server options,
    backend overrides and the expected outcome (``"reply"`` or an exception type)."""

    name: str
    script: Callable[[], Any] | None
    expect: str | type[BaseException]
    server: dict[str, Any] = field(default_factory=dict)
    backend: dict[str, Any] = field(default_factory=dict)
    calls: int = 1
    concurrency: int = 1

    @property
    def settings(self) -> dict[str, Any]:
        return {**BACKEND, **self.backend}


FAULTS: list[Fault] = [
    Fault("hung", lambda: lambda body: {"hang": True}, BackendError),
    Fault(
        "trickling body (1 byte / 0.5 s)", lambda: lambda body: {"trickle_s": 0.5, "content": "x" * 40}, BackendError
    ),
    Fault(
        "trickling headers (1 byte / 0.5 s)",
        lambda: lambda body: {"trickle_s": 0.5, "trickle_headers": True},
        BackendError,
    ),
    Fault("refused (nothing listens)", None, BackendError),
    Fault("dead-and-back (2 resets, then answers)", lambda: ["back"], "reply", server={"refuse_first": 2}),
    Fault("5xx forever", lambda: lambda body: {"status": 503}, BackendError),
    Fault(
        "429 Retry-After 1 s, twice", lambda: [{"status": 429, "headers": {"retry-after": "1"}}] * 2 + ["ok"], "reply"
    ),
    Fault(
        "429 Retry-After 20 s (> deadline)",
        lambda: [{"status": 429, "headers": {"retry-after": "20"}}] * 4,
        BackendError,
        backend={"max_backoff_s": 30.0},
    ),
    Fault("garbage body", lambda: lambda body: {"raw": "<html>502 Bad Gateway</html>"}, BackendError),
    Fault(
        "400 context length",
        lambda: [
            {
                "status": 400,
                "message": "This model's maximum context length is 4096 tokens. However, you requested 9000 tokens.",
            }
        ],
        ContextLengthError,
    ),
    Fault(
        "hung, 100 calls at concurrency 8 (breaker 5)",
        lambda: lambda body: {"hang": True},
        CircuitOpenError,
        backend={"breaker_threshold": 5},
        calls=100,
        concurrency=8,
    ),
]


@dataclass
class Outcome:
    fault: Fault
    elapsed_s: float
    results: list[str]  # "reply" or the exception's type name, one per call
    requests: int  # chat requests the server received

    @property
    def ok(self) -> bool:
        want = self.fault.expect if isinstance(self.fault.expect, str) else self.fault.expect.__name__
        return all(r == want for r in self.results)


def run_fault(fault: Fault) -> Outcome:
    """One measured run of ``fault`` against a fresh server (and a fresh breaker)."""
    settings = fault.settings
    if "breaker_threshold" not in settings:
        # single-call faults measure deadlines: an isolated breaker that never opens
        settings["breaker"] = CircuitBreaker(f"fault:{fault.name}", 10_000)
    srv = ScriptedOpenAIServer(fault.script() if fault.script else [], **fault.server).start()
    url = srv.base_url
    if fault.script is None:
        srv.stop()  # nothing listens on that port any more: connection refused
    try:
        backend = OpenAIBackend("fault-model", base_url=url, api_key="sk-fault-suite-key", **settings)
        backend.breaker.reset()

        def one(_: int) -> str:
            try:
                backend.chat(MESSAGES)
                return "reply"
            except (BackendError, CircuitOpenError) as e:
                return type(e).__name__

        start = time.monotonic()
        if fault.calls == 1:
            results = [one(0)]
        else:
            with ThreadPoolExecutor(fault.concurrency) as ex:
                results = list(ex.map(one, range(fault.calls)))
        elapsed = time.monotonic() - start
        requests = len(srv.bodies)
        backend.close()
    finally:
        srv.stop()
    return Outcome(fault, elapsed, results, requests)
