"""A small HTTP server that an outsider cannot turn against its process.

One selector thread accepts, reads requests and writes answers, all without blocking; a few
worker threads compute the answers that may take a while (``/metrics``), and one more those of
the health paths (``/readyz``), so that a probe never queues behind scrapes.  So an idle or
half-sent connection costs a file descriptor and a few kilobytes, never a thread, and:

- each request must arrive whole (head and body) within ``request_seconds`` of the
  connection opening or of the previous answer, and each answer must be taken within
  ``answer_seconds``: otherwise the connection is closed (counted as ``deadline``);
- at most ``max_connections`` are open, the last ``Limits.health_reserve`` of them (on a
  server with ``health`` paths) for health probes only.  A new connection past the others'
  share closes the connection whose peer has kept it waiting longest, for its request or to
  take its answer (so pipelined requests whose answers are never read hold no slot); if
  every connection is being answered, it takes a reserved slot, where anything but a health
  path is answered 503 and closed; if those are busy too, it is closed itself.  Each is
  counted as ``over_cap``.  A request is read as its connection is accepted, so a probe is
  answered before later connections can push it out: it gets in during any flood;
- a failed ``accept`` (out of file descriptors, EMFILE) stops accepting for a while, doubling
  up to ``MAX_BACKOFF_SECONDS``, instead of spinning on a listening socket that stays ready;
- requests it will not serve (too large, malformed, a method it does not serve) are
  answered with a 4xx and closed (counted as ``bad_request``);
- a request may be ``screen``-ed once its head has arrived, before its body is read: an
  answer there (such as 401) is sent without waiting for the body, and the connection closes
  after it unless the body had already arrived whole;
- where the server takes them (``chunked``), bodies sent in chunks are decoded as they
  arrive (``chunked.ChunkedBody``), within the same bound and deadline.  A client that asked
  for ``100 Continue`` gets it once the head has passed.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import queue
import selectors
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from collector.logs import RateLimitedLog
from reporter._http.chunked import ChunkedBody
from reporter._http.server_wire import (
    METHODS,
    Answer,
    BadRequest,
    Request,
    encode,
    expects_continue,
    head_end,
    parse_head,
)
from reporter._http.shedding import BAD_REQUEST, DEADLINE, OVER_CAP, Counts, Limits

logger = logging.getLogger("reporter")
ratelog = RateLimitedLog(logger, interval=30.0)

Handle = Callable[[Request], Answer]
# Looks at a request's head before its body is read: an answer to send at once, or None.
Screen = Callable[[Request], Answer | None]

MIN_BACKOFF_SECONDS = 0.05
MAX_BACKOFF_SECONDS = 2.0
RECV_BYTES = 16 * 1024
# While a body is on its way, reads ask for what is missing, up to this much at once.
BODY_RECV_BYTES = 256 * 1024
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
# Connections the kernel completes before they are accepted (capped by its somaxconn; they
# cost the process no descriptor).  Deep, so that during a flood a probe's connection waits
# in the queue for a moment rather than having its SYN dropped and retried a second later.
BACKLOG = 4096
# Then the connections already open get their turn: well below any sensible cap, so a
# connection accepted in one round has its request read before a later round evicts it.
ACCEPTS_PER_WAKE = 8
TICK_SECONDS = 0.1  # how often deadlines are checked
INTERNAL_ERROR = Answer(500, "application/json", b'{"error": "internal error"}\n', close=True)
RESERVED_ONLY = Answer(
    503,
    "application/json",
    b'{"error": "too many connections; only the health paths are served on this one"}\n',
    close=True,
)

READING, WORKING, WRITING, DRAINING, CLOSED = range(5)
# After an answer that closes the connection, what the client still sends is read and
# dropped for this long before the close, so the answer is not lost to a reset.
LINGER_SECONDS = 1.0


class _Conn:
    __slots__ = (
        "buffer",
        "chunks",
        "close_after",
        "deadline",
        "head",
        "out",
        "reserved",
        "screened",
        "served",
        "sock",
        "state",
        "waiting_since",
        "watched",
    )

    def __init__(
        self, sock: socket.socket, now: float, request_seconds: float, reserved: bool
    ) -> None:
        self.sock = sock
        self.reserved = reserved  # in the health share of the cap: health paths only
        self.state = READING
        self.buffer = bytearray()
        self.head: Request | None = None  # of the request whose body is on its way
        self.screened = False  # whether ``head`` passed the screen
        self.chunks: ChunkedBody | None = None  # ``head``'s body, if it comes in chunks
        self.out = memoryview(b"")
        self.close_after = False
        self.served = 0
        # Since when the peer has kept this connection waiting: for its request, or (while
        # WRITING) to take more of the answer.  The longest waiting gives way first at the cap.
        self.waiting_since = now
        self.deadline = now + request_seconds
        self.watched = 0


@dataclass(frozen=True)
class Serving:
    """What a ``BoundedServer`` serves: ``handle``'s answers; ``inline`` requests are answered
    on the selector thread itself (cheap ones, such as a liveness probe, so they never queue
    behind a slow answer).  ``name`` names its threads and its log lines; ``methods`` are the
    methods it serves; ``screen`` looks at a request's head before its body is read;
    ``chunked``: bodies sent in chunks are taken (else 501).  ``health`` requests (probes)
    may use the reserved share of the cap, and those not inline have a worker of their own;
    without ``health`` nothing is reserved."""

    handle: Handle
    inline: Callable[[Request], bool]
    name: str = "metrics"
    methods: tuple[str, ...] = METHODS
    screen: Screen | None = None
    health: Callable[[Request], bool] | None = None
    chunked: bool = False


class BoundedServer:
    """Serves ``serving`` at ``address`` within ``limits``, counting what it shed."""

    def __init__(
        self,
        address: tuple[str, int],
        family: socket.AddressFamily,
        serving: Serving,
        limits: Limits | None = None,
        counts: Counts | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        health = serving.health
        self._handle = serving.handle
        self._inline = serving.inline
        self._health = health or (lambda _request: False)
        self._name = serving.name
        self._methods = serving.methods
        self._screen = serving.screen
        self._chunked = serving.chunked  # whether bodies sent in chunks are taken (else 501)
        self._limits = limits or Limits()
        self._reserve = 0 if health is None else self._limits.health_reserve
        self._clock = clock
        self.counts = counts if counts is not None else Counts()
        self._listener = socket.socket(family, socket.SOCK_STREAM)
        try:
            if hasattr(socket, "SO_REUSEADDR") and not hasattr(socket, "SO_EXCLUSIVEADDRUSE"):
                self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._listener.bind(address)
            self._listener.listen(BACKLOG)
            self._listener.setblocking(False)
        except OSError:
            self._listener.close()
            raise
        self.address: tuple[str, int] = self._listener.getsockname()[:2]
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._selector.register(self._listener, selectors.EVENT_READ, self._listener)
        self._listening = True
        self._paused_until = 0.0
        self._backoff = 0.0
        self._conns: set[_Conn] = set()
        self._work: queue.SimpleQueue[tuple[_Conn, Request] | None] = queue.SimpleQueue()
        self._health_work: queue.SimpleQueue[tuple[_Conn, Request] | None] = queue.SimpleQueue()
        self._done: queue.SimpleQueue[tuple[_Conn, Request, Answer]] = queue.SimpleQueue()
        self._stopping = False
        self._threads: list[threading.Thread] = []

    @classmethod
    def at(
        cls,
        address: tuple[str, int],
        serving: Serving,
        limits: Limits | None = None,
        counts: Counts | None = None,
    ) -> BoundedServer:
        """A server bound to ``address``, of the family its host resolves to; ``OSError``
        if it cannot be bound."""
        family = socket.getaddrinfo(*address, type=socket.SOCK_STREAM)[0][0]
        return cls(address, family, serving, limits, counts)

    @property
    def url(self) -> str:
        """``http://host:port`` of the bound address (the port chosen if it was 0)."""
        host, port = self.address
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    def start(self) -> None:
        name = self._name
        self._threads = [threading.Thread(target=self._run, name=f"{name}-http", daemon=True)]
        self._threads += [
            threading.Thread(
                target=self._worker, args=(self._work,), name=f"{name}-http-{n}", daemon=True
            )
            for n in range(self._limits.workers)
        ]
        self._threads.append(
            threading.Thread(
                target=self._worker,
                args=(self._health_work,),
                name=f"{name}-http-health",
                daemon=True,
            )
        )
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stopping = True
        for _ in range(self._limits.workers):
            self._work.put(None)
        self._health_work.put(None)
        self._wake()
        for thread in self._threads:
            thread.join(5)
        if self._threads and self._threads[0].is_alive():  # stuck: at least stop listening
            self._listener.close()

    @property
    def open_connections(self) -> int:
        return len(self._conns)

    # -- the selector thread -------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._stopping:
                ready = self._selector.select(TICK_SECONDS)
                # Connections first: a request that has arrived is read (and a probe
                # answered) before new connections may push its connection out.
                for key, events in ready:
                    if key.data is None:
                        self._drain_wake()
                    elif key.data is not self._listener:
                        self._ready(key.data, events)
                if any(key.data is self._listener for key, _ in ready):
                    self._accept()
                self._finish_work()
                self._tick(self._clock())
        except Exception:  # a bug: say so; stop() still closes every socket
            logger.exception("the %s server stopped", self._name)
        finally:
            self._close_all()

    def _ready(self, conn: _Conn, events: int) -> None:
        if events & selectors.EVENT_READ and conn.state == DRAINING:
            self._drain(conn)
        if events & selectors.EVENT_READ and conn.state == READING:
            self._read(conn)
        if events & selectors.EVENT_WRITE and conn.state == WRITING:
            self._write(conn)
            if conn.state == READING and conn.buffer:  # a request sent before the answer
                self._serve(conn)

    def _accept(self) -> None:
        for _ in range(ACCEPTS_PER_WAKE):
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:  # the peer gave up while it waited in the backlog
                continue
            except OSError as exc:
                self._accept_failed(exc)
                return
            self._backoff = 0.0
            reserved = self._admit()
            if reserved is None:
                self.counts.drop(OVER_CAP)
                sock.close()
                continue
            sock.setblocking(False)
            if sock.family in (socket.AF_INET, socket.AF_INET6):
                # the answer goes out at once, not after the client's delayed ACK
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = _Conn(sock, self._clock(), self._limits.request_seconds, reserved)
            self._conns.add(conn)
            self._watch(conn, selectors.EVENT_READ)
            # A probe sends its request with the connection: it is read (and a health
            # request answered or queued) now, before later accepts may push it out.
            self._read(conn)

    def _accept_failed(self, exc: OSError) -> None:
        code = errno.errorcode.get(exc.errno or 0, type(exc).__name__)
        self.counts.accept_error(code)
        self._backoff = min(MAX_BACKOFF_SECONDS, max(MIN_BACKOFF_SECONDS, self._backoff * 2))
        self._paused_until = self._clock() + self._backoff
        if self._listening:
            self._selector.unregister(self._listener)
            self._listening = False
        ratelog.log(
            logging.WARNING,
            f"accept:{code}",
            "%s server: accepting a connection failed (%s); not accepting for %.2f s",
            self._name,
            code,
            self._backoff,
        )

    def _admit(self) -> bool | None:
        """Make room for a new connection: whether it is in the reserved share (False: a
        slot of its own; None: no room, every connection is being answered)."""
        cap = self._limits.max_connections
        reserved = sum(1 for c in self._conns if c.reserved)
        if len(self._conns) - reserved < cap - self._reserve or self._evict(False):
            return False
        if len(self._conns) < cap or self._evict(True):
            return True
        return None

    def _evict(self, reserved: bool) -> bool:
        """Close a connection of the reserved share (or of the other), if one waits on its
        peer: one lingering after its last answer first, then the one whose peer has kept it
        waiting longest, for its request or to take some of its answer."""
        waiting = [
            c
            for c in self._conns
            if c.reserved == reserved and c.state in (READING, DRAINING, WRITING)
        ]
        if not waiting:
            return False
        self.counts.drop(OVER_CAP)
        self._close(min(waiting, key=lambda c: (c.state != DRAINING, c.waiting_since)))
        return True

    def _read(self, conn: _Conn) -> None:
        size = RECV_BYTES
        if conn.head is not None:  # a body on its way: ask for what is missing
            size = min(max(size, conn.head.body_bytes - len(conn.buffer)), BODY_RECV_BYTES)
        try:
            data = conn.sock.recv(size)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(conn)
            return
        if not data:
            self._close(conn)
            return
        conn.buffer += data
        self._serve(conn)

    def _drain(self, conn: _Conn) -> None:
        try:
            if conn.sock.recv(RECV_BYTES):
                return
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            pass
        self._close(conn)

    def _serve(self, conn: _Conn) -> None:
        """Answer the requests in the connection's buffer while that can be done now."""
        while conn.state == READING:
            request = self._next_request(conn)
            if request is None:
                if conn.head is None or conn.screened:
                    return
                self._screen_head(conn, conn.head)
                continue
            health = self._health(request)
            if conn.reserved and not health:
                self.counts.drop(OVER_CAP)
                self._answer(conn, request, RESERVED_ONLY)
            elif self._inline(request):
                self._answer(conn, request, self._handled(request))
            else:
                conn.state = WORKING
                self._watch(conn, 0)
                (self._health_work if health else self._work).put((conn, request))

    def _next_request(self, conn: _Conn) -> Request | None:
        """The next request once it has arrived whole and passed the screen; None while its
        head is missing (``conn.head`` None), waits for the screen, or waits for its body."""
        if conn.head is None:
            try:
                end = head_end(conn.buffer)
                if end < 0:
                    return None
                conn.head = parse_head(
                    bytes(conn.buffer[:end]),
                    self._methods,
                    self._limits.max_body_bytes,
                    self._chunked,
                )
            except BadRequest as bad:
                self.counts.drop(BAD_REQUEST)
                self._answer(conn, None, bad.answer)
                return None
            del conn.buffer[:end]
            conn.screened = self._screen is None
        head = conn.head
        if not conn.screened:
            return None
        if head.chunked:
            return self._chunked_request(conn, head)
        if len(conn.buffer) < head.body_bytes:
            return None
        request, conn.head = head, None
        if head.body_bytes:
            request = replace(head, body=bytes(conn.buffer[: head.body_bytes]))
            del conn.buffer[: head.body_bytes]
        return request

    def _chunked_request(self, conn: _Conn, head: Request) -> Request | None:
        """The request once its chunked body is whole; None while it is on its way, or
        once a body that breaks the rules was answered (and the connection closes)."""
        if conn.chunks is None:
            conn.chunks = ChunkedBody(self._limits.max_body_bytes)
        try:
            if not conn.chunks.feed(conn.buffer):
                return None
        except BadRequest as bad:
            conn.head = conn.chunks = None
            self.counts.drop(BAD_REQUEST)
            self._answer(conn, None, bad.answer)
            return None
        request = replace(head, body=conn.chunks.body())
        conn.head = conn.chunks = None
        return request

    def _screen_head(self, conn: _Conn, head: Request) -> None:
        """Let the screen answer a request before its body has arrived; else ask for the body
        if the client waits to be asked."""
        conn.screened = True
        answer = self._screened(head)
        if answer is not None:
            conn.head = None
            if not head.chunked and len(conn.buffer) >= head.body_bytes:  # it came whole:
                del conn.buffer[: head.body_bytes]  # the connection may stay
            else:  # the rest of the body is on its way: closing is the only way past it
                answer = replace(answer, close=True)
            self._answer(conn, head, answer)
        elif expects_continue(head) and len(conn.buffer) < max(head.body_bytes, 1):
            # A few bytes on an idle socket: if they do not fit, the client sends anyway.
            with contextlib.suppress(OSError):
                conn.sock.send(CONTINUE)

    def _answer(self, conn: _Conn, request: Request | None, answer: Answer) -> None:
        close = answer.close or request is None or not request.keep_alive or self._stopping
        conn.out = memoryview(
            encode(replace(answer, close=close), request.method if request else "GET")
        )
        conn.close_after = close
        conn.state = WRITING
        conn.waiting_since = self._clock()
        conn.deadline = conn.waiting_since + self._limits.answer_seconds
        self._write(conn)

    def _write(self, conn: _Conn) -> None:
        try:
            sent = conn.sock.send(conn.out)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            self._close(conn)
            return
        conn.out = conn.out[sent:]
        now = self._clock()
        if conn.out:
            if sent:  # the peer takes the answer: it keeps us waiting only from now
                conn.waiting_since = now
            self._watch(conn, selectors.EVENT_WRITE)
            return
        if conn.close_after:
            try:
                conn.sock.shutdown(socket.SHUT_WR)
            except OSError:
                self._close(conn)
                return
            conn.state, conn.deadline = DRAINING, now + LINGER_SECONDS
            conn.buffer = bytearray()
            self._watch(conn, selectors.EVENT_READ)
            return
        conn.state, conn.served, conn.waiting_since = READING, conn.served + 1, now
        conn.deadline = now + self._limits.request_seconds
        self._watch(conn, selectors.EVENT_READ)

    def _finish_work(self) -> None:
        while True:
            try:
                conn, request, answer = self._done.get_nowait()
            except queue.Empty:
                return
            if conn.state == WORKING:
                self._answer(conn, request, answer)
                if conn.state == READING:  # kept alive and written whole: a next request?
                    self._serve(conn)

    def _tick(self, now: float) -> None:
        for conn in [
            c for c in self._conns if c.state in (READING, WRITING, DRAINING) and now >= c.deadline
        ]:
            # A kept-alive connection idle after its answers just ends, as does a lingering
            # close; one that never sent a whole request, or did not take its answer, counts.
            if conn.state != DRAINING and not (
                conn.state == READING and conn.served and not conn.buffer and conn.head is None
            ):
                self.counts.drop(DEADLINE)
            self._close(conn)
        if not self._listening and now >= self._paused_until and not self._stopping:
            self._selector.register(self._listener, selectors.EVENT_READ, self._listener)
            self._listening = True

    def _watch(self, conn: _Conn, events: int) -> None:
        if events == conn.watched:
            return
        if not events:
            self._selector.unregister(conn.sock)
        elif conn.watched:
            self._selector.modify(conn.sock, events, conn)
        else:
            self._selector.register(conn.sock, events, conn)
        conn.watched = events

    def _close(self, conn: _Conn) -> None:
        if conn.state == CLOSED:
            return
        if conn.watched:
            self._selector.unregister(conn.sock)
            conn.watched = 0
        conn.state = CLOSED
        conn.buffer = bytearray()
        conn.out = memoryview(b"")
        self._conns.discard(conn)
        conn.sock.close()

    def _close_all(self) -> None:
        for conn in list(self._conns):
            self._close(conn)
        for sock in (self._listener, self._wake_r, self._wake_w):
            sock.close()
        self._selector.close()

    def _wake(self) -> None:
        # OSError: the pipe is full (a wake is pending) or closed (stopped)
        with contextlib.suppress(OSError):
            self._wake_w.send(b"\0")

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except OSError:
            pass

    # -- the workers ---------------------------------------------------------------------------

    def _worker(self, work: queue.SimpleQueue[tuple[_Conn, Request] | None]) -> None:
        while (item := work.get()) is not None:
            conn, request = item
            self._done.put((conn, request, self._handled(request)))
            self._wake()

    def _screened(self, head: Request) -> Answer | None:
        if self._screen is None:
            return None
        try:
            return self._screen(head)
        except Exception:  # the screen answers its own errors; this is the last resort
            ratelog.log(
                logging.ERROR,
                "screen",
                "%s server: screening a request failed",
                self._name,
                exc_info=True,
            )
            return INTERNAL_ERROR

    def _handled(self, request: Request) -> Answer:
        try:
            return self._handle(request)
        except Exception:  # the handler answers its own errors; this is the last resort
            ratelog.log(
                logging.ERROR,
                "handler",
                "%s server: answering a request failed",
                self._name,
                exc_info=True,
            )
            return INTERNAL_ERROR
