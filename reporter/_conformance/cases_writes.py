"""The cases of a producer's writes with Redis up: what lands where, in what form, bounded by
which settings, and what is refused.  Each returns a line saying what held, or raises
``CaseFailed`` (or ``ProducerFailed``) saying what did not."""

from __future__ import annotations

from typing import Any

from reporter._conformance.world import Suite, check, shard_of, world

# Texts that every JSON encoder must carry through as they are: non-ASCII, characters JSON
# escapes (a newline among them: it must never reach Redis raw), HTML-ish and control text.
TEXTS = (
    "plain",
    "héllo wörld",
    "中文字符",
    "emoji \U0001f3ae\U0001f600",
    'quote " and backslash \\',
    "line\nbreak\tand tab\r",
    "\u2028\u2029 separators",
    "\u0001\u001f controls",
    "</script><!--",
    "",
)


def event(game: str, n: int, **extra: Any) -> dict[str, Any]:
    """An event of many JSON shapes, numbered so that each is told apart."""
    return {
        "type": "login" if n % 2 else "logout",
        "game": game,
        "n": n,
        "text": TEXTS[n % len(TEXTS)],
        "score": n * 1.5,
        "big": 2**53 - n,
        "neg": -n,
        "ok": n % 3 == 0,
        "none": None,
        "tags": ["a", n, [True, False]],
        "deep": {"x": {"y": [{"z": n}]}},
        **extra,
    }


def case_events(suite: Suite) -> str:
    games = ["alpha", "beta-2", "x.y:z@w/0_1"]
    with world(suite) as w:
        producer = w.start()
        for n in range(len(TEXTS) * 2):
            for game in games:
                w.collect(producer, game, event(game, n))
        w.flush(producer)
        for game in games:
            w.expect_stored(game, w.sent[game])
        stats = producer.stats()
        total = sum(map(len, w.sent.values()))
        check(
            (stats.get("accepted"), stats.get("stored")) == (total, total),
            f"stats say accepted {stats.get('accepted')}, stored {stats.get('stored')}; "
            f"{total} events were taken and are in Redis",
        )
        producer.close(suite.flush_seconds)
        w.settle([stats])
    return (
        f"{total} events of {len(games)} games in Redis in order, each once, as 13 digits "
        "of collect time and the event's JSON (non-ASCII and escapes kept)"
    )


def case_keys(suite: Suite) -> str:
    shards = 8
    games = [f"game-{n}" for n in range(40)] + ["A" * 128, "a-b_c.d:e@f/g0"]
    with world(suite, shards=shards) as w:
        producer = w.start()
        for game in games:
            w.collect(producer, game, event(game, 0))
        w.flush(producer)
        used = set()
        for game in games:
            key = f"{{{w.prefix}:{shard_of(game, shards)}}}:q:{game}"
            check(
                w.client.llen(key) == 1,
                f"game {game!r}: no event at {key} (shard = crc32(game) & {shards - 1}, "
                f"prefix {w.prefix!r})",
            )
            used.add(shard_of(game, shards))
        stats = producer.stats()
        producer.close(suite.flush_seconds)
        w.settle([stats])
    return (
        f"{len(games)} games each in {{<prefix>:crc32(game) & {shards - 1}}}, "
        f"{len(used)} of {shards} shards used, no key outside them"
    )


def case_registry(suite: Suite) -> str:
    games = ["reg-a", "reg-b", "reg-c"]
    with world(suite) as w:
        producer = w.start()
        for game in games:
            w.collect(producer, game, event(game, 0))
        w.flush(producer)
        for game in games:
            _expect_registered(w.client, w.schema.for_game(game), game)
        # As the reporter does once it drained a game: its buffer gone, unregistered.
        shard = w.schema.for_game(games[0])
        w.client.delete(shard.queue(games[0]))
        w.client.srem(shard.active, games[0])
        w.client.zrem(shard.ring, games[0])
        w.sent[games[0]] = []
        w.collect(producer, games[0], event(games[0], 1))
        w.flush(producer)
        _expect_registered(w.client, shard, games[0], "after it was drained and written again")
        w.expect_stored(games[0], w.sent[games[0]])
        stats = producer.stats()
        producer.close(suite.flush_seconds)
        w.settle([stats])
    return (
        "every game written is in its shard's active set and games ring (score 0), again "
        "after a drain"
    )


def _expect_registered(client: Any, shard: Any, game: str, when: str = "") -> None:
    where = f"game {game!r}{' ' + when if when else ''}"
    check(bool(client.sismember(shard.active, game)), f"{where}: not in {shard.active}")
    check(client.zscore(shard.ring, game) == 0, f"{where}: not in {shard.ring} with score 0")


def case_ttl(suite: Suite) -> str:
    ttl = 777
    with world(suite, settings={"TELEMETRY_BUFFER_TTL_SECONDS": str(ttl)}) as w:
        producer = w.start()
        game = "ttl-game"
        w.collect(producer, game, event(game, 0))
        w.flush(producer)
        key = w.schema.for_game(game).queue(game)
        _expect_ttl(w.client.pttl(key), ttl, "after the first write")
        w.client.expire(key, 30)
        w.collect(producer, game, event(game, 1))
        w.flush(producer)
        _expect_ttl(w.client.pttl(key), ttl, "after a later write (it is refreshed)")
        w.expect_stored(game, w.sent[game])
        stats = producer.stats()
        producer.close(suite.flush_seconds)
        w.settle([stats])
    return f"the game's buffer expires [buffer] ttl_seconds ({ttl} s) after each write"


