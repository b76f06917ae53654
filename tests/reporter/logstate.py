"""A fixture for tests that run the command line in-process: ``main()`` installs a handler on
the root logger and sets its level, as a command should; put both back afterwards, so later
tests neither log at debug level nor into a capture stream that has been closed."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from reporter._logging import QUIET_LOGGERS, REDACT


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    quiet = {name: logging.getLogger(name).level for name in QUIET_LOGGERS}
    yield
    for handler in [h for h in root.handlers if h not in handlers]:
        root.removeHandler(handler)
    root.setLevel(level)
    for name, old in quiet.items():
        logging.getLogger(name).setLevel(old)
    REDACT.clear()
