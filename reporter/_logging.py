"""How the command line logs: level and format, JSON lines, and secrets kept out of every line.

``configure_logging(level, fmt)`` installs one handler on the root logger (stderr): ``text``
is one readable line per record (control characters escaped, a traceback indented below it),
``json`` one JSON object per line with ``time``, ``level``,
``logger``, ``message``, the structured fields a call site passed with ``extra=`` (``game``,
``shard``, ``batch_id``, ``attempt``, ``status_code``, ...) and ``exception`` (the traceback)
when there is one.

Secrets are kept out at the source (URLs are masked before they are logged, payloads never
are); as a second line of defence the handler replaces every secret of the loaded config
(``note_secrets``) with ``***`` in whatever it writes, tracebacks included.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import sys
import threading
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import IO, Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from collector.config import section_value, sections_of
from collector.text import printable, printable_json

LEVELS = ("debug", "info", "warning", "error")
FORMATS = ("text", "json")
LEVEL_ENV = "TELEMETRY_LOG_LEVEL"
FORMAT_ENV = "TELEMETRY_LOG_FORMAT"
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# Libraries that log request lines (URLs with their query strings), connection details or
# scheduler chatter: warnings and errors only, whatever the level asked for.
QUIET_LOGGERS = ("httpx", "httpcore", "apscheduler", "hpack", "urllib3", "redis")
# Header and query parameter names whose values are secrets (check-config's words, and a few
# that signed URLs use: sig=, code=, X-Amz-Credential=).
SECRET_WORDS = (
    "auth",
    "token",
    "key",
    "secret",
    "cookie",
    "sig",
    "pass",
    "pwd",
    "code",
    "credential",
)
MASK = "***"
_MIN_SECRET = 4  # shorter values would mask ordinary words; no credential is that short
_HTTP_STATUS = re.compile(r"HTTP (\d{3})\b")

# A LogRecord's own attributes: anything else on a record came from ``extra=``.
_RECORD_FIELDS = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {
    "message",
    "asctime",
    "taskName",
}


def log_settings(level: str | None, fmt: str | None, env: Mapping[str, str]) -> tuple[str, str]:
    """The level and format: the command line's, else the environment's, else info/text.
    ``ValueError`` names a bad environment value."""
    return (
        _choice(level, env, LEVEL_ENV, LEVELS, "info"),
        _choice(fmt, env, FORMAT_ENV, FORMATS, "text"),
    )


def _choice(
    given: str | None, env: Mapping[str, str], var: str, allowed: tuple[str, ...], default: str
) -> str:
    if given:
        return given
    value = env.get(var, "").strip().lower()
    if not value:
        return default
    if value not in allowed:
        raise ValueError(
            f"environment variable {var}: expected one of {', '.join(allowed)}, found {env[var]!r}"
        )
    return value


# -- secrets -----------------------------------------------------------------------------------


class Redactor:
    """Replaces known secret values with ``***`` in text; the values are added once the config
    is loaded."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._secrets: tuple[str, ...] = ()

    def add(self, secrets: Iterable[str]) -> None:
        with self._lock:
            known = set(self._secrets) | {s for s in secrets if len(s) >= _MIN_SECRET}
            # the longest first, so a secret that contains another is masked whole
            self._secrets = tuple(sorted(known, key=len, reverse=True))

    def clear(self) -> None:
        with self._lock:
            self._secrets = ()

    def __call__(self, text: str) -> str:
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, MASK)
        return text


REDACT = Redactor()


def secret_name(name: str) -> bool:
    return any(word in name.lower() for word in SECRET_WORDS)


def url_secrets(url: str) -> list[str]:
    """The secret parts of a URL: its password, and the values of query parameters with a
    secret-sounding name (``api_key=``, ``token=``, ``sig=``...)."""
    try:
        parts = urlsplit(url)
        found = [parts.password or ""]
    except ValueError:  # not a URL we can read: the whole value is treated as secret
        return [url]
    return found + [
        value for name, value in parse_qsl(parts.query, keep_blank_values=True) if secret_name(name)
    ]


def header_secrets(headers: Mapping[str, str]) -> list[str]:
    """The values of headers with a secret-sounding name, whole and without their scheme
    (``Bearer abc`` gives ``Bearer abc`` and ``abc``)."""
    out: list[str] = []
    for name, value in headers.items():
        if secret_name(name):
            out += [value, value.split()[-1] if value.split() else value]
    return out


