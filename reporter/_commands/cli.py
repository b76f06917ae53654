"""The ``telemetry-reporter`` command line.

The global options (``--config FILE``, ``-v`` / ``--log-level LEVEL``, ``--log-format
text|json``) are accepted before or after the command, and after ``dead``'s action.

Exit codes: 0 done; 1 not found (``dead show``, ``dead replay``), a purge declined, or an
unexpected error (one line; the traceback under ``-v``); 2 bad usage or a config error;
3 Redis unavailable or refusing (any redis-py or network error, one line).  A reader that
closes the pipe early (``check-config f | head -1``) ends the command quietly.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import logging
import os
import signal
import socket
import sys
import threading
import traceback
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING

import redis.exceptions

from collector import BackendError, ConfigError
from collector.config import CONFIG_ENV
from collector.counters import REPORTER
from collector.logs import counted
from collector.store import BackendUnavailable, describe_settings, open_store
from collector.text import printable
from reporter._commands.audit import add_audit_parser, run_audit
from reporter._commands.dead import add_dead_parser, replay_budget, run_dead
from reporter._commands.status import run_status
from reporter._config import ReporterConfig
from reporter._constants import SIGNAL_POLL_SECONDS
from reporter._exceptions import ReporterError, SinkConfigError
from reporter._logging import (
    FORMAT_ENV,
    FORMATS,
    LEVEL_ENV,
    LEVELS,
    REDACT,
    configure_logging,
    log_settings,
    masked_url,
    note_secrets,
)
from reporter._sinks.registry import make_sink

if TYPE_CHECKING:
    from reporter._service.stopping import Stopped

PROG = "telemetry-reporter"
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_CONFIG = 2
EXIT_UNAVAILABLE = 3
EXIT_INTERRUPTED = 130

EXIT_CODES = """exit codes:
  0  done
  1  not found (dead show, dead replay), purge declined, or an unexpected error
  2  bad usage or a config error
  3  Redis unavailable or refusing the request"""

# What a Redis error usually means, by a word of its message: a hint for the one-line error.
REDIS_HINTS = (
    (
        "no master found",
        "no sentinel named a healthy primary: check [redis] sentinels, "
        "sentinel_service and sentinel_password",
    ),
    (
        "cluster mode is not enabled",
        "[redis] cluster = true, but the server is not a cluster node: set cluster = false",
    ),
    (
        "cluster support disabled",
        "[redis] cluster = true, but the server is not a cluster node: set cluster = false",
    ),
    ("moved ", "the server is a cluster node: set [redis] cluster = true"),
    ("protocol error", "is [redis] url the address of a Redis server?"),
    ("noauth", "the server wants a password: redis://[user]:PASSWORD@host:port/db"),
    (
        "authentication required",
        "the server wants a password: redis://[user]:PASSWORD@host:port/db",
    ),
    ("wrongpass", "check the user name and password in [redis] url"),
    ("invalid username-password", "check the user name and password in [redis] url"),
    ("timeout", "check [redis] url, the network, and connect_timeout_seconds"),
    ("connecting to", "check [redis] url and that the server is running"),
)
# The store's errors, and network errors that did not pass through the store (a bug if they
# ever do: status and dead talk to nothing but Redis).
REDIS_ERRORS: tuple[type[BaseException], ...] = (
    BackendError,
    redis.exceptions.RedisError,
    redis.exceptions.RedisClusterException,
    ConnectionError,
    TimeoutError,
    socket.gaierror,
    socket.herror,
)

logger = logging.getLogger("reporter")


def package_version() -> str:
    try:
        return importlib.metadata.version("telemetry-collector")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


# -- the parser --------------------------------------------------------------------------------


def _global_options(parser: argparse.ArgumentParser, suppress: bool) -> None:
    """The options every command takes.  On the commands they default to SUPPRESS, so a value
    given before the command is not reset by the command's parser."""
    default = argparse.SUPPRESS if suppress else None
    group = parser.add_argument_group("global options (before or after the command)")
    group.add_argument(
        "--config",
        metavar="FILE",
        default=default,
        help=f"config file (default: ${CONFIG_ENV}, else the packaged default)",
    )
    group.add_argument(
        "-v",
        "--verbose",
        dest="log_level",
        action="store_const",
        const="debug",
        default=default,
        help="log at debug level, and show the traceback of an unexpected error",
    )
    group.add_argument(
        "--log-level",
        dest="log_level",
        type=str.lower,
        choices=LEVELS,
        default=default,
        help=f"default: ${LEVEL_ENV}, else info",
    )
    group.add_argument(
        "--log-format",
        type=str.lower,
        choices=FORMATS,
        default=default,
        help=f"text, or json: one object per line (default: ${FORMAT_ENV}, else text)",
    )


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0.1 <= value <= 86400:
        raise argparse.ArgumentTypeError(f"expected seconds from 0.1 to 86400, found {text!r}")
    return value


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        epilog=EXIT_CODES,
        description="Drain buffered game telemetry and report it.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"{PROG} {package_version()}")
    _global_options(p, suppress=False)
    common = argparse.ArgumentParser(add_help=False)
    _global_options(common, suppress=True)
    commands = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser("run", parents=[common], help="run the reporter service")
    commands.add_parser(
        "ingest",
        parents=[common],
        help="serve POST /v1/games/<game>/events: events over HTTP, written through the SDK",
    )
    status = commands.add_parser(
        "status", parents=[common], help="show counters, reporters, shards and games"
    )
    status.add_argument("--json", action="store_true", help="print it as JSON")
    status.add_argument(
        "--watch",
        type=_seconds,
        metavar="SECONDS",
        help="print it again every SECONDS until Ctrl-C",
    )
    status.add_argument(
        "--no-shards",
        action="store_true",
        help="only the counters, alerts and reporters: cheap for many shards "
        "and games (no per-shard or per-game reads)",
    )
    check = commands.add_parser(
        "check-config", parents=[common], help="validate a config file and print it, secrets masked"
    )
    check.add_argument(
        "file", nargs="?", help="the file (default: --config, else what run would read)"
    )
    check.add_argument(
        "--connect",
        action="store_true",
        help="also PING Redis and send the sink one request without events; exit 3 if either fails",
    )
    check.add_argument(
        "--probe-method",
        choices=("HEAD", "OPTIONS", "GET"),
        default="HEAD",
        help="the method of the sink's probe request (default: HEAD)",
    )
    demo = commands.add_parser(
        "demo", parents=[common], help="run the whole pipeline on a private server"
    )
    demo.add_argument(
        "--seconds",
        type=_seconds,
        default=15.0,
        metavar="SECONDS",
        help="how long the simulated games send events (default: 15); the "
        "demo then waits for the last of them to be delivered",
    )
    demo.add_argument(
        "--sink",
        choices=("json", "nppa"),
        default="json",
        help="json: a local ingest endpoint; nppa: a local mock of the anti-addiction interface",
    )
    conformance = commands.add_parser(
        "conformance",
        parents=[common],
        help="hold a producer to the producer protocol: conformance -- COMMAND [ARGS...]",
        description="Start a private Redis-protocol server and run the conformance cases "
        "against the producer started as COMMAND, spoken to over its standard input and "
        "output (docs/protocol.md). Exit 0 only when every case holds.",
    )
    conformance.add_argument(
        "--case",
        action="append",
        default=[],
        metavar="NAME",
        help="run only this case (repeatable; default: all of them)",
    )
    conformance.add_argument(
        "--timeout",
        type=_seconds,
        default=20.0,
        metavar="SECONDS",
        help="how long a flush or a close may take before its case fails (default: 20)",
    )
    conformance.add_argument(
        "producer",
        nargs=argparse.REMAINDER,
        metavar="-- COMMAND [ARGS...]",
        help="the producer to run, after --",
    )
    add_dead_parser(commands, common)
    add_audit_parser(commands, common)
    return p


