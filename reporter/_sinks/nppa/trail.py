"""The anti-addiction audit trail read back: was a session's login and logout reported,
when, and what did the system answer?  (``telemetry-reporter audit session <si>``.)

It reads every file of the trail's directory (the one ``[nppa] audit_directory`` names, or a
copy gathered from several hosts), in the order they were begun.  For each behaviour of the
session (login ``bt`` 1, logout ``bt`` 0) it lists every request that carried it, with its
answer, and every time it was dropped (stale) or refused before a request, then says whether
the system accepted it: an answer 0 (or 3001) whose results do not list the item, or list it
with 0 only.  A request without an answer line was sent by a process that stopped before it
heard one: the system may have taken it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from reporter._exceptions import SinkConfigError
from reporter._sinks.nppa.audit import PREFIX, SUFFIX

BEHAVIOURS = {1: "login", 0: "logout"}


@dataclass
class TrailStep:
    """One thing that happened to a behaviour of the session: ``what`` is ``request``,
    ``stale`` or ``refused``; ``at`` in ms; for a request its line, the item in it and the
    answer line (None: none was written)."""

    what: str
    at: int
    line: dict[str, Any]
    item: dict[str, Any]
    answer: dict[str, Any] | None = None

    @property
    def accepted(self) -> bool:
        return self.what == "request" and verdict(self.item, self.answer)[0]


@dataclass
class SessionTrail:
    si: str
    steps: list[TrailStep] = field(default_factory=list)
    files: int = 0
    unreadable: int = 0  # lines cut short (a power loss) or not JSON


def session_report(directory: str, si: str, as_json: bool) -> tuple[bool, str]:
    """Whether the trail in ``directory`` has any record of ``si``, and what it says, as
    text or JSON."""
    if not os.path.isdir(directory):
        raise SinkConfigError(f"audit trail: {directory!r} is not a directory")
    session = read_session(directory, si)
    if as_json:
        return bool(session.steps), orjson.dumps(
            as_json_of(session), option=orjson.OPT_INDENT_2
        ).decode() + "\n"
    return bool(session.steps), as_text(session, directory)


def trail_files(directory: str) -> list[str]:
    """The trail's files, in the order they were begun (their names start with it)."""
    names = [n for n in os.listdir(directory) if n.startswith(PREFIX) and n.endswith(SUFFIX)]
    return [os.path.join(directory, n) for n in sorted(names)]


def read_session(directory: str, si: str) -> SessionTrail:
    """Every line of the trail about ``si``, with the answers to its requests."""
    session = SessionTrail(si)
    needle = b'"si":' + orjson.dumps(si)
    waiting: dict[str, list[TrailStep]] = {}  # request id -> its steps still without an answer
    for path in trail_files(directory):
        session.files += 1
        for line in _lines(path, session, needle):
            if line.get("type") == "answer":
                for step in waiting.pop(str(line.get("id")), []):
                    step.answer = line
            else:
                _take(session, line, waiting)
    session.steps.sort(key=lambda step: step.at)
    return session


def _lines(path: str, session: SessionTrail, needle: bytes) -> Iterator[dict[str, Any]]:
    """The lines of one file worth decoding: answers (short), and those that name the
    session (``needle``); the rest, most of a day's bytes, are only searched."""
    with open(path, "rb") as f:
        for raw in f:
            if not (raw.startswith(b'{"type":"answer"') or needle in raw):
                continue
            try:
                line = orjson.loads(raw)
            except orjson.JSONDecodeError:
                session.unreadable += 1
                continue
            if isinstance(line, dict):
                yield line


def _take(session: SessionTrail, line: dict[str, Any], waiting: dict[str, list[TrailStep]]) -> None:
    kind = line.get("type")
    items = line.get("items")
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict) or item.get("si") != session.si:
            continue
        if kind == "request":
            step = TrailStep("request", int(line.get("timestamps", 0)), line, item)
            waiting.setdefault(str(line.get("id")), []).append(step)
        elif kind in ("stale", "refused"):
            step = TrailStep(str(kind), int(line.get("at", 0)), line, item)
        else:
            continue
        session.steps.append(step)


