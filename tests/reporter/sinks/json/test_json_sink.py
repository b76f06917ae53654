"""The ``json`` sender against ``httpx.MockTransport``: body, headers, gzip and outcomes."""

from __future__ import annotations

import dataclasses
import gzip
import json
from collections.abc import Callable, Iterator
from typing import Any, cast

import httpx
import orjson
import pytest

from collector.config import build_config, raw_settings
from collector.retry import MAX_RETRY_AFTER_SECONDS
from reporter._config import ReporterConfig, SinkSettings
from reporter._exceptions import SinkConfigError
from reporter._http.transport import _request_bytes
from reporter._senders.bodies import json_body
from reporter._senders.outcome import DELIVERED, REJECTED, RETRY
from reporter._sinks.json.sender import JsonSender, ratelog
from reporter._sinks.registry import make_sender
from tests.support.markers import secret
from tests.support.rawhttp import always, hang, raw_server, then_hold

TOKEN = secret("token")

URL = "http://ingest.invalid/v1/events"
EVENTS: list[Any] = [
    {"type": "login", "player": "p1", "ts": 1_700_000_000_123},
    {"名字": "玩家一", "emoji": "🎮", "text": 'line\nbreak "quoted" \\ back'},
    {"nested": {"list": [1, 2.5, None, True, {"deep": ["x"]}], "empty": {}}, "n": -0.0},
    {"big": 2**62, "float": 1e-7, "ascii": "\u0000\u001f"},
]

Handler = Callable[[httpx.Request], httpx.Response]


class Recorder:
    """A MockTransport handler that records requests and answers from a script."""

    def __init__(self, reply: Handler | None = None) -> None:
        self.requests: list[httpx.Request] = []
        self.reply = reply or (lambda _: httpx.Response(200, json={"ok": True}))

    def __call__(self, request: httpx.Request) -> httpx.Response:
        request.read()
        self.requests.append(request)
        return self.reply(request)


def sink_config(env: dict[str, str] | None = None, **sink: Any) -> ReporterConfig:
    raw = raw_settings(ReporterConfig())
    raw["sink"].update({"url": URL, **sink})
    return build_config(raw, "test", env=env or {}, interpolate=env is not None, cls=ReporterConfig)


@pytest.fixture
def sender_for() -> Iterator[Callable[..., JsonSender]]:
    made: list[JsonSender] = []

    def make(recorder: Recorder, settings: SinkSettings | None = None) -> JsonSender:
        transport = httpx.MockTransport(recorder)
        sender = (
            JsonSender(settings, transport)
            if settings is not None
            else cast(JsonSender, make_sender(sink_config(), transport))
        )
        made.append(sender)
        return sender

    yield make
    for sender in made:
        sender.close()


def raw_events() -> list[bytes]:
    return [orjson.dumps(e) for e in EVENTS]


def test_body_holds_the_events_unchanged(sender_for: Callable[..., JsonSender]) -> None:
    recorder = Recorder()
    outcome = sender_for(recorder).send("game-1", "batch-42", raw_events())

    assert outcome.kind == DELIVERED
    [request] = recorder.requests
    assert request.method == "POST"
    assert str(request.url) == URL
    body = json.loads(request.content)
    assert body == {"game": "game-1", "batch_id": "batch-42", "events": EVENTS}
    assert list(body) == ["game", "batch_id", "events"]
    assert request.headers["Content-Type"] == "application/json"
    assert "Content-Encoding" not in request.headers


def test_idempotency_key_is_the_batch_id(sender_for: Callable[..., JsonSender]) -> None:
    recorder = Recorder()
    sender = sender_for(recorder)
    sender.send("g", "b-1.0", raw_events())
    sender.send("g", "b-2.3", raw_events())
    assert [r.headers["Idempotency-Key"] for r in recorder.requests] == ["b-1.0", "b-2.3"]


