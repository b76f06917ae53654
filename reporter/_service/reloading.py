"""SIGHUP: the config file read again, for what may change while a reporter runs.

A reporter takes from the file read again what its sink can take at run time
(``Sink.reload``: for the anti-addiction sink, the games and its apps), so a game shipped
before the reporter's config is sent once the config has it, without a restart.  Every
other section is the one of the start: one that changed is named in the SIGHUP line and a
WARNING (restart to take it).  A file that cannot be read, or is not valid, changes nothing:
the config in use is kept, with an ERROR that says why.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

from collector import ConfigError
from collector.config import raw_settings
from reporter._config import ReporterConfig
from reporter._sinks.base import Reloaded, Sink

logger = logging.getLogger("reporter")
GAMES = "games"


@dataclass(frozen=True, slots=True)
class ConfigReload:
    """What a reload of the config file did: the part of the SIGHUP line, and the sink's."""

    line: str
    taken: Reloaded | None = None


def reload_config(config: ReporterConfig, sink: Sink) -> ConfigReload:
    """Read ``config``'s file again and give ``sink`` what it can take of it."""
    path = config.source
    if not os.path.isfile(path):
        return ConfigReload(f"the config ({path}) is not a file: only secret files re-read")
    try:
        new = ReporterConfig.load(path)
    except ConfigError as exc:
        logger.error("SIGHUP: %s; the config in use is kept", exc)
        return ConfigReload(f"the config file was not taken ({exc})")
    taken = sink.reload(new)
    untaken = _changed_sections(config, new, sink.reloaded_keys)
    if untaken:
        logger.warning(
            "SIGHUP: %s changed in %s but is taken only at start: restart the reporter for it",
            ", ".join(untaken),
            path,
        )
    line = f"the config file: {taken.taken or 'nothing taken at run time'}"
    if untaken:
        line += f" ({', '.join(untaken)} changed: taken at a restart)"
    return ConfigReload(line, taken)


def _changed_sections(
    old: ReporterConfig, new: ReporterConfig, reloaded: frozenset[tuple[str, str]]
) -> list[str]:
    """The sections (and games) that differ in a key the sink does not take (``reloaded``)."""
    before, after = raw_settings(old), raw_settings(new)

    def kept(name: str, table: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in table.items() if (name, k) not in reloaded}

    out = [
        f"[{name}]"
        for name in sorted(before)
        if name != GAMES and kept(name, before[name]) != kept(name, after.get(name, {}))
    ]
    games = set(before[GAMES]) | set(after[GAMES])
    for game in sorted(games):
        was = kept(GAMES, before[GAMES].get(game, {}))
        now = kept(GAMES, after[GAMES].get(game, {}))
        if was and now and was != now:
            out.append(f'[games."{game}"]')
    return out
