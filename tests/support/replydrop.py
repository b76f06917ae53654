"""A TCP relay to a Redis-protocol server that loses the reply to a script call on request:
the call reaches the server and runs, and the client's connection is closed instead of the
reply being passed on, as a timeout or a dropped connection would do.  The client's retry
(``[redis] retries``) then sends the same call again on a new connection."""

from __future__ import annotations

import select
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry


class ReplyDropper:
    """Relays 127.0.0.1:``port`` to the server at ``target``; ``drop_next()`` loses the reply
    to the next command that holds ``EVALSHA``."""

    def __init__(self, target: tuple[str, int]) -> None:
        self._target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._armed = threading.Event()
        self._stop = threading.Event()
        self.dropped = 0
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def drop_next(self) -> None:
        self._armed.set()

    def client(self) -> redis.Redis:
        """A client through the relay that sends a call again once after a lost reply."""
        return redis.Redis(
            host="127.0.0.1", port=self.port, socket_timeout=5, retry=Retry(NoBackoff(), 1)
        )

    def _accept(self) -> None:
        self._listener.settimeout(0.1)
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            relay = threading.Thread(target=self._relay, args=(conn,), daemon=True)
            self._threads.append(relay)
            relay.start()

    def _relay(self, conn: socket.socket) -> None:
        upstream = socket.create_connection(self._target)
        losing = False
        try:
            while not self._stop.is_set():
                ready, _, _ = select.select([conn, upstream], [], [], 0.1)
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        return
                    if sock is conn:
                        if self._armed.is_set() and b"EVALSHA" in data.upper():
                            self._armed.clear()
                            losing = True
                        upstream.sendall(data)
                    elif losing:  # the script ran (its reply came): lose the reply
                        self.dropped += 1
                        return
                    else:
                        conn.sendall(data)
        except OSError:
            return
        finally:
            conn.close()
            upstream.close()

    def close(self) -> None:
        self._stop.set()
        self._listener.close()
        for thread in self._threads:
            thread.join(timeout=2)


@contextmanager
def reply_dropper(target: tuple[str, int]) -> Iterator[ReplyDropper]:
    relay = ReplyDropper(target)
    try:
        yield relay
    finally:
        relay.close()
