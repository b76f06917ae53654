"""The ``ndjson`` sink: events appended to files in a directory, one JSON line per event,
handed off to another shipper (or kept as an archive) by an atomic rename when a file is
closed."""
