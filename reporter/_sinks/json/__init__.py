"""The ``json`` sink: each batch POSTed to ``[sink] url`` as one JSON document.

- ``sink``: ``JsonSink``, what the kind needs (its header files, ``--connect``'s request).
- ``sender``: ``JsonSender``, the request of a batch and its answer as an ``Outcome``.
"""
