"""A local mock of the anti-addiction "behaviour data reporting" interface (tests and demo).

Written from the interface's published facts alone, independently of the sender, so a
mistake shared by both cannot pass. It serves HTTP/1.1 with keep-alive on 127.0.0.1 and
answers HTTP 200 with ``{"errcode", "errmsg", "data"}`` as the interface does.

Checks, in order: method (1003), path (1002), headers appId, bizId, timestamps, sign (1004),
appId (1008), bizId (1010), timestamps in milliseconds within ``skew_seconds`` of ``clock()``
(1007), sign (1011), rate limit per app id (1006, then a throttle), body and decryption (1012),
item count (3002, 3003), then each item on its own (3004-3010).

Choices where the protocol is silent:

- Header names are matched case-insensitively (HTTP); the sign uses their protocol spelling.
  An empty header counts as missing. ``Content-Type`` is neither checked nor signed.
- Query parameters are percent-decoded, signed with the headers, sorted by (name, value).
- The sign must be the exact lowercase hex digest; uppercase hex is refused (1011).
- Every request answered 1006 (over the limit, or during a throttle) starts the throttle
  anew, so a caller that keeps knocking stays throttled.  Requests answered 1006 or refused by
  an earlier check do not count toward the one-second window; forced answers do not either.
- A bad ``si`` (not a string, empty, or over 32 UTF-8 bytes) refuses the item with 3004 (the
  protocol has no code of its own for it).  Every copy of a repeated ``no`` is refused (3004).
- An item's first failing check decides its code: no, si, ot, ct, bt, then pi/di.
  ``pi``/``di`` that are absent, null or "" are missing (3008/3009); a ``pi`` that is present
  but not a string of 38 characters is 3010; a ``di`` that is not a string of at most 32
  characters is 3009. ``true``/``false`` are not integers.
- A system or count error answers ``data: ""``.  ``RequestLog.refused`` is keyed by the item's
  ``no``; an item whose ``no`` is not an integer is keyed by minus its 1-based position.
- ``force(n)`` may return any errcode, 0 included: it is answered as is, with nothing accepted.
- ``refuse(biz_id, items)`` stands for what the real system refuses in a request as a whole
  and the rules do not say (a body it cannot check, say): the errcode it answers (nothing
  accepted), for a request that passed every check up to its items; None to go on.
- ``know(biz_id)`` / ``forget(biz_id)``: the system learns or drops a bizId at run time.
- Only ``Content-Length`` framing is read (no chunked request bodies).
- Keys: ``secret_key`` and any ``more_keys`` are all accepted (a rotation: both the old and
  the new key work for a while); the sign is checked against each and the body opened with
  the key that matched.  ``set_secrets`` switches them at run time (``set_secret``: one
  key only, so a test proves that a sender switched).
- ``rate_scope = "game"`` limits each bizId on its own (the FAQ's reading); ``"app"`` (the
  default) one limit for the app id.
- ``busiest_second`` (and ``busiest_second_of(biz_id)``): the most requests that arrived in any
  sliding second, counting every request whatever its answer (forced, refused, 1006): what a
  client sent, as the interface would count it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeGuard
from urllib.parse import parse_qsl, urlsplit

import orjson
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

__all__ = ["PATH", "Accepted", "NppaEndpoint", "RequestLog", "decrypt", "signature"]

PATH = "/behavior/collection/loginout"
SIGNED_HEADERS = ("appId", "bizId", "timestamps")
REQUIRED_HEADERS = (*SIGNED_HEADERS, "sign")
UNSIGNED = frozenset({"sign", "content-type"})
NONCE_BYTES = 12
TAG_BYTES = 16
MAX_ITEMS = 128
OT_WINDOW_MS = 180_000
PI_CHARS = 38
MAX_ID_CHARS = 32
RATE_WINDOW_SECONDS = 1.0
MAX_MS_DIGITS = 16  # far beyond any clock; keeps int() of a header cheap

MESSAGES = {
    0: "ok",
    1001: "system error",
    1002: "resource not found",
    1003: "method not allowed",
    1004: "required header missing",
    1005: "ip not allowed",
    1006: "rate limit exceeded",
    1007: "request expired",
    1008: "invalid caller",
    1009: "caller disabled",
    1010: "no permission",
    1011: "identity check failed",
    1012: "body check failed",
    3001: "partial failure",
    3002: "empty collections",
    3003: "too many items",
    3004: "bad no",
    3005: "bad behaviour time",
    3006: "bad user type",
    3007: "bad behaviour type",
    3008: "missing pi",
    3009: "missing di",
    3010: "invalid pi",
    4001: "test system error",
    4002: "test task not found",
    4003: "test parameter invalid",
}


@dataclass(frozen=True, slots=True)
class Accepted:
    biz_id: str
    item: dict[str, Any]
    at: float  # clock() when the request arrived
    request_ms: int  # its timestamps header


@dataclass(frozen=True, slots=True)
class RequestLog:
    at: float
    biz_id: str
    errcode: int
    items: int  # items in the decrypted body (0 when it was not decrypted)
    refused: dict[int, int] = field(default_factory=dict)  # no -> errcode


class _Refused(Exception):
    def __init__(self, errcode: int) -> None:
        super().__init__(errcode)
        self.errcode = errcode


def signature(
    secret_key: str, headers: Mapping[str, str], query: Iterable[tuple[str, str]], body: bytes
) -> str:
    """Lowercase hex sha256 of secret + name+value of headers and query sorted + wire body.

    ``headers`` are the protocol headers to sign; sign and Content-Type are left out.
    """
    pairs = [(k, v) for k, v in (*headers.items(), *query) if k.lower() not in UNSIGNED]
    text = secret_key + "".join(k + v for k, v in sorted(pairs))
    return hashlib.sha256(text.encode() + body).hexdigest()


def decrypt(secret_key: str, wire_body: bytes) -> bytes:
    """The plaintext of ``{"data": base64(nonce || ciphertext || tag)}``; ValueError if bad."""
    try:
        wire = orjson.loads(wire_body)
        sealed = base64.b64decode(wire["data"], validate=True)
        key = AESGCM(bytes.fromhex(secret_key))
    except (orjson.JSONDecodeError, TypeError, KeyError, binascii.Error, ValueError) as exc:
        raise ValueError(f"not a sealed body: {exc}") from exc
    if len(sealed) < NONCE_BYTES + TAG_BYTES:
        raise ValueError("sealed data too short")
    try:
        return key.decrypt(sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], None)
    except InvalidTag as exc:
        raise ValueError("authentication tag mismatch") from exc


def _check_key(secret_key: str) -> None:
    if len(bytes.fromhex(secret_key)) != 16:  # ValueError if not hex: a mistake of the test
        raise ValueError("the secret key is 32 hex characters (AES-128)")


def _collections(secret_key: str, wire_body: bytes) -> list[Any]:
    try:
        plain = orjson.loads(decrypt(secret_key, wire_body))
    except (ValueError, orjson.JSONDecodeError):
        raise _Refused(1012) from None
    items = plain.get("collections") if isinstance(plain, dict) else None
    if not isinstance(items, list):
        raise _Refused(1012)
    if not items:
        raise _Refused(3002)
    if len(items) > MAX_ITEMS:
        raise _Refused(3003)
    return items


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(item: object) -> int | None:
    """The item's ``no`` if it is an integer."""
    no = item.get("no") if isinstance(item, dict) else None
    return no if _is_int(no) else None


