"""A bounded server's bounds, and the count of the connections it shed to keep them."""

from __future__ import annotations

import threading
from dataclasses import dataclass

OVER_CAP, DEADLINE, BAD_REQUEST = "over_cap", "deadline", "bad_request"
DROP_REASONS = (OVER_CAP, DEADLINE, BAD_REQUEST)
# Served at 0 from the start: Prometheus's increase() cannot see the first count of a series
# that appears with it, and running out of descriptors is what an alert must not miss.
ACCEPT_ERRORS_SHOWN = ("EMFILE", "ENFILE")


@dataclass(frozen=True)
class Limits:
    max_connections: int = 64
    request_seconds: float = 5.0
    answer_seconds: float = 10.0
    workers: int = 2
    max_body_bytes: int = 64 * 1024  # a longer request body is answered 413

    @property
    def health_reserve(self) -> int:
        """The last slots of ``max_connections``, kept for health probes where the server
        has any: a connection that gets one may ask only for a health path (PostgreSQL keeps
        its last connection slots for superusers the same way).  An eighth of the cap, at
        least one, none at a cap of 1."""
        return min(self.max_connections - 1, max(1, self.max_connections // 8))


class Counts:
    """Connections the server closed on its own, by reason, and failed accepts, by errno
    name; read from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._dropped = dict.fromkeys(DROP_REASONS, 0)
        self._accept_errors = dict.fromkeys(ACCEPT_ERRORS_SHOWN, 0)

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