def test_every_request_carries_the_standard_headers_and_the_timeouts(
    sender_for: Callable[..., JsonSender],
) -> None:
    config = sink_config(
        url="https://ingest.invalid:8443/v1/events?src=a",
        timeout_seconds=7.5,
        connect_timeout_seconds=1.5,
    )
    recorder = Recorder()
    sender = sender_for(recorder, config.sink)
    for attempt in (1, 3):
        sender.send("g", "b", raw_events(), attempt)

    assert len(recorder.requests) == 2
    for request, attempt in zip(recorder.requests, (1, 3), strict=True):
        assert str(request.url) == "https://ingest.invalid:8443/v1/events?src=a"
        assert request.method == "POST"
        assert request.headers["Host"] == "ingest.invalid:8443"
        assert request.headers["Content-Type"] == "application/json"
        assert request.headers["User-Agent"].startswith("telemetry-reporter/")
        assert request.headers["Content-Length"] == str(len(request.content))
        assert request.headers["X-Telemetry-Attempt"] == str(attempt)
        assert request.extensions["timeout"] == {
            "connect": 1.5,
            "read": 7.5,
            "write": 7.5,
            "pool": 7.5,
        }


def httpx_built(sender: JsonSender, recorded: httpx.Request) -> httpx.Request:
    """The request httpx itself makes of what ``send`` had: the client's headers, the batch's
    two, and the body given whole."""
    headers = sender._client.headers.copy()
    headers["Idempotency-Key"] = recorded.headers["Idempotency-Key"]
    headers["X-Telemetry-Attempt"] = recorded.headers["X-Telemetry-Attempt"]
    return httpx.Request("POST", URL, headers=headers, content=recorded.content)


@pytest.mark.parametrize(
    "sink",
    [
        {},
        {"gzip": True},
        {"headers": {"X-Tenant": "acme", "Authorization": "Bearer t"}},
        {"headers": {"Host": "other.invalid"}},
        {"headers": {"Idempotency-Key": "mine"}},
    ],
    ids=["default", "gzip", "headers", "own-host", "own-idempotency-key"],
)
def test_the_request_is_the_one_httpx_would_build(
    sender_for: Callable[..., JsonSender], sink: dict[str, Any]
) -> None:
    # send() builds each request from a head made once; what goes out must not change:
    # every header, in httpx's order (Host first, Content-Length last), and the body.
    recorder = Recorder()
    sender = sender_for(recorder, sink_config(**sink).sink)
    sender.send("game-1", "batch-42.a", raw_events(), 3)

    [request] = recorder.requests
    expected = httpx_built(sender, request)
    assert request.headers.raw == expected.headers.raw
    assert request.content == expected.read()
    assert request.method == "POST" and request.url == expected.url
    assert type(request.stream) is type(expected.stream)


@pytest.mark.parametrize("transport", ["builtin", "httpx"])
def test_credentials_in_the_url_are_sent_as_basic_auth(
    sender_for: Callable[..., JsonSender], transport: str
) -> None:
    # Requests go straight to the transport only when nothing of the client's is missed:
    # the URL's user and password become an Authorization header, as httpx makes them.
    recorder = Recorder()
    url = "http://ingest-user:s3cr%40t@ingest.invalid/v1/events"
    sender = sender_for(recorder, sink_config(url=url, transport=transport).sink)
    sender.send("g", "b", raw_events())
    [request] = recorder.requests
    assert request.headers["Authorization"] == httpx.BasicAuth("ingest-user", "s3cr@t")._auth_header


def test_json_body_is_assembled_from_raw_bytes() -> None:
    body = json_body('odd "game"', "id", [b'{"a":1}', b"[2]"])
    assert json.loads(body) == {"game": 'odd "game"', "batch_id": "id", "events": [{"a": 1}, [2]]}
    assert json.loads(json_body("g", "id", [])) == {"game": "g", "batch_id": "id", "events": []}


def test_configured_headers_are_sent_with_env_interpolation(
    sender_for: Callable[..., JsonSender],
) -> None:
    config = sink_config(
        env={"INGEST_TOKEN": TOKEN, "TENANT": "acme"},
        headers={
            "Authorization": "Bearer ${INGEST_TOKEN}",
            "X-Tenant": "${TENANT}",
            "X-Price": "$$5",
        },
    )
    recorder = Recorder()
    sender_for(recorder, config.sink).send("g", "b", raw_events())

    [request] = recorder.requests
    assert request.headers["Authorization"] == f"Bearer {TOKEN}"
    assert request.headers["X-Tenant"] == "acme"
    assert request.headers["X-Price"] == "$5"
    assert request.headers["Idempotency-Key"] == "b"
    assert TOKEN not in repr(config)


