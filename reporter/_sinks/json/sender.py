"""The ``json`` sender: a keep-alive ``httpx.Client`` POSTing ``{"game", "batch_id", "events"}``."""

from __future__ import annotations

import contextlib
import gzip
import logging
from collections.abc import Sequence
from typing import NamedTuple

import httpx

from collector.config import mask_url
from collector.logs import RateLimitedLog
from reporter._http.transport import SocketTransport, endpoint_text, response_of
from reporter._senders.bodies import json_body
from reporter._senders.client import request_timeout, sink_client
from reporter._senders.outcome import (
    DELIVERED,
    RETRY,
    Outcome,
    classify_http,
    classify_transport_error,
    read_retry_after,
)
from reporter._senders.secrets import SecretFile
from reporter._settings import SinkSettings

logger = logging.getLogger("reporter")
ratelog = RateLimitedLog(logger, interval=60.0)

ATTEMPT_HEADER = "X-Telemetry-Attempt"  # 1 for the first try of a batch, then 2, 3, ...
# Bytes of an error answer's body read for the batch's reason, at most.
REASON_BYTES = 1024
_DELIVERED = Outcome(DELIVERED)  # immutable: one for every batch the endpoint took
_ATTEMPT = ATTEMPT_HEADER.encode()
# Headers a request gets from httpx or from send() unless the client's headers hold them.
_OWN = frozenset(
    {"host", "content-length", "transfer-encoding", "idempotency-key", ATTEMPT_HEADER.lower()}
)


class _Head(NamedTuple):
    """The headers of every request: ``headers`` merged once (the client's and those read
    from files); ``raw``, the same with Host first, as httpx would send them, or None when
    httpx must build each request (see ``JsonSender._request``); ``wire``, the request line
    and ``raw`` as the builtin transport sends them, or None when each request goes as an
    ``httpx.Request`` (another transport, a proxy, a header it refuses)."""

    headers: httpx.Headers
    raw: tuple[tuple[bytes, bytes], ...] | None
    wire: bytes | None = None


