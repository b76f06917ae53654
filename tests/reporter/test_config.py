"""The whole file as the reporter reads it (``ReporterConfig``, the SDK's sections and the
reporter's): the shipped file, validation errors, environment overrides, secrets."""

from __future__ import annotations

import dataclasses
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path

import pytest

from collector import ConfigError, TelemetryConfig, TelemetryError
from collector.config import GameSettings, default_config_text, sections_of
from reporter._config import ReporterConfig
from reporter._sinks.nppa.settings import NppaSettings
from reporter._sinks.registry import make_sink
from tests.support import config_files
from tests.support.config_files import write
from tests.support.markers import secret

KEY = secret("key")
TOKEN = secret("token")
SINK_PW = secret("sink-pw")
REDIS_PW = secret("redis-pw")

SECTIONS = sections_of(ReporterConfig)

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "config" / "telemetry.toml"


def load_error(path: Path, env: Mapping[str, str] | None = None) -> str:
    return config_files.load_error(path, env, ReporterConfig)


# -- the shipped file ---------------------------------------------------------------------------


def test_shipped_file_equals_the_defaults() -> None:
    assert ReporterConfig.load(str(SHIPPED), env={}) == ReporterConfig()
    assert ReporterConfig.load(env={}) == ReporterConfig.default() == ReporterConfig()


def test_packaged_copy_is_the_shipped_file() -> None:
    assert default_config_text() == SHIPPED.read_text(encoding="utf-8")
    assert "packaged" in ReporterConfig.load(env={}).source


def _key_lines() -> tuple[list[str], dict[tuple[str, str], list[int]]]:
    """The shipped file's lines and, per (section, key), the lines that set it.

    A table-valued key such as ``hot_games`` is set by its own header ``[reporter.hot_games]``;
    a section plugged into another (``[sink.ndjson]``) is a section of its own.
    """
    lines = SHIPPED.read_text(encoding="utf-8").splitlines()
    found: dict[tuple[str, str], list[int]] = {}
    section = ""
    for i, line in enumerate(lines):
        if header := re.fullmatch(r"\[([a-z_]+)(?:\.([a-z_]+))?\]", line):
            section = header.group(1)
            if f"{section}.{header.group(2)}" in SECTIONS:
                section = f"{section}.{header.group(2)}"
            elif header.group(2):
                found.setdefault((section, header.group(2)), []).append(i)
        elif key := re.match(r"([a-z_]+)\s*=", line):
            found.setdefault((section, key.group(1)), []).append(i)
    return lines, found


@pytest.mark.parametrize("section", sorted(SECTIONS))
def test_every_key_is_in_the_shipped_file_with_a_comment(section: str) -> None:
    lines, found = _key_lines()
    for f in dataclasses.fields(SECTIONS[section]):
        where = found.get((section, f.name), [])
        assert len(where) == 1, f"[{section}] {f.name} is set {len(where)} times"
        assert lines[where[0] - 1].startswith("#"), f"[{section}] {f.name} has no comment"


def test_per_game_keys_are_documented_in_the_example() -> None:
    text = SHIPPED.read_text(encoding="utf-8")
    assert '# [games."big-game"]' in text
    for f in dataclasses.fields(GameSettings):
        assert re.search(rf"^# {f.name} = (\d+|\[.*\])$", text, re.MULTILINE), f.name


def test_no_section_is_undocumented() -> None:
    parsed = tomllib.loads(SHIPPED.read_text(encoding="utf-8"))
    assert set(parsed) == {name.split(".")[0] for name in SECTIONS}
    for name in [n for n in SECTIONS if "." in n]:
        outer, inner = name.split(".")
        assert isinstance(parsed[outer].get(inner), dict), f"[{name}] is not in the file"


# -- errors name the file and the key -----------------------------------------------------------

