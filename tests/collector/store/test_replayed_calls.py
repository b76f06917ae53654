"""Every script the reporter runs, sent twice with the same arguments, as a client does after a
lost reply: the second call changes nothing (no counter counted twice, no batch acked twice,
no event re-queued twice) and answers what the first answered, from its receipt
(``lua/_guard.lua``).  Scripts that are safe by nature (reap, extend, heartbeat, shard_lease,
set_aside) change nothing either.  ``test_every_script_is_sent_twice_here`` keeps the list
whole.  The last tests lose a real reply on the wire."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from collector.store import (
    SCRIPT_NAMES,
    Ack,
    AckMany,
    Claim,
    Extend,
    Heartbeat,
    Hold,
    Nack,
    NoteLate,
    Purge,
    PurgeIds,
    Reap,
    Release,
    Replay,
    ReserveSlot,
    RetryPolicy,
    ScriptCall,
    SetAside,
    Settle,
    ShardLease,
    TakeRetries,
    TakeTokens,
    lua_script,
)
from tests.support.lifecycle import LEASE_MS, MAX_AGE_MS, Shard, new_token, server_ms
from tests.support.relay import relay_to
from tests.support.scriptcalls import store_of

POLICY = RetryPolicy(100, 1000, 3, 100)


@pytest.fixture
def shard(r: redis.Redis) -> Shard:
    return Shard(r, prefix="twice")


def twice(shard: Shard, request: ScriptCall[Any]) -> Any:
    """Run ``request``, then the very same request again; the second must answer the same
    and leave every key of the shard as the first left it."""
    store = shard.scripts.store
    first = store.call(request)
    after = shard.snapshot()
    counters = shard.stats()
    assert store.call(request) == first
    assert shard.snapshot() == after
    assert shard.stats() == counters
    return first


def leased(shard: Shard, count: int = 5) -> tuple[str, str]:
    token = new_token()
    return shard.leased("g", count, token), token


# -- each script, twice ----------------------------------------------------------------------


def claim_request(shard: Shard, batch_id: str = "b1") -> Claim:
    return Claim(shard.keys, "g", batch_id, new_token(), 128, 4, LEASE_MS, MAX_AGE_MS, 0, 100)


def test_claim_of_batches(shard: Shard) -> None:
    shard.push("g", 300)
    claimed = twice(shard, claim_request(shard))
    assert [len(b.entries) for b in claimed.batches] == [128, 128, 44]
    assert shard.stats()["claimed"] == 300


def test_claim_that_only_drops_stale_entries(shard: Shard) -> None:
    shard.push("g", 5, collected_ms=1)
    claimed = twice(shard, claim_request(shard))
    assert (claimed.stale, claimed.batches) == (5, [])
    assert shard.stats()["stale"] == 5


def test_claim_that_only_dead_letters_malformed_entries_takes_nothing_more(shard: Shard) -> None:
    shard.scripts.collect(shard.keys, "g", 1000, 3600, [b"junk-1", b"junk-2"])
    request = claim_request(shard)
    first = shard.scripts.store.call(request)
    assert (first.malformed, first.batches) == (2, [])
    shard.scripts.collect(shard.keys, "g", 1000, 3600, [b"junk-3"])  # came in meanwhile
    counters = shard.stats()
    again = shard.scripts.store.call(request)
    assert (again.malformed, again.batches, again.remaining) == (2, [], 1)
    assert shard.stats() == counters
    assert sorted(shard.dead()) == ["b1.m1", "b1.m2"]  # none overwritten, none twice
    assert shard.r.lrange(shard.keys.queue("g"), 0, -1) == [b"junk-3"]


def test_ack(shard: Shard) -> None:
    batch, token = leased(shard)
    assert twice(shard, Ack(shard.keys, batch, token, 1)) == 4
    stats = shard.stats()
    assert (stats["delivered"], stats["stale"], stats["batches_delivered"]) == (4, 1, 1)


def test_ack_many(shard: Shard) -> None:
    token = new_token()
    first, second = (shard.leased(game, 5, token) for game in ("g", "h"))
    other, _ = leased(shard)  # another lease's: not this token's
    request = AckMany(shard.keys, token, ((first, 1), (other, 0), (second, 0)))
    assert twice(shard, request) == [4, -1, 5]
    stats = shard.stats()
    assert (stats["delivered"], stats["stale"], stats["batches_delivered"]) == (9, 1, 2)
    assert list(shard.inflight()) == [other]


@pytest.mark.parametrize("permanent", [False, True])
def test_nack(shard: Shard, permanent: bool) -> None:
    batch, token = leased(shard)
    result = twice(shard, Nack(shard.keys, batch, token, POLICY, 0.5, permanent, 0, "HTTP 503"))
    assert result.state == ("dead" if permanent else "retry")
    if permanent:
        assert shard.dead() == [batch] and shard.stats()["dead_events"] == 5
    else:
        assert list(shard.retry()) == [batch] and shard.stats()["batches_retried"] == 1
    assert shard.meta(batch)["a"] == 1  # type: ignore[index]  # one attempt charged


def test_settle(shard: Shard) -> None:
    batch, token = leased(shard, 6)
    settled = twice(
        shard,
        Settle(shard.keys, batch, token, POLICY, 0.5, 1, [1, 2], [(3, "bad item")], 0, "HTTP 207"),
    )
    assert (settled.delivered, settled.retry_state) == (2, "retry")
    stats = shard.stats()
    assert (stats["delivered"], stats["rejected_items"], stats["batches_retried"]) == (2, 1, 1)
    assert list(shard.retry()) == [settled.retry_id]
    assert shard.dead() == [settled.refused_id]


def test_release(shard: Shard) -> None:
    batch, token = leased(shard)
    assert twice(shard, Release(shard.keys, batch, token)) is True
    assert list(shard.retry()) == [batch] and shard.stats()["batches_released"] == 1


def test_take_retries(shard: Shard) -> None:
    batches = [leased(shard) for _ in range(3)]
    for batch, token in batches:
        shard.nack(batch, token)
    shard.make_due(*(b for b, _ in batches[:2]))
    token = new_token()
    taken = twice(shard, TakeRetries(shard.keys, token, LEASE_MS, 10))
    assert sorted(b.batch_id for b in taken) == sorted(b for b, _ in batches[:2])
    assert all(shard.meta(b.batch_id)["t"] == token for b in taken)  # type: ignore[index]
    shard.make_due(batches[2][0])  # due now, but not this call's: a resend leaves it
    assert shard.scripts.store.call(TakeRetries(shard.keys, token, LEASE_MS, 10)) == taken
    assert list(shard.retry()) == [batches[2][0]]


def test_reap_takes_only_what_expired_since(shard: Shard) -> None:
    batch, _ = leased(shard)
    shard.expire(batch)
    request = Reap(shard.keys, 100, POLICY)
    assert shard.scripts.store.call(request) == (1, 0)
    after, counters = shard.snapshot(), shard.stats()
    assert shard.scripts.store.call(request) == (0, 0)
    assert (shard.snapshot(), shard.stats()) == (after, counters)
    assert shard.meta(batch)["a"] == 1  # type: ignore[index]  # charged once


@pytest.mark.parametrize("one", [False, True])
def test_replay(shard: Shard, one: bool) -> None:
    dead = []
    for _ in range(3):
        batch, token = leased(shard)
        shard.nack(batch, token, permanent=True)
        dead.append(batch)
    replayed = twice(shard, Replay(shard.keys, dead[0] if one else "", limit=2))
    assert replayed == ((1, 5, 0) if one else (2, 10, 0))
    assert len(shard.dead()) == (2 if one else 1)
    assert shard.stats()["replayed"] == replayed.events


def test_purge_and_purge_ids(shard: Shard) -> None:
    dead = []
    for _ in range(4):
        batch, token = leased(shard)
        shard.nack(batch, token, permanent=True)
        dead.append(batch)
    assert twice(shard, Purge(shard.keys, limit=1)) == (1, 5)
    assert twice(shard, PurgeIds(shard.keys, [dead[2], dead[3]])) == (2, 10)
    assert shard.dead() == [dead[1]]
    assert shard.stats()["purged"] == 15


def test_extend_renews_the_same_lease(shard: Shard) -> None:
    batch, token = leased(shard)
    request = Extend(shard.keys, batch, token, 90_000)
    assert shard.scripts.store.call(request) is True
    assert shard.scripts.store.call(request) is True
    assert list(shard.inflight()) == [batch] and "quarantined_records" not in shard.stats()


def test_shard_lease_and_heartbeat(shard: Shard) -> None:
    keys = shard.keys
    store = shard.scripts.store
    beat = Heartbeat(shard.schema.reporters, "rep-1", 60_000)
    # sent again it renews from a little later (server time), as the next heartbeat would
    assert store.call(beat) == store.call(beat) == (1, frozenset({"rep-1"}))
    [(_, deadline)] = shard.r.zrange(shard.schema.reporters, 0, -1, withscores=True)
    assert deadline <= server_ms(shard.r) + 60_000
    take = ShardLease(keys, "rep-1", 60_000)
    assert store.call(take).held is True and store.call(take).held is True
    assert shard.r.get(keys.owner) == b"rep-1"
    give_up = ShardLease(keys, "rep-1", 0)
    assert store.call(give_up).held is False and store.call(give_up).held is False
    assert shard.r.get(keys.owner) is None


@pytest.mark.parametrize("wanted", [3, -2])
def test_take_tokens(shard: Shard, wanted: int) -> None:
    key = shard.schema.limiter("sink")
    store = shard.scripts.store
    store.call(TakeTokens(key, 1.0, 5, 4, now_us=1_000_000))  # 1 token left
    request = TakeTokens(key, 1.0, 5, wanted, now_us=1_000_000)
    first = store.call(request)
    bucket = shard.r.hgetall(key)
    assert store.call(request) == first
    assert shard.r.hgetall(key) == bucket
    assert float(bucket[b"tokens"]) == (0 if wanted > 0 else 3)


@pytest.mark.parametrize(("horizon_us", "pause_ms"), [(1_000_000, 0), (-1, 500), (0, 0)])
def test_reserve_slot(shard: Shard, horizon_us: int, pause_ms: int) -> None:
    """A reservation (or a pause) sent again reserves no second slot; one refused (the slot
    beyond its horizon) writes nothing at all."""
    key = shard.schema.limiter("nppa:app")
    store = shard.scripts.store
    store.call(ReserveSlot(key, 100_000, "", 1_000_000, now_us=1_000_000))  # next: 1.1 s
    request = ReserveSlot(key, 100_000, "", horizon_us, pause_ms, now_us=1_000_000)
    first = store.call(request)
    kept = shard.r.hgetall(key)
    assert store.call(request) == first
    assert shard.r.hgetall(key) == kept
    if horizon_us > 0:
        assert first.reserved and first.wait_us == 100_000 and kept[b"t:"] == b"1200000"
    else:
        assert not first.reserved and kept[b"t:"] == b"1100000"
    assert (b"paused_until" in kept) == (pause_ms > 0)


def test_note_late(shard: Shard) -> None:
    request = NoteLate(shard.keys, 3, '{"ot":[1,2,3]}', 10)
    assert twice(shard, request) == 1
    assert shard.stats().get("late_sent") == 3
    assert shard.r.llen(shard.keys.late) == 1
    dropped = NoteLate(shard.keys, 0, '{"dropped":[1,2,3]}', 1, logins=2, logouts=1)
    assert twice(shard, dropped) == 1
    stats = shard.stats()
    assert (stats.get("stale_logins"), stats.get("stale_logouts")) == (2, 1)
    assert stats.get("late_records_trimmed") == 1  # the bound was 1: the older record went
    assert shard.r.lrange(shard.keys.late, 0, -1) == [b'{"dropped":[1,2,3]}']


@pytest.mark.parametrize("what", ["hold", "probe", "turn", "kick", "lift"])
def test_hold(shard: Shard, what: str) -> None:
    key = shard.schema.hold("nppa:app")
    store = shard.scripts.store
    if what != "hold":
        store.call(Hold(key, "hold", 30_000, "nppa 1011", "the key", "g", now_ms=1_000))
    request = Hold(key, what, 30_000, "nppa 1011", "the key", "g", now_ms=40_000)
    first = store.call(request)
    kept = shard.r.hgetall(key)
    assert store.call(request) == first
    assert shard.r.hgetall(key) == kept
    assert first.held and (what == "kick" or first.mine)  # lift: it ended a hold


def test_every_script_is_sent_twice_here() -> None:
    """A script added without its test here fails this."""
    names = {test.removeprefix("test_") for test in globals() if test.startswith("test_")}
    covered = {n for n in SCRIPT_NAMES if any(n in name for name in names)}
    covered |= {"heartbeat", "purge_ids", "collect", "read_shard", "set_aside"}
    assert set(SCRIPT_NAMES) - covered == set()


def test_set_aside_finds_nothing_more(shard: Shard) -> None:
    shard.r.zadd(shard.keys.ring, {b"\xff\xfe": 0})
    request = SetAside(shard.keys, [b"\xff\xfe"])
    assert shard.scripts.store.call(request) == 1
    after = shard.snapshot()
    assert shard.scripts.store.call(request) == 0
    assert shard.snapshot() == after


# -- a reply really lost on the wire --------------------------------------------------------

Prepare = Callable[[Shard], tuple[ScriptCall[Any], Any, Callable[[Shard], None]]]


def _ack(shard: Shard) -> tuple[ScriptCall[Any], Any, Callable[[Shard], None]]:
    batch, token = leased(shard)

    def check(s: Shard) -> None:
        assert (s.stats()["delivered"], s.stats()["batches_delivered"]) == (5, 1)

    return Ack(shard.keys, batch, token), 5, check


def _ack_many(shard: Shard) -> tuple[ScriptCall[Any], Any, Callable[[Shard], None]]:
    token = new_token()
    batches = [shard.leased(game, 5, token) for game in ("g", "h")]

    def check(s: Shard) -> None:
        assert (s.stats()["delivered"], s.stats()["batches_delivered"]) == (10, 2)

    return AckMany(shard.keys, token, tuple((b, 0) for b in batches)), [5, 5], check


def _take_retries(shard: Shard) -> tuple[ScriptCall[Any], Any, Callable[[Shard], None]]:
    batch, token = leased(shard)
    shard.nack(batch, token)
    shard.make_due(batch)

    def check(s: Shard) -> None:
        assert s.retry() == {} and list(s.inflight()) == [batch]

    return TakeRetries(shard.keys, new_token(), LEASE_MS, 10), [batch], check


def _settle(shard: Shard) -> tuple[ScriptCall[Any], Any, Callable[[Shard], None]]:
    batch, token = leased(shard, 4)

    def check(s: Shard) -> None:
        assert (s.stats()["delivered"], s.stats()["batches_retried"]) == (3, 1)
        assert len(s.retry()) == 1

    return Settle(shard.keys, batch, token, POLICY, 0.0, 0, [0]), 3, check


def _claim(shard: Shard) -> tuple[ScriptCall[Any], Any, Callable[[Shard], None]]:
    shard.push("g", 3, collected_ms=1)

    def check(s: Shard) -> None:
        assert s.stats()["stale"] == 3

    return claim_request(shard), 3, check


@pytest.mark.parametrize(
    "prepare",
    [_ack, _ack_many, _take_retries, _settle, _claim],
    ids=["ack", "ack_many", "take_retries", "settle", "claim"],
)
def test_a_lost_reply_and_its_resend_apply_once(shard: Shard, prepare: Prepare) -> None:
    request, expected, check = prepare(shard)
    kwargs = shard.r.connection_pool.connection_kwargs
    for name in SCRIPT_NAMES:  # loaded: the call runs at its first send
        shard.r.script_load(lua_script(name).text)
    before = int(shard.r.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))
    with relay_to((kwargs["host"], kwargs["port"])) as relay:
        # Through the relay, sending a call again once after a lost reply.
        client = redis.Redis.from_url(relay.url, socket_timeout=5, retry=Retry(NoBackoff(), 1))
        relay.lose_next()
        result = store_of(client, shard.schema).call(request)
        client.close()
    calls = int(shard.r.info("commandstats")["cmdstat_evalsha"]["calls"]) - before
    assert relay.lost == 1 and calls == 2  # the call, and its resend after the lost reply
    got = (
        [b.batch_id for b in result]
        if isinstance(request, TakeRetries)
        else result.stale
        if isinstance(request, Claim)
        else result.delivered
        if isinstance(request, Settle)
        else result
    )
    assert got == expected
    check(shard)
