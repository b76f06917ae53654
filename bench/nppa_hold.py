"""The anti-addiction sender's operator scenarios, at the interface's real times.

Each scenario runs ``telemetry-reporter run`` as a process against a private Redis (started on
a free loopback port) and the local mock of the interface (``reporter._demo.nppa_mock``),
which accepts only the new key:

- ``key``: the reporter starts with the old key in ``[nppa] secret_key_file`` and 2,000 events
  waiting.  It must hold (at most one request per probe interval, no dead letter, ``status``
  naming 1011); then the key file is rewritten and SIGHUP sent, and the same process must
  deliver all 2,000 within 30 s.
- ``resend`` / ``drop``: 300 sessions, in the window when collected, go out of it during a
  40 s hold; once the key is right, "resend" must deliver all 600 items (each logout's ``ot``
  not before its login's), "drop" must count the 600 stale and send none.
- ``future``: events stamped an hour ahead must be dead-lettered within a minute while their
  fresh neighbours go through.
- ``json``: a json-sink reporter must survive SIGHUP.

``--small`` shortens the times through the config (probe interval 2 s, a 15 s window through
``freshness_margin_seconds``, an 8 s hold) for a quick check; the suite runs the same
scenarios that way (tests/system/test_nppa_hold.py, tests/reporter/commands/test_reload.py).

    .venv/bin/python -m bench.nppa_hold [--small] [--scenario key resend drop future json]
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

from bench._harness import (
    ROOT,
    command_line,
    footer,
    header,
    parse,
    reporter_process,
    server_binary,
    start_server,
)
from collector import Collector, nppa
from collector.store import KeySchema
from reporter._config import ReporterConfig
from reporter._demo.endpoint import LocalEndpoint
from reporter._demo.nppa_mock import NppaEndpoint
from reporter._monitoring.accounting import read_totals
from reporter._pacing.send_hold import read_hold
from reporter._sinks.nppa.routes import fingerprint
from tests.support.scriptcalls import store_of
from tests.support.servers import Server, env_without_telemetry

APP = "bench-hold"
OLD, NEW = "0f1e2d3c4b5a69788796a5b4c3d2e1f0", "5a" * 16
GAMES = {f"game-{i}": f"110199999{i}" for i in range(4)}
PI = "1" * 38
PREFIX = "bench"


class Run:
    """One reporter process with its config, Redis and mock, for one scenario."""

    def __init__(
        self, server: Server, endpoint: NppaEndpoint, tmp: Path, small: bool, late: str = ""
    ) -> None:
        self.server, self.endpoint, self.tmp = server, endpoint, tmp
        self.key = tmp / "nppa.key"
        self.key.write_text(OLD + "\n")
        self.probe = 2.0 if small else 30.0
        games = "".join(f'[games."{g}"]\nbiz_id = "{b}"\n' for g, b in GAMES.items())
        self.path = tmp / "nppa.toml"
        self.path.write_text(
            f'[redis]\nurl = "{server.url}"\nkey_prefix = "{PREFIX}"\nshards = 4\n'
            "[buffer]\nmax_events_per_game = 10000\n"
            "[reporter]\nlinger_ms = 200\npoll_interval_ms = 20\n"
            f'[sink]\nkind = "nppa"\n[nppa]\nbase_url = "{endpoint.url}"\napp_id = "{APP}"\n'
            f'secret_key_file = "{self.key}"\nprobe_interval_seconds = {self.probe}\n'
            f'late_behaviour = "{late or "drop"}"\n'
            + ("freshness_margin_seconds = 165.0\n" if small and late else "")
            + games
        )
        self.config = ReporterConfig.load(str(self.path), env={})
        self.store = store_of(server.client(), KeySchema(PREFIX, 4))
        self.proc: subprocess.Popen[bytes] | None = None

    def collect(self, events: list[tuple[str, dict[str, object]]]) -> None:
        collector = Collector(config=self.config)
        for game, event in events:
            collector.collect(game, event)
        assert collector.flush(timeout=60)
        collector.close(timeout=5)

    def start(self) -> None:
        self.proc = reporter_process(self.path, self.tmp / "reporter.log")

    def stop(self) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(60)

    def held(self) -> bool:
        """Whether the reporters that use the old key are held (the key's own scope)."""
        return read_hold(self.store, f"nppa:{APP}", f"key:{APP}:{fingerprint(OLD)}").held

    def fix_key(self) -> float:
        assert self.proc is not None
        self.key.write_text(NEW + "\n")
        self.proc.send_signal(signal.SIGHUP)
        return time.monotonic()

    def accepted(self) -> int:
        with self.endpoint.lock:
            return len(self.endpoint.accepted)

    def counter(self, name: str) -> int:
        return read_totals(self.store).counter(name)

    def status(self) -> dict[str, object]:
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "reporter",
                "status",
                "--json",
                "--no-shards",
                "--config",
                str(self.path),
            ],
            cwd=ROOT,
            env=env_without_telemetry(),
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        found: dict[str, object] = json.loads(out.stdout)
        return found


