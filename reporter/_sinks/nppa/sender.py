"""The ``nppa`` sender: the national anti-addiction system's behaviour-reporting interface.

One batch (one game's events, at most 128) is one request: POST
``<base_url>/behavior/collection/loginout`` with headers appId, bizId (the game's filing
id), timestamps (milliseconds, read once per attempt), sign, and the sealed body
(``nppa_wire``).  Every item is checked again (``collector.nppa.check_item``) and numbered
``no`` = 1..n; an item whose ``ot`` is still in the future (this host's clock is behind the
game server's) waits for a later attempt, unless it is more than ``[nppa] max_future_seconds``
ahead (refused: the game server's clock is wrong).  With ``late_behaviour = "resend"`` an
item that missed the window is sent with its ``ot`` moved to the window's start (``moved``
in the outcome).  The answer, always HTTP 200 with an ``errcode``, becomes an ``Outcome``
(see ``classify``); per-item failures make a partial outcome, and answers about our identity
or configuration a ``hold``.  ``probe`` sends a report without items, which proves the key.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import httpx
import orjson

from collector.config import mask_url
from collector.logs import RateLimitedLog
from collector.nppa import check_item
from reporter._http.transport import SocketTransport
from reporter._senders.client import NEED_BODY, sink_client
from reporter._senders.outcome import (
    APP,
    DELIVERED,
    GAME,
    HOST,
    KEY,
    REJECTED,
    RETRY,
    MovedItem,
    Outcome,
    Refusal,
    parse_retry_after,
)
from reporter._sinks.base import Pacer, SinkConfig
from reporter._sinks.nppa.records import Recorder, Sending, audit_trail_of
from reporter._sinks.nppa.routes import PATH, App, Route, Routes, endpoint_url, routes_of
from reporter._sinks.nppa.settings import NppaSettings
from reporter._sinks.nppa.wire import seal, signature

logger = logging.getLogger("reporter")
ratelog = RateLimitedLog(logger, interval=60.0)

__all__ = ["PATH", "NppaSender", "classify", "endpoint_url"]

# This many 1007 answers in a row (the system finds this host's timestamps more than 5 s
# off) hold this reporter, with this cause, until a probe passes.
CLOCK_HOLD_AFTER = 3
HOST_CLOCK = "host clock"

CONTENT_TYPE = "application/json;charset=utf-8"
# The answer is read whole, up to this size; a longer or unreadable one is retried.
ANSWER_BYTES = 1024 * 1024
OK, PARTIAL, THROTTLED, EXPIRED, EMPTY = 0, 3001, 1006, 1007, 3002
# The interface's window: an item's ot must be less than this many seconds before the request.
WINDOW_SECONDS = 180
# Item errors: bad no, ot, ct, bt, missing pi, missing di, invalid pi.
ITEM_ERRORS = range(3004, 3011)
RETRYABLE = {1001: "system error", 4001: "test system error"}
# Codes that will not heal by retrying, with what the operator should check.
CHECK = {
    1002: "resource missing: check [nppa] base_url",
    1003: "wrong method: a bug of the reporter, please report it",
    1004: "a required header is missing: a bug of the reporter, please report it",
    1005: "this host's IP is not allowed: register it with the system",
    1008: "caller identity invalid: check [nppa] app_id",
    1009: "caller disabled: ask the system's operator",
    1010: "no permission for this interface: check [nppa] app_id and the game's biz_id",
    1011: "identity check failed: check [nppa] secret_key (and app_id)",
    1012: "body check failed: check [nppa] secret_key; else a bug of the reporter",
    3002: "empty report: a bug of the reporter, please report it",
    3003: "more than 128 items: a bug of the reporter, please report it",
    4002: "test task not found: check the test code in [nppa] base_url",
    4003: "test parameter invalid: check the test case's requirements",
}
# Of those, the answers about our identity or configuration: every request would meet them
# until the operator acts, so sending is held for the app id (not dead-lettered) and a probe
# finds out when the cause is gone.  3002 and 3003 are bugs of ours: those batches are
# dead-lettered.
HOLD = frozenset(CHECK) - {EMPTY, 3003}
# What each holds (``Refusal.scope``; the rest hold the app): 1010 is one game's permission
# (its bizId), 1011 and 1012 the key (the signature, the sealed body), so a reporter with
# another key neither lifts nor sets it.
HOLD_SCOPE = {1010: GAME, 1011: KEY, 1012: KEY}
# HTTP statuses of a proxy or gateway in front of the interface refusing us (the interface
# itself answers HTTP 200): held too.
HOLD_HTTP = {
    401: Refusal(
        "HTTP 401",
        "a gateway in front of the interface wants credentials: check the network path and "
        "[sink] proxy",
    ),
    403: Refusal(
        "HTTP 403",
        "a gateway in front of the interface refused this host: check the network path, the "
        "IP registration and [sink] proxy",
    ),
    407: Refusal("HTTP 407", "the proxy wants credentials: check [sink] proxy"),
}

Clock = Callable[[], float]
Sent = list[tuple[int, dict[str, Any]]]  # (index in the batch's events, item)


class NppaSender:
    """Reports each game to its app (``routes``: its app id, base URL and key, and its
    ``biz_id``; by default ``config``'s ``[nppa]`` with ``key``, the secret key in use, read
    once per request: a key file re-read at run time swaps it).  ``pacer``: asked for a slot
    of the shared rate before a re-send after 1007, and, with the builtin transport, once
    the connection is ready, right before each request goes."""

    def __init__(
        self,
        config: SinkConfig,
        transport: httpx.BaseTransport | None = None,
        clock: Clock = time.time,
        key: Callable[[], str] | None = None,
        pacer: Pacer | None = None,
        routes: Callable[[], Routes] | None = None,
    ) -> None:
        settings = config.section(NppaSettings)
        fixed = routes_of(config, {"[nppa] secret_key": key} if key else {})
        self._routes: Callable[[], Routes] = routes or (lambda: fixed)
        self._throttle = settings.throttle_seconds
        self._resend = settings.late_behaviour == "resend"
        # Late items are moved to this many seconds before the request (the window less the
        # freshness margin), never later than the request itself.
        self._late_to = WINDOW_SECONDS - settings.freshness_margin_seconds
        self._max_future = settings.max_future_seconds
        self._clock = clock
        self._client, direct = sink_client(config.sink, {"Content-Type": CONTENT_TYPE}, transport)
        # The builtin transport asks the pacer once the connection is ready (send_when);
        # with another, no request waits there for its slot (nor to a URL with userinfo).
        self._direct = direct if isinstance(direct, SocketTransport) else None
        self._skew_logged = False
        self._lock = threading.Lock()
        self._expired_in_row = 0  # 1007 answers in a row, in this process
        # Asked before a re-send after 1007 (a request of its own, under the shared rate):
        # it waits for the request's slot; False (stopping, a pause) leaves the 1007 answer.
        # And at the last moment before every request: still at its slot?  (A stalled
        # thread takes a new one; False: stopping or a pause, and the request is not sent.)
        self._pacer = pacer
        self._record = Recorder(audit_trail_of(settings), settings.app_id)

    def send(self, game: str, batch_id: str, events: Sequence[bytes], attempt: int = 1) -> Outcome:
        route = self._routes().route(game)
        if isinstance(route, Refusal):  # a config error here: the game is held, never dead
            return Outcome(RETRY, str(route), hold=route)
        biz_id = route.biz_id
        items, refused = _checked(events)
        now = self._clock()
        future = [(i, item) for i, item in items if item["ot"] > now]
        if future:
            refused += self._too_far_ahead(game, future, now)
            future = [(i, item) for i, item in future if item["ot"] <= now + self._max_future]
        if future:
            self._log_skew(max(item["ot"] for _, item in future) - now)
        sent = [(i, item) for i, item in items if item["ot"] <= now]
        moved = self._move_late(sent, now) if self._resend else ()
        lost = self._record.refused(
            biz_id, game, batch_id, [(events[i], r) for i, r in refused], route.app.app_id
        )
        call = Sending(game, batch_id, attempt, {m.position: m.ot for m in moved})
        outcome = self._report(route.app, biz_id, sent, call) if sent else Outcome(DELIVERED)
        if moved and outcome.kind == DELIVERED:
            outcome = dataclasses.replace(outcome, moved=moved)
        if lost or call.lost:
            outcome = dataclasses.replace(outcome, audit_lost=lost + call.lost)
        retry = tuple(i for i, _ in future)
        if outcome.kind != DELIVERED or not (refused or retry):
            return outcome
        wait = max((item["ot"] for _, item in future), default=now) - now + 1
        return Outcome(
            DELIVERED,
            outcome.reason or "behaviour time ahead of this host's clock",
            max(outcome.retry_after, wait if retry else 0.0),
            outcome.refused + tuple(refused),
            outcome.retry_items + retry,
            moved=outcome.moved,
            audit_lost=outcome.audit_lost,
        )

    def probe(self, biz_id: str, app: App | None = None, game: str = "") -> Outcome:
        """A signed request whose ``collections`` is empty, to ``app`` (by default the
        first) with ``biz_id``: it reports nothing, and the system answers 3002 once it has
        checked the identity, the signature and the sealed body.  3002 (or 0) is
        ``delivered``; any other answer is classified as for a report (1011 holds, 1006
        retries with a pause, ...).  ``game``: whose rate scope the request counts in."""
        app = app or next(iter(self._routes().apps.values()))
        return self._report(app, biz_id, [], Sending(game), probe=True)

    def route(self, game: str) -> Route | Refusal:
        return self._routes().route(game)

    def _too_far_ahead(self, game: str, future: Sent, now: float) -> list[tuple[int, str]]:
        """Items whose ot is more than ``[nppa] max_future_seconds`` ahead of this host's
        clock: the game server's clock is wrong, and waiting would never end well."""
        limit = now + self._max_future
        far = [(i, item["ot"] - now) for i, item in future if item["ot"] > limit]
        if not far:
            return []
        ahead = max(seconds for _, seconds in far)
        ratelog.log(
            logging.ERROR,
            "future",
            "%d events of game %r have a behaviour time (ot) up to %.0f s ahead of this "
            "host's clock, more than [nppa] max_future_seconds (%g): the game server's "
            "clock is wrong (check NTP there); they are dead-lettered",
            len(far),
            game,
            ahead,
            self._max_future,
        )
        return [
            (
                i,
                f"behaviour time (ot) {seconds:.0f} s ahead of the reporter's clock, more "
                f"than [nppa] max_future_seconds ({self._max_future:g}): the game "
                "server's clock is wrong (check its NTP)",
            )
            for i, seconds in far
        ]

    def _move_late(self, sent: Sent, now: float) -> tuple[MovedItem, ...]:
        """``late_behaviour = "resend"``: give every item whose ot missed the window the
        window's earliest time at this request, in place.  The mapping only ever raises an
        ot to one floor, so items keep their order (a logout stays at or after its login)."""
        floor = min(math.ceil(now - self._late_to), math.floor(now))
        moved = []
        for i, item in sent:
            if item["ot"] < floor:
                moved.append(
                    MovedItem(
                        i, str(item.get("si", "")), int(item.get("bt", -1)), item["ot"], floor
                    )
                )
                item["ot"] = floor
        if moved:
            ratelog.log(
                logging.WARNING,
                "late",
                "sending %d late items with their behaviour "
                'time (ot) moved into the window ([nppa] late_behaviour = "resend"); '
                "their original times are kept for audit (docs/nppa.md)",
                len(moved),
            )
        return tuple(moved)

    def _report(
        self, app: App, biz_id: str, sent: Sent, call: Sending, probe: bool = False
    ) -> Outcome:
        """POST the items (again once, with a new timestamp and a slot of its own, if the
        system finds it expired) and read the answer; each request and answer goes to the
        audit trail (the request's line before its bytes)."""
        numbered = [(i, {"no": n, **item}) for n, (i, item) in enumerate(sent, start=1)]
        plain = orjson.dumps({"collections": [item for _, item in numbered]})
        outcome = Outcome(RETRY, "not sent")
        for again in (False, True):
            if again and self._pacer is not None and not self._pacer.one(call.game):
                return outcome  # the 1007 answer: retried later
            stamp = str(int(self._clock() * 1000))  # read once: the signed value is the sent one
            line, lost = self._record.request(stamp, biz_id, call, numbered, app.app_id)
            call.lost += lost
            try:
                response = self._post(app, biz_id, plain, stamp, call.game)
            except httpx.HTTPError as exc:
                outcome = Outcome(RETRY, f"{type(exc).__name__}: {exc}")
                call.lost += self._record.answer(line, outcome, error=outcome.reason)
                return outcome
            if response is None:
                outcome = Outcome(RETRY, NOT_SENT, unsent=True)
                call.lost += self._record.answer(line, outcome)
                return outcome
            outcome = classify(
                response.status_code,
                response.headers.get("Retry-After"),
                response.content,
                [i for i, _ in sent],
                self._throttle,
                probe,
            )
            outcome, lone = self._expired(outcome)
            call.lost += self._record.answer(line, outcome, response)
            if not lone:
                return outcome
            ratelog.log(
                logging.WARNING,
                "expired",
                "the system refused a request's "
                "timestamps (1007); sending it again: check this host's clock (NTP)",
            )
        return outcome

    def _expired(self, outcome: Outcome) -> tuple[Outcome, bool]:
        """The answer with 1007s counted in a row (in this process: its clock), and whether
        it is a lone 1007, sent again at once with a new ``timestamps``.  A second in a row
        is retried later; ``CLOCK_HOLD_AFTER`` in a row hold this reporter ("host clock")
        until a probe passes, instead of sending every batch into the same refusal."""
        with self._lock:
            if outcome.reason != _EXPIRED_REASON:
                self._expired_in_row = 0
                return outcome, False
            self._expired_in_row += 1
            streak = self._expired_in_row
        if streak < CLOCK_HOLD_AFTER:
            return outcome, streak == 1
        check = (
            f"the system refused {streak} requests in a row for their timestamps (1007): "
            "this host's clock is more than 5 s off the system's; put it on NTP"
        )
        return dataclasses.replace(outcome, hold=Refusal(HOST_CLOCK, check, HOST)), False

    def _post(
        self, app: App, biz_id: str, plain: bytes, stamp: str, game: str = ""
    ) -> httpx.Response | None:
        """The answer to the sealed and signed items, stamped ``stamp`` (the one value both
        signed and sent); None if the pacer said, with the connection ready, that the
        request may not go (no slot of the rate within reach)."""
        secret = app.key()  # read once: the body is sealed and signed with the same key
        body = seal(secret, plain)  # a fresh nonce per attempt
        url = app.url
        query = dict(parse_qsl(urlsplit(url).query))
        signed = {**query, "appId": app.app_id, "bizId": biz_id, "timestamps": stamp}
        headers = {
            "appId": app.app_id,
            "bizId": biz_id,
            "timestamps": stamp,
            "sign": signature(secret, signed, body),
        }
        request = self._client.build_request(
            "POST", url, content=body, headers=headers, extensions={NEED_BODY: ANSWER_BYTES}
        )
        if self._direct is None or self._pacer is None or request.url.userinfo:
            return self._client.send(request)
        on_time = self._pacer.on_time
        response = self._direct.send_when(request, lambda: on_time(game))
        if response is not None:
            response.read()
        return response

    def _log_skew(self, ahead: float) -> None:
        if not self._skew_logged:
            self._skew_logged = True
            logger.warning(
                "events have a behaviour time %.0f s ahead of this host's clock; "
                "they wait until it has passed (check NTP here and on the game "
                "servers)",
                ahead,
            )

    def describe(self) -> str:
        apps = list(self._routes().apps.values())
        more = f" (and {len(apps) - 1} more apps)" if len(apps) > 1 else ""
        return f"nppa {mask_url(apps[0].url)} app {apps[0].app_id}{more}"

    def close(self) -> None:
        self._client.close()
        self._record.close()


