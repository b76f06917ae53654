"""Tests of ``collector.store`` and the Lua scripts of ``lua/``: each call and script on real
servers, one call at a time, and what it leaves in Redis."""
