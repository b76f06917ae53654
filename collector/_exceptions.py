"""Errors raised by the collector package (the SDK and its store layer).

Every error derives from one root, so callers can catch the whole family::

    TelemetryError
    ├── ConfigError             the config file, an environment override or a keyword
    │                           argument is wrong
    └── BackendError            Redis failed
        ├── BackendUnavailable  Redis did not answer: refused, reset or timed-out connection,
        │                       cluster down, server loading
        └── BackendRefused      Redis answered with an error: out of memory, read-only replica,
                                a script error, a wrong key type

In background mode the SDK never raises ``BackendError`` into game code (it counts, logs and
retries); sync-mode ``collect()`` and the store layer (``collector.store``) raise it.
redis-py's own exceptions never leave the store layer: they are the ``__cause__``.

Programmer errors at the call site stay built-in: a game name that is not a str is a
``TypeError``, a str that is not a valid name a ``ValueError``, and an event that is not a
JSON-serialisable mapping a ``TypeError``.
"""

from __future__ import annotations


class TelemetryError(Exception):
    """Root of every error this package raises on purpose."""


class ConfigError(TelemetryError):
    """A setting is unknown, of the wrong type or out of range; the message names it."""


class BackendError(TelemetryError):
    """Redis failed; the message names the server (password masked) and what it said."""


class BackendUnavailable(BackendError):
    """Redis did not answer; trying again later may work."""


class BackendRefused(BackendError):
    """Redis answered the command with an error."""