def config_secrets(config: Any) -> list[str]:
    """Every secret of a ``ReporterConfig``, from every section (the sink kinds' too): the
    passwords and secret query values of its URLs, secret headers, and every other setting
    declared secret (the anti-addiction key)."""
    secrets: list[str] = []
    for name in sections_of(type(config)):
        section = section_value(config, name)
        for f in dataclasses.fields(section):
            value, secret = getattr(section, f.name), f.metadata.get("secret")
            if isinstance(value, Mapping) and secret:
                secrets += header_secrets(value)
            elif isinstance(value, str) and "://" in value:
                secrets += url_secrets(value)
            elif isinstance(value, str) and secret:
                secrets.append(value)
    return [s for s in secrets if s]


def note_secrets(config: Any) -> None:
    """Mask ``config``'s secrets in every line the handler writes from now on."""
    REDACT.add(config_secrets(config))


def masked_url(url: str) -> str:
    """``url`` with its password and every query value replaced by ``***``."""
    try:
        parts = urlsplit(url)
        password = parts.password
        port = parts.port
    except ValueError:
        return MASK
    netloc = parts.netloc
    if password is not None:
        host = (parts.hostname or "") + (f":{port}" if port is not None else "")
        netloc = f"{parts.username or ''}:{MASK}@{host}"
    query = "&".join(f"{key}={MASK}" for key, _ in parse_qsl(parts.query, keep_blank_values=True))
    return urlunsplit(parts._replace(netloc=netloc, query=query))


# -- structured fields -------------------------------------------------------------------------


def batch_fields(
    game: str,
    batch_id: str,
    shard: int | None = None,
    attempt: int | None = None,
    reason: str = "",
    **more: object,
) -> dict[str, object]:
    """The ``extra=`` of a log line about one batch; ``status_code`` is read from an
    ``HTTP nnn`` reason."""
    fields: dict[str, object] = {"game": game, "batch_id": batch_id}
    if shard is not None:
        fields["shard"] = shard
    if attempt is not None:
        fields["attempt"] = attempt
    status = _HTTP_STATUS.match(reason)
    if status:
        fields["status_code"] = int(status.group(1))
    fields.update(more)
    return fields


# -- formatters and the handler ----------------------------------------------------------------


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, ISO 8601), level, logger, message, the record's
    ``extra`` fields, and ``exception`` with the traceback when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _RECORD_FIELDS and key not in line:
                line[key] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return printable_json(json.dumps(line, ensure_ascii=False, default=str))


class TextFormatter(logging.Formatter):
    """One readable line per record: ``TEXT_FORMAT``, with every control character of the
    message escaped (a newline or an escape sequence in an endpoint's text can neither forge
    a line nor drive a terminal).  A traceback follows on lines of its own, each indented, so
    that only a record's first line starts at the margin."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = printable(record.message)
        return super().formatMessage(record)

    def formatException(self, ei: Any) -> str:
        return _indented(super().formatException(ei))

    def formatStack(self, stack_info: str) -> str:
        return _indented(super().formatStack(stack_info))


def _indented(text: str) -> str:
    return "\n".join("  " + line for line in printable(text, keep="\n").split("\n"))


class RedactingFormatter(logging.Formatter):
    """Another formatter's output with every known secret masked."""

    def __init__(self, inner: logging.Formatter, redact: Redactor = REDACT) -> None:
        super().__init__()
        self._inner = inner
        self._redact = redact

    def format(self, record: logging.LogRecord) -> str:
        return self._redact(self._inner.format(record))


def make_formatter(fmt: str) -> logging.Formatter:
    inner = JsonFormatter() if fmt == "json" else TextFormatter()
    return RedactingFormatter(inner)


_handler: logging.Handler | None = None


def configure_logging(level: str, fmt: str, stream: IO[str] | None = None) -> None:
    """Log at ``level`` in ``fmt`` to ``stream`` (stderr), replacing what an earlier call
    installed."""
    global _handler
    root = logging.getLogger()
    if _handler is not None:
        root.removeHandler(_handler)
    _handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    _handler.setFormatter(make_formatter(fmt))
    root.addHandler(_handler)
    root.setLevel(level.upper())
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
