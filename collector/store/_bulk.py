"""Many script calls in few socket writes over one connection: every script call takes this path.

redis-py's ``Pipeline`` asks ``SCRIPT EXISTS`` before every execute and sends every large
command (ours carry up to 1000 events) with its own ``sendall()``.  Each of those releases
the GIL, and getting it back from a game thread that is busy calling ``collect()`` takes up
to the interpreter's switch interval (5 ms).  A flush of 50 games spent most of its time
waiting for the GIL that way and fell behind the callers.  Here the calls go out in as few
buffers as possible (one, up to a few MB) and the replies are read back in order, so a flush
waits for the GIL a handful of times whatever its size.  A single call is a bulk of one.

With ``replicas`` (``[redis] wait_for_replicas``) a ``WAIT`` follows the calls on the same
connection, in the same last write: it covers every write that connection made, so the
calls' replies count only if enough replicas confirmed them (else each becomes
``NotReplicated``, holding the reply).  Without, nothing more is sent.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import redis
from hiredis import pack_command
from redis.exceptions import NoScriptError, ResponseError

from collector._constants import WRITE_BYTES
from collector.store._errors import LOST, UNAVAILABLE, MaybeRan, NotReplicated, maybe_ran
from collector.store._scripts import LuaScript

# One EVALSHA: the script, its KEYS and its ARGV.
WireCall = tuple[LuaScript, Sequence[str], Sequence[Any]]

# An argument longer than this (a collect call's entries, up to CALL_BYTES) goes to the
# write's buffer as it is, beside the rest of its call packed, not copied into a packed call
# first: the entries are copied once on their way to the socket, not twice.
APART_BYTES = 16 * 1024


def run_calls(
    client: redis.Redis,
    calls: Sequence[WireCall],
    replicas: int = 0,
    timeout_ms: int = 0,
    *,
    asking: bool = False,
) -> list[Any]:
    """Run every call on ``client``; one reply per call, in order.

    A reply is the script's result, the ``ResponseError`` the server refused the call with,
    or the connection error for a call whose reply never came, after ``[redis] retries`` more
    tries.  A call that was sent and whose reply was lost may have run: whatever its later
    attempts met, its reply is then ``MaybeRan`` (holding what the last one met), so that a
    refusal of a resend is never taken for the call's outcome.  Scripts missing from the
    server's cache (restarted or flushed) are loaded and the calls that met ``NOSCRIPT``
    sent again.  ``asking``: each call follows an ``ASKING`` (a cluster node's ASK redirect:
    the node is importing the calls' slot).
    """
    wait = (replicas, timeout_ms, asking)
    replies = _send(client, calls, wait)
    # Like redis-py's own commands: the calls a broken connection left unanswered are sent
    # again on a new one, up to the client's retry count ([redis] retries).
    retry = client.get_retry()
    for _ in range(retry.get_retries() if retry is not None else 0):
        if not _resend(client, calls, replies, _lost, wait):
            break
    missing = [i for i, reply in enumerate(replies) if _no_script(reply)]
    if missing:
        try:
            for script in {calls[i][0] for i in missing}:
                client.script_load(script.text)
        except UNAVAILABLE as exc:
            for i in missing:
                replies[i] = maybe_ran(replies[i], exc)
        else:
            _resend(client, calls, replies, _no_script, wait)
    return replies


def _lost(reply: Any) -> bool:
    """Whether a call's reply never came (a broken connection, a timeout)."""
    return isinstance(reply, LOST)


def _no_script(reply: Any) -> bool:
    """Whether a call met NOSCRIPT (after a lost reply too)."""
    if isinstance(reply, MaybeRan):
        reply = reply.reply
    return isinstance(reply, NoScriptError)


def _resend(
    client: redis.Redis,
    calls: Sequence[WireCall],
    replies: list[Any],
    kind: Callable[[Any], bool],
    wait: tuple[int, int, bool],
) -> bool:
    """Send again the calls whose reply is of ``kind``; False if there were none."""
    again = [i for i, reply in enumerate(replies) if kind(reply)]
    if not again:  # the usual case: not even a connection from the pool
        return False
    for i, reply in zip(again, _send(client, [calls[i] for i in again], wait), strict=True):
        replies[i] = maybe_ran(replies[i], reply)
    return bool(again)


def _send(
    client: redis.Redis, calls: Sequence[WireCall], wait: tuple[int, int, bool] = (0, 0, False)
) -> list[Any]:
    replies: list[Any] = []
    pool = client.connection_pool
    conn: Any = None
    sent = 0  # calls handed to the socket: those without a reply may have run
    try:
        conn = pool.get_connection()
        for count, chunks in _writes(conn, calls, wait):
            sent += count
            conn.send_packed_command([b"".join(chunks)])
            for _ in range(count):  # one by one: those read count if a later read fails
                replies.append(_reply(conn, wait[2]))
        if wait[0]:
            _confirm(conn, replies, wait[0], wait[1])
    except UNAVAILABLE as exc:
        lost = MaybeRan(exc)
        replies += [lost] * (sent - len(replies)) + [exc] * (len(calls) - sent)
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


def _reply(conn: Any, asking: bool) -> Any:
    """The next call's reply: its result, or the ``ResponseError`` it was refused with."""
    if asking:  # ASKING's OK first (a refusal of it shows in the call's reply)
        with contextlib.suppress(ResponseError):
            conn.read_response()
    try:
        return conn.read_response()
    except ResponseError as exc:
        return exc


def _confirm(conn: Any, replies: list[Any], replicas: int, timeout_ms: int) -> None:
    """Read the WAIT reply that follows the calls; unless it counts ``replicas``, the
    replies of the calls that ran become ``NotReplicated``."""
    try:
        acked: int | None = int(conn.read_response())
    except UNAVAILABLE:
        conn.disconnect()  # the calls ran; whether they were replicated is unknown
        acked = None
    except ResponseError:
        acked = None
    if acked is not None and acked >= replicas:
        return
    for i, reply in enumerate(replies):
        if not isinstance(reply, Exception):
            replies[i] = NotReplicated(reply, acked, replicas, timeout_ms)


def _writes(
    conn: Any, calls: Sequence[WireCall], wait: tuple[int, int, bool] = (0, 0, False)
) -> Iterator[tuple[int, list[bytes]]]:
    """Packed commands in groups of about WRITE_BYTES: (number of script calls, chunks); the
    WAIT, if any, rides at the end of the last group (its reply is read apart)."""
    count, chunks, size = 0, [], 0
    asking = conn.pack_command("ASKING") if wait[2] else None
    for script, keys, args in calls:
        packed = _packed(("EVALSHA", script.sha, len(keys), *keys, *args))
        if asking:  # rare: a call sent again after an ASK redirect
            packed = asking + packed
        count += 1
        chunks += packed
        size += sum(map(len, packed))
        if size >= WRITE_BYTES:
            yield count, chunks
            count, chunks, size = 0, [], 0
    if wait[0]:
        chunks += conn.pack_command("WAIT", wait[0], wait[1])
    if count or chunks:
        yield count, chunks


def _packed(command: tuple[Any, ...]) -> list[bytes]:
    """``command`` in the Redis protocol (as redis-py packs it with hiredis), in chunks: the
    arguments longer than APART_BYTES each its own chunk, the rest packed around them."""
    apart = [i for i, arg in enumerate(command) if type(arg) is bytes and len(arg) > APART_BYTES]
    if not apart:
        return [pack_command(command)]
    chunks = [b"*%d\r\n" % len(command)]
    start = 0
    for i in apart:
        if start < i:
            chunks.append(_without_count(command[start:i]))
        chunks += (b"$%d\r\n" % len(command[i]), command[i], b"\r\n")
        start = i + 1
    if start < len(command):
        chunks.append(_without_count(command[start:]))
    return chunks


def _without_count(arguments: tuple[Any, ...]) -> bytes:
    """``arguments`` packed, without the count that heads a command ("*<n>\\r\\n")."""
    packed: bytes = pack_command(arguments)
    return packed[packed.index(b"\r\n") + 2 :]
