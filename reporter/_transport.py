"""An httpx transport over the standard library's ``http.client``, one connection per thread.

httpx's default transport (httpcore) costs about 1 ms of CPU per POST here, several times what
``http.client`` needs, and the reporter is CPU-bound on small POSTs.  This transport keeps the
``httpx.Client`` interface (timeouts, headers, ``MockTransport`` in tests) and does the wire work
with ``http.client``: keep-alive connections, one per worker thread, no connection pool lock.
It does not do HTTP/2 or proxies; set ``[sink] transport = "httpx"`` for those.
"""

from __future__ import annotations

import http.client
import ssl
import threading

import httpx


class StdlibTransport(httpx.BaseTransport):
    def __init__(self, connect_timeout: float, timeout: float) -> None:
        self._connect_timeout = connect_timeout
        self._timeout = timeout
        self._local = threading.local()
        self._ssl = ssl.create_default_context()
        self._all: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    def _connection(self, url: httpx.URL) -> tuple[http.client.HTTPConnection, bool]:
        """This thread's connection to ``url``'s origin, and whether it was used before."""
        origin = (url.scheme, url.host, url.port)
        conns: dict[tuple[str, str, int | None], http.client.HTTPConnection] = getattr(
            self._local, "conns", None) or {}
        self._local.conns = conns
        conn = conns.get(origin)
        if conn is not None:
            return conn, True
        if url.scheme == "https":
            conn = http.client.HTTPSConnection(url.host, url.port,
                                               timeout=self._connect_timeout, context=self._ssl)
        else:
            conn = http.client.HTTPConnection(url.host, url.port, timeout=self._connect_timeout)
        conns[origin] = conn
        with self._lock:
            self._all.append(conn)
        return conn, False

    def _forget(self, url: httpx.URL, conn: http.client.HTTPConnection) -> None:
        conn.close()
        self._local.conns.pop((url.scheme, url.host, url.port), None)
        with self._lock:
            if conn in self._all:  # close() may have taken the list already
                self._all.remove(conn)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        body = request.read()
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers.raw]
        target = url.raw_path.decode("ascii")
        for _ in range(2):
            conn, reused = self._connection(url)
            try:
                if conn.sock is None:
                    conn.connect()
                    conn.sock.settimeout(self._timeout)  # type: ignore[attr-defined]
                conn.putrequest(request.method, target, skip_host=True,
                                skip_accept_encoding=True)
                for name, value in headers:
                    conn.putheader(name, value)
                conn.endheaders(body)
                response = conn.getresponse()
                content = response.read()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as exc:
                self._forget(url, conn)
                if reused:
                    continue  # the server closed an idle keep-alive connection: once more
                raise httpx.RemoteProtocolError(str(exc), request=request) from exc
            except TimeoutError as exc:
                self._forget(url, conn)
                raise httpx.ReadTimeout(str(exc) or "timed out", request=request) from exc
            except (OSError, http.client.HTTPException) as exc:
                self._forget(url, conn)
                raise httpx.ConnectError(str(exc), request=request) from exc
            if response.will_close:
                self._forget(url, conn)
            return httpx.Response(response.status, headers=response.getheaders(),
                                  content=content, request=request)
        raise httpx.RemoteProtocolError("connection closed twice", request=request)

    def close(self) -> None:
        with self._lock:
            conns, self._all = self._all, []
        for conn in conns:
            conn.close()

