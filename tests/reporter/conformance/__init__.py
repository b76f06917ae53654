"""Tests of ``reporter._conformance``: the suite passes the Python SDK and fails a producer
that breaks any one promise of the protocol."""