_EXPIRED_REASON = "1007 request expired: timestamps too far from the system's clock"


NOT_SENT = "not sent: no request slot within reach (stopping, or a pause)"


def classify(
    status: int,
    retry_after: str | None,
    body: bytes,
    sent: Sequence[int],
    throttle: float,
    probe: bool = False,
) -> Outcome:
    """What an answer means for the batch; ``sent[k]`` is the batch index of item ``no`` k+1.

    0 or 3001 with ``data.results``: a listed item with errcode 0 is delivered, 3004-3010
    refused, any other retried; unlisted items are delivered; an item listed twice with
    different answers is delivered only if both say 0 (``_item_verdict``).  A result whose
    ``no`` or ``errcode`` is not an integer (``1.9``, ``true``, ``"1"``), or whose ``no`` is
    out of range, makes the answer unreadable: the whole batch is retried.  3004-3010 for the
    whole request, without results: the batch is dead-lettered at once.  1006: retry after
    ``throttle`` and pause every reporter.  1001/4001 and 1007: retry.  Identity and
    configuration errors, and 3002/3003 (ours): dead-letter the batch with an alert naming
    what to check.  Anything else (HTTP errors, bodies that are not the interface's): retry,
    never taken as success.  Identity and configuration errors, and HTTP 401/403/407 (a
    proxy or gateway in front): retry with ``hold`` set, so every reporter holds.  ``probe``:
    the request had no items, and 3002 means the key passed (``delivered``)."""
    if status != 200:
        return Outcome(
            RETRY, f"HTTP {status}", parse_retry_after(retry_after), hold=HOLD_HTTP.get(status)
        )
    try:
        reply = orjson.loads(body)
        code, message = reply["errcode"], str(reply.get("errmsg", ""))[:100]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return Outcome(RETRY, f"not an answer of the interface: {body[:100]!r}")
    if type(code) is not int:
        return Outcome(RETRY, f"not an answer of the interface: errcode {code!r:.40}")
    if probe and code in (OK, EMPTY):
        return Outcome(DELIVERED, f"{code} {message}: the key and identity passed".strip())
    if code in (OK, PARTIAL):
        return _items(code, reply.get("data"), sent)
    return _failed(code, message, throttle)


