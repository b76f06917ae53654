"""The ``ndjson`` sink: one JSON line per event in files closed by size and age and handed off
by an atomic rename; a batch delivered once written (and synced); a failed write taken back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest

from collector import Collector, ConfigError
from collector.config import build_config, raw_settings
from reporter._config import ReporterConfig, sink_problems
from reporter._senders.outcome import DELIVERED, RETRY
from reporter._sinks.ndjson import files as files_module
from reporter._sinks.ndjson.sender import NdjsonSender, ndjson_lines
from reporter._sinks.ndjson.settings import NdjsonSettings
from reporter._sinks.registry import make_sink
from tests.support.fixtures import MakeService
from tests.support.polling import wait_until
from tests.support.processes import child_env
from tests.support.sources import ROOT

NOWHERE = "redis://127.0.0.1:6379/0"


def settings(directory: Path, **keys: Any) -> NdjsonSettings:
    return NdjsonSettings(directory=str(directory), **keys)


def closed(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.ndjson"))


def still_open(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.ndjson.part"))


def lines_of(paths: list[Path]) -> list[dict[str, Any]]:
    return [orjson.loads(line) for path in paths for line in path.read_bytes().splitlines()]


def test_a_batch_is_a_line_per_event_in_a_file_renamed_when_closed(tmp_path: Path) -> None:
    sender = NdjsonSender(settings(tmp_path))
    events = [orjson.dumps({"player": "p1", "名字": "玩家"}), b'{"n":2}']
    assert sender.send("my-game", "b-1.0", events).kind == DELIVERED
    [part] = still_open(tmp_path)  # written, not handed off yet
    assert closed(tmp_path) == []
    assert part.name.startswith("telemetry-") and part.name.endswith(".ndjson.part")
    assert lines_of([part]) == [
        {"game": "my-game", "batch_id": "b-1.0", "event": {"player": "p1", "名字": "玩家"}},
        {"game": "my-game", "batch_id": "b-1.0", "event": {"n": 2}},
    ]
    sender.close()
    assert still_open(tmp_path) == []
    [done] = closed(tmp_path)
    assert done.name == part.name.removesuffix(".part")
    assert len(lines_of([done])) == 2
    assert sender.send("my-game", "b-2.0", events).kind == RETRY  # closed: not written


def test_an_event_written_on_several_lines_becomes_one(tmp_path: Path) -> None:
    sender = NdjsonSender(settings(tmp_path))
    assert sender.send("g", "b.0", [b'{\n  "a": [1,\r\n 2]\n}']).kind == DELIVERED
    sender.close()
    assert lines_of(closed(tmp_path)) == [{"game": "g", "batch_id": "b.0", "event": {"a": [1, 2]}}]


def test_a_file_is_closed_before_a_batch_would_take_it_past_max_file_bytes(
    tmp_path: Path,
) -> None:
    sender = NdjsonSender(settings(tmp_path, max_file_bytes=4096))
    event = orjson.dumps({"pad": "x" * 300})
    for i in range(20):
        assert sender.send("g", f"b{i}.0", [event] * 3).kind == DELIVERED
    big = orjson.dumps({"pad": "y" * 5000})
    assert sender.send("g", "big.0", [big]).kind == DELIVERED
    assert sender.send("g", "after.0", [event]).kind == DELIVERED
    sender.close()
    paths = closed(tmp_path)
    sizes = [path.stat().st_size for path in paths]
    assert len(paths) > 5
    assert [s for s in sizes if s > 4096] == [len(ndjson_lines("g", "big.0", [big]))]  # alone
    assert [line["batch_id"] for line in lines_of(paths)] == [
        *(f"b{i}.0" for i in range(20) for _ in range(3)),
        "big.0",
        "after.0",
    ]


def test_an_idle_file_is_handed_off_after_max_file_seconds(tmp_path: Path) -> None:
    sender = NdjsonSender(settings(tmp_path, max_file_seconds=1.0))
    try:
        assert sender.send("g", "b.0", [b"{}"]).kind == DELIVERED
        wait_until(lambda: closed(tmp_path), timeout=5, what="the idle file closed")
        assert still_open(tmp_path) == []
        assert sender.send("g", "b.1", [b"{}"]).kind == DELIVERED
        assert len(still_open(tmp_path)) == 1  # a new file for the next batch
    finally:
        sender.close()
    assert len(closed(tmp_path)) == 2


def test_a_directory_that_cannot_be_made_is_a_retry(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("", encoding="utf-8")
    sender = NdjsonSender(settings(tmp_path / "a-file" / "out"))
    outcome = sender.send("g", "b.0", [b"{}"])
    sender.close()
    assert (outcome.kind, outcome.code) == (RETRY, "ENOTDIR")
    assert "ndjson: cannot write to" in outcome.reason


FULL_DISK = textwrap.dedent("""
    import json, resource, signal, sys
    from reporter._sinks.ndjson.sender import NdjsonSender, ndjson_lines
    from reporter._sinks.ndjson.settings import NdjsonSettings

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (3000, 3000))
    sender = NdjsonSender(NdjsonSettings(directory=sys.argv[1]))
    event = json.dumps({"pad": "x" * 200}).encode()
    outcomes = [sender.send("g", f"b{i}.0", [event] * 2) for i in range(10)]
    print(json.dumps([[o.kind, o.code] for o in outcomes]))
