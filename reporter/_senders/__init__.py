"""What every sender shares: the answer's ``Outcome``, the HTTP client, secrets from files.

- ``outcome``: ``Outcome`` and the pure functions that classify answers.
- ``client``: the keep-alive ``httpx.Client`` every HTTP sender uses, built from ``[sink]``,
  over the lean transport of ``reporter._http`` (or httpx's own).
- ``secrets``: values read from files, swapped at run time.
- ``bodies``: the JSON body of a batch (the ``json`` sink's request, the ``print`` sink's line).

The senders themselves are the sink kinds' (``reporter._sinks``).  Knows nothing of Redis or
of a batch's life cycle: imports only ``reporter._http``, the ground floor and
``collector``'s public modules.
"""
