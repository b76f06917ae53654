"""The anti-addiction audit trail (``[nppa] audit_directory``): the writer on its own, the
lines the sender writes around each request (the request's before its bytes go), the items
dropped before a request, and ``telemetry-reporter audit session``."""

from __future__ import annotations

import calendar
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from reporter._commands.cli import main
from reporter._senders.outcome import DELIVERED, RETRY
from reporter._sinks.nppa import audit as audit_module
from reporter._sinks.nppa.audit import AuditTrail
from reporter._sinks.nppa.sender import NppaSender
from tests.support.nppa_sends import (
    APP_ID,
    NOW,
    SECRET,
    Captured,
    config,
    event,
    independent_open,
)
from tests.support.polling import wait_until

pytestmark = pytest.mark.usefixtures("restore_logging")


def lines(directory: Path) -> list[dict[str, Any]]:
    """Every line of the trail, in the order written (one process here)."""
    found = []
    for path in sorted(directory.iterdir()):
        found += [orjson.loads(raw) for raw in path.read_bytes().splitlines()]
    return found


def audited(captured: Any, directory: Path, clock: float = NOW, **nppa: Any) -> NppaSender:
    c = config(audit_directory=str(directory), audit_fsync_seconds=0, **nppa)
    return NppaSender(c, httpx.MockTransport(captured), lambda: clock)


# -- the writer ---------------------------------------------------------------------------------


def test_a_file_is_finished_at_its_size_and_at_a_new_utc_day(tmp_path: Path) -> None:
    day = [float(calendar.timegm((2024, 11, 22, 23, 59, 0)))]
    trail = AuditTrail(str(tmp_path), max_file_bytes=65_536, fsync_seconds=0, clock=lambda: day[0])
    line = {"type": "request", "pad": "x" * 1000}
    for _ in range(100):  # ~100 KB: two files
        assert trail.write(line)
    day[0] += 120  # past midnight, UTC
    assert trail.write({"type": "request", "n": "next day"})
    trail.close()
    files = sorted(tmp_path.iterdir())
    assert len(files) == 3
    assert all(f.stat().st_size <= 65_536 for f in files)
    assert [f.name[len("nppa-audit-") :][:8] for f in files] == ["20241122"] * 2 + ["20241123"]
    assert orjson.loads(files[2].read_bytes()) == {"type": "request", "n": "next day"}
    assert sum(len(f.read_bytes().splitlines()) for f in files) == 101


