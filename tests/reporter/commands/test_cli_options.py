"""The command line's options and exit codes: global options anywhere, ``--version``, one line
and exit 3 for every kind of Redis trouble, exit 2 for bad usage, exit 1 with the traceback
only under ``-v`` for a bug, a closed stdout, and the note on which server is used."""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from reporter._commands import cli
from reporter._commands.cli import _parser, main, package_version
from reporter._demo.endpoint import LocalEndpoint
from tests.support.fixtures import MakeLockedServer
from tests.support.processes import child_env
from tests.support.servers import Server, free_port
from tests.support.sources import ROOT

pytestmark = pytest.mark.usefixtures("no_telemetry_env", "restore_logging")

PASSWORD = "S3CRET-pw-for-the-test"


def config_file(tmp_path: Path, redis_url: str, *, cluster: bool = False) -> str:
    path = tmp_path / "cli.toml"
    path.write_text(
        textwrap.dedent(f"""
        [redis]
        url = "{redis_url}"
        cluster = {"true" if cluster else "false"}
        key_prefix = "cli"
        shards = 4
        connect_timeout_seconds = 1.0
        socket_timeout_seconds = 1.0
        retries = 0
        [sink]
        url = "http://127.0.0.1:9/ingest"
    """),
        encoding="utf-8",
    )
    return str(path)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# -- global options ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["--config", "x.toml", "-v", "--log-format", "json", "status", "--json"],
        ["status", "--config", "x.toml", "--json", "-v", "--log-format", "json"],
        ["-v", "status", "--log-format", "json", "--json", "--config", "x.toml"],
        [
            "--log-level",
            "info",
            "status",
            "--json",
            "--config",
            "x.toml",
            "--log-format",
            "json",
            "-v",
        ],
    ],
)
def test_global_options_go_before_or_after_the_command(argv: list[str]) -> None:
    args = _parser().parse_args(argv)
    assert (args.command, args.config, args.log_level, args.log_format, args.json) == (
        "status",
        "x.toml",
        "debug",
        "json",
        True,
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["--config", "x.toml", "dead", "list", "--json"],
        ["dead", "--config", "x.toml", "list", "--json"],
        ["dead", "list", "--json", "--config", "x.toml"],
        ["dead", "-v", "list", "--config", "x.toml", "--json", "--log-level", "warning"],
    ],
)
def test_dead_takes_the_global_options_before_or_after_its_action(argv: list[str]) -> None:
    args = _parser().parse_args(argv)
    assert (args.command, args.action, args.config, args.json) == ("dead", "list", "x.toml", True)
    assert args.log_level in (None, "warning")  # the last of -v and --log-level wins


def test_an_option_given_twice_keeps_the_one_after_the_command() -> None:
    args = _parser().parse_args(["--config", "a.toml", "run", "--config", "b.toml"])
    assert args.config == "b.toml"


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--version")
    assert (code, out) == (0, f"telemetry-reporter {package_version()}\n")
    assert package_version() == "0.1.0"


