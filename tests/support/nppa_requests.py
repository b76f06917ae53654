"""This suite's own request builder (not the sender's), its keys, ids and fake clock."""

# The requests are built here, not by the sender, so the mock is checked against the protocol
# and not against code it will be used to test.

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlencode

import httpx
import orjson
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from reporter._demo.nppa_mock import PATH, NppaEndpoint
from tests.support.clock import Clock

APP = "mock-app-id"
BIZ = "1101999999"
OTHER_BIZ = "1101888888"
KEY = "00112233445566778899aabbccddeeff"
KEY2 = "ffeeddccbbaa99887766554433221100"
T0 = 1_700_000_000.25  # the fake clocks start here
S0 = int(T0)
JSON = "application/json;charset=utf-8"

# The worked example of the interface description.
EX_KEY = "2836e95fcd10e04b0069bb1ee659955b"
EX_HEADERS = {"appId": "test-appId", "bizId": "test-bizId", "timestamps": "1584949895758"}
EX_QUERY = [("id", "test-id"), ("name", "test-name")]
EX_BODY = (
    b'{"data":"CqT/33f3jyoiYqT8MtxEFk3x2rlfhmgzhxpHqWosSj4d3hq2EbrtVyx2aLj565ZQNTcPrcDipnv'
    b'pq/D/vQDaLKW70O83Q42zvR0//OfnYLcIjTPMnqa+SOhsjQrSdu66ySSORCAo"}'
)
EX_SIGN = "386c03b776a28c06b8032a958fbd89337424ef45c62d0422706cca633d8ad5fd"
EX_PLAIN = '{"ai":"test-accountId","name":"用户姓名","idNum":"371321199012310912"}'


class FakeClock(Clock):
    """The mock's clock, at ``T0`` unless told."""

    def __init__(self, now: float = T0) -> None:
        super().__init__(now)


def seal(key: str, plain: bytes) -> bytes:
    nonce = os.urandom(12)
    sealed = nonce + AESGCM(bytes.fromhex(key)).encrypt(nonce, plain, None)
    return orjson.dumps({"data": base64.b64encode(sealed).decode()})


def sign(
    key: str, app: str, biz: str, ts: str, body: bytes, query: Iterable[tuple[str, str]] = ()
) -> str:
    pairs = sorted([("appId", app), ("bizId", biz), ("timestamps", ts), *query])
    text = key + "".join(name + value for name, value in pairs)
    return hashlib.sha256(text.encode() + body).hexdigest()


def item(no: int, now: float = T0, /, *, drop: Iterable[str] = (), **fields: Any) -> dict[str, Any]:
    made = {
        "no": no,
        "si": f"{no:032x}",
        "bt": 1,
        "ot": int(now) - 10,
        "ct": 0,
        "pi": "1" + "a" * 37,
        **fields,
    }
    for name in drop:
        del made[name]
    return made


def guest(
    no: int, now: float = T0, /, *, drop: Iterable[str] = (), **fields: Any
) -> dict[str, Any]:
    return item(no, now, drop=("pi", *drop), **{"ct": 2, "di": f"{no:032d}", **fields})


def plain(items: list[Any]) -> bytes:
    return orjson.dumps({"collections": items})


def post(
    ep: NppaEndpoint,
    client: httpx.Client,
    items: list[Any] | None = None,
    *,
    key: str = KEY,
    sign_key: str | None = None,
    app: str = APP,
    biz: str = BIZ,
    timestamps: str | None = None,
    body: bytes | None = None,
    query: Iterable[tuple[str, str]] = (),
    path: str = PATH,
    method: str = "POST",
    headers: dict[str, str] | None = None,
    drop: Iterable[str] = (),
) -> dict[str, Any]:
    """Send one request (signed over ``query`` too) and return its parsed answer."""
    ts = timestamps if timestamps is not None else str(round(ep.clock() * 1000))
    if body is None:
        body = seal(key, plain(items if items is not None else [item(1, ep.clock())]))
    query = list(query)
    sent = {
        "appId": app,
        "bizId": biz,
        "timestamps": ts,
        "Content-Type": JSON,
        "sign": sign(sign_key or key, app, biz, ts, body, query),
        **(headers or {}),
    }
    for name in drop:
        del sent[name]
    url = ep.url + path + ("?" + urlencode(query) if query else "")
    response = client.request(method, url, headers=sent, content=body)
    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("application/json")
    answer: dict[str, Any] = response.json()
    assert set(answer) == {"errcode", "errmsg", "data"}
    return answer


def code(
    ep: NppaEndpoint, client: httpx.Client, items: list[Any] | None = None, **kwargs: Any
) -> int:
    errcode: int = post(ep, client, items, **kwargs)["errcode"]
    return errcode


# What the `make` fixture (conftest.py) is: it starts an endpoint with these settings overridden.
MakeEndpoint = Callable[..., NppaEndpoint]
