"""A flood of idle and half-sent connections on a running reporter's metrics port.

``telemetry-reporter run`` runs as a process with its file limit at 256 (``ulimit -n 256``,
set in the child), a private Redis and a local json endpoint, while this script collects
events for it.  Then, while the events keep coming:

- ``--connections`` connections (half idle, half with half a request line sent) are opened
  on the metrics port and kept open: every one the server closes is opened again, every
  ``--reopen-interval`` seconds, for ``--seconds``;
- ``--pipelined`` more connections each send 400 ``GET /metrics`` at once and never read an
  answer; each one the server closes is opened again at once;
- ``/healthz`` and ``/readyz`` are asked in turn every 0.1 s on a new connection (10 s
  timeout), and the answers' worst latency kept;
- the reporter's open files are counted before, during (the most) and after the flood.

Then 300 requests with a 60 KB path, each reset by the client, and the reporter's resident
memory before and after them and the ERROR lines they left in its log.  Targets: every
event collected is delivered, every probe is answered within 2 s during the flood, open files
are back to their level before it (all but the reporter's connections to Redis and the
endpoint, whose pools keep what a slowed process opened), and the 300 long paths grow the
process by less than 5 MB and log at most a few lines.

    .venv/bin/python -m bench.metrics_flood [--small] [--connections 1000] [--pipelined 70]
        [--seconds 20]
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import re
import resource
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

from bench._harness import (
    ROOT,
    command_line,
    footer,
    header,
    parse,
    server_binary,
    start_server,
)
from collector import Collector
from reporter._config import ReporterConfig
from reporter._demo.endpoint import LocalEndpoint
from tests.support.floods import PipelinedFlood
from tests.support.servers import Server, env_without_telemetry, free_port

FILE_LIMIT = 256
PROBE_TIMEOUT = 10.0
LONG_PATHS = 300
LONG_PATH_BYTES = 60_000
HALF_SENT = b"GET /metrics HTTP/1.1\r\nHost: reporter\r\nUser-Ag"


# The reporter's command line, run after ``ulimit -n 256`` in its own process.
LIMITED_REPORTER = f"""
import resource, runpy, sys
hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
resource.setrlimit(resource.RLIMIT_NOFILE, ({FILE_LIMIT}, hard))
sys.argv = ["telemetry-reporter", *sys.argv[1:]]
runpy.run_module("reporter", run_name="__main__")
"""


def open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def file_kinds(pid: int) -> list[str]:
    """What the process's open files are: paths, and sockets as local->remote port."""
    inodes = {}
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            f = line.split()
            inodes[f[9]] = f"{int(f[1].split(':')[1], 16)}->{int(f[2].split(':')[1], 16)}"
    out = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            inode = target.removeprefix("socket:[").rstrip("]")
            out.append(inodes.get(inode, target) if target.startswith("socket:") else target)
    return sorted(out)


def flood_kinds(pid: int, clients_to: set[int]) -> list[str]:
    """``file_kinds`` but the process's own connections to the ports in ``clients_to``
    (Redis, the endpoint): their pools open more connections when a slowed process has more
    calls at once, and keep them, which says nothing of what the flood left."""
    return [
        k
        for k in file_kinds(pid)
        if not ((m := re.fullmatch(r"\d+->(\d+)", k)) and int(m.group(1)) in clients_to)
    ]


def kinds_once_closed(pid: int, clients_to: set[int], before: int) -> list[str]:
    """``flood_kinds`` once the flood's connections are closed: each is within the request
    deadline (5 s) and the lingering close (1 s); a loaded host may need a little longer, a
    leak never ends, so look again until the count is back to ``before``, for 20 s at most."""
    give_up = time.monotonic() + 20
    time.sleep(7)
    kinds = flood_kinds(pid, clients_to)
    while len(kinds) > before and time.monotonic() < give_up:
        time.sleep(0.5)
        kinds = flood_kinds(pid, clients_to)
    return kinds


def rss_kb(pid: int) -> int:
    text = Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"^VmRSS:\s+(\d+) kB", text, re.M)
    return int(match.group(1)) if match else 0


