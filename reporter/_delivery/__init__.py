"""One batch's life, from claim to settle: the delivery core, with no threads of its own.

- ``pipeline``: ``Pipeline``, a game's way from claim to settle as a worker drives it.
- ``claims``: ``Claimer``, claims a game's batches (as the pacing allows) or takes its due
  retries, into a ``Lease``.
- ``lease``: ``Lease``, a claim's batches; ``Result``, what became of each.
- ``deliverer``: ``Deliverer``, sends each batch of a lease and settles what became of it.
- ``attempt``: one attempt at a batch (halving on 413, setting malformed events aside).
- ``freshness``: which events are still fresh enough to send.
- ``settling``: ``Settler``, one store call per outcome (acks of a lease in one round trip).
- ``in_flight``: the batches this process holds a lease on, and the delivered ones awaiting ack.
- ``batches``: the batch life-cycle calls of the store, with this config's settings.

When a request may go and how large it may be is ``reporter._pacing``'s.  May import pacing,
the senders and the ground floor; never the service, monitoring or commands.
"""
