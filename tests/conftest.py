"""The fixtures of every test folder are in ``tests/support/fixtures.py``."""

pytest_plugins = ["tests.support.fixtures"]
