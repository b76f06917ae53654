"""The metrics seam: every count and level goes through one small protocol, by the names of the
shared vocabulary (``collector.counters``).

``Collector(metrics=...)`` and ``ReporterService(metrics=...)`` take any object with these
methods; the default is ``NO_METRICS`` (does nothing).  ``Tally`` is the in-process
implementation: it backs ``Collector.stats()`` and the reporter's ``stopped:`` line.
``collector.prometheus.PrometheusMetrics`` is one for a host that runs prometheus-client.

- ``count(counter, amount)``: a counter went up; ``add({counter: amount, ...})``: several.
- ``watch(name, read)``: report ``name`` as whatever ``read()`` returns when asked: a level
  (a ``Gauge``), or a count kept elsewhere (the SDK's buffer keeps ``accepted``).
- ``observe(histogram, value)``: one observation (a POST's duration, a batch's size).
  Optional: an object written before histograms existed, without ``observe``, still works
  (``FanOut`` skips it for observations); ``Tally`` and ``NO_METRICS`` ignore them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Protocol

from collector.counters import Counter, Gauge, Histogram

Name = Counter | Gauge
Reader = Callable[[], float]


class Metrics(Protocol):
    def count(self, counter: Counter, amount: int = 1) -> None: ...

    def add(self, amounts: Mapping[Counter, int]) -> None: ...

    def watch(self, name: Name, read: Reader) -> None: ...

    def observe(self, name: Histogram, value: float) -> None: ...


class NoMetrics:
    """Counts nothing; the default."""

    def count(self, counter: Counter, amount: int = 1) -> None:
        pass

    def add(self, amounts: Mapping[Counter, int]) -> None:
        pass

    def watch(self, name: Name, read: Reader) -> None:
        pass

    def observe(self, name: Histogram, value: float) -> None:
        pass


NO_METRICS = NoMetrics()


class Tally:
    """Counters and watched values of this process, thread-safe, vocabulary names only."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[Counter, int] = {}
        self._watched: dict[Name, Reader] = {}

    def count(self, counter: Counter, amount: int = 1) -> None:
        if type(counter) is not Counter:
            raise TypeError(f"not a counter of the vocabulary: {counter!r}")
        with self._lock:
            self._counts[counter] = self._counts.get(counter, 0) + amount

    def add(self, amounts: Mapping[Counter, int]) -> None:
        """Several counts at once (under one lock)."""
        if any(type(counter) is not Counter for counter in amounts):
            raise TypeError(f"not counters of the vocabulary: {list(amounts)!r}")
        with self._lock:
            for counter, amount in amounts.items():
                if amount:
                    self._counts[counter] = self._counts.get(counter, 0) + amount

    def watch(self, name: Name, read: Reader) -> None:
        if type(name) not in (Counter, Gauge):
            raise TypeError(f"not a name of the vocabulary: {name!r}")
        with self._lock:
            self._watched[name] = read

    def observe(self, name: Histogram, value: float) -> None:
        """Checked, not kept (``stats()`` and the stopped: line hold counts and levels)."""
        if type(name) is not Histogram:
            raise TypeError(f"not a histogram of the vocabulary: {name!r}")

    def get(self, counter: Counter) -> int:
        with self._lock:
            return self._counts.get(counter, 0)

    def counted(self) -> dict[str, int]:
        """The counters counted so far, by name (no watched values)."""
        with self._lock:
            return {str(c): n for c, n in self._counts.items()}

    def snapshot(self) -> dict[str, int]:
        """Every counter counted so far and every watched value, by name."""
        with self._lock:
            out = {str(c): n for c, n in self._counts.items()}
            watched = list(self._watched.items())
        out.update({str(name): int(read()) for name, read in watched})
        return out


class FanOut:
    """Reports to several targets: a component's own tally and the injected metrics."""

    def __init__(self, *targets: Metrics) -> None:
        self._targets = targets
        # An implementation from before histograms (no observe) keeps working.
        self._observers = tuple(t for t in targets if callable(getattr(t, "observe", None)))

    def count(self, counter: Counter, amount: int = 1) -> None:
        for target in self._targets:
            target.count(counter, amount)

    def add(self, amounts: Mapping[Counter, int]) -> None:
        for target in self._targets:
            target.add(amounts)

    def watch(self, name: Name, read: Reader) -> None:
        for target in self._targets:
            target.watch(name, read)

    def observe(self, name: Histogram, value: float) -> None:
        for target in self._observers:
            target.observe(name, value)


def fan_out(tally: Tally, *metrics: Metrics) -> Metrics:
    """``tally`` alone when every one of ``metrics`` is the no-op default, else all of them
    but the no-op."""
    targets = [m for m in metrics if m is not NO_METRICS]
    return FanOut(tally, *targets) if targets else tally