ERRORS = [
    ("[bogus]\na = 1\n", ["unknown section [bogus]"]),
    ("[buffer]\nmax_event_byte = 100\n", ["[buffer]", "'max_event_byte'", "max_event_bytes"]),
    ("[redis]\nurll = 'x'\n", ["[redis]", "'urll'"]),
    ('[reporter]\nbatch_size = "64"\n', ["[reporter] batch_size", "integer", "'64'"]),
    ("[reporter]\nbatch_size = true\n", ["[reporter] batch_size", "integer", "True"]),
    ("[reporter]\nbatch_size = 64.0\n", ["[reporter] batch_size", "integer", "64.0"]),
    ("[reporter]\nbatch_size = 129\n", ["[reporter] batch_size", "from 1 to 128", "129"]),
    ("[reporter]\nbatch_size = 0\n", ["[reporter] batch_size", "found 0"]),
    ("[redis]\nshards = 3\n", ["[redis] shards", "power of two", "3"]),
    ("[redis]\nshards = 24\n", ["[redis] shards", "power of two", "24"]),
    ("[redis]\nshards = -4\n", ["[redis] shards", "-4"]),
    ("[buffer]\nttl_seconds = -1\n", ["[buffer] ttl_seconds", "-1"]),
    ("[collector]\nflush_interval_ms = -5\n", ["[collector] flush_interval_ms", "-5"]),
    ("[collector]\nclose_timeout_seconds = -0.5\n", ["[collector] close_timeout_seconds"]),
    ("[redis]\nsocket_timeout_seconds = '2'\n", ["[redis] socket_timeout_seconds", "number"]),
    ("[redis]\ncluster = 'yes'\n", ["[redis] cluster", "true or false"]),
    ("[collector]\nmode = 'async'\n", ["[collector] mode", "'background'", "'async'"]),
    ("[buffer]\nttl_seconds = 180\n", ["[buffer] ttl_seconds", "max_age_seconds", "180"]),
    (
        "[buffer]\nttl_seconds = 100\n[reporter]\nmax_age_seconds = 100.0\n",
        ["[buffer] ttl_seconds", "max_age_seconds"],
    ),
    ('[games."big"]\nttl_seconds = 60\n', ['[games."big"] ttl_seconds', "max_age_seconds"]),
    ('[games."big"]\nmax_events_per_game = -1\n', ['[games."big"] max_events_per_game']),
    ('[games."big"]\nmax_event = 5\n', ['[games."big"]', "'max_event'"]),
    ('[games."a b"]\nttl_seconds = 600\n', ["games", "'a b'", "game name"]),
    ("[redis]\nkey_prefix = '{tele}'\n", ["[redis] key_prefix", "'{tele}'"]),
    ("[redis]\nkey_prefix = ''\n", ["[redis] key_prefix"]),
    ("[reporter.hot_games]\ng = 0\n", ["hot_games.g", "from 1 to 64"]),
    ("[reporter.hot_games]\ng = 'two'\n", ["hot_games.g", "integer"]),
    ('[reporter.hot_games]\n"a{b}" = 2\n', ["hot_games", "a{b}"]),
    ("[reporter]\nhot_games = 5\n", ["[reporter] hot_games", "table"]),
    ("[sink.headers]\nX-Num = 5\n", ["[sink] headers.X-Num", "string"]),
    ("[reporter]\nlinger_ms = 180000\n", ["[reporter] linger_ms", "180000"]),
    (
        "[retry]\ninitial_delay_ms = 5000\nmax_delay_ms = 1000\n",
        ["[retry] initial_delay_ms", "5000"],
    ),
    ("[nppa]\nrate_limit_scope = 'bizid'\n", ["[nppa] rate_limit_scope", "'game'", "'bizid'"]),
    ('[games."big"]\npriority = 1001\n', ['[games."big"] priority', "1001"]),
    ('[games."big"]\npriority = "high"\n', ['[games."big"] priority', "integer"]),
    ("redis = 5\n", ["[redis] must be a table"]),
    ("games = 5\n", ["[games]", "table"]),
    ("[redis\nurl = 'x'\n", ["not valid TOML"]),
]


@pytest.mark.parametrize(("text", "expected"), ERRORS, ids=[t for t, _ in ERRORS])
def test_errors_name_the_file_and_the_key(tmp_path: Path, text: str, expected: list[str]) -> None:
    path = write(tmp_path, text)
    message = load_error(path)
    assert str(path) in message
    for part in expected:
        assert part in message, f"{part!r} not in {message!r}"


def test_config_error_is_a_telemetry_error() -> None:
    assert issubclass(ConfigError, TelemetryError)
    assert not issubclass(ConfigError, (TypeError, ValueError))


