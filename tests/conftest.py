"""The fixtures of every test folder are in ``tests/support/fixtures.py``.

Which folder a test goes in, and what goes in ``tests/support/``: ``tests/README.md``."""

pytest_plugins = ["tests.support.fixtures"]