class Events:
    """A game server collecting ``rate`` events a second, numbered, until stopped."""

    def __init__(self, config: ReporterConfig, rate: int) -> None:
        self.collector = Collector(config=config)
        self.rate = rate
        self.collected = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        step = 0.05
        while not self.stop.wait(step):
            for _ in range(max(1, int(self.rate * step))):
                self.collector.collect(f"game-{self.collected % 8}", {"n": self.collected})
                self.collected += 1

    def __enter__(self) -> Events:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(10)
        self.collector.flush(timeout=30)
        self.collector.close(timeout=10)


class Flood:
    """``count`` connections to ``address``, half idle and half half-sent, reopened as the
    server closes them.  Connects do not block: every attempt is made whether or not the
    server keeps up with accepting (those it has not accepted wait in its backlog, or retry
    their SYN, as an attacker's would)."""

    def __init__(self, address: tuple[str, int], count: int) -> None:
        self.address = address
        self.count = count
        self.socks: list[socket.socket | None] = [None] * count
        self.unsent: set[socket.socket] = set()  # half-sent ones still to send their part
        self.opened = 0
        self.failed = 0

    def fill(self, until: float) -> None:
        for i, sock in enumerate(self.socks):
            if sock is None and time.monotonic() < until:
                self.socks[i] = self._open(i)

    def _open(self, i: int) -> socket.socket | None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        if sock.connect_ex(self.address) not in (0, errno.EINPROGRESS):
            sock.close()
            self.failed += 1
            return None
        if i % 2:
            self.unsent.add(sock)
        self.opened += 1
        return sock

    def reap(self) -> None:
        """Send the half requests of the connections now open, and forget the connections
        the server closed."""
        for sock in _ready(list(self.unsent), write=True):
            with contextlib.suppress(OSError):
                sock.send(HALF_SENT)
            self.unsent.discard(sock)
        for sock in _ready([s for s in self.socks if s is not None], write=False):
            try:
                gone = sock.recv(4096) == b""
            except (BlockingIOError, InterruptedError):
                gone = False
            except OSError:
                gone = True
            if gone:
                self.unsent.discard(sock)
                sock.close()
                self.socks[self.socks.index(sock)] = None

    def close(self) -> None:
        for sock in self.socks:
            if sock is not None:
                sock.close()
        self.socks = [None] * self.count
        self.unsent.clear()


def _ready(socks: list[socket.socket], write: bool) -> list[socket.socket]:
    ready: list[socket.socket] = []
    poller = select.poll()
    by_fd = {s.fileno(): s for s in socks}
    for fd in by_fd:
        poller.register(fd, select.POLLOUT if write else select.POLLIN)
    for fd, _ in poller.poll(0):
        ready.append(by_fd[fd])
    return ready


def probe(address: tuple[str, int], path: str = "/healthz") -> float | None:
    """Seconds ``GET path`` took on a new connection, or None if it was not answered 200."""
    started = time.monotonic()
    try:
        with socket.create_connection(address, timeout=PROBE_TIMEOUT) as sock:
            sock.sendall(
                f"GET {path} HTTP/1.1\r\nHost: probe\r\nConnection: close\r\n\r\n".encode()
            )
            answer = b""
            while chunk := sock.recv(4096):
                answer += chunk
    except OSError:
        return None
    return time.monotonic() - started if answer.startswith(b"HTTP/1.1 200") else None


