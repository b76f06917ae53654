"""Tests of ``reporter._sinks.nppa``: the sender against the interface description, the answer
bodies it needs, the audit trail."""
