"""``telemetry-reporter conformance -- COMMAND [ARGS...]``: hold a producer to the protocol.

Starts a private Redis-protocol server, runs every case (or those named) against the producer
started as ``COMMAND``, prints each case's verdict, and exits 0 only when every case holds.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import TextIO

from collector.store import PROTOCOL_VERSION
from reporter._conformance.cases_faults import (
    case_buffer_full,
    case_lost_call,
    case_lost_reply,
    case_producer_restart,
    case_redis_restart,
)
from reporter._conformance.cases_writes import (
    case_cap,
    case_events,
    case_keys,
    case_large_write,
    case_many_games,
    case_refusals,
    case_registry,
    case_too_large,
    case_ttl,
)
from reporter._conformance.producer import ProducerFailed
from reporter._conformance.world import Case, CaseFailed, Suite, start_server
from reporter._exceptions import ReporterError

# Every case, in the order they run: the plain writes first, the faults after.
CASES: dict[str, Case] = {
    "events": case_events,
    "keys": case_keys,
    "registry": case_registry,
    "ttl": case_ttl,
    "cap": case_cap,
    "refusals": case_refusals,
    "too-large": case_too_large,
    "many-games": case_many_games,
    "large-write": case_large_write,
    "buffer-full": case_buffer_full,
    "lost-reply": case_lost_reply,
    "lost-call": case_lost_call,
    "redis-restart": case_redis_restart,
    "producer-restart": case_producer_restart,
}
# How long any other request may take to be answered.
ANSWER_SECONDS = 10.0
EXIT_PASSED = 0
EXIT_FAILED = 1
EXIT_SETUP = 2  # as a config error: the suite could not run (what is missing is said)


def run_conformance(
    command: Sequence[str],
    out: TextIO,
    only: Sequence[str] = (),
    flush_seconds: float = 20.0,
    err: TextIO = sys.stderr,
) -> int:
    """Run the cases against ``command``: 0 if every one held, 1 if any did not, 2 if the
    suite could not run (no producer named, an unknown case, no server to start: said on
    ``err``).  ``flush_seconds``: how long a flush or a close may take (other requests: 10 s
    at most)."""
    try:
        chosen = _chosen(command, only)
        server = start_server()
    except ReporterError as exc:
        print(f"telemetry-reporter: conformance: {exc}", file=err)
        return EXIT_SETUP
    suite = Suite(command, server, min(ANSWER_SECONDS, flush_seconds), flush_seconds)
    print(
        f"conformance: producer protocol version {PROTOCOL_VERSION}; {server.name} on "
        f"127.0.0.1:{server.port}; producer: {' '.join(command)}",
        file=out,
        flush=True,
    )
    failed = []
    try:
        for name in chosen:
            if not _run_case(name, CASES[name], suite, out):
                failed.append(name)
    finally:
        server.stop()
    passed = len(chosen) - len(failed)
    verdict = "conforms" if not failed else f"does not conform ({', '.join(failed)})"
    print(f"conformance: {passed} of {len(chosen)} cases passed: the producer {verdict}", file=out)
    return EXIT_PASSED if not failed else EXIT_FAILED


def _chosen(command: Sequence[str], only: Sequence[str]) -> list[str]:
    if not command:
        raise ReporterError("name the producer to run after --")
    unknown = [name for name in only if name not in CASES]
    if unknown:
        raise ReporterError(f"unknown case {', '.join(unknown)}; the cases are {', '.join(CASES)}")
    return [name for name in CASES if not only or name in only]


def _run_case(name: str, case: Case, suite: Suite, out: TextIO) -> bool:
    started = time.monotonic()
    try:
        summary = case(suite)
    except (CaseFailed, ProducerFailed) as exc:
        _verdict(out, "FAIL", name, started, str(exc), getattr(exc, "__notes__", ()))
        return False
    except Exception as exc:  # the suite's own trouble (Redis, the relay): still a verdict
        reason = f"the case could not run: {type(exc).__name__}: {exc}"
        _verdict(out, "FAIL", name, started, reason, getattr(exc, "__notes__", ()))
        return False
    _verdict(out, "PASS", name, started, summary, ())
    return True


def _verdict(
    out: TextIO, word: str, name: str, started: float, text: str, notes: Sequence[str]
) -> None:
    took = time.monotonic() - started
    print(f"{word} {name} ({took:.1f} s): {text}", file=out, flush=True)
    for note in notes:
        print(f"     {note}", file=out)
