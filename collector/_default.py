"""The module-level API (``collect``, ``flush``, ``close``, ``stats``, ``set_on_error``) and the
process-wide default collector behind it.

The default collector is built on the first ``collect()`` from the config file and the
environment.  ``flush``, ``close`` and ``stats`` never build it: before the first
``collect()`` they have nothing to do (``flush`` returns True, ``stats`` zeros).  After
``close()`` the default collector stays closed: a later ``collect()`` drops the event and
counts it as ``dropped_closed``, as ``Collector.collect`` does after ``close()``.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from collector._collector import Collector
from collector._on_error import OnError, check_callback
from collector.counters import SDK, SDK_GAUGES

_default: Collector | None = None
_on_error: OnError | None = None
_lock = threading.Lock()


def default_collector() -> Collector:
    """The collector ``collect()`` uses, built on first use from the config file/environment."""
    global _default
    if _default is None:
        with _lock:
            if _default is None:
                _default = Collector.from_config(on_error=_on_error)
    return _default


def collect(game: str, event: Mapping[str, Any], dedup_key: str | None = None) -> int:
    """Record one event with the default collector (see ``Collector.collect``)."""
    return (_default or default_collector()).collect(game, event, dedup_key)


def flush(timeout: float = 5.0) -> bool:
    """Wait until everything the module-level ``collect()`` took is stored (see
    ``Collector.flush``); True at once if it was never called."""
    c = _default
    return True if c is None else c.flush(timeout)


def close(timeout: float | None = None) -> None:
    """Store what the default collector buffered, then stop it (see ``Collector.close``).
    Later ``collect()`` calls are dropped and counted as ``dropped_closed``."""
    c = _default
    if c is not None:
        c.close(timeout)


def stats() -> dict[str, int]:
    """The default collector's counters (see ``Collector.stats``); zeros before the first
    ``collect()``."""
    c = _default
    if c is None:
        return {str(name): 0 for name in (*SDK, *SDK_GAUGES)}
    return c.stats()


def set_on_error(callback: OnError | None) -> None:
    """Set the default collector's ``on_error(error, count)`` (None: no callback), now if it
    exists, else when the first ``collect()`` builds it."""
    global _on_error
    checked = check_callback(callback)
    with _lock:
        _on_error = checked
        if _default is not None:
            _default.on_error = checked
