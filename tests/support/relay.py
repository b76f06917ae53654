"""A TCP relay to a Redis-protocol server that a test can turn against the traffic through it:
lose every script call's reply (the call reaches the server and runs; the client's connection
is closed instead of the reply being passed on, as a timeout or a dropped connection would
do), cut the link (both ways go silent, connections stay open: a network partition), or send
new connections to another server (a failover the clients do not know of)."""

from __future__ import annotations

import select
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress


class Relay:
    """Relays 127.0.0.1:``port`` to the server at ``target``."""

    def __init__(self, target: tuple[str, int]) -> None:
        self._target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._losing = threading.Event()
        self._cut = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self.lost = 0  # replies lost, each after its call ran
        self._after_next: list[Callable[[], object]] = []
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def lose_replies(self, on: bool = True) -> None:
        """While on, the reply to every command that holds ``EVALSHA`` is lost: the call runs,
        then its connection is closed."""
        (self._losing.set if on else self._losing.clear)()

    def lose_next(self, then: Callable[[], object] = lambda: None) -> None:
        """Lose the reply to the next command that holds ``EVALSHA``, and call ``then()``
        before the client hears of it (the connection is closed after that)."""
        self._after_next.append(then)

    def cut(self, on: bool = True) -> None:
        """While on, nothing passes either way; the connections stay open."""
        (self._cut.set if on else self._cut.clear)()

    def retarget(self, target: tuple[str, int]) -> None:
        """Relay new connections to ``target``; close the ones open now."""
        with self._lock:
            self._target = target
            for sock in self._open:
                with suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

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
        try:
            with self._lock:
                target = self._target
            upstream = socket.create_connection(target)
        except OSError:
            conn.close()
            return
        with self._lock:
            self._open |= {conn, upstream}
        try:
            self._pass(conn, upstream)
        except OSError:
            return
        finally:
            with self._lock:
                self._open -= {conn, upstream}
            conn.close()
            upstream.close()

    def _pass(self, conn: socket.socket, upstream: socket.socket) -> None:
        """Pass data both ways until a side closes, or a reply to lose comes."""
        losing = False
        then: Callable[[], object] | None = None
        while not self._stop.is_set():
            if self._cut.is_set():
                self._stop.wait(0.02)
                continue
            ready, _, _ = select.select([conn, upstream], [], [], 0.05)
            if self._cut.is_set():  # cut while waiting: what came stays where it is
                continue
            for sock in ready:
                data = sock.recv(65536)
                if not data:
                    return
                if sock is upstream:
                    if losing:  # the script ran (its reply came): lose the reply
                        self.lost += 1
                        if then is not None:
                            then()
                        return
                    conn.sendall(data)
                    continue
                if b"EVALSHA" in data.upper() and not losing:
                    losing, then = self._to_lose()
                upstream.sendall(data)

    def _to_lose(self) -> tuple[bool, Callable[[], object] | None]:
        """Whether to lose the reply to a script call just sent, and what to call then."""
        if self._after_next:
            return True, self._after_next.pop(0)
        return self._losing.is_set(), None

    def close(self) -> None:
        self._stop.set()
        self._listener.close()
        for thread in self._threads:
            thread.join(timeout=2)


@contextmanager
def relay_to(target: tuple[str, int]) -> Iterator[Relay]:
    relay = Relay(target)
    try:
        yield relay
    finally:
        relay.close()
