"""The ``json`` sender: a keep-alive ``httpx.Client`` POSTing ``{"game", "batch_id", "events"}``."""

from __future__ import annotations

import gzip
import logging
from collections.abc import Sequence

import httpx
import orjson

from collector.config import mask_url
from collector.logs import RateLimitedLog
from reporter._config import SinkSettings
from reporter._senders.client import http_client, request_timeout
from reporter._senders.outcome import (
    DELIVERED,
    RETRY,
    Outcome,
    classify_http,
    classify_transport_error,
    read_retry_after,
)
from reporter._senders.secrets import SecretFile
from reporter._senders.transport import endpoint_text

logger = logging.getLogger("reporter")
ratelog = RateLimitedLog(logger, interval=60.0)

ATTEMPT_HEADER = "X-Telemetry-Attempt"  # 1 for the first try of a batch, then 2, 3, ...
# Bytes of an error answer's body read for the batch's reason, at most.
REASON_BYTES = 1024


def json_body(game: str, batch_id: str, events: Sequence[bytes]) -> bytes:
    """Assemble the body from the events' raw JSON, without decoding them."""
    return b"".join((
        b'{"game":', orjson.dumps(game), b',"batch_id":', orjson.dumps(batch_id),
        b',"events":[', b",".join(events), b"]}",
    ))


class JsonSender:
    """Sends one batch per POST; every response or error becomes an ``Outcome``.

    A 2xx status line and headers are the answer: the batch is delivered whatever its body
    does (the transport reads a little of it, or leaves it with the connection).  An error
    answer's body is read up to REASON_BYTES, for the reason.  ``max_age_seconds``: the
    freshness window, to warn when the endpoint asks for a longer wait."""

    def __init__(self, settings: SinkSettings, transport: httpx.BaseTransport | None = None,
                 max_age_seconds: float | None = None,
                 header_files: Sequence[SecretFile] = ()) -> None:
        self._url = settings.url  # as configured, for describe()
        self._gzip = settings.gzip
        self._max_age = max_age_seconds
        headers = {"Content-Type": "application/json", **settings.headers}
        if settings.gzip:
            headers["Content-Encoding"] = "gzip"
        timeout = request_timeout(settings)
        self._client = http_client(settings, headers, transport)
        # What Client.post() would work out again for every request (parsing the URL, merging
        # the client's headers, the timeout), done once: about 40 us of CPU per POST.
        self._request_url = httpx.URL(settings.url)
        self._where = endpoint_text(self._request_url)
        self._header_files = tuple(header_files)
        self._request_headers = self._merged_headers()
        self._request_extensions = {"timeout": timeout.as_dict()}
        for file in self._header_files:  # a value re-read from its file replaces the headers
            file.subscribe(self._swap_headers)

    def _merged_headers(self) -> httpx.Headers:
        headers = self._client.headers.copy()
        for file in self._header_files:
            headers[file.header] = file()
        return headers

    def _swap_headers(self) -> None:
        self._request_headers = self._merged_headers()  # one assignment: requests see either

    def send(self, game: str, batch_id: str, events: Sequence[bytes], attempt: int = 1
             ) -> Outcome:
        body = json_body(game, batch_id, events)
        if self._gzip:
            body = gzip.compress(body, compresslevel=5)
        headers = self._request_headers.copy()
        headers["Idempotency-Key"] = batch_id
        headers[ATTEMPT_HEADER] = str(attempt)
        request = httpx.Request("POST", self._request_url, headers=headers, content=body,
                                extensions=self._request_extensions)
        try:
            response = self._client.send(request, stream=True)
        except httpx.HTTPError as exc:
            return classify_transport_error(exc)
        try:
            if 200 <= response.status_code < 300:
                return Outcome(DELIVERED)
            retry_after = response.headers.get("Retry-After")
            outcome = classify_http(response.status_code, retry_after, _start_of_body(response))
        finally:
            response.close()
        if outcome.kind == RETRY and retry_after is not None:
            self._note_wait(retry_after, outcome, len(events), game, batch_id)
        return outcome

    def _note_wait(self, value: str, outcome: Outcome, events: int, game: str, batch_id: str
                   ) -> None:
        """Warn (once a minute per endpoint) about a Retry-After that is ignored, or one
        longer than the freshness window."""
        _, problem = read_retry_after(value)
        if problem:
            ratelog.log(logging.WARNING, f"retry-after:{self._where}",
                        "endpoint %s sent Retry-After %r (%s): ignored, the usual backoff "
                        "applies", self._where, value[:40], problem)
        elif self._max_age is not None and outcome.retry_after > self._max_age:
            ratelog.log(logging.WARNING, f"long-wait:{self._where}",
                        "endpoint %s asks for a wait of %.0f s (Retry-After), longer than the "
                        "freshness window ([reporter] max_age_seconds = %g): the %d events of "
                        "batch %s of game %r will be stale by then, and new claims pause as "
                        "long", self._where, outcome.retry_after, self._max_age, events,
                        batch_id, game)

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
