"""The conformance suite's relay reads a producer's commands whole, however the bytes arrive,
and loses exactly what it is asked to: the reply of a collect call that ran, or the call."""

from __future__ import annotations

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from reporter._conformance.relay import Relay, parse_command
from tests.support.servers import Server

EVALSHA = b"*5\r\n$7\r\nEVALSHA\r\n$3\r\nabc\r\n$1\r\n1\r\n$3\r\nk:1\r\n$6\r\nx\r\ny z\r\n"
PING = b"*1\r\n$4\r\nPING\r\n"


def test_a_command_is_read_only_once_whole_wherever_the_bytes_are_cut() -> None:
    stream = PING + EVALSHA
    for cut in range(len(stream) + 1):
        data = bytearray(stream[:cut])
        parsed = parse_command(data)
        if cut < len(PING):
            assert parsed is None, cut
            continue
        assert parsed == ([b"PING"], len(PING))
        second = parse_command(data, len(PING))
        if cut < len(stream):
            assert second is None, cut
        else:
            assert second == ([b"EVALSHA", b"abc", b"1", b"k:1", b"x\r\ny z"], len(stream))


def test_an_inline_command_is_read_as_words() -> None:
    assert parse_command(b"PING hello\r\n") == ([b"PING", b"hello"], 12)
    assert parse_command(b"PING") is None


def test_a_lost_reply_ran_and_a_lost_call_did_not(server: Server) -> None:
    relay = Relay(("127.0.0.1", server.port))
    direct = server.client()
    direct.flushall()
    script = "redis.call('INCR', KEYS[1]) return 1"
    try:
        for lose, runs in ((relay.lose_next_reply, 1), (relay.lose_next_call, 0)):
            direct.delete("counter")
            through = redis.Redis(port=relay.port, socket_timeout=5, retry=Retry(NoBackoff(), 0))
            through.ping()
            lose()
            try:
                through.eval(script, 1, "counter")
            except redis.ConnectionError:
                pass
            else:
                raise AssertionError("the reply came through")
            assert int(direct.get("counter") or 0) == runs
            assert not relay.armed
            through.close()
        assert [c.fate for c in relay.calls] == ["reply lost", "call lost"]
        assert relay.calls[0].argv() == ()
    finally:
        relay.close()
        direct.close()
