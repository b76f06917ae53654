"""Poison set aside, never spread: every kind of junk a script can meet in a shard, put into a
real Redis by hand.  The script moves it to the shard's quarantine (a record with the key, the
type found and the reason, counted in ``quarantined_records``), does the rest of its work as if
the record were absent, and fails nowhere half-way; the readers of ``status``, the sweeper and
the metrics show it instead of failing."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import redis

from collector.store import (
    Ack,
    AckMany,
    BackendRefused,
    Claim,
    Extend,
    Heartbeat,
    Nack,
    Purge,
    PurgeIds,
    QuarantineRecord,
    Reap,
    Release,
    Replay,
    RetryPolicy,
    ScriptCall,
    SetAside,
    Settle,
    ShardLease,
    TakeRetries,
    TakeTokens,
)
from reporter._monitoring.accounting import Totals, read_totals
from tests.support.lifecycle import LEASE_MS, MAX_AGE_MS, Shard, new_token
from tests.support.scriptcalls import store_of

POLICY = RetryPolicy(100, 1000, 3, 100)
# Junk of a type that is not the one the key must have.
JUNK: dict[str, tuple[str, Callable[[redis.Redis, str], Any]]] = {
    "list": ("string", lambda r, k: r.set(k, "junk")),
    "hash": ("list", lambda r, k: r.rpush(k, "junk")),
    "zset": ("string", lambda r, k: r.set(k, "junk")),
    "set": ("hash", lambda r, k: r.hset(k, "junk", "1")),
    "string": ("list", lambda r, k: r.rpush(k, "junk")),
}


@pytest.fixture
def shard(r: redis.Redis) -> Shard:
    return Shard(r, prefix="poison")


def records(shard: Shard) -> list[QuarantineRecord]:
    return shard.scripts.store.quarantined(shard.keys, 100)


def totals(shard: Shard) -> Totals:
    return read_totals(store_of(shard.r, shard.schema))


def spoil(shard: Shard, key: str, kind: str) -> str:
    """Replace ``key`` (which must be a ``kind``) with junk; the junk's type."""
    found, write = JUNK[kind]
    shard.r.delete(key)
    write(shard.r, key)
    return found


def set_aside(shard: Shard, key: str, found: str) -> QuarantineRecord:
    """The one record of ``key`` in the quarantine; the key holds no junk any more."""
    [record] = [q for q in records(shard) if q.key == key and not q.field]
    assert record.found == found and record.sample.startswith("junk")
    assert shard.r.type(key) != found.encode()
    return record


# -- a key of another type, for each key each script writes -----------------------------------

# (script, the key's name in ShardKeys, its type, what the call leaves if that key was junk)
Case = tuple[str, str, str]
CASES: list[Case] = [
    *[
        ("collect", k, t)
        for k, t in [
            ("queue", "list"),
            ("active", "set"),
            ("ring", "zset"),
            ("stats", "hash"),
            ("marker", "string"),
        ]
    ],
    *[
        ("claim", k, t)
        for k, t in [
            ("queue", "list"),
            ("active", "set"),
            ("ring", "zset"),
            ("inflight", "zset"),
            ("batches", "hash"),
            ("payloads", "hash"),
            ("stats", "hash"),
            ("dead", "list"),
        ]
    ],
    *[
        (s, k, t)
        for s in ("ack", "ack_many", "release", "extend", "nack", "settle")
        for k, t in [("inflight", "zset"), ("batches", "hash"), ("stats", "hash")]
    ],
    *[(s, "payloads", "hash") for s in ("ack", "ack_many", "nack", "settle")],
    *[(s, "retry", "zset") for s in ("release", "nack", "settle")],
    *[(s, "dead", "list") for s in ("nack", "settle")],
    *[
        ("reap", k, t)
        for k, t in [
            ("batches", "hash"),
            ("payloads", "hash"),
            ("retry", "zset"),
            ("dead", "list"),
            ("stats", "hash"),
        ]
    ],
    *[
        ("take_retries", k, t)
        for k, t in [
            ("retry", "zset"),
            ("inflight", "zset"),
            ("batches", "hash"),
            ("payloads", "hash"),
        ]
    ],
    *[
        (s, k, t)
        for s in ("replay", "purge", "purge_ids")
        for k, t in [("dead", "list"), ("batches", "hash"), ("payloads", "hash"), ("stats", "hash")]
    ],
    ("replay", "retry", "zset"),
    ("shard_lease", "owner", "string"),
    ("heartbeat", "reporters", "zset"),
    *[
        ("set_aside", k, t)
        for k, t in [
            ("ring", "zset"),
            ("active", "set"),
            ("retry", "zset"),
            ("marker", "string"),
            ("stats", "hash"),
            ("legacy_ring", "list"),
        ]
    ],
]


