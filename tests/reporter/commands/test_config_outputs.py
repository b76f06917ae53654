"""What the commands print about a config, run as users run them (``python -m reporter`` in a
subprocess): a bad config is one line on stderr and exit 2, never a traceback; a secret given
in any of its forms appears in no output of ``check-config``, ``status`` or ``dead``, nor in
the reprs of the settings."""

from __future__ import annotations

import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from collector import ConfigError, TelemetryConfig
from reporter._config import ReporterConfig
from reporter._sinks.nppa.settings import NppaSettings
from tests.support.markers import secret
from tests.support.processes import reporter_cli
from tests.support.servers import Server

WRONG = secret("wrong")


def assert_config_error(result: subprocess.CompletedProcess[str], *parts: str) -> str:
    """Exit 2 and exactly one line on stderr, naming what is wrong; nothing on stdout."""
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert lines[0].startswith("telemetry-reporter: config error: ")
    for part in parts:
        assert part in lines[0], (part, lines[0])
    return lines[0]


# -- bad configs: exit 2 with one line, in every command that loads the file -------------------

BAD_FILES: list[tuple[str, bytes, dict[str, str], list[str]]] = [
    ("not utf-8", b"[reporter]\n# caf\xe9\n", {}, ["not UTF-8"]),
    ("redis port", b'[redis]\nurl = "redis://host:notaport/0"\n', {}, ["[redis] url", "Port"]),
    (
        "redis option",
        b'[redis]\nurl = "redis://host/0?sockettimeout=1"\n',
        {},
        ["[redis] url", "sockettimeout"],
    ),
    (
        "nan in file",
        b"[reporter]\nmax_age_seconds = nan\n",
        {},
        ["[reporter] max_age_seconds", "finite", "nan"],
    ),
    (
        "inf in env",
        b"",
        {"TELEMETRY_REPORTER_LEASE_SECONDS": "inf"},
        ["TELEMETRY_REPORTER_LEASE_SECONDS", "[reporter] lease_seconds", "finite"],
    ),
    (
        "crlf after ${VAR}",
        b'[sink]\nurl = "http://h/"\n[sink.headers]\nX-Team = "${TEAM}"\n',
        {"TEAM": "games\r\nX-Injected: 1"},
        ["[sink] headers.X-Team", "CR, LF"],
    ),
    (
        "header name",
        b'[sink]\nurl = "http://h/"\n[sink.headers]\n"X Team" = "games"\n',
        {},
        ["[sink] headers", "'X Team'"],
    ),
    (
        "ftp sink",
        b'[sink]\nurl = "ftp://ingest.example/v1"\n',
        {},
        ["[sink] url", "absolute http", "'ftp://ingest.example/v1'"],
    ),
    (
        "scheme-less sink",
        b'[sink]\nurl = "ingest.example/v1"\n',
        {},
        ["[sink] url", "'ingest.example/v1'"],
    ),
    (
        "http//host sink",
        b'[sink]\nurl = "http//ingest.example/v1"\n',
        {},
        ["[sink] url", "'http//ingest.example/v1'"],
    ),
    ("empty host", b'[sink]\nurl = "http://"\n', {}, ["[sink] url", "'http://'"]),
]


@pytest.mark.parametrize(("name", "text", "env", "parts"), BAD_FILES, ids=[b[0] for b in BAD_FILES])
def test_a_bad_config_is_one_line_and_exit_2_everywhere(
    tmp_path: Path, name: str, text: bytes, env: dict[str, str], parts: list[str]
) -> None:
    path = tmp_path / "bad.toml"
    path.write_bytes(text)
    origin = [] if any(k.startswith("TELEMETRY_") for k in env) else [str(path)]
    assert_config_error(reporter_cli("check-config", str(path), env=env), *origin, *parts)
    assert_config_error(reporter_cli("status", "--config", str(path), env=env), *parts)
    assert_config_error(reporter_cli("dead", "--config", str(path), "list", env=env), *parts)


