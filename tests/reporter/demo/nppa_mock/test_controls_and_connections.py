"""The mock's controls (forced answers, key rotation, settings) and its HTTP connections."""

from __future__ import annotations

import http.client
from urllib.parse import urlsplit

import httpx
import orjson
import pytest

from reporter._demo.nppa_mock import PATH, NppaEndpoint
from tests.support.nppa_requests import (
    APP,
    BIZ,
    JSON,
    KEY,
    KEY2,
    T0,
    MakeEndpoint,
    code,
    item,
    plain,
    seal,
    sign,
)


def test_force_answers_before_any_check(make: MakeEndpoint, client: httpx.Client) -> None:
    calls: list[int] = []

    def force(n: int) -> int | None:
        calls.append(n)
        return {1: 1001, 3: 4001, 5: 1011}.get(n)

    ep = make(force=force)
    answers = [code(ep, client, [item(n)]) for n in range(1, 5)]
    answers.append(code(ep, client, method="GET"))  # forced even before the method check
    assert answers == [1001, 0, 4001, 0, 1011]
    assert calls == [1, 2, 3, 4, 5]
    assert [a.item["no"] for a in ep.accepted] == [2, 4]
    assert [r.errcode for r in ep.requests] == answers


def test_forced_answers_do_not_count_toward_the_rate(
    make: MakeEndpoint, client: httpx.Client
) -> None:
    ep = make(force=lambda n: 1001 if n <= 20 else None)
    assert [code(ep, client) for _ in range(20)] == [1001] * 20
    assert code(ep, client) == 0


def test_set_secret_rotates_the_key(ep: NppaEndpoint, client: httpx.Client) -> None:
    assert code(ep, client) == 0
    ep.set_secret(KEY2)
    assert code(ep, client, key=KEY) == 1011
    assert code(ep, client, key=KEY2) == 0
    # signed with the new key, sealed with the old one
    assert code(ep, client, body=seal(KEY, plain([item(1)])), sign_key=KEY2) == 1012
    assert [r.errcode for r in ep.requests] == [0, 1011, 0, 1012]


def test_both_keys_of_a_rotation_are_accepted(make: MakeEndpoint, client: httpx.Client) -> None:
    ep = make(more_keys=[KEY2])
    assert code(ep, client, key=KEY) == 0 and code(ep, client, key=KEY2) == 0
    # each body is opened with the key its sign matched
    assert code(ep, client, body=seal(KEY, plain([item(1)])), sign_key=KEY2) == 1012
    assert code(ep, client, [], key=KEY2) == 3002  # a key check: no item, nothing taken
    ep.set_secrets(KEY2)  # the old key expired
    assert code(ep, client, key=KEY) == 1011 and code(ep, client, key=KEY2) == 0
    with pytest.raises(ValueError):
        ep.set_secrets()
    assert len(ep.accepted) == 3


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError):
        NppaEndpoint(app_id=APP, secret_key=KEY, biz_ids=[BIZ], partial_errcode=1)
    with pytest.raises(ValueError):
        NppaEndpoint(app_id=APP, secret_key="not hex", biz_ids=[BIZ])
    with pytest.raises(ValueError):
        NppaEndpoint(app_id=APP, secret_key=KEY * 2, biz_ids=[BIZ])  # AES-256: not the protocol
    with pytest.raises(ValueError):
        NppaEndpoint(app_id=APP, secret_key=KEY, biz_ids=[BIZ], more_keys=["nope"])


def test_keep_alive_over_one_connection(ep: NppaEndpoint) -> None:
    port = urlsplit(ep.url).port
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        ts = str(round(T0 * 1000))
        body = seal(KEY, plain([item(1)]))
        headers = {
            "appId": APP,
            "bizId": BIZ,
            "timestamps": ts,
            "sign": sign(KEY, APP, BIZ, ts, body),
            "Content-Type": JSON,
        }
        sockets = []
        for method, path in [("POST", PATH), ("GET", PATH), ("POST", "/x"), ("POST", PATH)]:
            conn.request(method, path, body=body, headers=headers)
            response = conn.getresponse()
            assert response.status == 200
            assert int(response.headers["Content-Length"]) > 0
            answer = orjson.loads(response.read())
            assert answer["errcode"] in {0, 1002, 1003}
            assert not response.will_close
            sockets.append(conn.sock)
        assert len(set(map(id, sockets))) == 1
    finally:
        conn.close()
    assert [r.errcode for r in ep.requests] == [0, 1003, 1002, 0]


def test_stop_without_start() -> None:
    NppaEndpoint(app_id=APP, secret_key=KEY, biz_ids=[BIZ]).stop()
