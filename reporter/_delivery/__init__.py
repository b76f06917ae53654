"""One batch's life, from claim to settle: the delivery core, with no threads of its own.

- ``deliverer``: claims a game's batches, sends each, settles what became of it.
- ``batches``: the batch life-cycle calls of the store, with this config's settings.
- ``attempt``: one attempt at a batch (halving on 413, setting malformed events aside).
- ``freshness``: which events are still fresh enough to send.
- ``limiter``: the request rate kept before claiming; ``gate``: no claims while the
  endpoint fails; ``body_limit``: how many bytes a request body may hold.

May import the senders and the ground floor; never the service, monitoring or commands.
"""
