"""Where each game's reports go: its app (app id, base URL, the key in use) and its bizId, and
the scopes its requests can be held in.

A ``Route`` is what one request needs; ``Routes`` maps every game to one, or to why it has
none (a game without a ``biz_id``: a local config error, which holds the game, never
dead-letters it).  The routes are swapped whole when the config is read again (SIGHUP), so
a reader sees the old or the new, never a mix.

Hold scopes, within the sink's group (``HoldSpec``):

- ``""`` (the first app) or ``app:<app id>``: the app (an IP not registered, an app id
  refused, an expired test code);
- ``key:<app id>:<fingerprint>``: the reporters that use one key of the app (1011, 1012).
  The fingerprint is a short hash of the key, so a reporter with another key neither lifts
  nor sets it, and the hold names no secret;
- ``game:<game>``: one game (1010, a bizId the system does not know; no ``biz_id``).
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from reporter._senders.outcome import APP, GAME, KEY, Refusal
from reporter._sinks.base import HoldScope, SinkConfig
from reporter._sinks.nppa.settings import NppaSettings, read_key_file

_SAFE = re.compile(r"[A-Za-z0-9_.@-]{1,64}")
PATH = "/behavior/collection/loginout"
# The causes of a game held for the config (no id to send it with): the same words for every
# game (a metric's label), the game named in what to check.
NO_BIZ_ID, UNKNOWN_APP = "no biz_id", "unknown app"
NPPA_KEY = "[nppa] secret_key_file"


def endpoint_url(base_url: str) -> str:
    """Where reports go: ``<base_url>/behavior/collection/loginout``, or the base itself
    when it already names the path (the test system's URL ends in ``/loginout/<code>``)."""
    if "/loginout" in urlsplit(base_url).path:
        return base_url
    return base_url.rstrip("/") + PATH


def safe_name(text: str) -> str:
    """``text`` as a part of a hold's name: itself if it is short and plain, else a hash."""
    return text if _SAFE.fullmatch(text) else "h" + hashlib.sha256(text.encode()).hexdigest()[:20]


@functools.lru_cache(maxsize=64)
def fingerprint(key: str) -> str:
    """A short, one-way name of a secret key, for holds and logs (never the key)."""
    return hashlib.sha256(b"nppa key:" + key.lower().encode()).hexdigest()[:10]


@dataclass(frozen=True, slots=True)
class App:
    """One app id of the system: ``name`` is its ``[nppa.apps."<name>"]`` (``""``: the
    ``[nppa]`` section's own), ``key()`` the secret key in use, ``key_setting`` where it comes
    from (for messages)."""

    name: str
    app_id: str
    base_url: str
    key: Callable[[], str]
    key_setting: str
    first: bool = False  # the group's own app: its scope is the hold named ""

    @property
    def url(self) -> str:
        return endpoint_url(self.base_url)

    @property
    def label(self) -> str:
        return f"app {self.app_id}"

    def scope(self) -> HoldScope:
        return HoldScope("" if self.first else f"app:{safe_name(self.app_id)}", APP, self.label)

    def key_scope(self) -> HoldScope:
        fp = fingerprint(self.key())
        return HoldScope(
            f"key:{safe_name(self.app_id)}:{fp}",
            KEY,
            f"key {fp} of app {self.app_id} ({self.key_setting})",
            own=True,
        )


@dataclass(frozen=True, slots=True)
class Route:
    """One game's requests: its app and its bizId."""

    game: str
    biz_id: str
    app: App


def game_scope(game: str) -> HoldScope:
    return HoldScope(f"game:{safe_name(game)}", GAME, f"game {game!r}")


class Routes:
    """Every game's route, by name, from a config's games and apps; ``apps`` in order, the
    ``[nppa]`` one first."""

    def __init__(
        self, apps: Mapping[str, App], biz_ids: Mapping[str, str], app_of: Mapping[str, str]
    ) -> None:
        self.apps = dict(apps)
        self._biz_ids = dict(biz_ids)
        self._app_of = dict(app_of)  # game -> app name, for games that name one
        self._first = next(iter(self.apps.values()))

    def route(self, game: str) -> Route | Refusal:
        """The game's route, or why it has none (which holds the game)."""
        name = self._app_of.get(game, "")
        app = self.apps.get(name)
        if app is None:
            return Refusal(
                UNKNOWN_APP,
                f'game {game!r}: [games."{game}"] app = "{name}" names no [nppa.apps."{name}"]: '
                "add it, or fix the game's app, then SIGHUP",
                GAME,
            )
        biz_id = self._biz_ids.get(game, "")
        if not biz_id:
            return Refusal(
                NO_BIZ_ID,
                f'game {game!r} has events but no biz_id: set [games."{game}"] biz_id (its '
                "filing id), then SIGHUP",
                GAME,
            )
        return Route(game, biz_id, app)

    def app_for(self, game: str) -> App:
        """The game's app, else the first (a game with no route still has a rate and a
        key to be probed with)."""
        return self.apps.get(self._app_of.get(game, ""), self._first)

    def biz_id_of(self, app: App, prefer: str = "") -> str:
        """A bizId to probe ``app`` with: ``prefer``'s if it is one of the app's games, else
        the app's first game's ("" if it has none)."""
        return self.probe_game(app, prefer)[1]

    def probe_game(self, app: App, prefer: str = "") -> tuple[str, str]:
        """A game of ``app`` and its bizId to probe the app with: ``prefer`` if it is one,
        else the app's first game (("", "") if it has none)."""
        route = self.route(prefer) if prefer else None
        if isinstance(route, Route) and route.app.name == app.name:
            return prefer, route.biz_id
        for game, biz_id in self._biz_ids.items():
            if biz_id and self._app_of.get(game, "") == app.name:
                return game, biz_id
        return "", ""

    def games(self) -> list[str]:
        return list(self._biz_ids)


def routes_of(
    config: SinkConfig, keys: Mapping[str, Callable[[], str]], first: App | None = None
) -> Routes:
    """The routes of ``config``'s games; ``keys``: the key in use by setting (the secret
    files a sender reads; a setting not there is read from the config, or its file).
    ``first``: the ``[nppa]`` app to keep (a reload: its settings are taken at start)."""
    nppa = config.section(NppaSettings)
    if first is None:
        setting = NPPA_KEY if nppa.secret_key_file else "[nppa] secret_key"
        key = keys.get(setting) or _key_of(nppa.secret_key, nppa.secret_key_file)
        first = App("", nppa.app_id, nppa.base_url, key, setting, first=True)
    apps = {"": first}
    for name, app in nppa.apps.items():
        setting = key_setting(name, app.secret_key_file)
        key = keys.get(setting) or _key_of(app.secret_key, app.secret_key_file)
        apps[name] = App(name, app.app_id, app.base_url or first.base_url, key, setting)
    biz_ids = {game: settings.biz_id for game, settings in config.games.items()}
    app_of = {game: settings.app for game, settings in config.games.items() if settings.app}
    return Routes(apps, biz_ids, app_of)


def key_setting(app: str, path: str) -> str:
    """The setting an app's key comes from, as messages name it."""
    if not app:
        return NPPA_KEY if path else "[nppa] secret_key"
    return f'[nppa.apps."{app}"] ' + ("secret_key_file" if path else "secret_key")


def route_text(routes: Routes, game: str) -> str:
    """A game's route in words, to tell what a reload changed (no secret in it)."""
    route = routes.route(game)
    if isinstance(route, Refusal):
        return route.cause
    return f"{route.app.app_id}/{route.biz_id}"


def _key_of(value: str, path: str) -> Callable[[], str]:
    """A key given in the config, or read once from its file (status, tests: a running
    reporter reads the file through its ``SecretFile``)."""
    if not path:
        return lambda: value

    @functools.cache
    def read() -> str:
        try:
            return read_key_file(path)
        except ValueError:
            return ""

    return read
