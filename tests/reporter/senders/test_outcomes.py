"""Delivery rules: the pure functions that turn a response into an ``Outcome``."""

from __future__ import annotations

import email.utils
import time

import httpx
import pytest

from collector.retry import MAX_RETRY_AFTER_SECONDS
from reporter._pacing.gate import SinkGate
from reporter._senders.outcome import (
    DELIVERED,
    REJECTED,
    RETRY,
    Outcome,
    SendErrors,
    classify_http,
    classify_transport_error,
    parse_retry_after,
    read_retry_after,
)

NOW = 1_700_000_000.0


@pytest.mark.parametrize("status", [200, 201, 202, 204, 299])
def test_2xx_is_delivered(status: int) -> None:
    assert classify_http(status, None, b"") == Outcome(DELIVERED)


@pytest.mark.parametrize("status", [408, 429, 500, 502, 503, 504])
def test_retryable_statuses(status: int) -> None:
    outcome = classify_http(status, "7", b"try later")
    assert outcome.kind == RETRY
    assert outcome.retry_after == 7.0
    assert outcome.reason == f"HTTP {status}"  # a body that is not a known error field: unshown


@pytest.mark.parametrize("status", [400, 401, 403, 404, 409, 413, 422])
def test_other_statuses_are_rejected(status: int) -> None:
    outcome = classify_http(status, "7", b'{"error":"bad"}')
    assert outcome.kind == REJECTED
    assert outcome.retry_after == 0.0
    assert str(status) in outcome.reason
    assert "bad" in outcome.reason


def test_retry_without_retry_after_has_no_least_delay() -> None:
    assert classify_http(503, None, b"") == Outcome(RETRY, "HTTP 503", 0.0, code="503")


def test_reason_is_short_and_survives_bad_utf8() -> None:
    outcome = classify_http(500, None, b"\xff" * 1000)
    assert outcome.kind == RETRY
    assert len(outcome.reason) < 260


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        ("7", 7.0),
        (" 12 ", 12.0),
        ("0", 0.0),
        ("2.5", 2.5),
        ("-5", 0.0),
        (None, 0.0),
        ("", 0.0),
        ("soon", 0.0),
        ("100000", MAX_RETRY_AFTER_SECONDS),
        (email.utils.formatdate(NOW + 30, usegmt=True), 30.0),
        (email.utils.formatdate(NOW + 3600, usegmt=True), MAX_RETRY_AFTER_SECONDS),
        (email.utils.formatdate(NOW - 30, usegmt=True), 0.0),
        ("Wed, 99 Foo 2015 07:28:00 GMT", 0.0),
        ("nan", 0.0),
        ("NaN", 0.0),
        ("inf", 0.0),
        ("-inf", 0.0),
        ("1e400", 0.0),
    ],
)
def test_parse_retry_after(header: str | None, seconds: float) -> None:
    assert parse_retry_after(header, now=NOW) == seconds


def test_retry_after_as_an_http_date_in_a_response() -> None:
    # classify_http reads the wall clock for dates; a date 5 minutes ahead stays near 300 s
    when = email.utils.formatdate(time.time() + 300, usegmt=True)
    outcome = classify_http(429, when, b"")
    assert outcome.kind == RETRY
    assert 290.0 <= outcome.retry_after <= 300.0


@pytest.mark.parametrize(
    "error",
    [
        httpx.ConnectError("connection refused"),
        httpx.ReadTimeout("timed out"),
        httpx.RemoteProtocolError("peer closed"),
        OSError("network down"),
    ],
)
def test_transport_errors_retry(error: Exception) -> None:
    outcome = classify_transport_error(error)
    assert outcome.kind == RETRY
    assert type(error).__name__ in outcome.reason
    assert outcome.code == type(error).__name__


def test_failed_answers_are_counted_by_code() -> None:
    errors = SendErrors()
    for outcome in [
        classify_http(503, None, b""),
        classify_http(503, "1", b""),
        classify_http(400, None, b""),
        classify_http(200, None, b""),
        classify_transport_error(httpx.ReadTimeout("timed out")),
        Outcome(RETRY, "a sender's own reason"),
        Outcome(DELIVERED, retry_items=(0,)),
    ]:
        errors.record(outcome)
    assert errors.read() == {"503": 2, "400": 1, "ReadTimeout": 1, "retry": 1}


def test_only_a_delivered_outcome_lists_items() -> None:
    partial = Outcome(DELIVERED, refused=((0, "bad"),), retry_items=(1,))
    assert partial.partial and not Outcome(DELIVERED).partial
    with pytest.raises(ValueError, match="cannot list items"):
        Outcome(RETRY, retry_items=(0,))
    with pytest.raises(ValueError, match="cannot list items"):
        Outcome(REJECTED, refused=((0, "bad"),))


@pytest.mark.parametrize(
    ("header", "problem"),
    [
        ("nan", "not a finite number"),
        ("inf", "not a finite number"),
        ("-1", "negative"),
        ("soon", "neither delta-seconds nor an HTTP date"),
        ("Wed, 99 Foo 2015 07:28:00 GMT", "neither delta-seconds nor an HTTP date"),
        (None, ""),
        ("", ""),
        ("7", ""),
        ("100000", ""),  # capped, not wrong
        (email.utils.formatdate(NOW - 30, usegmt=True), ""),  # a date past: now
    ],
)
def test_what_is_wrong_with_a_retry_after(header: str | None, problem: str) -> None:
    assert read_retry_after(header, now=NOW)[1] == problem


@pytest.mark.parametrize("header", ["nan", "inf", "-3"])
def test_an_unusable_retry_after_leaves_the_usual_backoff(header: str) -> None:
    outcome = classify_http(503, header, b"")
    assert outcome == Outcome(RETRY, "HTTP 503", 0.0, code="503")
    gate = SinkGate(1.0, 8.0, clock=lambda: 100.0)
    gate.record(outcome)  # does not raise, and pauses for the usual first step
    assert gate._closed_until == 101.0
