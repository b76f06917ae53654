"""The reporter's own HTTP/1.1, client side.

- ``transport``: ``SocketTransport``, the lean keep-alive transport under the senders'
  ``httpx.Client`` (a pool of sockets, proxies, reuse, the deadline's warnings).
- ``client_wire``: one exchange on one socket under one deadline.

Knows nothing of sinks, batches or Redis: imports only the ground floor and ``collector``'s
public modules.
"""
