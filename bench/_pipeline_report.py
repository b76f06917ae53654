"""bench/pipeline.py's results and how they are printed: rows, the table, the checks, profiles.

The targets the checks hold the project to are documented in docs/benchmarks.md.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

# Targets (see docs/benchmarks.md).
TARGET_DRAIN_PER_S = 100_000
TARGET_E2E_PER_S = 50_000
LATENCY_SLACK_MS = 1000  # p99 target: linger + 1 s
RATE_TOLERANCE = 0.99  # a sustained rate within 1 % of the offered one counts as kept up


# -- results --------------------------------------------------------------------------------------


@dataclass
class Cpu:
    """CPU seconds each process used during a phase."""

    parts: dict[str, float] = field(default_factory=dict)


@dataclass
class DrainResult:
    events: int
    received: int = 0
    seconds: float = 0.0
    batches: int = 0
    duplicates: int = 0
    cpu: Cpu = field(default_factory=Cpu)

    @property
    def rate(self) -> float:
        return self.received / self.seconds if self.seconds else 0.0


@dataclass
class E2EResult:
    offered: float
    seconds: float = 0.0
    collected: int = 0
    collect_elapsed: float = 0.0
    worst_lag: int = 0
    delivered: int = 0
    duplicates: int = 0
    backlog_at_end: int = 0
    settle_s: float = 0.0
    steady_rate: float = 0.0
    min_second: int = 0
    drops: dict[str, int] = field(default_factory=dict)
    left: int = 0
    latency: Counter[int] = field(default_factory=Counter)
    batches: int = 0
    cpu: Cpu = field(default_factory=Cpu)

    @property
    def collect_rate(self) -> float:
        return self.collected / self.collect_elapsed if self.collect_elapsed else 0.0

    @property
    def counted_drops(self) -> int:
        return sum(self.drops.values())

    @property
    def lost(self) -> int:
        return self.collected - self.delivered - self.counted_drops - self.left

    def pct(self, q: float) -> float:
        return percentile(self.latency, q)


def percentile(hist: Mapping[int, int], q: float) -> float:
    total = sum(hist.values())
    if not total:
        return float("nan")
    rank = q * (total - 1)
    seen = 0
    for value in sorted(hist):
        seen += hist[value]
        if seen > rank:
            return float(value)
    return float(max(hist))


# -- report ---------------------------------------------------------------------------------------


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def fmt_rate(value: float) -> str:
    return f"{value:,.0f}"


def ratio(ours: float, base: float) -> str:
    return f"{ours / base:.2f}x" if base else "-"


Row = tuple[str, str, str, str]


def drain_rows(ours: DrainResult, base: DrainResult | None) -> list[Row]:
    def cell(fn: Callable[[DrainResult], str], r: DrainResult | None) -> str:
        return fn(r) if r is not None else "-"

    specs: list[tuple[str, Callable[[DrainResult], str], bool]] = [
        ("1. drain+POST events/s (1 process)", lambda r: fmt_rate(r.rate), True),
        ("   events pre-loaded / received", lambda r: f"{r.events:,} / {r.received:,}", False),
        ("   start -> last event received (s)", lambda r: f"{r.seconds:.2f}", False),
        (
            "   POSTs / mean events per POST",
            lambda r: f"{r.batches:,} / {r.received / max(1, r.batches):.1f}",
            False,
        ),
        ("   duplicate events received", lambda r: f"{r.duplicates:,}", False),
    ]
    rows = [
        (
            label,
            cell(fn, ours),
            cell(fn, base),
            ratio(ours.rate, base.rate) if with_ratio and base else "",
        )
        for label, fn, with_ratio in specs
    ]
    for name in ("reporter", "redis", "endpoint"):
        rows.append(
            (
                f"   CPU s per 100k events: {name}",
                _cpu(ours, name),
                _cpu(base, name) if base else "-",
                "",
            )
        )
    rows.append(("   reporter process: cores busy", _busy(ours), _busy(base) if base else "-", ""))
    return rows


def median_pair(pairs: Sequence[dict[str, DrainResult]]) -> dict[str, DrainResult]:
    """The round whose ours/baseline ratio is the median (the lower middle one of an even
    count); without a baseline, the round with the median rate of ours."""

    def key(pair: dict[str, DrainResult]) -> float:
        base = pair.get("baseline")
        return pair["ours"].rate / base.rate if base and base.rate else pair["ours"].rate

    ranked = sorted(pairs, key=key)
    return ranked[(len(ranked) - 1) // 2]


def print_rounds(pairs: Sequence[dict[str, DrainResult]]) -> None:
    """Each round's drain+POST ratio, in order, and their median."""
    ratios = [p["ours"].rate / p["baseline"].rate if p["baseline"].rate else 0.0 for p in pairs]
    middle = median_pair(pairs)
    chosen = middle["ours"].rate / middle["baseline"].rate if middle["baseline"].rate else 0.0
    print(
        f"drain+POST ours/base by round (order alternating): "
        f"{' '.join(f'{r:.2f}x' for r in ratios)}; median {chosen:.2f}x over "
        f"{len(ratios)} round{'s' if len(ratios) > 1 else ''}"
    )


def _busy(r: DrainResult) -> str:
    return f"{r.cpu.parts.get('reporter', 0) / r.seconds:.2f}" if r.seconds else "-"


