"""Tests of ``reporter._sinks.ndjson``."""
