"""The ingest's HTTP API: what each request may be, and what each answer says.

``POST /v1/games/<game>/events`` with a JSON array of events (or NDJSON with ``Content-Type:
application/x-ndjson``) answers ``202 {"accepted": N}`` once every event is in the SDK's
buffer, or refuses the whole request: 400 naming the first bad event's index and why (or the
game name), 401 without the bearer token, 413 over the bounds, 415 for a body in another
charset or encoding, 503 with ``Retry-After`` while the buffer has no room for it or the
ingest is stopping.
``GET /healthz`` says it is alive, ``GET /metrics`` serves its counts.

What can be refused from the head alone (the path, the token, the body's type, its length) is
refused before the body is read (``screen``).  Every answer but ``/metrics`` is made on the
server's selector thread: the work is a few calls into C per request, never a wait.
"""

from __future__ import annotations

import hmac
import threading
from collections.abc import Callable
from urllib.parse import unquote

import orjson

from collector import BufferFull, Collector, InvalidEvent
from collector.store import ENTRY_TIME_DIGITS, validate_game
from reporter._http.server_wire import Answer, Request
from reporter._ingest.bodies import BadBody, array_events, ndjson_events

PREFIX = "/v1/games/"
SUFFIX = "/events"
JSON = "application/json"
# A body of these types is NDJSON; of any other (or none) a JSON array: curl's -d sends
# application/x-www-form-urlencoded, and the body decides anyway.
NDJSON_TYPES = ("application/x-ndjson", "application/ndjson")
METHODS = ("GET", "HEAD", "POST")
AUTHENTICATE = (("WWW-Authenticate", 'Bearer realm="telemetry-ingest"'),)
TEXT_FORMAT = "text/plain; version=0.0.4; charset=utf-8"
STOPPING = "stopping: send it again later (after the restart, or to another ingest)"


