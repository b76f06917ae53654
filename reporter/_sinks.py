"""The sender interface and the factory that builds one from ``[sink]``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import httpx

from reporter._config import SinkSettings
from reporter._exceptions import SinkConfigError
from reporter._json_sink import JsonSender
from reporter._outcomes import Outcome


class Sender(Protocol):
    def send(self, game: str, batch_id: str, events: Sequence[bytes], attempt: int = 1
             ) -> Outcome: ...

    def describe(self) -> str: ...

    def close(self) -> None: ...


def make_sender(settings: SinkSettings, transport: httpx.BaseTransport | None = None) -> Sender:
    if settings.kind == "json":
        return JsonSender(settings, transport)
    raise SinkConfigError(f"[sink] kind: no sender named {settings.kind!r}")
