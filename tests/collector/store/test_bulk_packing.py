"""The bulk path's packing (``collector.store._bulk``): a call's long argument (a collect call's
entries) goes to the socket beside the rest of its call packed, not copied into it; the bytes
on the wire are those redis-py packs, and a real server stores such calls byte for byte."""

from __future__ import annotations

import orjson
import pytest
import redis
from redis.connection import Connection

from collector.store import Collect, KeySchema, SingleServer, Store, encode_entry
from collector.store._bulk import APART_BYTES, _packed
from tests.support.stored import queue_entries

LONG = b"x" * (APART_BYTES + 1)


@pytest.mark.parametrize(
    "command",
    [
        ("EVALSHA", "0" * 40, 2, "k1", "k2", "g", 5, LONG, "", "w1", 0),  # in the middle
        ("EVALSHA", "0" * 40, 0, LONG),  # last
        (LONG, b"y" * APART_BYTES, LONG, 3, LONG),  # first, not long enough, one after another
        ("EVALSHA", "0" * 40, 1, "k", b"short", 1.5, -2),  # none: one chunk
    ],
)
def test_the_packed_bytes_are_those_redis_py_sends(command: tuple[object, ...]) -> None:
    chunks = _packed(command)
    assert b"".join(chunks) == b"".join(Connection().pack_command(*command))
    assert all(chunk is not LONG for chunk in chunks) == (LONG not in command)


def test_calls_with_long_entries_are_stored_byte_for_byte(r: redis.Redis) -> None:
    schema = KeySchema("bulk", 1)
    store = Store(SingleServer(r), schema)
    event = orjson.dumps({"pad": "p" * 100})
    calls = []
    for game, count in (("a", 1), ("b", 300), ("c", 1000), ("d", 2)):
        entries = [encode_entry(1_700_000_000_000 + i, event) for i in range(count)]
        calls.append(Collect(schema.for_game(game), game, entries, 10**6, 3600))
    assert len(b"\n".join(calls[1].entries)) > APART_BYTES
    replies = store.call_many(calls)
    assert [reply.evicted for reply in replies] == [0, 0, 0, 0]  # type: ignore[union-attr]
    for call in calls:
        assert queue_entries(r, schema, call.game) == list(call.entries)
