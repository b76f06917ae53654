"""How many things happened close together: the most timestamps in any half-open window of
a given length that starts at one of them (a sliding second, as a rate limit counts it)."""

from __future__ import annotations

from collections.abc import Sequence


def busiest(times: Sequence[float], window: float) -> int:
    """The most of ``times`` in any ``[t, t + window)`` with ``t`` one of them; 0 for none."""
    ordered = sorted(times)
    return max((sum(1 for u in ordered if t <= u < t + window) for t in ordered), default=0)
