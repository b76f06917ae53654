"""A held sender's state in Redis (``hold.lua`` through ``SendHold``), on given Redis times:
who started it, whose turn it is to probe, a kick after a key change, the lift; and the
secret files that change under a running reporter."""

from __future__ import annotations

import logging
import uuid
from pathlib import Path

import pytest
import redis

from collector.store import Cluster as ClusterBackend
from collector.store import Hold, HoldOp, HoldState, KeySchema, NoteLate, Store
from reporter._logging import REDACT
from reporter._pacing.send_hold import Holds, SendHold, read_hold
from reporter._senders.outcome import KEY as KEY_SCOPE
from reporter._senders.outcome import Refusal
from reporter._senders.secrets import SecretFile
from reporter._sinks.base import HoldScope
from reporter._sinks.nppa.settings import read_key_file
from reporter._sinks.nppa.sink import NPPA_KEY, NppaSink
from tests.support.entries import make_config
from tests.support.scriptcalls import store_of
from tests.support.servers import Cluster

KEY = "{t:hold:nppa:app}:hold"
APP_SCOPE = HoldScope("", "app", "app app")
OLD = "0f1e2d3c4b5a69788796a5b4c3d2e1f0"
NEW = "aa" * 16


def call(
    client: redis.Redis,
    what: str,
    now_ms: int,
    interval_ms: int = 30_000,
    cause: str = "",
    game: str = "",
) -> tuple[int, int, int, int, str]:
    """(state: 0 not held, 1 held, 2 held and mine; since, probe_at, probes, cause)."""
    s = store_of(client).call(
        Hold(KEY, what, interval_ms, cause, "check it", game, 86_400_000, now_ms)
    )
    return (2 if s.mine else int(s.held)), s.since_ms, s.probe_at_ms, s.probes, s.cause


def test_one_caller_starts_a_hold_and_one_per_interval_probes(client: redis.Redis) -> None:
    assert call(client, "read", 1000)[0] == 0
    assert call(client, "probe", 1000)[0] == 0  # nothing held: nobody probes
    assert call(client, "hold", 1000, cause="nppa 1011", game="farm") == (
        2,
        1000,
        31_000,
        0,
        "nppa 1011",
    )
    # a second reporter meets it too: not the one that started it; the latest cause is kept
    assert call(client, "hold", 1500, cause="nppa 1005") == (1, 1000, 31_000, 0, "nppa 1005")
    assert call(client, "probe", 30_999)[0] == 1  # not yet anybody's turn
    assert call(client, "probe", 31_000) == (2, 1000, 61_000, 1, "nppa 1005")
    assert call(client, "probe", 31_001)[0] == 1  # the turn was taken: the next in 30 s
    assert call(client, "kick", 40_000)[2] == 40_000  # a new key: probe now
    assert call(client, "probe", 40_001) == (2, 1000, 70_001, 2, "nppa 1005")
    assert call(client, "probe", 40_002)[0] == 1
    assert call(client, "turn", 40_003) == (2, 1000, 70_003, 3, "nppa 1005")  # my key changed
    assert call(client, "lift", 41_000)[0] == 2
    assert call(client, "lift", 41_001)[0] == 0  # lifted once
    assert call(client, "read", 41_002)[0] == 0
    assert call(client, "kick", 41_003)[0] == 0  # no hold is started by a kick


def test_a_hold_nobody_touches_is_forgotten(client: redis.Redis) -> None:
    store_of(client).call(Hold(KEY, "hold", 1000, "nppa 1011", "", "", 60_000, None))
    assert 0 < int(client.pttl(KEY)) <= 60_000


REFUSAL = Refusal("nppa 1011", "identity check failed: check [nppa] secret_key")


