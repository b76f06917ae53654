"""What the anti-addiction audit trail costs the sending thread, per request of 128 items.

The nppa sender sends full requests to an in-process answer (``httpx.MockTransport``, 0 ok),
so what is timed is the sender's own work: checking the items, sealing, signing and, with a
trail, the request's line before it goes and the answer's after.  Three ways: no trail; a
trail synced by its own thread every second (the default, ``audit_fsync_seconds = 1``);
a trail synced at every line in the sending thread (``audit_fsync_seconds = 0``).  It
prints the time per request (median, p99), the trail's bytes per request, and what a day
at the interface's full rate (9.6 requests a second) writes.

    .venv/bin/python -m bench.nppa_audit [--small] [--requests N] [--directory DIR]
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import httpx
import orjson

from bench._harness import command_line, footer, header, parse
from reporter._sinks.nppa.audit import AuditTrail
from reporter._sinks.nppa.sender import NppaSender
from tests.support.entries import make_config

FULL_RATE = 9.6  # requests a second: 10 less the 4 % headroom
PI = "1" * 38


def events(now: int) -> list[bytes]:
    """A full request: 64 sessions' logins and logouts, 32-character session ids."""
    return [
        orjson.dumps({"si": f"{i // 2:032d}", "bt": 1 - i % 2, "ot": now - 5, "ct": 0, "pi": PI})
        for i in range(128)
    ]


def answer(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, content=b'{"errcode":0,"errmsg":"ok","data":""}')


def timed(directory: str, fsync_seconds: float, requests: int) -> tuple[list[float], int]:
    """Seconds per request, and the bytes the trail took."""
    nppa = {
        "app_id": "bench-app",
        "secret_key": "00112233445566778899aabbccddeeff",
        "base_url": "http://nppa.bench",
        "audit_directory": directory,
        "audit_fsync_seconds": fsync_seconds,
    }
    config = make_config(
        "redis://127.0.0.1:1/0",
        sink={"kind": "nppa"},
        nppa=nppa,
        games={"farm": {"biz_id": "1101999999"}},
    )
    sender = NppaSender(config, httpx.MockTransport(answer))
    batch = events(int(time.time()))
    took = []
    try:
        for n in range(requests):
            began = time.perf_counter()
            outcome = sender.send("farm", f"b.{n}", batch)
            took.append(time.perf_counter() - began)
            assert outcome.kind == "delivered", outcome
    finally:
        sender.close()
    written = sum(p.stat().st_size for p in Path(directory).glob("*")) if directory else 0
    return took, written


def p99(values: Sequence[float]) -> float:
    return sorted(values)[max(0, int(len(values) * 0.99) - 1)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = command_line(__doc__)
    parser.add_argument("--requests", type=int, default=3000, help="requests per way")
    parser.add_argument("--directory", help="where the trail goes (default: a temporary one)")
    args = parse(parser, argv, {"requests": 100})
    header(f"{args.requests} requests of 128 items per way, answered in-process")
    print(f"{'way':<34} {'ms/request p50':>15} {'p99':>8} {'trail bytes/request':>20}")
    per_request = 0
    for name, fsync in (
        ("no trail", None),
        ("trail, synced every 1 s", 1.0),
        ("trail, synced every line", 0.0),
    ):
        with tempfile.TemporaryDirectory(dir=args.directory) as tmp:
            directory = "" if fsync is None else str(Path(tmp) / "audit")
            took, written = timed(directory, fsync or 0.0, args.requests)
        if written:
            per_request = written // args.requests
        print(
            f"{name:<34} {statistics.median(took) * 1000:>15.3f} {p99(took) * 1000:>8.3f} "
            f"{written // args.requests:>20,}"
        )
    day = per_request * FULL_RATE * 86_400
    print(f"a day at the full rate ({FULL_RATE} requests/s of 128 items): {day / 1e9:.1f} GB")
    with tempfile.TemporaryDirectory(dir=args.directory) as tmp:
        probe = AuditTrail(tmp, fsync_seconds=0)
        began = time.perf_counter()
        for _ in range(200):
            probe.write({"type": "bench"})
        took_ms = (time.perf_counter() - began) / 200 * 1000
        probe.close()
    print(f"one write and fsync of a line on this disk: {took_ms:.3f} ms")
    footer()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
