"""``telemetry-reporter ingest``: events over HTTP for producers in any language, written
through the Python SDK.

- ``service``: ``IngestService``, the server and the collector it writes through, started
  and stopped together (a bounded stop that flushes).
- ``api``: the HTTP API: routes, the bearer token, what each answer says, the counts.
- ``bodies``: a request body (a JSON array, or NDJSON) as the JSON text of each event.
- ``metrics``: the counts in Prometheus form.

Imports the HTTP server of ``reporter._http``, the config (``[ingest]``), the ground floor
and ``collector``'s public modules; nothing of the reporter's service or delivery.
"""
