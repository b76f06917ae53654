"""The anti-addiction audit trail: one JSON line per request sent, per answer heard, per item
dropped before a request, appended to files an auditor can read (``[nppa] audit_directory``).

Why files and not Redis: at the interface's full rate a day of requests is several GB of
lines (128 items of session, behaviour and times, ten times a second), more than a Redis
should hold and more than a capped list can keep without trimming what an auditor may ask
for.  Files on the reporter's host take that volume, rotate, and are kept as long as the
operator's retention says; nothing here deletes them.

- **Append only.** Each process writes its own file, ``nppa-audit-<UTC start>-<host>-<pid>-
  <n>.jsonl`` (several reporters may share a directory, a host's or a mounted one), with
  ``O_APPEND``, one ``write`` per line.  A file is finished when it would pass
  ``audit_max_file_bytes`` or the UTC day changes (a file holds one day), and at stop.
- **Crashes.** The request's line is written before its bytes go, the answer's after: a
  process killed in between leaves a request without an answer ("sent, answer unknown"),
  never an answer without its request.  A line is in the operating system when ``write``
  returns, so a killed process loses nothing; a host that loses power loses what was not yet
  synced: a thread syncs the file every ``audit_fsync_seconds`` (1 s, as Redis's
  ``appendfsync everysec``; 0 syncs every line in the sending thread).  A line cut short by
  a power loss is skipped by readers (``telemetry-reporter audit``), and said so.
- **Failures never stop sending.** A line that cannot be written (a full disk) is counted
  (``audit_lines_lost``) and logged; reports go on, since missing a report is the worse
  breach.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from collector.logs import RateLimitedLog

logger = logging.getLogger("reporter")
ratelog = RateLimitedLog(logger, interval=60.0)

PREFIX = "nppa-audit-"
SUFFIX = ".jsonl"
NAME_TRIES = 100
_HOST = re.sub(r"[^A-Za-z0-9.-]", "_", socket.gethostname())[:64] or "host"


@dataclass
class _Open:
    path: str
    fd: int
    day: str  # UTC yyyymmdd of its lines
    size: int = 0
    dirty: bool = False  # written since the last sync


class AuditTrail:
    """The lines of one process in ``directory``; thread-safe.  ``write`` is the only call
    the sending threads make; ``close`` finishes the file (a later ``write`` opens a new
    one)."""

    def __init__(
        self,
        directory: str,
        max_file_bytes: int = 256 * 1024 * 1024,
        fsync_seconds: float = 1.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.directory = directory
        self._max_bytes = max_file_bytes
        self._fsync_seconds = fsync_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._file: _Open | None = None
        self._count = 0
        self.lost = 0  # lines that could not be written
        self._stop = threading.Event()
        self._syncer: threading.Thread | None = None

    def write(self, record: Mapping[str, Any]) -> bool:
        """Append ``record`` as one line; False (counted in ``lost``, logged) if it could
        not be written."""
        line = orjson.dumps(record) + b"\n"
        error: OSError | None = None
        with self._lock:
            current = None
            try:
                current = self._current(len(line))
                _write_all(current.fd, line)
                current.size += len(line)
                current.dirty = True
                if self._fsync_seconds <= 0:
                    os.fsync(current.fd)
                    current.dirty = False
            except OSError as exc:
                if current is not None:  # a part written (a full disk): taken back
                    with contextlib.suppress(OSError):
                        os.ftruncate(current.fd, current.size)
                self.lost += 1
                lost, error = self.lost, exc
        if error is not None:
            ratelog.log(
                logging.ERROR,
                "audit",
                "the anti-addiction audit trail could not be written in %s (%s): %d lines "
                "lost so far; reports go on without their record until it is fixed",
                self.directory,
                error.strerror or error,
                lost,
            )
            return False
        self._start_syncer()
        return True

    def close(self) -> None:
        """Sync and close the open file; stop the syncing thread."""
        self._stop.set()
        syncer, self._syncer = self._syncer, None
        if syncer is not None and syncer is not threading.current_thread():
            syncer.join(timeout=5)
        with self._lock:
            if self._file is not None:
                self._finish(self._file)
        self._stop = threading.Event()

    def open_path(self) -> str | None:
        """The file being written, if any."""
        current = self._file
        return current.path if current is not None else None

    def _current(self, more: int) -> _Open:
        """The file to append ``more`` bytes to (under the lock): a new one at the first
        line, past the size, or on a new UTC day."""
        day = time.strftime("%Y%m%d", time.gmtime(self._clock()))
        current = self._file
        if current is not None and (
            current.day != day or (current.size and current.size + more > self._max_bytes)
        ):
            self._finish(current)
            current = None
        if current is None:
            current = self._file = self._open(day)
        return current

    def _open(self, day: str) -> _Open:
        """A new file, never one that exists (a process of the same pid before a restart
        may have used the name): only this process appends to it, or cuts it back."""
        os.makedirs(self.directory, exist_ok=True)
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(self._clock()))
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC
        for _ in range(NAME_TRIES):
            self._count += 1
            name = f"{PREFIX}{stamp}-{_HOST}-{os.getpid()}-{self._count:04d}{SUFFIX}"
            path = os.path.join(self.directory, name)
            try:
                return _Open(path, os.open(path, flags, 0o640), day)
            except FileExistsError:
                continue
        raise FileExistsError(f"no free file name in {NAME_TRIES} tries, the last {path!r}")

    def _finish(self, current: _Open) -> None:
        self._file = None
        try:
            if current.dirty:
                os.fsync(current.fd)
        except OSError as exc:
            logger.error("audit trail: could not sync %s: %s", current.path, exc.strerror or exc)
        finally:
            with contextlib.suppress(OSError):
                os.close(current.fd)

    def _start_syncer(self) -> None:
        if self._syncer is None and self._fsync_seconds > 0 and not self._stop.is_set():
            with self._lock:
                if self._syncer is None:
                    self._syncer = threading.Thread(
                        target=self._sync, args=(self._stop,), name="nppa-audit-sync", daemon=True
                    )
                    self._syncer.start()

    def _sync(self, stop: threading.Event) -> None:
        """Every ``fsync_seconds``, the open file to disk if it was written since.  It syncs
        a duplicate of the file's descriptor outside the lock, so no sending thread waits
        for the disk (a rotation may close the original meanwhile)."""
        while not stop.wait(self._fsync_seconds):
            with self._lock:
                current = self._file
                if current is None or not current.dirty:
                    continue
                current.dirty = False
                path = current.path
                try:
                    fd = os.dup(current.fd)
                except OSError:
                    continue
            try:
                os.fsync(fd)
            except OSError as exc:
                ratelog.log(
                    logging.ERROR,
                    "audit-sync",
                    "audit trail: could not sync %s: %s",
                    path,
                    exc.strerror or exc,
                )
            finally:
                os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


_TRAILS: dict[str, AuditTrail] = {}
_TRAILS_LOCK = threading.Lock()


def audit_trail(directory: str, max_file_bytes: int, fsync_seconds: float) -> AuditTrail:
    """The process's trail in ``directory``: one writer per directory, whoever writes (the
    sender's requests and answers, the stale items the delivery drops)."""
    key = os.path.abspath(directory)
    with _TRAILS_LOCK:
        trail = _TRAILS.get(key)
        if trail is None:
            trail = _TRAILS[key] = AuditTrail(directory, max_file_bytes, fsync_seconds)
        return trail
