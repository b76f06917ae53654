"""Requests the mock accepts: valid items, the boundaries, clocks within the skew."""

from __future__ import annotations

import httpx
import pytest

from reporter._demo.nppa_mock import Accepted, NppaEndpoint, RequestLog
from tests.support.nppa_requests import (
    BIZ,
    S0,
    T0,
    FakeClock,
    MakeEndpoint,
    code,
    guest,
    item,
    post,
)


def test_valid_request_is_accepted(ep: NppaEndpoint, client: httpx.Client) -> None:
    assert ep.url.startswith("http://127.0.0.1:")
    items = [item(1), guest(2), item(3, bt=0)]
    answer = post(ep, client, items)
    assert answer == {"errcode": 0, "errmsg": "ok", "data": ""}
    ms = round(T0 * 1000)
    with ep.lock:
        assert ep.accepted == [Accepted(BIZ, i, T0, ms) for i in items]
        assert ep.requests == [RequestLog(T0, BIZ, 0, 3, {})]


def test_boundaries_of_ot_and_128_items_are_accepted(
    ep: NppaEndpoint, client: httpx.Client
) -> None:
    items = [item(n, ot=S0 - 179 if n % 2 else S0) for n in range(1, 129)]
    assert post(ep, client, items) == {"errcode": 0, "errmsg": "ok", "data": ""}
    assert len(ep.accepted) == 128


@pytest.mark.parametrize("offset", [-4.0, 4.0])
def test_server_clock_ahead_or_behind_within_skew(
    make: MakeEndpoint, client: httpx.Client, offset: float
) -> None:
    ep = make(clock=FakeClock(T0 + offset))
    assert code(ep, client, timestamps=str(round(T0 * 1000))) == 0
