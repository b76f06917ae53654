"""The sender interface and the factory that builds one from ``[sink] kind``.

A sender only builds requests and reads responses: every answer or transport error becomes
an ``Outcome``; the delivery core (``reporter._delivery``) does the rest (ack, settle,
nack, counting).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import httpx

from reporter._config import ReporterConfig
from reporter._exceptions import SinkConfigError
from reporter._senders.outcome import Outcome
from reporter._senders.secrets import NPPA_KEY, SecretFile, secret_files
from reporter._sinks.json.sender import JsonSender
from reporter._sinks.nppa.sender import NppaSender
from reporter._sinks.print.sender import PrintSender


class Sender(Protocol):
    def send(
        self, game: str, batch_id: str, events: Sequence[bytes], attempt: int = 1
    ) -> Outcome: ...

    def describe(self) -> str: ...

    def close(self) -> None: ...


def make_sender(
    config: ReporterConfig,
    transport: httpx.BaseTransport | None = None,
    secrets: Sequence[SecretFile] | None = None,
) -> Sender:
    """The sender of ``[sink] kind``; ``secrets``: the secret files it reads (by default
    those of ``config``, read now)."""
    kind = config.sink.kind
    files = secret_files(config) if secrets is None else list(secrets)
    if kind == "json":
        return JsonSender(
            config.sink, transport, config.reporter.max_age_seconds, [f for f in files if f.header]
        )
    if kind == "nppa":
        key = next((f for f in files if f.setting == NPPA_KEY), None)
        return NppaSender(config.nppa, config.sink, config.biz_id, transport, key=key)
    if kind == "print":
        return PrintSender()
    raise SinkConfigError(f"[sink] kind: no sender named {kind!r}")
