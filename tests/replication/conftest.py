"""The reporter's fixtures (endpoint, make_service) and the SDK's (make_collector) together."""

from tests.collector.conftest import make_collector
from tests.reporter.conftest import endpoint, make_service

__all__ = ["endpoint", "make_collector", "make_service"]
