"""The ``print`` sink as the reporter sees it: standard output, nothing to probe."""

from __future__ import annotations

from collections.abc import Sequence

import httpx

from reporter._senders.secrets import SecretFile
from reporter._sinks.base import Connection, Pacer, Sender, Sink
from reporter._sinks.print.sender import PrintSender


class PrintSink(Sink):
    kind = "print"

    def sender(
        self,
        transport: httpx.BaseTransport | None = None,
        secrets: Sequence[SecretFile] = (),
        pacer: Pacer | None = None,
    ) -> Sender:
        return PrintSender()

    def check_connection(
        self,
        method: str = "HEAD",
        transport: httpx.BaseTransport | None = None,
        pacer: Pacer | None = None,
    ) -> Connection:
        return Connection(True, "print: batches go to standard output (no endpoint to probe)")

    def describe(self) -> str:
        return "print (standard output)"

    def notices(self) -> list[str]:
        if not self.config.sink.url:
            return []
        return [
            '[sink] kind = "print": batches go to standard output and are counted as '
            "delivered; [sink] url is not used"
        ]
