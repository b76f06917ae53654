"""One producer of ``bench.ingest``: a keep-alive HTTP/1.1 client on a raw socket that posts its
requests one after the other and prints what it saw as one JSON line.

It is a process of its own so that the clients and the ingest do not share an interpreter.
Every request is built before the start (100 events of one game as a JSON array, or NDJSON),
so a client spends its time on the socket, not on making JSON:

    python -m bench._ingest_client HOST PORT TOKEN START_AT CLIENT REQUESTS PER_REQUEST GAMES
                                   [--ndjson]

It waits until ``START_AT`` (seconds since the epoch), then sends; each answer is read whole
(its ``Content-Length``) before the next request goes.  A 503 (the ingest's buffer is full)
is sent again after its ``Retry-After``, as a producer should.  The JSON line: answers by
status, when the client started (seconds since the epoch) and for how long it sent, and each
request's latency in microseconds.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time
from collections import Counter

import orjson


def requests(
    client: int, count: int, per_request: int, games: int, token: str, ndjson: bool
) -> list[bytes]:
    """The client's requests, ready to send: event ``seq`` numbers are unique over clients."""
    out = []
    for n in range(count):
        game = f"game-{(client * count + n) % games:03d}"
        first = (client * count + n) * per_request
        events = [
            {
                "seq": first + i,
                "si": f"{first + i:032x}",
                "bt": i & 1,
                "ot": 1_732_243_545 + i,
                "ct": 0,
                "pi": f"1fffbjzos82bs9cfjr{first + i:016x}",
            }
            for i in range(per_request)
        ]
        if ndjson:
            body = b"\n".join(orjson.dumps(e) for e in events) + b"\n"
            kind = b"application/x-ndjson"
        else:
            body = orjson.dumps(events)
            kind = b"application/json"
        out.append(
            b"POST /v1/games/" + game.encode() + b"/events HTTP/1.1\r\nHost: bench\r\n"
            b"Authorization: Bearer " + token.encode() + b"\r\nContent-Type: " + kind + b"\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
        )
    return out


def read_answer(sock: socket.socket, pending: bytearray) -> tuple[int, float]:
    """Read one whole answer; its status and its Retry-After (0 without one).  Bytes past it
    stay in ``pending``."""
    while True:
        end = pending.find(b"\r\n\r\n")
        if end >= 0:
            head = bytes(pending[:end]).lower()
            length = int(head.split(b"content-length:")[1].split(b"\r\n")[0])
            if len(pending) >= end + 4 + length:
                status = int(head[9:12])
                del pending[: end + 4 + length]
                retry = (
                    head.split(b"retry-after:")[1].split(b"\r\n")[0]
                    if b"retry-after:" in head
                    else b"0"
                )
                return status, float(retry)
        data = sock.recv(65536)
        if not data:
            raise ConnectionError("the ingest closed the connection")
        pending += data


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    for name in ("host", "port", "token", "start_at", "client", "requests", "per_request"):
        p.add_argument(name)
    p.add_argument("games", type=int)
    p.add_argument("--ndjson", action="store_true")
    args = p.parse_args(argv)
    work = requests(
        int(args.client),
        int(args.requests),
        int(args.per_request),
        args.games,
        args.token,
        args.ndjson,
    )
    sock = socket.create_connection((args.host, int(args.port)), timeout=60)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    time.sleep(max(0.0, float(args.start_at) - time.time()))
    statuses: Counter[int] = Counter()
    latencies = []
    pending = bytearray()
    clock = time.monotonic
    start = clock()
    for request in work:
        while True:
            sent = clock()
            sock.sendall(request)
            status, retry_after = read_answer(sock, pending)
            statuses[status] += 1
            latencies.append(round((clock() - sent) * 1e6))
            if status != 503:
                break
            time.sleep(retry_after)  # the buffer is full: as a producer should, wait and resend
    end = clock()
    sock.close()
    result = {
        "statuses": {str(k): v for k, v in statuses.items()},
        "started": time.time() - (end - start),
        "seconds": end - start,
        "latencies_us": latencies,
    }
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
