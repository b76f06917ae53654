"""The batch life cycle scripts (claim, nack, extend, release, reap, ack, replay, purge)
called directly on real servers, one transition at a time."""

from __future__ import annotations

import math

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reporter._monitoring.accounting import read_totals
from tests.support.lifecycle import LEASE_MS, Shard, new_token, server_ms
from tests.support.scriptcalls import store_of


@pytest.fixture
def shard(r: redis.Redis) -> Shard:
    return Shard(r)


def take_one(shard: Shard, batch_id: str, token: str) -> int:
    """Make ``batch_id`` due, lease it again with ``token``; the attempts it reports."""
    shard.make_due(batch_id)
    taken = shard.scripts.take_retries(shard.keys, token, LEASE_MS, 10)
    assert [b.batch_id for b in taken] == [batch_id]
    return taken[0].attempts


def expected_delay(attempt: int, initial: int, longest: int, jitter: float, least: int) -> int:
    return max(least, math.floor(jitter * min(longest, initial * 2 ** (attempt - 1))))


# -- nack: backoff, attempts, dead-lettering ---------------------------------------------------


@pytest.mark.parametrize("jitter", [0.0, 0.25, 0.999999])
def test_nack_backs_off_exponentially_with_full_jitter_and_counts_attempts(
    shard: Shard, jitter: float
) -> None:
    initial, longest, attempts = 20, 500, 8
    token = new_token()
    batch = shard.leased("g", 5, token)
    for attempt in range(1, attempts):
        before = server_ms(shard.r)
        result = shard.nack(
            batch, token, initial_ms=initial, max_ms=longest, max_attempts=attempts, jitter=jitter
        )
        after = server_ms(shard.r)
        ceiling = min(longest, initial * 2 ** (attempt - 1))
        assert result.state == "retry"
        assert 0 <= result.delay_ms <= ceiling
        assert result.delay_ms == expected_delay(attempt, initial, longest, jitter, 0)
        due = shard.retry()[batch]
        assert before + result.delay_ms <= due <= after + result.delay_ms
        assert batch not in shard.inflight()
        assert shard.meta(batch)["a"] == attempt  # type: ignore[index]
        token = new_token()
        assert take_one(shard, batch, token) == attempt
    assert shard.stats()["batches_retried"] == attempts - 1


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    attempt=st.integers(1, 12),
    initial=st.integers(1, 5000),
    extra=st.integers(0, 60_000),
    jitter=st.floats(0, 1, exclude_max=True),
    least=st.integers(0, 90_000),
)
def test_nack_delay_is_full_jitter_below_the_ceiling_and_at_least_retry_after(
    shard: Shard, attempt: int, initial: int, extra: int, jitter: float, least: int
) -> None:
    shard.clear()
    longest = initial + extra
    token = new_token()
    batch = shard.leased("g", 1, token)
    for earlier in range(1, attempt):  # earlier failures, each with the least delay possible
        assert shard.nack(batch, token, max_attempts=99, jitter=0.0).state == "retry"
        token = new_token()
        assert take_one(shard, batch, token) == earlier

    result = shard.nack(
        batch,
        token,
        initial_ms=initial,
        max_ms=longest,
        max_attempts=99,
        jitter=jitter,
        min_delay_ms=least,
    )

    ceiling = min(longest, initial * 2 ** (attempt - 1))
    assert result.state == "retry"
    assert result.delay_ms >= least
    if least <= ceiling:
        assert result.delay_ms <= ceiling
    assert result.delay_ms == expected_delay(attempt, initial, longest, jitter, least)


def test_retry_after_longer_than_the_backoff_wins(shard: Shard) -> None:
    token = new_token()
    batch = shard.leased("g", 3, token)
    before = server_ms(shard.r)
    result = shard.nack(batch, token, initial_ms=20, max_ms=200, jitter=0.9, min_delay_ms=1000)
    assert result.state == "retry"
    assert result.delay_ms == 1000
    assert shard.retry()[batch] >= before + 1000
    # not due yet: nobody can take it before the Retry-After has passed
    assert shard.scripts.take_retries(shard.keys, new_token(), LEASE_MS, 10) == []