def scrape(address: tuple[str, int]) -> str:
    with socket.create_connection(address, timeout=PROBE_TIMEOUT) as sock:
        sock.sendall(b"GET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return data.decode("utf-8", "replace")


def long_paths(address: tuple[str, int]) -> int:
    """``LONG_PATHS`` requests with a 60 KB path, each reset by the client (within a minute);
    how many were sent."""
    until = time.monotonic() + 60
    sent = 0
    for i in range(LONG_PATHS):
        if time.monotonic() > until:
            break
        sent += 1
        with contextlib.suppress(OSError):
            sock = socket.create_connection(address, timeout=5)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            with contextlib.suppress(OSError):
                sock.sendall(
                    f"GET /{i}/".encode() + b"x" * LONG_PATH_BYTES + b" HTTP/1.1\r\nHost: r\r\n\r\n"
                )
            sock.close()
    return sent


def settled(endpoint: LocalEndpoint, collected: int) -> int:
    """The distinct events delivered, once all ``collected`` are (or after a minute)."""
    settle = time.monotonic() + 60
    while True:
        delivered = len({e["n"] for e in endpoint.events()})
        if delivered >= collected or time.monotonic() > settle:
            return delivered
        time.sleep(0.2)


def print_dropped(address: tuple[str, int]) -> None:
    try:
        metrics = scrape(address)
    except OSError as exc:
        print(f"  /metrics not answered: {exc}")
        return
    for reason in ("over_cap", "deadline", "bad_request"):
        found = re.search(
            rf'telemetry_metrics_connections_dropped_total{{reason="{reason}"}} '
            r"(\S+)",
            metrics,
        )
        print(
            f"  dropped by the server, {reason:<12}        "
            f"{float(found.group(1)) if found else 0:,.0f}"
        )


def print_probes(latencies: dict[str, list[float | None]]) -> bool:
    """Print how each path's probes were answered; whether all were, within 2 s."""
    ok_all = True
    for path, times in latencies.items():
        answered = [t for t in times if t is not None]
        worst = max(answered, default=float("inf"))
        ok = len(answered) == len(times) > 0 and worst < 2.0
        ok_all = ok_all and ok
        print(
            f"  {path + ' during the flood: answered':<43}{len(answered)} of {len(times)}, "
            f"worst {worst:.3f} s  {'PASS' if ok else 'FAIL'} (target < 2 s)"
        )
    return ok_all


def long_path_phase(address: tuple[str, int], pid: int, log: Path) -> bool:
    errors_before, rss_before = error_lines(log), rss_kb(pid)
    sent = long_paths(address)
    time.sleep(2)
    growth_mb = (rss_kb(pid) - rss_before) / 1024
    logged = error_lines(log) - errors_before
    ok = growth_mb < 5 and logged <= 3 and sent == LONG_PATHS
    print(
        f"  {sent} requests with 60 KB paths: RSS growth  {growth_mb:.1f} MB, "
        f"ERROR lines {logged}  {'PASS' if ok else 'FAIL'} (target < 5 MB, <= 3)"
    )
    print(f"  reporter ERROR lines in the whole run      {error_lines(log)}")
    return ok


def error_lines(log: Path) -> int:
    return sum(1 for line in log.read_text(errors="replace").splitlines() if " ERROR " in line)


def main(argv: list[str] | None = None) -> int:
    parser = command_line(__doc__)
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument(
        "--pipelined", type=int, default=70, help="connections that never read their answers"
    )
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rate", type=int, default=500, help="events collected per second")
    parser.add_argument("--reopen-interval", type=float, default=0.5)
    args = parse(parser, argv, {"connections": 300, "pipelined": 20, "seconds": 4.0, "rate": 200})
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    with contextlib.suppress(ValueError, OSError):  # this side holds the flood's sockets
        resource.setrlimit(
            resource.RLIMIT_NOFILE, (min(hard, args.connections + args.pipelined + 512), hard)
        )

    header()
    binary = server_binary()
    with tempfile.TemporaryDirectory(prefix="metrics-flood-") as tmp, LocalEndpoint() as endpoint:
        server = start_server(binary)
        try:
            return run(args, Path(tmp), server, endpoint)
        finally:
            server.stop()


def run(args: argparse.Namespace, tmp: Path, server: Server, endpoint: LocalEndpoint) -> int:
    port = free_port()
    address = ("127.0.0.1", port)
    path = tmp / "reporter.toml"
    path.write_text(
        f'[redis]\nurl = "{server.url}"\nshards = 4\n'
        "[reporter]\nlinger_ms = 200\npoll_interval_ms = 20\n"
        f'[sink]\nurl = "{endpoint.url}"\n'
        f'[metrics]\nlisten = "127.0.0.1:{port}"\n'
    )
    config = ReporterConfig.load(str(path), env={})
    log = tmp / "reporter.log"
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", LIMITED_REPORTER, "run", "--config", str(path)],
            cwd=ROOT,
            env=env_without_telemetry(),
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        deadline = time.monotonic() + 60
        while probe(address) is None:
            if proc.poll() is not None or time.monotonic() > deadline:
                print(log.read_text()[-3000:], file=sys.stderr)
                return 1
            time.sleep(0.2)
        return measure(args, proc, address, config, endpoint, log)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        proc.wait(60)


def measure(
    args: argparse.Namespace,
    proc: subprocess.Popen[bytes],
    address: tuple[str, int],
    config: ReporterConfig,
    endpoint: LocalEndpoint,
    log: Path,
) -> int:
    pid = proc.pid
    latencies: dict[str, list[float | None]] = {"/healthz": [], "/readyz": []}
    print(
        f"metrics flood: {args.connections} connections ({args.connections // 2} idle, "
        f"{args.connections - args.connections // 2} half-sent) and {args.pipelined} "
        f"pipelining /metrics unread, for {args.seconds:g} s, reporter file limit "
        f"{FILE_LIMIT}, {args.rate} events/s collected"
    )
    flood = Flood(address, args.connections)
    stop = threading.Event()

    def probing() -> None:
        while not stop.wait(0.1):
            for path, times in latencies.items():
                times.append(probe(address, path))

    with Events(config, args.rate) as events:
        # Open files are compared under the same load: the reporter's connections to Redis
        # and to the endpoint are open once events flow.
        warm = time.monotonic() + 30
        while not endpoint.events() and time.monotonic() < warm:
            time.sleep(0.1)
        time.sleep(2)
        clients_to = {urlsplit(config.redis.url).port or 6379, urlsplit(config.sink.url).port or 80}
        files_before = files_during = open_files(pid)
        kinds_before = flood_kinds(pid, clients_to)
        prober = threading.Thread(target=probing, daemon=True)
        prober.start()
        ends = time.monotonic() + args.seconds
        pipelined = PipelinedFlood(address, args.pipelined, timeout=PROBE_TIMEOUT)
        with pipelined:
            while time.monotonic() < ends:
                flood.fill(ends)
                files_during = max(files_during, open_files(pid))
                time.sleep(args.reopen_interval)
                flood.reap()
            stop.set()
            prober.join(2 * PROBE_TIMEOUT + 5)
        flood.close()
        kinds_after = kinds_once_closed(pid, clients_to, len(kinds_before))
        files_after = open_files(pid)
    collected = events.collected
    delivered = settled(endpoint, collected)

    ok_events = delivered == collected and proc.poll() is None
    ok_files = len(kinds_after) <= len(kinds_before)
    if not ok_files:
        print(f"  open after the flood, not before: {sorted(set(kinds_after) - set(kinds_before))}")
    for label, opened, failed in [
        ("connections opened by the flood", flood.opened, flood.failed),
        ("pipelining connections opened", pipelined.opened, pipelined.failed),
    ]:
        print(f"  {label:<43}{opened:,} ({failed:,} connects failed)")
    print(
        f"  events collected / delivered               {collected:,} / {delivered:,}  "
        f"{'PASS' if ok_events else 'FAIL'}"
    )
    ok_health = print_probes(latencies)
    print(
        f"  open files: before / during (max) / after  {files_before} / {files_during} / "
        f"{files_after}"
    )
    print(
        f"  less Redis/endpoint clients: before/after  {len(kinds_before)} / "
        f"{len(kinds_after)}  {'PASS' if ok_files else 'FAIL'}"
    )
    ok_paths = long_path_phase(address, pid, log)
    print_dropped(address)
    footer()
    if args.small:  # timing targets are printed, not enforced, in a small run
        return 0 if ok_events and ok_files else 1
    return 0 if ok_events and ok_health and ok_files and ok_paths else 1


if __name__ == "__main__":
    sys.exit(main())