# -- main --------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:  # --help, --version, or bad usage (argparse said why)
        return exc.code if isinstance(exc.code, int) else EXIT_CONFIG
    try:
        level, fmt = log_settings(args.log_level, args.log_format, os.environ)
    except ValueError as exc:
        return _fail(str(exc), EXIT_CONFIG)
    REDACT.clear()
    configure_logging(level, fmt)
    return _guarded(lambda: _dispatch(args), debug=level == "debug")


def _guarded(work: Callable[[], int], debug: bool) -> int:
    """``work()``'s exit code; every error turned into one line and its exit code."""
    try:
        code = work()
        sys.stdout.flush()  # a reader gone shows here, not at exit
        return code
    except BrokenPipeError:  # stdout closed early (| head): not an error of ours
        _discard_stdout()
        return EXIT_OK
    except (ConfigError, ReporterError) as exc:
        return _refused(exc)
    except REDIS_ERRORS as exc:
        return _fail(redis_problem(exc), EXIT_UNAVAILABLE)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception as exc:
        if debug:
            print(
                REDACT(printable("".join(traceback.format_exception(exc)), keep="\n")),
                end="",
                file=sys.stderr,
            )
        return _fail(
            f"unexpected error: {type(exc).__name__}: {exc}"
            + ("" if debug else " (run with -v for the traceback)"),
            EXIT_FAILED,
        )


