"""The Python SDK's conformance producer with one promise of the protocol broken, to show
that the suite catches it:

    python -m tests.support.broken_producer BREAK

Each break is one small change (a setting ignored, one function of the SDK replaced); the
rest is the real SDK and its real adapter (``collector.conformance_producer``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import collector._calls
import collector._collector
import collector._writer
import collector.store._collect_call
from collector import conformance_producer
from collector._exceptions import BackendUnconfirmed
from collector._flusher import Flusher
from collector._writer import Outcome, Writer
from collector.store import Stored


def _ignore(variable: str) -> Callable[[], None]:
    """The producer ignores one setting: the variable never reaches its config."""

    def ignore() -> None:
        os.environ.pop(variable, None)

    return ignore


def _accept_bad_games() -> None:
    collector._collector.validate_game = lambda game: game  # type: ignore[assignment]


def _keep_drop_counts() -> None:
    """Drop counts never ride on a write: the shard never hears of them."""
    plan = collector._calls.plan_calls

    def plan_without_counts(*args: Any) -> list[collector._calls.Call]:
        calls = plan(*args)
        for call in calls:
            call.dropped_buffer_full = call.dropped_too_large = 0
        return [c for c in calls if c.entries or c.pre_evicted]

    collector._writer.plan_calls = plan_without_counts  # type: ignore[assignment]


def _reuse_sequence() -> None:
    """Every round numbers its writes from 1 again: a number used twice for other events."""
    write = Writer.write

    def numbered_from_one(self: Writer, *args: Any) -> Any:
        self._next = {}
        return write(self, *args)

    Writer.write = numbered_from_one  # type: ignore[method-assign]


def _fixed_writer_id() -> None:
    """Every process starts with one writer id (say, the host name): a restart numbers from 1
    under the id the last run used.  (A new id after a conflict is a random one.)"""
    fresh = collector._writer.new_writer_id
    first = ["same-writer-id"]
    collector._writer.new_writer_id = lambda: first.pop() if first else fresh()


def _resend_as_new() -> None:
    """A write whose reply was lost goes back to the buffer, to be sent as a new write."""
    os.environ["TELEMETRY_REDIS_RETRIES"] = "0"  # nor does the store resend it itself
    outcome = Writer._outcome

    def lost_is_not_stored(self: Writer, result: Any, c: Any, reply: Any) -> Outcome:
        if isinstance(reply, BackendUnconfirmed):
            c.maybe_ran = False
            return Outcome.NOT_STORED
        return outcome(self, result, c, reply)

    Writer._outcome = lost_is_not_stored  # type: ignore[method-assign]


def _assume_stored() -> None:
    """A write whose reply was lost is taken as stored."""
    os.environ["TELEMETRY_REDIS_RETRIES"] = "0"
    call = Writer._call

    def lost_is_stored(self: Writer, calls: Any, shards: Any, which: Any, *rest: Any) -> None:
        call(self, calls, shards, which, *rest)
        replies = rest[1]
        for i in which:
            if isinstance(replies[i], BackendUnconfirmed):
                replies[i] = Stored(0, self._markers.get(shards[i].shard, ""), 0, False)

    Writer._call = lost_is_stored  # type: ignore[method-assign]


def _no_flush_at_close() -> None:
    Flusher.stop = lambda self, timeout: None  # type: ignore[method-assign]


def _unsplit_writes() -> None:
    """Every game's events in one call, however large."""
    collector._calls.CALL_BYTES = collector._calls.EVENTS_PER_CALL = 1 << 40  # type: ignore[misc]


def _wrong_version() -> None:
    collector.store._collect_call.PROTOCOL_VERSION = 2  # type: ignore[misc]


def _no_stats_counter() -> None:
    answer = conformance_producer.answer

    def without_refused_repeats(telemetry: Any, line: str) -> tuple[str, bool]:
        reply, last = answer(telemetry, line)
        if line == "stats":
            reply = reply.replace('"refused_repeats"', '"repeats_refused"')
        return reply, last

    conformance_producer.answer = without_refused_repeats  # type: ignore[assignment]


# Each break, and the case of the suite that must fail for it.
BREAKS: dict[str, tuple[Callable[[], None], str]] = {
    "skip-cap": (_ignore("TELEMETRY_BUFFER_MAX_EVENTS_PER_GAME"), "cap"),
    "ignore-prefix": (_ignore("TELEMETRY_REDIS_KEY_PREFIX"), "keys"),
    "ignore-shards": (_ignore("TELEMETRY_REDIS_SHARDS"), "keys"),
    "ignore-ttl": (_ignore("TELEMETRY_BUFFER_TTL_SECONDS"), "ttl"),
    "ignore-size-bound": (_ignore("TELEMETRY_BUFFER_MAX_EVENT_BYTES"), "too-large"),
    "ignore-buffer-bound": (_ignore("TELEMETRY_COLLECTOR_MAX_BUFFER_EVENTS"), "buffer-full"),
    "accept-bad-games": (_accept_bad_games, "refusals"),
    "keep-drop-counts": (_keep_drop_counts, "too-large"),
    "reuse-sequence": (_reuse_sequence, "cap"),
    "fixed-writer-id": (_fixed_writer_id, "producer-restart"),
    "resend-as-new": (_resend_as_new, "lost-reply"),
    "assume-stored": (_assume_stored, "lost-call"),
    "no-flush-at-close": (_no_flush_at_close, "producer-restart"),
    "unsplit-writes": (_unsplit_writes, "large-write"),
    "wrong-version": (_wrong_version, "events"),
    "no-stats-counter": (_no_stats_counter, "events"),
}


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in BREAKS:
        print(
            "usage: python -m tests.support.broken_producer BREAK; the breaks, and the case "
            "each one fails:",
            file=sys.stderr,
        )
        for name, (_, case) in BREAKS.items():
            print(f"  {name:20} {case}", file=sys.stderr)
        return 2
    BREAKS[argv[0]][0]()
    return conformance_producer.serve(sys.stdin.buffer, sys.stdout.buffer)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
