"""Which events of a batch are still fresh enough to send.

Age is measured from the collect time (the entry's 13-digit prefix), or from an event field
holding the event's own time when one is configured (``[reporter] event_time_field``; the
anti-addiction sink always uses ``ot``, in seconds, with its own window).  The rule is the
sink's (``Sink.freshness``, a ``Freshness``).
"""

from __future__ import annotations

import operator
from typing import NamedTuple

import orjson

from collector.store import ENTRY_TIME_DIGITS, entry_time_ms
from reporter._config import ReporterConfig
from reporter._sinks.base import Freshness
from reporter._sinks.registry import make_sink

__all__ = ["Fresh", "Freshness", "sink_freshness", "split_fresh"]

_EVENT = operator.itemgetter(slice(ENTRY_TIME_DIGITS, None))  # an entry's event (its JSON)


def sink_freshness(config: ReporterConfig) -> Freshness:
    """The rule the configured sink needs (``Sink.freshness``)."""
    return make_sink(config).freshness()


class Fresh(NamedTuple):
    """The events (raw JSON) of a batch young enough to send, how many are stale, and where
    each sent event sits in the batch (None: all of them, in order)."""

    events: list[bytes]
    stale: int
    positions: list[int] | None = None

    def position(self, sent: int) -> int:
        """The batch position of the ``sent``-th event sent."""
        return sent if self.positions is None else self.positions[sent]

    def stale_events(self, entries: list[bytes]) -> list[bytes]:
        """The events (raw JSON) of ``entries`` (the batch split) that are not sent."""
        if self.positions is None:
            return []
        kept = set(self.positions)
        return [e[ENTRY_TIME_DIGITS:] for i, e in enumerate(entries) if i not in kept]


def split_fresh(entries: list[bytes], now_ms: int, rule: Freshness) -> Fresh:
    """The events young enough to send (an event without a usable value in the rule's field
    goes by its collect time)."""
    max_age_ms, field_name = rule.keep_ms, rule.field
    # Entries start with a fixed-width time, so the smallest entry is the oldest one.
    if not field_name and entries and now_ms - entry_time_ms(min(entries)) <= max_age_ms:
        return Fresh(list(map(_EVENT, entries)), 0)
    fresh: list[bytes] = []
    positions: list[int] = []
    for position, entry in enumerate(entries):
        born = entry_time_ms(entry)
        event = entry[ENTRY_TIME_DIGITS:]
        if field_name:
            try:
                value = orjson.loads(event).get(field_name)
                if isinstance(value, int | float) and not isinstance(value, bool):
                    born = int(value * rule.scale)
            except (orjson.JSONDecodeError, AttributeError):
                pass
        if now_ms - born <= max_age_ms:
            fresh.append(event)
            positions.append(position)
    return Fresh(fresh, len(entries) - len(fresh), positions)
