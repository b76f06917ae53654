"""The SDK object: ``Collector.collect()`` on the caller's hot path, a flusher thread behind it."""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
import weakref
from collections.abc import Mapping
from typing import Any

import orjson

from collector._buffer import EventBuffer
from collector._config import TelemetryConfig
from collector._config_loader import build_config, load_config, raw_settings
from collector._exceptions import BackendError
from collector._writer import Writer
from collector.counters import SDK, Counter, Gauge
from collector.logs import RateLimitedLog
from collector.metrics import NO_METRICS, Metrics, Tally, count_all, fan_out
from collector.store import Store, describe_settings, open_store, time_prefix, validate_game

logger = logging.getLogger("collector")

# A flush starts early once this many events are waiting.
FLUSH_SOON_EVENTS = 2048
# Validated game names remembered, so the hot path skips the regex for known games.
KNOWN_GAMES_LIMIT = 10_000

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
    "url": "redis", "cluster": "redis", "key_prefix": "redis", "shards": "redis",
    "socket_timeout_seconds": "redis", "connect_timeout_seconds": "redis",
    "mode": "collector", "max_buffer_events": "collector", "flush_interval_ms": "collector",
    "close_timeout_seconds": "collector", "retry_max_delay_ms": "collector",
    "max_events_per_game": "buffer", "ttl_seconds": "buffer", "max_event_bytes": "buffer",
}


