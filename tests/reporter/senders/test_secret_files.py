"""Secret files read safely, with real files: only a regular file is read (a FIFO put in
its place neither blocks a re-read nor the stop after it), at most 64 KiB, a changed file is
taken only once it has stopped changing (never half-written), a Kubernetes-style symbolic
link swap is followed, and a file or a config file holding secrets that others may read is
warned about."""

from __future__ import annotations

import logging
import os
import signal
import textwrap
import threading
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

from collector import ConfigError
from reporter._config import ReporterConfig
from reporter._demo.endpoint import LocalEndpoint
from reporter._senders.secrets import SecretFile
from reporter._settings import read_header_file
from tests.support.polling import wait_until
from tests.support.processes import start_run, stop_run
from tests.support.servers import Server

WAIT = 10.0
SETTING = "[sink] header_files.Authorization"
FIRST = "Bearer first-token-value"
SECOND = "Bearer second-token-value"


def token_file(tmp_path: Path, value: str = FIRST, mode: int = 0o600) -> Path:
    path = tmp_path / "token"
    path.write_text(value + "\n", encoding="ascii")
    path.chmod(mode)
    return path


def within(seconds: float, call: Callable[[], object]) -> object:
    """``call()``'s result, or a failure if it has not returned within ``seconds`` (it is
    left blocked on its thread)."""
    result: list[object] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            result.append(call())
        except BaseException as exc:  # handed to the caller
            failed.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if failed:
        raise failed[0]
    assert result, f"still blocked after {seconds} s"
    return result[0]


def replace_by_fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path, 0o600)


def test_a_fifo_in_place_of_a_secret_file_is_refused_without_waiting(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = token_file(tmp_path)
    secret = SecretFile(SETTING, str(path), read_header_file)
    replace_by_fifo(path)
    with caplog.at_level(logging.ERROR, logger="reporter"):
        assert within(WAIT, secret.poll) is None  # seen once
        found = within(WAIT, secret.poll)  # seen twice: read, and refused
        reread = within(WAIT, secret.reread)  # SIGHUP
    for each in (found, reread):
        assert each is not None and "is a named pipe (FIFO), not a regular file" in str(each)
    assert secret() == FIRST
    with pytest.raises(ConfigError, match=r"named pipe \(FIFO\), not a regular file"):
        within(WAIT, lambda: config_with_token(tmp_path, path))


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (lambda p: p.write_bytes(b"Bearer " + b"x" * 10_000_000), "larger than 65536 bytes"),
        (lambda p: p.symlink_to("/dev/zero"), "is a character device, not a regular file"),
        (lambda p: p.mkdir(), "is a directory, not a regular file"),
    ],
    ids=["10 MB", "/dev/zero", "directory"],
)
def test_only_a_small_regular_file_is_read(
    tmp_path: Path, make: Callable[[Path], object], problem: str
) -> None:
    path = token_file(tmp_path)
    secret = SecretFile(SETTING, str(path), read_header_file)
    path.unlink()
    make(path)
    assert problem in within(WAIT, secret.reread).problem  # type: ignore[attr-defined]
    assert secret() == FIRST


def test_a_huge_secret_file_is_read_no_further_than_its_bound(tmp_path: Path) -> None:
    """A file far larger than the bound (a path to the wrong file, a log) is refused having
    read no more than the bound of it: its size is not what the reader takes in."""
    path = token_file(tmp_path)
    secret = SecretFile(SETTING, str(path), read_header_file)
    with open(path, "r+b") as f:
        f.truncate(64 * 1024 * 1024)  # 64 MiB, sparse: nothing written to the disk
    tracemalloc.start()
    try:
        found = within(WAIT, secret.reread)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "larger than 65536 bytes" in found.problem  # type: ignore[attr-defined]
    assert peak < 1024 * 1024, f"{peak:,} bytes allocated at the peak"
    assert secret() == FIRST


def test_a_file_caught_half_written_is_not_used(tmp_path: Path) -> None:
    """The file watch looks while a writer is half-way (truncated, part written): that look
    takes nothing; the whole value is taken once two looks agree."""
    path = token_file(tmp_path)
    secret = SecretFile(SETTING, str(path), read_header_file)
    used = []
    with open(path, "w", encoding="ascii") as writer:
        writer.write(SECOND[:10])
        writer.flush()
        secret.poll()
        used.append(secret())
        writer.write(SECOND[10:] + "\n")
    for _ in range(2):
        secret.poll()
        used.append(secret())
    # Cut short it was a valid header value too: never in use.
    assert used == [FIRST, FIRST, SECOND]


def test_a_file_that_changes_while_it_is_read_is_not_taken(tmp_path: Path) -> None:
    path = token_file(tmp_path)

    def read_while_written(p: str) -> str:
        value = read_header_file(p)
        path.write_text(SECOND + "\n", encoding="ascii")  # a writer, as the check runs
        return value

    secret = SecretFile(SETTING, str(path), read_header_file)
    path.write_text("Bearer third\n", encoding="ascii")
    secret._read = read_while_written
    found = secret.reread()
    assert "changed while it was read" in found.problem
    assert secret() == FIRST
    secret._read = read_header_file
    secret.poll()
    assert secret.poll() is not None and secret() == SECOND


