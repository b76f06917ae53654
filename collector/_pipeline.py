"""Many script calls in few socket writes: the flusher's and the reporter's bulk path to Redis.

redis-py's ``Pipeline`` asks ``SCRIPT EXISTS`` before every execute and sends every large
command (ours carry up to 1000 events) with its own ``sendall()``.  Each of those releases
the GIL, and getting it back from a game thread that is busy calling ``collect()`` takes up
to the interpreter's switch interval (5 ms).  A flush of 50 games spent most of its time
waiting for the GIL that way and fell behind the callers.  Here the calls go out in as few
buffers as possible (one, up to a few MB) and the replies are read back in order, so a flush
waits for the GIL a handful of times whatever its size.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from redis.commands.core import Script
from redis.exceptions import (
    AskError,
    ClusterDownError,
    NoScriptError,
    RedisClusterException,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from collector._redis import UNAVAILABLE

# (keys, args) of one EVALSHA.
ScriptCall = tuple[Sequence[str], Sequence[Any]]

# What a call that never got its reply meets: the connection broke or timed out.
LOST = (RedisConnectionError, RedisTimeoutError, OSError)
# Bytes of commands per socket write.
WRITE_BYTES = 4 * 1024 * 1024
# Replies that mean the call went to the wrong cluster node, or to one that is not ready:
# MOVED, ASK (MovedError is an AskError), TRYAGAIN, CLUSTERDOWN; and no node for the slot.
REROUTE = (AskError, TryAgainError, ClusterDownError, RedisClusterException)


Runner = Callable[[Any, Script, Sequence[ScriptCall]], list[Any]]


def runner(cluster: bool) -> Runner:
    """The bulk path for the client kind: ``run_on_cluster`` or ``run_script_calls``."""
    return run_on_cluster if cluster else run_script_calls


def run_script_calls(client: Any, script: Script, calls: Sequence[ScriptCall]) -> list[Any]:
    """Run ``script`` once per call on ``client`` (a ``redis.Redis``); one reply per call.

    A reply is the script's result, the ``ResponseError`` the server refused the call with
    (as a pipeline with ``raise_on_error=False`` gives), or the connection error for a call
    whose reply never came, after ``[redis] retries`` more tries (such a call may or may not
    have run).  Scripts missing from the
    server's cache (restarted or flushed) are loaded and the calls that met ``NOSCRIPT`` sent
    again.
    """
    replies = _send(client, script.sha, calls)
    # Like redis-py's own commands: the calls a broken connection left unanswered are sent
    # again on a new one, up to the client's retry count ([redis] retries).
    retry = client.get_retry()
    for _ in range(retry.get_retries() if retry is not None else 0):
        if not _resend(client, script, calls, replies, LOST):
            break
    missing = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
    if missing:
        try:
            client.script_load(script.script)
        except UNAVAILABLE as exc:
            for i in missing:
                replies[i] = exc
        else:
            _resend(client, script, calls, replies, NoScriptError)
    return replies


def _resend(client: Any, script: Script, calls: Sequence[ScriptCall], replies: list[Any],
            kind: type[Exception] | tuple[type[Exception], ...]) -> bool:
    """Send again the calls whose reply is a ``kind`` error; False if there were none."""
    again = [i for i, reply in enumerate(replies) if isinstance(reply, kind)]
    for i, reply in zip(again, _send(client, script.sha, [calls[i] for i in again]),
                        strict=True):
        replies[i] = reply
    return bool(again)


def run_on_cluster(client: Any, script: Script, calls: Sequence[ScriptCall]) -> list[Any]:
    """``run_script_calls`` on a ``RedisCluster``: one batch of writes per node.

    Each call goes to the node that the cluster client's slot map gives for its first key
    (all keys of a call share one hash tag).  Calls the map sent astray (a moved or moving
    slot, no node for it) go once more through redis-py's own routing, which follows
    MOVED/ASK and refreshes the map; after a connection failure one call does, so the map is
    refreshed, and the rest are answered with the error.
    """
    replies: list[Any] = [None] * len(calls)
    by_node: dict[str, tuple[Any, list[int]]] = {}
    for i, (keys, _) in enumerate(calls):
        try:
            node = client.get_node_from_key(keys[0])
        except Exception as exc:  # no node for the slot: redis-py's routing decides below
            replies[i] = exc
            continue
        by_node.setdefault(node.name, (node, []))[1].append(i)
    for node, numbers in by_node.values():
        got = run_script_calls(client.get_redis_connection(node), script,
                               [calls[i] for i in numbers])
        for i, reply in zip(numbers, got, strict=True):
            replies[i] = reply
    refreshed = False
    for i, reply in enumerate(replies):
        if isinstance(reply, UNAVAILABLE):
            if refreshed:
                continue
            refreshed = True
        elif not isinstance(reply, REROUTE):
            continue
        keys, args = calls[i]
        try:
            replies[i] = script(keys=keys, args=args, client=client)
        except Exception as exc:
            replies[i] = exc
    return replies


def _send(client: Any, sha: str, calls: Sequence[ScriptCall]) -> list[Any]:
    replies: list[Any] = []
    pool = client.connection_pool
    conn = None
    try:
        conn = pool.get_connection()
        for count, chunks in _writes(conn, sha, calls):
            conn.send_packed_command([b"".join(chunks)])
            for _ in range(count):
                try:
                    replies.append(conn.read_response())
                except ResponseError as exc:
                    replies.append(exc)
    except UNAVAILABLE as exc:
        replies += [exc] * (len(calls) - len(replies))
        if conn is not None:
            conn.disconnect()  # unread replies would be taken for the next command's
    except BaseException:
        if conn is not None:
            conn.disconnect()
        raise
    finally:
        if conn is not None:
            pool.release(conn)
    return replies


def _writes(conn: Any, sha: str, calls: Sequence[ScriptCall]
            ) -> Iterator[tuple[int, list[bytes]]]:
    """Packed commands in groups of about WRITE_BYTES: (number of commands, chunks)."""
    count, chunks, size = 0, [], 0
    for keys, args in calls:
        packed = conn.pack_command("EVALSHA", sha, len(keys), *keys, *args)
        count += 1
        chunks += packed
        size += sum(len(chunk) for chunk in packed)
        if size >= WRITE_BYTES:
            yield count, chunks
            count, chunks, size = 0, [], 0
    if count:
        yield count, chunks
