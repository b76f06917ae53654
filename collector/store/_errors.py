"""redis-py's exceptions, sorted into what they mean here and translated at the store's edge."""

from __future__ import annotations

from typing import Any

import redis
from redis.exceptions import (
    AskError,
    ClusterDownError,
    OutOfMemoryError,
    RedisClusterException,
    TryAgainError,
)

from collector._exceptions import (
    BackendError,
    BackendFull,
    BackendRefused,
    BackendUnavailable,
    BackendUnreplicated,
)

# Errors that mean "Redis is not answering right now"; anything else is a refusal or a bug.
UNAVAILABLE: tuple[type[Exception], ...] = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    ClusterDownError,
    TryAgainError,
    RedisClusterException,
    OSError,
)
# What a call that never got its reply meets: the connection broke or timed out.
LOST: tuple[type[Exception], ...] = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    OSError,
)
# Replies that mean the call went to the wrong cluster node, or to one that is not ready:
# MOVED, ASK (MovedError is an AskError), TRYAGAIN, CLUSTERDOWN; and no node for the slot.
REROUTE: tuple[type[Exception], ...] = (
    AskError,
    TryAgainError,
    ClusterDownError,
    RedisClusterException,
)


class NotReplicated(Exception):
    """The reply of a call that ran, in place of its reply, when ``WAIT`` on its connection
    counted fewer replicas than wanted (or could not be read)."""

    def __init__(self, reply: Any, acked: int | None, wanted: int, timeout_ms: int) -> None:
        seen = "WAIT failed" if acked is None else f"{acked} replicas confirmed"
        super().__init__(f"write not replicated: {seen}, {wanted} wanted within {timeout_ms} ms")
        self.reply = reply


def translate(exc: Exception, server: str) -> BackendError:
    """The store's error for a redis-py exception met talking to ``server`` (masked)."""
    if isinstance(exc, BackendError):
        return exc
    if isinstance(exc, NotReplicated):
        return BackendUnreplicated(f"{server}: {exc}")
    kind: type[BackendError]
    if isinstance(exc, UNAVAILABLE):
        kind = BackendUnavailable
    elif isinstance(exc, OutOfMemoryError):  # the OOM reply, from a command or a script
        kind = BackendFull
    else:
        kind = BackendRefused
    error = kind(f"{server}: {type(exc).__name__}: {exc}")
    error.__cause__ = exc
    return error