def wait(condition: Callable[[], object], seconds: float) -> float | None:
    """Seconds until ``condition()`` held, or None if it did not within ``seconds``."""
    began = time.monotonic()
    while time.monotonic() - began < seconds:
        if condition():
            return time.monotonic() - began
        time.sleep(0.05)
    return None


def key(run: Run, small: bool) -> list[tuple[str, bool, str]]:
    now = int(time.time())
    run.collect(
        [
            (
                f"game-{i % 4}",
                (nppa.login if i % 8 < 4 else nppa.logout)(si=f"s{i // 8}-{i % 4}", ot=now, pi=PI),
            )
            for i in range(2000)
        ]
    )
    run.start()
    held_after = wait(run.held, 30)
    began = time.monotonic()
    hold = run.status().get("hold")
    first = len(run.endpoint.requests)
    time.sleep(3 * run.probe + 1)
    probes = len(run.endpoint.requests) - first
    held_for = time.monotonic() - began
    allowed = held_for / run.probe + 1
    dead = run.counter("dead_events")
    pid = run.proc.pid if run.proc else 0
    fixed = run.fix_key()
    drained = wait(lambda: run.accepted() == 2000, 60)
    same = run.proc is not None and run.proc.poll() is None and run.proc.pid == pid
    took = None if drained is None else time.monotonic() - fixed
    return [
        ("held", held_after is not None, f"after {held_after or 0:.1f} s"),
        (
            "status names 1011",
            isinstance(hold, dict) and hold.get("cause") == "nppa 1011",
            f"hold: {hold}",
        ),
        (
            "at most one request per probe interval",
            probes <= allowed,
            f"{probes} requests in {held_for:.0f} s held, probe interval {run.probe:g} s",
        ),
        ("no dead letter", dead == 0, f"dead_events {dead}"),
        (
            "2,000 accepted within 30 s of SIGHUP, same process",
            took is not None and took <= 30 and same,
            f"{'-' if took is None else f'{took:.1f} s'}, same process: {same}",
        ),
    ]


def late(run: Run, small: bool, behaviour: str) -> list[tuple[str, bool, str]]:
    window = 15 if small else 170
    hold_seconds = 8 if small else 40
    now = int(time.time())
    lead = hold_seconds - 3  # in the window when collected, out of it before the hold ends
    login, logout = now - window + lead, now - window + lead + 2
    run.collect(
        [("game-0", nppa.login(si=f"s{i:04d}", ot=login, pi=PI)) for i in range(300)]
        + [("game-0", nppa.logout(si=f"s{i:04d}", ot=logout, pi=PI)) for i in range(300)]
    )
    run.start()
    wait(run.held, 30)
    time.sleep(max(0.0, now + hold_seconds - time.time()))
    run.fix_key()
    if behaviour == "drop":
        stale = wait(lambda: run.counter("stale") == 600, 60)
        return [
            (
                "600 counted stale, none sent",
                stale is not None and run.accepted() == 0,
                f"stale {run.counter('stale')}, accepted {run.accepted()}",
            )
        ]
    done = wait(lambda: run.accepted() == 600, 60)
    with run.endpoint.lock:
        items = [a.item for a in run.endpoint.accepted]
    times: dict[str, dict[int, int]] = defaultdict(dict)
    for item in items:
        times[item["si"]][item["bt"]] = item["ot"]
    ordered = all(t.get(0, 0) >= t.get(1, 0) for t in times.values())
    return [
        ("all 600 accepted", done is not None, f"accepted {run.accepted()}"),
        (
            "each logout's ot not before its login's",
            ordered and len(times) == 300,
            f"{len(times)} sessions",
        ),
        (
            "counted as late_sent",
            wait(lambda: run.counter("late_sent") == 600, 10) is not None,
            f"late_sent {run.counter('late_sent')}",
        ),
    ]