def test_gzip_body_decompresses_to_the_same_json(sender_for: Callable[..., JsonSender]) -> None:
    plain, zipped = Recorder(), Recorder()
    sender_for(plain).send("game-1", "b", raw_events())
    sender = sender_for(zipped, sink_config(gzip=True).sink)
    sender.send("game-1", "b", raw_events())

    [request] = zipped.requests
    assert request.headers["Content-Encoding"] == "gzip"
    assert gzip.decompress(request.content) == plain.requests[0].content
    assert json.loads(gzip.decompress(request.content))["events"] == EVENTS
    assert "gzip" in sender.describe()


@pytest.mark.parametrize(
    ("status", "headers", "kind", "retry_after"),
    [
        (200, {}, DELIVERED, 0.0),
        (204, {}, DELIVERED, 0.0),
        (408, {}, RETRY, 0.0),
        (429, {"Retry-After": "9"}, RETRY, 9.0),
        (500, {}, RETRY, 0.0),
        (502, {}, RETRY, 0.0),
        (503, {"Retry-After": "120"}, RETRY, 120.0),
        (400, {}, REJECTED, 0.0),
        (401, {}, REJECTED, 0.0),
        (404, {}, REJECTED, 0.0),
        (413, {"Retry-After": "9"}, REJECTED, 0.0),
    ],
)
def test_responses_map_to_outcomes(
    sender_for: Callable[..., JsonSender],
    status: int,
    headers: dict[str, str],
    kind: str,
    retry_after: float,
) -> None:
    recorder = Recorder(lambda _: httpx.Response(status, headers=headers, content=b"why"))
    outcome = sender_for(recorder).send("g", "b", raw_events())
    assert (outcome.kind, outcome.retry_after) == (kind, retry_after)


@pytest.mark.parametrize("error", [httpx.ConnectError, httpx.ReadTimeout, httpx.WriteError])
def test_transport_errors_become_retry(
    sender_for: Callable[..., JsonSender], error: type[httpx.TransportError]
) -> None:
    def fail(request: httpx.Request) -> httpx.Response:
        raise error("boom", request=request)

    outcome = sender_for(Recorder(fail)).send("g", "b", raw_events())
    assert outcome.kind == RETRY
    assert error.__name__ in outcome.reason


