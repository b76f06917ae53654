"""What one delivery attempt came to, decided by small pure functions."""

from __future__ import annotations

import email.utils
import math
import threading
import time
from dataclasses import dataclass
from typing import Literal, NamedTuple

import orjson

from collector.logs import mask
from collector.retry import MAX_RETRY_AFTER_SECONDS
from collector.text import printable

DELIVERED: Literal["delivered"] = "delivered"
RETRY: Literal["retry"] = "retry"
REJECTED: Literal["rejected"] = "rejected"
# The reason of an event that is not one JSON value: set aside by the claim script or the
# reporter, never sent (the settle script counts these as malformed_entries).
MALFORMED = "malformed entry"

# An error body's known fields, in the order they are looked for; how long the reason taken
# from one may be; bodies larger than this are not parsed at all.
ERROR_FIELDS = ("error", "message", "detail", "errmsg")
ERROR_SUMMARY_CHARS = 120
ERROR_BODY_PARSE_LIMIT = 64 * 1024


class MovedItem(NamedTuple):
    """An item sent with its behaviour time moved into the window (``late_behaviour =
    "resend"``): its position in the events sent, session, behaviour type, original and sent
    ``ot``."""

    position: int
    si: str
    bt: int
    ot: int
    sent: int


# The scopes an answer only the operator can fix may hold (``Refusal.scope``): every game of
# the app, one game, the reporters that use one key, or this reporter alone (its clock).
APP, GAME, KEY, HOST = "app", "game", "key", "host"


