"""The cases of a producer's writes through faults: Redis cut off while the buffer fills, a
reply lost after the write ran, a write lost before it ran, Redis restarted empty, the
producer restarted.  Each returns a line saying what held, or raises ``CaseFailed`` (or
``ProducerFailed``) saying what did not."""

from __future__ import annotations

import itertools

from reporter._conformance.relay import Relay, SeenCall
from reporter._conformance.world import CaseFailed, Suite, World, check, world

# Positions in the collect call's ARGV (lua/collect.lua's header), 0-based: what makes a write
# the same write when it is sent again.
GAME, PRE_EVICTED, DROPPED_FULL, DROPPED_LARGE, ENTRIES = 0, 3, 4, 5, 6
WRITER, SEQ, CHECKSUM = 8, 9, 16
SAME_WRITE = (GAME, PRE_EVICTED, DROPPED_FULL, DROPPED_LARGE, ENTRIES, WRITER, SEQ, CHECKSUM)


def case_buffer_full(suite: Suite) -> str:
    most, count, game = 50, 80, "away"
    settings = {"TELEMETRY_COLLECTOR_MAX_BUFFER_EVENTS": str(most)}
    with world(suite, settings=settings) as w:
        relay = w.use_relay()
        relay.cut()
        producer = w.start()
        for n in range(count):
            w.collect(producer, game, {"n": n})
        check(
            relay.wait_refused(2, suite.flush_seconds),
            "the producer did not try to reach Redis again while it was away",
        )
        relay.restore()
        w.flush(producer)
        stored = w.stored_events(game)
        numbers = [e.get("n", -1) for e in stored]
        check(
            all(a < b for a, b in itertools.pairwise(numbers)),
            f"the events stored after Redis came back are out of order or doubled: {numbers}",
        )
        stats = producer.stats()
        dropped = stats["dropped_buffer_full"]
        check(
            dropped > 0 and len(stored) + dropped == count,
            f"{count} events collected while Redis was away, the buffer holding {most} "
            f"(TELEMETRY_COLLECTOR_MAX_BUFFER_EVENTS): {len(stored)} stored and "
            f"{dropped} counted dropped_buffer_full",
        )
        check(
            numbers[-1:] == [count - 1],
            "the newest event was not stored: a full buffer drops its oldest events first",
        )
        producer.close(suite.flush_seconds)
        w.settle([stats])
    return (
        f"with Redis away, {dropped} of {count} events dropped from a {most}-event buffer "
        "(oldest first), counted in the stats and in the shard; the rest stored once"
    )


def case_lost_reply(suite: Suite) -> str:
    return _lost(suite, "reply")


def case_lost_call(suite: Suite) -> str:
    return _lost(suite, "call")


def _lost(suite: Suite, what: str) -> str:
    game = f"lost-{what}"
    with world(suite) as w:
        relay = w.use_relay()
        producer = w.start()
        w.collect(producer, "warm-up", {"n": 0})  # connected, its script loaded
        w.flush(producer)
        (relay.lose_next_reply if what == "reply" else relay.lose_next_call)()
        for n in range(10):
            w.collect(producer, game, {"n": n, "what": what})
        w.flush(producer)
        check(not relay.armed, "no collect call was sent for the events (flush answered ok)")
        w.expect_stored(game, w.sent[game])
        w.expect_stored("warm-up", w.sent["warm-up"])
        lost, again = _resend_of(relay)
        stats = producer.stats()
        producer.close(suite.flush_seconds)
        w.settle([stats])
        _expect_remembered(w, game, lost)
    ran = "ran and lost its reply" if what == "reply" else "was lost before it reached Redis"
    return (
        f"a write that {ran} was sent again as it was (writer {_text(lost, WRITER)}, sequence "
        f"{_text(lost, SEQ)}, {again} time(s)); its 10 events stored once"
    )


