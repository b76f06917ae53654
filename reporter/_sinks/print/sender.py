"""The ``print`` sender: each batch written to standard output, one JSON line per batch.

For trying the reporter without an endpoint (like a collector's debug exporter): the line is
the body the ``json`` sender would POST, so ``telemetry-reporter run | jq`` shows what an
endpoint would receive.  A batch is delivered once its line is written and flushed; a write
that fails (a closed pipe, a full disk) is retried like a connection error, so nothing is
acked that was not printed.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Sequence
from typing import BinaryIO

from reporter._senders.bodies import json_body
from reporter._senders.outcome import DELIVERED, RETRY, Outcome


def _stdout() -> BinaryIO:
    return sys.stdout.buffer


class PrintSender:
    """Writes ``{"game", "batch_id", "events"}`` and a newline per batch to ``stream`` (by
    default standard output, looked up at each write so a redirected ``sys.stdout`` counts)."""

    def __init__(self, stream: Callable[[], BinaryIO] = _stdout) -> None:
        self._stream = stream
        # Workers send concurrently: one lock keeps each batch's line whole.
        self._lock = threading.Lock()

    def send(self, game: str, batch_id: str, events: Sequence[bytes], attempt: int = 1) -> Outcome:
        line = json_body(game, batch_id, events) + b"\n"
        try:
            with self._lock:
                out = self._stream()
                out.write(line)
                out.flush()
        except (OSError, ValueError) as exc:  # ValueError: a closed file
            return Outcome(
                RETRY,
                reason=f"print: cannot write to standard output: {exc}",
                code=type(exc).__name__,
            )
        return Outcome(DELIVERED)

    def describe(self) -> str:
        return "print (each batch as a JSON line on standard output)"

    def close(self) -> None:
        pass
