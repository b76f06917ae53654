"""Tests of the producers of ``clients/`` in other languages."""