def key_of(shard: Shard, name: str) -> str:
    if name == "queue":
        return shard.keys.queue("g")
    if name == "reporters":
        return shard.schema.reporters
    return str(getattr(shard.keys, name))


Call = Callable[[], Any]


def _collect(shard: Shard) -> Call:
    return lambda: shard.push("g", 3)


def _claim(shard: Shard) -> Call:
    shard.scripts.collect(shard.keys, "g", 1000, 3600, [b"malformed", *shard.entries("g", 4)])
    return lambda: shard.scripts.store.call(
        Claim(shard.keys, "g", "c1", new_token(), 128, 4, LEASE_MS, MAX_AGE_MS, 0, 100)
    )


def _reap(shard: Shard) -> Call:
    shard.expire(shard.leased("g", 3, new_token()))
    return lambda: shard.scripts.store.call(Reap(shard.keys, 10, POLICY))


def _take_retries(shard: Shard) -> Call:
    token = new_token()
    batch = shard.leased("g", 3, token)
    shard.scripts.release(shard.keys, batch, token)  # waiting for a retry, due now
    return lambda: shard.scripts.store.call(TakeRetries(shard.keys, new_token(), LEASE_MS, 10))


def _dead_letter(shard: Shard) -> str:
    token = new_token()
    batch = shard.leased("g", 3, token)
    shard.nack(batch, token, permanent=True)
    return batch


def _held(shard: Shard, make: Callable[[str, str], ScriptCall[Any]]) -> Call:
    token = new_token()
    request = make(shard.leased("g", 3, token), token)
    return lambda: shard.scripts.store.call(request)


def _call(make: Callable[[Shard], ScriptCall[Any]]) -> Callable[[Shard], Call]:
    def prepare(shard: Shard) -> Call:
        request = make(shard)
        return lambda: shard.scripts.store.call(request)

    return prepare


def _on_held(make: Callable[[Shard, str, str], ScriptCall[Any]]) -> Callable[[Shard], Call]:
    return lambda shard: _held(shard, lambda batch, token: make(shard, batch, token))


# The shard as each script meets it on its usual path, and the call to make.
PREPARE: dict[str, Callable[[Shard], Call]] = {
    "collect": _collect,
    "claim": _claim,
    "reap": _reap,
    "take_retries": _take_retries,
    "replay": _call(lambda s: (_dead_letter(s), Replay(s.keys))[1]),
    "purge": _call(lambda s: (_dead_letter(s), Purge(s.keys))[1]),
    "purge_ids": _call(lambda s: PurgeIds(s.keys, [_dead_letter(s)])),
    "shard_lease": _call(lambda s: ShardLease(s.keys, "rep-1", 60_000)),
    "heartbeat": _call(lambda s: Heartbeat(s.schema.reporters, "rep-1", 60_000)),
    "set_aside": _call(lambda s: SetAside(s.keys)),
    "ack": _on_held(lambda s, b, t: Ack(s.keys, b, t)),
    "ack_many": _on_held(lambda s, b, t: AckMany(s.keys, t, ((b, 0),))),
    "release": _on_held(lambda s, b, t: Release(s.keys, b, t)),
    "extend": _on_held(lambda s, b, t: Extend(s.keys, b, t, LEASE_MS)),
    "nack": _on_held(lambda s, b, t: Nack(s.keys, b, t, POLICY, 0.5, True, 0, "HTTP 400")),
    "settle": _on_held(lambda s, b, t: Settle(s.keys, b, t, POLICY, 0.5, 0, [0], [(1, "x")])),
}


