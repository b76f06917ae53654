"""The metrics server's bounds, and the count of the connections it shed to keep them."""

from __future__ import annotations

import threading
from dataclasses import dataclass

OVER_CAP, DEADLINE, BAD_REQUEST = "over_cap", "deadline", "bad_request"
DROP_REASONS = (OVER_CAP, DEADLINE, BAD_REQUEST)


@dataclass(frozen=True)
class Limits:
    max_connections: int = 64
    request_seconds: float = 5.0
    answer_seconds: float = 10.0
    workers: int = 2


class Counts:
    """Connections the server closed on its own, by reason, and failed accepts, by errno
    name; read from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._dropped = dict.fromkeys(DROP_REASONS, 0)
        self._accept_errors: dict[str, int] = {}

    def drop(self, reason: str) -> None:
        with self._lock:
            self._dropped[reason] += 1

    def accept_error(self, code: str) -> None:
        with self._lock:
            self._accept_errors[code] = self._accept_errors.get(code, 0) + 1

    def dropped(self) -> dict[str, int]:
        with self._lock:
            return dict(self._dropped)

    def accept_errors(self) -> dict[str, int]:
        with self._lock:
            return dict(self._accept_errors)
