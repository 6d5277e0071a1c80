"""The one retry policy of every caller that retries: the OpenAI-compatible backend
(:mod:`~shopping_companion.llm.openai_backend`), the service client
(:mod:`~shopping_companion.serve.client`), the LLM judge's strict-JSON loop
(:func:`~shopping_companion.judges.llm.ask_strict_json`) and the dataset download
(:mod:`~shopping_companion.catalog.download`).

- :class:`Backoff`: the delay before retry ``k`` (0-based): ``min(base_s * 2**k, max_s)``, times
  ``1 + U(0, jitter)`` and capped at ``max_s`` again; a ``Retry-After`` of the failed answer is
  honoured up to ``max_s`` (the delay is at least it).
- :func:`retry_after_s`: the seconds a ``Retry-After`` / ``retry-after-ms`` header asks for.
- :func:`is_retryable_status`: 5xx plus the 4xx that can succeed on retry.
- :class:`Attempts`: the attempts of one call: at most ``1 + retries``; none starts once the
  call's deadline has passed, and no backoff sleeps past it.
- :func:`default_deadline_s`: the total deadline of one call when none is given.

What differs between the callers is a parameter here, not a copy: which statuses they retry, the
backoff's base, cap and jitter, whether a deadline bounds the call, and how they sleep (a circuit
breaker's interruptible sleep, or :func:`time.sleep`). Only the standard library is used: neither
``tenacity`` nor ``urllib3`` is a dependency, and ``httpx``'s transport retries cover connection
errors only.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping

__all__ = [
    "Attempts",
    "Backoff",
    "DEFAULT_MAX_DEADLINE_S",
    "RETRYABLE_4XX",
    "default_deadline_s",
    "is_retryable_status",
    "retry_after_s",
]

#: 4xx statuses worth retrying: request timeout, conflict / lock, rate limit.
RETRYABLE_4XX = frozenset({408, 409, 429})
#: Cap of :func:`default_deadline_s`, in seconds.
DEFAULT_MAX_DEADLINE_S = 600.0


def is_retryable_status(status: int, also: frozenset[int] = RETRYABLE_4XX) -> bool:
    """Whether an HTTP ``status`` can succeed on retry: any 5xx, or one of ``also`` (default
    :data:`RETRYABLE_4XX`)."""
    return status in also or status >= 500


def retry_after_s(headers: Mapping[str, str] | None) -> float | None:
    """Seconds an answer's headers ask the client to wait: ``retry-after-ms`` (milliseconds), else
    ``Retry-After`` (seconds; the HTTP-date form is not read). None when neither is a finite
    number >= 0. ``headers`` is looked up in lower case (``httpx`` headers are case-insensitive)."""
    if headers is None:
        return None
    for header, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        raw = headers.get(header)
        if raw is None:
            continue
        try:
            seconds = float(raw) / divisor
        except (TypeError, ValueError):
            continue
        if math.isfinite(seconds) and seconds >= 0:
            return seconds
    return None


def default_deadline_s(timeout_s: float | None, max_retries: int, cap_s: float = DEFAULT_MAX_DEADLINE_S) -> float:
    """Total wall clock of one call when none is given, in seconds: ``min(cap_s, (max_retries + 1)
    * timeout_s)`` but at least ``timeout_s``; ``cap_s`` when ``timeout_s`` is None."""
    if timeout_s is None:
        return float(cap_s)
    return max(float(timeout_s), min(float(cap_s), (max_retries + 1) * float(timeout_s)))


class Backoff:
    """Exponential backoff with relative jitter; thread-safe.

    Args:
        base_s: delay before the first retry, seconds >= 0 (doubles on each further retry).
        max_s: cap on one delay, also on an honoured ``Retry-After``, seconds >= 0.
        jitter: each delay is multiplied by ``1 + U(0, jitter)`` (0: none), then capped at ``max_s``.
    """

    def __init__(self, base_s: float, max_s: float, jitter: float = 0.0) -> None:
        self.base_s = float(base_s)
        self.max_s = float(max_s)
        self.jitter = float(jitter)
        self._rng = random.Random()
        self._lock = threading.Lock()

    def delay(self, k: int, retry_after: float | None = None) -> float:
        """Seconds to wait before retry ``k`` (0-based); ``retry_after``: what the failed answer
        asked for (:func:`retry_after_s`), honoured up to ``max_s``."""
        delay = min(self.max_s, self.base_s * (2**k))
        if self.jitter:
            with self._lock:
                delay *= 1 + self._rng.uniform(0, self.jitter)
            delay = min(delay, self.max_s)
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.max_s))
        return delay

    def __repr__(self) -> str:
        return f"Backoff(base_s={self.base_s:g}, max_s={self.max_s:g}, jitter={self.jitter:g})"


class Attempts:
    """The attempts of one call (use one object per call)::

        attempts = Attempts(retries, backoff, deadline_s)
        for n in attempts:                 # n = 0, 1, ...: at most 1 + retries
            try:
                return attempt(timeout=attempts.budget(timeout_s))
            except Retryable as e:
                if not attempts.backoff(retry_after_s(e.headers)):
                    break                  # attempts.stop says why
        # attempts.stop: "retries", "deadline" or "backoff"; attempts.made: attempts started

    No attempt starts once ``deadline_s`` (seconds of wall clock from construction; None: no
    deadline) has passed (``stop == "deadline"``); :meth:`backoff` does not sleep when no attempt
    is left (``stop == "retries"``) or when its delay would reach the deadline (``stop ==
    "backoff"``, :attr:`delay` is the delay refused). An attempt that fails without calling
    :meth:`backoff` (e.g. an invalid reply asked again at once) goes on to the next attempt at once.

    Args:
        retries: attempts after the first, >= 0.
        backoff: the delays between attempts (the k-th backoff of the call uses ``k``).
        deadline_s: the call's total wall clock, seconds > 0, or None.
        sleep: how to wait a delay (default :func:`time.sleep`, looked up at each call; a circuit
            breaker's sleep wakes up to raise when it opens).
    """

    def __init__(
        self,
        retries: int,
        backoff: Backoff,
        deadline_s: float | None = None,
        *,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        self.retries = int(retries)
        self._backoff = backoff
        self._sleep = sleep
        self.started = time.monotonic()
        self.deadline_s = deadline_s
        self.end = None if deadline_s is None else self.started + deadline_s
        self.made = 0  # attempts started
        self.backoffs = 0  # backoffs slept
        self.delay: float | None = None  # the last delay computed by backoff()
        self.stop: str | None = None  # why no further attempt is made

    def left(self) -> float:
        """Seconds before the deadline (``inf`` without one; <= 0 once it has passed)."""
        return math.inf if self.end is None else self.end - time.monotonic()

    def budget(self, timeout_s: float | None) -> float | None:
        """The time one attempt may take: ``timeout_s`` cut to the time left (None: no limit)."""
        if self.end is None:
            return timeout_s
        left = self.left()
        return left if timeout_s is None else min(timeout_s, left)

    def __iter__(self) -> Iterator[int]:
        while self.made <= self.retries:
            if self.left() <= 0:
                self.stop = "deadline"
                return
            self.made += 1
            yield self.made - 1
        self.stop = "retries"

    def next_delay(self, retry_after: float | None = None) -> float | None:
        """The delay before the next attempt, or None when there is none (:attr:`stop` says why);
        :meth:`wait` sleeps it."""
        if self.made > self.retries:
            self.stop = "retries"
            return None
        self.delay = self._backoff.delay(self.backoffs, retry_after)
        if self.end is not None and time.monotonic() + self.delay >= self.end:
            self.stop = "backoff"
            return None
        return self.delay

    def wait(self, delay: float) -> None:
        """Sleep ``delay`` seconds before the next attempt (counts one backoff)."""
        self.backoffs += 1
        (self._sleep or time.sleep)(delay)

    def backoff(self, retry_after: float | None = None) -> bool:
        """:meth:`next_delay` then :meth:`wait`; False (and no sleep) when no attempt follows."""
        delay = self.next_delay(retry_after)
        if delay is None:
            return False
        self.wait(delay)
        return True
