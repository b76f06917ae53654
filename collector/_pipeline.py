"""Many script calls in one socket write, for the flusher on a single Redis server.

redis-py's ``Pipeline`` asks ``SCRIPT EXISTS`` before every execute and sends every large
command (ours carry up to 1000 events) with its own ``sendall()``.  Each of those releases
the GIL, and getting it back from a game thread that is busy calling ``collect()`` takes up
to the interpreter's switch interval (5 ms).  A flush of 50 games spent most of its time
waiting for the GIL that way and fell behind the callers.  Here the calls of one flush go out
as one buffer and the replies are read back in order, so a flush waits for the GIL a handful
of times whatever its size.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.commands.core import Script
from redis.exceptions import NoScriptError, ResponseError

# (keys, args) of one EVALSHA.
ScriptCall = tuple[Sequence[str], Sequence[Any]]


def run_script_calls(client: Any, script: Script, calls: Sequence[ScriptCall]) -> list[Any]:
    """Run ``script`` once per call on ``client`` (a ``redis.Redis``); return the replies.

    A call the server refused gets its ``ResponseError`` as its reply, as in a pipeline run
    with ``raise_on_error=False``.  Scripts missing from the server's cache (restarted or
    flushed) are loaded and the calls that met ``NOSCRIPT`` sent again.  A connection error
    is raised: any of the calls may or may not have run then.
    """
    replies = _send(client, script.sha, calls)
    missing = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
    if missing:
        client.script_load(script.script)
        again = _send(client, script.sha, [calls[i] for i in missing])
        for i, reply in zip(missing, again, strict=True):
            replies[i] = reply
    return replies


def _send(client: Any, sha: str, calls: Sequence[ScriptCall]) -> list[Any]:
    pool = client.connection_pool
    conn = pool.get_connection()
    try:
        chunks = conn.pack_commands(
            [("EVALSHA", sha, len(keys), *keys, *args) for keys, args in calls])
        conn.send_packed_command([b"".join(chunks)])
        replies: list[Any] = []
        for _ in calls:
            try:
                replies.append(conn.read_response())
            except ResponseError as exc:
                replies.append(exc)
        return replies
    except BaseException:
        conn.disconnect()  # unread replies would be taken for the next command's
        raise
    finally:
        pool.release(conn)