""")


def test_a_write_that_fails_part_way_is_cut_back_and_retried(tmp_path: Path) -> None:
    """A real failed write: a file size limit (RLIMIT_FSIZE) the file runs into mid-batch,
    as a full disk would.  The lines of the failed batch are taken back, so the file holds
    whole lines of the batches that were delivered, and no more."""
    done = subprocess.run(
        [sys.executable, "-c", FULL_DISK, str(tmp_path)],
        cwd=ROOT,
        env=child_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    outcomes = json.loads(done.stdout)
    delivered = [i for i, (kind, _) in enumerate(outcomes) if kind == DELIVERED]
    assert delivered == list(range(len(delivered))) and 0 < len(delivered) < 10
    assert outcomes[len(delivered)] == [RETRY, "EFBIG"]
    [part] = still_open(tmp_path)  # the process ended without close()
    assert part.stat().st_size <= 3000
    assert [line["batch_id"] for line in lines_of([part])] == [
        f"b{i}.0" for i in delivered for _ in range(2)
    ]


@pytest.mark.parametrize(("fsync", "expected"), [("batch", 3 + 1), ("close", 1), ("never", 0)])
def test_fsync_follows_the_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fsync: str, expected: int
) -> None:
    """Files synced per batch (and at close), at close only, or never (directories aside)."""
    synced: list[int] = []
    real = os.fsync

    def counting(fd: int) -> None:
        if not os.path.isdir(f"/proc/self/fd/{fd}"):
            synced.append(fd)
        real(fd)

    monkeypatch.setattr(files_module.os, "fsync", counting)
    sender = NdjsonSender(settings(tmp_path, fsync=fsync))
    for i in range(3):
        assert sender.send("g", f"b{i}.0", [b"{}"]).kind == DELIVERED
    sender.close()
    assert len(synced) == expected


def ndjson_config(redis_url: str = NOWHERE, **sections: dict[str, Any]) -> ReporterConfig:
    """The defaults with ``[sink] kind = "ndjson"`` and ``sections`` updated; the files'
    keys under ``"ndjson"``."""
    raw = raw_settings(ReporterConfig())
    raw["redis"]["url"] = redis_url
    raw["sink"]["kind"] = "ndjson"
    raw["sink"]["ndjson"].update(sections.pop("ndjson", {}))
    for name, values in sections.items():
        raw[name].update(values)
    return build_config(raw, "test", env={}, interpolate=False, cls=ReporterConfig)


def test_the_config_needs_a_directory_to_run(tmp_path: Path) -> None:
    [problem] = sink_problems(ndjson_config())
    assert "[sink.ndjson] directory: required" in problem
    assert sink_problems(ndjson_config(ndjson={"directory": str(tmp_path)})) == []
    with pytest.raises(ConfigError, match=r"\[sink.ndjson\] prefix"):
        ndjson_config(ndjson={"prefix": "../x"})
    (tmp_path / "f").write_text("", encoding="utf-8")
    with pytest.raises(ConfigError, match="is not a directory"):
        ndjson_config(ndjson={"directory": str(tmp_path / "f")})
    from_env = ReporterConfig.load(
        None, env={"TELEMETRY_SINK_KIND": "ndjson", "TELEMETRY_SINK_NDJSON_DIRECTORY": "/srv/x"}
    )
    assert from_env.section(NdjsonSettings).directory == "/srv/x"


def test_check_config_connect_writes_a_file_there(tmp_path: Path) -> None:
    new = ndjson_config(ndjson={"directory": str(tmp_path / "new")})
    found = make_sink(new).check_connection()
    assert found.ok and "GiB free" in found.detail
    assert list((tmp_path / "new").iterdir()) == []  # created, and the file removed
    (tmp_path / "f").write_text("", encoding="utf-8")
    under_a_file = ndjson_config(ndjson={"directory": str(tmp_path / "f" / "x")})
    broken = make_sink(under_a_file).check_connection()
    assert not broken.ok and "cannot write there" in broken.detail


def test_the_service_writes_every_collected_event_once(
    tmp_path: Path, redis_url: str, make_service: MakeService
) -> None:
    out = tmp_path / "out"
    config = ndjson_config(
        redis_url,
        reporter={"linger_ms": 100, "poll_interval_ms": 20},
        ndjson={"directory": str(out), "max_file_bytes": 16384},
    )
    games = ["game-a", "game-b"]
    with Collector(config=config) as telemetry:
        for i in range(300):
            for game in games:
                telemetry.collect(game, {"id": f"{game}#{i}"})
        assert telemetry.flush(timeout=30)
    service = make_service(config)
    service.start()

    def written() -> int:
        try:
            return len(lines_of(closed(out) + still_open(out)))
        except FileNotFoundError:  # a file closed (renamed) as it was listed: look again
            return 0

    wait_until(lambda: written() >= 600, timeout=60, what="every event written")
    stopped = service.stop()
    assert still_open(out) == []  # the stop handed the last file off
    lines = lines_of(closed(out))
    assert Counter(line["event"]["id"] for line in lines) == Counter(
        f"{g}#{i}" for g in games for i in range(300)
    )
    assert all(line["event"]["id"].startswith(line["game"]) for line in lines)
    assert len(closed(out)) > 1  # rotated by size
    assert stopped.counts["delivered"] == 600
