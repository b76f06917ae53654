"""Rotating files in one directory, for another program to pick up once they are closed.

One file is open at a time, named ``<prefix>-<UTC time>-<process>-<n>.ndjson.part``; it is
closed when the next write would take it past ``max_file_bytes`` (a write larger than that
gets a file of its own), when it has been open ``max_file_seconds`` (a thread of its own
closes an idle one), and at ``close()``.  Closing renames it without ``.part`` in the same
directory, one atomic step: a shipper that reads ``*.ndjson`` only ever sees whole files.
An empty file is removed instead.  ``<process>`` is random per process, so reporters may
share a directory.

Each append is one or more ``write`` calls of whole lines, then, with ``fsync = "batch"``,
an ``fsync``: when ``append`` returns the lines are in the operating system (and on disk with
``"batch"``).  ``"close"`` syncs a file and its directory entry only when the file is closed;
``"never"`` leaves it all to the operating system.  A failed append (a full disk) is cut
off again (``ftruncate`` to the size before it), so a file holds whole lines only; if even
that fails, the file is closed as it is, left as ``.part`` and logged.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from reporter._sinks.ndjson.settings import NdjsonSettings

logger = logging.getLogger("reporter")

SUFFIX, OPEN_SUFFIX = ".ndjson", ".part"


@dataclass
class _Open:
    path: str  # with OPEN_SUFFIX
    fd: int
    opened: float  # on the monotonic clock
    size: int = 0


class RotatingFiles:
    def __init__(
        self,
        settings: NdjsonSettings,
        clock: Callable[[], float] = time.monotonic,
        process: str = "",
    ) -> None:
        self.directory = settings.directory
        self._prefix = settings.prefix
        self._max_bytes = settings.max_file_bytes
        self._max_seconds = settings.max_file_seconds
        self._fsync = settings.fsync
        self._clock = clock
        self._process = process or secrets.token_hex(4)
        self._lock = threading.Lock()
        self._file: _Open | None = None
        self._count = 0
        self._closing = threading.Event()
        self._rotator: threading.Thread | None = None

    def append(self, data: bytes) -> None:
        """Write ``data`` (whole lines) to the open file, opening or rotating first as
        needed; raise ``OSError`` if it could not be written (nothing of it is kept)."""
        with self._lock:
            if self._closing.is_set():
                raise OSError("the files are closed: the reporter is stopping")
            current = self._file
            if current is not None and self._full(current, len(data)):
                self._finish(current)
                current = None
            if current is None:
                current = self._file = self._open()
            try:
                _write_all(current.fd, data)
                if self._fsync == "batch":
                    os.fsync(current.fd)
            except OSError:
                self._cut_back(current)
                raise
            current.size += len(data)
        self._start_rotator()

    def close(self) -> None:
        """Close (and hand off) the open file; stop the rotating thread."""
        self._closing.set()
        if self._rotator is not None and self._rotator is not threading.current_thread():
            self._rotator.join(timeout=5)
        with self._lock:
            if self._file is not None:
                self._finish(self._file)

    def open_path(self) -> str | None:
        """The file being written, if any (for tests and ``describe``)."""
        current = self._file
        return current.path if current is not None else None

    def _full(self, current: _Open, more: int) -> bool:
        too_big = current.size > 0 and current.size + more > self._max_bytes
        return too_big or self._clock() - current.opened >= self._max_seconds

    def _open(self) -> _Open:
        os.makedirs(self.directory, exist_ok=True)
        self._count += 1
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        name = f"{self._prefix}-{stamp}-{self._process}-{self._count:06d}{SUFFIX}{OPEN_SUFFIX}"
        path = os.path.join(self.directory, name)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC
        return _Open(path, os.open(path, flags, 0o644), self._clock())

    def _finish(self, current: _Open) -> None:
        """Close ``current`` and rename it without ``.part`` (remove it if empty).  A
        failure is logged: the file stays as ``.part`` with whole lines in it."""
        self._file = None
        final = current.path.removesuffix(OPEN_SUFFIX)
        try:
            if self._fsync != "never" and current.size:
                os.fsync(current.fd)
            os.close(current.fd)
            if not current.size:
                os.unlink(current.path)
                return
            os.rename(current.path, final)
            if self._fsync != "never":
                _sync_directory(self.directory)
        except OSError as exc:
            logger.error(
                "ndjson: could not close %s as %s: %s; its lines are whole, rename it by hand",
                current.path,
                os.path.basename(final),
                exc.strerror or exc,
            )

    def _cut_back(self, current: _Open) -> None:
        """Take back the part of a failed append that reached the file."""
        try:
            os.ftruncate(current.fd, current.size)
        except OSError as exc:
            logger.error(
                "ndjson: a failed write could not be cut back from %s (%s): closed as it is, "
                "its last line may be partial",
                current.path,
                exc.strerror or exc,
            )
            self._file = None
            with contextlib.suppress(OSError):
                os.close(current.fd)

    def _start_rotator(self) -> None:
        if self._rotator is None and not self._closing.is_set():
            self._rotator = threading.Thread(target=self._rotate, name="ndjson-rotate", daemon=True)
            self._rotator.start()

    def _rotate(self) -> None:
        """Close a file that has been open ``max_file_seconds``, written to or not."""
        wait = self._max_seconds
        while not self._closing.wait(wait):
            with self._lock:
                current = self._file
                if current is not None and self._clock() - current.opened >= self._max_seconds:
                    self._finish(current)
                    current = None
                left = self._max_seconds - (self._clock() - current.opened) if current else 0
            wait = max(0.05, left) if current is not None else self._max_seconds


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _sync_directory(directory: str) -> None:
    """Make a rename in ``directory`` durable (where the platform allows it)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)
