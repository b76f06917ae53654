"""Deployment-wide reads: counters added up, reporters, shard owners, alerts, memory."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from redis.cluster import RedisCluster
from redis.exceptions import ResponseError

if TYPE_CHECKING:
    from collector.store._backends import RedisClient

from collector.store._keys import ShardKeys
from collector.store._read_replies import (
    PIPELINE_SHARDS,
    as_count,
    as_text,
    execute,
    groups,
    seconds,
)
from collector.store._views import Alert, MemoryUse, Reporter
from collector.text import printable


def counters(client: RedisClient, shards: Sequence[ShardKeys], chunk: int = 1000) -> dict[str, int]:
    """The counters of ``shards`` added up: one HGETALL each, pipelined ``chunk`` shards at a
    time (no ring, no batch or game reads: cheap whatever the number of games)."""
    totals: dict[str, int] = {}
    for i in range(0, len(shards), chunk):
        with client.pipeline(transaction=False) as pipe:
            for keys in shards[i : i + chunk]:
                pipe.hgetall(keys.stats)
            _add_counters(totals, execute(pipe))
    return totals


def _add_counters(totals: dict[str, int], replies: list[Any]) -> None:
    for stats in replies:
        if isinstance(stats, ResponseError):  # not a hash: set aside by the next script
            continue
        for name, value in stats.items():
            key = as_text(name)
            totals[key] = totals.get(key, 0) + as_count(value)


def reporters(client: RedisClient, key: str) -> list[Reporter]:
    """Every reporter process in the registry, expired or not, the newest heartbeat first."""
    try:
        entries: list[Any] = client.zrange(key, 0, -1, desc=True, withscores=True)
    except ResponseError:  # not a sorted set: the next heartbeat sets it aside
        return []
    return [Reporter(printable(as_text(owner)), int(deadline)) for owner, deadline in entries]


def held_scopes(client: RedisClient, index: str, most: int) -> list[str]:
    """The first ``most`` scopes an index of holds lists (oldest hold first); none if the
    key is not a zset."""
    try:
        members: list[Any] = list(client.zrange(index, 0, most - 1))
        return [as_text(m) for m in members]
    except ResponseError:  # not a zset: the next hold call sets it aside
        return []


def alerts(client: RedisClient, key: str) -> list[Alert]:
    try:
        raw = {as_text(k): v for k, v in client.hgetall(key).items()}
    except ResponseError:  # not a hash: no alerts to show
        return []
    out: list[Alert] = []
    for name, value in raw.items():
        if name.endswith("#count"):
            continue
        try:
            record = json.loads(value)
        except ValueError:
            record = None
        if not isinstance(record, dict):
            record = {"message": f"(unreadable: {as_text(value)[:100]!r})"}
        out.append(
            Alert(
                printable(name),
                printable(str(record.get("message", ""))),
                seconds(record.get("at")),
                as_count(raw.get(f"{name}#count")),
            )
        )
    return sorted(out, key=lambda a: -a.at)


def counter_totals(client: RedisClient, shards: Sequence[ShardKeys]) -> dict[str, int]:
    """The shards' ``stats`` hashes added up: one HGETALL per shard, pipelined."""
    totals: dict[str, int] = {}
    for group in groups(shards, PIPELINE_SHARDS):
        with client.pipeline(transaction=False) as pipe:
            for keys in group:
                pipe.hgetall(keys.stats)
            _add_counters(totals, execute(pipe))
    return totals


def memory(client: RedisClient) -> list[MemoryUse]:
    """Each node's memory use: the server, or every primary of a cluster."""
    if isinstance(client, RedisCluster):
        cluster: Any = client  # redis-py leaves the node lookups untyped
        nodes = [(str(n.name), cluster.get_redis_connection(n)) for n in cluster.get_primaries()]
    else:
        nodes = [("", client)]  # named once connected (Sentinel finds the address then)
    out = []
    for known, node in nodes:
        info: dict[str, Any] = node.info("memory", "errorstats")
        name = known or _server_name(node)
        oom = info.get("errorstat_OOM") or {}
        out.append(
            MemoryUse(
                name,
                int(info.get("used_memory", 0)) - int(info.get("mem_not_counted_for_evict", 0)),
                int(info.get("maxmemory", 0)),
                str(info.get("maxmemory_policy", "")),
                int(oom.get("count", 0)) if isinstance(oom, dict) else 0,
            )
        )
    return out


def _server_name(client: Any) -> str:
    """``host:port`` (or the socket path) of a single server, or of the primary a Sentinel
    client found last."""
    pool: Any = client.connection_pool
    kwargs = pool.connection_kwargs
    if kwargs.get("path"):
        return str(kwargs["path"])
    host, port = kwargs.get("host"), kwargs.get("port")
    if host is None:
        host, port = getattr(pool, "master_address", None) or ("?", "?")
    return f"{host}:{port}"


def shard_owners(client: RedisClient, shards: Sequence[ShardKeys]) -> list[str]:
    """The lease holder of each shard ('' for none): one GET per shard, pipelined."""
    owners: list[str] = []
    for group in groups(shards, PIPELINE_SHARDS):
        with client.pipeline(transaction=False) as pipe:
            for keys in group:
                pipe.get(keys.owner)
            owners.extend(
                "" if o is None or isinstance(o, ResponseError) else printable(as_text(o))
                for o in execute(pipe)
            )
    return owners


def server_ms(client: RedisClient) -> int:
    """The server's TIME in ms (a cluster: one node's, as redis-py picks)."""
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def live_reporters(client: RedisClient, key: str) -> int:
    """Reporter processes whose heartbeat deadline is after the server's time now."""
    now_ms = server_ms(client)
    try:
        return int(client.zcount(key, f"({now_ms}", "+inf"))
    except ResponseError:  # not a sorted set: the next heartbeat sets it aside
        return 0