def test_a_line_that_cannot_be_written_is_counted_and_sending_goes_on(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory", encoding="utf-8")
    captured = Captured()
    sender = audited(captured, blocker / "audit")  # its parent is a file: never created
    outcome = sender.send("g1", "b.0", [event(0), event(1)])
    assert outcome.kind == DELIVERED and len(captured.requests) == 1
    assert outcome.audit_lost == 2  # the request's line and the answer's


# -- what the sender writes ---------------------------------------------------------------------


def test_each_request_is_written_before_it_goes_and_its_answer_after(tmp_path: Path) -> None:
    """The request's line is in the file when its bytes reach the interface (a crash
    between the two leaves a request without an answer, never the reverse)."""
    seen_at_send: list[list[dict[str, Any]]] = []

    def answer(plain: dict[str, Any]) -> dict[str, Any]:
        seen_at_send.append(lines(tmp_path))
        return {
            "errcode": 3001,
            "errmsg": "partial",
            "data": {"results": [{"no": 2, "errcode": 3005, "errmsg": "bad ot"}]},
        }

    captured = Captured(answer)
    sender = audited(captured, tmp_path)
    outcome = sender.send("g1", "b.7", [event(i) for i in range(3)], attempt=2)
    assert outcome.kind == DELIVERED and outcome.refused
    [request] = captured.requests
    [before] = seen_at_send
    assert [line["type"] for line in before] == ["request"]
    written = lines(tmp_path)
    assert [line["type"] for line in written] == ["request", "answer"]
    sent, heard = written
    assert sent == {
        "type": "request",
        "id": sent["id"],
        "timestamps": int(request.headers["timestamps"]),
        "app": APP_ID,
        "biz": "biz-1",
        "game": "g1",
        "batch": "b.7",
        "attempt": 2,
        "items": [
            {"no": n, "si": f"s{n - 1}", "bt": (n - 1) % 2, "ot": int(NOW) - 5} for n in (1, 2, 3)
        ],
    }
    assert heard["id"] == sent["id"] and heard["http"] == 200
    assert (heard["errcode"], heard["errmsg"], heard["outcome"]) == (3001, "partial", DELIVERED)
    assert heard["results"] == [{"no": 2, "errcode": 3005, "errmsg": "bad ot"}]
    assert "pi" not in json.dumps(written)  # the player's identity is never written


def test_a_moved_item_keeps_its_original_time(tmp_path: Path) -> None:
    captured = Captured()
    sender = audited(captured, tmp_path, late_behaviour="resend")
    late = int(NOW) - 1000
    assert sender.send("g1", "b.0", [event(0, ot=late), event(1)]).kind == DELIVERED
    sent = json.loads(independent_open(SECRET, captured.requests[0].content))["collections"]
    [request, _] = lines(tmp_path)
    first, second = request["items"]
    assert first["ot_original"] == late and first["ot"] == sent[0]["ot"] > late
    assert "ot_original" not in second


def test_every_request_of_a_1007_and_a_failure_have_their_lines(tmp_path: Path) -> None:
    answers = iter([{"errcode": 1007, "errmsg": "expired"}, {"errcode": 0, "data": ""}])
    ticks = iter(NOW + n for n in range(10))
    c = config(audit_directory=str(tmp_path), audit_fsync_seconds=0)
    captured = Captured(lambda plain: next(answers))
    sender = NppaSender(c, httpx.MockTransport(captured), lambda: next(ticks))
    assert sender.send("g1", "b.0", [event(0)]).kind == DELIVERED
    first, second = captured.requests
    written = lines(tmp_path)
    assert [(line["type"], line.get("errcode")) for line in written] == [
        ("request", None),
        ("answer", 1007),
        ("request", None),
        ("answer", 0),
    ]
    assert [written[0]["timestamps"], written[2]["timestamps"]] == [
        int(first.headers["timestamps"]),
        int(second.headers["timestamps"]),
    ]

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    down = NppaSender(c, httpx.MockTransport(refuse), lambda: NOW)
    assert down.send("g1", "b.1", [event(0)]).kind == RETRY
    *_, request, heard = lines(tmp_path)
    assert heard["id"] == request["id"] and heard["error"].startswith("ConnectError")


def test_items_never_sent_are_written_with_the_reason(tmp_path: Path) -> None:
    captured = Captured()
    sender = audited(captured, tmp_path)
    ahead = int(NOW) + 3600
    events = [event(0), event(1, ot=ahead), orjson.dumps({"si": "s9", "bt": 7, "ot": 1})]
    assert sender.send("g1", "b.0", events).kind == DELIVERED
    # a game without a biz_id is held, not refused: its items are sent once it has one
    assert sender.send("unfiled", "b.1", [event(4)]).hold is not None
    written = lines(tmp_path)
    refused = [line for line in written if line["type"] == "refused"]
    assert [(r["game"], [(i["si"], i.get("ot")) for i in r["items"]]) for r in refused] == [
        ("g1", [("s9", 1), ("s1", ahead)]),
    ]
    assert "bt: expected 1 (login) or 0 (logout)" in refused[0]["items"][0]["reason"]
    assert "max_future_seconds" in refused[0]["items"][1]["reason"]


def test_a_probe_is_written_as_a_request_without_items(tmp_path: Path) -> None:
    sender = audited(Captured(lambda plain: {"errcode": 3002, "errmsg": "empty"}), tmp_path)
    assert sender.probe("biz-1").kind == DELIVERED
    request, heard = lines(tmp_path)
    assert request["probe"] is True and "items" not in request and heard["errcode"] == 3002


def test_no_directory_no_trail(tmp_path: Path) -> None:
    os.chdir(tmp_path)
    c = config()
    sender = NppaSender(c, httpx.MockTransport(Captured()), lambda: NOW)
    assert sender.send("g1", "b.0", [event(0)]).kind == DELIVERED
    assert list(tmp_path.iterdir()) == []


# -- audit session --------------------------------------------------------------------------------


def test_the_session_command_says_whether_each_behaviour_was_accepted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A login accepted, a logout first refused (3005) then dropped as stale, and a session
    whose logout went out with no answer heard (a reporter stopped)."""
    answers = iter(
        [
            {"errcode": 0, "errmsg": "ok", "data": ""},
            {
                "errcode": 3001,
                "errmsg": "partial",
                "data": {"results": [{"no": 1, "errcode": 3005, "errmsg": "bad ot"}]},
            },
        ]
    )
    sender = audited(Captured(lambda plain: next(answers)), tmp_path)
    login = orjson.dumps({"si": "s-1", "bt": 1, "ot": int(NOW) - 5, "ct": 0, "pi": "1" * 38})
    logout = orjson.dumps({"si": "s-1", "bt": 0, "ot": int(NOW) - 4, "ct": 0, "pi": "1" * 38})
    assert sender.send("g1", "b.0", [login]).kind == DELIVERED
    assert sender.send("g1", "b.1", [logout]).refused
    sender.close()
    assert main(["audit", "session", "s-1", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    head, login_line, login_step, logout_line, logout_step = out.splitlines()
    assert head.startswith("session s-1: 1 files read in ")
    assert login_line.startswith("login: reported: accepted by the system (answer heard ")
    assert "answered 0 ok: accepted" in login_step and "bizId biz-1" in login_step
    assert logout_line.startswith("logout: NOT reported: ")
    assert "this item: 3005 bad ot: not taken" in logout_step
    assert main(["audit", "session", "s-1", "--dir", str(tmp_path), "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert (found["login"]["reported"], found["logout"]["reported"]) == (True, False)
    assert found["login"]["accepted_at_ms"] > 0
    assert main(["audit", "session", "s-2", "--dir", str(tmp_path)]) == 1  # no record
    assert "login: no record" in capsys.readouterr().out


# -- a crash between a request and its answer -------------------------------------------------

CHILD = """
import sys
from reporter._sinks.nppa.sender import NppaSender
from tests.support.entries import make_config

config = make_config(
    "redis://127.0.0.1:1/0",
    sink={"kind": "nppa", "timeout_seconds": 60.0},
    nppa={
        "app_id": "app-1",
        "secret_key": "00112233445566778899aabbccddeeff",
        "base_url": sys.argv[1],
        "audit_directory": sys.argv[2],
    },
    games={"g1": {"biz_id": "biz-1"}},
)
event = b'{"si":"s-crash","bt":0,"ot":%d,"ct":2,"di":"d1"}' % int(__import__("time").time())
NppaSender(config).send("g1", "b.0", [event])
"""


def test_a_reporter_killed_while_its_request_waits_leaves_the_request_without_answer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """SIGKILL between the request and its answer: the request's line is there (written
    to the system before the bytes went), and ``audit session`` says the answer is
    unknown."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    try:
        port = listener.getsockname()[1]
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, f"http://127.0.0.1:{port}", str(tmp_path)],
            cwd=Path(__file__).resolve().parents[4],
        )
        try:
            listener.settimeout(30)
            conn, _ = listener.accept()  # it sends; nobody answers
            held.append(conn)
            wait_until(lambda: conn.recv(65536, socket.MSG_PEEK), timeout=20, what="a request")
            child.send_signal(signal.SIGKILL)
            assert child.wait(timeout=20) == -signal.SIGKILL
        finally:
            if child.poll() is None:
                child.kill()
    finally:
        for conn in held:
            conn.close()
        listener.close()
    written = lines(tmp_path)
    assert [line["type"] for line in written] == ["request"]
    assert written[0]["items"][0]["si"] == "s-crash"
    assert main(["audit", "session", "s-crash", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "logout: unknown: sent, no answer recorded (the system may have taken it)" in out
    assert "no answer recorded (the reporter stopped before it heard one)" in out


def test_check_config_says_when_no_trail_is_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = '[sink]\nkind = "nppa"\n[nppa]\napp_id = "app-1"\nsecret_key = "' + SECRET + '"\n'
    games = '[games."farm"]\nbiz_id = "1101999999"\n'
    path = tmp_path / "nppa.toml"
    path.write_text(base + games, encoding="utf-8")
    assert main(["check-config", str(path)]) == 0
    assert "[nppa] audit_directory is not set" in capsys.readouterr().err
    kept = base + f'audit_directory = "{tmp_path / "audit"}"\n' + games
    path.write_text(kept, encoding="utf-8")
    assert main(["check-config", str(path)]) == 0
    assert "audit_directory" not in capsys.readouterr().err
    (tmp_path / "not-a-dir").write_text("x", encoding="utf-8")
    path.write_text(kept.replace(str(tmp_path / "audit"), str(tmp_path / "not-a-dir")))
    assert main(["check-config", str(path)]) == 2
    assert "[nppa] audit_directory: " in capsys.readouterr().err


def test_a_file_of_the_same_name_is_never_appended_to(tmp_path: Path) -> None:
    """A process with the same pid before a restart, in the same second: its file is left
    as it is (a failed write is cut back to the size this process wrote)."""
    stamp = float(calendar.timegm((2024, 11, 22, 10, 0, 0)))
    trail = AuditTrail(str(tmp_path), fsync_seconds=0, clock=lambda: stamp)
    name = f"nppa-audit-20241122T100000Z-{audit_module._HOST}-{os.getpid()}-0001.jsonl"
    (tmp_path / name).write_bytes(b'{"type":"request","earlier":true}\n')
    assert trail.write({"type": "request", "n": 1})
    trail.close()
    assert (tmp_path / name).read_bytes() == b'{"type":"request","earlier":true}\n'
    assert (tmp_path / name.replace("-0001", "-0002")).read_bytes() == (
        b'{"type":"request","n":1}\n'
    )


FULL_DISK = """
import os, resource, signal, sys
from reporter._sinks.nppa import audit as audit_module
from reporter._sinks.nppa.audit import AuditTrail
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG)
resource.setrlimit(resource.RLIMIT_FSIZE, (2500, 2500))
trail = AuditTrail(sys.argv[1], fsync_seconds=0)
print(sum(trail.write({"type": "request", "pad": "x" * 1000}) for _ in range(5)), trail.lost)
"""


def test_a_line_the_disk_takes_only_in_part_is_taken_back(tmp_path: Path) -> None:
    """A file size limit (as a full disk would) stops the third line part way: it is cut
    off again, so the file holds whole lines only, and the lines lost are counted."""
    done = subprocess.run(
        [sys.executable, "-c", FULL_DISK, str(tmp_path)],
        cwd=Path(__file__).resolve().parents[4],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.split() == ["2", "3"]
    [path] = tmp_path.iterdir()
    assert [orjson.loads(raw)["pad"] == "x" * 1000 for raw in path.read_bytes().splitlines()] == [
        True,
        True,
    ]
