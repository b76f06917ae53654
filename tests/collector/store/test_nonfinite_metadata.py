"""Batch metadata that decodes but cannot be written back: ``1e999`` is valid JSON that Lua's
cjson reads as infinity (``nan`` and ``-1e999`` likewise), and cjson refuses to encode it.
Each script that rewrites metadata must find that out before its first write: the batch goes
to the quarantine, counted, and the rest of the call is done; nothing ends half moved (a batch
in no list, out of the accounting)."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest

from collector.retry import MAX_RETRY_AFTER_SECONDS
from collector.store import (
    Nack,
    QuarantineRecord,
    Release,
    Replay,
    RetryPolicy,
    TakeRetries,
    script_text,
)
from reporter._commands.cli import main
from reporter._config import ReporterSettings, RetrySettings
from reporter._monitoring.accounting import read_totals
from tests.support.lifecycle import LEASE_MS, Shard, new_token
from tests.support.scriptcalls import store_of

POLICY = RetryPolicy(100, 1000, 3, 100)
# Raw JSON texts: the field holds a number cjson decodes as infinity or not-a-number.
NON_FINITE = {
    "1e999": "1e999",
    "-1e999": "-1e999",
    "nan": "nan",
    "-nan": "-nan",
}


@pytest.fixture
def shard(r: Any) -> Shard:
    return Shard(r, prefix="nonfinite")


def spoil(shard: Shard, batch: str, field: str, number: str) -> None:
    """Write ``field`` of the batch's metadata as the raw JSON number ``number``."""
    meta = shard.meta(batch)
    assert meta is not None
    meta[field] = "@@"
    shard.r.hset(shard.keys.batches, batch, json.dumps(meta).replace('"@@"', number))


def records(shard: Shard) -> list[QuarantineRecord]:
    return shard.scripts.store.quarantined(shard.keys, 100)


def unaccounted(shard: Shard) -> int:
    return read_totals(store_of(shard.r, shard.schema)).unaccounted


def set_aside(shard: Shard, batch: str, events: int) -> None:
    [record] = [q for q in records(shard) if q.field == batch]
    assert record.events == events
    assert shard.meta(batch) is None
    assert batch not in shard.inflight() and batch not in shard.retry()
    assert batch not in shard.dead()


@pytest.mark.parametrize("number", sorted(NON_FINITE))
@pytest.mark.parametrize("script", ["nack", "release"])
def test_a_held_batch_with_a_non_finite_time_is_set_aside(
    shard: Shard, script: str, number: str
) -> None:
    token = new_token()
    batch = shard.leased("g", 3, token)
    spoil(shard, batch, "c", NON_FINITE[number])
    request = (
        Nack(shard.keys, batch, token, POLICY, 0.5, False, 0, "HTTP 503")
        if script == "nack"
        else Release(shard.keys, batch, token)
    )
    result = shard.scripts.store.call(request)  # no error
    assert result in (False, 0) or getattr(result, "state", "") == "lost"
    set_aside(shard, batch, 3)
    assert shard.stats()["quarantined_events"] == 3
    assert unaccounted(shard) == 0


@pytest.mark.parametrize("field", ["c", "d"])
def test_due_retries_with_a_non_finite_time_are_set_aside_and_the_rest_taken(
    shard: Shard, field: str
) -> None:
    token = new_token()
    bad, good = shard.leased("g", 2, token), shard.leased("g", 3, token)
    for batch in (bad, good):
        shard.nack(batch, token)
    shard.make_due(bad, good)
    spoil(shard, bad, field, "1e999")
    taken = shard.scripts.store.call(TakeRetries(shard.keys, new_token(), LEASE_MS, 10))
    assert [b.batch_id for b in taken] == [good]
    set_aside(shard, bad, 2)
    assert unaccounted(shard) == 0


def test_expired_leases_with_a_non_finite_time_are_set_aside_and_the_rest_reaped(
    shard: Shard,
) -> None:
    token = new_token()
    bad, good = shard.leased("g", 2, token), shard.leased("g", 3, token)
    spoil(shard, bad, "c", "1e999")
    shard.expire(bad, good)
    assert shard.scripts.reap(shard.keys, 10, 5, 100) == (1, 0)
    assert list(shard.retry()) == [good]
    set_aside(shard, bad, 2)
    assert unaccounted(shard) == 0


def test_a_replay_of_every_dead_letter_sets_the_non_finite_ones_aside_and_replays_the_rest(
    shard: Shard,
) -> None:
    token = new_token()
    batches = [shard.leased("g", 2, token) for _ in range(8)]
    for batch in batches:
        shard.nack(batch, token, permanent=True)
    bad = batches[1::3]
    for batch in bad:
        spoil(shard, batch, "c", "1e999")
    good = [b for b in batches if b not in bad]
    replayed = shard.scripts.store.call(Replay(shard.keys, "", 1000))
    assert (replayed.batches, replayed.events) == (len(good), 2 * len(good))
    assert sorted(shard.retry()) == sorted(good)
    assert shard.dead() == []
    for batch in bad:
        set_aside(shard, batch, 2)
    assert "quarantined_events" not in shard.stats()  # dead letters: in dead_events already
    assert unaccounted(shard) == 0


def test_dead_replay_all_replays_every_good_dead_letter_beside_non_finite_ones(
    r: Any, redis_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The operator's command: ``dead replay --all`` over a shard whose dead list holds three
    letters with ``1e999`` among good ones.  It used to fail at the first of them after
    trimming its whole step off the list: the good letters of that step were lost."""
    shard = Shard(r, prefix="replayall")
    token = new_token()
    batches = [shard.leased("g", 1, token) for _ in range(30)]
    for batch in batches:
        shard.nack(batch, token, permanent=True)
    bad = [batches[0], batches[14], batches[29]]
    for batch in bad:
        spoil(shard, batch, "c", "1e999")
    config = tmp_path / "replay.toml"
    config.write_text(
        f'[redis]\nurl = "{redis_url}"\nkey_prefix = "replayall"\nshards = 1\n', encoding="utf-8"
    )
    code = main(["dead", "replay", "--all", "--config", str(config)])
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    assert out.startswith("replayed 27 batches (27 events)")
    good = [b for b in batches if b not in bad]
    assert sorted(shard.retry()) == sorted(good)
    for batch in bad:
        set_aside(shard, batch, 1)
    assert unaccounted(shard) == 0


def _hi(section: type, name: str) -> float:
    [found] = [f for f in dataclasses.fields(section) if f.name == name]
    return float(found.metadata["hi"])


def _lua_constant(name: str) -> int:
    match = re.search(rf"^local {name} = (\d+)", script_text("ack"), re.MULTILINE)
    assert match, name
    return int(match.group(1))


def test_the_bounds_the_scripts_check_hold_everything_the_settings_allow() -> None:
    """A record beyond these bounds is set aside as junk: no setting may make one."""
    assert _lua_constant("MAX_BATCH_EVENTS") == _hi(ReporterSettings, "batch_size")
    assert _lua_constant("MAX_CLAIM_BATCHES") == _hi(ReporterSettings, "max_batches_per_claim")
    assert _lua_constant("MAX_ATTEMPTS") == _hi(RetrySettings, "max_attempts")
    longest = _lua_constant("LONGEST_WAIT_MS")
    assert longest >= _hi(ReporterSettings, "lease_seconds") * 1000
    assert longest >= _hi(RetrySettings, "max_delay_ms")
    assert longest >= MAX_RETRY_AFTER_SECONDS * 1000
