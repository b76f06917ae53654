"""The checkout: where it is (``ROOT``), and what the wheel is built from (``SOURCES``):
tests/test_packaging.py builds it from these, and config/deploy/Dockerfile must copy the same
(tests/test_deploy.py).  Everything else in the checkout (.venv, .git, tests, bench) is left
out."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SOURCES = ["pyproject.toml", "collector", "reporter", "lua", "config", "README.md", "LICENSE"]
