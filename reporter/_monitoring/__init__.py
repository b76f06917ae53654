"""What the reporter tells about itself and about Redis: ``/metrics``, ``/healthz``,
``/readyz``, and the accounting of every event.

- ``prometheus``: the ``/metrics`` exposition (this process's counts, readings of Redis).
- ``server``: the HTTP server of those endpoints (its connections handled by
  ``reporter._http``'s ``BoundedServer``).
- ``health``: alive and ready.
- ``levels``: cached readings of Redis and of the claim limiter.
- ``accounting``: every shard's counters from Redis, and whether they add up (``status``,
  the demo, the tests).

May import pacing (the limiter and the hold it reports on), the config, ``reporter._http``
and the ground floor.
"""
