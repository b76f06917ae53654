"""Every script finishes or changes nothing, fast, whatever it reads.

Each Lua script runs here against a table of corruptions of each key it reads, written into a
real server by hand: a key of another type, a number that is not finite (``1e999``, which
cjson reads as infinity, ``nan``), a negative or huge one, a time far in the future, a field
missing, a list or payload far longer than any script makes.  For each case:

- the call is refused, and then nothing changed: every key's ``DUMP`` (and whether it
  expires) is the same before and after;
- or it succeeds, and the corrupted record is in the quarantine (``set aside``) or was
  harmless (``ok``: no record), and the shard's accounting is whole (every stored event in
  exactly one state: nothing half moved);
- and the server's own ``SLOWLOG`` logged no call of the script slower than ``SLOW_US``
  (the loops run to constants, never to a stored value).  The server measures each call
  itself: no timing on this side.

The SDK's write (``collect``, with ``lua/_written_once.lua``) is covered too: a remembered
range of 300,000 writes once made it loop over the whole range (0.4 s here; two million
stalled Redis for 5 s); its rewrite sets such a record aside.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import pytest
import redis

from collector.store import (
    SCRIPT_NAMES,
    Ack,
    AckMany,
    BackendError,
    Claim,
    Collect,
    Extend,
    Heartbeat,
    Hold,
    HoldOp,
    Nack,
    NoteLate,
    Purge,
    PurgeIds,
    ReadShard,
    Reap,
    Release,
    Replay,
    ReserveSlot,
    RetryPolicy,
    SetAside,
    Settle,
    ShardLease,
    TakeRetries,
    TakeTokens,
)
from collector.store._keys import receipt_key, sibling
from reporter._monitoring.accounting import read_totals
from tests.support.fixtures import BINARIES
from tests.support.lifecycle import LEASE_MS, MAX_AGE_MS, Shard, new_token, server_ms
from tests.support.scriptcalls import store_of
from tests.support.servers import Server

# A call the server logs slower than this fails its case.  These calls take 0.02 to 2 ms;
# the faults this guards against took from 100 ms to seconds (a loop over a stored range).
SLOW_US = 20_000
FAR_MS = 9_000_000_000_000_000 // 1000 * 1000  # a time near 2^53 ms: year 287,000
FAR_US = 7_200_000_000_000_000  # year 2198, in microseconds
POLICY = RetryPolicy(100, 1000, 3, 100)


@pytest.fixture(scope="module", params=sorted(BINARIES))
def server(request: pytest.FixtureRequest) -> Iterator[Server]:
    """A server of each kind, private to this module: its slow log is this test's."""
    srv = Server(BINARIES[request.param]).start()
    client = srv.client()
    client.config_set("slowlog-log-slower-than", SLOW_US)
    client.close()
    yield srv
    srv.cleanup()


@pytest.fixture
def r(server: Server) -> Iterator[redis.Redis]:
    client = server.client()
    client.flushall()
    yield client
    client.close()


# -- the keyspace, whole -----------------------------------------------------------------------


def keyspace(r: redis.Redis) -> dict[Any, tuple[bytes | None, bool]]:
    """Every key: its DUMP, and whether it expires."""
    keys: list[Any] = sorted(r.keys("*"))
    with r.pipeline(transaction=False) as pipe:
        for key in keys:
            pipe.dump(key)
            pipe.pttl(key)
        replies = pipe.execute()
    return {key: (replies[2 * i], replies[2 * i + 1] >= 0) for i, key in enumerate(keys)}


def slow_calls(r: redis.Redis) -> list[dict[str, Any]]:
    return [
        e
        for e in r.slowlog_get(128)
        if str(e["command"][:4] if isinstance(e["command"], str) else e["command"][:4].decode())
        .upper()
        .startswith("EVAL")
    ]


# -- scenes: a shard as each script meets it, and the call ------------------------------------


@dataclass
class Scene:
    shard: Shard
    call: Callable[[], Any] = lambda: None
    batch: str = ""  # the batch the call is about (or one of those it meets)
    token: str = ""
    receipt: str = ""  # the receipt key the call reads first, if any
    quarantine: str = ""  # where its records go (a shard's, or a limiter's or hold's own)
    accounted: bool = True  # the shard's accounting must be whole after the call
    main: str = ""  # a limiter's or hold's own hash

    @property
    def keys(self) -> Any:
        return self.shard.keys

    @property
    def store(self) -> Any:
        return self.shard.scripts.store


