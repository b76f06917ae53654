"""The HTTP ingest end to end: real sockets, a real Redis, the SDK's buffer and flusher, and a
reporter draining to a local endpoint.  Events posted over HTTP are delivered once; a bad
request is refused whole, naming the first bad event; a wrong token is refused."""

from __future__ import annotations

from collections import Counter

import httpx
import pytest
import redis

from reporter._demo.endpoint import LocalEndpoint
from tests.support.fixtures import MakeEndpoint, StartService
from tests.support.ingest_requests import (
    NDJSON,
    TOKEN,
    StartIngest,
    as_array,
    as_ndjson,
    headers,
    ingest_config,
)
from tests.support.polling import wait_until
from tests.support.scenarios import make_config

REQUESTS = 100
PER_REQUEST = 100
GAMES = ["arena", "studio/puzzle", "kart:eu"]


def delivered(endpoint: LocalEndpoint) -> Counter[tuple[str, int]]:
    return Counter((e["game"], e["seq"]) for e in endpoint.events())


def test_events_posted_over_http_are_delivered_once_and_bad_requests_are_refused(
    redis_url: str,
    r: redis.Redis,
    token_file: str,
    start_ingest: StartIngest,
    make_endpoint: MakeEndpoint,
    start_service: StartService,
) -> None:
    endpoint = make_endpoint()
    ingest = start_ingest(ingest_config(redis_url, token_file))
    start_service(make_config(redis_url, endpoint.url))
    sent: list[tuple[str, int]] = []
    with httpx.Client(base_url=ingest.url, timeout=10) as client:  # one kept-alive connection
        for n in range(REQUESTS):
            game = GAMES[n % len(GAMES)]
            events = [{"game": game, "seq": n * PER_REQUEST + i} for i in range(PER_REQUEST)]
            ndjson = n % 2 == 1
            answer = client.post(
                f"/v1/games/{game}/events",
                content=as_ndjson(events) if ndjson else as_array(events),
                headers=headers(content_type=NDJSON if ndjson else "application/json"),
            )
            assert answer.status_code == 202, answer.text
            assert answer.json() == {"accepted": PER_REQUEST}
            sent += [(game, e["seq"]) for e in events]

        bad = [{"game": "arena", "seq": -1}, {"game": "arena", "seq": -2}, 7, {"seq": -3}]
        refused = client.post("/v1/games/arena/events", content=as_array(bad), headers=headers())
        assert refused.status_code == 400
        assert refused.json()["index"] == 2
        assert "expected a JSON object, found a number" in refused.json()["error"]

        events = as_array([{"game": "arena", "seq": -4}])
        for token in ("wrong-token-0123456789abcdef0123", TOKEN[:-1], None):
            answer = client.post("/v1/games/arena/events", content=events, headers=headers(token))
            assert answer.status_code == 401
            assert answer.headers["WWW-Authenticate"].startswith("Bearer")

    wait_until(lambda: sum(delivered(endpoint).values()) >= len(sent), what="every event")
    got = delivered(endpoint)
    assert got == Counter(sent)  # each once, and nothing of the refused requests
    stats = ingest.collector.stats()
    assert stats["accepted"] == stats["stored"] == REQUESTS * PER_REQUEST
    assert stats["dropped_buffer_full"] == 0


@pytest.mark.parametrize(
    ("body", "content_type", "status", "index", "error"),
    [
        (b'{"seq": 1}', "application/json", 400, None, "expected a JSON array of events"),
        (b'[{"seq": 1}, {"seq" 2}]', "application/json", 400, 1, "not one JSON value"),
        (b'[{"seq": 1}, , {"seq": 2}]', "application/json", 400, 1, "missing"),
        (b'[{"seq": 1}, {"seq": 2}', "application/json", 400, None, "the array is malformed"),
        (b'[{"seq": 1}] [2]', "application/json", 400, None, "trailing characters"),
        (b'[{"seq": 1}, {"seq": 2}, [3]]', "application/json", 400, 2, "found an array"),
        (b'[{"seq": 1}, {"s": "' + b"x" * 300 + b'"}]', "application/json", 400, 1, "over"),
        (b'[{"seq": 1}, {"s": "\xff"}]', "application/json", 400, 1, "not UTF-8"),
        (b'{"seq": 1}\n{"seq": 2}\n{"seq": 3} x\n', NDJSON, 400, 2, "not one JSON value"),
        (b'{"seq": 1}\n\n"three"\n', NDJSON, 400, 1, "found a string"),
        (b'[{"seq": 1}]', "application/json; charset=latin-1", 415, None, "UTF-8"),
        (b'{"seq": 1}\n{"seq": 2}', "application/x-www-form-urlencoded", 400, None, "array"),
        (as_array([{"seq": i} for i in range(11)]), "application/json", 413, None, "over"),
    ],
)
def test_a_bad_request_is_refused_whole_saying_why(
    redis_url: str,
    start_ingest: StartIngest,
    body: bytes,
    content_type: str,
    status: int,
    index: int | None,
    error: str,
) -> None:
    config = ingest_config(
        redis_url, ingest={"max_events_per_request": 10}, buffer={"max_event_bytes": 256}
    )
    ingest = start_ingest(config)
    answer = httpx.post(
        f"{ingest.url}/v1/games/arena/events",
        content=body,
        headers={"Content-Type": content_type},
        timeout=10,
    )
    assert answer.status_code == status, answer.text
    assert answer.json().get("index") == index
    assert error in answer.json()["error"]
    if index is not None:
        assert answer.json()["error"].startswith(f"event {index}: ")
    assert ingest.collector.stats()["accepted"] == 0


