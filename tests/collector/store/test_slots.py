"""Every key of a collect call shares one hash slot; the collector runs on Redis Cluster."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster
from redis.connection import Connection
from redis.crc import key_slot

import collector.store._backends
from collector.store import Collect, KeySchema, validate_game
from tests.support.fixtures import MakeCollector
from tests.support.polling import wait_until
from tests.support.servers import Cluster
from tests.support.stored import queue_events, stats_total

NASTY_GAMES = [
    "a:b",
    "x/y",
    "g@h",
    "1.2-3",
    "a",
    "Z",
    "0",
    "-",
    "_",
    ".",
    ":",
    "@",
    "/",
    "q:other",
    "active",
    "ring",
    "stats",
    "::",
    "a//b",
    "telemetry:3",
    "x" * 128,
]
BAD_GAMES = [
    "a{b",
    "a}b",
    "{t:1}",
    "{}",
    "a b",
    " ",
    "",
    "x" * 129,
    "é",
    "ゲーム",
    "a\n",
    "a\tb",
    "a\x00b",
    "a,b",
    "a*b",
]
NOT_STR_GAMES: list[Any] = [5, None, b"game", 1.5, ("a",), ["a"], True]


def recording(calls: list[tuple[str, ...]]) -> Any:
    """``run_calls`` that remembers the keys of every call it runs."""
    real = collector.store._backends.run_calls

    def run(client: Any, batch: Sequence[tuple[Any, Sequence[str], Any]], *wait: int) -> Any:
        calls.extend(tuple(keys) for _, keys, _ in batch)
        return real(client, batch, *wait)

    return run


def one_slot(keys: Sequence[str]) -> int:
    slots = {key_slot(k.encode()) for k in keys}
    assert len(slots) == 1, f"keys span slots {slots}: {keys}"
    return slots.pop()


@pytest.mark.parametrize("game", NASTY_GAMES)
def test_valid_names_validate(game: str) -> None:
    assert validate_game(game) == game


@pytest.mark.parametrize("game", BAD_GAMES, ids=repr)
@pytest.mark.parametrize("mode", ["background", "sync"])
def test_invalid_names_raise_value_error(
    game: str, mode: str, make_collector: MakeCollector
) -> None:
    with pytest.raises(ValueError, match="invalid game name") as info:
        validate_game(game)
    assert not isinstance(info.value, TypeError)
    c = make_collector(url="redis://127.0.0.1:1/0", mode=mode)
    with pytest.raises(ValueError, match="invalid game name"):
        c.collect(game, {"a": 1})
    assert c.stats()["accepted"] == 0


@pytest.mark.parametrize("game", NOT_STR_GAMES, ids=repr)
@pytest.mark.parametrize("mode", ["background", "sync"])
def test_names_that_are_not_str_raise_type_error(
    game: Any, mode: str, make_collector: MakeCollector
) -> None:
    """A game name of the wrong type is a programming error of its own kind: TypeError,
    not ValueError (docs/sdk.md's Errors table says both)."""
    with pytest.raises(TypeError, match="game name must be a str") as info:
        validate_game(game)
    assert not isinstance(info.value, ValueError)
    c = make_collector(url="redis://127.0.0.1:1/0", mode=mode)
    with pytest.raises(TypeError, match="game name must be a str"):
        c.collect(game, {"a": 1})
    assert c.stats()["accepted"] == 0


def test_every_key_of_a_collect_call_shares_the_shard_slot(
    monkeypatch: pytest.MonkeyPatch, redis_url: str, r: redis.Redis, make_collector: MakeCollector
) -> None:
    calls: list[tuple[str, ...]] = []
    monkeypatch.setattr(collector.store._backends, "run_calls", recording(calls))
    c = make_collector(url=redis_url, mode="sync", key_prefix="slots", shards=16)
    for game in NASTY_GAMES:
        c.collect(game, {"g": game})
    assert len(calls) == len(NASTY_GAMES)

    schema = KeySchema("slots", 16)
    for game, keys in zip(NASTY_GAMES, calls, strict=True):
        shard = schema.for_game(game)
        assert one_slot(keys) == key_slot(shard.tag.encode())
        assert keys[0] == shard.queue(game)
        assert queue_events(r, schema, game) == [{"g": game}]


def test_server_computes_the_same_slot(cluster: Cluster) -> None:
    node = cluster.nodes[0].client()
    schema = KeySchema("telemetry", 16)
    for game in NASTY_GAMES:
        shard = schema.for_game(game)
        keys = [shard.queue(game), shard.active, shard.ring, shard.stats, shard.tag]
        server_slots = {node.execute_command("CLUSTER", "KEYSLOT", k) for k in keys}
        assert server_slots == {one_slot(keys)}


def test_shards_cover_more_than_one_cluster_node(cluster: Cluster) -> None:
    # sanity of the layout: the 16 shard tags do not all land on one node
    node = cluster.nodes[0].client()
    slots = {
        node.execute_command("CLUSTER", "KEYSLOT", s.tag)
        for s in KeySchema("telemetry", 16).all_shards()
    }
    per_node = 16384 // len(cluster.nodes)
    assert len({min(slot // per_node, len(cluster.nodes) - 1) for slot in slots}) > 1


@pytest.fixture
def cluster_client(cluster: Cluster) -> Any:
    client = RedisCluster.from_url(cluster.url, socket_timeout=5)
    yield client
    client.close()


@pytest.mark.parametrize("mode", ["background", "sync"])
def test_collector_on_cluster_stores_many_games(
    cluster: Cluster, cluster_client: Any, make_collector: MakeCollector, mode: str
) -> None:
    prefix = f"c{uuid.uuid4().hex[:8]}"
    games = [*NASTY_GAMES, *(f"game-{i}" for i in range(60))]
    c = make_collector(url=cluster.url, cluster=True, key_prefix=prefix, mode=mode)
    for i in range(5):
        for game in games:
            c.collect(game, {"game": game, "seq": i})
    assert c.flush(timeout=20)
    stats = c.stats()
    assert stats["backend_errors"] == 0
    assert stats["stored"] == stats["accepted"] == 5 * len(games)

    schema = KeySchema(prefix, 16)
    for game in games:
        assert queue_events(cluster_client, schema, game) == [
            {"game": game, "seq": i} for i in range(5)
        ]
    assert stats_total(cluster_client, schema, "stored") == 5 * len(games)
    for shard in schema.all_shards():
        for game in cluster_client.smembers(shard.active):
            assert schema.for_game(game.decode()) is shard


@pytest.mark.parametrize("bad_first", [False, True])
def test_cluster_failure_of_one_game_does_not_resend_the_others(
    cluster: Cluster,
    cluster_client: Any,
    make_collector: MakeCollector,
    monkeypatch: pytest.MonkeyPatch,
    bad_first: bool,
) -> None:
    """A refused call fails alone; the other games are stored exactly once.  The refusal: the
    calls of one game name a key in another slot (CROSSSLOT, refused before the script runs;
    junk in a key no longer makes a call fail, it is set aside)."""
    prefix = f"c{uuid.uuid4().hex[:8]}"
    schema = KeySchema(prefix, 16)
    keys_of = Collect.keys
    home = key_slot(schema.for_game("bad").tag.encode())
    elsewhere = next(
        k for k in (f"{{{prefix}:x{i}}}:x" for i in range(10)) if key_slot(k.encode()) != home
    )

    def astray(call: Collect) -> Sequence[str]:
        keys = keys_of(call)
        return (*keys[:-1], elsewhere) if call.game == "bad" else keys

    monkeypatch.setattr(Collect, "keys", astray)
    c = make_collector(
        url=cluster.url, cluster=True, key_prefix=prefix, flush_interval_ms=5, retry_max_delay_ms=10
    )
    order = ["bad", "good"] if bad_first else ["good", "bad"]
    for i in range(10):
        for game in order:
            c.collect(game, {"seq": i})
    wait_until(lambda: c.stats()["backend_errors"] >= 3, what="several failed rounds")

    assert queue_events(cluster_client, schema, "good") == [{"seq": i} for i in range(10)]
    stats = c.stats()
    assert stats["stored"] == 10
    assert stats["buffered"] == 10
    monkeypatch.setattr(Collect, "keys", keys_of)
    assert c.flush(timeout=10)
    assert queue_events(cluster_client, schema, "bad") == [{"seq": i} for i in range(10)]
    assert queue_events(cluster_client, schema, "good") == [{"seq": i} for i in range(10)]


def test_cluster_flush_is_one_write_per_node(
    cluster: Cluster,
    cluster_client: Any,
    make_collector: MakeCollector,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    prefix = f"c{uuid.uuid4().hex[:8]}"
    c = make_collector(url=cluster.url, cluster=True, key_prefix=prefix, flush_interval_ms=60_000)
    games = [f"game-{i}" for i in range(60)]
    for game in games:  # scripts loaded on every node
        c.collect(game, {"g": game})
    assert c.flush(timeout=10)
    ports: list[int] = []
    real = Connection.send_packed_command

    def counting(self: Connection, command: Any, check_health: bool = True) -> None:
        ports.append(self.port)
        real(self, command, check_health)

    monkeypatch.setattr(Connection, "send_packed_command", counting)
    for game in games:
        c.collect(game, {"g": game})
    assert c.flush(timeout=10)
    monkeypatch.undo()
    assert sorted(ports) == sorted({n.port for n in cluster.nodes})  # 16 shards over 3 nodes
    schema = KeySchema(prefix, 16)
    for game in games:
        assert queue_events(cluster_client, schema, game) == [{"g": game}] * 2


def test_calls_sent_to_the_wrong_node_are_rerouted_once(
    cluster: Cluster, cluster_client: Any, make_collector: MakeCollector
) -> None:
    """A stale slot map: every call first goes to a node that answers MOVED."""
    prefix = f"c{uuid.uuid4().hex[:8]}"
    c = make_collector(url=cluster.url, cluster=True, key_prefix=prefix, flush_interval_ms=60_000)
    client = c._get_writer().store.backend.client
    right = client.get_node_from_key

    def wrong(key: str) -> Any:
        good = right(key)
        return next(n for n in client.get_primaries() if n.name != good.name)

    client.get_node_from_key = wrong
    games = [f"game-{i}" for i in range(30)]
    for i in range(3):
        for game in games:
            c.collect(game, {"seq": i})
    assert c.flush(timeout=20)
    stats = c.stats()
    assert (stats["stored"], stats["backend_errors"]) == (90, 0)
    schema = KeySchema(prefix, 16)
    for game in games:
        assert [e["seq"] for e in queue_events(cluster_client, schema, game)] == [0, 1, 2]


def test_a_node_unreachable_on_the_fast_path_still_gets_its_events(
    cluster: Cluster,
    cluster_client: Any,
    make_collector: MakeCollector,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One call per round goes through redis-py's routing; nothing is stored twice."""
    prefix = f"c{uuid.uuid4().hex[:8]}"
    c = make_collector(
        url=cluster.url, cluster=True, key_prefix=prefix, flush_interval_ms=5, retry_max_delay_ms=10
    )

    def unreachable(client: Any, calls: list[Any], *wait: int) -> list[Any]:
        return [redis.ConnectionError("node unreachable (test)")] * len(calls)

    monkeypatch.setattr(collector.store._backends, "run_calls", unreachable)
    games = [f"game-{i}" for i in range(8)]
    for game in games:
        c.collect(game, {"g": game})
    assert c.flush(timeout=20)
    stats = c.stats()
    assert stats["stored"] == 8
    assert stats["backend_errors"] >= 1
    schema = KeySchema(prefix, 16)
    for game in games:
        assert queue_events(cluster_client, schema, game) == [{"g": game}]