def test_dead_letter_after_max_attempts(shard: Shard) -> None:
    token = new_token()
    batch = shard.leased("g", 7, token)
    states = []
    for _ in range(3):
        states.append(shard.nack(batch, token, max_attempts=3, reason="HTTP 503").state)
        if states[-1] == "retry":
            token = new_token()
            take_one(shard, batch, token)
    assert states == ["retry", "retry", "dead"]
    assert shard.dead() == [batch]
    assert batch not in shard.retry() and batch not in shard.inflight()
    meta = shard.meta(batch)
    assert meta is not None
    assert (meta["a"], meta["r"], meta["t"]) == (3, "HTTP 503", "")
    stats = shard.stats()
    assert (stats["dead_events"], stats["dead_batches"], stats["batches_retried"]) == (7, 1, 2)
    # a dead batch cannot be taken or finished any more
    assert shard.scripts.take_retries(shard.keys, new_token(), LEASE_MS, 10) == []
    assert shard.scripts.ack(shard.keys, batch, token) == -1
    assert read_totals(store_of(shard.r, shard.schema)).unaccounted == 0


def test_permanent_rejection_dead_letters_at_once(shard: Shard) -> None:
    token = new_token()
    batch = shard.leased("g", 4, token)
    result = shard.nack(batch, token, permanent=True, max_attempts=10, reason="HTTP 400: bad")
    assert (result.state, result.delay_ms) == ("dead", 0)
    assert shard.dead() == [batch]
    assert shard.meta(batch)["a"] == 1  # type: ignore[index]
    assert shard.retry() == {}
    assert shard.stats()["dead_events"] == 4
    totals = read_totals(store_of(shard.r, shard.schema))
    assert (totals.dead_now, totals.unaccounted) == (4, 0)


# -- extend and release ------------------------------------------------------------------------


def test_extend_renews_the_lease_only_for_the_holder(shard: Shard) -> None:
    token = new_token()
    shard.push("g", 3)
    batch = shard.claim("g", token, lease_ms=1000).batches[0][0]
    first = shard.inflight()[batch]

    assert shard.scripts.extend(shard.keys, batch, new_token(), 60_000) is False
    assert shard.inflight()[batch] == first
    assert shard.scripts.extend(shard.keys, batch, "", 60_000) is False
    assert shard.inflight()[batch] == first

    assert shard.scripts.extend(shard.keys, batch, token, 60_000) is True
    renewed = shard.inflight()[batch]
    assert renewed >= first + 59_000
    # an extended lease is not reaped, even by a reaper that runs late
    assert shard.scripts.reap(shard.keys, 100, 5, 100) == (0, 0)

    assert shard.scripts.ack(shard.keys, batch, token) == 3
    assert shard.scripts.extend(shard.keys, batch, token, 60_000) is False
    assert shard.inflight() == {}


def test_extend_after_the_lease_ran_out_but_before_the_reaper_keeps_it(shard: Shard) -> None:
    token = new_token()
    batch = shard.leased("g", 2, token)
    shard.expire(batch)
    assert shard.scripts.extend(shard.keys, batch, token, 60_000) is True
    assert shard.scripts.reap(shard.keys, 100, 5, 100) == (0, 0)
    assert shard.scripts.ack(shard.keys, batch, token) == 2


def test_release_returns_to_retry_without_charging_an_attempt(shard: Shard) -> None:
    token = new_token()
    batch = shard.leased("g", 6, token)
    assert shard.scripts.release(shard.keys, batch, new_token()) is False
    assert batch in shard.inflight()

    before = server_ms(shard.r)
    assert shard.scripts.release(shard.keys, batch, token) is True
    assert shard.inflight() == {}
    assert before <= shard.retry()[batch] <= server_ms(shard.r)  # due at once
    meta = shard.meta(batch)
    assert meta is not None
    assert (meta["a"], meta["t"]) == (0, "")
    assert shard.scripts.release(shard.keys, batch, token) is True  # sent again: its answer
    assert shard.retry() == {batch: shard.retry()[batch]} and shard.inflight() == {}
    assert shard.stats()["batches_released"] == 1  # released once

    again = shard.scripts.take_retries(shard.keys, new_token(), LEASE_MS, 10)
    assert [(b.batch_id, b.attempts, len(b.entries)) for b in again] == [(batch, 0, 6)]
    stats = shard.stats()
    assert "batches_retried" not in stats and "dead_events" not in stats


# -- reap ----------------------------------------------------------------------------------------


def test_reap_moves_expired_leases_to_retry_charging_an_attempt(shard: Shard) -> None:
    token = new_token()
    shard.push("g", 3)
    short = shard.claim("g", token, lease_ms=1).batches[0][0]
    shard.push("g", 4)
    long = shard.claim("g", token, lease_ms=LEASE_MS).batches[0][0]
    deadline = server_ms(shard.r) + 2
    while server_ms(shard.r) <= deadline:  # the 1 ms lease runs out
        pass

    assert shard.scripts.reap(shard.keys, 100, 5, 100) == (1, 0)

    assert list(shard.inflight()) == [long]
    assert list(shard.retry()) == [short]
    meta = shard.meta(short)
    assert meta is not None
    assert (meta["a"], meta["t"], meta["r"]) == (1, "", "lease expired")
    taken = shard.scripts.take_retries(shard.keys, new_token(), LEASE_MS, 10)
    assert [(b.batch_id, b.attempts) for b in taken] == [(short, 1)]
    assert shard.stats()["batches_reaped"] == 1
    assert read_totals(store_of(shard.r, shard.schema)).unaccounted == 0