def _present(item: dict[str, Any], name: str) -> bool:
    return item.get(name) not in (None, "")


def _ot_error(ot: object, request_ms: int) -> int | None:
    if not _is_int(ot):
        return 3005
    ot_ms = ot * 1000
    if ot_ms > request_ms or request_ms - ot_ms >= OT_WINDOW_MS:
        return 3005
    return None


def _si_ok(si: object) -> bool:
    return isinstance(si, str) and 0 < len(si.encode()) <= MAX_ID_CHARS


def _identity_error(item: dict[str, Any]) -> int | None:
    if item["ct"] == 0:
        if not _present(item, "pi"):
            return 3008
        pi = item["pi"]
        return None if isinstance(pi, str) and len(pi) == PI_CHARS else 3010
    if not _present(item, "di"):
        return 3009
    di = item["di"]
    return None if isinstance(di, str) and len(di) <= MAX_ID_CHARS else 3009


def _item_error(item: object, request_ms: int, repeated: Collection[int]) -> int | None:
    if not isinstance(item, dict):
        return 3004
    no = _number(item)
    if no is None or not 1 <= no <= MAX_ITEMS or no in repeated or not _si_ok(item.get("si")):
        return 3004
    if (code := _ot_error(item.get("ot"), request_ms)) is not None:
        return code
    if not _is_int(item.get("ct")) or item["ct"] not in (0, 2):
        return 3006
    if not _is_int(item.get("bt")) or item["bt"] not in (0, 1):
        return 3007
    return _identity_error(item)


ItemCheck = Callable[[dict[str, Any]], int | None]