class Collector:
    """Buffers game events and stores them in Redis.

    ``Collector(url="redis://host:6379/0")`` starts from the built-in defaults and applies the
    keyword arguments; ``Collector.from_config()`` reads the config file and environment.
    In the default ``"background"`` mode ``collect()`` never touches the network: it appends to
    a bounded in-process buffer that a flusher thread writes to Redis.  In ``"sync"`` mode it
    writes in the caller's thread and returns how many old events the cap evicted.
    """

    def __init__(self, *, config: TelemetryConfig | None = None, store: Store | None = None,
                 metrics: Metrics = NO_METRICS, **settings: Any) -> None:
        base = config or TelemetryConfig.default()
        if settings:
            raw = raw_settings(base)
            for key, value in settings.items():
                if key not in _KEYWORDS:
                    raise TypeError(f"Collector() got an unexpected keyword argument {key!r}; "
                                    f"expected one of {', '.join(_KEYWORDS)}")
                raw[_KEYWORDS[key]][key] = value
            base = build_config(raw, "Collector() arguments", env={}, interpolate=False,
                                cls=type(base))
        self.config = base
        self._server = store.describe() if store is not None else describe_settings(base.redis)
        self._sync = base.collector.mode == "sync"
        self._max_event_bytes = base.buffer.max_event_bytes
        self._buffer = EventBuffer(base.collector.max_buffer_events)
        self._known_games: set[str] = set()
        self._store = store
        self._writer: Writer | None = None
        self._start_lock = threading.Lock()
        self._wake = threading.Event()
        self._idle = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._close_deadline = 0.0
        self._in_flush = 0
        self._flushed_seq = 0  # the buffer's seq at the flusher's latest take that found nothing
        self._metrics = metrics
        self._tally, self._counts = self._count_into(metrics)
        self._ratelog = RateLimitedLog(logger)
        _live.add(self)

    @classmethod
    def from_config(cls, path: str | None = None, **settings: Any) -> Collector:
        """Build from ``path``, else ``$TELEMETRY_CONFIG``, else the packaged default,
        with ``TELEMETRY_<SECTION>_<KEY>`` environment overrides applied."""
        return cls(config=load_config(path), **settings)

    # -- the hot path -------------------------------------------------------------------------

    def collect(self, game: str, event: Mapping[str, Any]) -> int:
        """Record one event of ``game``.

        Raises ``ValueError`` for an invalid game name and ``TypeError`` for an event that is
        not a JSON-serialisable mapping.  Returns the number of events the cap evicted in sync
        mode, 0 in background mode (where nothing about Redis is known yet).
        """
        if type(game) is not str or game not in self._known_games:  # a list is unhashable
            self._admit(game)
        if type(event) is not dict:  # the common case skips the slower ABC check
            if not isinstance(event, Mapping):
                raise TypeError(f"event for game {game!r} must be a mapping, "
                                f"got {type(event).__name__}")
            event = dict(event)
        try:
            data = orjson.dumps(event)
        except TypeError as exc:
            raise TypeError(f"event for game {game!r} is not JSON-serialisable: {exc}") from None
        if len(data) > self._max_event_bytes:
            self._refuse_large(game, len(data))
            return 0
        entry = _time_prefix() + data
        if self._sync:
            return self._store_now(game, entry)
        waiting = self._buffer.append(game, entry)  # refused (-1) once close() has finished
        if waiting == FLUSH_SOON_EVENTS:
            self._wake.set()
        elif waiting < 0:
            return self._drop_closed(game)
        if self._thread is None:
            self._start()
        return 0

    def _drop_closed(self, game: str) -> int:
        self._counts.count(Counter.DROPPED_CLOSED)
        self._ratelog.log(logging.WARNING, "closed",
                          "collect() after close(): event of game %r dropped", game)
        return 0

    def _admit(self, game: str) -> None:
        validate_game(game)
        if len(self._known_games) < KNOWN_GAMES_LIMIT:
            self._known_games.add(game)

    def _refuse_large(self, game: str, size: int) -> None:
        self._counts.count(Counter.DROPPED_TOO_LARGE)
        self._buffer.note(Counter.DROPPED_TOO_LARGE, game)
        self._ratelog.log(
            logging.WARNING, f"large:{game}",
            "event of game %r dropped: %d bytes of JSON, over [buffer] max_event_bytes = %d",
            game, size, self._max_event_bytes,
        )
        if not self._sync and self._thread is None:
            self._start()  # the drop count still has to reach Redis

    # -- sync mode ----------------------------------------------------------------------------

    def _store_now(self, game: str, entry: bytes) -> int:
        if self._closed:
            return self._drop_closed(game)
        pending = self._buffer.take_pending()
        try:
            result = self._get_writer().write({game: [entry]}, pending)
            if result.error is not None:
                raise result.error
        except Exception as exc:
            self._buffer.put_back({}, pending)
            self._counts.count(Counter.BACKEND_ERRORS)
            kind = type(exc) if isinstance(exc, BackendError) else BackendError
            raise kind(f"could not store event of game {game!r}: {_reason(exc)}") from exc
        count_all(self._counts, {Counter.ACCEPTED: 1, Counter.STORED: result.stored,
                                 Counter.EVICTED: result.evicted})
        return result.evicted

    # -- background mode ----------------------------------------------------------------------

    def _get_writer(self) -> Writer:
        if self._writer is None:
            store = self._store if self._store is not None else open_store(self.config.redis)
            self._writer = Writer(store, self.config.cap_for, self.config.ttl_for)
        return self._writer

    def _start(self, closing: bool = False) -> None:
        with self._start_lock:
            if self._thread is None and (closing or not self._closed):
                self._thread = threading.Thread(
                    target=self._run, name="telemetry-collector-flusher", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        interval = self.config.collector.flush_interval_ms / 1000
        longest = self.config.collector.retry_max_delay_ms / 1000
        delay = interval
        while True:
            self._wake.wait(delay)
            self._wake.clear()
            ok = self._flush_round()
            if self._stop.is_set() and (
                not len(self._buffer) or time.monotonic() >= self._close_deadline):
                return
            if ok:
                delay = interval
            else:
                delay = min(max(delay * 2, interval), longest)
                if self._stop.is_set():
                    delay = min(delay, max(0.0, self._close_deadline - time.monotonic()))

    def _flush_round(self) -> bool:
        """Write what is buffered; False if Redis failed (the events are put back)."""
        while True:
            self._idle.clear()
            queues, pending = self._buffer.take()
            if not queues and not any(pending.values()):
                self._flushed_seq = self._buffer.taken_seq
                self._idle.set()
                return True
            self._in_flush = taken = sum(map(len, queues.values()))
            try:
                result = self._get_writer().write(queues, pending)
            except Exception as exc:  # never let the flusher die; Redis may come back
                self._buffer.put_back(queues, pending)
                self._in_flush = 0
                self._backend_failed(exc, taken)
                return False
            self._in_flush = 0
            count_all(self._counts, {Counter.STORED: result.stored,
                                     Counter.EVICTED: result.evicted, Counter.FLUSHES: 1})
            if result.error is not None:
                self._buffer.put_back(result.failed, result.failed_pending)
                self._backend_failed(result.error, sum(map(len, result.failed.values())))
                return False
            self._ratelog.reset("backend")

    def _backend_failed(self, exc: Exception, count: int) -> None:
        self._counts.count(Counter.BACKEND_ERRORS)
        self._ratelog.log(
            logging.WARNING, "backend",
            "cannot store %d events (%s); %d buffered, retrying with backoff",
            count, _reason(exc), len(self._buffer),
        )

    # -- control ------------------------------------------------------------------------------

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until everything collected so far is stored; False if ``timeout`` ran out."""
        if self._sync:
            return True
        if self._closed and (self._thread is None or not self._thread.is_alive()):
            return self._flushed_seq >= self._buffer.seq  # nothing will be written any more
        if self._thread is None:
            self._start()
        deadline = time.monotonic() + timeout
        # Done once the flusher has found the buffer empty after everything collected (and
        # every drop count noted) so far; an empty buffer alone may mean "taken, not stored".
        target = self._buffer.seq
        while self._flushed_seq < target:
            self._idle.clear()
            self._wake.set()
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._idle.wait(remaining):
                return False
        return True

    def close(self, timeout: float | None = None) -> None:
        """Store what is buffered (waiting at most ``timeout`` seconds, by default
        ``[collector] close_timeout_seconds``), then stop. What is left is counted as
        ``dropped_at_close``. Safe to call twice."""
        if self._closed:
            return
        timeout = self.config.collector.close_timeout_seconds if timeout is None else timeout
        self._closed = True
        self._close_deadline = time.monotonic() + timeout
        thread = self._thread
        if thread is None and len(self._buffer):
            self._start(closing=True)
            thread = self._thread
        self._stop.set()
        self._wake.set()
        if thread is not None:
            thread.join(timeout + 0.5)
        left = self._buffer.close()
        if left:
            self._counts.count(Counter.DROPPED_AT_CLOSE, left)
            logger.warning("collector closed with %d events not stored (Redis: %s)",
                           left, self._server)
        _live.discard(self)

    def stats(self) -> dict[str, int]:
        """Counters of this process's collector (names from ``collector.counters``).

        ``accepted == stored + dropped_buffer_full + dropped_at_close + buffered`` holds at
        any quiet moment; ``dropped_too_large`` and ``dropped_closed`` were never accepted.
        """
        counted = self._tally.snapshot()
        return {str(name): counted.get(name, 0) for name in (*SDK, Gauge.BUFFERED)}

    def _count_into(self, metrics: Metrics) -> tuple[Tally, Metrics]:
        """This collector's own tally (behind ``stats()``) and where counts go: the tally,
        and ``metrics`` too unless it is the no-op default.  The buffer keeps some counts
        itself; they are watched."""
        tally = Tally()
        counts = fan_out(tally, metrics)
        buffer = self._buffer
        if not self._sync:  # sync mode counts what it stores
            counts.watch(Counter.ACCEPTED, lambda: buffer.accepted_total)
        counts.watch(Counter.DROPPED_BUFFER_FULL, lambda: buffer.dropped_total)
        counts.watch(Gauge.BUFFERED, lambda: len(buffer) + self._in_flush)
        return tally, counts

    def __enter__(self) -> Collector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"Collector(mode={self.config.collector.mode!r}, "
                f"redis={self._server!r})")

    def _after_fork_in_child(self) -> None:
        # The parent keeps and sends what it buffered; the child starts empty.
        self._buffer.reset_after_fork()
        self._start_lock = threading.Lock()
        self._wake = threading.Event()
        self._idle = threading.Event()
        self._stop = threading.Event()
        self._thread = None
        self._in_flush = 0
        self._flushed_seq = 0
        self._tally, self._counts = self._count_into(self._metrics)
        self._ratelog = RateLimitedLog(logger)  # its lock may have been held at the fork
        if self._store is None:
            self._writer = None  # a fresh client and connection pool in the child


def _reason(exc: Exception) -> str:
    """A store error names the server already; anything else is named by its type."""
    return str(exc) if isinstance(exc, BackendError) else f"{type(exc).__name__}: {exc}"


def _close_all_at_exit() -> None:
    for collector in list(_live):
        collector.close()


def _reset_all_in_child() -> None:
    for collector in list(_live):
        collector._after_fork_in_child()


atexit.register(_close_all_at_exit)
os.register_at_fork(after_in_child=_reset_all_in_child)
