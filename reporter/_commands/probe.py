"""``check-config --connect``: does Redis answer, and does the sink?

Each probe says ok or failed in one line (secrets masked).  Redis gets a PING through the
backend ``run`` would use.  The sink gets what its kind does for it
(``Sink.check_connection``): the json sink one request of a method that sends no events
(HEAD by default), through the same client ``run`` builds (TLS files, client certificate,
proxy, configured headers), where any HTTP answer proves the network path, TLS and proxy,
except 401, 403 and 407, which say the credentials were refused; the anti-addiction
interface a signed report with no items, which proves the app id, the bizId and the key
without reporting anything (3002: they passed; 1011: the key or signature did not).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import httpx

from collector import BackendError
from collector.store import describe_settings, open_store
from reporter._config import ReporterConfig
from reporter._pacing.permits import Permits, PermitsPacer
from reporter._pacing.slots import SharedSlots
from reporter._sinks.base import Pacer, SlotRate
from reporter._sinks.registry import make_sink


@dataclass(frozen=True)
class Probe:
    target: str  # "redis" or "sink"
    ok: bool
    detail: str

    def line(self) -> str:
        return f"{self.target}: {'ok' if self.ok else 'failed'}: {self.detail}"


def probe_redis(config: ReporterConfig) -> Probe:
    where = describe_settings(config.redis)
    began = time.monotonic()
    try:
        store = open_store(config.redis)
        try:
            store.ping()
        finally:
            store.close()
    except BackendError as exc:
        return Probe("redis", False, str(exc))  # it names the server
    return Probe("redis", True, f"{where} answered PING in {_ms(began)}")


def probe_sink(
    config: ReporterConfig, method: str = "HEAD", transport: httpx.BaseTransport | None = None
) -> Probe:
    """What the sink's ``check_connection`` finds (``Sink.check_connection``).  A sink paced
    by slots (the anti-addiction interface) takes each request's slot of the rate the
    running reporters share in Redis, so probing many bizIds never puts a second over the
    interface's limit; with Redis out of reach (no reporter can send either) its requests
    are only spaced by the rate."""
    sink = make_sink(config)
    pacing = sink.pacing()
    if not isinstance(pacing, SlotRate):
        found = sink.check_connection(method, transport)
        return Probe("sink", found.ok, found.detail)
    store = None
    try:
        store = open_store(config.redis)
        store.ping()
        slots = SharedSlots(store, pacing.name, pacing.per_second, pacing.scope)
        pacer: Pacer = PermitsPacer(Permits(slots, slots), threading.Event())
    except BackendError:
        pacer = Spaced(pacing.per_second)
    try:
        found = sink.check_connection(method, transport, pacer)
    finally:
        if store is not None:
            store.close()
    return Probe("sink", found.ok, found.detail)


class Spaced:
    """Requests ``1 / rate`` apart in this process (a ``Pacer`` without Redis)."""

    def __init__(self, rate: float) -> None:
        self._interval = 1 / rate
        self._next = 0.0

    def one(self, game: str) -> bool:
        wait = self._next - time.monotonic()
        if wait > 0:
            threading.Event().wait(wait)
        self._next = time.monotonic() + self._interval
        return True

    def on_time(self, game: str) -> bool:
        return True


def _ms(began: float) -> str:
    return f"{(time.monotonic() - began) * 1000:.0f} ms"
