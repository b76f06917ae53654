"""The SDK object: ``Collector.collect()`` on the caller's hot path, a flusher thread behind it."""

from __future__ import annotations

import atexit
import dataclasses
import logging
import os
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from collector._buffer import EventBuffer
from collector._config import TelemetryConfig, build_config, load_config
from collector._config_loader import raw_settings
from collector._constants import FLUSH_SOON_EVENTS, KNOWN_GAMES_LIMIT
from collector._dedup import Dedup
from collector._exceptions import (
    BackendError,
    BackendUnconfirmed,
    BackendUnreplicated,
    BufferFull,
)
from collector._flusher import Flusher, Rounds, reason
from collector._json_events import check_events
from collector._on_error import ErrorReport, OnError, check_callback
from collector._one_value import NOT_ONE_VALUE, ONE_VALUE, check_one_value, check_utf8
from collector._writer import Writer
from collector.counters import SDK, SDK_GAUGES, Counter, Gauge
from collector.logs import RateLimitedLog, counted
from collector.metrics import NO_METRICS, Metrics, Tally, fan_out
from collector.store import Store, describe_settings, open_store, time_prefix, validate_game

logger = logging.getLogger("collector")
# The config source of keyword arguments given to Collector().
ARGUMENTS_SOURCE = "Collector() arguments"


_live: weakref.WeakSet[Collector] = weakref.WeakSet()

# The entry prefix of the current millisecond, formatted once per millisecond: one tuple, so
# a thread never pairs one millisecond with another's text.
_prefix: tuple[int, bytes] = (0, b"")


def _time_prefix() -> bytes:
    global _prefix
    ms = time.time_ns() // 1_000_000
    cached = _prefix
    if cached[0] == ms:
        return cached[1]
    text = time_prefix(ms)
    _prefix = (ms, text)
    return text


# Keyword arguments of Collector() and the config section each one sets.
_KEYWORDS = {
    "url": "redis",
    "cluster": "redis",
    "key_prefix": "redis",
    "shards": "redis",
    "socket_timeout_seconds": "redis",
    "connect_timeout_seconds": "redis",
    "sentinels": "redis",
    "sentinel_service": "redis",
    "sentinel_password": "redis",
    "wait_for_replicas": "redis",
    "wait_timeout_ms": "redis",
    "mode": "collector",
    "max_buffer_events": "collector",
    "max_buffer_bytes": "collector",
    "flush_interval_ms": "collector",
    "close_timeout_seconds": "collector",
    "retry_max_delay_ms": "collector",
    "sync_resend_seconds": "collector",
    "disabled": "collector",
    "max_events_per_game": "buffer",
    "ttl_seconds": "buffer",
    "max_event_bytes": "buffer",
    "dedup_fields": "buffer",
    "dedup_window_seconds": "buffer",
}


