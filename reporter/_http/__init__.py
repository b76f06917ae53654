"""The reporter's own HTTP/1.1: the senders' client transport, and the server of the metrics
endpoint and the ingest.

Client side:

- ``transport``: ``SocketTransport``, the lean keep-alive transport under the senders'
  ``httpx.Client`` (a pool of sockets, proxies, reuse, the deadline's warnings).
- ``client_wire``: one exchange on one socket under one deadline.

Server side:

- ``bounded_server``: ``BoundedServer``, one selector thread and a few workers that an
  outsider cannot turn against the process (deadlines, a cap, accept back-off).
- ``server_wire``: the little of HTTP/1.1 it speaks (a request head in, an answer out).
- ``chunked``: a request body sent in chunks, decoded as it arrives (the ingest takes them).
- ``shedding``: its bounds, and the count of what it shed to keep them.

Knows nothing of sinks, batches, metrics or Redis: imports only the ground floor and
``collector``'s public modules.
"""
