"""The Python SDK as a producer of the conformance suite's line protocol (docs/protocol.md):

    telemetry-reporter conformance -- python -m collector.conformance_producer

Reads one request per line on standard input and answers one line on standard output:
``collect <game> <event-json>`` (``ok``, or ``refused <reason>`` when ``collect()`` raises),
``flush`` (``ok`` once ``flush()`` says everything is in Redis), ``stats`` (``stats()`` as one
line of JSON), ``close`` (``ok``, then exit 0).  Settings come as ``Collector.from_config()``
reads them: ``TELEMETRY_<SECTION>_<KEY>`` environment variables over the packaged defaults.
Logs go to standard error.
"""

from __future__ import annotations

import sys
from typing import IO, Any

import orjson

from collector import Collector

# How long one "flush" request waits for the buffer to reach Redis before it answers an error.
FLUSH_SECONDS = 60.0


def answer(telemetry: Collector, line: str) -> tuple[str, bool]:
    """The answer to one request line, and whether it was the last."""
    verb, _, rest = line.partition(" ")
    if verb == "collect":
        game, _, text = rest.partition(" ")
        return _collect(telemetry, game, text), False
    if verb == "flush" and not rest:
        if telemetry.flush(timeout=FLUSH_SECONDS):
            return "ok", False
        return f"error flush: not everything was stored within {FLUSH_SECONDS:g} s", False
    if verb == "stats" and not rest:
        return orjson.dumps(telemetry.stats()).decode(), False
    if verb == "close" and not rest:
        telemetry.close()
        return "ok", True
    return f"error unknown request {line[:80]!r}", False


def _collect(telemetry: Collector, game: str, text: str) -> str:
    try:
        event: Any = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        return f"refused the event is not JSON: {exc}"
    try:
        telemetry.collect(game, event)
    except (TypeError, ValueError) as exc:
        return "refused " + " ".join(str(exc).split())
    return "ok"


def serve(requests: IO[bytes], answers: IO[bytes]) -> int:
    telemetry = Collector.from_config()
    try:
        for raw in requests:
            reply, last = answer(telemetry, raw.decode("utf-8", "surrogateescape").rstrip("\n"))
            answers.write(reply.encode("utf-8", "replace") + b"\n")
            answers.flush()
            if last:
                return 0
    finally:
        telemetry.close()
    return 0


if __name__ == "__main__":
    sys.exit(serve(sys.stdin.buffer, sys.stdout.buffer))