def e2e_rows(ours: E2EResult, base: E2EResult | None) -> list[Row]:
    specs: list[tuple[str, Callable[[E2EResult], str], Callable[[E2EResult], float] | None]] = [
        ("2. offered events/s", lambda r: fmt_rate(r.offered), None),
        ("   collected events/s", lambda r: fmt_rate(r.collect_rate), lambda r: r.collect_rate),
        (
            "   delivered events/s (steady mean)",
            lambda r: fmt_rate(r.steady_rate),
            lambda r: r.steady_rate,
        ),
        ("   delivered in the worst whole second", lambda r: f"{r.min_second:,}", None),
        ("   collector worst lag behind schedule", lambda r: f"{r.worst_lag:,} events", None),
        ("   collected", lambda r: f"{r.collected:,}", None),
        ("   delivered (unique)", lambda r: f"{r.delivered:,}", None),
        ("   counted drops", _drops, None),
        ("   still buffered after settling", lambda r: f"{r.left:,}", None),
        ("   LOST (not delivered, not counted)", lambda r: f"{r.lost:,}", None),
        ("   duplicate events received", lambda r: f"{r.duplicates:,}", None),
        ("   backlog when collecting stopped", lambda r: f"{r.backlog_at_end:,}", None),
        ("   time to drain it (s)", lambda r: f"{r.settle_s:.2f}", None),
        (
            "   POSTs / mean events per POST",
            lambda r: f"{r.batches:,} / {r.delivered / max(1, r.batches):.1f}",
            None,
        ),
        ("3. latency p50 (ms)", lambda r: f"{r.pct(0.5):,.0f}", lambda r: r.pct(0.5)),
        ("   latency p99 (ms)", lambda r: f"{r.pct(0.99):,.0f}", lambda r: r.pct(0.99)),
        ("   latency max (ms)", lambda r: f"{r.pct(1.0):,.0f}", None),
    ]
    rows: list[Row] = []
    for label, fn, num in specs:
        rows.append(
            (
                label,
                fn(ours),
                fn(base) if base else "-",
                ratio(num(ours), num(base)) if num and base else "",
            )
        )
    for name in ("collector", "reporter", "redis", "endpoint"):
        rows.append(
            (
                f"   CPU s per 100k events: {name}",
                _cpu(ours, name),
                _cpu(base, name) if base else "-",
                "",
            )
        )
    return rows


def _cpu(r: DrainResult | E2EResult, name: str) -> str:
    events = r.received if isinstance(r, DrainResult) else r.collected
    return f"{r.cpu.parts.get(name, 0) * 1e5 / max(1, events):.2f}"


def _drops(r: E2EResult) -> str:
    nonzero = {k: v for k, v in r.drops.items() if v}
    return ", ".join(f"{k} {v:,}" for k, v in nonzero.items()) or "0"


def print_table(rows: Sequence[Row]) -> None:
    width = max(len(r[0]) for r in rows) + 2
    cols = [max(14, *(len(r[i]) + 2 for r in rows)) for i in (1, 2, 3)]
    print(f"{'':<{width}}{'ours':>{cols[0]}}{'baseline':>{cols[1]}}{'ours/base':>{cols[2]}}")
    for label, a, b, c in rows:
        print(f"{label:<{width}}{a:>{cols[0]}}{b:>{cols[1]}}{c:>{cols[2]}}")


def print_checks(
    drain: DrainResult | None, e2e: E2EResult | None, linger_ms: int, rate: float
) -> None:
    checks: list[tuple[str, str, bool]] = []
    if drain is not None:
        checks.append(
            (
                f"drain+POST >= {TARGET_DRAIN_PER_S:,} events/s, one reporter process",
                f"{drain.rate:,.0f}/s",
                drain.rate >= TARGET_DRAIN_PER_S,
            )
        )
    if e2e is not None:
        kept_up = (
            e2e.collect_rate >= RATE_TOLERANCE * TARGET_E2E_PER_S
            and e2e.steady_rate >= RATE_TOLERANCE * TARGET_E2E_PER_S
            and e2e.backlog_at_end <= rate * (linger_ms + LATENCY_SLACK_MS) / 1000
        )
        checks.append(
            (
                f"end-to-end >= {TARGET_E2E_PER_S:,} events/s for {e2e.seconds:g} s",
                f"{e2e.steady_rate:,.0f}/s",
                kept_up and e2e.seconds >= 60,
            )
        )
        checks.append(("no loss beyond counted drops", f"{e2e.lost:,} lost", e2e.lost == 0))
        limit = linger_ms + LATENCY_SLACK_MS
        p99 = e2e.pct(0.99)
        checks.append(
            (f"latency p99 <= linger + 1 s = {limit:,} ms", f"{p99:,.0f} ms", p99 <= limit)
        )
    width = max((len(c[0]) for c in checks), default=0) + 2
    for label, value, ok in checks:
        print(f"{label:<{width}}{value:>14}  {verdict(ok)}")
    if e2e is not None and e2e.seconds < 60:
        print("(end-to-end target needs --seconds 60: this short run is a MISS by definition)")


def summarise_profile(path: Path, top: int = 15) -> None:
    """Leaf functions and inclusive functions by share of samples, from py-spy raw output."""
    leaf: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = stack.split(";")[1:]  # the first is the thread
        total += n
        if frames:
            leaf[frames[-1]] += n
        for func in {f.rpartition(":")[0] + ")" for f in frames}:  # per function, not line
            inclusive[func] += n
    if not total:
        return
    print(f"\nprofile {path.name}: {total} samples of the thread holding the GIL")
    for title, counts in (("self", leaf), ("inclusive", inclusive)):
        print(f"  top {title}:")
        for frame, n in counts.most_common(top):
            print(f"    {100 * n / total:5.1f}%  {frame}")
