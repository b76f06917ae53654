"""Which events of a batch are still fresh enough to send.

Age is measured from the collect time (the entry's 13-digit prefix), or from an event field
holding the event's own time when one is configured (``[reporter] event_time_field``; the
anti-addiction sender always uses ``ot``, in seconds, with its own window).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import orjson

from collector.store import ENTRY_TIME_DIGITS, entry_time_ms
from reporter._config import ReporterConfig, ReporterSettings

# The anti-addiction interface's window: an item's ot must be within 180 s of the request.
NPPA_WINDOW_SECONDS = 180


@dataclass(frozen=True, slots=True)
class Freshness:
    """An event is fresh while its age is at most ``max_age_ms``; its birth is the value of
    ``field`` (times ``scale`` to make milliseconds) when the event has a number there,
    else its collect time.  ``late_ms`` (0: none): an event older than ``max_age_ms`` is
    still sent, up to this age (the sender moves its time into the endpoint's window)."""

    max_age_ms: int
    field: str = ""
    scale: int = 1
    late_ms: int = 0

    @property
    def keep_ms(self) -> int:
        """The age beyond which an event is stale: dropped, never sent."""
        return max(self.max_age_ms, self.late_ms)

    @classmethod
    def of(cls, settings: ReporterSettings) -> Freshness:
        """``[reporter] max_age_seconds`` and ``event_time_field``/``event_time_unit``."""
        return cls(
            int(settings.max_age_seconds * 1000),
            settings.event_time_field,
            1000 if settings.event_time_unit == "s" else 1,
        )

    @classmethod
    def for_config(cls, config: ReporterConfig) -> Freshness:
        """The rule the configured sink needs: for ``nppa``, an item whose ``ot`` is 180 s
        less the margin before the request is stale (and never later than max_age); with
        ``[nppa] late_behaviour = "resend"``, only one older than ``late_max_age_seconds``
        is (the sender moves the others into the window)."""
        rule = cls.of(config.reporter)
        if config.sink.kind != "nppa":
            return rule
        nppa = config.nppa
        window_ms = int((NPPA_WINDOW_SECONDS - nppa.freshness_margin_seconds) * 1000)
        late_ms = int(nppa.late_max_age_seconds * 1000) if nppa.late_behaviour == "resend" else 0
        return cls(min(rule.max_age_ms, window_ms - 1), "ot", 1000, late_ms)


class Fresh(NamedTuple):
    """The events (raw JSON) of a batch young enough to send, how many are stale, and where
    each sent event sits in the batch (None: all of them, in order)."""

    events: list[bytes]
    stale: int
    positions: list[int] | None = None

    def position(self, sent: int) -> int:
        """The batch position of the ``sent``-th event sent."""
        return sent if self.positions is None else self.positions[sent]


def split_fresh(entries: list[bytes], now_ms: int, rule: Freshness) -> Fresh:
    """The events young enough to send (an event without a usable value in the rule's field
    goes by its collect time)."""
    max_age_ms, field_name = rule.keep_ms, rule.field
    # Entries start with a fixed-width time, so the smallest entry is the oldest one.
    if not field_name and entries and now_ms - entry_time_ms(min(entries)) <= max_age_ms:
        return Fresh([entry[ENTRY_TIME_DIGITS:] for entry in entries], 0)
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