def test_unknown_sink_kind_is_a_sink_config_error() -> None:
    config = dataclasses.replace(sink_config(), sink=SinkSettings(kind="carrier-pigeon"))
    with pytest.raises(SinkConfigError, match="carrier-pigeon"):
        make_sender(config)


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-5", "soon", "Wed, 99 Foo 2015"])
def test_an_unusable_retry_after_is_ignored_with_one_warning_per_endpoint(
    sender_for: Callable[..., JsonSender], caplog: pytest.LogCaptureFixture, value: str
) -> None:
    recorder = Recorder(lambda _: httpx.Response(503, headers={"Retry-After": value}))
    sender = sender_for(recorder)
    ratelog.reset(f"retry-after:{URL}")
    outcomes = [sender.send("g", f"b{i}", raw_events()) for i in range(3)]
    assert [(o.kind, o.retry_after) for o in outcomes] == [(RETRY, 0.0)] * 3
    warnings = [r.getMessage() for r in caplog.records if "Retry-After" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert URL in warnings[0] and "ignored" in warnings[0]


def test_a_wait_longer_than_the_freshness_window_is_logged_with_the_events_it_makes_stale(
    caplog: pytest.LogCaptureFixture,
) -> None:
    recorder = Recorder(lambda _: httpx.Response(429, headers={"Retry-After": "100000"}))
    sender = JsonSender(sink_config().sink, httpx.MockTransport(recorder), max_age_seconds=180)
    ratelog.reset(f"long-wait:{URL}")
    try:
        outcome = sender.send("g", "b-7", raw_events())
    finally:
        sender.close()
    assert (outcome.kind, outcome.retry_after) == (RETRY, MAX_RETRY_AFTER_SECONDS)
    [warning] = [r.getMessage() for r in caplog.records if "freshness" in r.getMessage()]
    assert f"the {len(EVENTS)} events of batch b-7 of game 'g' will be stale" in warning
    assert "600 s" in warning


# The answers of a peer that accepts the batch but whose body is odd.
ODD_2XX = [
    b"HTTP/1.1 200 OK\r\nContent-Length: 52428800\r\n\r\n" + b"x" * 200_000,
    b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{"ok":true}',
    b"HTTP/1.1 202 Accepted\r\nContent-Length: 30\r\nContent-Encoding: gzip\r\n\r\nnot gzip",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
]


@pytest.mark.parametrize("reply", ODD_2XX)
def test_a_2xx_is_delivered_whatever_its_body(reply: bytes) -> None:
    """Through the real transport: the status line and headers are the answer."""
    with raw_server(always(then_hold(reply))) as server:
        sender = JsonSender(sink_config(url=server.url(), timeout_seconds=0.5).sink)
        try:
            outcomes = [sender.send("g", f"b{i}", raw_events()) for i in range(2)]
        finally:
            sender.close()
        assert [o.kind for o in outcomes] == [DELIVERED, DELIVERED]
        assert [b["batch_id"] for b in server.bodies()] == ["b0", "b1"]


def test_an_error_answer_is_read_only_for_its_reason() -> None:
    huge = b"HTTP/1.1 503 Busy\r\nContent-Length: 52428800\r\n\r\n" + b"e" * 200_000
    with raw_server(always(then_hold(huge))) as server:
        sender = JsonSender(sink_config(url=server.url()).sink)
        try:
            outcome = sender.send("g", "b", raw_events())
        finally:
            sender.close()
    assert (outcome.kind, outcome.reason) == (RETRY, "HTTP 503")  # the body is never kept


# Through the builtin transport a request goes as bytes made by the sender (no httpx.Request).
WIRE_SINKS = [
    {},
    {"gzip": True},
    {"headers": {"X-Tenant": "acme", "Authorization": "Bearer t"}},
    {"headers": {"Host": "other.invalid"}},
    {"headers": {"Idempotency-Key": "mine"}},
]


@pytest.mark.parametrize("sink", WIRE_SINKS, ids=["default", "gzip", "headers", "host", "key"])
def test_the_bytes_sent_are_those_of_the_request_httpx_would_build(sink: dict[str, Any]) -> None:
    """Whether made by the sender or by the transport from an ``httpx.Request``, a request
    goes as the bytes of the request ``send`` would hand httpx: every header in its order,
    and the body."""
    with raw_server(always(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")) as server:
        sender = JsonSender(sink_config(url=server.url(), **sink).sink)
        try:
            assert sender.send("game-1", "batch-42.a", raw_events(), 3).kind == DELIVERED
            [(head, body)] = server.requests
            expected = _request_bytes(sender._request("batch-42.a", 3, body), None)
        finally:
            sender.close()
    assert head + body == expected


def test_a_delivered_request_to_the_builtin_transport_builds_no_httpx_objects(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    built: list[str] = []
    real_request, real_response = JsonSender._request, httpx.Response.__init__

    def request(self: JsonSender, *args: Any) -> httpx.Request:
        built.append("request")
        return real_request(self, *args)

    def response(self: httpx.Response, *args: Any, **kwargs: Any) -> None:
        built.append("response")
        real_response(self, *args, **kwargs)

    monkeypatch.setattr(JsonSender, "_request", request)
    monkeypatch.setattr(httpx.Response, "__init__", response)
    answers = [b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"] * 2 + [
        b"HTTP/1.1 503 Busy\r\nRetry-After: 7\r\nContent-Length: 4\r\n\r\nbusy"
    ]
    with raw_server(lambda n, _: answers[n]) as server:
        sender = JsonSender(sink_config(url=server.url()).sink)
        try:
            outcomes = [sender.send("g", f"b{i}", raw_events()) for i in range(2)]
            assert built == []
            assert [o.kind for o in outcomes] == [DELIVERED, DELIVERED]
            failed = sender.send("g", "b2", raw_events())  # an answer to read: as before
        finally:
            sender.close()
    assert (failed.kind, failed.retry_after, failed.reason) == (RETRY, 7.0, "HTTP 503")
    assert built == ["request", "response"]


def test_a_transport_error_of_the_builtin_transport_names_the_endpoint(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with raw_server(always(hang)) as server:
        url = server.url()
        sender = JsonSender(sink_config(url=url, timeout_seconds=0.3).sink)
        try:
            outcome = sender.send("g", "b", raw_events())
        finally:
            sender.close()
    assert (outcome.kind, outcome.code) == (RETRY, "ReadTimeout")
    assert f"request to {url.split('?')[0]} timed out while waiting for the status line" in (
        caplog.text
    )
