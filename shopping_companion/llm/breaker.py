"""Run-wide circuit breaker for LLM endpoints, and validation of time settings.

A :class:`CircuitBreaker` counts *consecutive* connection failures and timeouts of one endpoint,
across every backend object and thread that uses it (all concurrent episodes of a run, the judge
when it shares the endpoint, ...). Any HTTP answer from the server (2xx, 4xx, 5xx, even an
unparseable body: the server is there) resets the count. When the count reaches ``threshold`` the
breaker *opens*: the call that hit the limit, every call waiting in a retry backoff and every
later call raise :class:`~shopping_companion.llm.base.CircuitOpenError` at once, so a dead or hung
endpoint costs about one request deadline per wave of concurrent calls instead of the full
retry budget for every call of the run. An open breaker stays open until :meth:`CircuitBreaker.reset`
(or :func:`reset_breakers`): the run that saw it stops.

:func:`breaker_for` returns the shared breaker of an endpoint (one per ``(endpoint, threshold)``
in the process); :func:`positive_seconds` is the one check every ``timeout_s`` / ``deadline_s``
goes through, :func:`deadline_or_none` every optional ``scoring_deadline_s``.
"""

from __future__ import annotations

import math
import threading
from typing import Any

from shopping_companion.errors import ConfigError
from shopping_companion.llm.base import CircuitOpenError

#: Consecutive connection failures / timeouts of one endpoint that open its breaker.
DEFAULT_BREAKER_THRESHOLD = 5
#: Environment variable read by ``OpenAIBackend.from_env`` (and the CLI) for the threshold.
ENV_BREAKER_THRESHOLD = "SHOPCOMP_BREAKER_THRESHOLD"


#: Longest time limit accepted (seconds): above it the platform's timers overflow (1e308 s made
#: every wait raise OverflowError) and no request should ever be allowed that long anyway.
MAX_SECONDS = 1e6


def positive_seconds(field: str, value: Any, *, allow_none: bool = False) -> float | None:
    """``value`` as a finite number of seconds > 0.

    Raises:
        ConfigError: naming ``field`` when ``value`` is None (unless ``allow_none``), a bool, not a
            number, NaN / infinite, <= 0, or > :data:`MAX_SECONDS`.
    """
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(
            f"{field}: must be a number of seconds > 0 (e.g. 120), got {value!r} ({type(value).__name__})"
        )
    seconds = float(value)
    if not math.isfinite(seconds) or seconds <= 0:
        raise ConfigError(f"{field}: must be a finite number of seconds > 0 (e.g. 120), got {value!r}")
    if seconds > MAX_SECONDS:
        raise ConfigError(f"{field}: must be at most {MAX_SECONDS:g} seconds (~11.6 days), got {value!r}")
    return seconds


def deadline_or_none(value: Any, field: str | None = None, *, also: str = "") -> float | None:
    """``value`` as a deadline in seconds: a finite number > 0 (a bool is not one), or None (no
    deadline); the one check of every ``scoring_deadline_s``.

    Raises:
        ValueError: ``"<field>: must be <also>a finite number of seconds > 0, or null for no
            deadline; got <value>"`` (no ``<field>:`` when ``field`` is None, as in a pydantic
            validator, whose error names the field itself; ``also`` names other accepted values,
            e.g. ``"'spec', "``).
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        where = f"{field}: " if field else ""
        raise ValueError(f"{where}must be {also}a finite number of seconds > 0, or null for no deadline; got {value!r}")
    return float(value)


def positive_int(field: str, value: Any) -> int:
    """``value`` as an int >= 1; raises :class:`ConfigError` naming ``field`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{field}: must be an integer >= 1, got {value!r}")
    return int(value)


class CircuitBreaker:
    """Consecutive-failure breaker of one endpoint; thread-safe.

    Args:
        endpoint: what the messages name (a URL without credentials).
        threshold: consecutive connection failures / timeouts that open it (>= 1).
        advice: how to change the threshold, for the open message (default: the LLM backends' way).
    """

    def __init__(self, endpoint: str, threshold: int = DEFAULT_BREAKER_THRESHOLD, advice: str | None = None) -> None:
        self.endpoint = endpoint
        self.advice = advice or f"set {ENV_BREAKER_THRESHOLD} or pass breaker_threshold= to the backend"
        self.threshold = positive_int("breaker_threshold", threshold)
        self._lock = threading.Lock()
        self._failures = 0
        self._last_error = ""
        self._opened = threading.Event()

    @property
    def failures(self) -> int:
        """Consecutive connection failures / timeouts so far."""
        with self._lock:
            return self._failures

    @property
    def is_open(self) -> bool:
        return self._opened.is_set()

    def _open_error(self) -> CircuitOpenError:
        with self._lock:
            count, last = self._failures, self._last_error
        return CircuitOpenError(
            f"circuit open for {self.endpoint}: {count} consecutive connection failures or timeouts "
            f"(threshold {self.threshold}; last: {last}); the endpoint is considered down and the run "
            f"stops. Check the server, then rerun to resume; to change the threshold {self.advice}."
        )

    def check(self) -> None:
        """Raise :class:`CircuitOpenError` when the breaker is open; else return."""
        if self._opened.is_set():
            raise self._open_error()

    def record_failure(self, what: str) -> None:
        """Count one connection failure or timeout (``what`` describes it, already scrubbed);
        raises :class:`CircuitOpenError` when this one reaches the threshold (or it was open)."""
        with self._lock:
            self._failures += 1
            self._last_error = what
            if self._failures >= self.threshold:
                self._opened.set()
        self.check()

    def record_success(self) -> None:
        """The server answered over HTTP: the consecutive count restarts at 0 (an open breaker
        stays open)."""
        with self._lock:
            if not self._opened.is_set():
                self._failures = 0

    def sleep(self, seconds: float) -> None:
        """Sleep ``seconds`` (a retry backoff), waking up to raise :class:`CircuitOpenError` as
        soon as the breaker opens."""
        if seconds > 0 and self._opened.wait(seconds):
            raise self._open_error()
        self.check()

    def reset(self) -> None:
        """Close the breaker and clear the count (e.g. before a new run in the same process)."""
        with self._lock:
            self._failures = 0
            self._last_error = ""
            self._opened.clear()

    def __repr__(self) -> str:
        return (
            f"CircuitBreaker(endpoint={self.endpoint!r}, threshold={self.threshold}, "
            f"failures={self.failures}, open={self.is_open})"
        )


_REGISTRY: dict[tuple[str, int], CircuitBreaker] = {}
_REGISTRY_LOCK = threading.Lock()


def breaker_for(endpoint: str, threshold: int = DEFAULT_BREAKER_THRESHOLD, advice: str | None = None) -> CircuitBreaker:
    """The process-wide breaker of ``endpoint`` with that ``threshold`` (made on first use, with
    ``advice`` for its open message)."""
    threshold = positive_int("breaker_threshold", threshold)
    with _REGISTRY_LOCK:
        b = _REGISTRY.get((endpoint, threshold))
        if b is None:
            b = _REGISTRY[(endpoint, threshold)] = CircuitBreaker(endpoint, threshold, advice)
        return b


def reset_breakers() -> None:
    """Close every shared breaker (tests, or a new run in the same process)."""
    with _REGISTRY_LOCK:
        breakers = list(_REGISTRY.values())
    for b in breakers:
        b.reset()


__all__ = [
    "DEFAULT_BREAKER_THRESHOLD",
    "ENV_BREAKER_THRESHOLD",
    "CircuitBreaker",
    "breaker_for",
    "deadline_or_none",
    "positive_int",
    "positive_seconds",
    "reset_breakers",
]