@dataclass(frozen=True, slots=True)
class Refusal:
    """An answer only the operator can fix: its ``cause`` (the code met, ``nppa 1011`` or
    ``HTTP 403``; or the whole text, when there is no code) and what to ``check``.  Kept
    apart, so nothing splits a text again to find them; ``str()`` joins them for a log line
    or ``status`` (``"nppa 1011: identity check failed: ..."``).  ``scope``: what it holds,
    when it holds (``APP``, ``GAME``, ``KEY`` or ``HOST``)."""

    cause: str
    check: str = ""
    scope: str = APP

    def __post_init__(self) -> None:
        # the cause may quote what the endpoint or a game named: escaped where it comes in
        object.__setattr__(self, "cause", printable(self.cause))
        object.__setattr__(self, "check", printable(self.check))

    def __str__(self) -> str:
        return f"{self.cause}: {self.check}" if self.check else self.cause


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one attempt at a batch came to.

    ``delivered``: the endpoint took the request.  If it answered item by item, ``refused``
    lists the items it will never take (index in the events sent, reason) and
    ``retry_items`` those to send again (not before ``retry_after`` seconds, ``reason`` kept
    with them); every other item is delivered.  ``retry``: send the whole batch again, not
    before ``retry_after`` seconds.  ``rejected``: the endpoint will never take the batch.

    ``pause_all``: seconds every reporter must stop sending (the endpoint says the caller is
    over its rate limit).  ``alert``: the endpoint refused our identity or configuration;
    what to check, for the operator (logged as an ERROR, counted, shown by ``status``).
    ``too_large``: a rejection of the body's size (HTTP 413): smaller parts may go through.
    ``code``: what failed, for the metrics: the HTTP status, or the transport error's type.
    ``hold``: the endpoint refused our identity or configuration, which no retry heals:
    sending is held for every reporter and the batch handed back (a ``retry`` outcome); the
    text says what to check.  ``moved``: items sent with their behaviour time moved into the
    endpoint's window (counted and kept for audit once delivered).  ``audit_lost``: lines of
    the sink's audit trail the attempt could not write (counted).  ``unsent``: the request
    was not sent at all (at the last moment its slot of the shared rate was gone: a pause,
    or stopping): nothing was heard, and the batch is handed back without an attempt charged.
    """

    kind: Literal["delivered", "retry", "rejected"]
    reason: str = ""
    retry_after: float = 0.0
    refused: tuple[tuple[int, str], ...] = ()
    retry_items: tuple[int, ...] = ()
    pause_all: float = 0.0
    alert: Refusal | None = None
    too_large: bool = False
    code: str = ""
    hold: Refusal | None = None
    moved: tuple[MovedItem, ...] = ()
    audit_lost: int = 0
    unsent: bool = False

    def __post_init__(self) -> None:
        if (self.refused or self.retry_items) and self.kind != DELIVERED:
            raise ValueError(f"a {self.kind!r} outcome cannot list items")
        # The texts quote the endpoint (error fields, errmsg, exception texts): escaped here,
        # where they come in, before a dead letter, an alert or a log line carries them.
        for name in ("reason", "code"):  # a Refusal escapes its own
            object.__setattr__(self, name, printable(getattr(self, name)))
        if self.refused:
            object.__setattr__(
                self, "refused", tuple((i, printable(why)) for i, why in self.refused)
            )

    @property
    def partial(self) -> bool:
        """True when some items were refused or are to be retried (needs ``settle``)."""
        return bool(self.refused or self.retry_items)


def parse_retry_after(value: str | None, now: float | None = None) -> float:
    """Seconds from a Retry-After header (delta-seconds or an HTTP date), at most
    MAX_RETRY_AFTER_SECONDS; 0 if absent or unusable (see ``read_retry_after``)."""
    return read_retry_after(value, now)[0]


def read_retry_after(value: str | None, now: float | None = None) -> tuple[float, str]:
    """Seconds from a Retry-After header, and what is wrong with it ("" if nothing).

    Delta-seconds (a decimal fraction is taken too) or an HTTP date (one in the past means
    now); at most MAX_RETRY_AFTER_SECONDS.  Absent: 0, nothing wrong.  Not finite (``nan``,
    ``inf``), negative or neither form: 0 and the reason, so the usual backoff applies."""
    if value is None or not value.strip():
        return 0.0, ""
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
            seconds = max(when.timestamp() - (time.time() if now is None else now), 0.0)
        except (TypeError, ValueError, IndexError, OverflowError):
            return 0.0, "neither delta-seconds nor an HTTP date"
    if not math.isfinite(seconds):
        return 0.0, "not a finite number"
    if seconds < 0:
        return 0.0, "negative"
    return min(seconds, MAX_RETRY_AFTER_SECONDS), ""


def classify_http(status: int, retry_after: str | None, body: bytes) -> Outcome:
    """2xx delivered; 408, 429 and 5xx retry later; any other status is a rejection."""
    if 200 <= status < 300:
        return Outcome(DELIVERED)
    said = error_summary(body)
    reason = f"HTTP {status}: {said}" if said else f"HTTP {status}"
    if status in (408, 429) or status >= 500:
        return Outcome(RETRY, reason, parse_retry_after(retry_after), code=str(status))
    return Outcome(REJECTED, reason, too_large=status == 413, code=str(status))


def error_summary(body: bytes) -> str:
    """A short reason from an error body, for the batch's reason and the log: the text of a
    known error field of a JSON object (``error``, ``message``, ``detail``, ``errmsg``, or
    ``error.message``), one line, at most ``ERROR_SUMMARY_CHARS`` characters, masked; "" for
    any other body.  The rest of the body is never shown: endpoints echo the request, and
    that is event payloads and credentials."""
    if not body or len(body) > ERROR_BODY_PARSE_LIMIT or body.lstrip()[:1] != b"{":
        return ""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return ""
    if not isinstance(doc, dict):
        return ""
    for name in ERROR_FIELDS:
        value = doc.get(name)
        if isinstance(value, dict):  # {"error": {"code": 400, "message": "..."}}
            value = value.get("message")
        if isinstance(value, str) and value.strip():
            text = " ".join(value.split())  # one line: no CR/LF or tabs from the endpoint
            text = (
                text
                if len(text) <= ERROR_SUMMARY_CHARS
                else (text[: ERROR_SUMMARY_CHARS - 3] + "...")
            )
            return mask(text)
    return ""


def classify_transport_error(exc: Exception) -> Outcome:
    """Timeouts, refused or reset connections: the endpoint may be back later."""
    return Outcome(RETRY, f"{type(exc).__name__}: {exc}", code=type(exc).__name__)


class SendErrors:
    """The endpoint's failed answers (a retry or a rejection), counted by their ``code`` (a
    sender that sets none: by their kind); thread-safe.  Bounded: HTTP statuses and
    exception type names."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}

    def record(self, outcome: Outcome) -> None:
        if outcome.kind == DELIVERED:
            return
        code = outcome.code or outcome.kind
        with self._lock:
            self._counts[code] = self._counts.get(code, 0) + 1

    def read(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)