def _refused(exc: ConfigError | ReporterError) -> int:
    if isinstance(exc, ConfigError | SinkConfigError):
        return _fail(f"config error: {exc}", EXIT_CONFIG)
    return _fail(str(exc), EXIT_FAILED)  # such as the metrics address taken: it may pass


def redis_problem(exc: BaseException) -> str:
    """One line: what went wrong talking to Redis, and a hint when the message suggests
    one."""
    text = " ".join(str(exc).split())
    refused = isinstance(exc, BackendError) and not isinstance(exc, BackendUnavailable)
    hint = next((h for word, h in REDIS_HINTS if word in text.lower()), "")
    return f"{'Redis refused the request' if refused else 'Redis unavailable'}: {text}" + (
        f" ({hint})" if hint else ""
    )


def _fail(message: str, code: int) -> int:
    print(REDACT(f"{PROG}: {printable(' '.join(message.splitlines()))}"), file=sys.stderr)
    return code


def _discard_stdout() -> None:
    """Point stdout at /dev/null, so the flush at exit does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # not a real file (tests): nothing will flush to a pipe
        pass


def _standalone(args: argparse.Namespace) -> int | None:
    """The exit code of a command that reads no config of its own (None for the others)."""
    if args.command == "check-config":
        return _check_config(args.file or args.config, args.connect, args.probe_method)
    if args.command == "conformance":
        from reporter._conformance.suite import run_conformance

        command = args.producer[1:] if args.producer[:1] == ["--"] else args.producer
        return run_conformance(command, sys.stdout, args.case, args.timeout)
    if args.command == "demo":
        from reporter._demo.run import run_demo

        return run_demo(args.seconds, sys.stdout, args.sink)
    return None


def _dispatch(args: argparse.Namespace) -> int:
    code = _standalone(args)
    if code is not None:
        return code
    config = ReporterConfig.load(args.config)
    note_secrets(config)
    if args.command in ("run", "ingest", "audit"):
        return _without_store(config, args)
    if not args.config and not os.environ.get(CONFIG_ENV):
        _note(
            f"no --config and no ${CONFIG_ENV}: using {config.source}, "
            f"{describe_settings(config.redis)}, key prefix {config.redis.key_prefix!r}"
        )
    store = open_store(config.redis)
    try:
        if args.command == "status":
            return run_status(store, config, args)
        return run_dead(store, args, budget=replay_budget(config))
    finally:
        store.close()


def _without_store(config: ReporterConfig, args: argparse.Namespace) -> int:
    """The commands that open what they need themselves (run, ingest) or no Redis (audit)."""
    if args.command == "run":
        return _run(config)
    if args.command == "ingest":
        from reporter._commands.ingest import run_ingest

        return run_ingest(config, StopSignals())
    return run_audit(config, args)


def _note(message: str) -> None:
    print(REDACT(f"{PROG}: {printable(message)}"), file=sys.stderr)


def _refuse_sink_problems(config: ReporterConfig) -> None:
    """What ``run`` and ``check-config`` need beyond a loadable file: a config error."""
    problems = make_sink(config).problems()
    if problems:
        raise ConfigError("\n".join(problems))


def _check_sender(config: ReporterConfig) -> None:
    """Build the sender as ``run`` would (TLS files, client certificate, proxy), without
    connecting: its config errors show in ``check-config`` too."""
    sink = make_sink(config)
    sink.sender(None, sink.open_secrets()).close()


def _check_config(path: str | None, connect: bool = False, probe_method: str = "HEAD") -> int:
    config = ReporterConfig.load(path)
    note_secrets(config)
    _refuse_sink_problems(config)
    _check_sender(config)
    for notice in [*config.notices, *make_sink(config).notices()]:
        _note(f"warning: {notice}")
    print(f"# {config.source}: valid")
    print(json.dumps(config.masked(), indent=2))
    if not connect:
        return EXIT_OK
    from reporter._commands.probe import probe_redis, probe_sink

    probes = [probe_redis(config), probe_sink(config, probe_method)]
    for probe in probes:
        print(REDACT(printable(probe.line(), keep="\n")))  # a sink may say a line per part
    return EXIT_OK if all(p.ok for p in probes) else EXIT_UNAVAILABLE


def sink_description(config: ReporterConfig) -> str:
    """The sink's kind and where it sends, password and query values masked."""
    return make_sink(config).describe()


