"""The lines of the anti-addiction audit trail, and what writes them (``Recorder``).

One JSON object per line, its ``type`` first:

- ``request``: written right before a request's bytes go.  ``id`` (this process's run and a
  number), ``timestamps`` (the header sent and signed, ms), ``app``, ``biz``, ``game``,
  ``batch`` and ``attempt``, and ``items``: each ``{"no", "si", "bt", "ot"}`` as sent, with
  ``ot_original`` when the late re-send policy moved it.  A probe (a request without items
  that proves the key) has ``"probe": true`` and no items.
- ``answer``: what came back for the request ``id``, heard at ``at`` (ms): ``http`` (the
  status), ``errcode``, ``errmsg`` and ``results`` (the items the system listed, each ``{"no",
  "errcode", "errmsg"}``) when it was the interface's answer; ``error`` when there was none
  (a timeout, a refused connection: the request may or may not have arrived); ``"sent":
  false`` when it never went (no slot of the rate within reach).  ``outcome``: what the
  reporter made of it (``delivered``, ``retry``, ``rejected``; ``held`` for an answer that
  holds sending).
- ``refused``: items of a batch never sent (not valid for the interface, or stamped too far
  ahead), each ``{"si", "bt", "ot", "reason"}``, dead-lettered.
- ``stale``: items dropped as too old to send, each ``{"si", "bt", "ot"}``.

``pi`` and ``di`` (the player's identity) are never written: ``si`` ties a line to the
game's own records.
"""

from __future__ import annotations

import itertools
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from reporter._senders.outcome import Outcome
from reporter._sinks.nppa.audit import AuditTrail, audit_trail
from reporter._sinks.nppa.settings import NppaSettings

ERRMSG_CHARS = 100
MAX_RESULTS = 128  # a request holds at most 128 items


def audit_trail_of(settings: NppaSettings) -> AuditTrail | None:
    """The process's trail in ``[nppa] audit_directory`` (None: it keeps none)."""
    if not settings.audit_directory:
        return None
    return audit_trail(
        settings.audit_directory, settings.audit_max_file_bytes, settings.audit_fsync_seconds
    )


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class Sending:
    """One send's context for the trail: the batch (none for a probe), its attempt, the
    original ``ot`` of each moved item (by its index in the batch), and the lines that could
    not be written."""

    game: str = ""
    batch_id: str = ""
    attempt: int = 0
    originals: Mapping[int, int] = field(default_factory=dict)
    lost: int = 0