def _unanswered(answer: dict[str, Any] | None) -> str:
    """Why there is no answer of the interface to read ("" when there is)."""
    if answer is None:
        return "no answer recorded (the reporter stopped before it heard one)"
    if answer.get("sent") is False:
        return "not sent (no request slot within reach)"
    if "error" in answer:
        return f"no answer: {answer['error']}"
    if answer.get("http") != 200:
        return f"HTTP {answer.get('http')}: not taken"
    return ""


def verdict(item: dict[str, Any], answer: dict[str, Any] | None) -> tuple[bool, str]:
    """Whether the system took the item, and the answer in words."""
    why = _unanswered(answer)
    if answer is None or why:
        return False, why
    code, message = answer.get("errcode"), answer.get("errmsg", "")
    said = f"answered {code} {message}".strip()
    if code not in (0, 3001):
        return False, f"{said}: not taken"
    results = answer.get("results")
    if not isinstance(results, list):
        return (True, f"{said}: accepted") if code == 0 else (False, f"{said}: not taken")
    own = [r for r in results if isinstance(r, dict) and r.get("no") == item.get("no")]
    codes = [r.get("errcode") for r in own]
    if all(c == 0 for c in codes):
        return True, f"{said}: accepted"
    listed = ", ".join(f"{r.get('errcode')} {r.get('errmsg', '')}".strip() for r in own)
    return False, f"{said}, this item: {listed}: not taken"


def _when(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}Z"


def _step_text(step: TrailStep) -> str:
    line, item = step.line, step.item
    ot = f"ot {item.get('ot')}" + (
        f" (moved from {item['ot_original']})" if "ot_original" in item else ""
    )
    where = f"bizId {line.get('biz')} (game {line.get('game')}, batch {line.get('batch')}"
    if step.what == "stale":
        return f"{_when(step.at)} dropped as stale, never sent: {ot}, {where})"
    if step.what == "refused":
        return f"{_when(step.at)} refused before sending ({item.get('reason')}): {ot}, {where})"
    said = verdict(item, step.answer)[1]
    heard = f", heard {_when(int(step.answer['at']))}" if step.answer else ""
    return (
        f"{_when(step.at)} request {line.get('id')} to {where}, attempt "
        f"{line.get('attempt')}), no {item.get('no')}, {ot}: {said}{heard}"
    )


def summary(steps: list[TrailStep]) -> str:
    """One behaviour's answer to "was it reported": when it was accepted, or what became of
    it last."""
    accepted = [s for s in steps if s.accepted]
    if accepted:
        first = accepted[0]
        assert first.answer is not None
        return (
            f"reported: accepted by the system (answer heard {_when(int(first.answer['at']))}, "
            f"request {first.line.get('id')} stamped {_when(first.at)})"
        )
    if not steps:
        return "no record"
    last = steps[-1]
    if last.what == "request" and last.answer is None:
        return "unknown: sent, no answer recorded (the system may have taken it)"
    return "NOT reported: " + _step_text(last).split(" ", 1)[1]


def as_text(session: SessionTrail, directory: str) -> str:
    lines = [f"session {session.si}: {session.files} files read in {directory}"]
    if session.unreadable:
        lines.append(f"  ({session.unreadable} lines cut short or unreadable were skipped)")
    for bt, name in BEHAVIOURS.items():
        steps = [s for s in session.steps if s.item.get("bt") == bt]
        lines.append(f"{name}: {summary(steps)}")
        lines += [f"  {_step_text(step)}" for step in steps]
    return "\n".join(lines) + "\n"


def as_json_of(session: SessionTrail) -> dict[str, Any]:
    behaviours = {}
    for bt, name in BEHAVIOURS.items():
        steps = [s for s in session.steps if s.item.get("bt") == bt]
        accepted = next((s for s in steps if s.accepted), None)
        behaviours[name] = {
            "reported": accepted is not None,
            "accepted_at_ms": int(accepted.answer["at"]) if accepted and accepted.answer else None,
            "summary": summary(steps),
            "steps": [
                {
                    "what": s.what,
                    "at_ms": s.at,
                    "line": {k: v for k, v in s.line.items() if k != "items"},
                    "item": s.item,
                    "answer": s.answer,
                    "verdict": verdict(s.item, s.answer)[1] if s.what == "request" else s.what,
                }
                for s in steps
            ],
        }
    return {
        "si": session.si,
        "files": session.files,
        "unreadable_lines": session.unreadable,
        **behaviours,
    }
