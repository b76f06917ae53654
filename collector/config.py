"""The config machinery, public for the reporter (and anyone adding sections to the file).

``TelemetryConfig`` holds the SDK's sections; a subclass adds its own (each a frozen
dataclass whose fields are declared with ``setting``) and is loaded from the same file by
``load_config(path, env, cls)``, validated in the same place.
"""

from collector._config import (
    BufferSettings,
    CollectorSettings,
    GameSettings,
    TelemetryConfig,
    build_config,
    load_config,
)
from collector._config_loader import (
    CONFIG_ENV,
    default_config_text,
    raw_settings,
    section_value,
    sections_of,
)
from collector._sections import MaskedRepr, Where, setting
from collector.logs import mask_url
from collector.store import RedisSettings

__all__ = [
    "CONFIG_ENV",
    "BufferSettings",
    "CollectorSettings",
    "GameSettings",
    "MaskedRepr",
    "RedisSettings",
    "TelemetryConfig",
    "Where",
    "build_config",
    "default_config_text",
    "load_config",
    "mask_url",
    "raw_settings",
    "section_value",
    "sections_of",
    "setting",
]