def _held(shard: Shard, make: Callable[[Scene], Any]) -> Scene:
    token = new_token()
    scene = Scene(shard, token=token, batch=shard.leased("g", 3, token))
    shard.leased("g", 2, token)  # a neighbour, in flight too
    request = make(scene)
    scene.call = lambda: scene.store.call(request)
    return scene


def _dead_letters(shard: Shard, count: int = 3) -> Scene:
    token = new_token()
    batches = [shard.leased("g", 2, token) for _ in range(count)]
    for batch in batches:
        shard.nack(batch, token, permanent=True)
    return Scene(shard, token=token, batch=batches[0])


def scene_collect(shard: Shard) -> Scene:
    shard.push("g", 2)
    request = Collect(shard.keys, "g", shard.entries("g", 3), 1000, 3600, writer="w", seq=2, low=2)
    return Scene(shard, call=lambda: shard.scripts.store.call(request))


def scene_claim(shard: Shard) -> Scene:
    shard.push("g", 2)
    shard.scripts.collect(shard.keys, "g", 1000, 3600, [b"malformed"])  # a dead letter of its own
    shard.push("g", 2)
    token = new_token()
    request = Claim(shard.keys, "g", "c1", token, 128, 4, LEASE_MS, MAX_AGE_MS, 0, 0)
    return Scene(
        shard,
        call=lambda: shard.scripts.store.call(request),
        token=token,
        receipt=shard.keys.receipt(token),
    )


def scene_reap(shard: Shard) -> Scene:
    token = new_token()
    batch = shard.leased("g", 3, token)
    other = shard.leased("g", 2, token)
    shard.expire(batch, other)
    shard.leased("g", 1, token)  # one not expired
    return Scene(
        shard, call=lambda: shard.scripts.store.call(Reap(shard.keys, 10, POLICY)), batch=batch
    )


def scene_take_retries(shard: Shard) -> Scene:
    token = new_token()
    batches = [shard.leased("g", 2, token) for _ in range(3)]
    for batch in batches:
        shard.nack(batch, token)
    shard.make_due(*batches)
    taker = new_token()
    request = TakeRetries(shard.keys, taker, LEASE_MS, 10)
    return Scene(
        shard,
        call=lambda: shard.scripts.store.call(request),
        batch=batches[0],
        receipt=shard.keys.receipt(taker),
    )


def scene_replay(shard: Shard) -> Scene:
    scene = _dead_letters(shard)
    request = Replay(shard.keys, "", 50, 1 << 20, 4)
    scene.call = lambda: scene.store.call(request)
    scene.receipt = shard.keys.receipt(request.call)
    return scene


def scene_purge(shard: Shard) -> Scene:
    scene = _dead_letters(shard)
    request = Purge(shard.keys, 50)
    scene.call = lambda: scene.store.call(request)
    scene.receipt = shard.keys.receipt(request.call)
    return scene


def scene_purge_ids(shard: Shard) -> Scene:
    scene = _dead_letters(shard)
    request = PurgeIds(shard.keys, shard.dead())
    scene.call = lambda: scene.store.call(request)
    scene.receipt = shard.keys.receipt(request.call)
    return scene


def scene_note_late(shard: Shard) -> Scene:
    request = NoteLate(shard.keys, 2, '{"at": 1}', 100)
    return Scene(
        shard,
        call=lambda: shard.scripts.store.call(request),
        receipt=shard.keys.receipt(request.call),
    )


def scene_read_shard(shard: Shard) -> Scene:
    token = new_token()
    batch = shard.leased("g", 3, token)
    shard.push("g", 2)
    return Scene(
        shard,
        call=lambda: shard.scripts.store.call(ReadShard(shard.keys, ["g"])),
        batch=batch,
        token=token,
    )


def scene_set_aside(shard: Shard) -> Scene:
    for g in ("a", "b"):
        shard.push(g, 1)
    return Scene(shard, call=lambda: shard.scripts.store.call(SetAside(shard.keys, [b"\x00junk"])))


