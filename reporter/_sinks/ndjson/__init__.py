"""The ``ndjson`` sink: events appended to files in a directory, one JSON line per event,
handed off to another shipper (or kept as an archive) by an atomic rename when a file is
closed.

- ``sink``: ``NdjsonSink``, what the kind needs (no rate, no hold, ``--connect`` writes a file).
- ``settings``: the ``[sink.ndjson]`` section and its checks.
- ``sender``: ``NdjsonSender``, a batch as its lines, and whether they were written.
- ``files``: ``RotatingFiles``, the open file, its rotation by size and age, its hand-off.
"""