def test_missing_file_is_an_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "nope.toml"
    assert str(path) in load_error(path)


def test_empty_file_means_defaults(tmp_path: Path) -> None:
    config = ReporterConfig.load(str(write(tmp_path, "")), env={})
    assert config == ReporterConfig()
    assert config.source == str(tmp_path / "telemetry.toml")


def test_values_are_read(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        [redis]
        url = "redis://cache:6380/2"
        shards = 4
        socket_timeout_seconds = 1
        [buffer]
        max_events_per_game = 50
        [reporter]
        batch_size = 64
        [reporter.hot_games]
        "big" = 3
        [sink.headers]
        X-Team = "games"
    """.replace("\n        ", "\n"),
    )
    config = ReporterConfig.load(str(path), env={})
    assert config.redis.url == "redis://cache:6380/2"
    assert config.redis.shards == 4
    assert config.redis.socket_timeout_seconds == 1.0
    assert isinstance(config.redis.socket_timeout_seconds, float)
    assert config.buffer.max_events_per_game == 50
    assert config.reporter.batch_size == 64
    assert dict(config.reporter.hot_games) == {"big": 3}
    assert dict(config.sink.headers) == {"X-Team": "games"}


def test_config_is_frozen() -> None:
    config = ReporterConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.redis.url = "redis://elsewhere"  # type: ignore[misc]
    with pytest.raises(TypeError):
        config.reporter.hot_games["g"] = 1  # type: ignore[index]


# -- environment --------------------------------------------------------------------------------


def test_env_overrides(tmp_path: Path) -> None:
    path = write(tmp_path, "[reporter]\nbatch_size = 32\n")
    config = ReporterConfig.load(
        str(path),
        env={
            "TELEMETRY_REDIS_URL": "redis://envhost:7000/1",
            "TELEMETRY_REPORTER_BATCH_SIZE": "64",
            "TELEMETRY_REPORTER_HOT_GAMES": '{ "g" = 2 }',
            "TELEMETRY_REDIS_CLUSTER": "true",
            "TELEMETRY_REPORTER_MAX_AGE_SECONDS": "200",
            "TELEMETRY_SINK_HEADERS": '{ X-Team = "t" }',
            "TELEMETRY_COLLECTOR_MODE": "sync",
            "TELEMETRY_UNRELATED_THING": "ignored: not a section of ours",
            "TELEMETRY_": "ignored",
        },
    )
    assert config.redis.url == "redis://envhost:7000/1"
    assert config.reporter.batch_size == 64  # the environment wins over the file
    assert dict(config.reporter.hot_games) == {"g": 2}
    assert config.redis.cluster is True
    assert config.reporter.max_age_seconds == 200.0
    assert dict(config.sink.headers) == {"X-Team": "t"}
    assert config.collector.mode == "sync"


@pytest.mark.parametrize(
    ("var", "value", "expected"),
    [
        ("TELEMETRY_REPORTER_BATCH_SIZE", "abc", "integer"),
        ("TELEMETRY_REPORTER_BATCH_SIZE", "129", "from 1 to 128"),
        ("TELEMETRY_REPORTER_BATCH_SIZE", "64.5", "integer"),
        ("TELEMETRY_REDIS_CLUSTER", "yes", "true or false"),
        ("TELEMETRY_REPORTER_HOT_GAMES", '{ "g" = 0 }', "hot_games.g"),
        ("TELEMETRY_REPORTER_HOT_GAMES", "{ g = ", "TOML"),
        ("TELEMETRY_COLLECTOR_MODE", "fast", "'background'"),
        ("TELEMETRY_REDIS_URLL", "redis://x", "'urll'"),
        ("TELEMETRY_BUFFER_MAX_EVENT_BYTE", "100", "'max_event_byte'"),
    ],
)
def test_bad_env_value_names_the_variable(
    tmp_path: Path, var: str, value: str, expected: str
) -> None:
    message = load_error(write(tmp_path, ""), env={var: value})
    assert var in message
    assert expected in message


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("TELEMETRY_REDIS_SHARDS", "3"),
        ("TELEMETRY_REDIS_KEY_PREFIX", "{x}"),
        ("TELEMETRY_BUFFER_TTL_SECONDS", "100"),
    ],
)
def test_cross_key_errors_name_the_variable(tmp_path: Path, var: str, value: str) -> None:
    assert var in load_error(write(tmp_path, ""), env={var: value})


def test_telemetry_config_selects_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, "[reporter]\nbatch_size = 7\n")
    config = ReporterConfig.load(env={"TELEMETRY_CONFIG": str(path)})
    assert config.reporter.batch_size == 7
    assert config.source == str(path)

    monkeypatch.setenv("TELEMETRY_CONFIG", str(path))
    assert ReporterConfig.load().reporter.batch_size == 7
    other = write(tmp_path, "[reporter]\nbatch_size = 9\n", name="other.toml")
    assert ReporterConfig.load(str(other)).reporter.batch_size == 9  # an explicit path wins

    monkeypatch.setenv("TELEMETRY_CONFIG", str(tmp_path / "missing.toml"))
    with pytest.raises(ConfigError, match=r"missing\.toml"):
        ReporterConfig.load()


# -- ${VAR} interpolation -----------------------------------------------------------------------


def test_interpolation(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
[redis]
url = "redis://:${REDIS_PW}@${REDIS_HOST}:6379/0"
key_prefix = "${PREFIX}"
[reporter]
event_time_field = "cost$$usd$$${X}"
[sink]
url = "http://h/ingest?a=$b&c=$${NOT_A_VAR}"
[sink.headers]
Authorization = "Bearer ${TOKEN}"
""",
    )
    config = ReporterConfig.load(
        str(path),
        env={"REDIS_PW": "pw", "REDIS_HOST": "cache", "PREFIX": "tele", "TOKEN": "t0k", "X": "x"},
    )
    assert config.redis.url == "redis://:pw@cache:6379/0"
    assert config.redis.key_prefix == "tele"
    assert config.reporter.event_time_field == "cost$usd$x"
    assert config.sink.url == "http://h/ingest?a=$b&c=${NOT_A_VAR}"
    assert config.sink.headers["Authorization"] == "Bearer t0k"