def _check_items(
    items: list[Any], request_ms: int, unknown: ItemCheck | None = None
) -> tuple[list[Any], list[Any], dict[int, int]]:
    """The accepted items, the results of the refused ones, and their ``RequestLog.refused``.
    ``unknown`` stands for what the real system knows and the rules do not say (a ``pi`` it
    never issued, say): the code it answers for an item that passes every rule."""
    nos = Counter(_number(item) for item in items)
    repeated = {no for no, count in nos.items() if no is not None and count > 1}
    accepted: list[Any] = []
    results: list[Any] = []
    refused: dict[int, int] = {}
    for position, item in enumerate(items, 1):
        code = _item_error(item, request_ms, repeated)
        if code is None and unknown is not None:
            code = unknown(item)
        if code is None:
            accepted.append(item)
            continue
        sent = item.get("no") if isinstance(item, dict) else None
        results.append({"no": sent, "errcode": code, "errmsg": MESSAGES[code]})
        no = _number(item)
        refused[-position if no is None else no] = code
    return accepted, results, refused


@dataclass(slots=True)
class _Request:
    method: str
    target: str
    headers: Message[str, str]  # case-insensitive
    body: bytes
    at: float

    def header(self, name: str) -> str:
        return self.headers.get(name) or ""


@dataclass(slots=True)
class _Answer:
    errcode: int
    data: Any = ""
    items: int = 0
    refused: dict[int, int] = field(default_factory=dict)
    accepted: list[Any] = field(default_factory=list)
    request_ms: int = 0
    errmsg: str = ""

    def body(self) -> bytes:
        message = self.errmsg or MESSAGES.get(self.errcode, "error")
        return orjson.dumps({"errcode": self.errcode, "errmsg": message, "data": self.data})


class _Busiest:
    """The most arrivals seen within any sliding second (arrivals come in clock order, give
    or take a thread switch: a late one is counted where it lands)."""

    def __init__(self) -> None:
        self.most = 0
        self._window: deque[float] = deque()

    def add(self, at: float) -> None:
        window = self._window
        window.append(at)
        while window[0] <= at - RATE_WINDOW_SECONDS:
            window.popleft()
        self.most = max(self.most, len(window))