def test_reap_dead_letters_after_max_attempts(shard: Shard) -> None:
    batch = shard.leased("g", 5, new_token())
    for attempt in range(1, 3):
        shard.expire(batch)
        assert shard.scripts.reap(shard.keys, 100, 3, 100) == (1, 0)
        assert take_one(shard, batch, new_token()) == attempt
    shard.expire(batch)
    assert shard.scripts.reap(shard.keys, 100, 3, 100) == (0, 1)
    assert shard.dead() == [batch]
    assert shard.retry() == {} and shard.inflight() == {}
    assert shard.stats()["dead_events"] == 5
    totals = read_totals(store_of(shard.r, shard.schema))
    assert (totals.dead_now, totals.unaccounted) == (5, 0)


def test_reap_is_bounded_per_call(shard: Shard) -> None:
    token = new_token()
    shard.push("g", 10)
    claimed = shard.claim("g", token, size=1, most=10)
    ids = [b for b, _ in claimed.batches]
    assert len(ids) == 10
    shard.expire(*ids[:7])

    assert shard.scripts.reap(shard.keys, 3, 5, 100) == (3, 0)
    assert len(shard.retry()) == 3
    assert shard.scripts.reap(shard.keys, 3, 5, 100) == (3, 0)
    assert shard.scripts.reap(shard.keys, 3, 5, 100) == (1, 0)
    assert shard.scripts.reap(shard.keys, 3, 5, 100) == (0, 0)
    assert set(shard.retry()) == set(ids[:7])
    assert set(shard.inflight()) == set(ids[7:])


# -- stale tokens ---------------------------------------------------------------------------------


def test_every_transition_with_a_stale_token_changes_nothing(shard: Shard) -> None:
    old = new_token()
    batch = shard.leased("g", 4, old)
    shard.expire(batch)
    assert shard.scripts.reap(shard.keys, 100, 5, 100) == (1, 0)
    new = new_token()
    assert take_one(shard, batch, new) == 1
    before = shard.snapshot()

    assert shard.scripts.ack(shard.keys, batch, old) == -1
    assert shard.nack(batch, old).state == "lost"
    assert shard.nack(batch, old, permanent=True).state == "lost"
    assert shard.scripts.release(shard.keys, batch, old) is False
    assert shard.scripts.extend(shard.keys, batch, old, 60_000) is False
    assert shard.scripts.ack(shard.keys, batch, "") == -1  # the empty token of a waiting batch
    assert shard.snapshot() == before

    assert shard.scripts.ack(shard.keys, batch, new) == 4
    assert shard.stats()["delivered"] == 4


def test_transitions_on_a_batch_waiting_for_retry_change_nothing(shard: Shard) -> None:
    token = new_token()
    batch = shard.leased("g", 2, token)
    assert shard.nack(batch, token).state == "retry"
    before = shard.snapshot()
    for t in (token, ""):
        assert shard.scripts.ack(shard.keys, batch, t) == -1
        # the nack sent again gets its own answer from its receipt; any other is lost
        assert shard.nack(batch, t).state == ("retry" if t == token else "lost")
        assert shard.scripts.release(shard.keys, batch, t) is False
        assert shard.scripts.extend(shard.keys, batch, t, 60_000) is False
    assert shard.snapshot() == before


def test_finished_batches_cannot_be_finished_again(shard: Shard) -> None:
    token = new_token()
    batch = shard.leased("g", 3, token)
    assert shard.scripts.ack(shard.keys, batch, token) == 3
    before = shard.snapshot()
    assert shard.scripts.ack(shard.keys, batch, token) == 3  # sent again: its answer
    assert shard.scripts.ack(shard.keys, batch, new_token()) == -1
    assert shard.nack(batch, token).state == "lost"
    assert shard.scripts.release(shard.keys, batch, token) is False
    assert shard.snapshot() == before
    assert shard.stats()["delivered"] == 3


# -- claim after a lost reply --------------------------------------------------------------------