def test_missing_variable_is_an_error_naming_it(tmp_path: Path) -> None:
    path = write(tmp_path, '[sink.headers]\nAuthorization = "Bearer ${INGEST_TOKEN}"\n')
    message = load_error(path, env={})
    assert "INGEST_TOKEN" in message
    assert str(path) in message
    assert "[sink.headers] Authorization" in message


def test_every_missing_variable_is_named_at_once(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '[redis]\nurl = "redis://:${PW}@${HOST}:6379/0"\n'
        '[sink.headers]\nAuthorization = "Bearer ${INGEST_TOKEN}"\n'
        'X-Again = "${PW}"\n',
    )
    message = load_error(path, env={"HOST": "cache"})
    assert message.startswith(str(path))
    assert "${PW} at [redis] url" in message
    assert "${INGEST_TOKEN} at [sink.headers] Authorization" in message
    assert "${PW} at [sink.headers] X-Again" in message
    assert message.endswith("the environment variables are not set: PW, INGEST_TOKEN")
    assert "HOST" not in message.split("not set:")[1]


def test_a_missing_variable_names_its_key_as_the_docs_spell_it(tmp_path: Path) -> None:
    path = write(tmp_path, '[games."farm.story"]\nbiz_id = "${BIZ}"\n')
    assert load_error(path, env={}).endswith(
        ': ${BIZ} at [games."farm.story"] biz_id: the environment variable is not set: BIZ'
    )


NEEDS = re.compile(r"^# Environment variables it needs: (.+)$", re.M)


@pytest.mark.parametrize(
    "name", sorted(str(p.relative_to(ROOT / "config")) for p in (ROOT / "config").rglob("*.toml"))
)
def test_every_shipped_config_file_lists_the_variables_it_needs(name: str) -> None:
    """The header line says which variables to set; loading without them names the same."""
    path = ROOT / "config" / name
    [listed] = NEEDS.findall(path.read_text(encoding="utf-8"))
    needs = [] if listed == "none" else listed.split(", ")
    if not needs:
        ReporterConfig.load(str(path), env={})
        return
    message = load_error(path, env={})
    assert message.split("not set: ")[1].split(", ") == needs


