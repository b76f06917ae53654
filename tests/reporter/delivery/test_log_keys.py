"""Rate-limited log lines are keyed by a kind of ours, never by what the endpoint wrote."""

from __future__ import annotations

import itertools
import logging

import httpx
import pytest

from reporter._delivery import settling
from reporter._delivery.settling import log_kind
from reporter._monitoring.accounting import read_totals
from reporter._senders.outcome import REJECTED, RETRY, Outcome, Refusal
from tests.support.entries import make_config, numbered, store
from tests.support.fixtures import MakeService
from tests.support.polling import wait_until
from tests.support.recorder import Recorder
from tests.support.scriptcalls import Scripts


@pytest.mark.parametrize(
    ("outcome", "kind"),
    [
        (Outcome(REJECTED, "HTTP 400: bad request id=81f3", code="400"), "400"),
        (Outcome(RETRY, "ReadTimeout: timed out", code="ReadTimeout"), "ReadTimeout"),
        (
            Outcome(REJECTED, "nppa 1011 wrong app id", alert=Refusal("nppa 1011", "check app_id")),
            "nppa 1011",
        ),
        (Outcome(RETRY, "nppa 4001 busy, trace 9a8b"), "nppa 4001"),
        (Outcome(RETRY, "HTTP 502"), "HTTP 502"),
        (Outcome(REJECTED, "request 7d1c refused: quota"), "other"),
        (
            Outcome(REJECTED, "game 'g' has no biz_id", alert=Refusal("no biz_id for game 'g'")),
            "other",
        ),
    ],
)
def test_the_kind_of_an_outcome_never_holds_the_endpoints_text(outcome: Outcome, kind: str) -> None:
    assert log_kind(outcome) == kind


def test_dead_letters_whose_errors_carry_a_request_id_log_one_line(
    redis_url: str, make_service: MakeService, caplog: pytest.LogCaptureFixture
) -> None:
    ids = itertools.count()
    recorder = Recorder(
        lambda request: httpx.Response(400, json={"error": f"rejected, request id {next(ids):08x}"})
    )
    config = make_config(redis_url, reporter={"linger_ms": 50, "poll_interval_ms": 20})
    service = make_service(config, transport=recorder.transport())
    for g in range(40):
        store(Scripts(service.store), service.schema, f"game-{g}", numbered(f"game-{g}", 2))
    settling.ratelog.reset("dead:400")
    keys = settling.ratelog.keys
    with caplog.at_level(logging.ERROR, logger="reporter"):
        service.start()
        wait_until(lambda: read_totals(service.store).dead_now == 80, what="40 dead letters")
        service.stop()
    dead_lines = [r for r in caplog.records if "dead-lettered" in r.getMessage()]
    assert len(dead_lines) == 1
    assert settling.ratelog.keys <= keys + 1
