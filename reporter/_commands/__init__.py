"""The operator's commands: the ``telemetry-reporter`` command line and what it runs besides
the service and the demo.

- ``cli``: the parser, the global options, exit codes, and ``run`` / ``check-config``.
- ``status``: shards, games, counters and live reporters, once or watched; its sections
  (holds, alerts, quarantine, memory, reporters, hot games, repeats kept) in
  ``status_sections``, each as text and as JSON.
- ``dead``: list, show, replay and purge dead letters.
- ``probe``: ``check-config --connect`` (does Redis answer, does the sink?).
- ``audit``: ``telemetry-reporter audit session``, what the sink's audit trail says of a
  session (files only, never Redis).
- ``ingest``: ``telemetry-reporter ingest``, the HTTP ingest server, until SIGTERM.

The top of the reporter: it may import every other package here; none imports it.
"""
