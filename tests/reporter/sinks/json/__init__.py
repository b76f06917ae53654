"""Tests of ``reporter._sinks.json``."""
