"""The HTTP ingest's config for the tests (any free loopback port, one token) and requests to
it, made the way a producer in another language makes them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from reporter._config import ReporterConfig
from reporter._ingest.service import IngestService
from tests.support.scenarios import make_config

TOKEN = "ingest-test-token-0123456789abcdef"
StartIngest = Callable[..., IngestService]


def ingest_config(
    redis_url: str, token_file: str = "", **sections: dict[str, Any]
) -> ReporterConfig:
    """The scenarios' fast settings (``FAST``), with the ingest on any free loopback port."""
    ingest = {"listen": "127.0.0.1:0", "token_file": token_file, **sections.pop("ingest", {})}
    return make_config(redis_url, ingest=ingest, **sections)


NDJSON = "application/x-ndjson"


def headers(token: str | None = TOKEN, content_type: str = "application/json") -> dict[str, str]:
    out = {"Content-Type": content_type}
    if token is not None:
        out["Authorization"] = f"Bearer {token}"
    return out


def as_array(events: list[Any]) -> bytes:
    return orjson.dumps(events)


def as_ndjson(events: list[Any]) -> bytes:
    return b"".join(orjson.dumps(e) + b"\n" for e in events)
