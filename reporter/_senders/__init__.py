"""The sink kinds: how a batch becomes a request, and an answer an ``Outcome``.

- ``sender``: the ``Sender`` interface and ``make_sender`` (from ``[sink] kind``).
- ``outcome``: ``Outcome`` and the pure functions that classify answers.
- ``json_sink``: the ``json`` sender; ``nppa`` and ``nppa_wire``: the anti-addiction
  interface's sender, its sealed body and its signature; ``print_sink``: the ``print``
  sender, each batch as a JSON line on standard output (trying the reporter without an
  endpoint).
- ``client``: the keep-alive ``httpx.Client`` every sender uses, built from ``[sink]``, over
  the lean transport of ``reporter._http`` (or httpx's own).

Knows nothing of Redis or of a batch's life cycle: imports only ``reporter._http``, the ground
floor and ``collector``'s public modules.
"""
