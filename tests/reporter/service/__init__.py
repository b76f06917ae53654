"""Tests of ``reporter._service``: the running service, its workers and schedule, shard
ownership between reporters."""
