"""An endpoint's error body is not trusted: the reason kept with a batch (and logged) is the
status and a short text from a known error field, never the body itself (endpoints echo
the request: event payloads, credentials)."""

from __future__ import annotations

import orjson
import pytest

from reporter._senders.outcome import (
    ERROR_SUMMARY_CHARS,
    REJECTED,
    RETRY,
    classify_http,
    error_summary,
)
from tests.support.markers import secret

KEY = secret("key")
PW = secret("pw")
TOKEN = secret("token")
PLAYER = secret("player")

PAYLOAD = f'{{"player":"{PLAYER}","ip":"10.1.2.3"}}'


@pytest.mark.parametrize(
    "body",
    [
        PAYLOAD.encode(),  # the request echoed back
        f"bad request: {PAYLOAD}".encode(),
        b"<html><body>400 Bad Request " + PAYLOAD.encode() + b"</body></html>",
        orjson.dumps({"received": {"events": [PAYLOAD]}, "status": "invalid"}),
        orjson.dumps([{"error": PAYLOAD}]),  # not an object
        b"\xff\xfe" + PAYLOAD.encode(),
        b"",
    ],
)
@pytest.mark.parametrize("status", [400, 500])
def test_a_body_without_a_known_field_gives_the_status_alone(status: int, body: bytes) -> None:
    outcome = classify_http(status, None, body)
    assert outcome.kind == (REJECTED if status == 400 else RETRY)
    assert outcome.reason == f"HTTP {status}"


@pytest.mark.parametrize(
    ("doc", "reason"),
    [
        ({"error": "schema mismatch"}, "schema mismatch"),
        ({"message": "quota exceeded"}, "quota exceeded"),
        ({"detail": "game unknown", "input": PAYLOAD}, "game unknown"),
        ({"errcode": 40001, "errmsg": "invalid credential"}, "invalid credential"),
        ({"error": {"code": 400, "message": "bad field 'ts'"}, "echo": PAYLOAD}, "bad field 'ts'"),
        ({"error": True, "message": "rejected"}, "rejected"),
        ({"error": "two\r\nlines\tand  spaces"}, "two lines and spaces"),
    ],
)
def test_a_known_error_field_gives_a_short_reason(doc: dict[str, object], reason: str) -> None:
    outcome = classify_http(422, None, orjson.dumps(doc))
    assert outcome.reason == f"HTTP 422: {reason}"
    assert PLAYER not in outcome.reason


def test_the_reason_is_bounded_and_masked() -> None:
    long = error_summary(orjson.dumps({"error": "x" * 5000}))
    assert len(long) == ERROR_SUMMARY_CHARS and long.endswith("...")
    said = error_summary(orjson.dumps({"message": f"bad token for https://u:{PW}@h/?key={KEY}"}))
    assert PW not in said and KEY not in said and "https://u:***@h/?key=***" in said
    assert error_summary(orjson.dumps({"error": f"Bearer {TOKEN} refused"})) == "Bearer *** refused"


def test_a_huge_body_is_not_parsed() -> None:
    body = orjson.dumps({"error": "too big", "echo": "x" * 100_000})
    assert classify_http(413, None, body).reason == "HTTP 413"
