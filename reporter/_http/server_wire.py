"""The little of HTTP/1.1 the reporter's servers speak: a request head read from bytes, an
answer written as bytes.

Requests have a small head (``MAX_HEAD_BYTES``), one of the server's methods (by default GET
or HEAD) and a body of at most the server's bound, given by ``Content-Length``, or sent in
chunks where the server takes them (``chunked``; else refused with 501).  Anything else gets
a 4xx/5xx answer and the connection is closed after it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from urllib.parse import urlsplit

MAX_HEAD_BYTES = 8 * 1024
MAX_BODY_BYTES = 64 * 1024
METHODS = ("GET", "HEAD")

_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_VERSION = re.compile(rb"HTTP/1\.[01]")


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str
    keep_alive: bool
    body_bytes: int  # Content-Length: the body follows the head
    # The header fields, names in lower case (a repeated field: its last value).
    headers: Mapping[bytes, bytes] = field(default_factory=dict)
    body: bytes = b""  # filled in once it has arrived whole
    chunked: bool = False  # the body follows in chunks, its length unknown (body_bytes 0)

    def header(self, name: bytes) -> bytes:
        """The value of the field ``name`` (lower case), or b""."""
        return self.headers.get(name, b"")


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    content_type: str
    body: bytes
    close: bool = False
    allow: str = ""
    headers: tuple[tuple[str, str], ...] = ()  # more fields, such as Retry-After


class BadRequest(Exception):
    """A request the server will not serve: answered with ``answer``, then closed."""

    def __init__(self, status: int, message: str, methods: tuple[str, ...] = METHODS) -> None:
        super().__init__(message)
        self.answer = Answer(
            status,
            "application/json",
            b'{"error": "' + message.encode() + b'"}\n',
            close=True,
            allow=", ".join(methods) if status == 405 else "",
        )


def head_end(buffer: bytes | bytearray) -> int:
    """Where the head ends (the index after its blank line), or -1 while it has not; a head
    longer than ``MAX_HEAD_BYTES`` is ``BadRequest``."""
    end = buffer.find(b"\r\n\r\n", 0, MAX_HEAD_BYTES + 4)
    if end >= 0:
        return end + 4
    if len(buffer) > MAX_HEAD_BYTES:
        line_ends = buffer.find(b"\r\n", 0, MAX_HEAD_BYTES)
        if line_ends < 0:
            raise BadRequest(414, "request line too long")
        raise BadRequest(431, "request head too large")
    return -1


def parse_head(
    head: bytes,
    methods: tuple[str, ...] = METHODS,
    max_body_bytes: int = MAX_BODY_BYTES,
    chunked: bool = False,
) -> Request:
    """The request of a complete head (ending in its blank line); with ``chunked``, a body
    sent in chunks is taken (``Request.chunked``), else refused."""
    lines = head[:-4].split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not _TOKEN.fullmatch(parts[0]) or not parts[1]:
        raise BadRequest(400, "malformed request line")
    method, target, version = parts
    if not _VERSION.fullmatch(version):
        raise BadRequest(505, "HTTP/1.0 or HTTP/1.1 only")
    fields = _fields(lines[1:])
    in_chunks = chunked and _in_chunks(fields)
    length = 0 if in_chunks else _body_bytes(fields, max_body_bytes)
    if method.decode() not in methods:
        raise BadRequest(405, f"{' or '.join(methods)} only", methods)
    try:
        path = urlsplit(target.decode("ascii")).path
    except (UnicodeDecodeError, ValueError):
        raise BadRequest(400, "malformed request target") from None
    connection = fields.get(b"connection", b"").lower()
    keep_alive = version == b"HTTP/1.1" and b"close" not in connection
    return Request(method.decode(), path, keep_alive, length, fields, chunked=in_chunks)


def _in_chunks(fields: dict[bytes, bytes]) -> bool:
    """Whether the body comes in chunks: ``Transfer-Encoding: chunked`` and nothing else (a
    ``Content-Length`` beside it is refused: the two could frame the body two ways)."""
    coding = fields.get(b"transfer-encoding")
    if coding is None:
        return False
    if coding.strip().lower() != b"chunked":
        raise BadRequest(501, "of the transfer codings, only chunked alone")
    if b"content-length" in fields:
        raise BadRequest(400, "both Content-Length and Transfer-Encoding")
    return True


def expects_continue(request: Request) -> bool:
    """Whether the client waits for ``100 Continue`` before it sends the body."""
    has_body = request.body_bytes > 0 or request.chunked
    return has_body and request.header(b"expect").lower() == b"100-continue"


def _fields(lines: list[bytes]) -> dict[bytes, bytes]:
    fields: dict[bytes, bytes] = {}
    for line in lines:
        name, colon, value = line.partition(b":")
        if not colon or not _TOKEN.fullmatch(name):
            raise BadRequest(400, "malformed header")
        name, value = name.lower(), value.strip()
        if name in fields and name == b"content-length" and fields[name] != value:
            raise BadRequest(400, "conflicting Content-Length")
        fields[name] = value
    return fields


def _body_bytes(fields: dict[bytes, bytes], max_body_bytes: int) -> int:
    if b"transfer-encoding" in fields:
        raise BadRequest(501, "no request bodies in chunks")
    length = fields.get(b"content-length", b"0")
    if not length.isdigit() or len(length) > 19:
        raise BadRequest(400, "malformed Content-Length")
    if int(length) > max_body_bytes:
        raise BadRequest(413, f"request body too large: over {max_body_bytes} bytes")
    return int(length)


def encode(answer: Answer, method: str = "GET") -> bytes:
    """The answer's bytes: status line, headers and (but for HEAD) body."""
    reason = HTTPStatus(answer.status).phrase
    head = [
        f"HTTP/1.1 {answer.status} {reason}",
        f"Content-Type: {answer.content_type}",
        f"Content-Length: {len(answer.body)}",
    ]
    if answer.allow:
        head.append(f"Allow: {answer.allow}")
    head += [f"{name}: {value}" for name, value in answer.headers]
    if answer.close:
        head.append("Connection: close")
    data = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1")
    return data if method == "HEAD" else data + answer.body