def future(run: Run, small: bool) -> list[tuple[str, bool, str]]:
    run.key.write_text(NEW + "\n")
    now = int(time.time())
    run.collect(
        [("game-1", nppa.login(si=f"f{i}", ot=now + 3600, pi=PI)) for i in range(50)]
        + [("game-1", nppa.login(si=f"n{i}", ot=now, pi=PI)) for i in range(50)]
    )
    run.start()
    dead = wait(lambda: run.counter("dead_events") == 50, 60)
    return [
        (
            "an hour ahead: dead-lettered within a minute",
            dead is not None,
            f"{'-' if dead is None else f'{dead:.1f} s'}",
        ),
        (
            "the fresh neighbours accepted",
            wait(lambda: run.accepted() == 50, 30) is not None,
            f"accepted {run.accepted()}",
        ),
    ]


def json_sink(server: Server, tmp: Path) -> list[tuple[str, bool, str]]:
    with LocalEndpoint() as endpoint:
        path = tmp / "json.toml"
        path.write_text(
            f'[redis]\nurl = "{server.url}"\nkey_prefix = "{PREFIX}"\n'
            f'[sink]\nurl = "{endpoint.url}"\n'
        )
        proc = reporter_process(path, tmp / "json.log")
        wait(lambda: "telemetry-reporter: config" in (tmp / "json.log").read_text(), 60)
        proc.send_signal(signal.SIGHUP)
        time.sleep(1)
        alive = proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(60)
    logged = "SIGHUP: no secret file to re-read" in (tmp / "json.log").read_text()
    return [
        (
            "a json reporter survives SIGHUP",
            alive and code == 0 and logged,
            f"alive after SIGHUP: {alive}, exit {code}, logged: {logged}",
        )
    ]


def main(argv: Sequence[str] | None = None) -> int:
    scenarios = ["key", "resend", "drop", "future", "json"]
    ap = command_line(__doc__)
    ap.add_argument("--scenario", choices=scenarios, nargs="+", default=scenarios)
    args = parse(
        ap, argv, {}, also="probe interval 2 s, a 15 s window, an 8 s hold (about a minute)"
    )
    binary = server_binary()
    header()
    ok = True
    for scenario in args.scenario:
        server = start_server(binary)
        tmp = Path(tempfile.mkdtemp(prefix="telemetry-bench-hold-"))
        began = time.monotonic()
        try:
            if scenario == "json":
                checks = json_sink(server, tmp)
            else:
                with NppaEndpoint(app_id=APP, secret_key=NEW, biz_ids=GAMES.values()) as endpoint:
                    run = Run(
                        server,
                        endpoint,
                        tmp,
                        args.small,
                        scenario if scenario in ("resend", "drop") else "",
                    )
                    try:
                        if scenario == "key":
                            checks = key(run, args.small)
                        elif scenario == "future":
                            checks = future(run, args.small)
                        else:
                            checks = late(run, args.small, scenario)
                    finally:
                        if run.proc is not None:
                            run.stop()
        finally:
            server.cleanup()
        print(f"{scenario} ({time.monotonic() - began:.0f} s)", flush=True)
        for name, passed, detail in checks:
            print(f"  {'ok  ' if passed else 'FAIL'} {name}: {detail}", flush=True)
            ok &= passed
    print("PASS" if ok else "FAIL")
    footer()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
