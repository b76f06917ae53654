"""The Lua scripts shipped in the package, loaded once each.

Scripts are read as package resources (``collector._lua``, the top-level ``lua/`` folder), so
they load the same from a source checkout and from an installed wheel.  A script is called by
its SHA1 (EVALSHA); a server that answers NOSCRIPT (restarted, failed over, flushed) gets the
text with SCRIPT LOAD and the call is sent again.  That happens in one place,
``collector.store._bulk``, for single and bulk calls alike.

Code shared by several scripts lives in ``lua/_<part>.lua``; a line ``-- include: _<part>``
is replaced by that file's text when the script is read (scripts cannot call each other), so
the server sees, and the SHA1 covers, one whole script.  A part may include another; each part
goes in once, where it is first included (a later include of it is dropped, so two parts can
both rely on a third).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cache
from importlib.resources import files

SCRIPT_NAMES = (
    "collect",
    "claim",
    "ack",
    "ack_many",
    "nack",
    "settle",
    "extend",
    "release",
    "reap",
    "take_retries",
    "replay",
    "purge",
    "purge_ids",
    "shard_lease",
    "take_tokens",
    "heartbeat",
    "read_shard",
    "hold",
    "note_late",
    "reserve_slot",
    "set_aside",
)


_INCLUDE = re.compile(r"^-- include: (_[a-z_]+)$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class LuaScript:
    name: str
    text: str
    sha: str


@cache
def lua_script(name: str) -> LuaScript:
    if name not in SCRIPT_NAMES:
        raise KeyError(f"no script named {name!r}")
    text = _expand(name, set())
    return LuaScript(name, text, hashlib.sha1(text.encode()).hexdigest())


def _expand(name: str, included: set[str]) -> str:
    """The text of ``name`` with its includes (and theirs) in place, each part once."""

    def part(match: re.Match[str]) -> str:
        part_name = match.group(1)
        if part_name in included:
            return f"-- ({part_name} is included above)"
        included.add(part_name)
        return _expand(part_name, included).rstrip("\n")

    return _INCLUDE.sub(part, _read(name))


def _read(name: str) -> str:
    return (files("collector._lua") / f"{name}.lua").read_text(encoding="utf-8")


def script_text(name: str) -> str:
    return lua_script(name).text
