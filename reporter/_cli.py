"""The ``telemetry-reporter`` command line."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
from types import FrameType

from collector import ConfigError
from collector.store import BackendUnavailable, open_store
from reporter._accounting import read_totals
from reporter._config import ReporterConfig
from reporter._status import render_status

EXIT_CONFIG = 2
EXIT_UNAVAILABLE = 3

logger = logging.getLogger("reporter")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="telemetry-reporter",
                                description="Drain buffered game telemetry and report it.")
    p.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG level")
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the reporter service")
    run.add_argument("--config", help="config file (default: $TELEMETRY_CONFIG or built-in)")
    status = sub.add_parser("status", help="show shards, games and counters")
    status.add_argument("--config")
    status.add_argument("--json", action="store_true", help="print the counters as JSON")
    check = sub.add_parser("check-config", help="validate a config file and print it")
    check.add_argument("file")
    demo = sub.add_parser("demo", help="run the whole pipeline on a private server")
    demo.add_argument("--seconds", type=float, default=15.0)
    demo.add_argument("--sink", choices=("json", "nppa"), default="json",
                      help="json: a local ingest endpoint; nppa: a local mock of the "
                           "anti-addiction interface")
    dead = sub.add_parser("dead", help="inspect and replay dead-lettered batches")
    dead.add_argument("--config")
    dead_sub = dead.add_subparsers(dest="action", required=True)
    dead_sub.add_parser("list", help="list dead-lettered batches")
    show = dead_sub.add_parser("show", help="show one batch with its events")
    show.add_argument("batch_id")
    replay = dead_sub.add_parser("replay", help="send dead-lettered batches again")
    replay.add_argument("batch_id", nargs="?")
    replay.add_argument("--all", action="store_true")
    dead_sub.add_parser("purge", help="delete every dead-lettered batch")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("apscheduler").setLevel(logging.WARNING)
    try:
        return _dispatch(args)
    except ConfigError as exc:
        print(f"telemetry-reporter: config error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except BackendUnavailable as exc:
        print(f"telemetry-reporter: Redis unavailable: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "check-config":
        config = ReporterConfig.load(args.file)
        for notice in [*config.notices, *_sink_notices(config)]:
            print(f"telemetry-reporter: warning: {notice}", file=sys.stderr)
        print(f"# {config.source}: valid")
        print(json.dumps(config.masked(), indent=2))
        return 0
    if args.command == "demo":
        from reporter._demo import run_demo

        return run_demo(args.seconds, sys.stdout, args.sink)
    config = ReporterConfig.load(args.config)
    if args.command == "status":
        return _status(config, args.json)
    if args.command == "dead":
        from reporter._dead import run_dead

        return run_dead(config, args)
    return _run(config)


def _sink_notices(config: ReporterConfig) -> list[str]:
    """What check-config should point out about the sink that is not an error."""
    if config.sink.kind != "nppa":
        return []
    missing = config.games_without_biz_id()
    notices = ['[sink] kind = "nppa": every game needs [games."<name>"] biz_id, its filing '
               "id; events of a game without one are dead-lettered (replay once it is set)"]
    if missing:
        notices.append("games named in the file without a biz_id: " + ", ".join(missing))
    return notices


def _status(config: ReporterConfig, as_json: bool) -> int:
    store = open_store(config.redis)
    totals = read_totals(store)
    alerts = store.alerts()
    if as_json:
        print(json.dumps({**totals.summary(), "alerts": [
            {"name": a.name, "message": a.message, "at": a.at, "count": a.count}
            for a in alerts]}, indent=2))
    else:
        print(f"redis: {store.describe()}")
        print(render_status(totals, config, alerts=alerts))
    return 0


def _run(config: ReporterConfig) -> int:
    from reporter._service import ReporterService

    service = ReporterService(config)
    stopping = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if stopping.is_set():
            service.abort_event.set()
            logger.warning("second signal: exiting now; leases will recover the rest")
            os._exit(1)
        stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    for notice in config.notices:
        logger.warning(notice)
    logger.info(service.describe())
    service.start()
    stopping.wait()
    logger.info("stopping: no new claims; waiting up to %gs for in-flight POSTs",
                config.reporter.grace_seconds)
    counts = service.stop()
    logger.info("stopped: %s", ", ".join(f"{k}={v}" for k, v in sorted(counts.items())) or
                "nothing sent")
    return 0
