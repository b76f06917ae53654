"""Redis unreachable: collect() keeps going, the buffer stays bounded, every drop is counted."""

from __future__ import annotations

import pytest

from collector import Collector, EventsDropped
from collector.store import KeySchema
from tests.support.fixtures import FAST_FAILURE, MakeCollector
from tests.support.polling import wait_until
from tests.support.servers import Server
from tests.support.stored import balanced, queue_events, stats_total

PREFIX = "down"
SCHEMA = KeySchema(PREFIX, 16)
GAMES = ["g0", "g1", "g2"]
# For the tests that count exactly what the bound keeps: the flusher's first round comes after
# the burst is collected.  A round that ran in the middle of it (a busy host) would keep the
# events it took as an unconfirmed write (Redis down: its outcome unknown, so they are sent
# again with the same number, never dropped), outside the buffer's bound, and the buffer
# would still fill to its bound behind it.  Retries stay fast: the backoff is capped at
# retry_max_delay_ms.
BURST_FIRST = {**FAST_FAILURE, "flush_interval_ms": 1000}


def stored_seqs(server: Server) -> list[int]:
    client = server.client()
    try:
        return [e["seq"] for g in GAMES for e in queue_events(client, SCHEMA, g)]
    finally:
        client.close()


def settled(c: Collector, buffer_limit: int | None = None) -> dict[str, int]:
    """Stats once they balance and no flush attempt holds events besides the buffer.

    While the flusher tries to write, up to ``buffer_limit`` events are in flight and as many
    newer ones may wait in the buffer; failing, it puts them back and drops the excess.
    """

    def quiet_stats() -> dict[str, int] | None:
        stats = c.stats()
        if not balanced(stats):
            return None
        if buffer_limit is not None and stats["buffered"] > buffer_limit:
            return None
        return stats

    stats: dict[str, int] = wait_until(quiet_stats, what="quiet stats")
    return stats


def test_buffer_is_bounded_and_everything_is_accounted_for(
    own_server: Server, make_collector: MakeCollector
) -> None:
    own_server.stop()
    c = make_collector(
        url=own_server.url,
        key_prefix=PREFIX,
        max_buffer_events=100,
        max_events_per_game=100_000,
        **BURST_FIRST,
    )
    seq = 0
    for _ in range(250):
        assert c.collect(GAMES[seq % 3], {"seq": seq}) == 0  # returns, never raises
        seq += 1
    wait_until(lambda: c.stats()["backend_errors"] >= 2, what="failed flush attempts")
    stats = settled(c, buffer_limit=100)
    assert stats["accepted"] == 250
    assert stats["buffered"] <= 100
    assert stats["dropped_buffer_full"] >= 150
    assert stats["stored"] == 0

    # more events while down, then the server comes back in the middle of the stream
    for i in range(500):
        if i == 250:
            own_server.start()
        assert c.collect(GAMES[seq % 3], {"seq": seq}) == 0
        seq += 1
    assert c.flush(timeout=20)

    stats = c.stats()
    assert stats["buffered"] == 0
    assert stats["accepted"] == 750
    assert balanced(stats)
    dropped = stats["dropped_buffer_full"]
    got = stored_seqs(own_server)
    assert len(got) == len(set(got)) == stats["stored"] == 750 - dropped
    # drops take the oldest: what survived from the first 250 is their newest tail
    early = sorted(s for s in got if s < 250)
    assert early == list(range(250 - len(early), 250))
    client = own_server.client()
    assert stats_total(client, SCHEMA, "dropped_buffer_full") == dropped
    assert stats_total(client, SCHEMA, "stored") == 750 - dropped
    client.close()


def test_collect_with_redis_down_from_the_start(
    own_server: Server, make_collector: MakeCollector
) -> None:
    """The first connection never succeeds; nothing raises and nothing is lost uncounted."""
    own_server.stop()
    c = make_collector(url=own_server.url, key_prefix=PREFIX, max_buffer_events=10, **BURST_FIRST)
    for seq in range(50):
        assert c.collect("g0", {"seq": seq}) == 0
    assert not c.flush(timeout=0.3)
    stats = settled(c, buffer_limit=10)
    assert stats["accepted"] == 50
    assert stats["dropped_buffer_full"] == 40
    assert stats["buffered"] == 10

    own_server.start()
    assert c.flush(timeout=20)
    assert stored_seqs(own_server) == list(range(40, 50))
    client = own_server.client()
    assert stats_total(client, SCHEMA, "dropped_buffer_full") == 40
    client.close()


