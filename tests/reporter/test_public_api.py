"""The public surface of ``reporter`` is pinned: adding or removing a name is a decision."""

from __future__ import annotations

import reporter
from reporter._exceptions import ReporterError, SinkConfigError
from reporter._senders.outcome import Outcome
from reporter._service.service import ReporterService


def test_exported_names_are_pinned() -> None:
    assert reporter.__all__ == ["Outcome", "ReporterError", "ReporterService", "SinkConfigError"]


def test_exports_are_the_real_objects() -> None:
    assert reporter.Outcome is Outcome
    assert reporter.ReporterError is ReporterError
    assert reporter.ReporterService is ReporterService
    assert reporter.SinkConfigError is SinkConfigError
    assert issubclass(SinkConfigError, ReporterError)


def test_nothing_else_public_in_the_package_namespace() -> None:
    public = {name for name in vars(reporter) if not name.startswith("_")}
    assert public == set(reporter.__all__)