def test_interpolated_value_is_still_validated(tmp_path: Path) -> None:
    path = write(tmp_path, '[redis]\nkey_prefix = "${P}"\n')
    message = load_error(path, env={"P": "a{b}"})
    assert "[redis] key_prefix" in message


# -- secrets ------------------------------------------------------------------------------------

SECRET_TOML = f"""
[redis]
url = "redis://user:{REDIS_PW}@cache:6379/0"
[sink]
url = "https://ingest:{SINK_PW}@example.invalid/ingest"
[sink.headers]
Proxy-Authorization = "Bearer ${{TOKEN}}"
X-Api-Key = "{KEY}"
X-Team = "games"
"""


@pytest.fixture
def secret_config(tmp_path: Path) -> ReporterConfig:
    return ReporterConfig.load(str(write(tmp_path, SECRET_TOML)), env={"TOKEN": TOKEN})


SECRETS = [REDIS_PW, SINK_PW, TOKEN, KEY]


def test_secrets_are_masked_in_repr_and_masked(secret_config: ReporterConfig) -> None:
    assert secret_config.sink.headers["Proxy-Authorization"] == f"Bearer {TOKEN}"
    masked = secret_config.masked()
    for text in (repr(secret_config), str(secret_config), repr(masked)):
        for value in SECRETS:
            assert value not in text
    assert masked["redis"]["url"] == "redis://user:***@cache:6379/0"
    assert masked["sink"]["url"] == "https://ingest:***@example.invalid/ingest"
    assert masked["sink"]["headers"]["Proxy-Authorization"] == "***"
    assert masked["sink"]["headers"]["X-Team"] == "games"  # not a secret


def test_masked_keeps_the_other_settings(secret_config: ReporterConfig) -> None:
    masked = secret_config.masked()
    assert set(masked) == {*SECTIONS, "games"}
    assert masked["reporter"]["batch_size"] == 128
    assert masked["redis"]["shards"] == 16


def test_section_repr_masks_secrets(secret_config: ReporterConfig) -> None:
    for value in SECRETS:
        assert value not in repr(secret_config.redis) + repr(secret_config.sink)


@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "config").glob("*.toml")))
def test_every_shipped_config_file_is_valid(name: str) -> None:
    env = {
        "REDIS_PASSWORD": REDIS_PW,
        "INGEST_TOKEN": TOKEN,
        "NPPA_SECRET_KEY": "00112233445566778899aabbccddeeff",
    }
    config = ReporterConfig.load(str(ROOT / "config" / name), env=env)
    assert config.source.endswith(name)
    assert REDIS_PW not in repr(config) and TOKEN not in repr(config)
    assert env["NPPA_SECRET_KEY"] not in repr(config)


def test_the_sdk_skips_exactly_the_reporters_sections() -> None:
    sdk = set(sections_of(TelemetryConfig))
    # A section inside another ([sink.ndjson]) is skipped with it.
    assert set(TelemetryConfig.OTHER_SECTIONS) == {n.split(".")[0] for n in SECTIONS} - sdk
    assert sdk < set(SECTIONS)


def test_the_sdk_reads_its_part_of_the_shipped_file() -> None:
    assert TelemetryConfig.load(str(SHIPPED), env={}) == TelemetryConfig()
    assert ReporterConfig.load(str(SHIPPED), env={}).redis == TelemetryConfig().redis


def test_a_renamed_value_is_accepted_with_a_notice(tmp_path: Path) -> None:
    path = write(tmp_path, '[sink]\ntransport = "stdlib"\n')
    config = ReporterConfig.load(str(path), env={})
    assert config.sink.transport == "builtin"
    [notice] = config.notices
    assert str(path) in notice and "[sink] transport" in notice and "'builtin'" in notice
    env = ReporterConfig.load(str(write(tmp_path, "")), env={"TELEMETRY_SINK_TRANSPORT": "stdlib"})
    assert env.sink.transport == "builtin"
    assert "TELEMETRY_SINK_TRANSPORT" in env.notices[0]
    assert ReporterConfig.load(str(SHIPPED), env={}).notices == ()


NPPA = '[sink]\nkind = "nppa"\n[nppa]\napp_id = "app"\nsecret_key = "${KEY}"\n'
SIZED = "[buffer]\nmax_events_per_game = 100000\n"


