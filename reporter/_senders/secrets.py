"""Secrets read from files, swapped at run time: the anti-addiction key (``[nppa]
secret_key_file``) and the json sink's header values (``[sink] header_files``).

A ``SecretFile`` holds the value in use; senders read it per request (``file()``).  It is
read again on SIGHUP (``reread``) and whenever its content changes (``poll``, every few
seconds: a mounted Kubernetes secret is replaced in place, with no signal).  A new value is
validated before it is used: a file that cannot be read or does not hold a valid value keeps
the one in use, with an ERROR that names the file and what is wrong, never a value.  Every
value read is added to the log's list of secrets to mask.  Which settings a sink reads
from files is the sink's to say (``reporter._sinks.base.Sink.secret_files``).

Reading is safe whatever the path holds now: only a regular file is read (a FIFO, device or
directory is refused without waiting on it), at most 64 KiB of it.  A changed file is taken
only once two looks a poll apart find the same content, and only if it did not change while
it was read, so a file caught half-written is never used: a header value cut short is as
valid as a whole one.  A SIGHUP reads at once (the operator says the file is ready).  A file
that its group or everyone may read is taken, with a WARNING (once for each mode seen).

A value can be proved before it is used (``vet_with``; the anti-addiction key is proved with
a request that reports nothing): a new value the endpoint refuses is not used, and the one
in use stays, with an ERROR; one that cannot be proved now (the endpoint does not answer) is
tried again later, the one in use staying meanwhile.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from reporter._logging import REDACT
from reporter._settings import read_regular_file, readable_by_others

logger = logging.getLogger("reporter")
# What a look at a file reads at most: its validation refuses anything past 64 KiB anyway.
RAW_BYTES = 64 * 1024
# A new value that could not be proved (the endpoint did not answer) is tried again this
# much later, not at every look.
PROVE_AGAIN_SECONDS = 30.0


@dataclass(frozen=True, slots=True)
class Vetted:
    """What proving a new value found: ``ok`` (use it); else ``why`` not, and ``later``:
    it could not be told now (try again), else it was refused."""

    ok: bool
    why: str = ""
    later: bool = False


ACCEPTED = Vetted(True)


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
        self._seen = self._raw()  # the content last read, valid or not
        # A new content (None: the file could not be read) seen once, to be seen again.
        self._pending: tuple[bytes | None] | None = None
        self._exposed = ""  # who else may read the file, as last warned about
        self._vet: Callable[[str], Vetted] | None = None
        self._prove_at = 0.0  # a value not proved yet is not tried again before (monotonic)
        REDACT.add([self._value, *self._value.split()[-1:]])
        self._warn_if_exposed()

    def __call__(self) -> str:
        """The value in use (a plain read: no lock)."""
        return self._value

    def vet_with(self, vet: Callable[[str], Vetted]) -> None:
        """Prove every new value with ``vet`` before it is used."""
        self._vet = vet

    def subscribe(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` after every change of the value."""
        self._listeners.append(listener)

    def poll(self) -> Reread | None:
        """Read the file again if its content changed since the last read and then stayed
        the same for one more look (one being written is not taken half-way); None if
        there is nothing new yet."""
        with self._lock:
            raw = self._raw()
            if raw == self._seen:
                self._pending = None
                return None
            if time.monotonic() < self._prove_at:
                return None  # a value that could not be proved yet: not at every look
            if self._pending != (raw,):
                self._pending = (raw,)
                return None
            return self._reread(raw)

    def reread(self) -> Reread:
        """Read the file again (SIGHUP)."""
        with self._lock:
            return self._reread(self._raw())

    def _reread(self, before: bytes | None) -> Reread:
        """Read and check the value of the file whose content was just ``before``."""
        self._pending = None
        try:
            value = self._read(self.path)
            if self._raw() != before:
                raise ValueError(f"{self.path!r} changed while it was read")
        except ValueError as exc:
            self._seen = before
            logger.error(
                "%s: %s; the value in use is kept",
                self.setting,
                exc,
                extra={"setting": self.setting},
            )
            return Reread(self.setting, problem=str(exc))
        self._warn_if_exposed()
        if value == self._value:
            self._seen = before
            return Reread(self.setting)
        REDACT.add([value, *value.split()[-1:]])
        if self._vet is not None:
            verdict = self._vet(value)
            if not verdict.ok:
                return self._not_proved(before, verdict)
        self._seen = before
        self._prove_at = 0.0
        self._value = value
        for listener in self._listeners:
            listener()
        return Reread(self.setting, changed=True)

    def _not_proved(self, before: bytes | None, verdict: Vetted) -> Reread:
        """A new value not used: refused (kept out until the file changes again or a
        SIGHUP), or not provable now (tried again a while later)."""
        if verdict.later:
            self._prove_at = time.monotonic() + PROVE_AGAIN_SECONDS
            problem = (
                f"the new value could not be proved ({verdict.why}); tried again within "
                f"{PROVE_AGAIN_SECONDS:.0f} s"
            )
            logger.warning(
                "%s: %s; the value in use is kept meanwhile",
                self.setting,
                problem,
                extra={"setting": self.setting},
            )
        else:
            self._seen = before
            problem = f"the new value was refused ({verdict.why})"
            logger.error(
                "%s: %s; the value in use is kept (write a value that passes, or SIGHUP to "
                "try this one again)",
                self.setting,
                problem,
                extra={"setting": self.setting},
            )
        return Reread(self.setting, problem=problem)

    def _raw(self) -> bytes | None:
        """The file's bytes (up to one past the bound), or None if it cannot be read."""
        try:
            return read_regular_file(self.path, RAW_BYTES)
        except ValueError:
            return None

    def _warn_if_exposed(self) -> None:
        exposed = readable_by_others(self.path)
        if exposed and exposed != self._exposed:
            logger.warning(
                "%s: %r may be read by %s: make it readable by its owner only (chmod 600, "
                "or defaultMode 0400 on a Kubernetes secret volume)",
                self.setting,
                self.path,
                exposed,
                extra={"setting": self.setting},
            )
        self._exposed = exposed