@pytest.mark.parametrize(("script", "name", "kind"), CASES, ids=[f"{s}-{k}" for s, k, _ in CASES])
def test_a_key_of_another_type_is_set_aside_and_the_script_goes_on(
    shard: Shard, script: str, name: str, kind: str
) -> None:
    call = PREPARE[script](shard)
    key = key_of(shard, name)
    found = spoil(shard, key, kind)

    call()  # no error

    record = set_aside(shard, key, found)
    assert record.script == script and record.reason == f"a {found} where a {kind} belongs"
    assert shard.stats()["quarantined_records"] == len(records(shard)) >= 1
    assert shard.r.type(shard.keys.quarantine) == b"list"


def test_the_quarantine_list_itself_of_another_type_is_set_aside_first(shard: Shard) -> None:
    spoil(shard, shard.keys.quarantine, "list")
    spoil(shard, shard.keys.queue("g"), "list")
    shard.push("g", 2)
    assert {(q.key, q.found) for q in records(shard)} == {
        (shard.keys.quarantine, "string"),
        (shard.keys.queue("g"), "string"),
    }
    assert shard.r.llen(shard.keys.queue("g")) == 2


def test_the_quarantine_is_capped(shard: Shard) -> None:
    from collector.store import QUARANTINE_KEEP

    shard.r.rpush(shard.keys.quarantine, *([b"{}"] * QUARANTINE_KEEP))
    spoil(shard, shard.keys.queue("g"), "list")
    shard.push("g", 1)
    assert shard.r.llen(shard.keys.quarantine) == QUARANTINE_KEEP
    assert records(shard)[0].key == shard.keys.queue("g")  # the newest first


def test_the_lua_and_python_caps_agree() -> None:
    from collector.store import QUARANTINE_KEEP, script_text

    assert f"local QUARANTINE_KEEP = {QUARANTINE_KEEP}\n" in script_text("ack")


# -- records that do not decode ------------------------------------------------------------

BAD_META = {
    "not json": b"{not json",
    "not an object": b"[1, 2]",
    "no size": json.dumps({"g": "g", "t": "", "a": 0}).encode(),
    "size a string": json.dumps({"g": "g", "t": "", "a": 0, "n": "3"}).encode(),
}


def spoil_meta(shard: Shard, batch: str, raw: bytes) -> None:
    shard.r.hset(shard.keys.batches, batch, raw)


@pytest.mark.parametrize("bad", sorted(BAD_META))
@pytest.mark.parametrize("script", ["ack", "ack_many", "nack", "settle", "release", "extend"])
def test_a_held_batch_whose_metadata_cannot_be_used_is_set_aside(
    shard: Shard, script: str, bad: str
) -> None:
    token = new_token()
    batch = shard.leased("g", 3, token)
    other = shard.leased("g", 2, token)
    spoil_meta(shard, batch, BAD_META[bad])
    store, keys = shard.scripts.store, shard.keys
    requests: dict[str, ScriptCall[Any]] = {
        "ack": Ack(keys, batch, token),
        "ack_many": AckMany(keys, token, ((batch, 0),)),
        "release": Release(keys, batch, token),
        "extend": Extend(keys, batch, token, LEASE_MS),
        "nack": Nack(keys, batch, token, POLICY, 0.5, False, 0, "HTTP 503"),
        "settle": Settle(keys, batch, token, POLICY, 0.5, 0, [0]),
    }
    result = store.call(requests[script])
    assert (
        result in (-1, 0, False, [-1])
        or getattr(result, "state", "") == "lost"
        or (getattr(result, "delivered", 0) == -1)
    )
    [record] = records(shard)
    assert (record.key, record.field, record.events) == (keys.batches, batch, 3)
    assert shard.meta(batch) is None and batch not in shard.inflight()
    stats = shard.stats()
    assert (stats["quarantined_records"], stats["quarantined_events"]) == (1, 3)
    assert store.call(Ack(keys, other, token)) == 2  # its neighbour goes on
    assert totals(shard).unaccounted == 0


@pytest.mark.parametrize("bad", sorted(BAD_META))
def test_a_lease_acked_in_one_call_sets_aside_the_batch_it_cannot_use_and_acks_the_rest(
    shard: Shard, bad: str
) -> None:
    token = new_token()
    first, batch, last = (
        shard.leased(game, n, token) for game, n in (("g", 2), ("h", 3), ("i", 4))
    )
    spoil_meta(shard, batch, BAD_META[bad])
    keys = shard.keys
    request = AckMany(keys, token, ((first, 0), (batch, 0), (last, 1)))
    assert shard.scripts.store.call(request) == [2, -1, 3]
    [record] = records(shard)
    assert (record.key, record.field, record.events) == (keys.batches, batch, 3)
    assert shard.inflight() == {} and shard.meta(first) is None and shard.meta(last) is None
    stats = shard.stats()
    assert (stats["delivered"], stats["stale"], stats["batches_delivered"]) == (5, 1, 2)
    assert (stats["quarantined_records"], stats["quarantined_events"]) == (1, 3)
    assert totals(shard).unaccounted == 0


