"""redis-py's exceptions, sorted into what they mean here and translated at the store's edge."""

from __future__ import annotations

from typing import Any

import redis
from redis.exceptions import (
    AskError,
    ClusterDownError,
    ClusterError,
    OutOfMemoryError,
    RedisClusterException,
    TryAgainError,
)

from collector._exceptions import (
    BackendError,
    BackendFull,
    BackendRefused,
    BackendUnavailable,
    BackendUnconfirmed,
    BackendUnreplicated,
)

# Errors that mean "Redis is not answering right now"; anything else is a refusal or a bug.
# ClusterError: redis-py's routing followed redirects until its budget ran out.
UNAVAILABLE: tuple[type[Exception], ...] = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    ClusterDownError,
    ClusterError,
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


# How a script's refusal of a write begins when the shard remembers the writer id and number
# with other content (lua/collect.lua): another process uses the same writer id.
WRITE_CONFLICT = "WRITECONFLICT "


class NotReplicated(Exception):
    """The reply of a call that ran, in place of its reply, when ``WAIT`` on its connection
    counted fewer replicas than wanted (or could not be read)."""

    def __init__(self, reply: Any, acked: int | None, wanted: int, timeout_ms: int) -> None:
        seen = "WAIT failed" if acked is None else f"{acked} replicas confirmed"
        super().__init__(f"write not replicated: {seen}, {wanted} wanted within {timeout_ms} ms")
        self.reply = reply


class MaybeRan(redis.exceptions.ConnectionError):
    """In place of the last reply of a call that may have run: an attempt of it was sent and
    its reply lost, and every later attempt failed too (``reply``: what the last one met, a
    lost reply or a refusal before running, which says nothing of the earlier ones).  A
    connection error, so that the bulk path and the cluster's rerouting treat it as one."""

    def __init__(self, reply: Exception) -> None:
        super().__init__(f"{type(reply).__name__}: {reply}")
        self.reply = reply


def translate(exc: Exception, server: str) -> BackendError:
    """The store's error for a redis-py exception met talking to ``server`` (masked)."""
    if isinstance(exc, BackendError):
        return exc
    if isinstance(exc, NotReplicated):
        return BackendUnreplicated(f"{server}: {exc}")
    if isinstance(exc, MaybeRan):
        lost = isinstance(exc.reply, LOST)
        why = "no reply" if lost else "a reply lost, then a resend refused"
        error: BackendError = BackendUnconfirmed(
            f"{server}: outcome unknown ({why}: the call may have run): {exc}"
        )
        error.__cause__ = exc.reply
        return error
    kind: type[BackendError]
    if isinstance(exc, UNAVAILABLE + REROUTE):
        # A redirect still met after the call was sent where it pointed: the cluster is
        # moving the slot or failing over, and the call did not run; not a refusal.
        kind = BackendUnavailable
    elif isinstance(exc, OutOfMemoryError):  # the OOM reply, from a command or a script
        kind = BackendFull
    else:
        kind = BackendRefused
    error = kind(f"{server}: {type(exc).__name__}: {exc}")
    error.__cause__ = exc
    return error


def maybe_ran(before: Any, after: Any) -> Any:
    """The reply to keep of a call sent again (``after``) when the earlier reply was
    ``before``: a failure after an attempt that may have run is ``MaybeRan``."""
    if (
        isinstance(before, MaybeRan)
        and isinstance(after, Exception)
        and not isinstance(after, MaybeRan | NotReplicated)
    ):
        return MaybeRan(after)
    return after
