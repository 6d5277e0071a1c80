"""Wall time per phase of a long command, one line per phase as it ends.

The code that does the work marks its phases, ``with phase("synthesis: tasks"):``; a command that
wants them shown runs inside ``with show_phases(print_line):`` and gets one line per finished phase,
``phase synthesis: tasks: 31.2s (peak memory 1.41 GB)``, and the list of ``(name, seconds)``
afterwards (:attr:`PhaseClock.records`). Outside :func:`show_phases` a phase costs nothing and
prints nothing. A phase inside another is named ``outer › inner``. The clock is a context
variable: phases entered in other threads are not shown.
"""

from __future__ import annotations

import resource
import sys
import time
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Callable, Iterator

__all__ = ["PhaseClock", "peak_rss_bytes", "phase", "show_phases"]


@dataclass
class PhaseClock:
    """The phases finished so far (``records``: ``(name, seconds)`` in the order they ended) and
    where their lines go (``emit``)."""

    emit: Callable[[str], None]
    records: list[tuple[str, float]] = field(default_factory=list)
    stack: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """``name 1.0s, name 2.0s, …`` of the outermost phases."""
        return ", ".join(f"{n} {s:.1f}s" for n, s in self.records if " › " not in n)


_CLOCK: ContextVar[PhaseClock | None] = ContextVar("shopcomp_phase_clock", default=None)


def peak_rss_bytes() -> int:
    """The process's peak resident memory so far (``getrusage``: what ``/usr/bin/time -v`` reports
    as maximum resident set size)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


@contextmanager
def phase(name: str) -> Iterator[None]:
    """Time the block as the phase ``name`` when a :func:`show_phases` is active (else nothing)."""
    clock = _CLOCK.get()
    if clock is None:
        yield
        return
    full = " › ".join([*clock.stack, name])
    clock.stack.append(name)
    t0 = time.perf_counter()
    try:
        yield
    finally:
        seconds = time.perf_counter() - t0
        clock.stack.pop()
        clock.records.append((full, seconds))
        clock.emit(f"phase {full}: {seconds:.1f}s (peak memory {peak_rss_bytes() / 1e9:.2f} GB)")


@contextmanager
def show_phases(emit: Callable[[str], None]) -> Iterator[PhaseClock]:
    """Print one line per phase that ends inside the block through ``emit``; yields the clock."""
    clock = PhaseClock(emit)
    token = _CLOCK.set(clock)
    try:
        yield clock
    finally:
        _CLOCK.reset(token)
