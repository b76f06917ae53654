"""Benchmarks, run as scripts from the project root (``.venv/bin/python bench/<name>.py``).

A package only so that bench/pipeline.py's private parts (``bench/_*.py``) import as
``bench._name`` in the script and in its spawned child processes alike.
"""
