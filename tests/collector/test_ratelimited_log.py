"""``RateLimitedLog``: one line per key per interval, and a bounded memory whatever the keys."""

from __future__ import annotations

import logging

import pytest

from collector.logs import RateLimitedLog
from tests.support.clock import Clock


@pytest.fixture
def clock() -> Clock:
    return Clock()


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "ratelog-test"]


def test_one_line_per_key_per_interval_with_the_count_held_back(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    log = RateLimitedLog(logging.getLogger("ratelog-test"), interval=30, clock=clock)
    with caplog.at_level(logging.INFO):
        for _ in range(5):
            log.log(logging.ERROR, "http-500", "failed")
        log.log(logging.ERROR, "http-503", "other")
        clock.now += 30
        log.log(logging.ERROR, "http-500", "failed")
    assert lines(caplog) == ["failed", "other", "failed (4 similar messages suppressed)"]


def test_distinct_keys_past_the_bound_share_one_line_per_interval(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    log = RateLimitedLog(logging.getLogger("ratelog-test"), interval=30, max_keys=8, clock=clock)
    with caplog.at_level(logging.INFO):
        for i in range(1000):
            log.log(logging.ERROR, f"path:/{i}", "GET /%d failed", i)
    assert log.keys == 9  # the bound, and the one key the overflow shares
    assert lines(caplog) == [f"GET /{i} failed" for i in range(9)]
    clock.now += 30  # the old keys are idle now: forgotten, and what they held back is told
    with caplog.at_level(logging.INFO):
        log.log(logging.ERROR, "path:/new", "GET /new failed")
    assert log.keys == 1
    assert lines(caplog)[-1] == ("GET /new failed (991 earlier messages of other kinds suppressed)")


def test_a_long_key_is_cut(clock: Clock, caplog: pytest.LogCaptureFixture) -> None:
    log = RateLimitedLog(logging.getLogger("ratelog-test"), interval=30, clock=clock)
    with caplog.at_level(logging.INFO):
        log.log(logging.ERROR, "x" * 60_000, "first")
        log.log(logging.ERROR, "x" * 60_001, "second")  # the same kind once cut
    assert lines(caplog) == ["first"]
    assert log.keys == 1
    log.reset("x" * 70_000)
    assert log.keys == 0