@pytest.mark.parametrize("key", ["", "0123", "g" * 32, "0" * 31, "0" * 33])
def test_an_nppa_secret_that_is_not_32_hex_characters_is_refused_unshown(
    tmp_path: Path, key: str
) -> None:
    message = load_error(write(tmp_path, NPPA), env={"KEY": key})
    assert "[nppa] secret_key" in message and "32 hex characters" in message
    if key:
        assert key not in message


def test_the_nppa_secret_is_masked_everywhere(tmp_path: Path) -> None:
    key = "0123456789abcdef0123456789ABCDEF"
    config = ReporterConfig.load(str(write(tmp_path, NPPA)), env={"KEY": key})
    assert config.section(NppaSettings).secret_key == key
    for text in (repr(config), repr(config.section(NppaSettings)), str(config.masked())):
        assert key not in text
    wrong_type = write(tmp_path, "[nppa]\nsecret_key = 730641928517364\n", name="t.toml")
    assert "730641928517364" not in load_error(wrong_type)


KEY_FILE = '[sink]\nkind = "nppa"\n[nppa]\napp_id = "app"\nsecret_key_file = "{path}"\n'


def test_an_nppa_key_file_is_read_and_checked_unshown(tmp_path: Path) -> None:
    key = "0123456789abcdef0123456789ABCDEF"
    key_file = tmp_path / "nppa.key"
    key_file.write_text(f"\n  {key}  \n", encoding="utf-8")  # whitespace around it is fine
    config = ReporterConfig.load(str(write(tmp_path, KEY_FILE.format(path=key_file))), env={})
    assert (
        config.section(NppaSettings).secret_key_file == str(key_file)
        and config.section(NppaSettings).secret_key == ""
    )
    for bad in ("0" * 31, "g" * 32, key + key, ""):
        key_file.write_text(bad, encoding="utf-8")
        message = load_error(write(tmp_path, KEY_FILE.format(path=key_file)))
        assert "[nppa] secret_key_file" in message and "32 hex characters" in message
        assert str(key_file) in message and "telemetry.toml" in message
        if bad:
            assert bad not in message
    missing = load_error(write(tmp_path, KEY_FILE.format(path=tmp_path / "none")))
    assert "[nppa] secret_key_file" in missing and "cannot read" in missing


def test_a_key_and_a_key_file_are_one_too_many(tmp_path: Path) -> None:
    key_file = tmp_path / "nppa.key"
    key_file.write_text("a" * 32, encoding="utf-8")
    text = KEY_FILE.format(path=key_file) + 'secret_key = "' + "b" * 32 + '"\n'
    message = load_error(write(tmp_path, text))
    assert "secret_key_file" in message and "not both" in message and "b" * 32 not in message