class NppaEndpoint:
    """The interface at ``url + PATH``; ``accepted`` and ``requests`` record what it did."""

    def __init__(
        self,
        *,
        app_id: str,
        secret_key: str,
        biz_ids: Collection[str],
        requests_per_second: float = 10.0,
        throttle_seconds: float = 60.0,
        skew_seconds: float = 5.0,
        partial_errcode: int = 0,
        clock: Callable[[], float] = time.time,
        port: int = 0,
        force: Callable[[int], int | None] | None = None,
        unknown: ItemCheck | None = None,
        more_keys: Collection[str] = (),
        rate_scope: str = "app",
        refuse: Callable[[str, list[Any]], int | None] | None = None,
    ) -> None:
        if partial_errcode not in (0, 3001):
            raise ValueError("partial_errcode must be 0 or 3001")
        if rate_scope not in ("app", "game"):
            raise ValueError("rate_scope must be 'app' or 'game'")
        for key in (secret_key, *more_keys):
            _check_key(key)
        self.app_id = app_id
        self.biz_ids = frozenset(biz_ids)
        self.requests_per_second = requests_per_second
        self.throttle_seconds = throttle_seconds
        self.skew_seconds = skew_seconds
        self.partial_errcode = partial_errcode
        self.clock = clock
        self.force = force
        self.unknown = unknown
        self.refuse = refuse
        self.lock = threading.Lock()
        self.accepted: list[Accepted] = []
        self.requests: list[RequestLog] = []
        self._secrets: tuple[str, ...] = (secret_key, *more_keys)
        self.rate_scope = rate_scope
        self._count = 0
        self._windows: dict[str, deque[float]] = {}  # requests that count, per scope
        self._throttled_until: dict[str, float] = {}
        self._seen = _Busiest()  # every request
        self._seen_of: dict[str, _Busiest] = {}
        self._server = ThreadingHTTPServer(("127.0.0.1", port), self._handler_class())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out in separate writes: without this the body waits for
            # the client's delayed ACK on a keep-alive connection.
            disable_nagle_algorithm = True

            def do_POST(self) -> None:
                endpoint._handle(self)

            do_GET = do_PUT = do_DELETE = do_PATCH = do_POST

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def know(self, biz_id: str) -> None:
        """Accept ``biz_id`` from the next request on."""
        with self.lock:
            self.biz_ids = self.biz_ids | {biz_id}

    def forget(self, biz_id: str) -> None:
        """Answer 1010 to ``biz_id`` from the next request on."""
        with self.lock:
            self.biz_ids = self.biz_ids - {biz_id}

    def set_secret(self, secret_key: str) -> None:
        """Make ``secret_key`` the one valid key from the next request on."""
        self.set_secrets(secret_key)

    def set_secrets(self, *secret_keys: str) -> None:
        """Accept each of ``secret_keys`` (and no other) from the next request on."""
        if not secret_keys:
            raise ValueError("at least one key")
        for key in secret_keys:
            _check_key(key)
        with self.lock:
            self._secrets = tuple(secret_keys)

    def _handle(self, http: BaseHTTPRequestHandler) -> None:
        try:
            length = int(http.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0:  # the body cannot be framed: answer, then close the connection
            length, http.close_connection = 0, True
        request = _Request(
            http.command, http.path, http.headers, http.rfile.read(length), self.clock()
        )
        with self.lock:
            self._count += 1
            number, secrets = self._count, self._secrets
            biz_id = request.header("bizId")
            self._seen.add(request.at)
            self._seen_of.setdefault(biz_id, _Busiest()).add(request.at)
        forced = self.force(number) if self.force is not None else None
        answer = _Answer(forced) if forced is not None else self._answer(request, secrets)
        self._record(request, answer)
        reply = answer.body()
        try:
            http.send_response(200)
            http.send_header("Content-Type", "application/json;charset=utf-8")
            http.send_header("Content-Length", str(len(reply)))
            http.end_headers()
            http.wfile.write(reply)
        except (BrokenPipeError, ConnectionResetError):
            http.close_connection = True

    def _answer(self, request: _Request, secrets: tuple[str, ...]) -> _Answer:
        try:
            request_ms, secret = self._check_headers(request, secrets)
            self._check_rate(request.at, request.header("bizId"))
            items = _collections(secret, request.body)
        except _Refused as exc:
            return _Answer(exc.errcode)
        said = self.refuse(request.header("bizId"), items) if self.refuse else None
        if said is not None:
            return _Answer(said, items=len(items))
        accepted, results, refused = _check_items(items, request_ms, self.unknown)
        if not results:
            return _Answer(0, "", len(items), {}, accepted, request_ms)
        code = self.partial_errcode
        return _Answer(
            code,
            {"results": results},
            len(items),
            refused,
            accepted,
            request_ms,
            "ok" if code == 0 else "partial failure",
        )

    def _check_headers(self, request: _Request, secrets: tuple[str, ...]) -> tuple[int, str]:
        """Checks 1 to 5; the request's timestamps in milliseconds, and the key it was
        signed with."""
        parts = urlsplit(request.target)
        if request.method != "POST":
            raise _Refused(1003)
        if parts.path != PATH:
            raise _Refused(1002)
        if not all(request.header(name) for name in REQUIRED_HEADERS):
            raise _Refused(1004)
        if request.header("appId") != self.app_id:
            raise _Refused(1008)
        if request.header("bizId") not in self.biz_ids:
            raise _Refused(1010)
        request_ms = self._request_ms(request)
        signed = {name: request.header(name) for name in SIGNED_HEADERS}
        query = parse_qsl(parts.query, keep_blank_values=True)
        sign = request.header("sign")
        for secret in secrets:
            if hmac.compare_digest(signature(secret, signed, query, request.body), sign):
                return request_ms, secret
        raise _Refused(1011)

    def _request_ms(self, request: _Request) -> int:
        raw = request.header("timestamps")
        if not (raw.isascii() and raw.isdigit()) or len(raw) > MAX_MS_DIGITS:
            raise _Refused(1007)
        request_ms = int(raw)
        if abs(request_ms - request.at * 1000) > self.skew_seconds * 1000:
            raise _Refused(1007)
        return request_ms

    def _check_rate(self, now: float, biz_id: str) -> None:
        scope = biz_id if self.rate_scope == "game" else ""
        with self.lock:
            window = self._windows.setdefault(scope, deque())
            while window and window[0] <= now - RATE_WINDOW_SECONDS:
                window.popleft()
            until = self._throttled_until.get(scope, float("-inf"))
            if now < until or len(window) + 1 > self.requests_per_second:
                self._throttled_until[scope] = max(until, now + self.throttle_seconds)
                raise _Refused(1006)
            window.append(now)

    @property
    def busiest_second(self) -> int:
        """The most requests (any answer) that arrived within one sliding second."""
        with self.lock:
            return self._seen.most

    def busiest_second_of(self, biz_id: str) -> int:
        """``busiest_second`` of the requests with this bizId."""
        with self.lock:
            seen = self._seen_of.get(biz_id)
            return seen.most if seen is not None else 0

    def _record(self, request: _Request, answer: _Answer) -> None:
        biz_id = request.header("bizId")
        with self.lock:
            self.accepted.extend(
                Accepted(biz_id, item, request.at, answer.request_ms) for item in answer.accepted
            )
            self.requests.append(
                RequestLog(request.at, biz_id, answer.errcode, answer.items, answer.refused)
            )

    def start(self) -> NppaEndpoint:
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.01},
            name="nppa-endpoint",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> NppaEndpoint:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
