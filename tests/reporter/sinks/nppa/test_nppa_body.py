"""The nppa sender needs the answer's body (the ``NEED_BODY`` request extension): through
the real transport, a body that is too long, unframed or cut short is retried, never taken as
an answer; a small one is read whole."""

from __future__ import annotations

import time

import orjson
import pytest

from reporter._senders.outcome import DELIVERED, RETRY
from reporter._sinks.nppa.sender import NOT_SENT, NppaSender
from tests.support.entries import make_config
from tests.support.rawhttp import always, raw_server, then_hold

SECRET = "00112233445566778899aabbccddeeff"
ANSWER = b'{"errcode":0,"errmsg":"ok"}'


class Pace:
    """A pacer whose slot is there, or not (``on_time``), counting what it was asked."""

    def __init__(self, on_time: bool) -> None:
        self.answer = on_time
        self.asked = 0

    def one(self, game: str) -> bool:
        return self.answer

    def on_time(self, game: str) -> bool:
        self.asked += 1
        return self.answer


def send(reply: bytes, pacer: Pace | None = None, requests: int = 1) -> tuple[str, str]:
    with raw_server(always(then_hold(reply))) as server:
        config = make_config(
            "redis://127.0.0.1:1/0",
            sink={"kind": "nppa", "timeout_seconds": 0.5},
            nppa={"app_id": "app-1", "secret_key": SECRET, "base_url": server.url("")},
            games={"g1": {"biz_id": "biz-1"}},
        )
        sender = NppaSender(config, pacer=pacer)
        event = orjson.dumps(
            {"si": "s1", "bt": 0, "ot": int(time.time()) - 5, "ct": 0, "pi": "1" * 38}
        )
        try:
            outcome = sender.send("g1", "b.0", [event])
        finally:
            sender.close()
        assert len(server.requests) == requests
    return outcome.kind, outcome.reason


def test_a_small_answer_is_read_whole() -> None:
    reply = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(ANSWER), ANSWER)
    assert send(reply) == (DELIVERED, "")
    on_time = Pace(True)
    assert send(reply, on_time) == (DELIVERED, "")  # through send_when
    assert on_time.asked == 1


def test_a_request_whose_slot_is_gone_is_not_sent_and_retried() -> None:
    """The transport asks the pacer with the connection ready; a no sends nothing: the
    batch is retried (no exception standing in for an answer)."""
    reply = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(ANSWER), ANSWER)
    late = Pace(False)
    assert send(reply, late, requests=0) == (RETRY, NOT_SENT)
    assert late.asked == 1


@pytest.mark.parametrize(
    "reply, error",
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 52428800\r\n\r\n" + ANSWER, "RemoteProtocolError"),
        (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n" + ANSWER, "ReadTimeout"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + ANSWER, "ReadTimeout"),
    ],
)
def test_an_answer_that_cannot_be_read_whole_is_retried(reply: bytes, error: str) -> None:
    for pacer in (None, Pace(True)):  # through the client, and through send_when
        kind, reason = send(reply, pacer)
        assert kind == RETRY
        assert reason.startswith(error)