def test_header_files_are_checked_when_the_config_is_loaded(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("Bearer abc.def\n", encoding="utf-8")
    base = '[sink]\nurl = "http://127.0.0.1:9/x"\n[sink.header_files]\n'
    config = ReporterConfig.load(
        str(write(tmp_path, base + f'Authorization = "{token}"\n')), env={}
    )
    assert dict(config.sink.header_files) == {"Authorization": str(token)}
    token.write_text("Bearer abc\ndef", encoding="utf-8")
    message = load_error(write(tmp_path, base + f'Authorization = "{token}"\n'))
    assert "[sink] header_files.Authorization" in message and "abc" not in message
    twice = base + f'Authorization = "{token}"\n[sink.headers]\nauthorization = "x"\n'
    assert "also in [sink] headers" in load_error(write(tmp_path, twice))
    assert "not a header name" in load_error(write(tmp_path, base + f'"a b" = "{token}"\n'))


def test_nppa_needs_an_app_id(tmp_path: Path) -> None:
    path = write(tmp_path, '[sink]\nkind = "nppa"\n[nppa]\nsecret_key = "' + "a" * 32 + '"\n')
    assert "[nppa] app_id" in load_error(path)


def test_a_games_biz_id_is_the_reporters_and_the_sdk_skips_it(tmp_path: Path) -> None:
    path = write(tmp_path, '[games."farm"]\nbiz_id = "1101999999"\nmax_events_per_game = 5\n')
    config = ReporterConfig.load(str(path), env={})
    assert (config.biz_id("farm"), config.biz_id("other")) == ("1101999999", "")
    sdk = TelemetryConfig.load(str(path), env={})
    assert sdk.games["farm"].max_events_per_game == 5
    assert not hasattr(sdk.games["farm"], "biz_id")


def test_resend_beyond_the_buffers_ttl_is_pointed_out(tmp_path: Path) -> None:
    text = SIZED + NPPA + 'late_behaviour = "resend"\n'
    config = ReporterConfig.load(str(write(tmp_path, text)), env={"KEY": "a" * 32})
    [notice] = config.notices
    assert "late_max_age_seconds" in notice and "ttl_seconds" in notice
    longer = text + "late_max_age_seconds = 3000\n"
    assert ReporterConfig.load(str(write(tmp_path, longer)), env={"KEY": "a" * 32}).notices == ()


def test_an_nppa_buffer_capped_below_the_documented_sizing_is_pointed_out(
    tmp_path: Path,
) -> None:
    """docs/nppa.md sizes a game's buffer at 100,000 events; the default 1,000 evicts the
    oldest logins and logouts within seconds of a 1006 throttle at a modest peak."""
    env = {"KEY": "a" * 32}
    games = '[games."farm"]\nbiz_id = "1"\n[games."kart"]\nbiz_id = "2"\n'
    [notice] = ReporterConfig.load(str(write(tmp_path, NPPA + games)), env=env).notices
    assert "[buffer] max_events_per_game (1,000)" in notice and "100,000" in notice
    sized = ReporterConfig.load(str(write(tmp_path, NPPA + SIZED + games)), env=env)
    assert sized.notices == ()
    small = games + "max_events_per_game = 5000\n"  # kart's own cap
    [notice] = ReporterConfig.load(str(write(tmp_path, NPPA + SIZED + small)), env=env).notices
    assert '[games."kart"] max_events_per_game (5,000)' in notice
    # a game that cannot send (no biz_id) is another notice's business
    unfiled = games + '[games."new"]\nmax_events_per_game = 10\n'
    assert ReporterConfig.load(str(write(tmp_path, NPPA + SIZED + unfiled)), env=env).notices == ()
    json_sink = '[sink]\nurl = "http://127.0.0.1:9/x"\n'
    assert ReporterConfig.load(str(write(tmp_path, json_sink)), env={}).notices == ()


APPS = NPPA + '[nppa.apps.second]\napp_id = "app-2"\nsecret_key = "${KEY2}"\n'


def test_another_app_is_a_table_of_its_own_checked_and_masked_like_nppa(tmp_path: Path) -> None:
    first, second = "0123456789abcdef" * 2, "fedcba9876543210" * 2
    config = ReporterConfig.load(
        str(write(tmp_path, APPS + '[games.kart]\nbiz_id = "2"\napp = "second"\n')),
        env={"KEY": first, "KEY2": second},
    )
    app = config.section(NppaSettings).apps["second"]
    assert (app.app_id, app.secret_key, app.base_url) == ("app-2", second, "")
    assert config.games["kart"].app == "second"
    for text in (repr(config), repr(config.section(NppaSettings)), str(config.masked())):
        assert first not in text and second not in text
    bad = load_error(write(tmp_path, APPS), env={"KEY": first, "KEY2": "0123"})
    assert '[nppa.apps."second"] secret_key' in bad and "32 hex characters" in bad
    assert "0123" not in bad
    typo = write(tmp_path, NPPA + '[nppa.apps.second]\napp_idd = "x"\n')
    assert "[nppa.apps.\"second\"] unknown key 'app_idd'" in load_error(typo, env={"KEY": first})
    no_id = write(tmp_path, NPPA + f'[nppa.apps.second]\nsecret_key = "{second}"\n')
    assert '[nppa.apps."second"] app_id: required' in load_error(no_id, env={"KEY": first})


def test_a_game_naming_an_app_the_file_lacks_is_pointed_out_not_refused(tmp_path: Path) -> None:
    path = write(tmp_path, NPPA + SIZED + '[games.kart]\nbiz_id = "2"\napp = "nope"\n')
    config = ReporterConfig.load(str(path), env={"KEY": "0" * 32})
    [notice] = [n for n in make_sink(config).notices() if "kart" in n]
    assert 'app = "nope" names no [nppa.apps."nope"]' in notice and "held" in notice