def test_a_lease_acked_in_one_call_refuses_counts_beyond_a_batch_before_writing(
    shard: Shard,
) -> None:
    token = new_token()
    first, second = (shard.leased(game, 2, token) for game in ("g", "h"))
    spoil_meta(shard, first, b"{not json")  # would be set aside, were the call not refused
    before = shard.snapshot()
    with pytest.raises(BackendRefused, match="exceed the batch size"):
        shard.scripts.store.call(AckMany(shard.keys, token, ((first, 0), (second, 3))))
    assert shard.snapshot() == before


def test_due_retries_with_unreadable_metadata_are_set_aside_and_the_rest_taken(
    shard: Shard,
) -> None:
    """Case (b) of the issue: take_retries failed in cjson.decode before its ZREM, on every
    sweep."""
    token = new_token()
    batches = [shard.leased("g", 2, token) for _ in range(3)]
    for batch in batches:
        shard.nack(batch, token)
    shard.make_due(*batches)
    spoil_meta(shard, batches[0], b"\xff not json")
    shard.r.hdel(shard.keys.payloads, batches[1])  # metadata fine, payload gone
    taken = shard.scripts.take_retries(shard.keys, new_token(), LEASE_MS, 10)
    assert [b.batch_id for b in taken] == [batches[2]]
    assert {(q.field, q.reason, q.events) for q in records(shard)} == {
        (batches[0], "metadata that is not JSON", 2),
        (batches[1], "a batch without its payload", 2),
    }
    assert shard.retry() == {}
    assert shard.stats()["quarantined_events"] == 4
    assert totals(shard).unaccounted == 0


def test_expired_leases_with_unreadable_metadata_are_set_aside_and_the_rest_reaped(
    shard: Shard,
) -> None:
    token = new_token()
    bad, good = shard.leased("g", 2, token), shard.leased("g", 3, token)
    spoil_meta(shard, bad, BAD_META["no size"])
    shard.expire(bad, good)
    assert shard.scripts.reap(shard.keys, 10, 5, 100) == (1, 0)
    assert list(shard.retry()) == [good] and [q.field for q in records(shard)] == [bad]


@pytest.mark.parametrize("script", ["replay", "purge", "purge_ids", "trim"])
def test_dead_letters_with_unreadable_metadata_are_set_aside(shard: Shard, script: str) -> None:
    token = new_token()
    bad, good = shard.leased("g", 2, token), shard.leased("g", 3, token)
    shard.nack(bad, token, permanent=True)
    shard.nack(good, token, permanent=True)
    spoil_meta(shard, bad, BAD_META["not json"])
    keys, store = shard.keys, shard.scripts.store
    if script == "replay":
        assert store.call(Replay(keys)) == (1, 3, 0)
    elif script == "purge":
        assert store.call(Purge(keys)) == (2, 3)
    elif script == "purge_ids":
        assert store.call(PurgeIds(keys, [bad, good])) == (1, 3)
    else:  # the dead list's cap pushes the oldest (bad) out
        other = shard.leased("g", 1, token)
        assert shard.nack(other, token, permanent=True, dead_max=2).state == "dead"
        assert "dead_dropped" not in shard.stats()
    assert [(q.field, q.events) for q in records(shard)] == [(bad, 2)]
    assert shard.meta(bad) is None and bad not in shard.dead()
    stats = shard.stats()
    assert "quarantined_events" not in stats  # a dead letter's events are dead_events already
    assert totals(shard).unaccounted == 0


def test_a_counter_that_is_not_an_integer_is_set_aside_and_counting_goes_on(shard: Shard) -> None:
    token = new_token()
    batch = shard.leased("g", 4, token)
    shard.r.hset(shard.keys.stats, "delivered", "lots")
    assert shard.scripts.ack(shard.keys, batch, token) == 4
    [record] = records(shard)
    assert (record.key, record.field, record.sample) == (shard.keys.stats, "delivered", "lots")
    assert shard.stats()["delivered"] == 4


