"""Errors raised by the reporter package.

    ReporterError
    └── SinkConfigError    the sink cannot be built from its settings

Configuration errors are ``collector.ConfigError`` (the config model is shared).  Delivery
failures are not exceptions: a sender turns every response and transport error into an
``Outcome`` (see ``reporter._senders.outcome``).
"""

from __future__ import annotations


class ReporterError(Exception):
    """Root of every error this package raises on purpose."""


class SinkConfigError(ReporterError):
    """The ``[sink]`` settings cannot make a working sender."""