def metrics_listen(config: ReporterConfig) -> str:
    """``[metrics] listen``, if this version has it ("" when off or absent)."""
    return str(getattr(getattr(config, "metrics", None), "listen", "") or "")


def startup_line(config: ReporterConfig, limiter: str) -> tuple[str, dict[str, object]]:
    """The start-up log line and its structured fields: config file, Redis (masked), sink
    (masked), shards, thread pools, metrics address."""
    r = config.reporter
    pools = {
        "default": r.workers,
        "control": 2,
        **{f"hot:{game}": threads for game, threads in r.hot_games.items()},
    }
    redis_url = (
        describe_settings(config.redis)
        if config.redis.sentinels
        else f"{'cluster' if config.redis.cluster else 'redis'} {masked_url(config.redis.url)}"
    )
    fields: dict[str, object] = {
        "version": package_version(),
        "config": config.source,
        "redis": redis_url,
        "sink": sink_description(config),
        "limiter": limiter,
        "shards": config.redis.shards,
        "pools": pools,
        "metrics": metrics_listen(config) or "off",
    }
    message = (
        f"{PROG}: config {config.source}; {redis_url}; key prefix "
        f"{config.redis.key_prefix!r}; {counted(config.redis.shards, 'shard')}; sink "
        f"{fields['sink']} ({limiter}); pools "
        + ", ".join(f"{name}={threads}" for name, threads in pools.items())
        + f"; metrics {fields['metrics']}; version {fields['version']}"
    )
    return message, fields


def stopped_line(stopped: Stopped) -> tuple[str, dict[str, object]]:
    """The summary at exit: every counter of this process's tally, in the vocabulary's order,
    zeros included; then the batches left to lease expiry and the jobs still blocked, if
    any."""
    line = {str(name): stopped.counts.get(str(name), 0) for name in REPORTER}
    rest = stopped.summary()
    return (
        "stopped: "
        + ", ".join(f"{name}={n}" for name, n in line.items())
        + (f"; {rest}" if rest else ""),
        {
            "counters": line,
            "left_to_lease": list(stopped.left_to_lease),
            "blocked_jobs": list(stopped.blocked_jobs),
        },
    )


class StopSignals:
    """SIGTERM and SIGINT: the first asks for a graceful stop, a second exits at once.
    SIGHUP asks to read the secret files again (``on_reload``); it never stops the process.

    The handlers only count: they run on the main thread between two bytecodes, possibly
    while that thread holds a lock (an ``Event``'s, say), so taking any lock in them could
    deadlock the process.  The main thread polls the counts instead."""

    def __init__(self) -> None:
        self.received = 0
        self.reloads = 0

    def on_reload(self, signum: int, frame: FrameType | None) -> None:
        self.reloads += 1

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.received += 1
        if self.received > 1:  # logging's locks are reentrant: safe to take here
            logger.warning("second signal: exiting now; leases will recover the rest")
            os._exit(1)


def _run(config: ReporterConfig) -> int:
    signals = StopSignals()
    if hasattr(signal, "SIGHUP"):  # not on Windows; first: a SIGHUP never stops a reporter
        signal.signal(signal.SIGHUP, signals.on_reload)
    from reporter._service.service import ReporterService

    _refuse_sink_problems(config)
    service = ReporterService(config)
    signal.signal(signal.SIGTERM, signals.on_signal)
    signal.signal(signal.SIGINT, signals.on_signal)
    for notice in config.notices:
        logger.warning(notice)
    message, fields = startup_line(config, service.limiter.describe())
    logger.info("%s", message, extra=fields)
    service.start()
    idle = threading.Event()  # never set: a wait that a signal handler does not touch
    reloads = 0
    while not signals.received:
        idle.wait(SIGNAL_POLL_SECONDS)
        if signals.reloads != reloads:  # one re-read for any number of SIGHUPs meanwhile
            reloads = signals.reloads
            try:
                service.reload("SIGHUP")
            except Exception:  # a bug: SIGHUP must never stop a reporter
                logger.exception("SIGHUP: re-reading the secret files failed; running on")
    logger.info(
        "stopping: no new claims; waiting up to %gs for in-flight POSTs",
        config.reporter.grace_seconds,
    )
    stopped = service.stop()
    message, fields = stopped_line(stopped)
    logger.info("%s", message, extra=fields)
    if stopped.blocked_jobs:  # the interpreter would wait for their threads: do not
        logger.warning(
            "exiting without %s blocked on Redis or the endpoint",
            counted(len(stopped.blocked_jobs), "job"),
        )
        logging.shutdown()
        os._exit(0)
    return 0
