"""Written once across a sequence jump, through the SDK on real servers: a writer whose numbers
run far past what a shard remembers of it (thousands of refused writes in sync mode, many
games through a long refusal in background mode) stores every event once, and a sync-mode
``collect()`` that raised stored nothing."""

from __future__ import annotations

import pytest

from collector import BackendError
from collector.store import BackendRefused, KeySchema
from tests.support.fixtures import MakeCollector
from tests.support.polling import wait_until
from tests.support.servers import Server
from tests.support.stored import balanced, queue_events, stats_total

PREFIX = "jump"


def refusing(server: Server, on: bool) -> None:
    """Redis refuses every write before it runs (NOREPLICAS): no replica is attached."""
    server.client().config_set("min-replicas-to-write", 1 if on else 0)


def test_sync_collects_after_thousands_of_refused_ones_store_each_event_once(
    own_server: Server, make_collector: MakeCollector
) -> None:
    """Each refused collect() took a sequence number: the next ones are 9,000 past the shard's
    record of the writer.  Before: 20 of 20 raised, and all 20 were stored."""
    schema = KeySchema(PREFIX, 1)
    c = make_collector(url=own_server.url, key_prefix=PREFIX, shards=1, mode="sync")
    c.collect("g", {"seq": -1})
    refusing(own_server, True)
    for i in range(9000):
        with pytest.raises(BackendRefused, match=r"not stored.*NOREPLICAS"):
            c.collect("g", {"refused": i})
    refusing(own_server, False)
    raised = []
    for seq in range(20):
        try:
            c.collect("g", {"seq": seq})
        except BackendError:
            raised.append(seq)
    assert raised == []
    admin = own_server.client()
    assert queue_events(admin, schema, "g") == [{"seq": s} for s in range(-1, 20)]
    assert stats_total(admin, schema, "stored") == 21
    stats = c.stats()
    assert (stats["accepted"], stats["stored"], stats["backend_errors"]) == (21, 21, 9000)


def test_many_games_through_a_long_refusal_are_stored_once(
    own_server: Server, make_collector: MakeCollector
) -> None:
    """400 games in 4 shards, every write refused for a while: each round puts the events
    back and numbers them anew, 100 numbers a shard a round, until the writer is thousands
    past what the shards remember.  Before: 31,600 collected, 125,200 in Redis at the
    flush, more three seconds later."""
    schema = KeySchema(PREFIX, 4)
    games = [f"game-{i}" for i in range(400)]
    c = make_collector(
        url=own_server.url,
        key_prefix=PREFIX,
        shards=4,
        flush_interval_ms=5,
        retry_max_delay_ms=10,
    )
    for game in games:
        c.collect(game, {"n": 0})
    assert c.flush(timeout=10)
    refusing(own_server, True)
    for game in games:
        c.collect(game, {"n": 1})
    # 90 rounds of 100 calls a shard: 9,000 numbers, more than unpack() took.
    wait_until(lambda: c.stats()["backend_errors"] >= 90, timeout=60, what="refused rounds")
    refusing(own_server, False)
    for game in games:
        c.collect(game, {"n": 2})
    assert c.flush(timeout=20)
    admin = own_server.client()
    assert all(queue_events(admin, schema, g) == [{"n": n} for n in range(3)] for g in games)
    assert stats_total(admin, schema, "stored") == 3 * len(games)
    stats = c.stats()
    assert stats["stored"] == 3 * len(games) and balanced(stats)
    # The writes the shards refused before they ran were no repeats: nothing else refused.
    assert (stats["refused_writes"], stats["refused_repeats"]) == (0, 0)


def test_the_memory_a_jump_leaves_is_the_new_range_only(
    own_server: Server, make_collector: MakeCollector
) -> None:
    schema = KeySchema(PREFIX, 1)
    keys = schema.for_game("g")
    c = make_collector(url=own_server.url, key_prefix=PREFIX, shards=1, mode="sync")
    for seq in range(10):
        c.collect("g", {"seq": seq})
    refusing(own_server, True)
    for _ in range(100):
        with pytest.raises(BackendRefused):
            c.collect("g", {"refused": True})
    refusing(own_server, False)
    c.collect("g", {"seq": 10})
    admin = own_server.client()
    fields = sorted(admin.hkeys(keys.writes))
    writer = fields[0]
    assert fields == [writer, writer + b":111"]  # the writer's range, and the one write
