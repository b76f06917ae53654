"""The sink kinds, one package each, and the registry that names them.

- ``base``: ``Sink``, what every kind says about itself, and the values it answers in
  (``Sender``, ``Pacing``, ``HoldSpec``, ``Freshness``, ``BodyModel``, ...).
- ``registry``: ``SINKS`` (kind name -> sink) and ``make_sink``; ``make_sender``.
- ``json``: POSTs ``{"game", "batch_id", "events"}`` to ``[sink] url``.
- ``nppa``: the national anti-addiction interface's behaviour reports; its ``wire``: the
  sealed body and the signature.
- ``print``: each batch as a JSON line on standard output.
- ``ndjson``: one JSON line per event in rotating files (``files``), handed off by rename.

In each kind's package, ``sink`` is its ``Sink``, ``sender`` its ``Sender`` and ``settings``
its own section of the file, if it has one.  May import the senders' common parts
(``reporter._senders``), ``reporter._http`` and the ground floor (``reporter._settings``);
the config (``reporter._config`` plugs the kinds' sections in), the delivery core, pacing,
the service and the commands import it.
"""
