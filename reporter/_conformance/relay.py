"""A TCP relay between a producer and Redis that makes the faults a producer must survive.

It reads the producer's commands (RESP arrays of bulk strings, as every client sends them),
notes each collect call (an ``EVALSHA`` or ``EVAL``), and on request:

- loses the reply to the next collect call: the call reaches Redis and runs, then the
  producer's connection is closed before the reply is passed on (a timeout or a dropped
  connection after the write);
- loses the next collect call itself: the connection is closed before the call reaches Redis
  (the same thing as seen by the producer, but nothing ran);
- cuts Redis off: every connection is closed, and new ones are closed as soon as they are
  accepted, until ``restore()``.

The producer cannot tell the first two apart, which is the point: it must send the same write
again (same writer id and sequence number) and let the script answer a repeat.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
import time
from dataclasses import dataclass

# How long a reply is waited for (and thrown away) after a call whose reply is lost was passed
# on: Redis runs a collect call in well under a millisecond on loopback.
RAN_WAIT_SECONDS = 0.2
_COLLECT_COMMANDS = (b"EVALSHA", b"EVAL")


@dataclass(frozen=True)
class SeenCall:
    """A collect call as the relay saw it: its arguments after the command name, and what the
    relay did with it ("passed", "reply lost", "call lost")."""

    args: tuple[bytes, ...]
    fate: str

    def argv(self) -> tuple[bytes, ...]:
        """The script's ARGV: after the SHA (or text), the key count and the keys."""
        try:
            keys = int(self.args[1])
        except (IndexError, ValueError):
            return ()
        return self.args[2 + keys :]


def parse_command(data: bytearray | bytes, start: int = 0) -> tuple[list[bytes], int] | None:
    """One RESP command (an array of bulk strings) at ``start``: its parts and where the next
    begins; None while it is incomplete.  An inline command (a line of words) is read as one
    part per word."""
    if start >= len(data):
        return None
    if data[start : start + 1] != b"*":
        end = data.find(b"\r\n", start)
        return None if end < 0 else (bytes(data[start:end]).split(), end + 2)
    end = data.find(b"\r\n", start)
    if end < 0:
        return None
    count = int(data[start + 1 : end])
    parts: list[bytes] = []
    pos = end + 2
    for _ in range(max(count, 0)):
        end = data.find(b"\r\n", pos)
        if end < 0:
            return None
        if data[pos : pos + 1] != b"$":
            raise ValueError(f"not a bulk string at byte {pos}")
        size = int(data[pos + 1 : end])
        if len(data) < end + 2 + size + 2:
            return None
        parts.append(bytes(data[end + 2 : end + 2 + size]))
        pos = end + 2 + size + 2
    return parts, pos


class Relay:
    """Relays 127.0.0.1:``port`` to ``target`` (host, port) until ``close()``."""

    def __init__(self, target: tuple[str, int]) -> None:
        self._target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._lock = threading.Lock()
        self._lose: str = ""  # "reply" or "call": the next collect call's fault
        self._cut = False
        self._stop = threading.Event()
        self._open: set[socket.socket] = set()
        self._refused = threading.Semaphore(0)  # a release per connection closed while cut
        self.calls: list[SeenCall] = []
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def lose_next_reply(self) -> None:
        with self._lock:
            self._lose = "reply"

    def lose_next_call(self) -> None:
        with self._lock:
            self._lose = "call"

    @property
    def armed(self) -> bool:
        """Whether a fault asked for has not happened yet."""
        return bool(self._lose)

    def cut(self) -> None:
        """Close every connection, and each new one at once, until ``restore()``."""
        with self._lock:
            self._cut = True
            conns, self._open = self._open, set()
        for conn in conns:
            _close(conn)

    def wait_refused(self, count: int, seconds: float) -> bool:
        """Whether ``count`` connections were closed at once while cut, within ``seconds``."""
        deadline = time.monotonic() + seconds
        return all(
            self._refused.acquire(timeout=max(0.0, deadline - time.monotonic()))
            for _ in range(count)
        )

    def restore(self) -> None:
        with self._lock:
            self._cut = False

    def _accept(self) -> None:
        self._listener.settimeout(0.1)
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                cut = self._cut
            if cut:
                _close(conn)
                self._refused.release()
                continue
            thread = threading.Thread(target=self._relay, args=(conn,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _relay(self, conn: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self._target, timeout=5)
        except OSError:
            _close(conn)
            return
        with self._lock:
            self._open.update((conn, upstream))
        pending = bytearray()
        try:
            while not self._stop.is_set():
                ready, _, _ = select.select([conn, upstream], [], [], 0.1)
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        return
                    if sock is upstream:
                        conn.sendall(data)
                        continue
                    pending += data
                    if not self._forward(pending, upstream):
                        return
        except (OSError, ValueError):
            return
        finally:
            with self._lock:
                self._open.difference_update((conn, upstream))
            _close(conn)
            _close(upstream)

    def _forward(self, pending: bytearray, upstream: socket.socket) -> bool:
        """Pass on the whole commands in ``pending`` (and take them out of it); False once a
        fault ended the connection."""
        pos = 0
        while (parsed := parse_command(pending, pos)) is not None:
            parts, end = parsed
            if parts and parts[0].upper() in _COLLECT_COMMANDS:
                with self._lock:
                    fate, self._lose = self._lose, ""
                if fate == "call":
                    upstream.sendall(pending[:pos])  # the commands before it go on
                    self._note(parts, "call lost")
                    return False
                if fate == "reply":
                    upstream.sendall(pending[:end])
                    self._note(parts, "reply lost")
                    _drain(upstream, RAN_WAIT_SECONDS)
                    return False
                self._note(parts, "passed")
            pos = end
        if pos:
            upstream.sendall(pending[:pos])
            del pending[:pos]
        return True

    def _note(self, parts: list[bytes], fate: str) -> None:
        with self._lock:
            self.calls.append(SeenCall(tuple(parts[1:]), fate))

    def close(self) -> None:
        self._stop.set()
        _close(self._listener)
        self.cut()
        for thread in self._threads:
            thread.join(timeout=2)


def _drain(sock: socket.socket, seconds: float) -> None:
    """Read and throw away what ``sock`` sends for ``seconds`` (the lost reply)."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([sock], [], [], left)
        if ready and not sock.recv(65536):
            return


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
