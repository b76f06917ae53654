"""The reporter's own sections of the shared file, each a frozen dataclass: ``[reporter]``,
``[sink]`` (what every sink kind shares: the kind, the endpoint's URL, the HTTP client, the
body limit, the request rate), ``[dead]``, ``[metrics]``, ``[ingest]``, and a game's table as
the reporter reads it.  ``ReporterConfig`` (``reporter._config``) puts them together with the
SDK's and the sink kinds' own sections.

``[sink] url`` is checked when the file is loaded if it is set (an absolute http or https URL
with a host), but it may be empty: ``status`` and ``dead`` never POST, and read files that
only set ``[redis]``.  What ``run`` and ``check-config`` refuse on top of that is the sink's
(``Sink.problems``: no URL for the json sender).
"""

from __future__ import annotations

import ipaddress
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

import httpx

from collector import ConfigError
from collector.config import GameSettings, MaskedRepr, Where, setting
from collector.logs import mask_url

# RFC 9110 token: what a header name may be.
_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# What a header value may not hold: control characters (CR, LF and NUL among them; a tab is
# allowed) and anything outside ASCII, which the HTTP client cannot send.
_BAD_HEADER_CHAR = re.compile(r"[^\t\x20-\x7e]")


@dataclass(frozen=True)
class ReporterSettings:
    batch_size: int = setting(128, lo=1, hi=128)
    max_age_seconds: float = setting(180.0, lo=1, hi=86400)
    linger_ms: int = setting(1000, lo=0, hi=600_000)
    poll_interval_ms: int = setting(100, lo=5, hi=60_000)
    workers: int = setting(4, lo=1, hi=256)
    max_batches_per_claim: int = setting(8, lo=1, hi=64)
    games_per_sweep: int = setting(256, lo=1, hi=100_000)
    lease_seconds: float = setting(30.0, lo=1, hi=3600)
    shard_lease_seconds: float = setting(10.0, lo=1, hi=600)
    grace_seconds: float = setting(10.0, lo=0, hi=600)
    event_time_field: str = setting("")
    event_time_unit: str = setting("ms", choices=("s", "ms"))
    hot_games: Mapping[str, int] = setting({}, lo=1, hi=64)


@dataclass(frozen=True, repr=False)
class SinkSettings(MaskedRepr):
    kind: str = setting("json")  # one of reporter._sinks.registry.SINKS: checked there
    url: str = setting("", secret=True)
    timeout_seconds: float = setting(5.0, lo=0.05, hi=300)
    connect_timeout_seconds: float = setting(2.0, lo=0.05, hi=300)
    max_connections: int = setting(32, lo=1, hi=1000)
    gzip: bool = setting(False)
    transport: str = setting("builtin", choices=("builtin", "httpx"), renamed={"stdlib": "builtin"})
    keepalive_expiry_seconds: float = setting(4.0, lo=0, hi=300)
    ca_file: str = setting("")
    client_cert_file: str = setting("")
    client_key_file: str = setting("")
    proxy: str = setting("", secret=True)
    headers: Mapping[str, str] = setting({}, secret=True)
    header_files: Mapping[str, str] = setting({})
    max_batch_bytes: int = setting(1024 * 1024, lo=1024, hi=256 * 1024 * 1024)
    requests_per_second: float = setting(0.0, lo=0, hi=1_000_000)
    request_burst: int = setting(1, lo=1, hi=100_000)
    rate_limit_scope: str = setting("shared", choices=("shared", "process"))


@dataclass(frozen=True)
class DeadSettings:
    max_batches: int = setting(10_000, lo=1, hi=10_000_000)


@dataclass(frozen=True)
class MetricsSettings:
    """The Prometheus endpoint (``/metrics``, ``/healthz``, ``/readyz``); off while ``listen``
    is empty."""

    listen: str = setting("")
    cache_seconds: float = setting(5.0, lo=0, hi=300)
    top_games: int = setting(10, lo=0, hi=100)
    max_connections: int = setting(64, lo=1, hi=10_000)
    error_details: bool = setting(False)


# The ingest takes at most ``[collector] max_buffer_events`` a request, so the default suits a
# reporter config with a small buffer too; a value over both is an error.
DEFAULT_EVENTS_PER_REQUEST = 10_000


@dataclass(frozen=True)
class IngestSettings:
    """``telemetry-reporter ingest``: events over HTTP from producers in any language
    (docs/ingest.md)."""

    listen: str = setting("127.0.0.1:8088")
    token_file: str = setting("")
    max_body_bytes: int = setting(1024 * 1024, lo=1024, hi=64 * 1024 * 1024)
    max_events_per_request: int = setting(DEFAULT_EVENTS_PER_REQUEST, lo=1, hi=1_000_000)
    request_timeout_seconds: float = setting(10.0, lo=0.1, hi=600)
    max_connections: int = setting(256, lo=1, hi=100_000)
    retry_after_seconds: int = setting(1, lo=1, hi=3600)

    def events_per_request(self, buffer_events: int) -> int:
        """The most events a request may carry: never more than the buffer holds."""
        return min(self.max_events_per_request, buffer_events)


