"""Tests of ``reporter._sinks.print``."""
