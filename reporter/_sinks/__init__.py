"""The sink kinds, one package each, and the registry that names them.

- ``base``: ``Sink``, what every kind says about itself, and the values it answers in
  (``Sender``, ``Pacing``, ``HoldSpec``, ``Freshness``, ``BodyModel``, ...).
- ``registry``: ``SINKS`` (kind name -> sink) and ``make_sink``; ``make_sender``.
- ``json``: POSTs ``{"game", "batch_id", "events"}`` to ``[sink] url``.
- ``nppa``: the national anti-addiction interface's behaviour reports; its ``wire``: the
  sealed body and the signature.
- ``print``: each batch as a JSON line on standard output.

In each kind's package, ``sink`` is its ``Sink`` and ``sender`` its ``Sender``.  May import
the senders' common parts (``reporter._senders``), ``reporter._http`` and the ground floor;
the delivery core, pacing, the service and the commands import it.
"""
