"""telemetry-collector SDK: ``collect(game, event)`` buffers game events in Redis.

    from collector import collect
    collect("my-game", {"type": "login", "player": "p1"})

``Collector`` gives control over configuration, flushing and shutdown.
"""

from collector._collector import Collector
from collector._config import TelemetryConfig
from collector._default import collect
from collector._exceptions import BackendError, ConfigError, EventsDropped, TelemetryError

__all__ = [
    "BackendError",
    "Collector",
    "ConfigError",
    "EventsDropped",
    "TelemetryConfig",
    "TelemetryError",
    "collect",
]
__version__ = "0.1.0"