def test_claim_again_with_the_same_batch_id_returns_the_same_batches(shard: Shard) -> None:
    pushed = shard.push("g", 300)
    token = new_token()
    first = shard.claim("g", token, batch_id="b1", size=128, most=2)
    stats = shard.stats()
    again = shard.claim("g", token, batch_id="b1", size=128, most=2)

    assert again.batches == first.batches
    assert [b for b, _ in first.batches] == ["b1.0", "b1.1"]
    assert [e for _, entries in first.batches for e in entries] == pushed[:256]
    assert (first.remaining, again.remaining) == (44, 44)
    assert sorted(shard.inflight()) == ["b1.0", "b1.1"]
    assert shard.r.llen(shard.keys.queue("g")) == 44
    assert shard.stats() == stats  # counted once
    assert (stats["claimed"], stats["batches_claimed"]) == (256, 2)
    assert read_totals(store_of(shard.r, shard.schema)).unaccounted == 0


def test_claim_takes_at_most_a_full_batch_of_128(shard: Shard) -> None:
    shard.push("g", 129)
    claimed = shard.claim("g", new_token(), size=128, most=1)
    assert [len(e) for _, e in claimed.batches] == [128]
    assert claimed.remaining == 1


# -- the dead list: capped, replayed, purged -------------------------------------------------------


def test_dead_list_is_capped_and_what_falls_off_is_counted(shard: Shard) -> None:
    sizes = [1, 2, 3, 4, 5]
    ids = []
    for size in sizes:
        token = new_token()
        batch = shard.leased("g", size, token)
        assert shard.nack(batch, token, permanent=True, dead_max=2).state == "dead"
        ids.append(batch)
    assert shard.dead() == [ids[4], ids[3]]  # newest first, the oldest fell off
    for gone in ids[:3]:
        assert shard.meta(gone) is None
        assert not shard.r.hexists(shard.keys.payloads, gone)
    stats = shard.stats()
    assert stats["dead_events"] == sum(sizes)
    assert stats["dead_dropped"] == 1 + 2 + 3
    totals = read_totals(store_of(shard.r, shard.schema))
    assert (totals.dead_now, totals.unaccounted) == (15, 0)


def test_reap_also_caps_the_dead_list(shard: Shard) -> None:
    token = new_token()
    shard.push("g", 4)
    ids = [b for b, _ in shard.claim("g", token, size=1, most=4).batches]
    shard.expire(*ids)
    assert shard.scripts.reap(shard.keys, 100, 1, 3) == (0, 4)
    assert len(shard.dead()) == 3
    stats = shard.stats()
    assert (stats["dead_events"], stats["dead_dropped"], stats["batches_reaped"]) == (4, 1, 4)
    assert read_totals(store_of(shard.r, shard.schema)).unaccounted == 0


def test_replay_requeues_with_attempts_reset_and_purge_deletes(shard: Shard) -> None:
    ids = []
    for size in (2, 3, 4):
        token = new_token()
        batch = shard.leased("g", size, token)
        assert shard.nack(batch, token, permanent=True).state == "dead"
        ids.append(batch)
    # one batch by id
    assert shard.scripts.replay(shard.keys, ids[1]) == (1, 3, 0)
    assert shard.scripts.replay(shard.keys, ids[1]) == (0, 0, 0)  # not dead any more
    assert shard.dead() == [ids[2], ids[0]]
    meta = shard.meta(ids[1])
    assert meta is not None
    assert (meta["a"], meta["t"]) == (0, "")
    assert "d" not in meta and "r" not in meta
    taken = shard.scripts.take_retries(shard.keys, new_token(), LEASE_MS, 10)
    assert [(b.batch_id, b.attempts, len(b.entries)) for b in taken] == [(ids[1], 0, 3)]
    totals = read_totals(store_of(shard.r, shard.schema))
    assert (totals.dead_now, totals.pending_events, totals.unaccounted) == (6, 3, 0)

    # the oldest dead batch is purged, its events counted
    assert shard.scripts.purge(shard.keys, 1) == (1, 2)
    assert shard.dead() == [ids[2]]
    assert shard.meta(ids[0]) is None
    assert not shard.r.hexists(shard.keys.payloads, ids[0])
    stats = shard.stats()
    assert (stats["replayed"], stats["purged"], stats["dead_events"]) == (3, 2, 9)
    assert read_totals(store_of(shard.r, shard.schema)).unaccounted == 0

    # replay everything left
    assert shard.scripts.replay(shard.keys) == (1, 4, 0)
    assert shard.dead() == []
    assert shard.scripts.purge(shard.keys) == (0, 0)
    totals = read_totals(store_of(shard.r, shard.schema))
    assert (totals.dead_now, totals.pending_events, totals.unaccounted) == (2, 7, 0)
