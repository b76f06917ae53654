"""The nppa sender on its own: the worked example of the interface description as a
known-answer test, the request as the interface specifies it (checked by a decryption
written here from the spec, not the sender's), and every kind of answer mapped to an
Outcome."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import httpx
import orjson
import pytest

from reporter._senders.outcome import DELIVERED, REJECTED, RETRY
from reporter._sinks.nppa.sender import CHECK, NppaSender, classify, endpoint_url
from reporter._sinks.nppa.wire import seal, signature, unseal
from tests.support.nppa_sends import (
    APP_ID,
    NOW,
    PI,
    SECRET,
    Captured,
    config,
    event,
    independent_open,
    independent_seal,
    sender,
)

# The worked example of the interface description (shared/nppa.md).
EXAMPLE_SECRET = "2836e95fcd10e04b0069bb1ee659955b"
EXAMPLE_BODY = (
    b'{"data":"CqT/33f3jyoiYqT8MtxEFk3x2rlfhmgzhxpHqWosSj4d3hq2EbrtVyx2aLj565ZQNTc'
    b'PrcDipnvpq/D/vQDaLKW70O83Q42zvR0//OfnYLcIjTPMnqa+SOhsjQrSdu66ySSORCAo"}'
)
EXAMPLE_SIGN = "386c03b776a28c06b8032a958fbd89337424ef45c62d0422706cca633d8ad5fd"
EXAMPLE_PLAIN = {"ai": "test-accountId", "name": "用户姓名", "idNum": "371321199012310912"}


def test_the_worked_example_signs_and_opens() -> None:
    signed = {
        "appId": "test-appId",
        "bizId": "test-bizId",
        "timestamps": "1584949895758",
        "id": "test-id",
        "name": "test-name",
    }
    assert signature(EXAMPLE_SECRET, signed, EXAMPLE_BODY) == EXAMPLE_SIGN
    assert json.loads(unseal(EXAMPLE_SECRET, EXAMPLE_BODY)) == EXAMPLE_PLAIN


def test_sealing_both_ways_against_an_independent_reading_of_the_spec() -> None:
    plain = b'{"collections":[{"no":1}]}'
    wire = seal(SECRET, plain)
    assert independent_open(SECRET, wire) == plain
    assert unseal(SECRET, independent_seal(SECRET, plain, b"\x07" * 12)) == plain
    first, second = seal(SECRET, plain), seal(SECRET, plain)
    assert first != second  # a fresh nonce every time
    with pytest.raises(ValueError, match="not a body sealed with this key"):
        unseal("f" * 32, wire)


def test_the_request_is_what_the_interface_specifies() -> None:
    captured = Captured()
    outcome = sender(captured).send("g1", "b.0", [event(i) for i in range(3)])
    assert outcome.kind == DELIVERED and not outcome.partial
    [request] = captured.requests
    assert request.method == "POST"
    assert str(request.url) == "http://nppa.test/behavior/collection/loginout"
    h = request.headers
    assert (h["appId"], h["bizId"], h["timestamps"]) == (APP_ID, "biz-1", "1732241234500")
    assert h["Content-Type"] == "application/json;charset=utf-8"
    expected = hashlib.sha256(
        (SECRET + "appId" + APP_ID + "bizId" + "biz-1" + "timestamps" + "1732241234500").encode()
        + request.content
    ).hexdigest()
    assert h["sign"] == expected
    assert set(json.loads(request.content)) == {"data"}
    plain = json.loads(independent_open(SECRET, request.content))
    assert [item["no"] for item in plain["collections"]] == [1, 2, 3]
    assert plain["collections"][1] == {
        "no": 2,
        "si": "s1",
        "bt": 1,
        "ot": int(NOW) - 5,
        "ct": 0,
        "pi": PI,
    }


def test_the_test_systems_url_is_used_as_it_is() -> None:
    test_url = "https://wlc.nppa.gov.cn/test/collection/loginout/ABC123"
    assert endpoint_url(test_url) == test_url
    assert endpoint_url("http://api2.wlc.nppa.gov.cn/") == (
        "http://api2.wlc.nppa.gov.cn/behavior/collection/loginout"
    )


def test_items_that_break_a_rule_are_refused_alone_and_never_sent() -> None:
    captured = Captured()
    events = [event(0), event(1, ot=int(NOW) * 1000), event(2, pi="short"), b"not json", event(4)]
    outcome = sender(captured).send("g1", "b.0", events)
    assert outcome.kind == DELIVERED
    assert [i for i, _ in outcome.refused] == [1, 2, 3]
    assert "milliseconds" in outcome.refused[0][1] and "pi" in outcome.refused[1][1]
    plain = json.loads(independent_open(SECRET, captured.requests[0].content))
    assert [item["si"] for item in plain["collections"]] == ["s0", "s4"]


def test_items_from_the_future_wait_and_the_rest_go() -> None:
    captured = Captured()
    events = [event(0), event(1, ot=int(NOW) + 30)]
    outcome = sender(captured).send("g1", "b.0", events)
    assert (outcome.kind, outcome.retry_items) == (DELIVERED, (1,))
    assert 30 <= outcome.retry_after <= 32
    assert (
        len(json.loads(independent_open(SECRET, captured.requests[0].content))["collections"]) == 1
    )


def test_items_far_in_the_future_are_refused_naming_the_game_servers_clock() -> None:
    captured = Captured()
    events = [
        event(0),
        event(1, ot=int(NOW) + 3600),
        event(2, ot=int(NOW) + 300),
        event(3, ot=int(NOW) + 302),
    ]
    outcome = sender(captured).send("g1", "b.0", events)
    assert outcome.kind == DELIVERED
    assert [i for i, _ in outcome.refused] == [1, 3]
    assert all(
        "game server's clock" in reason and "max_future_seconds" in reason
        for _, reason in outcome.refused
    )
    assert outcome.retry_items == (2,)  # within the bound: it waits
    sent = json.loads(independent_open(SECRET, captured.requests[0].content))["collections"]
    assert [item["si"] for item in sent] == ["s0"]


def moved_request(captured: Captured) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = json.loads(
        independent_open(SECRET, captured.requests[0].content)
    )["collections"]
    return items


def test_late_items_are_dropped_by_the_deliverer_unless_resend() -> None:
    """With "drop" (the default) the sender never moves a time: what reaches it is fresh."""
    captured = Captured()
    outcome = sender(captured).send("g1", "b.0", [event(0, ot=int(NOW) - 500)])
    assert not outcome.moved
    assert moved_request(captured)[0]["ot"] == int(NOW) - 500


def test_resend_moves_late_items_into_the_window_in_order() -> None:
    """A session's login and logout both missed the window: both get the window's earliest
    time at the request, the logout never before the login; a fresh item keeps its time."""
    captured = Captured()
    floor = int(NOW) - 170  # 180 s less the 10 s margin
    events = [
        event(0, ot=int(NOW) - 900),
        event(1, ot=int(NOW) - 400, si="s0"),
        event(2, ot=floor + 3),
        event(3, ot=int(NOW) - 1),
    ]
    outcome = sender(captured, late_behaviour="resend").send("g1", "b.0", events)
    assert outcome.kind == DELIVERED
    sent = moved_request(captured)
    assert [item["ot"] for item in sent] == [floor + 1, floor + 1, floor + 3, int(NOW) - 1]
    assert [m[:4] for m in outcome.moved] == [
        (0, "s0", 0, int(NOW) - 900),
        (1, "s0", 1, int(NOW) - 400),
    ]
    assert {m.sent for m in outcome.moved} == {floor + 1}
    assert all(int(NOW * 1000) - item["ot"] * 1000 < 180_000 for item in sent)


def test_a_moved_item_the_system_refuses_is_not_reported_as_moved_and_sent() -> None:
    refuse_first = Captured(lambda plain: {"errcode": 1011, "errmsg": "sign"})
    outcome = sender(refuse_first, late_behaviour="resend").send(
        "g1", "b.0", [event(0, ot=int(NOW) - 900)]
    )
    assert outcome.kind == RETRY and outcome.hold and not outcome.moved


def test_a_probe_is_a_signed_request_without_items() -> None:
    captured = Captured(lambda plain: {"errcode": 3002, "errmsg": "empty", "data": ""})
    outcome = sender(captured).probe("biz-1")
    assert outcome.kind == DELIVERED and "3002" in outcome.reason
    [request] = captured.requests
    assert request.headers["bizId"] == "biz-1"
    assert json.loads(independent_open(SECRET, request.content)) == {"collections": []}


def expected_sign(request: httpx.Request, secret: str = SECRET) -> str:
    """The sign of ``request`` over the headers it carries, as the interface computes it."""
    h = request.headers
    text = "appId" + h["appId"] + "bizId" + h["bizId"] + "timestamps" + h["timestamps"]
    return hashlib.sha256((secret + text).encode() + request.content).hexdigest()


def test_the_timestamps_header_sent_is_the_one_signed() -> None:
    """A clock that moves on at every read: a second read for the header (or for the
    signature) would send a timestamps other than the one signed, the intermittent 1011."""
    ticks = iter(NOW + 0.002 * n for n in range(1000))
    captured = Captured()
    c = config()
    s = NppaSender(c, httpx.MockTransport(captured), lambda: next(ticks))
    assert s.send("g1", "b.0", [event(i) for i in range(3)]).kind == DELIVERED
    assert s.probe("biz-1").kind == DELIVERED
    assert len(captured.requests) == 2
    for request in captured.requests:
        assert request.headers["sign"] == expected_sign(request)


def test_an_upper_case_key_signs_as_the_lower_case_key_issued() -> None:
    """AES takes the key's bytes in either case; the signature takes its text, in the
    lower case the system issues keys in (the worked example's key)."""
    signed = {
        "appId": "test-appId",
        "bizId": "test-bizId",
        "timestamps": "1584949895758",
        "id": "test-id",
        "name": "test-name",
    }
    assert signature(EXAMPLE_SECRET.upper(), signed, EXAMPLE_BODY) == EXAMPLE_SIGN
    captured = Captured()
    outcome = sender(captured, secret_key=SECRET.upper()).send("g1", "b.0", [event(0)])
    assert outcome.kind == DELIVERED
    [request] = captured.requests
    assert request.headers["sign"] == expected_sign(request, SECRET)


def test_the_key_is_read_once_per_request() -> None:
    """Sealed and signed with the same key, whichever the key source says at the time."""
    keys = iter([SECRET, "ff" * 16])
    captured = Captured()
    c = config()
    s = NppaSender(
        c,
        httpx.MockTransport(captured),
        lambda: NOW,
        key=lambda: next(keys),
    )
    assert s.send("g1", "b.0", [event(0)]).kind == DELIVERED
    request = captured.requests[0]
    stamp = request.headers["timestamps"]
    assert (
        request.headers["sign"]
        == hashlib.sha256(
            (SECRET + "appId" + APP_ID + "bizId" + "biz-1" + "timestamps" + stamp).encode()
            + request.content
        ).hexdigest()
    )


def test_a_game_without_a_biz_id_holds_that_game_and_is_never_sent_nor_dead() -> None:
    captured = Captured()
    outcome = sender(captured).send("unfiled", "b.0", [event(0)])
    assert outcome.kind == RETRY and outcome.hold is not None
    assert (outcome.hold.cause, outcome.hold.scope) == ("no biz_id", "game")
    assert '[games."unfiled"] biz_id' in outcome.hold.check
    assert captured.requests == []


def test_expired_timestamps_are_sent_again_once_with_a_new_stamp() -> None:
    answers = iter([{"errcode": 1007, "errmsg": "expired"}, {"errcode": 0, "data": ""}])
    clock = iter([NOW, NOW, NOW + 0.25])  # send() reads it once, then once per attempt
    captured = Captured(lambda plain: next(answers))
    c = config()
    s = NppaSender(
        c,
        httpx.MockTransport(captured),
        lambda: next(clock),
    )
    assert s.send("g1", "b.0", [event(0)]).kind == DELIVERED
    first, second = captured.requests
    assert first.headers["timestamps"] != second.headers["timestamps"]
    assert first.headers["sign"] != second.headers["sign"]
    assert first.content != second.content  # a new nonce too


def test_1007s_in_a_row_hold_this_reporter_for_its_clock_instead_of_sending_twice() -> None:
    """A lone 1007 is sent again at once; a second in a row is retried later; the third in
    a row holds this reporter ("host clock"); any other answer starts the count again."""
    codes = iter([1007, 1007, 1007, 0, 1007, 0])
    captured = Captured(lambda plain: {"errcode": next(codes), "errmsg": "x", "data": ""})
    s = sender(captured)
    first = s.send("g1", "b.0", [event(0)])  # 1007, at once again: 1007
    assert first.kind == RETRY and first.hold is None and len(captured.requests) == 2
    held = s.send("g1", "b.1", [event(1)])  # the third in a row: no second send
    assert len(captured.requests) == 3 and held.hold is not None
    assert (held.hold.cause, held.hold.scope) == ("host clock", "host")
    assert "NTP" in held.hold.check
    assert s.probe("biz-1").kind == DELIVERED  # the clock is right again: the count restarts
    lone = s.send("g1", "b.2", [event(2)])  # a lone 1007 again: sent twice, taken
    assert lone.kind == DELIVERED and len(captured.requests) == 6


@pytest.mark.parametrize("slot", [True, False])
def test_the_resend_after_1007_waits_for_a_slot_of_its_own(slot: bool) -> None:
    """The first request's slot is taken by the deliverer; the re-send is a request of its
    own and asks the pace for one (none: the 1007 answer stands, retried later)."""
    answers = iter([{"errcode": 1007, "errmsg": "expired"}, {"errcode": 0, "data": ""}])
    captured = Captured(lambda plain: next(answers))
    c = config()
    paced: list[str] = []

    class Pace:
        def one(self, game: str) -> bool:
            paced.append(game)
            return slot

        def on_time(self, game: str) -> bool:
            return True

    s = NppaSender(
        c,
        httpx.MockTransport(captured),
        lambda: NOW,
        pacer=Pace(),
    )
    outcome = s.send("g1", "b.0", [event(0)])
    assert paced == ["g1"]
    assert len(captured.requests) == (2 if slot else 1)
    assert outcome.kind == (DELIVERED if slot else RETRY)


SENT = [4, 7, 9]  # batch positions of the items numbered 1, 2, 3
ITEMS = range(3004, 3011)  # the interface's item errors


@pytest.mark.parametrize("code", [0, 3001])
def test_per_item_results_refuse_item_errors_and_retry_the_others(code: int) -> None:
    body = orjson.dumps(
        {
            "errcode": code,
            "errmsg": "partial",
            "data": {
                "results": [
                    {"no": 1, "errcode": 3005, "errmsg": "bad ot"},
                    {"no": 3, "errcode": 3010, "errmsg": "bad pi"},
                    {"no": 2, "errcode": 1001, "errmsg": "busy"},
                    {"no": 3, "errcode": 3004, "errmsg": "listed twice"},
                ]
            },
        }
    )
    outcome = classify(200, None, body, SENT, 60.0)
    assert outcome.kind == DELIVERED
    assert outcome.refused == (
        (4, "nppa 3005 bad ot"),
        (9, "nppa 3010 bad pi (conflicting results for this item: 3010, 3004)"),
    )
    assert outcome.retry_items == (7,)


@pytest.mark.parametrize("code", [0, 3001])
def test_an_item_result_with_errcode_0_is_delivered(code: int) -> None:
    body = orjson.dumps(
        {
            "errcode": code,
            "data": {
                "results": [
                    {"no": 1, "errcode": 0, "errmsg": "ok"},
                    {"no": 2, "errcode": 3005, "errmsg": "bad ot"},
                    {"no": 1, "errcode": 0, "errmsg": "listed twice, alike"},
                ]
            },
        }
    )
    outcome = classify(200, None, body, SENT, 60.0)
    assert (outcome.kind, outcome.refused, outcome.retry_items) == (
        DELIVERED,
        ((7, "nppa 3005 bad ot"),),
        (),
    )


@pytest.mark.parametrize(
    ("answers", "refused", "retried"),
    [
        ([0, 3005], ((4, "nppa 3005 bad (conflicting results for this item: 0, 3005)"),), ()),
        ([3005, 0], ((4, "nppa 3005 bad (conflicting results for this item: 3005, 0)"),), ()),
        ([0, 1001], (), (4,)),
        ([1001, 0], (), (4,)),
        ([0, 0, 4001], (), (4,)),
    ],
)
def test_an_item_listed_with_conflicting_answers_is_not_delivered(
    answers: list[int], refused: tuple[tuple[int, str], ...], retried: tuple[int, ...]
) -> None:
    """The same ``no`` twice, once taken and once not: the system's word is not clear, so
    the item is not counted delivered; an item error refuses it, any other answer sends it
    again."""
    body = orjson.dumps(
        {
            "errcode": 3001,
            "data": {"results": [{"no": 1, "errcode": c, "errmsg": "bad"} for c in answers]},
        }
    )
    outcome = classify(200, None, body, SENT, 60.0)
    assert (outcome.kind, outcome.refused, outcome.retry_items) == (DELIVERED, refused, retried)


@pytest.mark.parametrize(
    "result",
    [
        {"no": 1.9, "errcode": 3005},
        {"no": True, "errcode": 3005},
        {"no": "1", "errcode": 3005},
        {"no": 1, "errcode": 3005.0},
        {"no": 1, "errcode": False},
        {"no": 1, "errcode": "0"},
        {"no": 0, "errcode": 3005},
        {"no": 4, "errcode": 3005},
        {"no": None, "errcode": 0},
        {"errcode": 3005},
        {"no": 1},
        [1, 3005],
        "1",
    ],
)
def test_an_item_result_that_is_not_integers_in_range_makes_the_answer_unreadable(
    result: object,
) -> None:
    """Never read as some item's result: the whole batch is retried, nothing refused."""
    body = orjson.dumps(
        {"errcode": 3001, "data": {"results": [{"no": 3, "errcode": 3010}, result]}}
    )
    outcome = classify(200, None, body, SENT, 60.0)
    assert (outcome.kind, outcome.refused, outcome.retry_items) == (RETRY, (), ()), outcome
    assert "item result" in outcome.reason


@pytest.mark.parametrize(
    ("status", "body", "kind", "alert"),
    [
        (200, b'{"errcode":0,"errmsg":"ok","data":""}', DELIVERED, False),
        (200, b'{"errcode":1001,"errmsg":"system error"}', RETRY, False),
        (200, b'{"errcode":4001,"errmsg":"test system"}', RETRY, False),
        (200, b'{"errcode":1007,"errmsg":"expired"}', RETRY, False),
        (200, b'{"errcode":3002,"errmsg":"empty"}', REJECTED, True),
        (200, b'{"errcode":3003,"errmsg":"too many"}', REJECTED, True),
        # an item error for the whole request, no results: the data, dead-lettered at once
        *[(200, b'{"errcode":%d,"errmsg":"bad","data":""}' % c, REJECTED, False) for c in ITEMS],
        (200, b'{"errcode":3005,"errmsg":"bad ot"}', REJECTED, False),
        (200, b'{"errcode":3001,"errmsg":"partial"}', RETRY, False),  # no results: not trusted
        (200, b'{"errcode":"0"}', RETRY, False),
        (200, b"<html>gateway</html>", RETRY, False),
        (200, b'{"errmsg":"no code"}', RETRY, False),
        (502, b"bad gateway", RETRY, False),
        (200, b'{"errcode":0,"data":{"results":[{"no":9,"errcode":3005}]}}', RETRY, False),
    ],
)
def test_every_answer_has_its_meaning(status: int, body: bytes, kind: str, alert: bool) -> None:
    outcome = classify(status, None, body, SENT, 60.0)
    assert (outcome.kind, bool(outcome.alert)) == (kind, alert), outcome
    assert not outcome.hold


@pytest.mark.parametrize("code", [1002, 1003, 1004, 1005, 1008, 1009, 1010, 1011, 1012, 4002, 4003])
def test_identity_and_configuration_answers_hold_the_sender(code: int) -> None:
    """Not a dead letter: the batch is retried once the operator has fixed the cause."""
    body = orjson.dumps({"errcode": code, "errmsg": "no", "data": ""})
    outcome = classify(200, None, body, SENT, 60.0)
    assert (outcome.kind, outcome.alert) == (RETRY, None)
    assert outcome.hold is not None
    assert (outcome.hold.cause, outcome.hold.check) == (f"nppa {code}", CHECK[code])
    # the narrowest scope that explains it: one game's permission, the key, else the app
    assert outcome.hold.scope == {1010: "game", 1011: "key", 1012: "key"}.get(code, "app")


@pytest.mark.parametrize("status", [401, 403, 407])
def test_a_proxy_or_gateway_refusing_us_holds_the_sender(status: int) -> None:
    outcome = classify(status, None, b"<html>denied</html>", SENT, 60.0)
    assert outcome.kind == RETRY and outcome.hold is not None
    assert outcome.hold.cause == f"HTTP {status}" and "check" in outcome.hold.check
    assert not classify(502, None, b"", SENT, 60.0).hold


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        (b'{"errcode":3002,"errmsg":"empty collections","data":""}', DELIVERED),
        (b'{"errcode":0,"errmsg":"ok","data":""}', DELIVERED),
        (b'{"errcode":1011,"errmsg":"sign"}', RETRY),
    ],
)
def test_a_probe_passes_on_3002(body: bytes, kind: str) -> None:
    outcome = classify(200, None, body, [], 60.0, probe=True)
    assert outcome.kind == kind
    assert bool(outcome.hold) == (kind == RETRY)


def test_over_the_rate_limit_every_reporter_pauses() -> None:
    outcome = classify(200, None, b'{"errcode":1006,"errmsg":"limit"}', SENT, 45.0)
    assert (outcome.kind, outcome.retry_after, outcome.pause_all) == (RETRY, 45.0, 45.0)


def test_transport_errors_are_retried() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    c = config()
    s = NppaSender(c, httpx.MockTransport(refuse), lambda: NOW)
    assert s.send("g1", "b.0", [event(0)]).kind == RETRY


def test_describe_never_shows_the_secret() -> None:
    s = sender(Captured())
    assert SECRET not in s.describe() and SECRET not in repr(config())
    assert SECRET not in str(config().masked())
