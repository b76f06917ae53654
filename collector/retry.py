"""The retry policy, in one place: how a failed batch comes back.

Its settings (``[retry]``, ``RetrySettings``), its value as the store's scripts take it
(``RetryPolicy``), the backoff formula (``backoff``) and the longest Retry-After honoured
(``MAX_RETRY_AFTER_SECONDS``) live here, public, so that the reporter (which reads the
settings, honours Retry-After and pauses the sink gate) and the store (whose scripts schedule
the retries) use the same ones.

The formula has one copy in Python (``backoff``) and one in Lua (``lua/_backoff.lua``, the
scripts ``nack`` and ``settle`` include it); a test runs the Lua one in a real server and
holds it equal to this one, and another counts the copies in the tree.
"""

from __future__ import annotations

from dataclasses import dataclass

from collector._sections import setting

__all__ = ["MAX_RETRY_AFTER_SECONDS", "RetryPolicy", "RetrySettings", "backoff"]

# Longest Retry-After honoured; a larger one is clamped (the anti-addiction interface's
# freshness window is 3 minutes, and a batch waiting longer than this goes stale anyway).
MAX_RETRY_AFTER_SECONDS = 600.0

# 2.0 ** this is far above any ceiling: a longer run of failures waits the longest delay,
# and the power never overflows a float (2.0 ** 1024 raises OverflowError).
_MOST_DOUBLINGS = 1000


@dataclass(frozen=True)
class RetrySettings:
    """The ``[retry]`` section: the first backoff delay, the longest, and the attempts a batch
    gets before it is dead-lettered (``initial_delay_ms`` at most ``max_delay_ms``, checked
    with the whole file)."""

    initial_delay_ms: int = setting(1000, lo=1, hi=3_600_000)
    max_delay_ms: int = setting(60_000, lo=1, hi=3_600_000)
    max_attempts: int = setting(16, lo=1, hi=1000)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How failed batches come back, as the scripts take it: backoff doubling from
    ``initial_ms`` up to ``max_ms`` with full jitter, dead-lettered after ``max_attempts``;
    ``dead_max`` dead letters kept per shard."""

    initial_ms: int
    max_ms: int
    max_attempts: int
    dead_max: int

    @classmethod
    def of(cls, retry: RetrySettings, dead_max: int) -> RetryPolicy:
        """The policy of the ``[retry]`` settings, keeping ``dead_max`` dead letters."""
        return cls(retry.initial_delay_ms, retry.max_delay_ms, retry.max_attempts, dead_max)


def backoff(
    attempt: int, first: float, longest: float, draw: float = 1.0, least: float = 0.0
) -> float:
    """The wait after failed attempt number ``attempt`` (1 for the first failure): ``first``
    doubled for each failure before it, at most ``longest``, times ``draw`` (full jitter: a
    random number in [0, 1); 1 for none), and never less than ``least`` (the endpoint's
    Retry-After).  In any unit; the scripts use ms and keep whole ms (the floor of this)."""
    ceiling = min(longest, first * 2.0 ** min(attempt - 1, _MOST_DOUBLINGS))
    return max(least, draw * ceiling)