def _expect_ttl(pttl: int, ttl: int, when: str) -> None:
    check(
        (ttl - 60) * 1000 < pttl <= ttl * 1000,
        f"{when}: the buffer's time to live is {pttl} ms, expected about {ttl} s "
        "(TELEMETRY_BUFFER_TTL_SECONDS)",
    )


def case_cap(suite: Suite) -> str:
    cap = 10
    game = "capped"
    with world(suite, settings={"TELEMETRY_BUFFER_MAX_EVENTS_PER_GAME": str(cap)}) as w:
        producer = w.start()
        for n in range(25):
            w.collect(producer, game, event(game, n))
        w.flush(producer)
        w.expect_stored(game, w.sent[game][-cap:])
        for n in range(25, 32):
            w.collect(producer, game, event(game, n))
        w.flush(producer)
        w.expect_stored(game, w.sent[game][-cap:])
        stats = producer.stats()
        evicted = len(w.sent[game]) - cap
        counted = w.shard_counters().get("evicted", 0)
        check(
            stats["evicted"] == evicted == counted,
            f"{evicted} events pushed out by the cap; the producer counts {stats['evicted']} "
            f"evicted, the shard {counted}",
        )
        producer.close(suite.flush_seconds)
        w.settle([stats])
    return (
        f"the newest {cap} of 32 events kept, {evicted} counted evicted in the shard and the stats"
    )


# Game names each producer must refuse: empty, too long, outside [A-Za-z0-9_.:@/-].
BAD_GAMES = ("", "x" * 129, "{tag}", "café", "semi;colon", 'quote"', "back\\slash", "tab\tin")
# Requests whose event is not one JSON object.
BAD_EVENTS = ("[1,2]", '"text"', "42", "null", "true", "{not json", '{"a":1} {"b":2}', "")


def case_refusals(suite: Suite) -> str:
    game = "good-game"
    with world(suite) as w:
        producer = w.start()
        for bad in BAD_GAMES:
            answer = producer.collect(bad, event("bad", 0))
            check(answer.startswith("refused"), f"game name {bad!r}: answered {answer!r}")
        for bad in BAD_EVENTS:
            answer = producer.ask(f"collect {game} {bad}")
            check(answer.startswith("refused"), f"event {bad!r}: answered {answer!r}")
        w.collect(producer, game, event(game, 1))
        w.flush(producer)
        w.expect_stored(game, w.sent[game])
        stats = producer.stats()
        check(
            stats["accepted"] == 1,
            f"after {len(BAD_GAMES) + len(BAD_EVENTS)} refusals and one good event, stats say "
            f"accepted {stats['accepted']}",
        )
        producer.close(suite.flush_seconds)
        w.settle([stats])
    return (
        f"{len(BAD_GAMES)} bad game names and {len(BAD_EVENTS)} requests that are not one "
        "JSON object refused, nothing of them stored or accepted"
    )


def case_too_large(suite: Suite) -> str:
    limit = 256
    game = "sized"
    fits = {"pad": "x" * (limit - 10)}  # {"pad":"..."}: 10 bytes around the text
    over = {"pad": "y" * (limit - 9)}
    with world(suite, settings={"TELEMETRY_BUFFER_MAX_EVENT_BYTES": str(limit)}) as w:
        producer = w.start()
        w.collect(producer, game, fits)
        answer = producer.collect(game, over)
        check(
            answer == "ok" or answer.startswith("refused"),
            f"an event over the size bound answered {answer!r}",
        )
        w.flush(producer)
        w.expect_stored(game, [fits])
        stats = producer.stats()
        check(
            (stats["dropped_too_large"], stats["accepted"]) == (1, 1),
            f"an event of {limit} bytes of JSON and one of {limit + 1} (TELEMETRY_BUFFER_MAX_"
            f"EVENT_BYTES={limit}): stats say dropped_too_large {stats['dropped_too_large']}, "
            f"accepted {stats['accepted']}, expected 1 and 1",
        )
        producer.close(suite.flush_seconds)
        w.settle([stats])  # the drop count reached the game's shard
    return (
        f"an event of {limit} bytes stored, one of {limit + 1} counted in dropped_too_large "
        "(stats and shard)"
    )


def case_many_games(suite: Suite) -> str:
    games = [f"many-{n}" for n in range(300)]
    with world(suite, shards=16) as w:
        producer = w.start()
        for n in range(3):
            for game in games:
                w.collect(producer, game, {"n": n, "game": game})
        w.flush(producer)
        for game in games:
            w.expect_stored(game, w.sent[game])
        stats = producer.stats()
        producer.close(suite.flush_seconds)
        w.settle([stats])
    return f"{len(games)} games of 3 events each stored in one flush"


def case_large_write(suite: Suite) -> str:
    game = "large"
    count = 2500
    settings = {
        "TELEMETRY_BUFFER_MAX_EVENTS_PER_GAME": str(count * 2),
        # No round before the flush: the producer has all of them to write at once.
        "TELEMETRY_COLLECTOR_FLUSH_INTERVAL_MS": "60000",
    }
    with world(suite, settings=settings) as w:
        producer = w.start()
        for n in range(count):
            w.collect(producer, game, {"n": n, "pad": "p" * 1000})
        w.flush(producer)
        w.expect_stored(game, w.sent[game])
        stats = producer.stats()
        producer.close(suite.flush_seconds)
        w.settle([stats])
    return (
        f"{count} events of 1 KB (2.5 MB) of one game stored in order through a server whose "
        "largest argument is 1 MB"
    )
