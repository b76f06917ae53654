"""Dedup keys: ``collect(game, event, dedup_key=...)``, or the values of the game's
``[buffer] dedup_fields`` in the event.

An event with a key travels to Redis with the key in front of its entry
(``collector.store.keyed_entry``); ``lua/collect.lua`` stores it unless an event of the same
game with the same key was stored within the game's dedup window, and counts it as
``merged`` otherwise.  Without ``dedup_key`` and with no ``dedup_fields`` configured for any
game, ``collect()`` does none of this (one test of a flag).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from collector._config import TelemetryConfig
from collector.store import keyed_entry


class Dedup:
    """The dedup keys of one collector's games."""

    def __init__(self, config: TelemetryConfig) -> None:
        self._default = config.buffer.dedup_fields
        self._games = {game: s.dedup_fields for game, s in config.games.items() if s.dedup_fields}
        # Whether any game has dedup_fields: collect() asks this flag, nothing more.
        self.configured = bool(self._default or self._games)

    def fields_for(self, game: str) -> tuple[str, ...]:
        """The fields whose values make the game's dedup key (empty: none)."""
        return self._games.get(game, self._default)

    def keyed(
        self, game: str, event: Mapping[str, Any], dedup_key: str | None, entry: bytes
    ) -> bytes:
        """``entry`` with the event's dedup key in front, or as it is if it has none."""
        if dedup_key is not None:
            if type(dedup_key) is not str:
                raise TypeError(
                    f"dedup_key for game {game!r} must be a str, got "
                    f"{type(dedup_key).__name__}: {dedup_key!r:.80}"
                )
            if not dedup_key:
                raise ValueError(f"dedup_key for game {game!r} is empty; pass None for no key")
            return keyed_entry(orjson.dumps(dedup_key), entry)
        fields = self._games.get(game, self._default)
        if not fields:
            return entry
        values = [event.get(name) for name in fields]
        if all(value is None for value in values):  # none of the fields: no key
            return entry
        return keyed_entry(orjson.dumps(values), entry)