def test_a_symbolic_link_swap_is_followed(tmp_path: Path) -> None:
    """As a Kubernetes secret volume updates: ``token -> ..data/token``, and ``..data`` is
    swapped (renamed over) to point at a new directory."""
    for name, value in (("..2024_01", FIRST), ("..2024_02", SECOND)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "token").write_text(value, encoding="ascii")
        (tmp_path / name / "token").chmod(0o400)
    (tmp_path / "..data").symlink_to("..2024_01")
    (tmp_path / "token").symlink_to("..data/token")
    secret = SecretFile(SETTING, str(tmp_path / "token"), read_header_file)
    assert secret() == FIRST
    (tmp_path / "..data_tmp").symlink_to("..2024_02")
    os.replace(tmp_path / "..data_tmp", tmp_path / "..data")
    assert secret.poll() is None  # seen once
    found = secret.poll()
    assert found is not None and found.changed and secret() == SECOND


@pytest.mark.parametrize(
    ("mode", "warned"),
    [(0o600, ""), (0o400, ""), (0o640, "its group (mode 0640)"), (0o644, "everyone (mode 0644)")],
)
def test_a_secret_file_others_may_read_is_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, mode: int, warned: str
) -> None:
    path = token_file(tmp_path, mode=mode)
    with caplog.at_level(logging.WARNING, logger="reporter"):
        secret = SecretFile(SETTING, str(path), read_header_file)
        secret.reread()  # the same mode: warned once
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    if not warned:
        assert not warnings
        return
    [message] = warnings
    assert SETTING in message and str(path) in message and warned in message
    assert "token-value" not in message
    path.chmod(0o600)
    path.write_text(SECOND, encoding="ascii")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="reporter"):
        assert secret.reread().changed
    assert not caplog.records


def config_with_token(tmp_path: Path, token: Path, extra: str = "", mode: int = 0o600) -> Path:
    path = tmp_path / "reporter.toml"
    path.write_text(
        textwrap.dedent(f"""
        [redis]
        url = "redis://127.0.0.1:6379/0"
        [sink]
        url = "http://127.0.0.1:9/ingest"
        [sink.header_files]
        Authorization = "{token}"
        """)
        + extra,
        encoding="utf-8",
    )
    path.chmod(mode)
    ReporterConfig.load(str(path), env={"TOKEN": "Bearer from-the-environment"})
    return path


@pytest.mark.parametrize(
    ("extra", "mode", "held"),
    [
        ('[sink.headers]\nX-Api-Key = "abc123secret"\n', 0o644, "[sink] headers"),
        ('[sink.headers]\nX-Api-Key = "abc123secret"\n', 0o600, ""),
        ('[sink.headers]\nX-Api-Key = "${TOKEN}"\nX-Team = "games"\n', 0o644, ""),
        ('[sink.headers]\nX-Api-Key = "Bearer ${TOKEN}"\n', 0o644, ""),
        ('[sink.headers]\nX-Api-Key = "Bearer abc123secret"\n', 0o644, "[sink] headers"),
        ('[sink.headers]\nX-Team = "games"\n', 0o644, ""),
        ('[nppa]\nsecret_key = "${TOKEN}"\n', 0o644, ""),
    ],
)
def test_a_config_file_holding_secrets_that_others_may_read_is_noticed(
    tmp_path: Path, extra: str, mode: int, held: str
) -> None:
    token = token_file(tmp_path)
    path = config_with_token(tmp_path, token, extra, mode)
    notices = [
        n for n in ReporterConfig.load(str(path), env={"TOKEN": "x"}).notices if "may be read" in n
    ]
    if not held:
        assert not notices
        return
    [notice] = notices
    assert f"{path} may be read by its group and everyone (mode 0644)" in notice
    assert held in notice and "abc123secret" not in notice


@pytest.mark.parametrize(
    "url",
    ["redis://:hunter22@127.0.0.1:6379/0", "redis://default:hunter22@127.0.0.1:6379/0"],
)
def test_a_redis_password_in_a_readable_config_file_is_noticed(tmp_path: Path, url: str) -> None:
    path = tmp_path / "reporter.toml"
    path.write_text(f'[redis]\nurl = "{url}"\n', encoding="utf-8")
    path.chmod(0o644)
    [notice] = [n for n in ReporterConfig.load(str(path), env={}).notices if "may be read" in n]
    assert "[redis] url" in notice and "hunter22" not in notice
    path.write_text('[redis]\nurl = "redis://default:${PW}@127.0.0.1:6379/0"\n', encoding="utf-8")
    assert not [
        n for n in ReporterConfig.load(str(path), env={"PW": "x"}).notices if "may be read" in n
    ]


def test_a_fifo_swapped_in_neither_blocks_sighup_nor_sigterm(
    tmp_path: Path, own_server: Server
) -> None:
    """The running reporter: its token file replaced by a FIFO, then SIGHUP (and the file
    watch) try to read it; SIGTERM still stops the process, with exit status 0."""
    token = token_file(tmp_path)
    log = tmp_path / "reporter.log"
    with LocalEndpoint() as endpoint:
        path = tmp_path / "json.toml"
        path.write_text(
            textwrap.dedent(f"""
            [redis]
            url = "{own_server.url}"
            shards = 4
            [sink]
            url = "{endpoint.url}"
            [sink.header_files]
            Authorization = "{token}"
            """),
            encoding="utf-8",
        )
        path.chmod(0o600)
        reporter = start_run(path, log)
        try:
            wait_until(
                lambda: "key prefix" in log.read_text(),  # the start-up line
                timeout=30,
                what="the reporter started",
            )
            replace_by_fifo(token)
            reporter.send_signal(signal.SIGHUP)
            wait_until(
                lambda: "named pipe (FIFO), not a regular file" in log.read_text(),
                timeout=30,
                what="the FIFO refused",
            )
        finally:
            code = stop_run(reporter)
    text = log.read_text()
    assert code == 0, text
    assert "token-value" not in text
