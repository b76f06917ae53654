"""settle.lua: a batch answered item by item splits into delivered, refused (one dead letter
of their own) and retried (one new batch) in one atomic call; every event stays counted."""

from __future__ import annotations

import json

import pytest
import redis

from collector.store import BackendRefused, RetryState, entry_event
from reporter._monitoring.accounting import read_totals
from tests.support.lifecycle import LEASE_MS, Shard, new_token
from tests.support.scriptcalls import store_of


@pytest.fixture
def shard(r: redis.Redis) -> Shard:
    return Shard(r)


def seqs(entries: list[bytes]) -> list[int]:
    return [json.loads(entry_event(e))["seq"] for e in entries]


def payload(shard: Shard, batch_id: str) -> list[bytes]:
    blob = shard.r.hget(shard.keys.payloads, batch_id)
    return blob.split(b"\n") if blob else []


def reconciled(shard: Shard) -> None:
    totals = read_totals(store_of(shard.r, shard.schema))
    assert totals.unaccounted == 0


# (batch size, retry positions, refused positions): lengths 1, 64/64, 127/1, all refused,
# all retried, and a three-way split.
SPLITS = [
    (1, [], [0]),
    (1, [0], []),
    (128, list(range(64)), list(range(64, 128))),
    (128, [], list(range(127))),
    (128, [127], []),
    (128, [], list(range(128))),
    (128, list(range(128)), []),
    (10, [1, 3], [2, 7, 9]),
]


@pytest.mark.parametrize(
    ("size", "retry", "refused"), SPLITS, ids=[f"{n}-r{len(t)}-x{len(x)}" for n, t, x in SPLITS]
)
def test_a_split_is_accounted_exactly(
    shard: Shard, size: int, retry: list[int], refused: list[int]
) -> None:
    token = new_token()
    entries = shard.push("g", size)
    claimed = shard.claim("g", token)
    [(batch_id, batch_entries)] = claimed.batches
    assert batch_entries == entries
    reasons = [(p, f"bad item {p}") for p in refused]

    settled = shard.scripts.settle(
        shard.keys, batch_id, token, retry=retry, refused=reasons, reason="HTTP 200, items to retry"
    )

    delivered = size - len(retry) - len(refused)
    assert settled.delivered == delivered
    assert batch_id not in shard.inflight()
    assert shard.meta(batch_id) is None and payload(shard, batch_id) == []
    stats = shard.stats()
    assert stats.get("delivered", 0) == delivered
    assert stats.get("batches_delivered", 0) == int(delivered > 0)
    assert stats.get("rejected_items", 0) == len(refused)
    if refused:
        assert settled.refused_id == f"{batch_id}.x1"
        assert shard.dead() == [settled.refused_id]
        assert seqs(payload(shard, settled.refused_id)) == seqs([entries[p] for p in refused])
        meta = shard.meta(settled.refused_id)
        assert meta is not None
        assert (meta["n"], meta["a"], meta["g"]) == (len(refused), 1, "g")
        assert meta["ir"] == [reason for _, reason in reasons]
        assert (stats["dead_events"], stats["dead_batches"]) == (len(refused), 1)
    else:
        assert settled.refused_id == "" and shard.dead() == []
    if retry:
        assert (settled.retry_id, settled.retry_state) == (f"{batch_id}.r1", "retry")
        assert type(settled.retry_state) is RetryState
        assert list(shard.retry()) == [settled.retry_id]
        assert seqs(payload(shard, settled.retry_id)) == seqs([entries[p] for p in retry])
        meta = shard.meta(settled.retry_id)
        assert meta is not None
        assert (meta["n"], meta["a"], meta["t"]) == (len(retry), 1, "")
        assert stats["batches_retried"] == 1
        # the retry part is an ordinary batch: taken, sent, acked
        shard.make_due(settled.retry_id)
        again = new_token()
        [taken] = shard.scripts.take_retries(shard.keys, again, LEASE_MS, 10)
        assert (taken.batch_id, taken.attempts) == (settled.retry_id, 1)
        assert shard.scripts.ack(shard.keys, settled.retry_id, again) == len(retry)
    else:
        assert (settled.retry_id, settled.retry_state) == ("", "") and shard.retry() == {}
    reconciled(shard)


def test_stale_events_are_counted_and_kept_nowhere(shard: Shard) -> None:
    token = new_token()
    shard.push("g", 10)
    [(batch_id, _)] = shard.claim("g", token).batches
    settled = shard.scripts.settle(
        shard.keys, batch_id, token, stale=4, retry=[5], refused=[(6, "no")]
    )
    assert settled.delivered == 4
    stats = shard.stats()
    assert (stats["stale"], stats["delivered"], stats["rejected_items"]) == (4, 4, 1)
    reconciled(shard)


def test_the_retry_part_out_of_attempts_is_dead_lettered(shard: Shard) -> None:
    token = new_token()
    shard.push("g", 6)
    [(batch_id, _)] = shard.claim("g", token).batches
    settled = shard.scripts.settle(
        shard.keys,
        batch_id,
        token,
        retry=[0, 1],
        refused=[(2, "x")],
        max_attempts=1,
        reason="endpoint busy",
    )
    assert (settled.delivered, settled.retry_state) == (3, "dead")
    assert shard.dead() == [settled.retry_id, settled.refused_id]
    assert shard.meta(settled.retry_id)["r"] == "endpoint busy"  # type: ignore[index]
    stats = shard.stats()
    assert (stats["dead_events"], stats["dead_batches"], stats["rejected_items"]) == (3, 2, 1)
    assert "batches_retried" not in stats
    reconciled(shard)


def test_refused_items_are_replayable_like_any_dead_letter(shard: Shard) -> None:
    token = new_token()
    entries = shard.push("g", 5)
    [(batch_id, _)] = shard.claim("g", token).batches
    settled = shard.scripts.settle(shard.keys, batch_id, token, refused=[(1, "a"), (3, "b")])
    assert shard.scripts.replay(shard.keys, settled.refused_id) == (1, 2, 0)
    meta = shard.meta(settled.refused_id)
    assert meta is not None and "ir" not in meta and meta["a"] == 0
    again = new_token()
    [taken] = shard.scripts.take_retries(shard.keys, again, LEASE_MS, 10)
    assert seqs(taken.entries) == seqs([entries[1], entries[3]])
    assert shard.scripts.ack(shard.keys, taken.batch_id, again) == 2
    reconciled(shard)


def test_a_late_holder_settles_nothing(shard: Shard) -> None:
    token = new_token()
    shard.push("g", 4)
    [(batch_id, _)] = shard.claim("g", token).batches
    before = shard.snapshot()
    settled = shard.scripts.settle(shard.keys, batch_id, "someone-else", refused=[(0, "x")])
    assert settled.delivered == -1
    assert shard.snapshot() == before


@pytest.mark.parametrize(
    ("retry", "refused", "stale"),
    [
        ([4], [], 0),  # past the end
        ([0, 0], [], 0),  # twice
        ([1], [(1, "x")], 0),  # in both parts
        ([0, 1], [(2, "x")], 2),  # more than the batch with the stale ones
    ],
)
def test_impossible_splits_change_nothing(
    shard: Shard, retry: list[int], refused: list[tuple[int, str]], stale: int
) -> None:
    token = new_token()
    shard.push("g", 4)
    [(batch_id, _)] = shard.claim("g", token).batches
    before = shard.snapshot()
    with pytest.raises(BackendRefused, match="settle"):
        shard.scripts.settle(shard.keys, batch_id, token, retry=retry, refused=refused, stale=stale)
    assert shard.snapshot() == before
