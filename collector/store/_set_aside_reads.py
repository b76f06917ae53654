"""Reads of what was set aside: dead letters, one batch's detail, the shards' quarantine."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from redis.exceptions import ResponseError

if TYPE_CHECKING:
    from collector.store._backends import RedisClient

from collector.store._entries import split_entries
from collector.store._keys import ShardKeys
from collector.store._read_replies import (
    PIPELINE_SHARDS,
    as_count,
    as_text,
    batch_meta,
    execute,
    groups,
    seconds,
)
from collector.store._views import BatchDetail, DeadBatch, QuarantineRecord
from collector.text import printable


def dead_batches(
    client: RedisClient,
    keys: ShardKeys,
    limit: int | None,
    game: str = "",
    before: float | None = None,
    page: int = 1000,
) -> list[DeadBatch]:
    """The shard's newest dead letters, newest first: up to ``limit`` (None: all) of those of
    ``game`` (if set) that died before ``before`` (seconds since the epoch, if set)."""
    out: list[DeadBatch] = []
    seen: set[str] = set()  # a dead letter pushed meanwhile moves the rest down a place
    start = 0
    while limit is None or len(out) < limit:
        try:
            ids = client.lrange(keys.dead, start, start + page - 1)
        except ResponseError:  # not a list: the next script that writes it sets it aside
            break
        if not ids:
            break
        for batch in _dead_page(client, keys, ids):
            if (
                batch.batch_id in seen
                or (game and batch.game != game)
                or (before is not None and batch.dead_at >= before)
            ):
                continue
            seen.add(batch.batch_id)
            out.append(batch)
            if limit is not None and len(out) == limit:
                break
        start += page
    return out


def _dead_page(client: RedisClient, keys: ShardKeys, ids: list[Any]) -> list[DeadBatch]:
    out: list[DeadBatch] = []
    try:
        metas = client.hmget(keys.batches, ids)
    except ResponseError:  # not a hash: the next script that writes it sets it aside
        return out
    for batch_id, raw in zip(ids, metas, strict=True):
        if raw:
            meta = batch_meta(raw)
            if meta is None:  # shown for what it is; replay or purge set it aside
                out.append(
                    DeadBatch(
                        as_text(batch_id),
                        keys.shard,
                        "?",
                        0,
                        0,
                        "metadata that cannot be used",
                        0.0,
                    )
                )
                continue
            out.append(
                DeadBatch(
                    as_text(batch_id),
                    keys.shard,
                    printable(meta["g"]),
                    meta["n"],
                    meta["a"],
                    printable(str(meta.get("r", ""))),
                    seconds(meta.get("d")),
                )
            )
    return out


def dead_listed(client: RedisClient, shards: Sequence[ShardKeys], chunk: int = 1000) -> int:
    """Batches on the dead lists of ``shards``, pipelined ``chunk`` shards at a time."""
    total = 0
    for i in range(0, len(shards), chunk):
        with client.pipeline(transaction=False) as pipe:
            for keys in shards[i : i + chunk]:
                pipe.llen(keys.dead)
            total += sum(as_count(n) for n in execute(pipe))
    return total


def batch_detail(client: RedisClient, keys: ShardKeys, batch_id: str) -> BatchDetail | None:
    with client.pipeline(transaction=False) as pipe:
        pipe.hget(keys.batches, batch_id)
        pipe.hget(keys.payloads, batch_id)
        raw, payload = (None if isinstance(r, ResponseError) else r for r in execute(pipe))
    if raw is None:
        return None
    meta = batch_meta(raw)
    if meta is None:
        return BatchDetail(
            batch_id,
            keys.shard,
            "?",
            0,
            "metadata that cannot be used: " + printable(as_text(raw)[:200]),
            split_entries(payload),
            [],
        )
    reasons = meta.get("ir")
    return BatchDetail(
        batch_id,
        keys.shard,
        printable(meta["g"]),
        meta["a"],
        printable(str(meta.get("r", ""))),
        split_entries(payload),
        [printable(str(r)) for r in reasons] if isinstance(reasons, list) else [],
    )


def quarantine(
    client: RedisClient, shards: Sequence[ShardKeys], limit: int
) -> list[QuarantineRecord]:
    """The newest ``limit`` records of each shard's quarantine (one LRANGE per shard,
    pipelined), newest first."""
    out: list[QuarantineRecord] = []
    for group in groups(shards, PIPELINE_SHARDS):
        with client.pipeline(transaction=False) as pipe:
            for keys in group:
                pipe.lrange(keys.quarantine, 0, limit - 1)
            replies = execute(pipe)
        for keys, records in zip(group, replies, strict=True):
            if not isinstance(records, ResponseError):
                out += [_quarantined(keys, raw) for raw in records]
    return sorted(out, key=lambda q: -q.at)


def _quarantined(keys: ShardKeys, raw: bytes) -> QuarantineRecord:
    try:
        r = json.loads(raw.decode(errors="replace"))
    except ValueError:
        r = None
    if not isinstance(r, dict):
        r = {"k": keys.quarantine, "r": "a record that does not decode", "v": as_text(raw)}

    def field(name: str) -> str:
        value = r.get(name)
        return printable(value) if isinstance(value, str) else ""

    return QuarantineRecord(
        keys.shard,
        field("k"),
        field("f"),
        field("y"),
        field("r"),
        field("v"),
        as_count(r.get("n")),
        field("s"),
        seconds(r.get("at")),
    )