class Collector:
    """Buffers game events and stores them in Redis.

    ``Collector(url="redis://host:6379/0")`` starts from the built-in defaults and applies the
    keyword arguments; ``Collector.from_config()`` reads the config file and environment.
    In the default ``"background"`` mode ``collect()`` never touches the network: it appends to
    a bounded in-process buffer that a flusher thread writes to Redis.  In ``"sync"`` mode it
    writes in the caller's thread and returns how many old events the cap evicted.  With
    ``disabled=True`` it validates and counts, and nothing is sent (tests, local runs).

    ``on_error(error, count)``, if given, hears of failed writes (``BackendError``) and lost
    events (``EventsDropped``) off the hot path; see ``collector._on_error``.
    """

    def __init__(
        self,
        *,
        config: TelemetryConfig | None = None,
        store: Store | None = None,
        metrics: Metrics = NO_METRICS,
        on_error: OnError | None = None,
        **settings: Any,
    ) -> None:
        base = config or TelemetryConfig.default()
        if settings:
            raw = raw_settings(base)
            for key, value in settings.items():
                if key not in _KEYWORDS:
                    raise TypeError(
                        f"Collector() got an unexpected keyword argument {key!r}; "
                        f"expected one of {', '.join(_KEYWORDS)}"
                    )
                raw[_KEYWORDS[key]][key] = value
            source = base.source
            base = build_config(raw, ARGUMENTS_SOURCE, env={}, interpolate=False, cls=type(base))
            base = dataclasses.replace(base, source=f"{ARGUMENTS_SOURCE} over {source}")
        self.config = base
        self._server = store.describe() if store is not None else describe_settings(base.redis)
        self._disabled = base.collector.disabled
        # collect() finishes in the caller's thread: stores (sync mode) or discards (disabled).
        self._direct = self._disabled or base.collector.mode == "sync"
        self._on_error = check_callback(on_error)
        self._max_event_bytes = base.buffer.max_event_bytes
        self._dedup = Dedup(base)
        self._dedup_fields = self._dedup.configured  # read on the hot path
        self._buffer = EventBuffer(
            base.collector.max_buffer_events, base.collector.max_buffer_bytes
        )
        self._known_games: set[str] = set()
        self._store = store
        self._writer: Writer | None = None
        self._closing = threading.Event()
        self._closed = False
        self._metrics = metrics
        self._new_flusher()
        _live.add(self)

    @classmethod
    def from_config(cls, path: str | None = None, **settings: Any) -> Collector:
        """Build from ``path``, else ``$TELEMETRY_CONFIG``, else the packaged default,
        with ``TELEMETRY_<SECTION>_<KEY>`` environment overrides applied."""
        return cls(config=load_config(path), **settings)

    @property
    def config_source(self) -> str:
        """Where the settings came from: a file's path, ``<packaged telemetry.toml>`` (no
        path and no ``$TELEMETRY_CONFIG``), ``<defaults>`` (``Collector()``), or
        ``Collector() arguments over`` one of those.  ``TELEMETRY_<SECTION>_<KEY>``
        overrides apply to a file or the packaged default."""
        return self.config.source

    # -- the hot path -------------------------------------------------------------------------

    def collect(self, game: str, event: Mapping[str, Any], dedup_key: str | None = None) -> int:
        """Record one event of ``game``.

        With ``dedup_key`` (or, without, the values of the game's ``[buffer] dedup_fields``
        in the event), the event is not stored if an event of the same game with the same
        key was stored within ``[buffer] dedup_window_seconds``: it is counted as ``merged``
        (the first one wins; not an error, not a drop).

        Raises ``TypeError`` for a game name that is not a str, ``ValueError`` for a str that
        is not a valid game name, and ``TypeError`` for an event that is not a
        JSON-serialisable mapping, whose JSON would span lines (raw JSON passed through
        ``orjson.Fragment`` with a newline in it: it could forge entries) or is not exactly
        one JSON value (a fragment that is not one value: it could forge the body's
        envelope); ``TypeError`` for
        a ``dedup_key`` that is not a str and ``ValueError`` for an empty one.  Returns the
        number of events the cap evicted in sync mode, 0 in background mode (where nothing
        about Redis is known yet).
        """
        if type(game) is not str or game not in self._known_games:  # a list is unhashable
            self._admit(game)
        if type(event) is not dict:  # the common case skips the slower ABC check
            event = _as_dict(game, event)
        try:
            data = orjson.dumps(event)
        except TypeError as exc:
            raise TypeError(f"event for game {game!r} is not JSON-serialisable: {exc}") from None
        if (
            len(data) > self._max_event_bytes or 10 in data or not data.isascii()
        ) and self._refused(game, data):
            return 0  # 10: b"\n"
        try:  # a fragment could forge the reporter's envelope: see collector._one_value
            ONE_VALUE.decode(data)
        except NOT_ONE_VALUE:
            check_one_value(game, data)
        entry = _time_prefix() + data
        if dedup_key is not None or self._dedup_fields:
            entry = self._dedup.keyed(game, event, dedup_key, entry)
        if self._direct:
            return self._collect_direct(game, [entry])
        waiting = self._buffer.append(game, entry)  # refused (-1) once close() has finished
        if waiting == FLUSH_SOON_EVENTS or waiting < 0 or not self._flushing:
            return self._appended(game, waiting)
        return 0

    def collect_json(self, game: str, events: Sequence[bytes]) -> int:
        """Record events of ``game`` given as JSON text: all of them, or none.

        Each event is the UTF-8 JSON of one object, on one line, at most ``[buffer]
        max_event_bytes`` (what ``collect()`` makes of a dict), as ``bytes``.  Nothing is
        taken unless every event passes: ``InvalidEvent`` (a ``ValueError``) names the first
        that does not (``index``, ``reason``); an item that is not bytes is a ``TypeError``,
        and the game name is checked as ``collect()`` checks it.  ``[buffer] dedup_fields``
        apply as in ``collect()``.

        In background mode the events are taken only if they all fit in the buffer beside
        the events waiting there and those being written: otherwise ``BufferFull``, and
        nothing is taken or dropped (try again once the flusher has caught up).  In sync mode
        they are stored before it returns (``BackendError`` if they could not be).  Returns
        the number of events taken: ``len(events)``, or 0 after ``close()`` (counted as
        ``dropped_closed``, as ``collect()`` counts them).
        """
        if type(game) is not str or game not in self._known_games:
            self._admit(game)
        count = len(events)
        if not count:
            return 0
        check_events(game, events, self._max_event_bytes)
        prefix = _time_prefix()
        entries = [prefix + data for data in events]
        if self._dedup_fields and self._dedup.fields_for(game):
            entries = [
                self._dedup.keyed(game, orjson.loads(data), None, entry)
                for data, entry in zip(events, entries, strict=True)
            ]
        if self._direct:
            if self._closed:
                return self._drop_closed(game, count)
            self._collect_direct(game, entries)
            return count
        waiting = self._buffer.append_all(game, entries)
        if waiting == 0:
            raise BufferFull(
                f"no room in the buffer for {count} events of game {game!r} ([collector] "
                f"max_buffer_events = {self._buffer.limit}, max_buffer_bytes = "
                f"{self.config.collector.max_buffer_bytes}, counting the events being "
                "written); none taken"
            )
        self._appended(game, waiting, count)
        return count if waiting > 0 else 0

    def _appended(self, game: str, waiting: int, count: int = 1) -> int:
        """After an append of ``count`` events that has the flusher to wake (the waiting
        events reached ``FLUSH_SOON_EVENTS``) or start, or that the closed buffer refused."""
        if waiting < 0:
            return self._drop_closed(game, count)
        if waiting >= FLUSH_SOON_EVENTS > waiting - count:
            self._wake.set()
        if not self._flushing:
            self._start()
        return 0

    def _drop_closed(self, game: str, count: int = 1) -> int:
        self._counts.count(Counter.DROPPED_CLOSED, count)
        self._ratelog.log(
            logging.WARNING,
            "closed",
            "collect() after close(): %s of game %r dropped",
            counted(count, "event"),
            game,
        )
        return 0

    def _admit(self, game: str) -> None:
        validate_game(game)
        if len(self._known_games) < KNOWN_GAMES_LIMIT:
            self._known_games.add(game)

    def _refused(self, game: str, data: bytes) -> bool:
        """Whether the event is dropped (counted) for its size; raises ``TypeError`` for raw
        JSON that spans lines or is not UTF-8."""
        if not data.isascii():
            check_utf8(game, data)
        if 10 in data:  # orjson writes no raw newline itself: raw passthrough put it there
            raise TypeError(
                f"event for game {game!r} holds raw JSON (orjson.Fragment) with a "
                "newline; pass the value itself, or raw JSON on one line"
            )
        if len(data) > self._max_event_bytes:
            self._refuse_large(game, len(data))
            return True
        return False

    def _refuse_large(self, game: str, size: int) -> None:
        self._counts.count(Counter.DROPPED_TOO_LARGE)
        self._buffer.note(Counter.DROPPED_TOO_LARGE, game)
        self._ratelog.log(
            logging.WARNING,
            f"large:{game}",
            "event of game %r dropped: %d bytes of JSON, over [buffer] max_event_bytes = %d",
            game,
            size,
            self._max_event_bytes,
        )
        if self._direct:  # no flusher to defer to, and not the hot path: tell on_error now
            self._report.drops(self._buffer.take_drops())
        elif not self._flushing:
            self._start()  # the drop count still has to reach Redis

    # -- sync mode and disabled ---------------------------------------------------------------

    def _collect_direct(self, game: str, entries: list[bytes]) -> int:
        """Store (sync mode) or discard (disabled) events of one game now: the events the
        cap evicted."""
        if self._closed:
            return self._drop_closed(game, len(entries))
        if self._disabled:
            count = len(entries)
            self._counts.add({Counter.ACCEPTED: count, Counter.DROPPED_DISABLED: count})
            return 0
        return self._store_now(game, entries)

    def _store_now(self, game: str, entries: list[bytes]) -> int:
        """Store events of one game in the caller's thread.  A write whose outcome is unknown
        goes again as it is for up to ``sync_resend_seconds``; so an error raised here means
        the events were not stored, except ``BackendUnconfirmed`` (they may have been)."""
        pending = self._buffer.take_pending()
        c = self.config.collector
        events = "event" if len(entries) == 1 else counted(len(entries), "event")
        try:
            result = self._get_writer().write_now(
                game,
                entries,
                pending,
                c.sync_resend_seconds,
                self._closing,
                c.retry_max_delay_ms / 1000,
            )
        except Exception as exc:  # a bug, or the store could not be opened: nothing sent
            self._buffer.put_back({}, pending)
            self._counts.count(Counter.BACKEND_ERRORS)
            kind = type(exc) if isinstance(exc, BackendError) else BackendError
            raise kind(f"could not store {events} of game {game!r}: {reason(exc)}") from exc
        if any(result.failed_pending.values()):
            self._buffer.put_back({}, result.failed_pending)
        error = result.error
        counts = {
            Counter.ACCEPTED: 0 if error else len(entries),
            Counter.STORED: result.stored,
            Counter.EVICTED: result.evicted,
            Counter.MERGED: result.merged,
        }
        for counter, n in (  # seldom any: not added one by one on every call
            (Counter.REFUSED_OOM, result.refused_oom),
            (Counter.UNREPLICATED_WRITES, result.unreplicated),
            (Counter.REFUSED_WRITES, result.refused_writes),
            (Counter.REFUSED_REPEATS, result.refused_repeats),
            (Counter.BACKEND_ERRORS, 1 if error else 0),
        ):
            if n:
                counts[counter] = n
        self._counts.add(counts)
        if error is not None:
            raise self._not_stored(error, f"{events} of game {game!r}", result.stored)
        return result.evicted

    def _not_stored(self, error: BackendError, what: str, stored: int) -> BackendError:
        """The error a sync-mode write raises: what happened to the events, and why."""
        waited = (
            f"{self.config.collector.sync_resend_seconds:g} s ([collector] sync_resend_seconds)"
        )
        if isinstance(error, BackendUnreplicated):
            why = f"stored, too few replicas confirmed it within {waited}: do not send it again"
        elif isinstance(error, BackendUnconfirmed):
            why = f"outcome unknown after {waited}: it may be stored, do not send it again"
        else:
            why = "not stored"
        if stored:  # more than one call, and only some answered
            why += f"; {stored} of them stored"
        raised = type(error)(f"could not store {what} ({why}): {reason(error)}")
        raised.__dict__.update(error.__dict__)  # WriteRefused.conflict, a result
        raised.__cause__ = error
        return raised

    # -- background mode ----------------------------------------------------------------------

    def _get_writer(self) -> Writer:
        if self._writer is None:
            store = self._store if self._store is not None else open_store(self.config.redis)
            # Say once which Redis and why, loudly when nobody chose it.
            if self._store is None and self.config.unconfigured():
                logger.warning(
                    "writing to %s (config: %s): no config file, "
                    "$TELEMETRY_CONFIG, TELEMETRY_REDIS_URL or url= chose it",
                    self._server,
                    self.config_source,
                )
            else:
                logger.info("writing to %s (config: %s)", self._server, self.config_source)
            self._writer = Writer(
                store,
                self.config.cap_for,
                self.config.ttl_for,
                self._store_reset,
                self.config.dedup_window_for,
                self._new_writer_id,
            )
        return self._writer

    def _store_reset(self, shards: list[int]) -> None:
        """A write found shards whose data vanished since this process last wrote there."""
        self._counts.count(Counter.STORE_RESETS)
        self._ratelog.log(
            logging.ERROR,
            "store-reset",
            "store reset: %s of %s lost their data since this process last wrote "
            "there (Redis restarted without persistence, was flushed, or failed over to an "
            "empty replica); the events buffered there are gone (the reporter logs how many)",
            counted(len(shards), "shard"),
            self._server,
        )

    def _new_writer_id(self, writer: str, why: str) -> None:
        logger.warning(
            "writer id %s from now on: %s; the writes already sent keep theirs", writer, why
        )

    def _start(self, closing: bool = False) -> None:
        """Start the flusher thread; after close() only to write what is left."""
        if closing or not self._closed:
            self._flusher.start()
            self._flushing = True

    # -- control ------------------------------------------------------------------------------

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until everything collected so far is stored; False if ``timeout`` ran out.
        True at once in sync mode (stored already) and when disabled (nothing to store)."""
        if self._direct:
            return True
        if self._closed and not self._flusher.alive:
            return self._flusher.caught_up()  # nothing will be written any more
        self._start()
        return self._flusher.flush(timeout)

    def close(self, timeout: float | None = None) -> None:
        """Store what is buffered (waiting at most ``timeout`` seconds, by default
        ``[collector] close_timeout_seconds``), then stop. What is left is counted as
        ``dropped_at_close``. Safe to call twice."""
        if self._closed:
            return
        timeout = self.config.collector.close_timeout_seconds if timeout is None else timeout
        self._closed = True
        self._closing.set()  # sync mode: a collect() sending a write again gives up now
        if not self._flusher.started and len(self._buffer):
            self._start(closing=True)
        self._flusher.stop(timeout)
        left = self._buffer.close_by_game()
        if self._writer is not None:  # writes without an answer: given up, maybe stored
            for game, count in self._writer.take_unconfirmed().items():
                left[game] = left.get(game, 0) + count
            self._flusher.unconfirmed_writes = self._flusher.unconfirmed_events = 0
        if left:
            count = sum(left.values())
            self._counts.count(Counter.DROPPED_AT_CLOSE, count)
            logger.warning(
                "collector closed with %d events not stored (Redis: %s)", count, self._server
            )
        # Drops the flusher had no round left to report, then what close() dropped.
        self._report.drops(self._buffer.take_drops())
        self._report.drops({Counter.DROPPED_AT_CLOSE: left})
        _live.discard(self)

    def stats(self) -> dict[str, int]:
        """Counters of this process's collector (names from ``collector.counters``).

        ``accepted == stored + dropped_buffer_full + dropped_at_close + dropped_disabled +
        buffered`` holds at any quiet moment (``merged`` is part of ``stored``);
        ``dropped_too_large`` and ``dropped_closed`` were never accepted.
        ``unconfirmed_writes`` is how many writes wait to be sent again because their
        outcome is unknown (their events are part of ``buffered``).
        """
        counted = self._tally.snapshot()
        return {str(name): counted.get(name, 0) for name in (*SDK, *SDK_GAUGES)}

    def _count_into(self, metrics: Metrics) -> tuple[Tally, Metrics]:
        """This collector's own tally (behind ``stats()``) and where counts go: the tally,
        and ``metrics`` too unless it is the no-op default.  The buffer keeps some counts
        itself; they are watched."""
        tally = Tally()
        counts = fan_out(tally, metrics)
        buffer = self._buffer
        if not self._direct:  # sync mode counts what it stores, disabled what it discards
            counts.watch(Counter.ACCEPTED, lambda: buffer.accepted_total)
        counts.watch(Counter.DROPPED_BUFFER_FULL, lambda: buffer.dropped_total)
        # Waiting, and taken by the flusher: being written, or unconfirmed writes' events.
        counts.watch(Gauge.BUFFERED, lambda: len(buffer) + buffer.outside)
        counts.watch(Gauge.UNCONFIRMED_WRITES, lambda: self._flusher.unconfirmed_writes)
        return tally, counts

    @property
    def on_error(self) -> OnError | None:
        """The callback told of failed writes and lost events; may be replaced at any time."""
        return self._on_error

    @on_error.setter
    def on_error(self, callback: OnError | None) -> None:
        self._on_error = self._report.callback = check_callback(callback)

    def __enter__(self) -> Collector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        disabled = ", disabled=True" if self._disabled else ""
        return f"Collector(mode={self.config.collector.mode!r}{disabled}, redis={self._server!r})"

    def _new_flusher(self) -> None:
        """Counts, log and flusher of a new collector, or of one in a forked child (the
        parent keeps its own, and may have held their locks at the fork)."""
        self._tally, self._counts = self._count_into(self._metrics)
        self._ratelog = RateLimitedLog(logger)
        self._report = ErrorReport(self._on_error, self._ratelog)
        c = self.config.collector
        self._flusher = Flusher(
            self._buffer,
            self._get_writer,
            self._counts,
            self._report,
            Rounds(c.flush_interval_ms / 1000, c.retry_max_delay_ms / 1000),
        )
        self._wake = self._flusher.wake
        self._flushing = False  # whether the flusher was started (read on the hot path)

    def _after_fork_in_child(self) -> None:
        # The parent keeps and sends what it buffered; the child starts empty.
        self._buffer.reset_after_fork()
        self._new_flusher()
        # A writer of its own (its own id and numbers); with a fresh client and connection
        # pool unless the store was given.
        self._writer = None


def _as_dict(game: str, event: object) -> dict[str, Any]:
    if not isinstance(event, Mapping):
        raise TypeError(f"event for game {game!r} must be a mapping, got {type(event).__name__}")
    return dict(event)


def _close_all_at_exit() -> None:
    for collector in list(_live):
        collector.close()


def _reset_all_in_child() -> None:
    for collector in list(_live):
        collector._after_fork_in_child()


atexit.register(_close_all_at_exit)
os.register_at_fork(after_in_child=_reset_all_in_child)