def test_the_mirror_follows_redis_and_logs_once(
    client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    store = store_of(client, KeySchema("t", 1))
    first = SendHold(store, "nppa:app", APP_SCOPE, 30.0)
    second = SendHold(store, "nppa:app", APP_SCOPE, 30.0)
    with caplog.at_level(logging.INFO, logger="reporter"):
        first.begin(REFUSAL, "farm")
        assert first.held and not second.held  # the second learns at its next refresh
        held = read_hold(store, "nppa:app")  # cause and check kept apart, as met
        assert (held.cause, held.check) == (REFUSAL.cause, REFUSAL.check)
        assert second.refresh().held and second.held
        second.begin(REFUSAL, "farm")
        turn = second.take_turn()
        assert turn.mine  # the first probe is due at once (a batch's own refusal?)
        assert not first.take_turn().mine  # then one a probe interval
        second.probe_now()
        assert second.take_turn().mine and not first.take_turn().mine
        first.lift("a probe was answered 3002")
        assert not first.held and not second.refresh().held
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "nppa 1011" in errors[0].getMessage()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1  # the second saw it held
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert any("resumed" in m for m in infos)
    status = read_hold(store, "nppa:app")
    assert not status.held


def test_a_hold_call_takes_only_an_operation_of_the_script() -> None:
    assert Hold(KEY, "probe").what is HoldOp.PROBE
    with pytest.raises(ValueError, match="'hodl' is not a valid HoldOp"):
        Hold(KEY, "hodl")


# -- secret files ------------------------------------------------------------------------------


def test_a_key_file_is_read_again_when_it_changes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "key"
    path.write_text(f"  {OLD}\n")
    path.chmod(0o600)
    key = SecretFile(NPPA_KEY, str(path), read_key_file)
    seen: list[str] = []
    key.subscribe(lambda: seen.append(key()))
    assert key() == OLD and key.poll() is None  # unchanged: not even parsed again
    assert OLD in REDACT._secrets
    path.write_text(NEW)
    assert key.poll() is None and key() == OLD  # a change is taken once two looks agree
    found = key.poll()
    assert found is not None and found.changed and key() == NEW and seen == [NEW]
    assert NEW in REDACT._secrets
    with caplog.at_level(logging.ERROR, logger="reporter"):
        path.write_text("not a key")
        assert key.poll() is None
        bad = key.poll()
        assert bad is not None and not bad.changed and "32 hex characters" in bad.problem
        assert key() == NEW  # the key in use is kept
        assert key.poll() is None  # the same bad content: no second ERROR
        path.unlink()
        gone = key.reread()
        assert "cannot read" in gone.problem and key() == NEW
    messages = "\n".join(r.getMessage() for r in caplog.records)
    assert messages.count("[nppa] secret_key_file") == 2
    assert OLD not in messages and NEW not in messages
    path.write_text(NEW + "\n")
    assert key.reread().describe() == "[nppa] secret_key_file (unchanged)"


def test_the_hold_and_the_audit_list_work_on_a_cluster(cluster: Cluster) -> None:
    config = make_config(cluster.url, redis={"cluster": True})
    backend = ClusterBackend.from_settings(config.redis)
    try:
        schema = KeySchema(f"h{uuid.uuid4().hex[:8]}", 16)  # the cluster is shared
        store = Store(backend, schema)
        hold = SendHold(store, "nppa:app", APP_SCOPE, 30.0)
        hold.begin(Refusal("nppa 1005", "this host's IP is not allowed: register it"), "farm")
        assert read_hold(store, "nppa:app").cause == "nppa 1005"
        hold.lift("fixed")
        assert not read_hold(store, "nppa:app").held
        for shard in (schema.shard(0), schema.shard(9)):
            kept = [store.call(NoteLate(shard, 2, f'{{"n":{n}}}', 3)) for n in range(5)]
            assert kept == [1, 2, 3, 3, 3]  # bounded: the oldest records go
        totals = store.counter_totals()
        assert (totals["late_sent"], totals["late_records_trimmed"]) == (20, 4)  # 2 a shard
        assert backend.client.lrange(schema.shard(9).late, 0, -1) == [
            b'{"n":4}',
            b'{"n":3}',
            b'{"n":2}',
        ]
    finally:
        backend.close()


# -- scopes: the group's index, and a batch that draws its own refusal ---------------------------

GROUP = "{t:hold:nppa:app}"


def scoped(
    client: redis.Redis,
    scope: str,
    what: str,
    now_ms: int,
    cause: str = "nppa 1012",
    batch: str = "",
    window_ms: int = 600_000,
) -> HoldState:
    key = f"{GROUP}:hold" + (f":{scope}" if scope else "")
    return store_of(client).call(
        Hold(
            key,
            what,
            30_000,
            cause,
            "check it",
            "farm",
            86_400_000,
            now_ms,
            scope=scope,
            batch=batch,
            window_ms=window_ms,
        )
    )


def test_the_held_scopes_of_a_group_are_listed_oldest_first_and_dropped_once_lifted(
    client: redis.Redis,
) -> None:
    store = store_of(client, KeySchema("t", 1))
    first = store.schema.hold("nppa:app")
    assert store.held_scopes(first) == []
    scoped(client, "game:farm", "hold", 1000, "nppa 1010")
    scoped(client, "", "hold", 2000, "nppa 1005")
    scoped(client, "game:farm", "hold", 3000, "nppa 1010")  # already held: stays first
    assert store.held_scopes(first) == ["game:farm", ""]
    assert scoped(client, "game:farm", "lift", 4000).mine
    assert store.held_scopes(first) == [""]
    assert not scoped(client, "game:farm", "read", 4001).held
    client.zadd(f"{GROUP}:holds", {"game:gone": 1})  # a hold that expired unread
    assert not scoped(client, "game:gone", "read", 4002).held
    assert store.held_scopes(first) == [""]  # a read of a scope not held drops it


def test_a_batch_that_meets_its_refusal_again_after_a_passing_probe_is_poison(
    client: redis.Redis,
) -> None:
    started = scoped(client, "key:app:f1", "hold", 1000, batch="b-poison")
    assert started.mine and not started.poison
    scoped(client, "key:app:f1", "hold", 1100, batch="b-other")  # in flight meanwhile
    assert scoped(client, "key:app:f1", "lift", 31_000).mine  # a probe passed
    again = scoped(client, "key:app:f1", "hold", 31_500, batch="b-poison")
    assert again.poison and not again.held  # nothing is held: the batch is the cause
    assert not scoped(client, "key:app:f1", "read", 31_501).held
    # once only: the same batch later (a replay) starts a hold like any other
    assert scoped(client, "key:app:f1", "hold", 31_600, batch="b-poison").mine
    assert scoped(client, "key:app:f1", "lift", 61_000).mine
    # another cause than the one it drew says nothing about the batch: it holds
    assert scoped(client, "key:app:f1", "hold", 61_100, "nppa 1011", batch="b-other").mine


def test_a_suspect_is_forgotten_after_the_window_and_never_poison_while_held(
    client: redis.Redis,
) -> None:
    scoped(client, "", "hold", 1000, batch="b-1")
    held = scoped(client, "", "hold", 2000, batch="b-1")  # still held: no probe passed yet
    assert held.held and not held.poison
    scoped(client, "", "lift", 31_000, window_ms=10_000)
    late = scoped(client, "", "hold", 41_001, batch="b-1", window_ms=10_000)
    assert late.mine and not late.poison  # the lift was too long ago to tell


def test_one_app_s_key_held_holds_its_games_only_and_the_reporter_can_still_send(
    client: redis.Redis,
) -> None:
    """A reporter of two apps whose second app's key is refused: that app's game is held,
    the first app's is not, and the reporter keeps its shards (it can still send the first
    app); only when every app's key is refused can it send nothing."""
    sink = NppaSink(
        make_config(
            "redis://127.0.0.1:1/0",
            sink={"kind": "nppa"},
            nppa={
                "app_id": "app-1",
                "secret_key": OLD,
                "apps": {"second": {"app_id": "app-2", "secret_key": NEW}},
            },
            games={"farm": {"biz_id": "11"}, "kart": {"biz_id": "22", "app": "second"}},
        )
    )
    holds = Holds(store_of(client), sink.hold(), sink, "reporter-1")
    assert holds.begin("kart", Refusal("nppa 1011", "check the key", KEY_SCOPE)).held
    assert holds.blocked("kart") is not None
    assert holds.blocked("farm") is None
    assert not holds.cannot_send() and not holds.stalled()
    assert holds.begin("farm", Refusal("nppa 1011", "check the key", KEY_SCOPE)).held
    assert holds.cannot_send() and holds.stalled()
