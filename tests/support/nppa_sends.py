"""The nppa sender driven by hand, against ``httpx.MockTransport``: its config, a handler
that keeps each request and opens it by an independent reading of the interface description
(not the sender's code), and events as the SDK's ``collector.nppa`` makes them."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

import httpx
import orjson
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from reporter._config import ReporterConfig
from reporter._sinks.nppa.sender import NppaSender
from tests.support.entries import make_config

SECRET = "00112233445566778899aabbccddeeff"
APP_ID = "app-1"
PI = "1" * 38
NOW = 1_732_241_234.5


def independent_open(secret: str, wire: bytes) -> bytes:
    """The spec, read again: base64 of nonce (12) || ciphertext || tag (16), AES-128-GCM."""
    raw = base64.b64decode(json.loads(wire)["data"])
    nonce, rest = raw[:12], raw[12:]
    return AESGCM(bytes.fromhex(secret)).decrypt(nonce, rest, None)


def independent_seal(secret: str, plain: bytes, nonce: bytes) -> bytes:
    sealed = AESGCM(bytes.fromhex(secret)).encrypt(nonce, plain, None)
    return json.dumps({"data": base64.b64encode(nonce + sealed).decode()}).encode()


def config(**nppa: Any) -> ReporterConfig:
    return make_config(
        "redis://127.0.0.1:1/0",
        sink={"kind": "nppa"},
        nppa={"app_id": APP_ID, "secret_key": SECRET, "base_url": "http://nppa.test", **nppa},
        games={"g1": {"biz_id": "biz-1"}},
    )


class Captured:
    """An httpx.MockTransport handler: keeps every request, answers with ``reply``."""

    def __init__(
        self, reply: Callable[[dict[str, Any]], dict[str, Any]] | None = None, status: int = 200
    ) -> None:
        self.requests: list[httpx.Request] = []
        self.reply = reply or (lambda plain: {"errcode": 0, "errmsg": "ok", "data": ""})
        self.status = status

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        plain = json.loads(independent_open(SECRET, request.content))
        return httpx.Response(self.status, content=orjson.dumps(self.reply(plain)))


def sender(captured: Captured, clock: float = NOW, **nppa: Any) -> NppaSender:
    c = config(**nppa)
    return NppaSender(c, httpx.MockTransport(captured), lambda: clock)


def event(i: int, ot: int = int(NOW) - 5, **fields: Any) -> bytes:
    return orjson.dumps({"si": f"s{i}", "bt": i % 2, "ot": ot, "ct": 0, "pi": PI, **fields})