@pytest.mark.parametrize("text", ["", '[sink]\nurl = ""\n'], ids=["missing", "empty"])
def test_check_config_refuses_a_json_sink_without_a_url(tmp_path: Path, text: str) -> None:
    path = tmp_path / "no-url.toml"
    path.write_text(text, encoding="utf-8")
    assert_config_error(reporter_cli("check-config", str(path)), "[sink] url", "found nothing")


def test_tls_verification_off_is_a_warning_in_check_config(tmp_path: Path) -> None:
    path = tmp_path / "tls.toml"
    path.write_text(
        '[redis]\nurl = "rediss://cache:6380/0?ssl_cert_reqs=none"\n'
        '[sink]\nurl = "https://ingest.example/v1"\n',
        encoding="utf-8",
    )
    result = reporter_cli("check-config", str(path))
    assert result.returncode == 0, result.stderr
    [warning] = result.stderr.splitlines()
    assert "warning" in warning and "[redis] url" in warning and "verification off" in warning


# -- one secret in each of its forms, in no output ---------------------------------------------


@pytest.fixture
def secret() -> str:
    return "Zq" + secrets.token_hex(8)


@pytest.fixture
def guarded_server(own_server: Server, secret: str) -> Iterator[Server]:
    """A server that answers only with the secret as its password: a status that succeeds
    proves the secret was used, not dropped."""
    own_server.client().config_set("requirepass", secret)
    yield own_server


def secret_forms(server: Server, secret: str, nppa_key: str) -> str:
    return f"""
[redis]
url = "redis://127.0.0.1:{server.port}/0?password={secret}"
[sink]
url = "https://{secret}@ingest.example/v1?api_key={secret}"
[sink.headers]
X-Api-Credential = "{secret}"
X-Team = "games"
[nppa]
app_id = "app"
secret_key = "{nppa_key}"
"""


def test_no_output_shows_a_secret(tmp_path: Path, guarded_server: Server, secret: str) -> None:
    nppa_key = secrets.token_hex(16)
    path = tmp_path / "secrets.toml"
    path.write_text(secret_forms(guarded_server, secret, nppa_key), encoding="utf-8")
    header_path = tmp_path / "header.toml"
    header_path.write_text(
        f'[redis]\nurl = "redis://:{secret}@127.0.0.1:{guarded_server.port}/0"\n'
        f'[sink]\nurl = "https://ingest.example/v1?token={secret}"\n'
        '[sink.headers]\nAuthorization = "Bearer ${INGEST_TOKEN}"\n',
        encoding="utf-8",
    )
    env = {"INGEST_TOKEN": secret}
    outputs = []
    for config in (path, header_path):
        check = reporter_cli("check-config", str(config), env=env)
        assert check.returncode == 0, check.stderr
        assert "***" in check.stdout
        status = reporter_cli("status", "--config", str(config), env=env)
        assert status.returncode == 0, status.stderr  # the password was used
        assert "?password=***" in status.stdout or ":***@" in status.stdout
        outputs += [
            check,
            status,
            reporter_cli("status", "--json", "--config", str(config), env=env),
            reporter_cli("dead", "--config", str(config), "list", env=env),
        ]
    for result in outputs:
        assert result.returncode == 0, result.stderr
        for text in (result.stdout, result.stderr):
            assert secret not in text and nppa_key not in text, text
    loaded = ReporterConfig.load(str(path), env={})
    assert (
        loaded.sink.headers["X-Api-Credential"] == secret
        and loaded.section(NppaSettings).secret_key == nppa_key
    )
    reprs = [
        repr(loaded),
        str(loaded),
        repr(loaded.masked()),
        repr(loaded.redis),
        repr(loaded.sink),
        repr(loaded.section(NppaSettings)),
        repr(TelemetryConfig.load(str(path), env={})),
        repr(ReporterConfig.load(str(header_path), env=env)),
    ]
    for text in reprs:
        assert secret not in text and nppa_key not in text, text


