"""Benchmarks: each public module is a script run from the project root as
``.venv/bin/python -m bench.<name>`` (``--help`` says what it measures, ``--small`` runs it in
seconds).  What the scripts share is in ``bench._harness``; the other ``bench._*`` modules are
the parts of one script.  docs/benchmarks.md has what each measures and its figures.
"""
