"""The mock's rate limit: requests in a sliding second per app id (or game), then a throttle."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx

from tests.support.nppa_requests import (
    BIZ,
    KEY2,
    OTHER_BIZ,
    T0,
    FakeClock,
    MakeEndpoint,
    code,
    post,
)


def test_eleventh_request_in_a_second_is_throttled(
    make: MakeEndpoint, client: httpx.Client
) -> None:
    clock = FakeClock()
    ep = make(clock=clock, throttle_seconds=60.0)
    assert [code(ep, client) for _ in range(10)] == [0] * 10
    assert post(ep, client) == {"errcode": 1006, "errmsg": "rate limit exceeded", "data": ""}
    clock.now = T0 + 59.9  # the window is empty, the throttle is not over
    assert code(ep, client) == 1006  # and this one extends it to T0 + 119.9
    clock.now = T0 + 119.8
    assert code(ep, client) == 1006
    clock.now = T0 + 179.9
    assert [code(ep, client) for _ in range(10)] == [0] * 10
    assert len(ep.accepted) == 20
    assert [r.errcode for r in ep.requests] == [0] * 10 + [1006] * 3 + [0] * 10


def test_throttle_ends_after_throttle_seconds(make: MakeEndpoint, client: httpx.Client) -> None:
    clock = FakeClock()
    ep = make(clock=clock, throttle_seconds=2.0)
    assert [code(ep, client) for _ in range(11)] == [0] * 10 + [1006]
    clock.now = T0 + 1.99
    assert code(ep, client) == 1006
    clock.now = T0 + 1.99 + 2.01
    assert code(ep, client) == 0


def test_window_slides(make: MakeEndpoint, client: httpx.Client) -> None:
    clock = FakeClock()
    ep = make(clock=clock)
    assert [code(ep, client) for _ in range(5)] == [0] * 5
    clock.now = T0 + 0.5
    assert [code(ep, client) for _ in range(5)] == [0] * 5
    clock.now = T0 + 1.0  # the first five are a full second old
    assert [code(ep, client) for _ in range(6)] == [0] * 5 + [1006]


def test_only_requests_passing_the_header_checks_count(
    make: MakeEndpoint, client: httpx.Client
) -> None:
    clock = FakeClock()
    ep = make(clock=clock)
    assert [code(ep, client, sign_key=KEY2) for _ in range(20)] == [1011] * 20
    assert [code(ep, client, app="x") for _ in range(20)] == [1008] * 20
    assert [code(ep, client, body=b"{}") for _ in range(9)] == [1012] * 9  # these count
    assert [code(ep, client) for _ in range(2)] == [0, 1006]


def test_rate_limit_is_per_app_across_games(make: MakeEndpoint, client: httpx.Client) -> None:
    ep = make(biz_ids=[BIZ, OTHER_BIZ])
    assert [code(ep, client, biz=BIZ) for _ in range(5)] == [0] * 5
    assert [code(ep, client, biz=OTHER_BIZ) for _ in range(5)] == [0] * 5
    assert code(ep, client, biz=OTHER_BIZ) == 1006
    assert {a.biz_id for a in ep.accepted} == {BIZ, OTHER_BIZ}


def test_rate_limit_holds_under_concurrent_requests(
    make: MakeEndpoint, client: httpx.Client
) -> None:
    ep = make()
    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(lambda _: code(ep, client), range(30)))
    assert sorted(answers) == [0] * 10 + [1006] * 20
    assert len(ep.accepted) == 10
    assert len(ep.requests) == 30


def test_busiest_second_counts_every_request_in_a_sliding_second(
    make: MakeEndpoint, client: httpx.Client
) -> None:
    clock = FakeClock()
    ep = make(clock=clock, biz_ids=[BIZ, OTHER_BIZ])
    assert ep.busiest_second == 0
    assert [code(ep, client) for _ in range(4)] == [0] * 4
    clock.now = T0 + 0.6
    assert code(ep, client, sign_key=KEY2) == 1011  # refused, still sent: it counts
    assert [code(ep, client, biz=OTHER_BIZ) for _ in range(3)] == [0] * 3
    clock.now = T0 + 1.0  # the first four have left the window
    assert code(ep, client) == 0
    assert ep.busiest_second == 8
    assert (ep.busiest_second_of(BIZ), ep.busiest_second_of(OTHER_BIZ)) == (5, 3)
    clock.now = T0 + 1.5
    assert [code(ep, client) for _ in range(9)] == [0] * 6 + [1006] * 3
    assert ep.busiest_second == 14  # 1.0 .. 1.5: the 1006 answers count as sent
    assert ep.busiest_second_of("unknown") == 0


def test_game_scope_limits_each_biz_id_on_its_own(make: MakeEndpoint, client: httpx.Client) -> None:
    ep = make(biz_ids=[BIZ, OTHER_BIZ], rate_scope="game", requests_per_second=3.0)
    assert [code(ep, client, biz=BIZ) for _ in range(4)] == [0, 0, 0, 1006]
    assert [code(ep, client, biz=OTHER_BIZ) for _ in range(3)] == [0, 0, 0]
    assert code(ep, client, biz=BIZ) == 1006  # its throttle goes on


def test_requests_per_second_is_a_setting(make: MakeEndpoint, client: httpx.Client) -> None:
    ep = make(requests_per_second=2.0)
    assert [code(ep, client) for _ in range(3)] == [0, 0, 1006]
