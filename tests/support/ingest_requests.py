"""Requests to the ingest, made the way a producer in another language makes them."""

from __future__ import annotations

from typing import Any

import orjson

from tests.reporter.ingest.conftest import TOKEN

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
