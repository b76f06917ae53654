"""A request body sent in chunks (``Transfer-Encoding: chunked``, RFC 9112 section 7.1),
decoded as its bytes arrive.

Each chunk is its size in hex (extensions after ``;`` ignored), CRLF, the data, CRLF; a chunk
of size 0 ends the data, then trailer fields (read and dropped) up to an empty line.  The
decoder keeps its place between reads, so a body that arrives in many pieces is read once,
and it refuses, as the bytes arrive, a body over the server's bound, a size line or a trailer
section over ``MAX_HEAD_BYTES``, or more than ``MAX_CHUNKS`` chunks (a body of one-byte
chunks costs the server far more per byte than its length says).
"""

from __future__ import annotations

import re

from reporter._http.server_wire import MAX_HEAD_BYTES, BadRequest

MAX_CHUNKS = 100_000
_SIZE_LINE_BYTES = 1024
_HEX = re.compile(rb"[0-9A-Fa-f]{1,16}")
SIZE, DATA, DATA_END, TRAILER, DONE = range(5)


class ChunkedBody:
    """One chunked body: ``feed`` it the connection's buffer as bytes arrive."""

    def __init__(self, max_bytes: int) -> None:
        self._max = max_bytes
        self._parts: list[bytes] = []
        self._size = 0
        self._chunks = 0
        self._left = 0  # data bytes of the current chunk still to come
        self._trailer = 0  # trailer bytes read so far
        self._state = SIZE

    def feed(self, buffer: bytearray) -> bool:
        """Take what it can from the front of ``buffer``; True once the body is whole (what
        follows it stays in ``buffer``).  ``BadRequest`` for a malformed or too large body."""
        steps = {
            SIZE: self._size_line,
            DATA: self._data,
            DATA_END: self._data_end,
            TRAILER: self._trailer_line,
        }
        while self._state != DONE:
            if not steps[self._state](buffer):
                return False
        return True

    def _size_line(self, buffer: bytearray) -> bool:
        end = buffer.find(b"\r\n", 0, _SIZE_LINE_BYTES)
        if end < 0:
            if len(buffer) >= _SIZE_LINE_BYTES:
                raise BadRequest(400, "malformed chunk size")
            return False
        self._chunk(bytes(buffer[:end]).split(b";")[0].strip(b" \t"))
        del buffer[: end + 2]
        return True

    def _data(self, buffer: bytearray) -> bool:
        take = min(self._left, len(buffer))
        if not take:
            return False
        self._parts.append(bytes(buffer[:take]))
        del buffer[:take]
        self._left -= take
        if not self._left:
            self._state = DATA_END
        return True

    def _data_end(self, buffer: bytearray) -> bool:
        if len(buffer) < 2:
            return False
        if buffer[:2] != b"\r\n":
            raise BadRequest(400, "malformed chunk: no CRLF after its data")
        del buffer[:2]
        self._state = SIZE
        return True

    def _trailer_line(self, buffer: bytearray) -> bool:
        room = MAX_HEAD_BYTES - self._trailer
        end = buffer.find(b"\r\n", 0, room + 2)
        if end < 0:
            if len(buffer) >= room + 2:
                raise BadRequest(431, "chunked body's trailer section too large")
            return False
        del buffer[: end + 2]
        self._trailer += end + 2
        if not end:  # the empty line: the body is whole
            self._state = DONE
        return True

    def _chunk(self, line: bytes) -> None:
        if not _HEX.fullmatch(line):
            raise BadRequest(400, "malformed chunk size")
        size = int(line, 16)
        self._chunks += 1
        if not size:
            self._state = TRAILER
            return
        if self._size + size > self._max:
            raise BadRequest(413, f"request body too large: over {self._max} bytes")
        if self._chunks > MAX_CHUNKS:
            raise BadRequest(413, f"request body in more than {MAX_CHUNKS} chunks")
        self._size += size
        self._left = size
        self._state = DATA

    def body(self) -> bytes:
        return b"".join(self._parts)
