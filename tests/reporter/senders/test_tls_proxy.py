"""``[sink] ca_file``, the client certificate and ``[sink] proxy``, through the client every
sender uses, against local TLS endpoints and a local CONNECT proxy."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from collector import ConfigError
from collector.config import build_config, raw_settings
from reporter._config import ReporterConfig, SinkSettings
from reporter._senders.client import http_client
from tests.support.markers import secret
from tests.support.rawhttp import OK, RawServer, always
from tests.support.tlscerts import Pki, make_pki

PW = secret("proxy-pw")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def tls_server(pki: Pki) -> Iterator[Callable[..., RawServer]]:
    servers: list[RawServer] = []

    def start(require_client_cert: bool = False) -> RawServer:
        server = RawServer(always(OK), tls=pki.server_context(require_client_cert))
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


def sink(**values: Any) -> SinkSettings:
    raw = raw_settings(ReporterConfig())
    raw["sink"].update({"timeout_seconds": 5.0, **values})
    return build_config(raw, "test", env={}, interpolate=False, cls=ReporterConfig).sink


def post(settings: SinkSettings, url: str, times: int = 1) -> list[httpx.Response]:
    with http_client(settings, {}) as client:
        return [client.post(url, content=b"x") for _ in range(times)]


TRANSPORTS = ["builtin", "httpx"]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_ca_file_verifies_a_private_endpoint(
    pki: Pki, tls_server: Callable[..., RawServer], transport: str
) -> None:
    server = tls_server()
    responses = post(sink(ca_file=str(pki.ca_file), transport=transport), server.url(), 3)
    assert [r.content for r in responses] == [b"ok"] * 3
    assert server.connections == 1  # kept alive over TLS


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_without_the_ca_file_a_private_certificate_is_refused(
    tls_server: Callable[..., RawServer], transport: str
) -> None:
    server = tls_server()
    with pytest.raises(httpx.ConnectError, match=r"CERTIFICATE_VERIFY_FAILED|verify failed"):
        post(sink(transport=transport), server.url())
    assert server.requests == []


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_client_certificate_is_presented(
    pki: Pki, tls_server: Callable[..., RawServer], transport: str
) -> None:
    server = tls_server(require_client_cert=True)
    with_cert = sink(
        ca_file=str(pki.ca_file),
        client_cert_file=str(pki.client_cert),
        client_key_file=str(pki.client_key),
        transport=transport,
    )
    assert post(with_cert, server.url())[0].content == b"ok"
    with pytest.raises(httpx.TransportError):
        post(sink(ca_file=str(pki.ca_file), transport=transport), server.url())
    assert len(server.requests) == 1


def test_a_certificate_file_holding_its_key_needs_no_key_file(
    pki: Pki, tls_server: Callable[..., RawServer], tmp_path: Path
) -> None:
    both = tmp_path / "both.pem"
    both.write_bytes(pki.client_cert.read_bytes() + pki.client_key.read_bytes())
    server = tls_server(require_client_cert=True)
    settings = sink(ca_file=str(pki.ca_file), client_cert_file=str(both))
    assert post(settings, server.url())[0].content == b"ok"


@pytest.mark.parametrize(
    "values, match",
    [
        (
            {"ca_file": "/nonexistent/ca.pem"},
            r"\[sink\] ca_file: cannot load '/nonexistent/ca.pem'",
        ),
        ({"client_key_file": "/k.pem"}, r"\[sink\] client_key_file: set client_cert_file too"),
        ({"client_cert_file": "/nonexistent/c.pem"}, r"\[sink\] client_cert_file: cannot load"),
        ({"proxy": f"https://u:{PW}@proxy:3128"}, r"\[sink\] proxy: expected an http:// proxy"),
        ({"proxy": f"http://u:{PW}@proxy:port"}, r"\[sink\] proxy: "),
        ({"proxy": f"ftp://u:{PW}@proxy:21", "transport": "httpx"}, r"\[sink\] proxy: expected"),
    ],
)
def test_unusable_tls_files_and_proxies_are_config_errors(
    values: dict[str, str], match: str
) -> None:
    with pytest.raises(ConfigError, match=match) as caught:
        http_client(sink(**values), {})
    assert PW not in str(caught.value)


def test_an_encrypted_client_key_is_a_config_error_not_a_prompt(pki: Pki, tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(pki.client_key.read_bytes(), None)
    locked = tmp_path / "locked.key"
    locked.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"pw"),
        )
    )
    with pytest.raises(ConfigError, match="client_cert_file"):
        http_client(sink(client_cert_file=str(pki.client_cert), client_key_file=str(locked)), {})


class ConnectProxy:
    """An HTTP proxy for CONNECT only: checks the Proxy-Authorization value, then tunnels;
    ``silent``: reads the CONNECT and never answers."""

    def __init__(self, authorization: bytes = b"", silent: bool = False) -> None:
        self.authorization = authorization
        self.silent = silent
        self.heads: list[bytes] = []
        self.stop = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(sock,), daemon=True).start()

    def _handle(self, sock: socket.socket) -> None:
        with sock:
            head = b""
            while not head.endswith(b"\r\n\r\n"):
                byte = sock.recv(1)
                if not byte:
                    return
                head += byte
            self.heads.append(head)
            if self.silent:
                self.stop.wait(10)
                return
            if (
                self.authorization
                and (b"\r\nProxy-Authorization: " + self.authorization + b"\r\n") not in head
            ):
                sock.sendall(
                    b"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n"
                )
                return
            host, _, port = head.split(b" ")[1].decode().rpartition(":")
            with socket.create_connection((host, int(port))) as upstream:
                sock.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                pipe = threading.Thread(target=_pipe, args=(upstream, sock), daemon=True)
                pipe.start()
                _pipe(sock, upstream)
                pipe.join(5)

    def close(self) -> None:
        self.stop.set()
        self._listener.close()


def _pipe(source: socket.socket, sink_: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink_.sendall(data)
    with contextlib.suppress(OSError):
        sink_.shutdown(socket.SHUT_WR)


@pytest.fixture
def connect_proxy() -> Iterator[Callable[..., ConnectProxy]]:
    proxies: list[ConnectProxy] = []

    def start(**kwargs: Any) -> ConnectProxy:
        proxy = ConnectProxy(**kwargs)
        proxies.append(proxy)
        return proxy

    yield start
    for proxy in proxies:
        proxy.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_https_through_a_proxy_tunnel(
    pki: Pki,
    tls_server: Callable[..., RawServer],
    connect_proxy: Callable[..., ConnectProxy],
    transport: str,
) -> None:
    server = tls_server()
    proxy = connect_proxy(authorization=b"Basic dTpwdw==")  # u:pw
    settings = sink(
        ca_file=str(pki.ca_file), proxy=f"http://u:pw@127.0.0.1:{proxy.port}", transport=transport
    )
    assert [r.content for r in post(settings, server.url(), 2)] == [b"ok", b"ok"]
    assert proxy.heads[0].startswith(f"CONNECT 127.0.0.1:{server.port} HTTP/1.1\r\n".encode())
    assert server.connections == 1


def test_a_proxy_that_refuses_the_tunnel_is_a_proxy_error(
    pki: Pki, tls_server: Callable[..., RawServer], connect_proxy: Callable[..., ConnectProxy]
) -> None:
    server = tls_server()
    proxy = connect_proxy(authorization=b"Basic c29tZW9uZTplbHNl")
    settings = sink(ca_file=str(pki.ca_file), proxy=f"http://u:pw@127.0.0.1:{proxy.port}")
    with pytest.raises(httpx.ProxyError, match="407"):
        post(settings, server.url())
    assert server.connections == 0


def test_a_proxy_that_never_answers_is_cut_off_while_connecting(
    pki: Pki,
    tls_server: Callable[..., RawServer],
    connect_proxy: Callable[..., ConnectProxy],
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = tls_server()
    proxy = connect_proxy(silent=True)
    settings = sink(
        ca_file=str(pki.ca_file), proxy=f"http://127.0.0.1:{proxy.port}", timeout_seconds=0.5
    )
    with pytest.raises(httpx.ConnectTimeout, match="connecting"):
        post(settings, server.url())
    assert any("timed out while connecting" in r.getMessage() for r in caplog.records)
