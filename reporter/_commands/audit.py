"""``telemetry-reporter audit session <si>``: what the sink's audit trail says of a session
(the anti-addiction sink's: was its login and logout reported, when, and what was the
answer; ``reporter._sinks.nppa.trail``).  It reads files, never Redis.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, TextIO

from reporter._config import ReporterConfig
from reporter._sinks.registry import audit_sink

EXIT_FOUND, EXIT_NONE = 0, 1


def add_audit_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    audit = commands.add_parser(
        "audit", parents=[common], help="read the anti-addiction audit trail"
    )
    actions = audit.add_subparsers(dest="action", required=True, metavar="ACTION")
    session = actions.add_parser(
        "session",
        parents=[common],
        help="was this session's login and logout reported, when, and what was the answer",
    )
    session.add_argument("si", help="the session id (si)")
    session.add_argument(
        "--dir", help="the trail's directory (default: [nppa] audit_directory of the config)"
    )
    session.add_argument("--json", action="store_true", help="print it as JSON")


def run_audit(config: ReporterConfig, args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Exit 0 when the trail has a record of the session, 1 when it has none."""
    found, text = audit_sink(config).audit_session(args.si, args.dir or "", args.json)
    (out or sys.stdout).write(text)
    return EXIT_FOUND if found else EXIT_NONE
