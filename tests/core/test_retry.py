"""The one retry policy (shopping_companion/retry.py) that the OpenAI backend, the service client,
the LLM judge and the dataset download share."""

from __future__ import annotations

import math
import time

import pytest

from shopping_companion.retry import (
    RETRYABLE_4XX,
    Attempts,
    Backoff,
    default_deadline_s,
    is_retryable_status,
    retry_after_s,
)


def test_backoff_doubles_and_is_capped():
    b = Backoff(0.05, 0.15)
    assert [b.delay(k) for k in range(4)] == [0.05, 0.1, 0.15, 0.15]
    download = Backoff(2.0, 10.0)  # the download's waits: 2, 4, 8, 10 s
    assert [download.delay(k) for k in range(5)] == [2.0, 4.0, 8.0, 10.0, 10.0]


def test_backoff_jitter_stays_within_its_share_and_the_cap():
    b = Backoff(1.0, 3.0, jitter=0.1)
    delays = [b.delay(0) for _ in range(200)]
    assert all(1.0 <= d <= 1.1 for d in delays) and len(set(delays)) > 1
    assert all(b.delay(5) == 3.0 for _ in range(20))  # jitter never lifts a delay past the cap


def test_retry_after_is_honoured_up_to_the_cap():
    b = Backoff(0.0, 5.0)
    assert b.delay(0, retry_after=0.3) == 0.3
    assert b.delay(0, retry_after=60.0) == 5.0
    assert Backoff(2.0, 5.0).delay(0, retry_after=0.5) == 2.0  # never shorter than the backoff


@pytest.mark.parametrize(
    "headers, expected",
    [
        ({"retry-after": "3"}, 3.0),
        ({"retry-after": "0.25"}, 0.25),
        ({"retry-after-ms": "1500", "retry-after": "9"}, 1.5),  # milliseconds first
        ({"retry-after-ms": "soon", "retry-after": "2"}, 2.0),  # an unreadable one is skipped
        ({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, None),  # the date form is not read
        ({"retry-after": "-1"}, None),
        ({"retry-after": "inf"}, None),
        ({"retry-after": "nan"}, None),
        ({}, None),
        (None, None),
    ],
)
def test_retry_after_s(headers, expected):
    assert retry_after_s(headers) == expected


def test_retryable_statuses():
    assert all(is_retryable_status(s) for s in (500, 501, 502, 503, 504, 599, 408, 409, 429))
    assert not any(is_retryable_status(s) for s in (400, 401, 403, 404, 413, 422))
    assert RETRYABLE_4XX == {408, 409, 429}
    only_429 = frozenset({429})  # the download retries 429 and 5xx, not 408 / 409
    assert is_retryable_status(429, only_429) and is_retryable_status(503, only_429)
    assert not is_retryable_status(408, only_429)


def test_default_deadline():
    assert default_deadline_s(None, 3) == 600.0
    assert default_deadline_s(120, 3) == 480.0  # (3 + 1) * 120
    assert default_deadline_s(200, 3) == 600.0  # capped
    assert default_deadline_s(700, 3) == 700.0  # never below one attempt's timeout
    assert default_deadline_s(10, 0, cap_s=5) == 10.0


def test_attempts_without_a_deadline_make_every_attempt_and_back_off_between():
    slept: list[float] = []
    attempts = Attempts(3, Backoff(1.0, 3.0), sleep=slept.append)
    seen = []
    for n in attempts:
        seen.append(n)
        if not attempts.backoff():
            break
    assert seen == [0, 1, 2, 3] and attempts.made == 4
    assert slept == [1.0, 2.0, 3.0]  # no sleep after the last attempt
    assert attempts.stop == "retries" and attempts.backoffs == 3
    assert attempts.budget(7.0) == 7.0 and attempts.left() == math.inf


def test_an_attempt_without_backoff_goes_on_at_once_and_keeps_the_exponent():
    slept: list[float] = []
    attempts = Attempts(3, Backoff(1.0, 30.0), sleep=slept.append)
    for n in attempts:
        if n == 1:
            continue  # e.g. an invalid reply, asked again at once
        attempts.backoff()
    assert attempts.made == 4 and attempts.stop == "retries"
    assert slept == [1.0, 2.0]  # the k-th backoff of the call, not the attempt number


def test_no_attempt_starts_after_the_deadline():
    attempts = Attempts(10, Backoff(0.0, 0.0), deadline_s=0.05)
    for _ in attempts:
        time.sleep(0.03)  # a failed attempt re-asked at once
    assert attempts.stop == "deadline"
    assert 1 <= attempts.made <= 2
    assert attempts.left() <= 0


def test_a_backoff_that_would_pass_the_deadline_is_not_slept():
    slept: list[float] = []
    attempts = Attempts(5, Backoff(10.0, 10.0), deadline_s=5.0, sleep=slept.append)
    for _ in attempts:
        assert attempts.budget(60.0) <= 5.0  # an attempt's timeout is cut to the time left
        assert attempts.budget(1.0) == 1.0
        if not attempts.backoff():
            break
    assert attempts.stop == "backoff" and attempts.delay == 10.0
    assert attempts.made == 1 and slept == []


def test_retry_after_reaches_the_sleep():
    slept: list[float] = []
    attempts = Attempts(1, Backoff(0.1, 5.0), sleep=slept.append)
    for _ in attempts:
        delay = attempts.next_delay(retry_after=2.0)
        if delay is None:
            break
        attempts.wait(delay)
    assert slept == [2.0] and attempts.made == 2 and attempts.stop == "retries"


def test_the_default_sleep_is_looked_up_at_each_wait(monkeypatch):
    slept: list[float] = []
    attempts = Attempts(1, Backoff(0.5, 0.5))
    monkeypatch.setattr(time, "sleep", slept.append)  # patched after construction
    for _ in attempts:
        attempts.backoff()
    assert slept == [0.5]
