"""Pacing and permission: when a request may go, and how large it may be.

- ``pace``: ``Pace``, pacing and permission as the batch path asks them (permits, gate, hold),
  and what each answer says about the next request.
- ``permits``: ``Permits``, the request limiter as the workers use it, and ``make_limiter``
  (the limiter a config asks for).
- ``limiter``: token buckets, one process's or shared in Redis, granting requests at claim
  time; ``slots``: a shared GCRA in Redis, each request taking its slot right before it goes.
- ``gate``: ``SinkGate``, no claims while the endpoint fails (backing off).
- ``send_hold``: ``SendHold``, a sender held in Redis for every reporter because the endpoint
  refused our identity or configuration, until a probe passes.
- ``body_limit``: how many bytes a request body may hold, lowered by a 413.

Knows nothing of a batch's life cycle: the delivery core (``reporter._delivery``) asks it.
May import the senders (what an answer was) and the ground floor.
"""
