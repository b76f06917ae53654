"""Tests of ``reporter._ingest``: the HTTP ingest as a producer in another language reaches
it, its command and its limits."""
