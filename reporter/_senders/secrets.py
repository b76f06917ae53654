"""Secrets read from files, swapped at run time: the anti-addiction key (``[nppa]
secret_key_file``) and the json sink's header values (``[sink] header_files``).

A ``SecretFile`` holds the value in use; senders read it per request (``file()``).  It is
read again on SIGHUP (``reread``) and whenever its content changes (``poll``, every few
seconds: a mounted Kubernetes secret is replaced in place, with no signal).  A new value is
validated before it is used: a file that cannot be read or does not hold a valid value keeps
the one in use, with an ERROR that names the file and what is wrong, never a value.  Every
value read is added to the log's list of secrets to mask.  Which settings a sink reads
from files is the sink's to say (``reporter._sinks.base.Sink.secret_files``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from reporter._logging import REDACT

logger = logging.getLogger("reporter")


@dataclass(frozen=True, slots=True)
class Reread:
    """What one look at a file found: ``changed`` (a new value is in use), ``problem``
    (why the file was not used: the old value stays), or neither (the same value)."""

    setting: str
    changed: bool = False
    problem: str = ""

    def describe(self) -> str:
        if self.problem:
            return f"{self.setting} kept the value in use ({self.problem})"
        return f"{self.setting} ({'changed' if self.changed else 'unchanged'})"


class SecretFile:
    """A secret whose value is a file's content, validated by ``read`` (a ``ValueError``
    saying what is wrong, never the value).  ``header``: the header it is the value of, for
    ``[sink] header_files``."""

    def __init__(
        self, setting: str, path: str, read: Callable[[str], str], header: str = ""
    ) -> None:
        self.setting = setting
        self.path = path
        self.header = header
        self._read = read
        self._listeners: list[Callable[[], None]] = []
        self._lock = threading.Lock()
        self._value = read(path)  # a problem here is a config error: the caller says so
        self._seen = self._raw()  # the content last looked at, valid or not
        REDACT.add([self._value, *self._value.split()[-1:]])

    def __call__(self) -> str:
        """The value in use (a plain read: no lock)."""
        return self._value

    def subscribe(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` after every change of the value."""
        self._listeners.append(listener)

    def poll(self) -> Reread | None:
        """Read the file again if its content changed since the last look; None if not."""
        with self._lock:
            if self._raw() == self._seen:
                return None
            return self._reread()

    def reread(self) -> Reread:
        """Read the file again (SIGHUP)."""
        with self._lock:
            return self._reread()

    def _reread(self) -> Reread:
        self._seen = self._raw()
        try:
            value = self._read(self.path)
        except ValueError as exc:
            logger.error(
                "%s: %s; the value in use is kept",
                self.setting,
                exc,
                extra={"setting": self.setting},
            )
            return Reread(self.setting, problem=str(exc))
        if value == self._value:
            return Reread(self.setting)
        REDACT.add([value, *value.split()[-1:]])
        self._value = value
        for listener in self._listeners:
            listener()
        return Reread(self.setting, changed=True)

    def _raw(self) -> bytes | None:
        try:
            with open(self.path, "rb") as f:
                return f.read(65_537)
        except OSError:
            return None