class JsonSender:
    """Sends one batch per POST; every response or error becomes an ``Outcome``.

    A 2xx status line and headers are the answer: the batch is delivered whatever its body
    does (the transport reads a little of it, or leaves it with the connection).  An error
    answer's body is read up to REASON_BYTES, for the reason.  ``max_age_seconds``: the
    freshness window, to warn when the endpoint asks for a longer wait."""

    def __init__(
        self,
        settings: SinkSettings,
        transport: httpx.BaseTransport | None = None,
        max_age_seconds: float | None = None,
        header_files: Sequence[SecretFile] = (),
    ) -> None:
        self._url = settings.url  # as configured, for describe()
        self._gzip = settings.gzip
        self._max_age = max_age_seconds
        headers = {"Content-Type": "application/json", **settings.headers}
        if settings.gzip:
            headers["Content-Encoding"] = "gzip"
        timeout = request_timeout(settings)
        self._client, direct = sink_client(settings, headers, transport)
        # What Client.post() would work out again for every request (parsing the URL, merging
        # the client's headers, the timeout), done once: about 40 us of CPU per POST.
        self._request_url = httpx.URL(settings.url)
        # Straight to the transport unless the URL holds credentials (Client.send turns
        # them into Basic auth).
        url = self._request_url
        self._transport = None if url.username or url.password else direct
        # The builtin transport takes a request's bytes as they are: no httpx.Request or
        # httpx.Response on the way (about a third of the CPU per POST).
        self._socket = self._transport if isinstance(self._transport, SocketTransport) else None
        self._where = endpoint_text(self._request_url)
        self._header_files = tuple(header_files)
        self._head = self._request_head()
        self._request_extensions = {"timeout": timeout.as_dict()}
        self._pool_wait: float | None = timeout.as_dict()["pool"]
        for file in self._header_files:  # a value re-read from its file replaces the headers
            file.subscribe(self._swap_headers)

    def _request_head(self) -> _Head:
        headers = self._client.headers.copy()
        for file in self._header_files:
            headers[file.header] = file()
        if not self._request_url.host or any(k.lower() in _OWN for k in headers):
            return _Head(headers, None)
        raw = ((b"Host", self._request_url.netloc), *headers.raw)
        wire = None
        if self._socket is not None:
            with contextlib.suppress(httpx.LocalProtocolError):  # refused at each request
                wire = self._socket.wire_head(self._request_url, raw)
        return _Head(headers, raw, wire)

    def _swap_headers(self) -> None:
        self._head = self._request_head()  # one assignment: requests see either

    def _request(self, batch_id: str, attempt: int, body: bytes) -> httpx.Request:
        """The request ``Client.post`` would build, header for header.  Built from the head
        made once, it costs about a fifth of what ``httpx.Request`` takes to merge the
        headers and add Host and Content-Length (about 20 us of CPU per POST); when the
        configured headers hold one of those it adds, httpx builds it."""
        head = self._head
        if head.raw is None:
            headers = head.headers.copy()
            headers["Idempotency-Key"] = batch_id
            headers[ATTEMPT_HEADER] = str(attempt)
            return httpx.Request(
                "POST",
                self._request_url,
                headers=headers,
                content=body,
                extensions=self._request_extensions,
            )
        return httpx.Request(
            "POST",
            self._request_url,
            headers=[
                *head.raw,
                (b"Idempotency-Key", batch_id.encode()),
                (_ATTEMPT, b"%d" % attempt),
                (b"Content-Length", b"%d" % len(body)),
            ],
            stream=httpx.ByteStream(body),
            extensions=self._request_extensions,
        )

    def send(self, game: str, batch_id: str, events: Sequence[bytes], attempt: int = 1) -> Outcome:
        body = json_body(game, batch_id, events)
        if self._gzip:
            body = gzip.compress(body, compresslevel=5)
        key = batch_id.encode()
        wire, socket = self._head.wire, self._socket
        try:
            if wire is not None and socket is not None and b"\r" not in key and b"\n" not in key:
                # The bytes _request's httpx.Request would go as, built here.
                data = b"%sIdempotency-Key: %s\r\n%s: %d\r\nContent-Length: %d\r\n\r\n%s" % (
                    wire,
                    key,
                    _ATTEMPT,
                    attempt,
                    len(body),
                    body,
                )
                reply = socket.post(
                    self._request_url,
                    data,
                    self._pool_wait,
                    lambda: self._request(batch_id, attempt, body),
                )
                if 200 <= reply.status < 300:
                    return _DELIVERED
                response = response_of(reply, self._request(batch_id, attempt, body))
            elif self._transport is not None:
                # The request is whole (headers, timeout): what Client.send adds on the way
                # to the transport (auth and redirect flows, none here, and a cookie jar that
                # no request reads) cost about a tenth of the reporter's CPU per POST.
                response = self._transport.handle_request(self._request(batch_id, attempt, body))
            else:
                response = self._client.send(self._request(batch_id, attempt, body), stream=True)
        except httpx.HTTPError as exc:
            return classify_transport_error(exc)
        try:
            if 200 <= response.status_code < 300:
                return _DELIVERED
            retry_after = response.headers.get("Retry-After")
            outcome = classify_http(response.status_code, retry_after, _start_of_body(response))
        finally:
            response.close()
        if outcome.kind == RETRY and retry_after is not None:
            self._note_wait(retry_after, outcome, len(events), game, batch_id)
        return outcome

    def _note_wait(
        self, value: str, outcome: Outcome, events: int, game: str, batch_id: str
    ) -> None:
        """Warn (once a minute per endpoint) about a Retry-After that is ignored, or one
        longer than the freshness window."""
        _, problem = read_retry_after(value)
        if problem:
            ratelog.log(
                logging.WARNING,
                f"retry-after:{self._where}",
                "endpoint %s sent Retry-After %r (%s): ignored, the usual backoff applies",
                self._where,
                value[:40],
                problem,
            )
        elif self._max_age is not None and outcome.retry_after > self._max_age:
            ratelog.log(
                logging.WARNING,
                f"long-wait:{self._where}",
                "endpoint %s asks for a wait of %.0f s (Retry-After), longer than the "
                "freshness window ([reporter] max_age_seconds = %g): the %d events of "
                "batch %s of game %r will be stale by then, and new claims pause as "
                "long",
                self._where,
                outcome.retry_after,
                self._max_age,
                events,
                batch_id,
                game,
            )

    def describe(self) -> str:
        return f"json {mask_url(self._url)}" + (" (gzip)" if self._gzip else "")

    def close(self) -> None:
        self._client.close()


def _start_of_body(response: httpx.Response) -> bytes:
    """Up to REASON_BYTES of the body; what came before a failure still tells the reason."""
    body = bytearray()
    try:
        for chunk in response.iter_bytes():
            body += chunk
            if len(body) >= REASON_BYTES:
                break
    except httpx.HTTPError:
        pass
    return bytes(body[:REASON_BYTES])
