"""Items the mock refuses one by one, the rest of the request accepted."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from reporter._demo.nppa_mock import NppaEndpoint, RequestLog
from tests.support.nppa_requests import (
    BIZ,
    S0,
    T0,
    FakeClock,
    MakeEndpoint,
    guest,
    item,
    post,
)

ITEM_CASES: list[tuple[str, dict[str, Any], int]] = [
    ("no 0", item(2, no=0), 3004),
    ("no 129", item(2, no=129), 3004),
    ("no string", item(2, no="2"), 3004),
    ("no bool", item(2, no=True), 3004),
    ("no missing", item(2, drop=["no"]), 3004),
    ("si missing", item(2, drop=["si"]), 3004),
    ("si empty", item(2, si=""), 3004),
    ("si 33 bytes", item(2, si="s" * 33), 3004),
    ("si 33 utf8 bytes", item(2, si="会" * 11), 3004),
    ("ot milliseconds", item(2, ot=S0 * 1000), 3005),
    ("ot 180 s old", item(2, ot=S0 - 180), 3005),
    ("ot future", item(2, ot=S0 + 1), 3005),
    ("ot float", item(2, ot=float(S0 - 10)), 3005),
    ("ot string", item(2, ot=str(S0 - 10)), 3005),
    ("ot missing", item(2, drop=["ot"]), 3005),
    ("ct 1", item(2, ct=1), 3006),
    ("ct missing", item(2, drop=["ct"]), 3006),
    ("ct string", item(2, ct="0"), 3006),
    ("bt 2", item(2, bt=2), 3007),
    ("bt missing", item(2, drop=["bt"]), 3007),
    ("bt bool", item(2, bt=True), 3007),
    ("pi missing", item(2, drop=["pi"], di="d" * 32), 3008),
    ("pi empty", item(2, pi=""), 3008),
    ("pi null", item(2, pi=None), 3008),
    ("di missing", guest(2, drop=["di"]), 3009),
    ("di empty", guest(2, di=""), 3009),
    ("di 33 chars", guest(2, di="d" * 33), 3009),
    ("pi 37 chars", item(2, pi="p" * 37), 3010),
    ("pi 39 chars", item(2, pi="p" * 39), 3010),
    ("pi number", item(2, pi=12345), 3010),
]


@pytest.mark.parametrize("partial", [0, 3001])
@pytest.mark.parametrize(("case", "bad", "errcode"), ITEM_CASES, ids=[c[0] for c in ITEM_CASES])
def test_item_error(
    make: MakeEndpoint,
    client: httpx.Client,
    partial: int,
    case: str,
    bad: dict[str, Any],
    errcode: int,
) -> None:
    ep = make(partial_errcode=partial)
    good = [item(1), guest(3)]
    answer = post(ep, client, [good[0], bad, good[1]])
    assert answer["errcode"] == partial
    assert answer["errmsg"] == ("ok" if partial == 0 else "partial failure")
    [result] = answer["data"]["results"]
    assert result["no"] == bad.get("no")
    assert result["errcode"] == errcode
    assert isinstance(result["errmsg"], str)
    assert [a.item for a in ep.accepted] == good
    key = bad["no"] if type(bad.get("no")) is int else -2
    assert ep.requests == [RequestLog(T0, BIZ, partial, 3, {key: errcode})]


def test_repeated_no_refuses_every_copy(ep: NppaEndpoint, client: httpx.Client) -> None:
    answer = post(ep, client, [item(1), item(2), guest(2), "not an item"])
    results = answer["data"]["results"]
    assert [(r["no"], r["errcode"]) for r in results] == [(2, 3004), (2, 3004), (None, 3004)]
    assert [a.item for a in ep.accepted] == [item(1)]
    assert ep.requests[-1].refused == {2: 3004, -4: 3004}


def test_ot_window_is_relative_to_timestamps(make: MakeEndpoint, client: httpx.Client) -> None:
    ep = make(clock=FakeClock(T0 + 4))  # the server's clock does not matter, timestamps does
    answer = post(
        ep, client, [item(1, ot=S0), item(2, ot=S0 + 1)], timestamps=str(round(T0 * 1000))
    )
    assert answer["data"]["results"] == [{"no": 2, "errcode": 3005, "errmsg": "bad behaviour time"}]


def test_ot_exactly_180_seconds_old_is_refused(make: MakeEndpoint, client: httpx.Client) -> None:
    ep = make(clock=FakeClock(float(S0)))
    items = [item(1, ot=S0 - 180), item(2, ot=S0 - 179), item(3, ot=S0)]
    answer = post(ep, client, items, timestamps=str(S0 * 1000))
    assert [(r["no"], r["errcode"]) for r in answer["data"]["results"]] == [(1, 3005)]
    assert [a.item["no"] for a in ep.accepted] == [2, 3]
