"""The ``print`` sink: each batch written to standard output as one JSON line.

- ``sink``: ``PrintSink``; ``sender``: ``PrintSender``.
"""