class Counts:
    """Answers by status code and the events taken; read from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._answers: dict[int, int] = {}
        self.events = 0

    def answered(self, status: int, events: int = 0) -> None:
        with self._lock:
            self._answers[status] = self._answers.get(status, 0) + 1
            self.events += events

    def answers(self) -> dict[int, int]:
        with self._lock:
            return dict(self._answers)


class _Refused(Exception):
    """A request refused whole: its answer's status, message, fields and event index."""

    def __init__(
        self,
        status: int,
        message: str,
        headers: tuple[tuple[str, str], ...] = (),
        index: int | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers
        self.index = index


class IngestApi:
    """Answers the ingest's requests; ``screen`` is given the head, the call the whole
    request.  ``token``: the bearer token a POST must carry (None: none asked for)."""

    def __init__(
        self,
        collector: Collector,
        *,
        token: bytes | None,
        max_events: int,
        buffer_bytes: int,
        retry_after_seconds: int,
        metrics: Callable[[], bytes],
    ) -> None:
        self._collector = collector
        self.token = token
        self._max_events = max_events
        self._buffer_bytes = buffer_bytes
        self._busy = (("Retry-After", str(retry_after_seconds)),)
        self._metrics = metrics
        self.counts = Counts()
        self.stopping = False

    @staticmethod
    def inline(request: Request) -> bool:
        """Whether to answer on the selector thread: all but ``/metrics``, which formats
        every count (milliseconds) and may wait behind nothing else."""
        return request.path != "/metrics"

    # -- the head ------------------------------------------------------------------------------

    def screen(self, head: Request) -> Answer | None:
        """An answer for a request that its head already refuses, else None."""
        if head.method != "POST":
            return None if head.path in ("/healthz", "/metrics") else self._route_error(head)
        if not head.path.startswith(PREFIX) or not head.path.endswith(SUFFIX):
            return self._route_error(head)
        if not self._authorized(head):
            return self._error(401, "a bearer token is required: Authorization: Bearer <token>")
        try:
            self._game(head.path)
        except ValueError as exc:
            return self._error(400, f"bad game name: {exc}")
        return self._type_error(head)

    def _authorized(self, head: Request) -> bool:
        if self.token is None:
            return True
        scheme, _, given = head.header(b"authorization").partition(b" ")
        # Compared in constant time: how long a wrong token took tells nothing of the right one.
        return scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), self.token)

    @staticmethod
    def _game(path: str) -> str:
        game = unquote(path[len(PREFIX) : -len(SUFFIX)], errors="strict")
        return validate_game(game)

    def _type_error(self, head: Request) -> Answer | None:
        _, _, parameters = head.header(b"content-type").decode("latin-1").partition(";")
        charset = parameters.strip().lower().removeprefix("charset=").strip('"')
        if charset not in ("", "utf-8"):
            return self._error(415, f"expected a body in UTF-8, found charset {charset!r}")
        if head.header(b"content-encoding").lower() not in (b"", b"identity"):
            return self._error(415, "expected a body without Content-Encoding")
        return None

    def _route_error(self, head: Request) -> Answer:
        known = head.path in ("/healthz", "/metrics") or (
            head.path.startswith(PREFIX) and head.path.endswith(SUFFIX)
        )
        if known:
            allow = "POST" if head.path.startswith(PREFIX) else "GET, HEAD"
            answer = self._error(405, f"{allow} only")
            return Answer(405, answer.content_type, answer.body, allow=allow)
        return self._error(404, "not found: POST /v1/games/<game>/events, GET /healthz, /metrics")

    # -- the whole request ---------------------------------------------------------------------

    def __call__(self, request: Request) -> Answer:
        if request.method == "POST":
            return self._post(request)
        if request.path == "/metrics":
            return self._answer(Answer(200, TEXT_FORMAT, self._metrics()))
        status = "stopping" if self.stopping else "ok"
        body = {"status": status, "buffered": self._collector.stats()["buffered"]}
        return self._answer(Answer(503 if self.stopping else 200, JSON, orjson.dumps(body)))

    def _post(self, request: Request) -> Answer:
        try:
            if self.stopping:
                raise _Refused(503, STOPPING, self._busy)
            events = self._events(request)
            self._take(self._game(request.path), events)
        except _Refused as refused:
            return self._error(refused.status, refused.message, refused.headers, refused.index)
        return self._answer(Answer(202, JSON, b'{"accepted": %d}' % len(events)), len(events))

    def _events(self, request: Request) -> list[bytes]:
        """The request's events, within the bounds; else ``_Refused``."""
        media = request.header(b"content-type").split(b";")[0].strip().lower().decode("latin-1")
        split = ndjson_events if media in NDJSON_TYPES else array_events
        try:
            events = split(request.body)
        except BadBody as bad:
            raise _Refused(400, bad.reason, index=bad.index) from None
        count = len(events)
        if count > self._max_events:
            raise _Refused(
                413, f"{count} events: over [ingest] max_events_per_request = {self._max_events}"
            )
        if sum(map(len, events)) + ENTRY_TIME_DIGITS * count > self._buffer_bytes:
            raise _Refused(413, "more bytes of events than the buffer holds at all")
        return events

    def _take(self, game: str, events: list[bytes]) -> None:
        """Every event into the buffer, or ``_Refused``."""
        try:
            taken = self._collector.collect_json(game, events)
        except InvalidEvent as bad:
            raise _Refused(400, bad.reason, index=bad.index) from None
        except BufferFull:
            raise _Refused(503, "the buffer is full: try again later", self._busy) from None
        if taken < len(events):  # closed under us: stopping
            raise _Refused(503, STOPPING, self._busy)

    # -- answers -------------------------------------------------------------------------------

    def _answer(self, answer: Answer, events: int = 0) -> Answer:
        self.counts.answered(answer.status, events)
        return answer

    def _error(
        self,
        status: int,
        message: str,
        headers: tuple[tuple[str, str], ...] = (),
        index: int | None = None,
    ) -> Answer:
        body: dict[str, object] = {"error": message}
        if index is not None:
            body = {"error": f"event {index}: {message}", "index": index}
        if status == 401:
            headers = AUTHENTICATE
        return self._answer(Answer(status, JSON, orjson.dumps(body), headers=headers))
