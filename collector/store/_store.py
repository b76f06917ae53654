"""``Store``: the only code that talks to Redis.

Script calls go through ``call`` (one, raising) and ``call_many`` (many in few socket writes,
a result or an error each); reads return the views of ``_views``, read by ``_shard_reads``,
``_set_aside_reads`` and ``_deployment_reads``.  Every redis-py exception is translated into
``BackendUnavailable`` or ``BackendRefused`` here.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NoReturn, TypeVar

from redis.exceptions import RedisClusterException, RedisError, ResponseError

from collector._exceptions import BackendError, BackendUnreplicated, WriteRefused
from collector.store import _deployment_reads, _remembered, _set_aside_reads, _shard_reads
from collector.store._backends import Backend
from collector.store._bulk import WireCall
from collector.store._errors import WRITE_CONFLICT, MaybeRan, NotReplicated, translate
from collector.store._keys import KeySchema, ShardKeys, held_index
from collector.store._modes import describe_settings, open_backend
from collector.store._results import LiveReporters, text
from collector.store._script_call import ScriptCall
from collector.store._scripts import lua_script
from collector.store._settings import RedisSettings
from collector.store._shard_upkeep_calls import Heartbeat, ReadShard, SetAside
from collector.store._views import (
    Alert,
    BatchDetail,
    DeadBatch,
    GameState,
    MemoryUse,
    QuarantineRecord,
    Reporter,
    RingSlice,
    ShardLevels,
    ShardView,
)

R = TypeVar("R")
T = TypeVar("T")


class Store:
    """One deployment's keys (``schema``) on one backend (single server, cluster, ...)."""

    def __init__(self, backend: Backend, schema: KeySchema) -> None:
        self.backend = backend
        self.schema = schema
        self._server = backend.describe()

    def describe(self) -> str:
        """The backend's mode and URL, password masked."""
        return self._server

    def close(self) -> None:
        self.backend.close()

    def use_backend(self, backend: Backend) -> Backend:
        """Send every later call through ``backend`` (a stopping reporter's client with
        short timeouts); returns the one it replaces, still open for calls under way."""
        old, self.backend = self.backend, backend
        return old

    # -- scripts -----------------------------------------------------------------------------

    def call(self, request: ScriptCall[R]) -> R:
        """Run one script call; its typed result, or ``BackendError``
        (``BackendUnreplicated``, with the result, for a confirmed write too few replicas
        confirmed)."""
        [reply] = self._run([self._wire(request)], self._confirms((request,)))
        if isinstance(reply, Exception):
            raise self._error(request, reply) from reply
        return request.parse(reply)

    def call_many(self, requests: Sequence[ScriptCall[R]]) -> list[R | BackendError]:
        """Run script calls in as few socket writes as the backend allows; per request, its
        typed result or the ``BackendError`` it met (a call cut off by a broken connection,
        after ``[redis] retries`` more tries, may or may not have run)."""
        replies = self._run([self._wire(r) for r in requests], self._confirms(requests))
        return [
            self._error(request, reply) if isinstance(reply, Exception) else request.parse(reply)
            for request, reply in zip(requests, replies, strict=True)
        ]

    def _wire(self, request: ScriptCall[Any]) -> WireCall:
        """The EVALSHA of a request; a script that keeps receipts gets their lifetime last."""
        args = request.args()
        if request.receipt:
            args = (*args, self.backend.receipt_ms)
        return lua_script(request.script), request.keys(), args

    def _confirms(self, requests: Sequence[ScriptCall[Any]]) -> bool:
        """Whether the calls must be confirmed by ``[redis] wait_for_replicas`` replicas."""
        return bool(self.backend.wait_for_replicas) and any(r.confirmed for r in requests)

    def _error(self, request: ScriptCall[Any], reply: Exception) -> BackendError:
        said = reply.reply if isinstance(reply, MaybeRan) else reply
        if isinstance(said, ResponseError) and str(said).startswith(request.refusals):
            refused = WriteRefused(f"{self._server}: {said}", str(said).startswith(WRITE_CONFLICT))
            refused.__cause__ = said
            return refused
        error = translate(reply, self._server)
        if isinstance(reply, NotReplicated) and isinstance(error, BackendUnreplicated):
            error.result = request.parse(reply.reply)
        return error

    # -- reads -------------------------------------------------------------------------------

    def ring(
        self, shard: ShardKeys, after: str, count: int, known: Sequence[str] = ()
    ) -> RingSlice:
        """Up to ``count`` active games named after ``after`` ('' = from the first), and the
        states of the ``known`` games, in one round trip."""
        found = self._read(_shard_reads.ring, shard, after, count, known)
        if found.junk or found.wrong_type:  # junk in the registry: the scripts set it aside
            self.call(SetAside(shard, found.junk))
            found = self._read(_shard_reads.ring, shard, after, count, known)
        if found.legacy_ring:  # once per shard after an upgrade
            self._move_legacy_ring(shard)
            found = self._read(_shard_reads.ring, shard, after, count, known)
        return found

    def _move_legacy_ring(self, shard: ShardKeys) -> None:
        """Move the games of an older version's ring (a list) into the sorted set.  Plain
        commands (no MULTI: refused at maxmemory, and not on every backend): the names read
        are added, then trimmed off the list's head; a name an old SDK appended meanwhile
        stays for the next sweep, and Redis deletes the list once it is empty."""
        client = self.backend.client
        with self._translated():
            names: list[Any] = client.lrange(shard.legacy_ring, 0, -1)
            if names:
                client.zadd(shard.ring, {text(name): 0 for name in names})
            client.ltrim(shard.legacy_ring, len(names), -1)

    def game_states(self, shard: ShardKeys, games: list[str]) -> list[GameState]:
        return self._read(_shard_reads.game_states, shard, games)

    def read_shard(self, shard: ShardKeys) -> ShardView:
        return self._read(
            _shard_reads.read_shard, shard, lambda games: self.call(ReadShard(shard, games))
        )

    def read_shards(self) -> list[ShardView]:
        return [self.read_shard(shard) for shard in self.schema.all_shards()]

    def dead_batches(
        self, limit: int | None, *, game: str = "", before: float | None = None
    ) -> list[DeadBatch]:
        """Up to ``limit`` (None: all) of each shard's newest dead letters, oldest first; only
        those of ``game`` (its shard only is read) and dead before ``before`` (seconds since
        the epoch), when given."""
        shards = [self.schema.for_game(game)] if game else self.schema.all_shards()
        out = [
            b
            for shard in shards
            for b in self._read(_set_aside_reads.dead_batches, shard, limit, game, before)
        ]
        return sorted(out, key=lambda b: b.dead_at)

    def quarantine(self, limit: int = 10) -> list[QuarantineRecord]:
        """The newest ``limit`` records of each shard's quarantine, newest first overall."""
        return self._read(_set_aside_reads.quarantine, self.schema.all_shards(), limit)

    def quarantined(self, shard: ShardKeys, limit: int) -> list[QuarantineRecord]:
        """The newest ``limit`` records of one shard's quarantine, newest first."""
        return self._read(_set_aside_reads.quarantine, [shard], limit)

    def remembered(self) -> list[_remembered.Remembered]:
        """Each shard's remembered writes and dedup keys, counted (and the games' seen sets
        found by one SCAN): what ``status`` shows of the memory kept for repeats."""
        return self._read(_remembered.remembered, self.schema)

    def dead_listed(self, shards: Sequence[ShardKeys] | None = None) -> int:
        """Batches on the dead lists of ``shards`` (default: every shard), one LLEN per shard,
        pipelined."""
        return self._read(
            _set_aside_reads.dead_listed, self.schema.all_shards() if shards is None else shards
        )

    def counters(self) -> dict[str, int]:
        """Every shard's counters added up, and nothing else: cheap for many shards."""
        return self._read(_deployment_reads.counters, self.schema.all_shards())

    def find_batch(self, batch_id: str) -> ShardKeys | None:
        """The shard that has a batch with this id, if any."""
        client = self.backend.client
        for shard in self.schema.all_shards():
            with self._translated():
                if client.hexists(shard.batches, batch_id):
                    return shard
        return None

    def batch(self, shard: ShardKeys, batch_id: str) -> BatchDetail | None:
        return self._read(_set_aside_reads.batch_detail, shard, batch_id)

    # -- cheap reads for the metrics ---------------------------------------------------------

    def ping(self) -> None:
        """Return if Redis answers (every primary, on a cluster), else raise."""
        with self._translated():
            self.backend.client.ping()

    def counter_totals(self, shards: Sequence[ShardKeys] | None = None) -> dict[str, int]:
        """The counters of ``shards`` (default: every shard) added up, by name: one HGETALL
        per shard, pipelined (1,024 shards per pipeline); nothing else is read."""
        return self._read(
            _deployment_reads.counter_totals, self.schema.all_shards() if shards is None else shards
        )

    def shard_levels(self, shards: Sequence[ShardKeys], now_ms: int) -> list[ShardLevels]:
        """What ``shards`` hold now: games with their buffer length and oldest entry, and
        their batch counts; no batch metadata or payload is read (unlike ``read_shard``)."""
        return self._read(_shard_reads.shard_levels, shards, now_ms)

    def memory(self) -> list[MemoryUse]:
        """Each node's memory against its maxmemory (INFO memory and errorstats): the server,
        or every primary of a cluster."""
        return self._read(_deployment_reads.memory)

    def live_reporters(self) -> int:
        """Reporter processes in the registry whose heartbeat has not expired (by the
        server's clock, as the heartbeats are written)."""
        return self._read(_deployment_reads.live_reporters, self.schema.reporters)

    def server_ms(self) -> int:
        """The server's clock (TIME), in ms since the epoch: the clock of every coordination
        time the scripts keep (heartbeats, leases, holds)."""
        return self._read(_deployment_reads.server_ms)

    # -- the reporter registry ---------------------------------------------------------------

    def heartbeat(self, owner: str, lease_ms: int) -> LiveReporters:
        """Note ``owner`` alive for ``lease_ms`` from now (the server's clock), forget
        expired reporters; who is live."""
        return self.call(Heartbeat(self.schema.reporters, owner, lease_ms))

    def mark(self, shard: ShardKeys, identity: str) -> str:
        """Give ``shard`` the identity marker ``identity`` unless it has one; the marker it
        has now."""
        with self._translated():
            old = self.backend.client.set(shard.marker, identity, nx=True, get=True)
        return text(old) if isinstance(old, bytes | str) else identity

    def note_alert(self, name: str, message: str, now_ms: int) -> None:
        """Keep ``message`` under ``name`` for ``status``, counting how often it came."""
        key = self.schema.alerts
        record = json.dumps({"at": now_ms, "message": message})
        with self._translated(), self.backend.client.pipeline(transaction=False) as pipe:
            pipe.hset(key, name, record)
            pipe.hincrby(key, f"{name}#count", 1)
            pipe.execute()

    def alerts(self) -> list[Alert]:
        """What endpoints refused that only the operator can fix, newest first."""
        return self._read(_deployment_reads.alerts, self.schema.alerts)

    def held_scopes(self, hold: str, most: int = 1000) -> list[str]:
        """The scopes held now in the group of ``hold`` (a ``KeySchema.hold`` key), oldest
        first, at most ``most``."""
        return self._read(_deployment_reads.held_scopes, held_index(hold), most)

    def shard_owners(self) -> list[str]:
        """The reporter holding each shard's lease, by shard number ('' for none)."""
        return self._read(_deployment_reads.shard_owners, self.schema.all_shards())

    def reporters(self) -> list[Reporter]:
        """The reporter registry as it is, expired heartbeats included."""
        return self._read(_deployment_reads.reporters, self.schema.reporters)

    def leave(self, owner: str) -> None:
        with self._translated():
            self.backend.client.zrem(self.schema.reporters, owner)

    # -- plumbing ----------------------------------------------------------------------------

    # The hot paths catch inline: a generator-based context manager costs a few microseconds.
    def _run(self, calls: Sequence[WireCall], confirm: bool = False) -> list[Any]:
        try:
            return self.backend.run(calls, confirm)
        except Exception as exc:  # a failure of the whole bulk, not of one call
            self._reraise(exc)

    def _read(self, read: Callable[..., T], *args: Any) -> T:
        try:
            return read(self.backend.client, *args)
        except Exception as exc:
            self._reraise(exc)

    @contextmanager
    def _translated(self) -> Iterator[None]:
        try:
            yield
        except Exception as exc:
            self._reraise(exc)

    def _reraise(self, exc: Exception) -> NoReturn:
        """Raise the store's error for a redis-py exception, or ``exc`` itself."""
        if isinstance(exc, BackendError) or not _from_redis(exc):
            raise exc
        raise translate(exc, self._server) from exc


def open_store(settings: RedisSettings) -> Store:
    """A store for ``settings``: the backend of its deployment mode, its key schema.

    A cluster client asks a node for the slot map here: its errors are translated too (a
    server that is not a cluster node is ``BackendRefused``)."""
    schema = KeySchema(settings.key_prefix, settings.shards)
    try:
        backend = open_backend(settings)
    except Exception as exc:
        if isinstance(exc, BackendError) or not _from_redis(exc):
            raise
        raise translate(exc, describe_settings(settings)) from exc
    return Store(backend, schema)


def _from_redis(exc: Exception) -> bool:
    return isinstance(exc, RedisError | RedisClusterException | OSError)