@pytest.mark.parametrize(
    "argv",
    [
        ["status", "--watch", "0"],
        ["status", "--watch", "soon"],
        ["dead"],
        ["dead", "drop"],
        ["status", "--log-level", "loud"],
        ["nothing"],
        [],
        ["dead", "list", "--older-than", "3"],
        ["dead", "purge", "--game", "bad game"],
    ],
)
def test_bad_usage_exits_2(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert "usage:" in err and out == ""


def test_a_bad_log_level_in_the_environment_exits_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TELEMETRY_LOG_LEVEL", "chatty")
    code, _, err = run(capsys, "check-config")
    assert code == 2
    assert "TELEMETRY_LOG_LEVEL" in err and "'chatty'" in err


def test_a_config_error_exits_2_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("[reporter]\nworkers = 0\n", encoding="utf-8")
    code, _, err = run(capsys, "status", "--config", str(path))
    assert code == 2
    assert err.startswith("telemetry-reporter: config error: ") and "workers" in err


def test_check_config_takes_the_file_from_config_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = config_file(tmp_path, "redis://127.0.0.1:1/0")
    code, out, _ = run(capsys, "check-config", "--config", path)
    assert (code, out.splitlines()[0]) == (0, f"# {path}: valid")


# -- Redis trouble: one line, exit 3 -----------------------------------------------------------


def one_error_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize(
    "command",
    [
        ["status"],
        ["status", "--no-shards"],
        ["dead", "list"],
        ["dead", "show", "x"],
        ["dead", "purge", "--yes"],
    ],
)
def test_nothing_listening_exits_3_with_one_line(
    tmp_path: Path, command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    path = config_file(tmp_path, f"redis://127.0.0.1:{free_port()}/0")
    code, out, err = run(capsys, *command, "--config", path)
    line = one_error_line(err)
    assert code == 3 and out == ""
    assert line.startswith("telemetry-reporter: Redis unavailable: redis redis://127.0.0.1:")


def test_a_server_that_is_not_redis_exits_3_with_one_line(
    tmp_path: Path, endpoint: LocalEndpoint, capsys: pytest.CaptureFixture[str]
) -> None:
    port = endpoint.url.split(":")[2].split("/")[0]  # an HTTP server
    path = config_file(tmp_path, f"redis://127.0.0.1:{port}/0")
    for command in (["status"], ["dead", "list"]):
        code, _, err = run(capsys, *command, "--config", path)
        line = one_error_line(err)
        assert code == 3
        assert "Redis refused the request" in line
        assert "is [redis] url the address of a Redis server?" in line


def test_cluster_true_against_a_single_server_exits_3_with_one_line(
    tmp_path: Path, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = config_file(tmp_path, redis_url, cluster=True)
    code, _, err = run(capsys, "status", "--config", path)
    line = one_error_line(err)
    assert code == 3
    assert "[redis] cluster = true, but the server is not a cluster node" in line


@pytest.fixture
def locked_server(make_locked_server: MakeLockedServer) -> Server:
    """A server every client must log in to: user ``reporter`` with ``PASSWORD``."""
    return make_locked_server(PASSWORD)


def test_a_wrong_or_missing_password_exits_3_without_showing_it(
    tmp_path: Path, locked_server: Server, capsys: pytest.CaptureFixture[str]
) -> None:
    port = locked_server.port
    wrong = config_file(tmp_path, f"redis://reporter:not-{PASSWORD}@127.0.0.1:{port}/0")
    code, _, err = run(capsys, "status", "--config", wrong)
    line = one_error_line(err)
    assert code == 3
    assert "check the user name and password in [redis] url" in line
    assert PASSWORD not in err and "reporter:***@" in line
    missing = config_file(tmp_path, f"redis://127.0.0.1:{port}/0")
    code, _, err = run(capsys, "dead", "list", "--config", missing)
    assert code == 3
    assert "the server wants a password" in one_error_line(err)
    right = config_file(tmp_path, f"redis://reporter:{PASSWORD}@127.0.0.1:{port}/0")
    code, out, err = run(capsys, "status", "--no-shards", "--config", right)
    assert (code, err) == (0, "")
    assert PASSWORD not in out and "reporter:***@" in out


# -- bugs, closed pipes, the server used without a config -------------------------------------


def test_a_bug_exits_1_with_the_traceback_only_under_v(
    tmp_path: Path,
    redis_url: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(*args: object, **kwargs: object) -> int:
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(cli, "run_status", broken)
    path = config_file(tmp_path, redis_url)
    code, _, err = run(capsys, "status", "--config", path)
    assert code == 1
    assert one_error_line(err) == (
        "telemetry-reporter: unexpected error: ZeroDivisionError: "
        "a bug (run with -v for the traceback)"
    )
    code, _, err = run(capsys, "status", "--config", path, "-v")
    assert code == 1
    assert err.startswith("Traceback (most recent call last):")
    assert err.endswith("telemetry-reporter: unexpected error: ZeroDivisionError: a bug\n")


def test_a_closed_stdout_ends_the_command_quietly(tmp_path: Path) -> None:
    path = config_file(tmp_path, "redis://127.0.0.1:1/0")
    read, write = os.pipe()
    os.close(read)  # the reader is gone before anything is written (| head -0)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "reporter", "check-config", path],
            stdout=write,
            stderr=subprocess.PIPE,
            cwd=ROOT,
            env=child_env(),
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (0, "")


def test_status_and_dead_without_a_config_say_which_server_they_use(
    redis_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TELEMETRY_REDIS_URL", redis_url)
    for command in (["status", "--no-shards"], ["dead", "list"]):
        code, _, err = run(capsys, *command)
        assert code == 0
        assert err == (
            f"telemetry-reporter: no --config and no $TELEMETRY_CONFIG: using "
            f"<packaged telemetry.toml>, redis {redis_url}, key prefix "
            "'telemetry'\n"
        )


def test_with_a_config_nothing_is_said_about_the_server(
    tmp_path: Path,
    redis_url: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TELEMETRY_CONFIG", config_file(tmp_path, redis_url))
    code, _, err = run(capsys, "dead", "list")
    assert (code, err) == (0, "")


def test_version_and_usage_errors_in_a_process() -> None:
    version = subprocess.run(
        [sys.executable, "-m", "reporter", "--version"],
        cwd=ROOT,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (version.returncode, version.stdout.strip()) == (
        0,
        f"telemetry-reporter {package_version()}",
    )
    bad = subprocess.run(
        [sys.executable, "-m", "reporter", "status", "--watch", "-1"],
        cwd=ROOT,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert bad.returncode == 2 and "--watch" in bad.stderr


def test_open_store_translates_what_the_cluster_client_meets_on_connecting(redis_url: str) -> None:
    from collector.store import BackendError, open_store
    from tests.support.entries import make_config

    settings = dataclasses.replace(make_config(redis_url).redis, cluster=True)
    with pytest.raises(BackendError, match="Cluster mode is not enabled") as raised:
        open_store(settings)
    assert raised.value.__cause__ is not None


def test_run_with_its_metrics_address_taken_exits_with_one_line(
    redis_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        path = Path(config_file(tmp_path, redis_url))
        path.write_text(
            path.read_text(encoding="utf-8") + f'[metrics]\nlisten = "127.0.0.1:{port}"\n',
            encoding="utf-8",
        )
        code, _, err = run(capsys, "run", "--config", str(path))
    assert code == 1
    [line] = [line for line in err.splitlines() if "[metrics] listen" in line]
    assert line.startswith(
        f"telemetry-reporter: [metrics] listen: cannot serve metrics on 127.0.0.1:{port}"
    )
    assert "Traceback" not in err


def test_demo_seconds_is_explained_and_checked(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as shown:
        _parser().parse_args(["demo", "--help"])
    assert shown.value.code == 0
    assert "how long the simulated games send events (default: 15)" in " ".join(
        capsys.readouterr().out.split()
    )
    assert _parser().parse_args(["demo", "--seconds", "3"]).seconds == 3.0
    with pytest.raises(SystemExit) as refused:
        _parser().parse_args(["demo", "--seconds", "0"])
    assert refused.value.code == 2
    assert "expected seconds from 0.1" in capsys.readouterr().err
