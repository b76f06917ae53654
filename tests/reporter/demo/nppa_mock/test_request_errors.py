"""Requests the mock refuses whole: method, path, headers, timestamps, sign and body."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable

import httpx
import orjson
import pytest

from reporter._demo.nppa_mock import PATH, NppaEndpoint, RequestLog
from tests.support.nppa_requests import (
    APP,
    BIZ,
    KEY,
    KEY2,
    OTHER_BIZ,
    S0,
    T0,
    FakeClock,
    MakeEndpoint,
    code,
    item,
    plain,
    post,
    seal,
    sign,
)


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", PATH),
        ("PUT", PATH),
        ("DELETE", PATH),
        ("GET", "/other"),
    ],
)
def test_wrong_method_1003(ep: NppaEndpoint, client: httpx.Client, method: str, path: str) -> None:
    assert post(ep, client, method=method, path=path) == {
        "errcode": 1003,
        "errmsg": "method not allowed",
        "data": "",
    }
    assert ep.accepted == []
    assert ep.requests == [RequestLog(T0, BIZ, 1003, 0, {})]


@pytest.mark.parametrize("path", ["/", "/behavior/collection/loginout/x", "/collection/loginout"])
def test_wrong_path_1002(ep: NppaEndpoint, client: httpx.Client, path: str) -> None:
    assert code(ep, client, path=path) == 1002


@pytest.mark.parametrize("name", ["appId", "bizId", "timestamps", "sign"])
def test_missing_header_1004(ep: NppaEndpoint, client: httpx.Client, name: str) -> None:
    assert code(ep, client, drop=[name]) == 1004
    assert code(ep, client, headers={name: ""}) == 1004


def test_header_names_are_case_insensitive(ep: NppaEndpoint, client: httpx.Client) -> None:
    ts = str(round(T0 * 1000))
    body = seal(KEY, plain([item(1)]))
    headers = {"APPID": APP, "bizid": BIZ, "TimeStamps": ts, "SIGN": sign(KEY, APP, BIZ, ts, body)}
    answer = client.post(ep.url + PATH, headers=headers, content=body).json()
    assert answer["errcode"] == 0


def test_wrong_app_id_1008(ep: NppaEndpoint, client: httpx.Client) -> None:
    assert code(ep, client, app="other-app") == 1008


def test_unknown_biz_id_1010(ep: NppaEndpoint, client: httpx.Client) -> None:
    assert code(ep, client, biz=OTHER_BIZ) == 1010
    assert code(ep, client, biz=KEY) == 1010  # the secret in bizId, a mistake seen in clients


@pytest.mark.parametrize(
    "timestamps",
    [
        str(S0),
        str(round(T0 * 1000) - 5001),
        str(round(T0 * 1000) + 5001),
        "abc",
        "-1",
        f"{T0 * 1000:.1f}",
        "1.7e12",
        str(round(T0 * 1_000_000)),
        "9" * 5000,
    ],
)
def test_bad_timestamps_1007(ep: NppaEndpoint, client: httpx.Client, timestamps: str) -> None:
    assert code(ep, client, timestamps=timestamps) == 1007


@pytest.mark.parametrize("offset", [-6.0, 6.0])
def test_server_clock_beyond_skew_1007(
    make: MakeEndpoint, client: httpx.Client, offset: float
) -> None:
    ep = make(clock=FakeClock(T0 + offset))
    assert code(ep, client, timestamps=str(round(T0 * 1000))) == 1007


def test_skew_seconds_is_a_setting(make: MakeEndpoint, client: httpx.Client) -> None:
    ep = make(skew_seconds=1.0, clock=FakeClock(T0 + 2))
    assert code(ep, client, timestamps=str(round(T0 * 1000))) == 1007


def _bad_signs() -> list[tuple[str, Callable[[bytes, str], str]]]:
    return [
        ("wrong key", lambda body, ts: sign(KEY2, APP, BIZ, ts, body)),
        ("plain body", lambda body, ts: sign(KEY, APP, BIZ, ts, plain([item(1)]))),
        ("upper hex", lambda body, ts: sign(KEY, APP, BIZ, ts, body).upper()),
        ("other ms", lambda body, ts: sign(KEY, APP, BIZ, str(int(ts) - 1), body)),
        (
            "no secret",
            lambda body, ts: hashlib.sha256(
                f"appId{APP}bizId{BIZ}timestamps{ts}".encode() + body
            ).hexdigest(),
        ),
        (
            "unsorted",
            lambda body, ts: hashlib.sha256(
                f"{KEY}timestamps{ts}bizId{BIZ}appId{APP}".encode() + body
            ).hexdigest(),
        ),
    ]


@pytest.mark.parametrize(("case", "make_sign"), _bad_signs(), ids=[c for c, _ in _bad_signs()])
def test_bad_sign_1011(
    ep: NppaEndpoint, client: httpx.Client, case: str, make_sign: Callable[[bytes, str], str]
) -> None:
    body = seal(KEY, plain([item(1)]))
    ts = str(round(T0 * 1000))
    assert code(ep, client, body=body, timestamps=ts, headers={"sign": make_sign(body, ts)}) == 1011


def test_query_parameters_are_signed(ep: NppaEndpoint, client: httpx.Client) -> None:
    assert code(ep, client, query=[("id", "x"), ("name", "y")]) == 0
    body = seal(KEY, plain([item(1)]))
    ts = str(round(T0 * 1000))
    unsigned_query = {"sign": sign(KEY, APP, BIZ, ts, body)}
    answer = post(ep, client, body=body, timestamps=ts, query=[("id", "x")], headers=unsigned_query)
    assert answer["errcode"] == 1011


def _sealed_raw(data: bytes) -> bytes:
    return orjson.dumps({"data": base64.b64encode(data).decode()})


def _tampered() -> bytes:
    wire = orjson.loads(seal(KEY, plain([item(1)])))
    raw = bytearray(base64.b64decode(wire["data"]))
    raw[-1] ^= 1
    return _sealed_raw(bytes(raw))


@pytest.mark.parametrize(
    ("case", "body"),
    [
        ("empty", b""),
        ("not json", b"{data"),
        ("plain body", plain([item(1)])),
        ("not an object", b'["x"]'),
        ("data not a string", b'{"data": 5}'),
        ("bad base64", b'{"data":"!!!not base64"}'),
        ("too short", _sealed_raw(b"\0" * 20)),
        ("tag tampered", _tampered()),
        ("other key", seal(KEY2, plain([item(1)]))),
        ("plaintext not json", seal(KEY, b"collections")),
        ("plaintext a list", seal(KEY, b"[]")),
        ("no collections", seal(KEY, b'{"items": []}')),
        ("collections not a list", seal(KEY, b'{"collections": {"no": 1}}')),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_bad_body_1012(ep: NppaEndpoint, client: httpx.Client, case: str, body: bytes) -> None:
    assert post(ep, client, body=body) == {
        "errcode": 1012,
        "errmsg": "body check failed",
        "data": "",
    }
    assert ep.accepted == []


def test_empty_collections_3002(ep: NppaEndpoint, client: httpx.Client) -> None:
    assert code(ep, client, []) == 3002


def test_over_128_items_3003(ep: NppaEndpoint, client: httpx.Client) -> None:
    assert code(ep, client, [item(n % 128 + 1) for n in range(129)]) == 3003
    assert ep.accepted == []
