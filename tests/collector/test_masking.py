"""``collector.logs.mask``: the one masking function every output uses."""

from __future__ import annotations

import pytest

from collector.config import mask_url as config_mask_url
from collector.logs import is_credential_name, mask, mask_headers, mask_url
from tests.support.markers import secret

S = secret("url")

MASKED = [
    (f"redis://user:{S}@cache:6379/0", "redis://user:***@cache:6379/0"),
    (f"redis://:{S}@cache:6379/0", "redis://:***@cache:6379/0"),
    (f"redis://:p@{S}@cache/0", "redis://:***@cache/0"),  # a raw "@" in the password
    (f"https://{S}@ingest.example/v1", "https://***@ingest.example/v1"),
    (f"redis://cache:6379/0?password={S}&db=1", "redis://cache:6379/0?password=***&db=1"),
    (f"https://h/i?api_key={S}#top", "https://h/i?api_key=***#top"),
    (f"https://h/i?a=1&access_token={S}", "https://h/i?a=1&access_token=***"),
    (f"https://h/cb#access_token={S}", "https://h/cb#access_token=***"),
    (f"https://h/i?X-Amz-Signature={S}&sig={S}", "https://h/i?X-Amz-Signature=***&sig=***"),
    (f"https://h/i?pwd={S};session={S}", "https://h/i?pwd=***;session=***"),
    (f"found ['Bearer {S}']", "found ['Bearer ***']"),
    (f"Authorization: Basic {S}", "Authorization: Basic ***"),
    (
        f"{{'X-Api-Credential': '{S}', 'X-Team': 'games'}}",
        "{'X-Api-Credential': '***', 'X-Team': 'games'}",
    ),
    (f"cannot reach http://u:{S}@h:80/x: refused", "cannot reach http://u:***@h:80/x: refused"),
    (f"http//u:{S}@host/x", "http//u:***@host/x"),
]


@pytest.mark.parametrize(("text", "shown"), MASKED, ids=[m[1] for m in MASKED])
def test_mask_hides_every_credential_form(text: str, shown: str) -> None:
    assert mask(text) == shown
    assert S not in mask_url(text)


@pytest.mark.parametrize(
    "text",
    [
        "redis://cache:6379/0",
        "https://ingest.example/v1/events?game=a&design=b",
        "",
        "a@b and x=y",
        "http://127.0.0.1:8080/ingest",
        "unix:///run/redis.sock?db=2",
        "event of game 'g@h' dropped: 40000 bytes",
    ],
)
def test_mask_leaves_the_rest_alone(text: str) -> None:
    assert mask(text) == text


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (f"user:{S}@host:80/x", "user:***@host:80/x"),
        (f"{S}@host/x", "***@host/x"),
        (f"host/x?key={S}", "host/x?key=***"),
    ],
)
def test_mask_url_handles_urls_without_a_scheme(url: str, shown: str) -> None:
    assert mask_url(url) == shown
    assert config_mask_url(url) == shown  # the config's name for it is the same function


@pytest.mark.parametrize(
    "name",
    [
        "Authorization",
        "Proxy-Authorization",
        "Cookie",
        "Set-Cookie",
        "X-Api-Key",
        "x-api-key",
        "X-Api-Credential",
        "X-Auth-Token",
        "X-Signature",
        "X-Session-Id",
        "X-Client-Secret",
        "password",
        "pass",
        "pwd",
        "token",
        "access_token",
        "key",
        "api_key",
        "apikey",
        "secret",
        "signature",
        "sig",
        "auth",
        "credential",
        "session",
    ],
)
def test_credential_names(name: str) -> None:
    assert is_credential_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "X-Team",
        "Content-Type",
        "db",
        "design",
        "ssl_cert_reqs",
        "socket_keepalive",
        "game",
        "User-Agent",
    ],
)
def test_other_names(name: str) -> None:
    assert not is_credential_name(name)


def test_mask_headers() -> None:
    headers = {
        "Authorization": f"Bearer {S}",
        "X-Api-Credential": S,
        "Cookie": f"sid={S}",
        "X-Team": "games",
        "X-Note": f"see https://u:{S}@h/",
    }
    assert mask_headers(headers) == {
        "Authorization": "***",
        "X-Api-Credential": "***",
        "Cookie": "***",
        "X-Team": "games",
        "X-Note": "see https://u:***@h/",
    }
