"""Values that used to pass ``check-config`` and fail at run time: non-finite numbers,
undecodable files, Redis URLs redis-py cannot use, unsendable headers, two credentials, bad
sink URLs; and the warning for TLS verification switched off."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path

import pytest

from collector import Collector, ConfigError, TelemetryConfig
from collector.config import sections_of
from reporter._config import ReporterConfig, sink_problems
from tests.support import config_files
from tests.support.config_files import write
from tests.support.markers import secret

KEY = secret("key")
PW = secret("pw")
BEARER = secret("bearer")
URL_TOKEN = secret("url-token")
URL_PW = secret("url-pw")
HEADER = secret("header")

ROOT = Path(__file__).resolve().parents[2]
SECTIONS = sections_of(ReporterConfig)
SINK = '[sink]\nurl = "https://ingest.example/v1"\n'


def load_error(path: Path, env: dict[str, str] | None = None) -> str:
    return config_files.load_error(path, env, ReporterConfig)


def numeric_settings() -> list[tuple[str, str, type]]:
    found = []
    for section, cls in sorted(SECTIONS.items()):
        hints = typing.get_type_hints(cls)
        found += [
            (section, f.name, hints[f.name])
            for f in dataclasses.fields(cls)
            if hints[f.name] in (int, float)
        ]
    return found


NUMERIC = numeric_settings()


def test_there_are_numeric_settings_of_both_kinds() -> None:
    assert {tp for _, _, tp in NUMERIC} == {int, float}
    assert ("reporter", "max_age_seconds", float) in NUMERIC


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "+nan"])
@pytest.mark.parametrize(("section", "key", "tp"), NUMERIC, ids=[f"{s}.{k}" for s, k, _ in NUMERIC])
def test_every_numeric_setting_refuses_non_finite_values(
    tmp_path: Path, section: str, key: str, tp: type, value: str
) -> None:
    path = write(tmp_path, f"[{section}]\n{key} = {value}\n")
    message = load_error(path)
    assert f"[{section}] {key}" in message and str(path) in message
    assert ("finite" if tp is float else "integer") in message
    var = f"TELEMETRY_{section.upper().replace('.', '_')}_{key.upper()}"
    from_env = load_error(write(tmp_path, "", name="empty.toml"), env={var: value})
    assert var in from_env and f"[{section}] {key}" in from_env


def test_a_non_finite_number_from_a_keyword_argument_is_refused() -> None:
    with pytest.raises(ConfigError, match="finite"):
        Collector(close_timeout_seconds=float("nan"))


def test_an_env_value_with_more_than_one_toml_value_is_refused(tmp_path: Path) -> None:
    message = load_error(write(tmp_path, ""), env={"TELEMETRY_REPORTER_WORKERS": "4\nx = 5"})
    assert "TELEMETRY_REPORTER_WORKERS" in message


def test_a_file_that_is_not_utf8_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "latin1.toml"
    path.write_bytes("[reporter]\n# caf\u00e9\nworkers = 2\n".encode("latin-1"))
    message = load_error(path)
    assert str(path) in message and "UTF-8" in message and "line 2" in message


def test_an_env_string_that_is_not_utf8_is_a_config_error(tmp_path: Path) -> None:
    message = load_error(
        write(tmp_path, ""),
        env={"TELEMETRY_REPORTER_EVENT_TIME_FIELD": b"t\xff".decode("utf-8", "surrogateescape")},
    )
    assert "TELEMETRY_REPORTER_EVENT_TIME_FIELD" in message and "UTF-8" in message


# -- [redis] url: what redis-py would refuse, found at load time -------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("redis://host:notaport/0", "Port"),
        ("redis://host:99999/0", "Port"),
        ("redis://[::1/0", "IPv6"),
        ("redis://host:6379/zero", "database"),
        ("redis://host:6379/0?socket_timeout=soon", "socket_timeout"),
        ("redis://host:6379/0?sockettimeout=1", "'sockettimeout'"),
        ("redis://host:6379/0?ssl_cert_reqs=none", "'ssl_cert_reqs'"),  # not TLS: no such option
        ("rediss://host:6379/0?ssl_cert_reqs=NONE", "NONE"),
        ("http://host:6379/0", "redis://"),
    ],
)
def test_a_redis_url_redis_py_cannot_use_is_refused_at_load(
    tmp_path: Path, url: str, expected: str
) -> None:
    message = load_error(write(tmp_path, f'[redis]\nurl = "{url}"\n'))
    assert "[redis] url" in message and expected in message
    with pytest.raises(ConfigError, match=r"\[redis\] url"):
        Collector(url=url)


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:6379/0",
        "redis://cache",
        "redis://u:p@cache:6380/15",
        "rediss://cache:6380/0?ssl_cert_reqs=required",
        "unix:///run/redis.sock?db=2",
        "redis://cache:6379/0?password=pw&socket_keepalive=true",
        "redis://[::1]:6379/0",
    ],
)
def test_usable_redis_urls_pass(tmp_path: Path, url: str) -> None:
    config = ReporterConfig.load(str(write(tmp_path, f'[redis]\nurl = "{url}"\n')), env={})
    assert config.redis.url == url and config.notices == ()


@pytest.mark.parametrize(
    ("query", "what"),
    [
        ("ssl_cert_reqs=none", "certificate verification off"),
        ("ssl_check_hostname=false", "host name verification off"),
    ],
)
def test_tls_verification_switched_off_is_a_notice(tmp_path: Path, query: str, what: str) -> None:
    url = f"rediss://:pw@cache:6380/0?{query}"
    path = write(tmp_path, f'[redis]\nurl = "{url}"\n')
    [notice] = ReporterConfig.load(str(path), env={}).notices
    assert str(path) in notice and "[redis] url" in notice and what in notice
    [env_notice] = TelemetryConfig.load(
        str(write(tmp_path, "", name="e.toml")), env={"TELEMETRY_REDIS_URL": url}
    ).notices
    assert "TELEMETRY_REDIS_URL" in env_notice


# -- [sink] headers: as they go on the wire -----------------------------------------------------


@pytest.mark.parametrize("name", ["X Bad", "X-Bad:", "", "Ünicode", "X(1)", "X\tY"])
def test_a_header_name_must_be_an_http_token(tmp_path: Path, name: str) -> None:
    message = load_error(write(tmp_path, SINK + f'[sink.headers]\n"{name}" = "v"\n'))
    assert "[sink] headers" in message and "header name" in message and repr(name) in message


@pytest.mark.parametrize(
    "value", ["a\r\nX-Injected: 1", "a\nb", "a\rb", "a\x00b", "a\x1bb", "caf\u00e9"]
)
def test_a_header_value_must_be_printable_ascii_after_expansion(tmp_path: Path, value: str) -> None:
    path = write(tmp_path, SINK + '[sink.headers]\nX-Token = "Bearer ${T}"\n')
    message = load_error(path, env={"T": f"{HEADER}{value}"})
    assert "[sink] headers.X-Token" in message and HEADER not in message
    escaped = value.encode("unicode_escape").decode().replace("\\x", "\\u00")  # TOML escapes
    from_env = load_error(
        write(tmp_path, SINK, name="e.toml"),
        env={"TELEMETRY_SINK_HEADERS": f'{{ X-Token = "{HEADER}{escaped}" }}'},
    )
    assert "TELEMETRY_SINK_HEADERS" in from_env and HEADER not in from_env


def test_a_tab_and_the_usual_characters_are_fine_in_a_header_value(tmp_path: Path) -> None:
    path = write(tmp_path, SINK + '[sink.headers]\nX-List = "a,\tb; q=0.5 ~!#"\n')
    assert ReporterConfig.load(str(path), env={}).sink.headers["X-List"] == "a,\tb; q=0.5 ~!#"


@pytest.mark.parametrize(
    "url", [f"https://user:{URL_PW}@ingest.example/v1", f"https://{URL_TOKEN}@ingest.example/v1"]
)
@pytest.mark.parametrize("header", ["Authorization", "authorization"])
def test_credentials_in_the_url_and_an_authorization_header_are_an_error(
    tmp_path: Path, url: str, header: str
) -> None:
    path = write(tmp_path, f'[sink]\nurl = "{url}"\n[sink.headers]\n{header} = "Bearer {BEARER}"\n')
    message = load_error(path)
    assert "[sink] url" in message and "two credentials" in message
    assert URL_PW not in message and URL_TOKEN not in message and BEARER not in message


def test_credentials_in_the_url_alone_are_fine(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '[sink]\nurl = "https://tok@ingest.example/v1"\n[sink.headers]\nX-Team = "games"\n',
    )
    assert ReporterConfig.load(str(path), env={}).sink.url == "https://tok@ingest.example/v1"


# -- [sink] url ---------------------------------------------------------------------------------

BAD_SINK_URLS = [
    "ftp://ingest.example/v1",
    "ingest.example/v1",
    "http//ingest.example/v1",
    "http://",
    "http:///v1",
    "http://host:notaport/",
    "http://host:70000/",
    " http://host/",
    "http://ho st/",
    "//host/v1",
]


@pytest.mark.parametrize("url", BAD_SINK_URLS)
def test_a_sink_url_that_is_not_absolute_http_is_refused_at_load(tmp_path: Path, url: str) -> None:
    message = load_error(write(tmp_path, f'[sink]\nurl = "{url}"\n'))
    assert "[sink] url" in message and "absolute http" in message and repr(url) in message
    assert "TELEMETRY_SINK_URL" in load_error(
        write(tmp_path, "", name="e.toml"), env={"TELEMETRY_SINK_URL": url}
    )


def test_a_refused_sink_url_is_shown_masked(tmp_path: Path) -> None:
    message = load_error(write(tmp_path, f'[sink]\nurl = "ftp://u:{PW}@h/?api_key={KEY}"\n'))
    assert PW not in message and KEY not in message
    assert "'ftp://u:***@h/?api_key=***'" in message


def test_the_json_sink_needs_a_url_but_status_and_dead_do_not(tmp_path: Path) -> None:
    """No default endpoint: loading works without [sink] url (status and dead never POST);
    ``sink_problems`` is what run and check-config refuse."""
    packaged = ReporterConfig.load(env={})
    assert packaged.sink.url == ""
    [problem] = sink_problems(packaged)
    assert "[sink] url" in problem and "required" in problem and "found nothing" in problem
    no_url = ReporterConfig.load(str(write(tmp_path, "[redis]\nshards = 4\n")), env={})
    assert len(sink_problems(no_url)) == 1
    with_url = ReporterConfig.load(str(write(tmp_path, SINK, name="s.toml")), env={})
    assert sink_problems(with_url) == []
    nppa = ReporterConfig.load(
        str(ROOT / "config" / "nppa.toml"),
        env={"REDIS_PASSWORD": "pw", "NPPA_SECRET_KEY": "0" * 32},
    )
    assert nppa.sink.url == "" and sink_problems(nppa) == []


@pytest.mark.parametrize(
    "name", sorted(p.name for p in (ROOT / "config").glob("*.toml") if p.name != "telemetry.toml")
)
def test_every_example_config_is_ready_to_run(name: str) -> None:
    env = {"REDIS_PASSWORD": "pw", "INGEST_TOKEN": "token", "NPPA_SECRET_KEY": "0" * 32}
    config = ReporterConfig.load(str(ROOT / "config" / name), env=env)
    assert sink_problems(config) == [] and config.notices == ()
