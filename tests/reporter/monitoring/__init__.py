"""Tests of ``reporter._monitoring``: ``/metrics``, ``/healthz`` and ``/readyz`` from a running
reporter, and the server under hostile clients."""
