"""Sync mode, stored or not: a ``collect()`` whose write lost its reply sends it again as it
is (a repeat is not stored twice) for up to ``sync_resend_seconds``, so that when it raises
anything but ``BackendUnconfirmed`` the event was not stored.  And a refusal met by a resend
after a lost reply is never taken for the write's outcome, in either mode.  Replies are lost
for real: a relay closes the connection after the call ran."""

from __future__ import annotations

import threading

import pytest

from collector import BackendUnconfirmed
from collector.store import KeySchema
from tests.support.fixtures import MakeCollector
from tests.support.polling import wait_until
from tests.support.relay import relay_to
from tests.support.servers import Server
from tests.support.stored import balanced, queue_events

PREFIX = "sync"
SCHEMA = KeySchema(PREFIX, 1)


def refusing(server: Server, on: bool) -> None:
    """Redis refuses every write before it runs (NOREPLICAS): no replica is attached."""
    server.client().config_set("min-replicas-to-write", 1 if on else 0)


def test_a_sync_collect_whose_reply_was_lost_sends_it_again_and_returns(
    own_server: Server, make_collector: MakeCollector
) -> None:
    """Before: it raised, and the event was stored: a caller that called again stored it
    twice."""
    with relay_to(("127.0.0.1", own_server.port)) as relay:
        c = make_collector(
            url=relay.url,
            key_prefix=PREFIX,
            shards=1,
            mode="sync",
            socket_timeout_seconds=0.5,
            retry_max_delay_ms=100,
            sync_resend_seconds=10,
        )
        c.collect("g", {"n": 0})
        relay.lose_replies()
        threading.Timer(1.0, relay.lose_replies, args=(False,)).start()
        c.collect("g", {"n": 1})  # returns once a copy is answered: as a repeat
        assert relay.lost >= 2  # the call and the client's own retry, each after it ran
    assert queue_events(own_server.client(), SCHEMA, "g") == [{"n": 0}, {"n": 1}]
    stats = c.stats()
    assert (stats["accepted"], stats["stored"], stats["backend_errors"]) == (2, 2, 0)


def test_a_sync_collect_whose_outcome_stays_unknown_says_it_may_be_stored(
    own_server: Server, make_collector: MakeCollector
) -> None:
    with relay_to(("127.0.0.1", own_server.port)) as relay:
        c = make_collector(
            url=relay.url,
            key_prefix=PREFIX,
            shards=1,
            mode="sync",
            socket_timeout_seconds=0.5,
            retry_max_delay_ms=100,
            sync_resend_seconds=0.5,
        )
        c.collect("g", {"n": 0})
        relay.lose_replies()
        with pytest.raises(BackendUnconfirmed, match=r"outcome unknown after 0.5 s.*may be stored"):
            c.collect("g", {"n": 1})
    # It was: that is why the caller must not send it again.
    assert queue_events(own_server.client(), SCHEMA, "g") == [{"n": 0}, {"n": 1}]
    stats = c.stats()
    assert (stats["accepted"], stats["stored"], stats["backend_errors"]) == (1, 1, 1)


def test_a_refusal_of_the_clients_own_retry_is_not_the_writes_outcome(
    own_server: Server, make_collector: MakeCollector
) -> None:
    """The call ran and its reply was lost; the client's retry on a new connection ([redis]
    retries) met a refusal before the script ran (NOREPLICAS).  That says nothing of the first
    copy: BackendUnconfirmed, not "not stored"."""
    with relay_to(("127.0.0.1", own_server.port)) as relay:
        c = make_collector(
            url=relay.url,
            key_prefix=PREFIX,
            shards=1,
            mode="sync",
            socket_timeout_seconds=0.5,
            sync_resend_seconds=0,
        )
        c.collect("g", {"n": 0})
        relay.lose_next(then=lambda: refusing(own_server, True))
        with pytest.raises(BackendUnconfirmed, match=r"resend refused.*NOREPLICAS"):
            c.collect("g", {"n": 1})
    refusing(own_server, False)
    assert queue_events(own_server.client(), SCHEMA, "g") == [{"n": 0}, {"n": 1}]


def test_a_refused_resend_keeps_a_background_write_whose_reply_was_lost(
    own_server: Server, make_collector: MakeCollector
) -> None:
    """Background mode: the write is kept and sent again (refused meanwhile) until a copy is
    answered, as a repeat.  Put back as new events, it would be stored twice."""
    with relay_to(("127.0.0.1", own_server.port)) as relay:
        c = make_collector(
            url=relay.url,
            key_prefix=PREFIX,
            shards=1,
            flush_interval_ms=5,
            retry_max_delay_ms=50,
            socket_timeout_seconds=0.5,
        )
        c.collect("g", {"n": 0})
        assert c.flush(timeout=10)
        relay.lose_replies()
        for n in range(1, 11):
            c.collect(f"g{n % 2}", {"n": n})
        wait_until(lambda: relay.lost >= 2, what="replies lost after their calls ran")
        refusing(own_server, True)
        relay.lose_replies(False)
        errors = c.stats()["backend_errors"]
        wait_until(lambda: c.stats()["backend_errors"] >= errors + 3, what="refused resends")
        assert c.stats()["unconfirmed_writes"] >= 1
        refusing(own_server, False)
        assert c.flush(timeout=10)
    admin = own_server.client()
    stored = [e["n"] for g in ("g0", "g1") for e in queue_events(admin, SCHEMA, g)]
    assert sorted(stored) == list(range(1, 11))
    stats = c.stats()
    assert stats["stored"] == 11 and balanced(stats)
