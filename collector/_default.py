"""The module-level ``collect()`` and the process-wide default collector behind it."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from collector._collector import Collector

_default: Collector | None = None
_lock = threading.Lock()


def default_collector() -> Collector:
    """The collector ``collect()`` uses, built on first use from the config file/environment."""
    global _default
    if _default is None:
        with _lock:
            if _default is None:
                _default = Collector.from_config()
    return _default


def collect(game: str, event: Mapping[str, Any]) -> int:
    """Record one event with the default collector (see ``Collector.collect``)."""
    return (_default or default_collector()).collect(game, event)