ECHOED = [
    (
        "header of the wrong type",
        '[sink.headers]\nAuthorization = ["Bearer {s}"]\n',
        {},
        "[sink] headers.Authorization",
    ),
    (
        "credential header with a line break",
        '[sink]\nurl = "http://h/"\n[sink.headers]\nX-Api-Credential = "{s}\\n"\n',
        {},
        "[sink] headers.X-Api-Credential",
    ),
    (
        "redis url with a bad port",
        '[redis]\nurl = "redis://:{s}@h:notaport/0?password={s}"\n',
        {},
        "[redis] url",
    ),
    (
        "sink url of the wrong scheme",
        '[sink]\nurl = "ftp://u:{s}@h/?api_key={s}"\n',
        {},
        "[sink] url",
    ),
    (
        "token url and Authorization",
        '[sink]\nurl = "https://{s}@h/"\n[sink.headers]\nAuthorization = "Bearer {s}"\n',
        {},
        "two credentials",
    ),
    (
        "nppa key that is not hex",
        '[sink]\nkind = "nppa"\n[nppa]\napp_id = "a"\nsecret_key = "{s}"\n',
        {},
        "[nppa] secret_key",
    ),
    ("nppa key of the wrong type", '[nppa]\nsecret_key = ["{s}"]\n', {}, "[nppa] secret_key"),
    (
        "env headers that are not TOML",
        "",
        {"TELEMETRY_SINK_HEADERS": '{{ Authorization = "{s}"'},
        "TELEMETRY_SINK_HEADERS",
    ),
    (
        "env redis url with a bad port",
        "",
        {"TELEMETRY_REDIS_URL": "redis://u:{s}@h:x/0"},
        "TELEMETRY_REDIS_URL",
    ),
    ("table of the wrong type", 'sink = "https://u:{s}@h/"\n', {}, "[sink] must be a table"),
]


@pytest.mark.parametrize(("name", "text", "env", "part"), ECHOED, ids=[e[0] for e in ECHOED])
def test_a_config_error_never_echoes_a_secret(
    tmp_path: Path, secret: str, name: str, text: str, env: dict[str, str], part: str
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text.replace("{s}", secret), encoding="utf-8")
    env = {k: v.replace("{s}", secret).replace("{{", "{") for k, v in env.items()}
    with pytest.raises(ConfigError) as info:
        ReporterConfig.load(str(path), env=env)
    assert part in str(info.value) and secret not in str(info.value)
    line = assert_config_error(reporter_cli("check-config", str(path), env=env), part)
    assert secret not in line


def test_status_against_a_guarded_server_needs_the_secret(
    tmp_path: Path, guarded_server: Server
) -> None:
    """The scan above is only worth something if the secret really is in use."""
    path = tmp_path / "wrong.toml"
    path.write_text(f'[redis]\nurl = "{guarded_server.url}?password={WRONG}"\n', encoding="utf-8")
    result = reporter_cli("status", "--config", str(path))
    assert result.returncode != 0 and WRONG not in result.stdout + result.stderr
    with pytest.raises(redis.AuthenticationError):
        guarded_server.client().ping()


@pytest.mark.parametrize(
    ("sink", "parts"),
    [
        ('ca_file = "/nonexistent/ca.pem"', ["[sink] ca_file", "cannot load"]),
        ('client_key_file = "/nonexistent/key.pem"', ["[sink] client_key_file"]),
        ('proxy = "ftp://proxy.internal:21"', ["[sink] proxy"]),
    ],
    ids=["ca_file", "key-without-cert", "proxy-scheme"],
)
def test_check_config_refuses_what_the_sender_could_not_use(
    tmp_path: Path, sink: str, parts: list[str]
) -> None:
    path = tmp_path / "sender.toml"
    path.write_text(f'[sink]\nurl = "https://ingest.example/v1"\n{sink}\n', encoding="utf-8")
    assert_config_error(reporter_cli("check-config", str(path)), *parts)
