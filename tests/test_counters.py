"""One vocabulary of counts (collector.counters): the scripts, ``Collector.stats()``, the
reporter's tally, ``status``, the demo summary and docs/delivery.md all use it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from collector import Collector
from collector.counters import (
    METRICS_GAUGES,
    REPORTER,
    SDK,
    SDK_GAUGES,
    STATUS_GAUGES,
    STORE,
    Counter,
    Gauge,
    Histogram,
)
from collector.metrics import Tally
from collector.store import SCRIPT_NAMES, script_text
from reporter._demo.sinks import Figures
from reporter._demo.summary import summary_rows
from reporter._monitoring.accounting import Totals

ROOT = Path(__file__).resolve().parents[1]
VOCABULARY = {str(c) for c in Counter} | {str(g) for g in Gauge} | {str(h) for h in Histogram}


def test_names_are_unique_across_counters_gauges_and_histograms() -> None:
    assert len(VOCABULARY) == len(Counter) + len(Gauge) + len(Histogram)


def test_the_metrics_endpoint_serves_gauges_of_the_vocabulary_once() -> None:
    assert len(METRICS_GAUGES) == len(set(METRICS_GAUGES))
    assert set(METRICS_GAUGES) <= set(Gauge)


def test_the_scripts_write_exactly_the_store_counters() -> None:
    increments = re.compile(r"HINCRBY', (?:KEYS\[\d+\]|stats|guard\.stats), '([a-z_]+)'")
    written = {name for script in SCRIPT_NAMES for name in increments.findall(script_text(script))}
    assert written == set(STORE)


def test_the_counters_each_script_guards_are_store_counters() -> None:
    """guard_open names the counters a script may add to (lua/_guard.lua): each must be one
    of the store's, and every counter a script adds to must be guarded."""
    opens = re.compile(r"guard_open\('[a-z_]+', KEYS\[\d+\], KEYS\[\d+\],\s*\{([^}]*)\}\)")
    names = re.compile(r"'([a-z_]+)'")
    increments = re.compile(r"HINCRBY', KEYS\[\d+\], '([a-z_]+)'")
    for script in SCRIPT_NAMES:
        text = script_text(script)
        found = opens.findall(text)
        if script == "read_shard":
            assert not found  # it writes nothing
            continue
        assert len(found) == 1, script
        guarded = set(names.findall(found[0]))
        assert guarded <= set(STORE), script
        assert set(increments.findall(text)) <= guarded, script


def test_collector_stats_are_the_sdk_counters_and_its_buffer() -> None:
    c = Collector(url="redis://127.0.0.1:1/0")
    try:
        assert set(c.stats()) == set(SDK) | set(SDK_GAUGES)
    finally:
        c.close(timeout=0)


def test_status_shows_the_store_counters_and_its_levels() -> None:
    assert set(Totals([]).summary()) == set(STORE) | set(STATUS_GAUGES)


def test_the_tally_counts_only_the_vocabulary() -> None:
    tally = Tally()
    tally.add({Counter.DELIVERED: 3})
    tally.count(Counter.DELIVERED)
    assert tally.snapshot() == {"delivered": 4}
    with pytest.raises(TypeError):
        tally.count("delivered")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        tally.add({"rejected": 1})  # type: ignore[dict-item]
    tally.observe(Histogram.BATCH_SIZE_EVENTS, 128)  # observations are checked, not kept
    assert tally.snapshot() == {"delivered": 4}
    with pytest.raises(TypeError):
        tally.observe("batch_size_events", 1)  # type: ignore[arg-type]


def test_every_reporter_counter_is_kept_by_the_store_or_the_reporter_only() -> None:
    assert set(REPORTER) <= set(Counter)
    # store_resets: each process counts the resets it sees itself (the store forgot them).
    assert set(REPORTER) & (set(SDK) - set(STORE)) == {Counter.STORE_RESETS}


def test_demo_summary_rows_are_named_by_the_vocabulary() -> None:
    rows = summary_rows(dict.fromkeys(SDK, 0), Totals([]), Figures(1, 1, 1, [1.0]))
    names = [name for name, _, _ in rows]
    ours = [n for n in names if not n.startswith(("endpoint: ", "latency "))]
    assert set(ours) <= VOCABULARY
    assert {Counter.ACCEPTED, Counter.DELIVERED, Counter.DEAD_EVENTS, Gauge.UNACCOUNTED} <= set(
        ours
    )
    assert len(names) == len(set(names))


def _doc_table(marker: str) -> list[str]:
    text = (ROOT / "docs" / "delivery.md").read_text(encoding="utf-8")
    block = text.split(f"<!-- {marker}:start -->")[1].split(f"<!-- {marker}:end -->")[0]
    return re.findall(r"^\| `([a-z_]+)` \|", block, re.MULTILINE)


def test_docs_list_every_counter_gauge_and_histogram_once() -> None:
    counters, gauges = _doc_table("counters"), _doc_table("gauges")
    assert sorted(counters) == sorted(str(c) for c in Counter)
    assert sorted(gauges) == sorted(str(g) for g in Gauge)
    assert sorted(_doc_table("histograms")) == sorted(str(h) for h in Histogram)


def test_docs_say_where_each_counter_is_kept() -> None:
    text = (ROOT / "docs" / "delivery.md").read_text(encoding="utf-8")
    block = text.split("<!-- counters:start -->")[1].split("<!-- counters:end -->")[0]
    kept = {
        name: {k.strip() for k in where.split(",")}
        for name, where in re.findall(r"^\| `([a-z_]+)` \| ([^|]+) \|", block, re.MULTILINE)
    }
    for counter in Counter:
        expected = {
            place
            for place, names in (("SDK", SDK), ("Redis", STORE), ("reporter", REPORTER))
            if counter in names
        }
        assert kept[counter] == expected, counter
