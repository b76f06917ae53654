"""The sink kinds, one package each, and the registry that names them.

- ``registry``: ``make_sender`` (from ``[sink] kind``) and the ``Sender`` interface.
- ``json``: POSTs ``{"game", "batch_id", "events"}`` to ``[sink] url``.
- ``nppa``: the national anti-addiction interface's behaviour reports (``sender``) and its
  sealed body and signature (``wire``).
- ``print``: each batch as a JSON line on standard output.

May import the senders' common parts (``reporter._senders``), ``reporter._http`` and the
ground floor; the delivery core, pacing, the service and the commands import it.
"""
