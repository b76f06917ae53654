"""What the shards remember to answer repeats, for ``status``: the SDK's writes they applied
(``lua/_written_once.lua``) and the games' dedup keys, counted, with the memory they take.

Both are bounded where they are written: a writer's writes are let go once answered and the
writer is forgotten ``WRITES_REMEMBERED_MS`` after its latest write (at most
``WRITERS_PER_SHARD`` writers a shard, ``WRITES_PER_WRITER`` writes each); a dedup key leaves
at the end of its game's window (at most ``DEDUP_KEYS_PER_GAME`` a game).  Reading them
costs a count per key (HLEN, ZCARD) and one SCAN of the keyspace for the games' ``seen``
sets (a game with no buffered events may still hold keys for the window), never the entries.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from redis.exceptions import ResponseError

if TYPE_CHECKING:
    from collector.store._backends import RedisClient

from collector.store._keys import KeySchema
from collector.store._read_replies import PIPELINE_SHARDS, as_count, as_text, execute, groups

# Bytes Redis takes per entry, as measured (docs/benchmarks.md, "Dedup keys: what they
# cost"): a dedup key of about 36 bytes in a game's seen set; a field of a shard's writes
# hash (a remembered write, or a writer's range) and a writer in the writers set, where there
# are many (hash tables and skiplists: small ones take less).  Estimates, not a measurement.
DEDUP_KEY_BYTES = 140
WRITE_RECORD_BYTES = 110
WRITER_BYTES = 120
SCAN_COUNT = 1000


@dataclass(frozen=True, slots=True)
class Remembered:
    """One shard's memory for repeats: ``write_records`` fields of its writes hash (each
    remembered write, and each writer's range), ``writers`` in its writers set, and
    ``dedup_keys`` over ``dedup_games`` games' seen sets."""

    shard: int
    write_records: int
    writers: int
    dedup_keys: int
    dedup_games: int

    @property
    def writes(self) -> int:
        """Writes remembered: the write records less the writers' own ranges."""
        return max(0, self.write_records - self.writers)

    @property
    def estimated_bytes(self) -> int:
        return (
            self.write_records * WRITE_RECORD_BYTES
            + self.writers * WRITER_BYTES
            + self.dedup_keys * DEDUP_KEY_BYTES
        )


def remembered(client: RedisClient, schema: KeySchema) -> list[Remembered]:
    """Every shard's remembered writes and dedup keys (see ``Remembered``)."""
    shards = schema.all_shards()
    counts: list[tuple[int, int]] = []
    for group in groups(shards, PIPELINE_SHARDS):
        with client.pipeline(transaction=False) as pipe:
            for keys in group:
                pipe.hlen(keys.writes)
                pipe.zcard(keys.writers)
            replies = execute(pipe)
        counts += [
            (as_count(replies[2 * i]), as_count(replies[2 * i + 1])) for i in range(len(group))
        ]
    keys_by_shard, games_by_shard = _dedup_keys(client, schema)
    return [
        Remembered(
            k.shard, writes, writers, keys_by_shard.get(k.shard, 0), games_by_shard.get(k.shard, 0)
        )
        for k, (writes, writers) in zip(shards, counts, strict=True)
    ]


def _dedup_keys(client: RedisClient, schema: KeySchema) -> tuple[dict[int, int], dict[int, int]]:
    """Dedup keys and games holding them, by shard: the seen sets found by SCAN (every
    primary of a cluster), each counted by ZCARD."""
    seen = re.compile(rf"\{{{re.escape(schema.prefix)}:(\d+)\}}:seen:")
    found: list[tuple[int, Any]] = []
    for key in client.scan_iter(match=f"{{{schema.prefix}:*}}:seen:*", count=SCAN_COUNT):
        match = seen.match(as_text(key))
        if match and int(match.group(1)) < schema.shards:  # another deployment's: not ours
            found.append((int(match.group(1)), key))
    keys: dict[int, int] = {}
    games: dict[int, int] = {}
    for group in groups(found, PIPELINE_SHARDS):
        with client.pipeline(transaction=False) as pipe:
            for _, key in group:
                pipe.zcard(key)
            replies = execute(pipe)
        for (shard, _), n in zip(group, replies, strict=True):
            if isinstance(n, ResponseError) or not as_count(n):  # junk, or gone meanwhile
                continue
            keys[shard] = keys.get(shard, 0) + as_count(n)
            games[shard] = games.get(shard, 0) + 1
    return keys, games


def remembered_totals(shards: Sequence[Remembered]) -> dict[str, int]:
    """The shards' memory for repeats added up, for ``status --json``."""
    return {
        "remembered_writes": sum(r.writes for r in shards),
        "remembered_writers": sum(r.writers for r in shards),
        "dedup_keys": sum(r.dedup_keys for r in shards),
        "dedup_games": sum(r.dedup_games for r in shards),
        "remembered_bytes_estimate": sum(r.estimated_bytes for r in shards),
    }