@dataclass(frozen=True)
class ReporterGameSettings(GameSettings):
    """A game's table as the reporter reads it: the SDK's overrides and the game's filing id
    with the anti-addiction system (``biz_id``)."""

    OTHER_KEYS: ClassVar[tuple[str, ...]] = ()

    biz_id: str = setting("")
    # The anti-addiction app the game reports under: a [nppa.apps."<name>"], "" for [nppa]'s.
    app: str = setting("")
    # When requests are scarce, a game of higher priority goes first (after any batch that
    # would otherwise go stale); docs/nppa.md.
    priority: int = setting(0, lo=-1000, hi=1000)


def http_url_problem(url: str) -> str | None:
    """Why ``url`` is not an absolute http or https URL with a host, or None if it is."""
    expected = "expected an absolute http:// or https:// URL with a host"
    if re.search(r"[\x00-\x20\x7f]", url):
        return f"{expected}, without spaces or control characters"
    try:
        parts = httpx.URL(url)
        port = parts.port
    except httpx.InvalidURL as exc:
        return f"{expected} ({exc})"
    if parts.scheme not in ("http", "https") or not parts.host:
        return expected
    if port is not None and not 0 < port < 65536:
        return f"{expected} (port {port} is out of range)"
    return None


def check_sink(sink: SinkSettings, where: Where) -> None:
    """The endpoint's URL if one is set, the headers as they will go on the wire (after
    ``${VAR}`` expansion), and one credential at most.  Secret values are never echoed."""
    if sink.url and (problem := http_url_problem(sink.url)):
        raise ConfigError(
            f"{where('sink', 'url')}: [sink] url: {problem}, found {mask_url(sink.url)!r}"
        )
    for name, value in sink.headers.items():
        if not _HEADER_NAME.fullmatch(name):
            raise ConfigError(
                f"{where('sink', 'headers')}: [sink] headers: {name!r} is not a header name: "
                "expected letters, digits and !#$%&'*+-.^_`|~ (an HTTP token)"
            )
        if bad := _BAD_HEADER_CHAR.search(value):
            raise ConfigError(
                f"{where('sink', 'headers')}: [sink] headers.{name}: expected printable ASCII "
                f"text (no CR, LF, NUL or other control character), found {bad.group()!a} "
                f"at character {bad.start() + 1} of the value (not shown)"
            )
    _check_header_files(sink, where)
    has_authorization = any(
        name.lower() == "authorization" for name in (*sink.headers, *sink.header_files)
    )
    if sink.url and has_authorization and httpx.URL(sink.url).userinfo:
        raise ConfigError(
            f"{where('sink', 'url')}: [sink] url: carries credentials "
            f"({mask_url(sink.url)!r}) and [sink] headers has an Authorization header: two "
            "credentials, and the URL's would replace the header; keep one (the header)"
        )


def _check_header_files(sink: SinkSettings, where: Where) -> None:
    """``[sink] header_files``: header name -> a file holding its value, re-read on SIGHUP
    and when it changes.  A name may not be in ``[sink] headers`` too."""
    origin = where("sink", "header_files")
    set_inline = {name.lower() for name in sink.headers}
    for name, path in sink.header_files.items():
        if not _HEADER_NAME.fullmatch(name):
            raise ConfigError(
                f"{origin}: [sink] header_files: {name!r} is not a header name: expected "
                "letters, digits and !#$%&'*+-.^_`|~ (an HTTP token)"
            )
        if name.lower() in set_inline:
            raise ConfigError(
                f"{origin}: [sink] header_files.{name}: also in [sink] headers; keep one"
            )
        try:
            read_header_file(path)
        except ValueError as exc:
            raise ConfigError(f"{origin}: [sink] header_files.{name}: {exc}") from None


def read_header_file(path: str) -> str:
    """The header value a ``[sink] header_files`` file holds (``Bearer abc...``), surrounding
    whitespace ignored; ``ValueError`` says what is wrong, never showing the value."""
    value = read_small_file(path).strip()
    if not value:
        raise ValueError(f"{path!r} is empty: expected the header's value")
    if bad := _BAD_HEADER_CHAR.search(value):
        raise ValueError(
            f"{path!r}: expected printable ASCII text (no CR, LF, NUL or other "
            f"control character), found {bad.group()!a} at character "
            f"{bad.start() + 1} of the value (not shown)"
        )
    return value


# A secret file is a few dozen bytes; a larger one is a mistake (a path to the wrong file).
_SECRET_FILE_BYTES = 64 * 1024


