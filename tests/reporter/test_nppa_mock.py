"""The anti-addiction interface mock answers as the protocol says, over real HTTP on 127.0.0.1.

The requests are built here, by a small builder of this file's own (not the sender's), so the
mock is checked against the protocol and not against code it will be used to test.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlencode, urlsplit

import httpx
import orjson
import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from reporter._demo.nppa_mock import PATH, Accepted, NppaEndpoint, RequestLog, decrypt, signature

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
EX_BODY = (b'{"data":"CqT/33f3jyoiYqT8MtxEFk3x2rlfhmgzhxpHqWosSj4d3hq2EbrtVyx2aLj565ZQNTcPrcDipnv'
           b'pq/D/vQDaLKW70O83Q42zvR0//OfnYLcIjTPMnqa+SOhsjQrSdu66ySSORCAo"}')
EX_SIGN = "386c03b776a28c06b8032a958fbd89337424ef45c62d0422706cca633d8ad5fd"
EX_PLAIN = '{"ai":"test-accountId","name":"用户姓名","idNum":"371321199012310912"}'


class FakeClock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


# --- the test's own request builder -------------------------------------------------------

def seal(key: str, plain: bytes) -> bytes:
    nonce = os.urandom(12)
    sealed = nonce + AESGCM(bytes.fromhex(key)).encrypt(nonce, plain, None)
    return orjson.dumps({"data": base64.b64encode(sealed).decode()})


def sign(key: str, app: str, biz: str, ts: str, body: bytes,
         query: Iterable[tuple[str, str]] = ()) -> str:
    pairs = sorted([("appId", app), ("bizId", biz), ("timestamps", ts), *query])
    text = key + "".join(name + value for name, value in pairs)
    return hashlib.sha256(text.encode() + body).hexdigest()


def item(no: int, now: float = T0, /, *, drop: Iterable[str] = (),
         **fields: Any) -> dict[str, Any]:
    made = {"no": no, "si": f"{no:032x}", "bt": 1, "ot": int(now) - 10, "ct": 0,
            "pi": "1" + "a" * 37, **fields}
    for name in drop:
        del made[name]
    return made


def guest(no: int, now: float = T0, /, *, drop: Iterable[str] = (),
          **fields: Any) -> dict[str, Any]:
    return item(no, now, drop=("pi", *drop), **{"ct": 2, "di": f"{no:032d}", **fields})


def plain(items: list[Any]) -> bytes:
    return orjson.dumps({"collections": items})


def post(ep: NppaEndpoint, client: httpx.Client, items: list[Any] | None = None, *,
         key: str = KEY, sign_key: str | None = None, app: str = APP, biz: str = BIZ,
         timestamps: str | None = None, body: bytes | None = None,
         query: Iterable[tuple[str, str]] = (), path: str = PATH, method: str = "POST",
         headers: dict[str, str] | None = None, drop: Iterable[str] = ()) -> dict[str, Any]:
    """Send one request (signed over ``query`` too) and return its parsed answer."""
    ts = timestamps if timestamps is not None else str(round(ep.clock() * 1000))
    if body is None:
        body = seal(key, plain(items if items is not None else [item(1, ep.clock())]))
    query = list(query)
    sent = {"appId": app, "bizId": biz, "timestamps": ts, "Content-Type": JSON,
            "sign": sign(sign_key or key, app, biz, ts, body, query), **(headers or {})}
    for name in drop:
        del sent[name]
    url = ep.url + path + ("?" + urlencode(query) if query else "")
    response = client.request(method, url, headers=sent, content=body)
    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("application/json")
    answer: dict[str, Any] = response.json()
    assert set(answer) == {"errcode", "errmsg", "data"}
    return answer


def code(ep: NppaEndpoint, client: httpx.Client, items: list[Any] | None = None,
         **kwargs: Any) -> int:
    errcode: int = post(ep, client, items, **kwargs)["errcode"]
    return errcode


# --- fixtures -------------------------------------------------------------------------------

MakeEndpoint = Callable[..., NppaEndpoint]


@pytest.fixture
def make() -> Iterator[MakeEndpoint]:
    made: list[NppaEndpoint] = []

    def make_(**kwargs: Any) -> NppaEndpoint:
        settings: dict[str, Any] = {"app_id": APP, "secret_key": KEY, "biz_ids": [BIZ],
                                    "clock": FakeClock(), **kwargs}
        made.append(NppaEndpoint(**settings).start())
        return made[-1]

    yield make_
    for ep in made:
        ep.stop()


@pytest.fixture
def ep(make: MakeEndpoint) -> NppaEndpoint:
    return make()


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=5, trust_env=False) as c:
        yield c


# --- the worked example ---------------------------------------------------------------------

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


def test_worked_example_passes_the_sign_check_over_http(make: MakeEndpoint,
                                                         client: httpx.Client) -> None:
    ep = make(app_id="test-appId", secret_key=EX_KEY, biz_ids=["test-bizId"],
              clock=FakeClock(1584949895.758))
    url = f"{ep.url}{PATH}?id=test-id&name=test-name"
    headers = {**EX_HEADERS, "sign": EX_SIGN, "Content-Type": JSON}
    # Signed and sealed right, but the plaintext has no collections: a body error, not 1011.
    assert client.post(url, headers=headers, content=EX_BODY).json()["errcode"] == 1012
    tampered = url.replace("test-name", "other")
    assert client.post(tampered, headers=headers, content=EX_BODY).json()["errcode"] == 1011


# --- success --------------------------------------------------------------------------------

def test_valid_request_is_accepted(ep: NppaEndpoint, client: httpx.Client) -> None:
    assert ep.url.startswith("http://127.0.0.1:")
    items = [item(1), guest(2), item(3, bt=0)]
    answer = post(ep, client, items)
    assert answer == {"errcode": 0, "errmsg": "ok", "data": ""}
    ms = round(T0 * 1000)
    with ep.lock:
        assert ep.accepted == [Accepted(BIZ, i, T0, ms) for i in items]
        assert ep.requests == [RequestLog(T0, BIZ, 0, 3, {})]


def test_boundaries_of_ot_and_128_items_are_accepted(ep: NppaEndpoint,
                                                     client: httpx.Client) -> None:
    items = [item(n, ot=S0 - 179 if n % 2 else S0) for n in range(1, 129)]
    assert post(ep, client, items) == {"errcode": 0, "errmsg": "ok", "data": ""}
    assert len(ep.accepted) == 128


@pytest.mark.parametrize("offset", [-4.0, 4.0])
def test_server_clock_ahead_or_behind_within_skew(make: MakeEndpoint, client: httpx.Client,
                                                  offset: float) -> None:
    ep = make(clock=FakeClock(T0 + offset))
    assert code(ep, client, timestamps=str(round(T0 * 1000))) == 0


# --- system errors --------------------------------------------------------------------------

@pytest.mark.parametrize(("method", "path"), [
    ("GET", PATH), ("PUT", PATH), ("DELETE", PATH), ("GET", "/other"),
])
def test_wrong_method_1003(ep: NppaEndpoint, client: httpx.Client, method: str,
                           path: str) -> None:
    assert post(ep, client, method=method, path=path) == {
        "errcode": 1003, "errmsg": "method not allowed", "data": ""}
    assert ep.accepted == []
    assert ep.requests == [RequestLog(T0, BIZ, 1003, 0, {})]


@pytest.mark.parametrize("path", ["/", "/behavior/collection/loginout/x", "/collection/loginout"])
def test_wrong_path_1002(ep: NppaEndpoint, client: httpx.Client, path: str) -> None:
    assert code(ep, client, path=path) == 1002


@pytest.mark.parametrize("name", ["appId", "bizId", "timestamps", "sign"])
def test_missing_header_1004(ep: NppaEndpoint, client: httpx.Client, name: str) -> None:
    assert code(ep, client, drop=[name]) == 1004
    assert code(ep, client, headers={name: ""}) == 1004


def test_header_names_are_case_insensitive(ep: NppaEndpoint, client: httpx.Client) -> None:
    ts = str(round(T0 * 1000))
    body = seal(KEY, plain([item(1)]))
    headers = {"APPID": APP, "bizid": BIZ, "TimeStamps": ts, "SIGN": sign(KEY, APP, BIZ, ts, body)}
    answer = client.post(ep.url + PATH, headers=headers, content=body).json()
    assert answer["errcode"] == 0


def test_wrong_app_id_1008(ep: NppaEndpoint, client: httpx.Client) -> None:
    assert code(ep, client, app="other-app") == 1008


def test_unknown_biz_id_1010(ep: NppaEndpoint, client: httpx.Client) -> None:
    assert code(ep, client, biz=OTHER_BIZ) == 1010
    assert code(ep, client, biz=KEY) == 1010  # the secret in bizId, a mistake seen in clients


@pytest.mark.parametrize("timestamps", [
    str(S0), str(round(T0 * 1000) - 5001), str(round(T0 * 1000) + 5001), "abc", "-1",
    f"{T0 * 1000:.1f}", "1.7e12", str(round(T0 * 1_000_000)), "9" * 5000,
])
def test_bad_timestamps_1007(ep: NppaEndpoint, client: httpx.Client, timestamps: str) -> None:
    assert code(ep, client, timestamps=timestamps) == 1007


@pytest.mark.parametrize("offset", [-6.0, 6.0])
def test_server_clock_beyond_skew_1007(make: MakeEndpoint, client: httpx.Client,
                                       offset: float) -> None:
    ep = make(clock=FakeClock(T0 + offset))
    assert code(ep, client, timestamps=str(round(T0 * 1000))) == 1007


def test_skew_seconds_is_a_setting(make: MakeEndpoint, client: httpx.Client) -> None:
    ep = make(skew_seconds=1.0, clock=FakeClock(T0 + 2))
    assert code(ep, client, timestamps=str(round(T0 * 1000))) == 1007


def _bad_signs() -> list[tuple[str, Callable[[bytes, str], str]]]:
    return [
        ("wrong key", lambda body, ts: sign(KEY2, APP, BIZ, ts, body)),
        ("plain body", lambda body, ts: sign(KEY, APP, BIZ, ts, plain([item(1)]))),
        ("upper hex", lambda body, ts: sign(KEY, APP, BIZ, ts, body).upper()),
        ("other ms", lambda body, ts: sign(KEY, APP, BIZ, str(int(ts) - 1), body)),
        ("no secret", lambda body, ts: hashlib.sha256(
            f"appId{APP}bizId{BIZ}timestamps{ts}".encode() + body).hexdigest()),
        ("unsorted", lambda body, ts: hashlib.sha256(
            f"{KEY}timestamps{ts}bizId{BIZ}appId{APP}".encode() + body).hexdigest()),
    ]


@pytest.mark.parametrize(("case", "make_sign"), _bad_signs(), ids=[c for c, _ in _bad_signs()])
def test_bad_sign_1011(ep: NppaEndpoint, client: httpx.Client, case: str,
                       make_sign: Callable[[bytes, str], str]) -> None:
    body = seal(KEY, plain([item(1)]))
    ts = str(round(T0 * 1000))
    assert code(ep, client, body=body, timestamps=ts, headers={"sign": make_sign(body, ts)}) == 1011


def test_query_parameters_are_signed(ep: NppaEndpoint, client: httpx.Client) -> None:
    assert code(ep, client, query=[("id", "x"), ("name", "y")]) == 0
    body = seal(KEY, plain([item(1)]))
    ts = str(round(T0 * 1000))
    unsigned_query = {"sign": sign(KEY, APP, BIZ, ts, body)}
    answer = post(ep, client, body=body, timestamps=ts, query=[("id", "x")],
                  headers=unsigned_query)
    assert answer["errcode"] == 1011


def _sealed_raw(data: bytes) -> bytes:
    return orjson.dumps({"data": base64.b64encode(data).decode()})


def _tampered() -> bytes:
    wire = orjson.loads(seal(KEY, plain([item(1)])))
    raw = bytearray(base64.b64decode(wire["data"]))
    raw[-1] ^= 1
    return _sealed_raw(bytes(raw))


@pytest.mark.parametrize(("case", "body"), [
    ("empty", b""),
    ("not json", b"{data"),
    ("plain body", plain([item(1)])),
    ("not an object", b'["x"]'),
    ("data not a string", b'{"data": 5}'),
    ("bad base64", b'{"data":"!!!not base64"}'),
    ("too short", _sealed_raw(b"\0" * 20)),
    ("tag tampered", _tampered()),
    ("other key", seal(KEY2, plain([item(1)]))),
    ("plaintext not json", seal(KEY, b"collections")),
    ("plaintext a list", seal(KEY, b"[]")),
    ("no collections", seal(KEY, b'{"items": []}')),
    ("collections not a list", seal(KEY, b'{"collections": {"no": 1}}')),
], ids=lambda v: v if isinstance(v, str) else "")
def test_bad_body_1012(ep: NppaEndpoint, client: httpx.Client, case: str, body: bytes) -> None:
    assert post(ep, client, body=body) == {"errcode": 1012, "errmsg": "body check failed",
                                           "data": ""}
    assert ep.accepted == []


def test_empty_collections_3002(ep: NppaEndpoint, client: httpx.Client) -> None:
    assert code(ep, client, []) == 3002


def test_over_128_items_3003(ep: NppaEndpoint, client: httpx.Client) -> None:
    assert code(ep, client, [item(n % 128 + 1) for n in range(129)]) == 3003
    assert ep.accepted == []


# --- item errors ----------------------------------------------------------------------------

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
def test_item_error(make: MakeEndpoint, client: httpx.Client, partial: int, case: str,
                    bad: dict[str, Any], errcode: int) -> None:
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
    answer = post(ep, client, [item(1, ot=S0), item(2, ot=S0 + 1)],
                  timestamps=str(round(T0 * 1000)))
    assert answer["data"]["results"] == [{"no": 2, "errcode": 3005, "errmsg": "bad behaviour time"}]


def test_ot_exactly_180_seconds_old_is_refused(make: MakeEndpoint, client: httpx.Client) -> None:
    ep = make(clock=FakeClock(float(S0)))
    items = [item(1, ot=S0 - 180), item(2, ot=S0 - 179), item(3, ot=S0)]
    answer = post(ep, client, items, timestamps=str(S0 * 1000))
    assert [(r["no"], r["errcode"]) for r in answer["data"]["results"]] == [(1, 3005)]
    assert [a.item["no"] for a in ep.accepted] == [2, 3]


# --- rate limit -----------------------------------------------------------------------------

def test_eleventh_request_in_a_second_is_throttled(make: MakeEndpoint,
                                                   client: httpx.Client) -> None:
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


def test_only_requests_passing_the_header_checks_count(make: MakeEndpoint,
                                                       client: httpx.Client) -> None:
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


def test_rate_limit_holds_under_concurrent_requests(make: MakeEndpoint,
                                                     client: httpx.Client) -> None:
    ep = make()
    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(lambda _: code(ep, client), range(30)))
    assert sorted(answers) == [0] * 10 + [1006] * 20
    assert len(ep.accepted) == 10
    assert len(ep.requests) == 30


def test_busiest_second_counts_every_request_in_a_sliding_second(make: MakeEndpoint,
                                                                  client: httpx.Client) -> None:
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


def test_game_scope_limits_each_biz_id_on_its_own(make: MakeEndpoint,
                                                  client: httpx.Client) -> None:
    ep = make(biz_ids=[BIZ, OTHER_BIZ], rate_scope="game", requests_per_second=3.0)
    assert [code(ep, client, biz=BIZ) for _ in range(4)] == [0, 0, 0, 1006]
    assert [code(ep, client, biz=OTHER_BIZ) for _ in range(3)] == [0, 0, 0]
    assert code(ep, client, biz=BIZ) == 1006  # its throttle goes on


def test_requests_per_second_is_a_setting(make: MakeEndpoint, client: httpx.Client) -> None:
    ep = make(requests_per_second=2.0)
    assert [code(ep, client) for _ in range(3)] == [0, 0, 1006]


# --- scripting and keys ---------------------------------------------------------------------

def test_force_answers_before_any_check(make: MakeEndpoint, client: httpx.Client) -> None:
    calls: list[int] = []

    def force(n: int) -> int | None:
        calls.append(n)
        return {1: 1001, 3: 4001, 5: 1011}.get(n)

    ep = make(force=force)
    answers = [code(ep, client, [item(n)]) for n in range(1, 5)]
    answers.append(code(ep, client, method="GET"))  # forced even before the method check
    assert answers == [1001, 0, 4001, 0, 1011]
    assert calls == [1, 2, 3, 4, 5]
    assert [a.item["no"] for a in ep.accepted] == [2, 4]
    assert [r.errcode for r in ep.requests] == answers


def test_forced_answers_do_not_count_toward_the_rate(make: MakeEndpoint,
                                                     client: httpx.Client) -> None:
    ep = make(force=lambda n: 1001 if n <= 20 else None)
    assert [code(ep, client) for _ in range(20)] == [1001] * 20
    assert code(ep, client) == 0


def test_set_secret_rotates_the_key(ep: NppaEndpoint, client: httpx.Client) -> None:
    assert code(ep, client) == 0
    ep.set_secret(KEY2)
    assert code(ep, client, key=KEY) == 1011
    assert code(ep, client, key=KEY2) == 0
    # signed with the new key, sealed with the old one
    assert code(ep, client, body=seal(KEY, plain([item(1)])), sign_key=KEY2) == 1012
    assert [r.errcode for r in ep.requests] == [0, 1011, 0, 1012]


def test_both_keys_of_a_rotation_are_accepted(make: MakeEndpoint,
                                              client: httpx.Client) -> None:
    ep = make(more_keys=[KEY2])
    assert code(ep, client, key=KEY) == 0 and code(ep, client, key=KEY2) == 0
    # each body is opened with the key its sign matched
    assert code(ep, client, body=seal(KEY, plain([item(1)])), sign_key=KEY2) == 1012
    assert code(ep, client, [], key=KEY2) == 3002  # a key check: no item, nothing taken
    ep.set_secrets(KEY2)  # the old key expired
    assert code(ep, client, key=KEY) == 1011 and code(ep, client, key=KEY2) == 0
    with pytest.raises(ValueError):
        ep.set_secrets()
    assert len(ep.accepted) == 3


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError):
        NppaEndpoint(app_id=APP, secret_key=KEY, biz_ids=[BIZ], partial_errcode=1)
    with pytest.raises(ValueError):
        NppaEndpoint(app_id=APP, secret_key="not hex", biz_ids=[BIZ])
    with pytest.raises(ValueError):
        NppaEndpoint(app_id=APP, secret_key=KEY * 2, biz_ids=[BIZ])  # AES-256: not the protocol
    with pytest.raises(ValueError):
        NppaEndpoint(app_id=APP, secret_key=KEY, biz_ids=[BIZ], more_keys=["nope"])


# --- connections ----------------------------------------------------------------------------

def test_keep_alive_over_one_connection(ep: NppaEndpoint) -> None:
    port = urlsplit(ep.url).port
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        ts = str(round(T0 * 1000))
        body = seal(KEY, plain([item(1)]))
        headers = {"appId": APP, "bizId": BIZ, "timestamps": ts,
                   "sign": sign(KEY, APP, BIZ, ts, body), "Content-Type": JSON}
        sockets = []
        for method, path in [("POST", PATH), ("GET", PATH), ("POST", "/x"), ("POST", PATH)]:
            conn.request(method, path, body=body, headers=headers)
            response = conn.getresponse()
            assert response.status == 200
            assert int(response.headers["Content-Length"]) > 0
            answer = orjson.loads(response.read())
            assert answer["errcode"] in {0, 1002, 1003}
            assert not response.will_close
            sockets.append(conn.sock)
        assert len(set(map(id, sockets))) == 1
    finally:
        conn.close()
    assert [r.errcode for r in ep.requests] == [0, 1003, 1002, 0]


def test_stop_without_start() -> None:
    NppaEndpoint(app_id=APP, secret_key=KEY, biz_ids=[BIZ]).stop()
