"""The learned body limit: lowered only by refused bodies of several events, never below one
event of max_event_bytes in its envelope, grown back by probes, each change logged once."""

from __future__ import annotations

import logging

import httpx
import orjson
import pytest

from reporter._config import SinkSettings
from reporter._delivery.attempt import TOO_LARGE, Attempt
from reporter._pacing.body_limit import JSON_BODY, BodyLimit
from reporter._senders.outcome import DELIVERED, REJECTED
from reporter._sinks.json.sender import JsonSender
from reporter._sinks.nppa.sink import NPPA_BODY
from tests.support.clock import Clock

MiB = 1024 * 1024


def changes(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [m for m in caplog.messages if "batches are now cut at" in m]


def test_a_refusal_lowers_the_limit_to_the_body_taken_but_never_below_one_largest_event(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "reporter")
    limit = BodyLimit(MiB, JSON_BODY, max_event_bytes=32768, clock=Clock())
    floor = JSON_BODY.fixed + 32768 + JSON_BODY.per_event
    assert limit.floor == floor

    limit.learn(refused=30_400, accepted=360)  # a 100-byte and a 30 KB event, then halves
    assert limit.limit == floor
    limit.learn(refused=30_400, accepted=360)  # the same again: no change, no line
    assert limit.limit == floor
    limit.learn(refused=0, accepted=20_000)  # smaller than the limit: nothing learned
    assert limit.limit == floor
    assert len(changes(caplog)) == 1

    big = BodyLimit(8 * MiB, JSON_BODY, max_event_bytes=32768, clock=Clock())
    big.learn(refused=2 * MiB, accepted=MiB)
    assert big.limit == MiB
    big.learn(refused=MiB + 10, accepted=0)  # just under the size refused
    assert big.limit == MiB  # ... which is not lower
    big.learn(refused=900_000, accepted=0)
    assert big.limit == 899_999
    assert len(changes(caplog)) == 3


def test_the_floor_never_passes_the_configured_limit() -> None:
    limit = BodyLimit(4096, NPPA_BODY, max_event_bytes=32768)
    assert limit.floor == 4096
    limit.learn(refused=4000, accepted=100)
    assert limit.limit == 4096


def test_probes_grow_the_limit_back_to_the_configured_one(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "reporter")
    clock = Clock()
    limit = BodyLimit(MiB, JSON_BODY, max_event_bytes=1000, probe_seconds=60, clock=clock)
    assert limit.claim_budget() == (JSON_BODY.event_budget(MiB), 1)  # not lowered: no probe
    limit.learn(refused=200_000, accepted=100_000)
    assert limit.limit == 100_000
    normal = (JSON_BODY.event_budget(100_000), 1)
    probe = (JSON_BODY.event_budget(200_000), 1)

    assert limit.claim_budget() == normal  # the interval starts at the change
    clock.now += 59
    assert limit.claim_budget() == normal
    clock.now += 1
    assert [limit.claim_budget() for _ in range(3)] == [probe, normal, normal]  # one claim

    limit.learn(refused=0, accepted=150_000)  # the probe's body, taken
    assert limit.limit == 150_000
    for _ in range(3):  # taken every time: 300,000, 600,000, then the configured 1 MiB
        clock.now += 60
        budget, _ = limit.claim_budget()
        limit.learn(refused=0, accepted=JSON_BODY.fixed + budget)
    assert limit.limit == MiB
    clock.now += 600
    assert limit.claim_budget() == (JSON_BODY.event_budget(MiB), 1)
    assert len(changes(caplog)) == 5  # each change once


def test_a_refused_probe_keeps_the_limit_and_waits_a_whole_interval() -> None:
    clock = Clock()
    limit = BodyLimit(MiB, JSON_BODY, max_event_bytes=1000, probe_seconds=60, clock=clock)
    limit.learn(refused=200_000, accepted=100_000)
    clock.now += 60
    assert limit.claim_budget() == (JSON_BODY.event_budget(200_000), 1)
    limit.learn(refused=200_000, accepted=100_000)  # its halves were taken, no more
    assert limit.limit == 100_000
    clock.now += 59
    assert limit.claim_budget() == (JSON_BODY.event_budget(100_000), 1)


def limited_sender(max_body: int) -> tuple[JsonSender, list[int]]:
    """A json sender whose endpoint (httpx.MockTransport) answers 413 to a body over
    ``max_body`` bytes; the event counts of the bodies it took."""
    taken: list[int] = []

    def answer(request: httpx.Request) -> httpx.Response:
        if len(request.content) > max_body:
            return httpx.Response(413, text="Request Entity Too Large")
        taken.append(len(orjson.loads(request.content)["events"]))
        return httpx.Response(200)

    return JsonSender(SinkSettings(url="http://ingest.test/v1"), httpx.MockTransport(answer)), taken


def test_a_single_event_refused_is_dead_lettered_alone_and_teaches_nothing() -> None:
    sender, taken = limited_sender(20_000)
    limit = BodyLimit(MiB, JSON_BODY, max_event_bytes=1000)
    attempt = Attempt(sender, limit)
    big = orjson.dumps({"pad": "p" * 30_000})
    small = orjson.dumps({"seq": 1})

    alone = attempt.send("g", "b1", [big], 1, lambda: True).outcome
    assert (alone.kind, alone.reason) == (REJECTED, TOO_LARGE)
    assert limit.limit == MiB

    pair = attempt.send("g", "b2", [small, big], 1, lambda: True).outcome
    assert (pair.kind, pair.refused) == (DELIVERED, ((1, TOO_LARGE),))
    assert taken == [1]
    assert limit.limit == limit.floor  # the pair's refusal: lowered, down to the floor only
