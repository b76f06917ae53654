"""The one place that maps a ``[sink] kind`` to its sink: ``SINKS``, and ``make_sink``.

Everything else asks the sink (``reporter._sinks.base.Sink``) what it needs.  A new kind is a
package of its own and one line here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType

import httpx

from reporter._exceptions import SinkConfigError
from reporter._senders.secrets import SecretFile
from reporter._sinks.base import Sender, Sink, SinkConfig
from reporter._sinks.json.sink import JsonSink
from reporter._sinks.ndjson.sink import NdjsonSink
from reporter._sinks.nppa.sink import NppaSink
from reporter._sinks.print.sink import PrintSink

SINKS: Mapping[str, type[Sink]] = MappingProxyType(
    {sink.kind: sink for sink in (JsonSink, NppaSink, PrintSink, NdjsonSink)}
)

__all__ = ["SINKS", "Sender", "audit_sink", "make_sender", "make_sink", "sink_sections"]


def make_sink(config: SinkConfig) -> Sink:
    """The sink of ``[sink] kind``."""
    kind = SINKS.get(config.sink.kind)
    if kind is None:
        raise SinkConfigError(f"[sink] kind: no sink named {config.sink.kind!r}")
    return kind(config)


def audit_sink(config: SinkConfig) -> Sink:
    """The sink whose audit trail ``telemetry-reporter audit`` reads: the configured kind's,
    else the one kind that keeps one (a trail copied elsewhere is read with ``--dir``,
    without its reporter's config)."""
    sink = make_sink(config)
    if sink.keeps_audit:
        return sink
    keeping = [kind for kind in SINKS.values() if kind.keeps_audit]
    return keeping[0](config) if len(keeping) == 1 else sink


def sink_sections() -> dict[str, type]:
    """Every kind's own section of the file, by name, for the config to plug in."""
    return {sink.section: sink.settings for sink in SINKS.values() if sink.settings is not None}


def make_sender(
    config: SinkConfig,
    transport: httpx.BaseTransport | None = None,
    secrets: Sequence[SecretFile] | None = None,
) -> Sender:
    """The sender of ``[sink] kind``; ``secrets``: the secret files it reads (by default
    those of ``config``, read now)."""
    sink = make_sink(config)
    return sink.sender(transport, sink.open_secrets() if secrets is None else secrets)