@pytest.mark.parametrize("cap", [5, 100_000])
def test_close_with_redis_down_counts_what_is_left(
    own_server: Server, make_collector: MakeCollector, cap: int
) -> None:
    """With a small cap the flusher thins the burst before sending; those still count."""
    own_server.stop()
    c = make_collector(
        url=own_server.url,
        key_prefix=PREFIX,
        max_events_per_game=cap,
        close_timeout_seconds=0.3,
        **FAST_FAILURE,
    )
    for seq in range(20):
        c.collect("g0", {"seq": seq})
    wait_until(lambda: c.stats()["backend_errors"] >= 2, what="failed flush attempts")
    assert balanced(settled(c))
    c.close()
    stats = c.stats()
    assert stats["buffered"] == 0
    assert stats["stored"] == 0
    assert stats["dropped_at_close"] == 20
    assert balanced(stats)


def test_redis_down_and_back_in_sync_mode_is_counted(
    own_server: Server, make_collector: MakeCollector
) -> None:
    c = make_collector(
        url=own_server.url, key_prefix=PREFIX, mode="sync", max_event_bytes=64, **FAST_FAILURE
    )
    c.collect("g0", {"blob": "x" * 100})  # a too-large drop waits to be reported
    own_server.stop()
    failures = 0
    for seq in range(5):
        try:
            c.collect("g0", {"seq": seq})
        except Exception:  # BackendError; checked in test_collector
            failures += 1
    assert failures == 5
    own_server.start()
    assert c.collect("g0", {"seq": 99}) == 0
    client = own_server.client()
    assert queue_events(client, SCHEMA, "g0") == [{"seq": 99}]
    assert stats_total(client, SCHEMA, "dropped_too_large") == 1
    client.close()
    stats = c.stats()
    assert stats["backend_errors"] == 5
    assert stats["accepted"] == stats["stored"] == 1


def test_flush_after_close_reports_what_was_left(
    own_server: Server, make_collector: MakeCollector
) -> None:
    own_server.stop()
    c = make_collector(url=own_server.url, key_prefix=PREFIX, **FAST_FAILURE)
    c.collect("g0", {"seq": 0})
    c.close(timeout=0.2)
    assert c.stats()["dropped_at_close"] == 1
    own_server.start()
    assert c.flush(timeout=60) is False  # closed: nothing more will be written


def test_the_buffer_is_bounded_in_bytes_too(
    own_server: Server, make_collector: MakeCollector
) -> None:
    """Large events during an outage: the byte bound drops the oldest, counted in stats, in
    Redis and to on_error like the event bound; the newest are stored once Redis is back."""
    own_server.stop()
    seen: list[Exception] = []
    c = make_collector(
        url=own_server.url,
        key_prefix=PREFIX,
        max_buffer_events=100_000,
        max_buffer_bytes=100_000,
        **BURST_FIRST,
        on_error=lambda error, count: seen.append(error),
    )
    pad = "p" * 10_000  # entries of 10,034 bytes: 9 fit in 100,000
    for seq in range(30):
        assert c.collect("g0", {"seq": seq, "pad": pad}) == 0
    stats = settled(c, buffer_limit=9)
    assert (stats["accepted"], stats["buffered"], stats["dropped_buffer_full"]) == (30, 9, 21)

    own_server.start()
    assert c.flush(timeout=20)
    client = own_server.client()
    try:
        got = [e["seq"] for e in queue_events(client, SCHEMA, "g0")]
        assert got == list(range(21, 30))
        assert stats_total(client, SCHEMA, "dropped_buffer_full") == 21
    finally:
        client.close()
    c.close()
    dropped = [e for e in seen if isinstance(e, EventsDropped)]
    assert sum(e.count for e in dropped) == 21
    assert {e.reason for e in dropped} == {"dropped_buffer_full"}
