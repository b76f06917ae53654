"""``check-config --connect``: does Redis answer, and does the sink?

Each probe says ok or failed in one line (secrets masked).  Redis gets a PING through the
backend ``run`` would use.  The sink gets one request of a method that sends no events
(HEAD by default), through the same client ``run`` builds (TLS files, client certificate,
proxy, configured headers): any HTTP answer proves the network path, TLS and proxy, except
401, 403 and 407, which say the credentials were refused.  The anti-addiction interface gets
a signed report with no items instead, which proves the app id, the bizId and the key
without reporting anything (3002: they passed; 1011: the key or signature did not).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import httpx

from collector import BackendError
from collector.store import describe_settings, open_store
from reporter._config import ReporterConfig
from reporter._logging import masked_url
from reporter._senders.client import http_client
from reporter._senders.outcome import DELIVERED

# Answers that reach the endpoint but say its credentials are wrong.
REFUSED_CREDENTIALS = (401, 403, 407)


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
    if config.sink.kind == "nppa":
        return probe_nppa(config, transport)
    if config.sink.kind == "print":
        return Probe("sink", True, "print: batches go to standard output (no endpoint to probe)")
    from reporter._senders.secrets import secret_files

    url = config.sink.url
    headers = {**config.sink.headers, **{f.header: f() for f in secret_files(config)}}
    where = f"{method} {masked_url(url)}"
    began = time.monotonic()
    try:
        with http_client(config.sink, headers, transport) as client:
            status = client.request(method, url).status_code
    except httpx.HTTPError as exc:
        return Probe("sink", False, f"{where}: {type(exc).__name__}: {exc}")
    if status in REFUSED_CREDENTIALS:
        return Probe(
            "sink",
            False,
            f"{where} answered HTTP {status}: the endpoint refused "
            "the credentials (check [sink] headers or the URL's)",
        )
    return Probe(
        "sink",
        True,
        f"{where} answered HTTP {status} in {_ms(began)} (any "
        "answer shows the network path, TLS and proxy work)",
    )


def probe_nppa(config: ReporterConfig, transport: httpx.BaseTransport | None = None) -> Probe:
    """The anti-addiction interface gets a signed request with an empty ``collections``:
    it reports nothing, and the system answers 3002 once the app id, the bizId, the key
    and the signature have passed (1011 when the key or signature is wrong).  The bizId is
    the first game's of the file."""
    from reporter._senders.secrets import secret_files
    from reporter._sinks.nppa.sender import NppaSender, endpoint_url

    biz_id = next((g.biz_id for g in config.games.values() if g.biz_id), "")
    where = (
        f"POST {masked_url(endpoint_url(config.nppa.base_url))} (app "
        f"{config.nppa.app_id}, bizId {biz_id or '-'}, no items)"
    )
    if not biz_id:
        return Probe(
            "sink",
            False,
            f"{where}: not sent: no game has a biz_id to send it "
            'with (set [games."<name>"] biz_id)',
        )
    key = next(iter(secret_files(config)), None)  # [nppa] secret_key_file, if set
    sender = NppaSender(config.nppa, config.sink, config.biz_id, transport, key=key)
    began = time.monotonic()
    try:
        outcome = sender.probe(biz_id)
    finally:
        sender.close()
    if outcome.kind == DELIVERED:
        return Probe(
            "sink",
            True,
            f"{where} answered {outcome.reason} in {_ms(began)} (nothing was reported)",
        )
    check = outcome.hold or outcome.alert
    return Probe(
        "sink",
        False,
        f"{where} answered {outcome.reason}"
        + (f"; {check.partition(':')[2].strip()}" if check else ""),
    )


def _ms(began: float) -> str:
    return f"{(time.monotonic() - began) * 1000:.0f} ms"
