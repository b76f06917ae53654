"""The ``ndjson`` sender: a batch becomes one line per event, appended to rotating files.

Each line is ``{"game": ..., "batch_id": ..., "event": <the event's JSON as collected>}``:
the event is not decoded (one that spans lines, which ``collect()`` never writes, is
written again on one line).  A batch is delivered once its lines are written (and synced,
with ``fsync = "batch"``); a write that fails (a full disk, a directory that cannot be
created) is retried like a connection error, so nothing is acked that was not written.
"""

from __future__ import annotations

import errno
from collections.abc import Sequence

import orjson

from reporter._senders.outcome import DELIVERED, RETRY, Outcome
from reporter._sinks.ndjson.files import RotatingFiles
from reporter._sinks.ndjson.settings import NdjsonSettings


def ndjson_lines(game: str, batch_id: str, events: Sequence[bytes]) -> bytes:
    """A batch's lines, each event's JSON inside its own, as collected."""
    head = b'{"game":' + orjson.dumps(game) + b',"batch_id":' + orjson.dumps(batch_id)
    head += b',"event":'
    return b"".join(head + _one_line(event) + b"}\n" for event in events)


def _one_line(event: bytes) -> bytes:
    if b"\n" in event or b"\r" in event:  # whitespace between tokens only: valid JSON
        return orjson.dumps(orjson.loads(event))
    return event


class NdjsonSender:
    def __init__(self, settings: NdjsonSettings, files: RotatingFiles | None = None) -> None:
        self._settings = settings
        self._files = files or RotatingFiles(settings)

    def send(self, game: str, batch_id: str, events: Sequence[bytes], attempt: int = 1) -> Outcome:
        try:
            self._files.append(ndjson_lines(game, batch_id, events))
        except OSError as exc:
            code = errno.errorcode.get(exc.errno or 0, type(exc).__name__)
            return Outcome(
                RETRY,
                reason=f"ndjson: cannot write to {self._settings.directory}: {exc.strerror or exc}",
                code=code,
            )
        return Outcome(DELIVERED)

    def describe(self) -> str:
        s = self._settings
        return (
            f"ndjson {s.directory} ({s.prefix}-*.ndjson, closed at {s.max_file_bytes} bytes "
            f"or {s.max_file_seconds:g} s, fsync {s.fsync})"
        )

    def close(self) -> None:
        self._files.close()