# Opened without waiting for a writer (a FIFO), never becoming a controlling terminal.
_OPEN_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_NOCTTY", 0)
    | getattr(os, "O_CLOEXEC", 0)
)
_KINDS = (
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def read_regular_file(path: str, limit: int) -> bytes:
    """The content of the regular file at ``path`` (a symbolic link is followed), of at
    most ``limit`` bytes.  Anything else is a ``ValueError`` saying what it is, and is never
    waited on: a FIFO is opened without blocking and refused, so that a reader never hangs
    (nor the SIGHUP that asked for the read, nor the stop after it)."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as exc:
        raise ValueError(f"cannot read {path!r}: {exc.strerror or exc}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _KINDS if test(mode)), "not a file")
            raise ValueError(f"{path!r} is {kind}, not a regular file")
        chunks: list[bytes] = []
        size = 0
        while size <= limit and (chunk := os.read(fd, limit + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise ValueError(f"cannot read {path!r}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if size > limit:
        raise ValueError(f"{path!r} is larger than {limit} bytes: not a secret file")
    return b"".join(chunks)


def readable_by_others(path: str) -> str:
    """Who besides its owner may read the file at ``path`` (its target, for a symbolic
    link), with its mode: ``"its group and everyone (mode 0644)"``; ``""`` when nobody may,
    or where modes do not say it (Windows)."""
    if os.name == "nt":
        return ""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return ""
    who = [
        name
        for bit, name in ((stat.S_IRGRP, "its group"), (stat.S_IROTH, "everyone"))
        if mode & bit
    ]
    return f"{' and '.join(who)} (mode {stat.S_IMODE(mode):04o})" if who else ""


def read_small_file(path: str) -> str:
    data = read_regular_file(path, _SECRET_FILE_BYTES)
    try:
        return data.decode("ascii")
    except UnicodeDecodeError:
        raise ValueError(f"{path!r} holds bytes that are not ASCII text") from None


def listen_address(text: str) -> tuple[str, int]:
    """``"host:port"`` (an IPv6 host in brackets: ``"[::1]:9464"``) as (host, port); raise
    ``ValueError`` saying what was expected.  The host must be spelled out, so that serving
    on every interface (``0.0.0.0``, ``[::]``) is always a visible choice."""
    host, sep, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        host = ""  # an IPv6 address needs its brackets
    if (
        not sep
        or not host
        or not port.isdigit()
        or int(port) > 65535
        or any(c.isspace() or c in "/[]" for c in host)
    ):
        raise ValueError(
            f'expected "host:port" such as "127.0.0.1:9464" (or "" for no '
            f"metrics endpoint), found {text!r}"
        )
    return host, int(port)


# What a token may be so that it travels in a header as it is: visible ASCII, no space.
_TOKEN = re.compile(r"[\x21-\x7e]+")
# A shorter token is taken, with a warning: it is easier to guess.
MIN_TOKEN_CHARACTERS = 16


def check_ingest(ingest: IngestSettings, buffer_events: int, where: Where) -> None:
    """``[ingest]``: an address to bind, a token file that holds a token, requests that fit
    in the buffer (``[collector] max_buffer_events``).  The token is never echoed."""
    try:
        listen_address(ingest.listen)
    except ValueError:
        raise ConfigError(
            f'{where("ingest", "listen")}: [ingest] listen: expected "host:port" such as '
            f'"127.0.0.1:8088" (a host spelled out: "0.0.0.0:8088" serves every interface), '
            f"found {ingest.listen!r}"
        ) from None
    if ingest.token_file:
        try:
            read_token_file(ingest.token_file)
        except ValueError as exc:
            raise ConfigError(
                f"{where('ingest', 'token_file')}: [ingest] token_file: {exc}"
            ) from None
    if ingest.max_events_per_request > max(buffer_events, DEFAULT_EVENTS_PER_REQUEST):
        raise ConfigError(
            f"{where('ingest', 'max_events_per_request')}: [ingest] max_events_per_request: "
            f"expected at most [collector] max_buffer_events ({buffer_events}), so that a "
            f"request can fit in the buffer, found {ingest.max_events_per_request}"
        )


def ingest_advice(ingest: IngestSettings, where: Where) -> list[str]:
    """What is valid but risky in ``[ingest]``: other hosts may send with no token asked
    for, or a short token."""
    if ingest.token_file:
        try:
            token = read_token_file(ingest.token_file)
        except ValueError:  # check() says so
            return []
        if len(token) >= MIN_TOKEN_CHARACTERS:
            return []
        return [
            f"{where('ingest', 'token_file')}: [ingest] token_file: a token of {len(token)} "
            f"characters is easy to guess; {MIN_TOKEN_CHARACTERS} or more are advised "
            "(openssl rand -hex 32 makes one)"
        ]
    if _is_loopback(listen_address(ingest.listen)[0]):
        return []
    return [
        f"{where('ingest', 'listen')}: [ingest] listen: {ingest.listen!r} is reachable from "
        "other hosts and [ingest] token_file is not set: anyone who reaches it can send "
        "events (telemetry-reporter ingest)"
    ]


def read_token_file(path: str) -> str:
    """The bearer token a ``[ingest] token_file`` holds, surrounding whitespace ignored:
    visible ASCII without spaces, so it travels in a header as it is.  ``ValueError`` says
    what is wrong, never showing the file's text."""
    token = read_small_file(path).strip()
    if not token:
        raise ValueError(f"{path!r} is empty: expected the bearer token")
    if not _TOKEN.fullmatch(token):
        raise ValueError(
            f"{path!r} does not hold one bearer token: expected visible ASCII characters "
            f"without spaces, found {len(token)} characters (not shown) that are not"
        )
    return token


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve anywhere
        return False
