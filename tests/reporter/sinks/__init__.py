"""Tests of ``reporter._sinks``: the registry here, each kind in the folder of its name."""
