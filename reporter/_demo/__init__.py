"""``telemetry-reporter demo`` and the local servers it runs against.

- ``run``: the demo itself (collect, report, summarise, verdict).
- ``embedded``: a private Redis-protocol server (``valkey-server`` from the ``embedded``
  extra, or one on PATH).
- ``endpoint``: a small local JSON ingest endpoint (also used by tests and benchmarks).
- ``nppa_mock``: a local mock of the anti-addiction interface, written independently of the
  sender.
- ``sinks``, ``summary``: the demo's two endpoints and its summary table.

May import the service, monitoring and every layer below; only the commands import it.
"""
