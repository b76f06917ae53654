"""Tests of ``reporter._demo``: the demo, its local endpoint and the mock of the anti-addiction
interface."""
