"""Build the redis-py client from ``[redis]`` with every timeout and retry set explicitly."""

from __future__ import annotations

from typing import Any

import redis
from redis.backoff import ExponentialWithJitterBackoff
from redis.cluster import RedisCluster
from redis.retry import Retry

from collector._config import RedisSettings, mask_url
from collector._exceptions import ConfigError

# Errors that mean "Redis is not answering right now"; anything else is a bug or a refusal.
UNAVAILABLE: tuple[type[Exception], ...] = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    redis.exceptions.ClusterDownError,
    redis.exceptions.TryAgainError,
    OSError,
)


def make_client(settings: RedisSettings) -> Any:
    """A ``redis.Redis`` or ``RedisCluster`` that returns bytes."""
    retry = Retry(ExponentialWithJitterBackoff(cap=1.0, base=0.05), settings.retries)
    common: dict[str, Any] = {
        "socket_timeout": settings.socket_timeout_seconds,
        "socket_connect_timeout": settings.connect_timeout_seconds,
        "retry": retry,
        "health_check_interval": settings.health_check_interval_seconds,
    }
    try:
        if settings.cluster:
            return RedisCluster.from_url(settings.url, **common)
        return redis.Redis.from_url(settings.url, **common)
    except ValueError as exc:
        raise ConfigError(f"[redis] url: {exc} (url: {mask_url(settings.url)})") from exc


def describe(settings: RedisSettings) -> str:
    kind = "cluster" if settings.cluster else "redis"
    return f"{kind} {mask_url(settings.url)}"
