"""telemetry-collector SDK: ``collect(game, event)`` buffers game events in Redis.

    import collector
    collector.collect("my-game", {"type": "login", "player": "p1"})
    collector.flush()      # wait until it is in Redis; collector.close() at shutdown

``Collector`` gives control over configuration, flushing and shutdown.
"""

from collector._collector import Collector
from collector._config import TelemetryConfig
from collector._default import close, collect, flush, set_on_error, stats
from collector._exceptions import (
    BackendError,
    BackendFull,
    BackendUnconfirmed,
    BufferFull,
    ConfigError,
    EventsDropped,
    InvalidEvent,
    TelemetryError,
)

__all__ = [
    "BackendError",
    "BackendFull",
    "BackendUnconfirmed",
    "BufferFull",
    "Collector",
    "ConfigError",
    "EventsDropped",
    "InvalidEvent",
    "TelemetryConfig",
    "TelemetryError",
    "close",
    "collect",
    "flush",
    "set_on_error",
    "stats",
]
__version__ = "0.1.0"
