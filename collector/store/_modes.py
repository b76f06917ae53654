"""Which backend class serves a deployment mode, chosen once from ``[redis]``.

Apart from the classes themselves (``_backends``, ``_sentinel``), so each of those depends
only on what it builds on.
"""

from __future__ import annotations

from collector.store._backends import Backend, Cluster, SingleServer
from collector.store._sentinel import Sentinel
from collector.store._settings import RedisSettings

# Backends by mode; ``open_backend`` picks one from the settings.
BACKENDS: dict[str, type[Backend]] = {
    "redis": SingleServer,
    "cluster": Cluster,
    "sentinel": Sentinel,
}


def backend_class(settings: RedisSettings) -> type[Backend]:
    """The backend class of ``settings``' deployment mode (the config refuses both
    ``cluster`` and ``sentinels``)."""
    if settings.sentinels:
        return BACKENDS["sentinel"]
    return BACKENDS["cluster" if settings.cluster else "redis"]


def open_backend(settings: RedisSettings) -> Backend:
    """The backend for ``settings``' deployment mode, with a new client."""
    return backend_class(settings).from_settings(settings)


def describe_settings(settings: RedisSettings) -> str:
    """What ``open_backend(settings).describe()`` will say, without connecting."""
    return backend_class(settings).describe_settings(settings)
