"""The ``[sink.ndjson]`` section: where the files go, when they are closed, how durable a
written batch is."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from collector import ConfigError
from collector.config import Where, setting

SECTION = "sink.ndjson"
# A file name's first part: letters, digits, dot, dash, underscore (no path, no glob).
_PREFIX = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


@dataclass(frozen=True)
class NdjsonSettings:
    """Files of one JSON line per event (``[sink] kind = "ndjson"``)."""

    directory: str = setting("")
    prefix: str = setting("telemetry")
    max_file_bytes: int = setting(64 * 1024 * 1024, lo=4096, hi=1 << 40)
    max_file_seconds: float = setting(300.0, lo=1, hi=86_400)
    fsync: str = setting("batch", choices=("batch", "close", "never"))


def check_ndjson(settings: NdjsonSettings, where: Where) -> None:
    """The prefix is a plain file name; a directory that is set is not a file (it may not
    exist yet: it is created on the first write)."""
    if not _PREFIX.fullmatch(settings.prefix):
        raise ConfigError(
            f"{where(SECTION, 'prefix')}: [{SECTION}] prefix: expected 1 to 64 letters, "
            f"digits, '.', '-' or '_' (a file name's start), found {settings.prefix!r}"
        )
    directory = settings.directory
    if directory and os.path.exists(directory) and not os.path.isdir(directory):
        raise ConfigError(
            f"{where(SECTION, 'directory')}: [{SECTION}] directory: "
            f"{settings.directory!r} is not a directory"
        )
