"""Tests of the SDK, ``collector/*.py``; the store and the Lua scripts are in ``store/``."""
