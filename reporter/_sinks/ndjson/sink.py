"""The ``ndjson`` sink as the reporter sees it: files in ``[sink.ndjson] directory``, no
request rate, never held, nothing secret."""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence

import httpx

from collector.config import Where
from reporter._senders.secrets import SecretFile
from reporter._sinks.base import BodyModel, Connection, Pacer, Pacing, Sender, Sink
from reporter._sinks.ndjson.sender import NdjsonSender
from reporter._sinks.ndjson.settings import SECTION, NdjsonSettings, check_ndjson

# {"game":...,"batch_id":...,"event":...}\n around each event: the keys, a game name (at
# most 128 characters) and a batch id with the suffixes of retries and splits.
NDJSON_BODY = BodyModel(fixed=0, per_event=256)


class NdjsonSink(Sink):
    kind = "ndjson"
    section = SECTION
    settings = NdjsonSettings
    body_model = NDJSON_BODY

    @property
    def ndjson(self) -> NdjsonSettings:
        return self.config.section(NdjsonSettings)

    def check(self, where: Where) -> None:
        check_ndjson(self.ndjson, where)

    def pacing(self) -> Pacing:
        """Files need no request rate: ``[sink] requests_per_second`` does not apply."""
        return None

    def endpoint(self) -> str:
        return self.ndjson.directory

    def sender(
        self,
        transport: httpx.BaseTransport | None = None,
        secrets: Sequence[SecretFile] = (),
        pacer: Pacer | None = None,
    ) -> Sender:
        return NdjsonSender(self.ndjson)

    def check_connection(
        self,
        method: str = "HEAD",
        transport: httpx.BaseTransport | None = None,
        pacer: Pacer | None = None,
    ) -> Connection:
        """The directory is created if missing, and a file written, synced, closed and
        removed there, as ``run`` would; the space left is reported."""
        settings = self.ndjson
        path = os.path.join(settings.directory, f"{settings.prefix}-check-{os.getpid()}.part")
        try:
            os.makedirs(settings.directory, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.write(fd, b"\n")
                os.fsync(fd)
            finally:
                os.close(fd)
                os.unlink(path)
            free = shutil.disk_usage(settings.directory).free
        except OSError as exc:
            return Connection(
                False, f"{settings.directory}: cannot write there: {exc.strerror or exc}"
            )
        return Connection(
            True,
            f"{settings.directory}: a file was written, synced and removed; "
            f"{free / 2**30:.1f} GiB free",
        )

    def describe(self) -> str:
        s = self.ndjson
        return f"ndjson {s.directory} ({s.prefix}-*.ndjson)"

    def notices(self) -> list[str]:
        if not self.config.sink.url:
            return []
        return ['[sink] kind = "ndjson": batches go to files; [sink] url is not used']

    def problems(self) -> list[str]:
        """The files need ``[sink.ndjson] directory``."""
        if self.ndjson.directory:
            return []
        return [
            f'{self.config.source}: [{SECTION}] directory: required with [sink] kind = "ndjson" '
            "(where the files are written; set it in the file or with "
            "TELEMETRY_SINK_NDJSON_DIRECTORY), found nothing"
        ]