def _resend_of(relay: Relay) -> tuple[SeenCall, int]:
    """The call whose reply (or itself) was lost, and how often it was sent again."""
    faulted = [c for c in relay.calls if c.fate != "passed"]
    check(len(faulted) == 1, f"expected one lost collect call, the relay saw {len(faulted)}")
    lost = faulted[0]
    argv = lost.argv()
    check(
        len(argv) > CHECKSUM and argv[WRITER] != b"",
        "the collect call carries no writer id (ARGV[9]): its writes cannot be written once",
    )
    later = relay.calls[relay.calls.index(lost) + 1 :]
    same_number = [
        c for c in later if _field(c, WRITER) == argv[WRITER] and _field(c, SEQ) == argv[SEQ]
    ]
    check(
        bool(same_number),
        f"the write whose {'reply' if lost.fate == 'reply lost' else 'call'} was lost (writer "
        f"{_text(lost, WRITER)}, sequence {_text(lost, SEQ)}) was never sent again with its "
        "writer id and sequence number",
    )
    same = [c for c in same_number if all(_field(c, i) == argv[i] for i in SAME_WRITE)]
    if not same:
        other = same_number[0]
        differs = [i + 1 for i in SAME_WRITE if _field(other, i) != argv[i]]
        raise CaseFailed(
            f"the write of writer {_text(lost, WRITER)}, sequence {_text(lost, SEQ)} was sent "
            f"again with other content (ARGV {differs} differ): a resend must be the same write"
        )
    return lost, len(same)


def _expect_remembered(w: World, game: str, lost: SeenCall) -> None:
    """The shard remembers the write (so that a repeat is answered, not stored)."""
    shard = w.schema.for_game(game)
    argv = lost.argv()
    field = argv[WRITER] + b":" + argv[SEQ]
    check(
        w.client.hexists(shard.writes, field) or w.client.hexists(shard.writes, argv[WRITER]),
        f"the shard does not remember the write {field!r} in {shard.writes}",
    )


def _field(call: SeenCall, index: int) -> bytes | None:
    argv = call.argv()
    return argv[index] if index < len(argv) else None


def _text(call: SeenCall, index: int) -> str:
    value = _field(call, index)
    return "(none)" if value is None else value.decode("utf-8", "replace")


def case_redis_restart(suite: Suite) -> str:
    game, other = "restarted", "after-restart"
    with world(suite) as w:
        producer = w.start()
        for n in range(5):
            w.collect(producer, game, {"n": n})
        w.flush(producer)
        w.expect_stored(game, w.sent[game])
        suite.server.restart()  # empty: no data, no scripts
        w.client.close()
        w.client = suite.server.client()
        w.sent[game] = []
        for n in range(5, 10):
            w.collect(producer, game, {"n": n})
            w.collect(producer, other, {"n": n})
        w.flush(producer)
        w.expect_stored(game, w.sent[game])
        w.expect_stored(other, w.sent[other])
        w.client.script_flush()  # the scripts gone again, the data kept
        for n in range(10, 15):
            w.collect(producer, game, {"n": n})
        w.flush(producer)
        w.expect_stored(game, w.sent[game])
        stats = producer.stats()
        check(stats["stored"] == 20, f"20 events were stored, the stats say {stats['stored']}")
        producer.close(suite.flush_seconds)
        w.settle([stats], shards_count=False)  # the restart took the first counts away
    return (
        "writes go on after Redis restarted empty (reconnected, script loaded again) and "
        "after SCRIPT FLUSH"
    )


def case_producer_restart(suite: Suite) -> str:
    game = "restart"
    with world(suite) as w:
        # Its buffer is written by close() alone: no round comes before.
        first = w.start(TELEMETRY_COLLECTOR_FLUSH_INTERVAL_MS="60000")
        for n in range(10):
            w.collect(first, game, {"n": n, "run": 1})
        first.close(suite.flush_seconds)  # no flush first: close writes what is buffered
        w.expect_stored(game, w.sent[game])
        second = w.start()
        for n in range(10):
            w.collect(second, game, {"n": n, "run": 2})
        w.flush(second)
        w.expect_stored(game, w.sent[game])
        stats = second.stats()
        second.close(suite.flush_seconds)
        shard = w.schema.for_game(game)
        writers = w.client.zcard(shard.writers)
        check(
            writers == 2,
            f"two producer processes wrote to the shard, which knows {writers} writer ids in "
            f"{shard.writers}: each process takes a new one",
        )
        counted = w.shard_counters()
        check(
            counted.get("stored") == 20,
            f"the shard counts stored = {counted.get('stored')}, 20 events were stored",
        )
        w.settle([stats], shards_count=False)
    return (
        "close wrote everything buffered; a restarted producer wrote under a new writer id, "
        "nothing refused"
    )