def test_pretty_printed_events_are_stored_on_one_line(
    redis_url: str, r: redis.Redis, start_ingest: StartIngest
) -> None:
    ingest = start_ingest(ingest_config(redis_url))
    body = b'[\n  {\n    "seq": 1,\n    "name": "a\\nb"\n  },\n  {"seq": 2}\n]\n'
    answer = httpx.post(f"{ingest.url}/v1/games/arena/events", content=body, timeout=10)
    assert answer.status_code == 202
    assert ingest.collector.flush(10)
    (queue,) = r.keys("*:q:arena")
    entries = r.lrange(queue, 0, -1)
    # The element that spanned lines is written anew; the other is kept byte for byte.
    assert [e[13:] for e in entries] == [b'{"seq":1,"name":"a\\nb"}', b'{"seq": 2}']


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded"])
def test_a_body_of_any_type_but_ndjson_is_read_as_a_json_array(
    redis_url: str, start_ingest: StartIngest, content_type: str | None
) -> None:
    """What curl -d sends, or no type at all: the body decides."""
    ingest = start_ingest(ingest_config(redis_url))
    answer = httpx.post(
        f"{ingest.url}/v1/games/arena/events",
        content=as_array([{"seq": 1}, {"seq": 2}]),
        headers={"Content-Type": content_type} if content_type else {},
        timeout=10,
    )
    assert answer.status_code == 202 and answer.json() == {"accepted": 2}


def test_a_body_sent_in_chunks_is_taken(redis_url: str, start_ingest: StartIngest) -> None:
    ingest = start_ingest(ingest_config(redis_url))
    parts = [b'[{"seq": 1},', b' {"seq": 2}', b', {"seq": 3}]']
    answer = httpx.post(  # a generator: httpx sends it with Transfer-Encoding: chunked
        f"{ingest.url}/v1/games/arena/events", content=iter(parts), timeout=10
    )
    assert answer.request.headers["Transfer-Encoding"] == "chunked"
    assert answer.status_code == 202 and answer.json() == {"accepted": 3}


def test_a_bad_game_name_is_refused_before_the_body(
    redis_url: str, start_ingest: StartIngest
) -> None:
    ingest = start_ingest(ingest_config(redis_url))
    answer = httpx.post(
        f"{ingest.url}/v1/games/has%20space/events", content=as_array([{"seq": 1}]), timeout=10
    )
    assert answer.status_code == 400
    assert answer.json()["error"].startswith("bad game name: ")
    for path, status in [("/v1/games/arena", 404), ("/v2/games/arena/events", 404)]:
        assert httpx.post(f"{ingest.url}{path}", content=b"[]", timeout=10).status_code == status
    assert httpx.get(f"{ingest.url}/v1/games/arena/events", timeout=10).status_code == 405


def test_a_body_over_the_limit_is_refused_from_its_length(
    redis_url: str, start_ingest: StartIngest
) -> None:
    ingest = start_ingest(ingest_config(redis_url, ingest={"max_body_bytes": 2048}))
    big = as_array([{"seq": i, "pad": "x" * 100} for i in range(30)])
    answer = httpx.post(f"{ingest.url}/v1/games/arena/events", content=big, timeout=10)
    assert answer.status_code == 413
    small = as_array([{"seq": 1}])
    answer = httpx.post(f"{ingest.url}/v1/games/arena/events", content=small, timeout=10)
    assert answer.status_code == 202
    assert ingest.collector.stats()["accepted"] == 1


def test_health_and_metrics(redis_url: str, start_ingest: StartIngest) -> None:
    ingest = start_ingest(ingest_config(redis_url))
    httpx.post(f"{ingest.url}/v1/games/arena/events", content=as_array([{"a": 1}]), timeout=10)
    health = httpx.get(f"{ingest.url}/healthz", timeout=10)
    assert health.status_code == 200
    assert health.json()["status"] == "ok"
    text = httpx.get(f"{ingest.url}/metrics", timeout=10).text
    assert 'telemetry_ingest_requests_total{code="202"} 1.0' in text
    assert "telemetry_ingest_events_total 1.0" in text
    assert 'telemetry_accepted_total{scope="process"} 1.0' in text