def _failed(code: int, message: str, throttle: float) -> Outcome:
    """A request the system did not take at all."""
    if code == THROTTLED:
        return Outcome(RETRY, f"1006 over the rate limit: {message}", throttle, pause_all=throttle)
    if code == EXPIRED:
        return Outcome(RETRY, _EXPIRED_REASON)
    if code in HOLD:
        scope = HOLD_SCOPE.get(code, APP)
        return Outcome(
            RETRY,
            f"nppa {code} {message}".strip(),
            hold=Refusal(f"nppa {code}", CHECK[code], scope),
        )
    if code in CHECK:
        return Outcome(
            REJECTED, f"nppa {code} {message}".strip(), alert=Refusal(f"nppa {code}", CHECK[code])
        )
    if code in ITEM_ERRORS:
        # An item error for the whole request, with no results to say which item: the same
        # data would meet it again at every attempt, so it is a dead letter at once.
        return Outcome(REJECTED, f"nppa {code} {message} (for the whole request)".strip())
    return Outcome(RETRY, f"nppa {code} {message}".strip())


def _items(code: int, data: object, sent: Sequence[int]) -> Outcome:
    results = data.get("results") if isinstance(data, Mapping) else None
    if not isinstance(results, list):
        if code == OK:
            return Outcome(DELIVERED)
        return Outcome(RETRY, "3001 partial failure without results")
    said: dict[int, list[tuple[int, str]]] = {}  # batch index -> (errcode, errmsg) listed
    for result in results:
        no = result.get("no") if isinstance(result, Mapping) else None
        item_code = result.get("errcode") if isinstance(result, Mapping) else None
        # Integers only: 1.9 or true is not item 1, "0" not success; the answer is unreadable.
        if type(no) is not int or type(item_code) is not int:
            return Outcome(RETRY, f"unreadable item result: {str(result)[:80]}")
        if not 1 <= no <= len(sent):
            return Outcome(RETRY, f"item result for no {no} of a {len(sent)}-item request")
        message = str(result.get("errmsg", ""))[:100]
        said.setdefault(sent[no - 1], []).append((item_code, message))
    refused: dict[int, str] = {}
    retry: list[int] = []
    for index, answers in said.items():
        verdict = _item_verdict(answers)
        if verdict is None:
            continue  # this item was taken
        if verdict:
            refused[index] = verdict
        else:
            retry.append(index)
    return Outcome(
        DELIVERED,
        "items the system could not take now" if retry else "",
        refused=tuple(refused.items()),
        retry_items=tuple(retry),
    )


def _item_verdict(answers: list[tuple[int, str]]) -> str | None:
    """What the results listed for one item make of it: None taken, "" to send again, else
    the reason it is refused.  An item listed more than once with different answers is
    taken only if every answer says so: an item error among them refuses it (the same data
    would meet it again), any other answer sends it again."""
    codes = list(dict.fromkeys(code for code, _ in answers))
    conflict = f" (conflicting results for this item: {', '.join(map(str, codes))})"
    error = next(((c, m) for c, m in answers if c in ITEM_ERRORS), None)
    if error is not None:
        return f"nppa {error[0]} {error[1]}".strip() + (conflict if len(codes) > 1 else "")
    return None if codes == [OK] else ""


def _checked(events: Sequence[bytes]) -> tuple[Sent, list[tuple[int, str]]]:
    """The items that pass the interface's rules, and the reasons of those that do not."""
    items: Sent = []
    refused: list[tuple[int, str]] = []
    for i, raw in enumerate(events):
        try:
            event = orjson.loads(raw)
            items.append((i, check_item(event if isinstance(event, dict) else {})))
        except (orjson.JSONDecodeError, ValueError) as exc:
            refused.append((i, f"invalid item: {exc}"[:200]))
    return items, refused