def test_a_wrong_type_stats_hash_stores_each_event_once(shard: Shard) -> None:
    """Case (c) of the issue: collect.lua pushed the events, then failed at HINCRBY; the SDK
    sent them again (5 events became 125 entries)."""
    shard.r.rpush(shard.keys.stats, "junk")
    for _ in range(5):  # as an SDK that sends its write again until it is answered
        shard.push("g", 1)
    assert shard.r.llen(shard.keys.queue("g")) == 5
    assert shard.stats()["stored"] == 5
    set_aside(shard, shard.keys.stats, "list")


def test_a_ring_set_aside_is_built_again_from_the_registered_games(shard: Shard) -> None:
    shard.push("a", 1)
    shard.push("b", 1)
    spoil(shard, shard.keys.ring, "zset")
    shard.push("c", 1)  # collect sets the ring aside, rebuilds it
    assert shard.r.zrange(shard.keys.ring, 0, -1) == [b"a", b"b", b"c"]


def test_a_limiter_bucket_of_another_type_is_set_aside_in_its_own_quarantine(shard: Shard) -> None:
    key = shard.schema.limiter("sink")
    shard.r.rpush(key, "junk")
    tokens = shard.scripts.store.call(TakeTokens(key, 10.0, 5, 2, now_us=1_000_000))
    assert tokens.granted == 2
    quarantine = key.replace(":bucket", ":quarantine")
    [raw] = shard.r.lrange(quarantine, 0, -1)
    assert json.loads(raw)["k"] == key
    assert shard.r.hget(key.replace(":bucket", ":stats"), "quarantined_records") == b"1"


def test_junk_limiter_fields_read_as_absent(shard: Shard) -> None:
    key = shard.schema.limiter("sink")
    shard.r.hset(key, mapping={"tokens": "nan", "at": "inf", "paused_until": "x"})
    tokens = shard.scripts.store.call(TakeTokens(key, 10.0, 5, 2, now_us=1_000_000))
    assert tokens.granted == 2


# -- the store's readers -------------------------------------------------------------------


def test_the_readers_show_junk_instead_of_failing(shard: Shard) -> None:
    """What status, the sweeper and the metrics read, with junk in every key of a shard."""
    store, keys = store_of(shard.r, shard.schema), shard.keys
    token = new_token()
    batch = shard.leased("g", 3, token)
    shard.nack(batch, token, permanent=True)
    spoil_meta(shard, batch, b"not json")
    pending = shard.leased("h", 2, token)
    spoil_meta(shard, pending, b"[]")
    shard.r.set(keys.queue("h"), "junk")
    shard.r.zadd(keys.ring, {b"\xff\xfe": 0, "h": 0})
    shard.r.hset(keys.stats, "stored", "lots")
    shard.r.rpush(keys.owner, "junk")
    shard.r.set(store.schema.alerts, "junk")

    view = store.read_shard(keys)
    assert f"{keys.owner} is a list" in view.problems
    assert any("not a game name" in p for p in view.problems)
    assert any(pending in p for p in view.problems)
    assert view.counters["stored"] == 0
    [dead] = store.dead_batches(10)
    assert (dead.batch_id, dead.game, dead.reason) == (batch, "?", "metadata that cannot be used")
    detail = store.batch(keys, batch)
    assert detail is not None and detail.reason.startswith("metadata that cannot be used")
    assert store.alerts() == []
    assert store.shard_owners() == [""]
    assert [s.game for s in store.game_states(keys, ["h"])] == ["h"]
    [levels] = store.shard_levels([keys], 0)
    assert [(g.game, g.length) for g in levels.games] == [("h", 0)]  # g's buffer was claimed
    assert store.counter_totals()["stored"] == 0

    ring = store.ring(keys, "", 100)  # the sweeper's read has the junk member set aside
    assert ring.games == ["h"] and ring.junk == []
    assert shard.r.zrange(keys.ring, 0, -1) == [b"h"]
    assert [(q.key, q.field, q.script) for q in records(shard)] == [
        (keys.ring, "\\xff\\xfe", "set_aside")
    ]