def scene_shard_lease(shard: Shard) -> Scene:
    shard.push("g", 1)
    request = ShardLease(shard.keys, "rep-1", 10_000)
    return Scene(shard, call=lambda: shard.scripts.store.call(request))


def scene_heartbeat(shard: Shard) -> Scene:
    store = shard.scripts.store
    store.call(Heartbeat(shard.schema.reporters, "rep-2", 10_000))
    request = Heartbeat(shard.schema.reporters, "rep-1", 10_000)
    return Scene(shard, call=lambda: store.call(request), accounted=True)


def _limiter(shard: Shard, request: Any) -> Scene:
    store = shard.scripts.store
    return Scene(
        shard,
        call=lambda: store.call(request),
        receipt=receipt_key(request.key, request.call),
        quarantine=sibling(request.key, "quarantine"),
        accounted=False,
        main=request.key,
    )


def scene_take_tokens(shard: Shard) -> Scene:
    key = shard.schema.limiter("sink")
    shard.scripts.store.call(TakeTokens(key, 10.0, 5, 1))
    return _limiter(shard, TakeTokens(key, 10.0, 5, 1))


def scene_reserve_slot(shard: Shard) -> Scene:
    key = shard.schema.limiter("nppa")
    shard.scripts.store.call(ReserveSlot(key, 100_000, "", 5_000_000))
    return _limiter(shard, ReserveSlot(key, 100_000, "", 5_000_000))


def scene_hold(shard: Shard) -> Scene:
    key = shard.schema.hold("app")
    shard.scripts.store.call(Hold(key, HoldOp.HOLD, 30_000, "nppa 1011", "the key", "g"))
    return _limiter(shard, Hold(key, HoldOp.PROBE, 30_000))


HELD = {
    "ack": lambda s: Ack(s.keys, s.batch, s.token),
    "ack_many": lambda s: AckMany(s.keys, s.token, ((s.batch, 0),)),
    "release": lambda s: Release(s.keys, s.batch, s.token),
    "extend": lambda s: Extend(s.keys, s.batch, s.token, LEASE_MS),
    "nack": lambda s: Nack(s.keys, s.batch, s.token, POLICY, 0.5, False, 0, "HTTP 503"),
    "settle": lambda s: Settle(s.keys, s.batch, s.token, POLICY, 0.5, 0, [0], [(1, "x")]),
}

SCENES: dict[str, Callable[[Shard], Scene]] = {
    "collect": scene_collect,
    "claim": scene_claim,
    **{name: functools.partial(_held, make=make) for name, make in HELD.items()},
    "reap": scene_reap,
    "take_retries": scene_take_retries,
    "replay": scene_replay,
    "purge": scene_purge,
    "purge_ids": scene_purge_ids,
    "note_late": scene_note_late,
    "read_shard": scene_read_shard,
    "set_aside": scene_set_aside,
    "shard_lease": scene_shard_lease,
    "heartbeat": scene_heartbeat,
    "take_tokens": scene_take_tokens,
    "reserve_slot": scene_reserve_slot,
    "hold": scene_hold,
}


# -- corruptions -------------------------------------------------------------------------------

SET_ASIDE, OK, REFUSED = "set aside", "ok", "refused"


@dataclass(frozen=True)
class Case:
    script: str
    target: str  # what is corrupted: a key, or a key's field or member
    spoil: str  # how
    expect: str  # SET_ASIDE, OK or REFUSED
    apply: Callable[[Scene], tuple[str, str]]  # writes it; the key and field ('' for a key)
    check: Callable[[Scene], None] | None = None  # what else must hold after
    # whether the accounting must be whole after: not when the corruption itself lost
    # events (a buffer replaced by junk) or counts (a counter replaced)
    accounted: bool = True

    @property
    def id(self) -> str:
        return f"{self.script}:{self.target}:{self.spoil}"


def _raw_meta(scene: Scene, batch: str, change: Callable[[dict[str, Any]], None]) -> None:
    meta = scene.shard.meta(batch)
    assert meta is not None
    change(meta)
    text = json.dumps(meta).replace('"@1e999"', "1e999").replace('"@nan"', "nan")
    text = text.replace('"@-1e999"', "-1e999")
    scene.shard.r.hset(scene.keys.batches, batch, text)


