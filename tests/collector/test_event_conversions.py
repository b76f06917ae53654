"""What ``collect()`` makes of values that are not JSON types: the conversions orjson applies,
as docs/sdk.md's "What an event may hold" table documents them, checked on the stored entry."""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import math
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import redis

from collector.store import KeySchema
from tests.support.fixtures import MakeCollector
from tests.support.stored import queue_entries, queue_events

SCHEMA = KeySchema("conv", 4)
SDK_DOC = Path(__file__).resolve().parents[2] / "docs" / "sdk.md"


class Colour(enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


@dataclasses.dataclass
class Point:
    x: int
    at: dt.date


CONVERTED: list[tuple[str, Any, Any]] = [
    (
        "aware datetime",
        dt.datetime(2024, 5, 1, 12, 30, 15, 250_000, tzinfo=dt.UTC),
        "2024-05-01T12:30:15.250000+00:00",
    ),
    (
        "offset datetime",
        dt.datetime(2024, 5, 1, 20, 30, tzinfo=dt.timezone(dt.timedelta(hours=8))),
        "2024-05-01T20:30:00+08:00",
    ),
    ("naive datetime", dt.datetime(2024, 5, 1, 12, 30, 15), "2024-05-01T12:30:15"),
    ("date", dt.date(2024, 5, 1), "2024-05-01"),
    ("time", dt.time(12, 30), "12:30:00"),
    (
        "UUID",
        uuid.UUID("12345678-1234-5678-1234-567812345678"),
        "12345678-1234-5678-1234-567812345678",
    ),
    ("NaN", math.nan, None),
    ("Infinity", math.inf, None),
    ("-Infinity", -math.inf, None),
    ("enum", Colour.RED, "red"),
    ("int enum", Level.HIGH, 3),
    ("dataclass", Point(1, dt.date(2024, 1, 2)), {"x": 1, "at": "2024-01-02"}),
    ("tuple", (1, "a"), [1, "a"]),
    ("str subclass", type("Name", (str,), {})("n"), "n"),
]

REFUSED: list[tuple[str, Any]] = [
    ("bytes", b"raw"),
    ("set", {1, 2}),
    ("Decimal", Decimal("1.5")),
    ("timedelta", dt.timedelta(seconds=5)),
    ("int over 64 bits", 2**64),
    ("non-str key", {1: "a"}),
    ("object", object()),
]


@pytest.mark.parametrize(("name", "value", "stored"), CONVERTED, ids=[c[0] for c in CONVERTED])
def test_conversions_applied_to_events(
    make_collector: MakeCollector,
    redis_url: str,
    r: redis.Redis,
    name: str,
    value: Any,
    stored: Any,
) -> None:
    c = make_collector(url=redis_url, mode="sync", key_prefix="conv", shards=4)
    c.collect("g", {"v": value})
    assert queue_events(r, SCHEMA, "g") == [{"v": stored}]


def test_nan_is_stored_as_null_not_as_invalid_json(
    make_collector: MakeCollector, redis_url: str, r: redis.Redis
) -> None:
    c = make_collector(url=redis_url, mode="sync", key_prefix="conv", shards=4)
    c.collect("g", {"a": math.nan, "b": [math.inf]})
    assert queue_entries(r, SCHEMA, "g")[0].endswith(b'{"a":null,"b":[null]}')


@pytest.mark.parametrize(("name", "value"), REFUSED, ids=[c[0] for c in REFUSED])
def test_values_orjson_cannot_encode_are_a_type_error(
    make_collector: MakeCollector, name: str, value: Any
) -> None:
    c = make_collector(url="redis://127.0.0.1:1/0")
    with pytest.raises(TypeError, match="not JSON-serialisable"):
        c.collect("g", {"v": value})
    assert c.stats()["accepted"] == 0


def test_numpy_values_are_refused_unless_converted(make_collector: MakeCollector) -> None:
    numpy = pytest.importorskip("numpy")
    c = make_collector(url="redis://127.0.0.1:1/0")
    with pytest.raises(TypeError, match="not JSON-serialisable"):
        c.collect("g", {"v": numpy.array([1, 2])})


def test_the_sdk_doc_lists_each_conversion() -> None:
    text = SDK_DOC.read_text(encoding="utf-8")
    section = text[text.index("## What an event may hold") :]
    section = section[: section.index("\n## ")]
    for name in (
        "datetime",
        "date",
        "time",
        "UUID",
        "NaN",
        "Infinity",
        "enum",
        "dataclass",
        "tuple",
        "bytes",
        "set",
        "Decimal",
        "timedelta",
        "64",
        "numpy",
    ):
        assert name in section, name
