"""telemetry-collector's reporter service: drains Redis buffers and POSTs fixed-size batches.

Run it as ``telemetry-reporter run`` (or ``python -m reporter run``); embed it with
``ReporterService(ReporterConfig.load())``.
"""

from reporter._exceptions import ReporterError, SinkConfigError
from reporter._senders.outcome import Outcome
from reporter._service.service import ReporterService

__all__ = ["Outcome", "ReporterError", "ReporterService", "SinkConfigError"]