def _set(name: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda meta: meta.__setitem__(name, value)


def _drop(name: str) -> Callable[[dict[str, Any]], None]:
    return lambda meta: meta.pop(name)


META: dict[str, Callable[[dict[str, Any]], None]] = {
    "missing size": _drop("n"),
    "missing game": _drop("g"),
    "size a string": _set("n", "3"),
    "size 1e999": _set("n", "@1e999"),
    "time 1e999": _set("c", "@1e999"),
    "time -1e999": _set("c", "@-1e999"),
    "time nan": _set("c", "@nan"),
    "extra nan": _set("x", "@nan"),
    "size negative": _set("n", -1),
    "attempts negative": _set("a", -1),
    "size huge": _set("n", 10**15),
    "attempts huge": _set("a", 10**9),
    "time far future": _set("c", FAR_MS),
    "dead time far future": _set("d", FAR_MS),
    "reason a number": _set("r", 5),
}


def meta_cases(script: str, expect: str = SET_ASIDE) -> list[Case]:
    def spoil(change: Callable[[dict[str, Any]], None]) -> Callable[[Scene], tuple[str, str]]:
        def apply(scene: Scene) -> tuple[str, str]:
            _raw_meta(scene, scene.batch, change)
            return scene.keys.batches, scene.batch

        return apply

    def not_json(scene: Scene) -> tuple[str, str]:
        scene.shard.r.hset(scene.keys.batches, scene.batch, "{not json")
        return scene.keys.batches, scene.batch

    cases = [Case(script, "metadata", "not JSON", expect, not_json)]
    cases += [
        Case(script, "metadata", name, expect, spoil(change)) for name, change in META.items()
    ]
    return cases


JUNK: dict[str, tuple[str, Callable[[redis.Redis, str], Any]]] = {
    "list": ("string", lambda r, k: r.set(k, "junk")),
    "hash": ("list", lambda r, k: r.rpush(k, "junk")),
    "zset": ("string", lambda r, k: r.set(k, "junk")),
    "set": ("hash", lambda r, k: r.hset(k, "junk", "1")),
    "string": ("list", lambda r, k: r.rpush(k, "junk")),
}


def type_case(
    script: str, name: str, kind: str, key: Callable[[Scene], str], expect: str = SET_ASIDE
) -> Case:
    def apply(scene: Scene) -> tuple[str, str]:
        k = key(scene)
        scene.shard.r.delete(k)
        JUNK[kind][1](scene.shard.r, k)
        return k, ""

    return Case(script, name, "another type", expect, apply, accounted=False)


def counter_cases(script: str, counter: str) -> list[Case]:
    def spoil(value: str) -> Callable[[Scene], tuple[str, str]]:
        def apply(scene: Scene) -> tuple[str, str]:
            stats = scene.quarantine.replace(":quarantine", ":stats") or scene.keys.stats
            scene.shard.r.hset(stats, counter, value)
            return stats, counter

        return apply

    return [
        Case(script, f"counter {counter}", name, expect, spoil(value), accounted=False)
        for name, value, expect in [
            ("not a number", "lots", SET_ASIDE),
            ("1e999", "1e999", SET_ASIDE),
            ("nan", "nan", SET_ASIDE),
            ("huge", "9" * 20, SET_ASIDE),
            ("negative", "-5", OK),
        ]
    ]


def score_case(
    script: str,
    name: str,
    key: Callable[[Scene], str],
    member: Callable[[Scene], str],
    spoil: str,
    score: float,
    expect: str,
    check: Callable[[Scene], None] | None = None,
) -> Case:
    def apply(scene: Scene) -> tuple[str, str]:
        k, m = key(scene), member(scene)
        scene.shard.r.zadd(k, {m: score})
        return k, m

    return Case(script, name, spoil, expect, apply, check)


def receipt_cases(script: str) -> list[Case]:
    def spoil(value: Callable[[Scene], str]) -> Callable[[Scene], tuple[str, str]]:
        def apply(scene: Scene) -> tuple[str, str]:
            assert scene.receipt
            scene.shard.r.set(scene.receipt, value(scene), px=60_000)
            return scene.receipt, ""

        return apply

    def shaped(reply: Any) -> Callable[[Scene], str]:
        return lambda scene: json.dumps(
            {
                "s": script,
                "t": "" if script not in ("take_retries", "claim") else scene.token,
                "r": reply,
            }
        )

    return [
        Case(script, "receipt", "not JSON", OK, spoil(lambda s: "{not json")),
        Case(script, "receipt", "an answer of another shape", OK, spoil(shaped("x"))),
        Case(script, "receipt", "a huge answer", OK, spoil(shaped(list(range(200_000))))),
    ]


def field_cases(script: str, fields: dict[str, list[tuple[str, str, str]]]) -> list[Case]:
    """Numbers in the fields of a limiter's or hold's hash: (spoil, value, expected)."""
    out = []
    for name, spoils in fields.items():
        for spoil, value, expect in spoils:

            def apply(scene: Scene, name: str = name, value: str = value) -> tuple[str, str]:
                key = scene.main
                if value == "":
                    scene.shard.r.hdel(key, name)
                else:
                    scene.shard.r.hset(key, name, value)
                return key, name

            out.append(Case(script, f"field {name}", spoil, expect, apply))
    return out


def _time_spoils(far: int) -> list[tuple[str, str, str]]:
    return [
        ("inf", "inf", SET_ASIDE),
        ("nan", "nan", SET_ASIDE),
        ("1e999", "1e999", SET_ASIDE),
        ("not a number", "soon", SET_ASIDE),
        ("far future", str(far), SET_ASIDE),
        ("huge", "1e300", SET_ASIDE),
        ("negative", "-1", OK),
        ("missing", "", OK),
    ]


def _pending(scene: Scene) -> str:
    return scene.batch


def _clamped(scene: Scene) -> None:
    deadlines: list[Any] = scene.shard.r.zrange(
        scene.shard.schema.reporters, 0, -1, withscores=True
    )
    assert max(score for _, score in deadlines) <= server_ms(scene.shard.r) + 10_000


def _owner(ttl_ms: int | None, holder: str = "gone") -> Callable[[Scene], tuple[str, str]]:
    def apply(scene: Scene) -> tuple[str, str]:
        scene.shard.r.set(scene.keys.owner, holder, px=ttl_ms)
        return scene.keys.owner, ""

    return apply


def _payload(entries: int | None) -> Callable[[Scene], tuple[str, str]]:
    def apply(scene: Scene) -> tuple[str, str]:
        if entries is None:
            scene.shard.r.hdel(scene.keys.payloads, scene.batch)
        else:
            lines = scene.shard.entries("g", entries)
            scene.shard.r.hset(scene.keys.payloads, scene.batch, b"\n".join(lines))
        return scene.keys.batches, scene.batch

    return apply


def _long_dead_list(script: str) -> Callable[[Scene], tuple[str, str]]:
    """A dead list far over its cap, of ids without a batch.  nack (refused for good) and
    reap (out of attempts) add a dead letter, so they trim the list: a hundred or so per
    call, never the whole excess."""

    def apply(scene: Scene) -> tuple[str, str]:
        scene.shard.r.rpush(scene.keys.dead, *[f"junk-{i}" for i in range(200_000)])
        if script == "nack":
            request = Nack(scene.keys, scene.batch, scene.token, POLICY, 0.5, True, 0, "HTTP 400")
            scene.call = lambda: scene.store.call(request)
        elif script == "reap":
            _raw_meta(scene, scene.batch, _set("a", POLICY.max_attempts - 1))
        return scene.keys.dead, ""

    return apply


def _trimmed(scene: Scene) -> None:
    assert 199_800 < scene.shard.r.llen(scene.keys.dead) < 200_000


def _registry_of_ghosts(scene: Scene) -> tuple[str, str]:
    key = scene.shard.schema.reporters
    scene.shard.r.zadd(key, {f"ghost-{i}": FAR_MS for i in range(100_000)})
    return key, ""


def _ring_of_many(scene: Scene) -> tuple[str, str]:
    r = scene.shard.r
    r.sadd(scene.keys.active, *[f"game-{i}" for i in range(5_000)])
    r.delete(scene.keys.ring)
    r.set(scene.keys.ring, "junk")
    return scene.keys.ring, ""


def _ring_rebuilt(scene: Scene) -> None:
    """The ring is built again over a few calls: the sweeper hands each mark of where the
    rebuild goes on to set_aside, as it hands any member that is not a game name."""
    r, keys = scene.shard.r, scene.keys
    for _ in range(20):
        first: list[bytes] = r.zrange(keys.ring, 0, 0)  # type: ignore[assignment]
        marks = [m for m in first if m.startswith(b"\x01")]
        if not marks:
            break
        scene.store.call(SetAside(keys, marks))
    assert set(r.zrange(keys.ring, 0, -1)) == set(r.smembers(keys.active))
    assert not slow_calls(r)  # each of those calls short too


def _head_far_ahead(scene: Scene) -> tuple[str, str]:
    """A game whose only entry says it was collected in the year 2286 (a host's clock): a
    claim that lingers for a fuller batch would wait for that entry to age until then."""
    keys = scene.keys
    scene.shard.scripts.collect(keys, "h", 1000, 3600, [b"9999999999999" + b'{"far": true}'])
    request = Claim(keys, "h", "c2", new_token(), 128, 4, LEASE_MS, MAX_AGE_MS, 1000, 0)
    scene.call = lambda: scene.store.call(request)
    return keys.queue("h"), ""


def _taken(scene: Scene) -> None:
    assert scene.shard.r.llen(scene.keys.queue("h")) == 0


def _remembered(value: str, seq: int) -> Callable[[Scene], tuple[str, str]]:
    def apply(scene: Scene) -> tuple[str, str]:
        scene.shard.r.hset(scene.keys.writes, "w", value)
        request = Collect(
            scene.keys, "g", scene.shard.entries("g", 3), 1000, 3600, writer="w", seq=seq, low=seq
        )
        scene.call = lambda: scene.store.call(request)
        return scene.keys.writes, "w"

    return apply


# Each key a script reads: its type, and where it is in a scene.
KEYS: dict[str, tuple[str, Callable[[Scene], str]]] = {
    "queue": ("list", lambda s: s.keys.queue("g")),
    "active": ("set", lambda s: s.keys.active),
    "ring": ("zset", lambda s: s.keys.ring),
    "inflight": ("zset", lambda s: s.keys.inflight),
    "batches": ("hash", lambda s: s.keys.batches),
    "payloads": ("hash", lambda s: s.keys.payloads),
    "retry": ("zset", lambda s: s.keys.retry),
    "dead": ("list", lambda s: s.keys.dead),
    "stats": ("hash", lambda s: s.keys.stats),
    "marker": ("string", lambda s: s.keys.marker),
    "owner": ("string", lambda s: s.keys.owner),
    "late": ("list", lambda s: s.keys.late),
    "quarantine": ("list", lambda s: s.keys.quarantine),
    "writes": ("hash", lambda s: s.keys.writes),
    "writers": ("zset", lambda s: s.keys.writers),
    "reporters": ("zset", lambda s: s.shard.schema.reporters),
    "main": ("hash", lambda s: s.main),
    "holds": ("zset", lambda s: sibling(s.main, "holds")),
}
_SHARD = ["stats", "quarantine"]
_HELD = ["inflight", "batches", *_SHARD]
READS: dict[str, list[str]] = {
    "collect": ["queue", "active", "ring", "marker", "writes", "writers", *_SHARD],
    "claim": ["queue", "active", "ring", "inflight", "batches", "payloads", "dead", *_SHARD],
    "ack": ["payloads", *_HELD],
    "ack_many": ["payloads", *_HELD],
    "release": ["retry", *_HELD],
    "extend": _HELD,
    "nack": ["payloads", "retry", "dead", *_HELD],
    "settle": ["payloads", "retry", "dead", *_HELD],
    "reap": ["payloads", "retry", "dead", *_HELD],
    "take_retries": ["retry", "payloads", *_HELD],
    "replay": ["dead", "batches", "retry", "payloads", *_SHARD],
    "purge": ["dead", "batches", "payloads", *_SHARD],
    "purge_ids": ["dead", "batches", "payloads", *_SHARD],
    "note_late": ["late", *_SHARD],
    "read_shard": ["ring", "inflight", "retry", "dead", "stats", "owner", "batches", "queue"],
    "set_aside": ["ring", "active", "retry", "marker", *_SHARD],
    "shard_lease": ["owner", *_SHARD],
    "heartbeat": ["reporters"],
    "take_tokens": ["main"],
    "reserve_slot": ["main"],
    "hold": ["main", "holds"],
}
# The counter each script adds to.
COUNTED = {
    "collect": "stored",
    "claim": "claimed",
    "ack": "delivered",
    "ack_many": "delivered",
    "release": "batches_released",
    "nack": "batches_retried",
    "settle": "delivered",
    "reap": "batches_reaped",
    "replay": "replayed",
    "purge": "purged",
    "purge_ids": "purged",
    "note_late": "late_sent",
    "shard_lease": "owners_taken_over",
}
READS_METADATA = (
    "ack",
    "ack_many",
    "release",
    "extend",
    "nack",
    "settle",
    "reap",
    "take_retries",
    "replay",
    "purge",
    "purge_ids",
)
READS_RECEIPT_FIRST = (
    "claim",
    "take_retries",
    "replay",
    "purge",
    "purge_ids",
    "note_late",
    "take_tokens",
    "reserve_slot",
    "hold",
)


def type_cases() -> list[Case]:
    out = []
    for script, names in READS.items():
        for name in names:
            kind, key = KEYS[name]
            # read_shard moves nothing (it names junk among the problems); junk where the
            # quarantine belongs is set aside only once a record goes in
            expect = OK if script == "read_shard" or name == "quarantine" else SET_ASIDE
            out.append(type_case(script, name, kind, key, expect))
    return out


def record_cases() -> list[Case]:
    out = [case for script, counter in COUNTED.items() for case in counter_cases(script, counter)]
    out += [case for script in READS_METADATA for case in meta_cases(script)]
    # read_shard moves nothing: the batch stays in flight, with junk the accounting cannot use
    out += [replace(case, accounted=False) for case in meta_cases("read_shard", OK)]
    return out


def time_cases() -> list[Case]:
    """Scores that are times: far ahead (junk: due now, noted), or behind (due: normal)."""
    inflight: Callable[[Scene], str] = lambda s: s.keys.inflight  # noqa: E731
    retry: Callable[[Scene], str] = lambda s: s.keys.retry  # noqa: E731
    registry: Callable[[Scene], str] = lambda s: s.shard.schema.reporters  # noqa: E731
    out = []
    for spoil, score in [("far future", FAR_MS), ("inf", float("inf"))]:
        out += [
            score_case("reap", "lease deadline", inflight, _pending, spoil, score, SET_ASIDE),
            score_case("take_retries", "retry time", retry, _pending, spoil, score, SET_ASIDE),
            score_case(
                "heartbeat", "deadline", registry, lambda s: "ghost", spoil, score, OK, _clamped
            ),
        ]
        out += [
            score_case(script, "lease deadline", inflight, _pending, spoil, score, OK)
            for script in HELD
        ]
    for spoil, score in [("negative", -1), ("-inf", float("-inf"))]:
        out += [
            score_case("reap", "lease deadline", inflight, _pending, spoil, score, OK),
            score_case("take_retries", "retry time", retry, _pending, spoil, score, OK),
            score_case("heartbeat", "deadline", registry, lambda s: "ghost", spoil, score, OK),
        ]
    out.append(
        Case("claim", "buffer", "its head collected far in the future", OK, _head_far_ahead, _taken)
    )
    return out


def size_cases() -> list[Case]:
    """Lists, payloads and sets far longer than any script makes."""
    out = [
        Case("heartbeat", "registry", "100,000 far-future ghosts", OK, _registry_of_ghosts),
        Case("reap", "payload", "missing", SET_ASIDE, _payload(None)),
        Case("ack", "payload", "more entries than a batch", OK, _payload(200)),
        Case("ack_many", "payload", "more entries than a batch", OK, _payload(200)),
        Case("replay", "payload", "more entries than a batch", SET_ASIDE, _payload(200)),
    ]
    for script in ("take_retries", "settle"):
        out.append(Case(script, "payload", "more entries than a batch", SET_ASIDE, _payload(200)))
        out.append(Case(script, "payload", "missing", SET_ASIDE, _payload(None)))
    out += [
        Case(script, "dead list", "200,000 ids without a batch", OK, _long_dead_list(script), check)
        for script, check in [
            ("reap", _trimmed),
            ("nack", _trimmed),
            ("replay", None),
            ("purge", None),
        ]
    ]
    out += [
        Case(
            script,
            "ring",
            "another type, 5,000 games to rebuild it from",
            SET_ASIDE,
            _ring_of_many,
            _ring_rebuilt,
        )
        for script in ("set_aside", "claim")
    ]
    return out


def owner_and_receipt_cases() -> list[Case]:
    out = [
        Case("shard_lease", "owner", "no expiry", SET_ASIDE, _owner(None)),
        Case("shard_lease", "owner", "an expiry longer than any lease", SET_ASIDE, _owner(10**12)),
        Case("shard_lease", "owner", "another holder's live lease", OK, _owner(10_000)),
    ]
    return out + [case for script in READS_RECEIPT_FIRST for case in receipt_cases(script)]


def pacing_cases() -> list[Case]:
    """The numbers of the shared rate and of the hold."""
    tokens = [
        ("inf", "inf", SET_ASIDE),
        ("nan", "nan", SET_ASIDE),
        ("1e999", "1e999", SET_ASIDE),
        ("negative", "-1", SET_ASIDE),
        ("huge", "1e300", SET_ASIDE),
        ("missing", "", OK),
    ]
    us = _time_spoils(FAR_US)
    # a hold's times are never negative: refused too
    hold_times = [(n, v, SET_ASIDE if n == "negative" else e) for n, v, e in _time_spoils(FAR_MS)]
    return [
        *field_cases(
            "take_tokens", {"tokens": tokens, "at": us, "paused_until": us, "refused_at": us}
        ),
        *field_cases("reserve_slot", {"t:": us, "paused_until": us}),
        *field_cases(
            "hold",
            {
                "probe_at": hold_times,
                "since": hold_times,
                "lifted": hold_times,
                "probes": [("nan", "nan", SET_ASIDE), ("negative", "-1", SET_ASIDE)],
            },
        ),
    ]


def remembered_cases() -> list[Case]:
    """The written-once record collect reads (lua/_written_once.lua)."""
    return [
        Case(
            "collect",
            "remembered write",
            "a range of 300,000 writes",
            SET_ASIDE,
            _remembered("1 300000 0", 300_000),
        ),
        Case("collect", "remembered write", "not numbers", SET_ASIDE, _remembered("x y z", 2)),
        Case(
            "collect",
            "remembered write",
            "a range of 1e999",
            SET_ASIDE,
            _remembered("1 1e999 0", 2),
        ),
    ]


def cases() -> list[Any]:
    every = [
        *type_cases(),
        *record_cases(),
        *time_cases(),
        *size_cases(),
        *owner_and_receipt_cases(),
        *pacing_cases(),
        *remembered_cases(),
    ]
    assert {case.script for case in every} == set(SCRIPT_NAMES)  # every script, each
    return [pytest.param(case, id=case.id) for case in every]


@pytest.mark.parametrize("case", cases())
def test_a_corruption_is_refused_or_set_aside_never_half_done(r: redis.Redis, case: Case) -> None:
    shard = Shard(r, prefix="spoil")
    scene = SCENES[case.script](shard)
    scene.quarantine = scene.quarantine or shard.keys.quarantine
    key, spot = case.apply(scene)
    records_before = _records(r, scene.quarantine)
    before = keyspace(r)
    r.slowlog_reset()
    try:
        scene.call()
        error: BackendError | None = None
    except BackendError as exc:
        error = exc
    assert not slow_calls(r), f"a call slower than {SLOW_US} us: {slow_calls(r)}"
    if error is not None:
        assert keyspace(r) == before, f"failed after a write, half done: {error}"
        assert case.expect == REFUSED, f"refused: {error}"
        return
    new = _records(r, scene.quarantine)[: len(_records(r, scene.quarantine)) - len(records_before)]
    named = [q for q in new if q.get("k") == key and (not spot or q.get("f") == spot)]
    if case.expect == SET_ASIDE:
        assert named, f"nothing set aside for {key} {spot}: {new}"
    else:
        assert case.expect == OK and not named, named
    if case.check:
        case.check(scene)
    if scene.accounted and case.accounted:
        assert read_totals(store_of(r, shard.schema)).unaccounted == 0


def _records(r: redis.Redis, quarantine: str) -> list[dict[str, Any]]:
    if r.type(quarantine) != b"list":
        return []
    return [json.loads(raw) for raw in r.lrange(quarantine, 0, -1)]
