"""Errors raised by the collector package.

Every error derives from one root, so callers can catch the whole family::

    TelemetryError
    ├── ConfigError        the config file, an environment override or a keyword argument is wrong
    └── BackendError       Redis could not be reached or refused a command (sync mode only)

Programmer errors at the call site stay built-in: a bad game name is a ``ValueError`` and an
event that is not a JSON-serialisable mapping is a ``TypeError``.
"""

from __future__ import annotations


class TelemetryError(Exception):
    """Root of every error this package raises on purpose."""


class ConfigError(TelemetryError):
    """A setting is unknown, of the wrong type or out of range; the message names it."""


class BackendError(TelemetryError):
    """Redis failed; raised only where the caller asked to wait for the answer."""