class Recorder:
    """What one sender (or the delivery's stale items) writes to ``trail``; with no trail,
    nothing, at no cost.  Each call returns the lines it could not write (0 or 1)."""

    def __init__(self, trail: AuditTrail | None, app_id: str) -> None:
        self._trail = trail
        self._app_id = app_id
        self._run = secrets.token_hex(4)
        self._numbers = itertools.count(1)

    @property
    def keeps(self) -> bool:
        return self._trail is not None

    def request(
        self,
        stamp: str,
        biz_id: str,
        call: Sending,
        items: Sequence[tuple[int, Mapping[str, Any]]],
        app_id: str = "",
    ) -> tuple[str, int]:
        """The line of a request about to go, and its id; ``items``: each one's index in the
        batch and the item as numbered in the body; ``app_id``: the app it goes to (by
        default the recorder's)."""
        if self._trail is None:
            return "", 0
        request_id = f"{self._run}-{next(self._numbers)}"
        line: dict[str, Any] = {
            "type": "request",
            "id": request_id,
            "timestamps": int(stamp),
            "app": app_id or self._app_id,
            "biz": biz_id,
        }
        if call.batch_id:
            line.update(game=call.game, batch=call.batch_id, attempt=call.attempt)
            line["items"] = [_sent(item, call.originals.get(i)) for i, item in items]
        else:
            line["probe"] = True
        return request_id, self._write(line)

    def answer(
        self,
        request_id: str,
        outcome: Outcome,
        response: httpx.Response | None = None,
        error: str = "",
    ) -> int:
        """The line of what came back for ``request_id`` (a response, an error, or neither:
        not sent)."""
        if self._trail is None or not request_id:
            return 0
        line: dict[str, Any] = {"type": "answer", "id": request_id, "at": _now_ms()}
        if response is not None:
            line["http"] = response.status_code
            line.update(_said(response.content))
        elif error:
            line["error"] = error[:200]
        else:
            line["sent"] = False
        line["outcome"] = "held" if outcome.hold else outcome.kind
        return self._write(line)

    def refused(
        self,
        biz_id: str,
        game: str,
        batch_id: str,
        items: Sequence[tuple[bytes, str]],
        app_id: str = "",
    ) -> int:
        """The line of a batch's items never sent (each event and the reason)."""
        if self._trail is None or not items:
            return 0
        listed = [{**_fields(event), "reason": reason[:200]} for event, reason in items]
        return self._write(self._dropped("refused", biz_id, game, batch_id, listed, app_id))

    def stale(
        self,
        biz_id: str,
        game: str,
        batch_id: str,
        items: Sequence[dict[str, Any]],
        app_id: str = "",
    ) -> int:
        """The line of a batch's items dropped as stale."""
        if self._trail is None or not items:
            return 0
        return self._write(self._dropped("stale", biz_id, game, batch_id, list(items), app_id))

    def close(self) -> None:
        if self._trail is not None:
            self._trail.close()

    def _dropped(
        self,
        kind: str,
        biz_id: str,
        game: str,
        batch_id: str,
        items: list[dict[str, Any]],
        app_id: str = "",
    ) -> dict[str, Any]:
        return {
            "type": kind,
            "at": _now_ms(),
            "app": app_id or self._app_id,
            "biz": biz_id,
            "game": game,
            "batch": batch_id,
            "items": items,
        }

    def _write(self, line: Mapping[str, Any]) -> int:
        assert self._trail is not None
        return 0 if self._trail.write(line) else 1


def _sent(item: Mapping[str, Any], original: int | None) -> dict[str, Any]:
    line = {"no": item["no"], "si": item["si"], "bt": item["bt"], "ot": item["ot"]}
    if original is not None:
        line["ot_original"] = original
    return line


def _fields(event: bytes) -> dict[str, Any]:
    """``si``, ``bt`` and ``ot`` of an event, those it has (an event that is not an object
    has none)."""
    try:
        value = orjson.loads(event)
    except orjson.JSONDecodeError:
        return {}
    if not isinstance(value, dict):
        return {}
    return {k: _short(value[k]) for k in ("si", "bt", "ot") if k in value}


def _short(value: Any) -> Any:
    """A value as the trail keeps it: a number or a short text (whatever a game wrote)."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | float):
        return value
    return str(value)[:64]


def _said(body: bytes) -> dict[str, Any]:
    """The interface's answer as the trail keeps it: errcode, errmsg and the listed items'
    results (bounded); the first bytes of a body that is not one."""
    try:
        reply = orjson.loads(body)
    except orjson.JSONDecodeError:
        return {"body": body[:200].decode("utf-8", "replace")}
    if not isinstance(reply, dict):
        return {"body": body[:200].decode("utf-8", "replace")}
    said: dict[str, Any] = {
        "errcode": _short(reply.get("errcode")),
        "errmsg": str(reply.get("errmsg", ""))[:ERRMSG_CHARS],
    }
    data = reply.get("data")
    results = data.get("results") if isinstance(data, dict) else None
    if isinstance(results, list):
        said["results"] = [
            {
                "no": _short(r.get("no")),
                "errcode": _short(r.get("errcode")),
                "errmsg": str(r.get("errmsg", ""))[:ERRMSG_CHARS],
            }
            if isinstance(r, dict)
            else _short(r)
            for r in results[:MAX_RESULTS]
        ]
    return said
