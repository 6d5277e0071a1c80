"""Fault suite: one real misbehaving server per fault kind (tests/faults.py); each call ends with
the expected outcome within the configured deadline (+ a 2 s margin), never hangs.

Before the wall-clock deadlines, the trickling servers held a 1 s request for minutes, the hung
server cost every retry its full timeout, a 20 s Retry-After was slept past the deadline, and 100
calls to a hung server at concurrency 8 took 13 waves of the whole retry budget."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.faults import FAULTS, run_fault  # noqa: E402

MARGIN_S = 2.0

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("fault", FAULTS, ids=[f.name for f in FAULTS])
def test_fault_ends_as_expected_within_the_deadline(fault) -> None:
    out = run_fault(fault)
    want = fault.expect if isinstance(fault.expect, str) else fault.expect.__name__
    assert out.ok, f"{fault.name}: expected {want}, got {sorted(set(out.results))}"
    deadline = fault.settings["deadline_s"]
    if fault.calls == 1:
        assert out.elapsed_s <= deadline + MARGIN_S, f"{fault.name}: {out.elapsed_s:.2f}s > {deadline}s + margin"
    else:  # the breaker: about threshold x deadline at most, not calls / concurrency x deadline
        threshold = fault.settings["breaker_threshold"]
        assert out.elapsed_s <= threshold * deadline, f"{fault.name}: {out.elapsed_s:.2f}s"
        assert out.requests <= 2 * fault.concurrency  # later calls never reached the server
    if fault.name.startswith(("hung", "trickling")) and fault.calls == 1:
        assert out.elapsed_s >= deadline - 0.2  # it did use the time it was given (no early give-up)
