"""The worked example of the interface description: its sign, its body, its check over HTTP."""

from __future__ import annotations

import httpx
import pytest

from reporter._demo.nppa_mock import PATH, decrypt, signature
from tests.support.nppa_requests import (
    EX_BODY,
    EX_HEADERS,
    EX_KEY,
    EX_PLAIN,
    EX_QUERY,
    EX_SIGN,
    JSON,
    KEY,
    FakeClock,
    MakeEndpoint,
    sign,
)


def test_worked_example_sign() -> None:
    assert signature(EX_KEY, EX_HEADERS, EX_QUERY, EX_BODY) == EX_SIGN
    assert sign(EX_KEY, *EX_HEADERS.values(), EX_BODY, EX_QUERY) == EX_SIGN  # the builder too
    # sign and Content-Type are not signed
    with_extra = {**EX_HEADERS, "sign": "x", "Content-Type": JSON}
    assert signature(EX_KEY, with_extra, EX_QUERY, EX_BODY) == EX_SIGN


def test_worked_example_decrypts() -> None:
    assert decrypt(EX_KEY, EX_BODY).decode() == EX_PLAIN
    with pytest.raises(ValueError):
        decrypt(KEY, EX_BODY)


def test_worked_example_passes_the_sign_check_over_http(
    make: MakeEndpoint, client: httpx.Client
) -> None:
    ep = make(
        app_id="test-appId",
        secret_key=EX_KEY,
        biz_ids=["test-bizId"],
        clock=FakeClock(1584949895.758),
    )
    url = f"{ep.url}{PATH}?id=test-id&name=test-name"
    headers = {**EX_HEADERS, "sign": EX_SIGN, "Content-Type": JSON}
    # Signed and sealed right, but the plaintext has no collections: a body error, not 1011.
    assert client.post(url, headers=headers, content=EX_BODY).json()["errcode"] == 1012
    tampered = url.replace("test-name", "other")
    assert client.post(tampered, headers=headers, content=EX_BODY).json()["errcode"] == 1011
