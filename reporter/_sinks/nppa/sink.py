"""The ``nppa`` sink as the reporter sees it: shared request slots per app id, holds for
every reporter when the interface refuses our identity (each in the narrowest scope that
explains it: the app, the key, the game; ``routes``), the interface's 180 s window, a sealed
body, the key file, and a probe that reports nothing."""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Sequence

import httpx
import orjson

from collector.config import Where
from collector.nppa import LOGIN, LOGOUT
from reporter._constants import NPPA_RATE_HEADROOM
from reporter._exceptions import SinkConfigError
from reporter._logging import masked_url
from reporter._senders.outcome import DELIVERED, GAME, HOST, KEY, Outcome, Refusal
from reporter._senders.secrets import ACCEPTED, SecretFile, Vetted
from reporter._sinks.base import (
    BodyModel,
    Connection,
    Freshness,
    HoldScope,
    HoldSpec,
    LateDrop,
    Pacer,
    Pacing,
    Prober,
    Reloaded,
    SecretSpec,
    Sender,
    Sink,
    SinkConfig,
    SlotRate,
    scope_name,
)
from reporter._sinks.nppa.records import Recorder, audit_trail_of
from reporter._sinks.nppa.routes import (
    NPPA_KEY,
    App,
    Route,
    Routes,
    endpoint_url,
    fingerprint,
    game_scope,
    key_setting,
    route_text,
    routes_of,
    safe_name,
)
from reporter._sinks.nppa.sender import WINDOW_SECONDS, NppaSender
from reporter._sinks.nppa.settings import (
    NppaSettings,
    cap_advice,
    check_nppa,
    late_ttl_advice,
    read_key_file,
)
from reporter._sinks.nppa.trail import session_report

logger = logging.getLogger("reporter")

# {"data":"<base64 of nonce, AES-GCM of {"collections":[{"no":n,...},...]}, tag>"}: the
# item's "no" and comma add 10 bytes; sealing adds 28 bytes before base64.
NPPA_BODY = BodyModel(fixed=128, per_event=10, scale=4 / 3)

__all__ = ["NPPA_BODY", "NPPA_KEY", "NppaSink"]


class NppaSink(Sink):
    kind = "nppa"
    section = "nppa"
    settings = NppaSettings
    body_model = NPPA_BODY
    reloaded_keys = frozenset({("nppa", "apps"), ("games", "biz_id"), ("games", "app")})

    def __init__(self, config: SinkConfig) -> None:
        super().__init__(config)
        # What proves a new key (``vet_secrets``): the sender, the pacer, the alert.
        self._vet: tuple[NppaSender, Pacer | None, Callable[[str, str], None]] | None = None
        # Swapped whole when the sender binds the secret files, and on a reload.
        self.routes: Routes = routes_of(config, {})

    @property
    def nppa(self) -> NppaSettings:
        return self.config.section(NppaSettings)

    def check(self, where: Where) -> None:
        check_nppa(self.nppa, where)

    def advise(self, where: Where) -> list[str]:
        return [
            *late_ttl_advice(self.nppa, self.config.buffer_ttls(), where),
            *cap_advice(self._caps(), where),
        ]

    def _caps(self) -> dict[str, int]:
        """The buffer cap of every game that can send (one with a biz_id), by the key that
        sets it; ``[buffer]``'s when no game has a biz_id yet."""
        config = self.config
        caps: dict[str, int] = {}
        for game in config.games:
            if config.biz_id(game):
                own = config.games[game].max_events_per_game
                caps[f'[games."{game}"]' if own else "[buffer]"] = config.cap_for(game)
        return caps or {"[buffer]": config.cap_for("")}

    def _name(self) -> str:
        return scope_name("nppa", self.nppa.app_id)

    def pacing(self) -> Pacing:
        """Slots per app id (or per game's bizId) shared by every reporter, spaced so that no
        second holds more than ``[nppa] requests_per_second``; each app of
        ``[nppa.apps]`` has a rate of its own."""
        nppa = self.nppa
        return SlotRate(
            self._name(), nppa.requests_per_second * (1 - NPPA_RATE_HEADROOM), self._rate_scope
        )

    def _rate_scope(self, game: str) -> str:
        """The scope of ``game``'s requests in the rate: its app ('' for ``[nppa]``'s, as
        before there were others), and with ``rate_limit_scope = "game"`` its bizId."""
        routes = self.routes
        app = routes.app_for(game)
        scope = "" if app.first else app.app_id
        if self.nppa.rate_limit_scope != "game":
            return scope
        route = routes.route(game)
        biz_id = route.biz_id if isinstance(route, Route) else ""
        return f"{scope}/{biz_id}" if scope else biz_id

    def hold(self) -> HoldSpec:
        app_id = self.nppa.app_id
        return HoldSpec(
            self._name(),
            self.nppa.probe_interval_seconds,
            f"app {app_id}",
            f"the anti-addiction interface (app {app_id})",
        )

    def prober(self, sender: Sender) -> Prober | None:
        """A signed report without items, with the scope's identity: a game's with that
        game's route; an app's or a key's with the app's key and the bizId of the game whose
        request met the hold (else the app's first game's); this reporter's with any."""
        if not isinstance(sender, NppaSender):
            return None

        def probe(scope: HoldScope, game: str) -> Callable[[], Outcome] | None:
            target = self._probe_target(scope, game)
            if target is None:
                return None
            app, biz_id = target
            return lambda: sender.probe(biz_id, app, game)

        return probe

    def _probe_target(self, scope: HoldScope, game: str) -> tuple[App, str] | None:
        routes = self.routes
        if scope.kind == GAME:
            route = routes.route(game)
            return (route.app, route.biz_id) if isinstance(route, Route) else None
        if scope.kind == HOST:
            app = next(iter(routes.apps.values()))
        else:
            found = self._app_of_scope(scope)
            if found is None:
                return None
            app = found
        biz_id = routes.biz_id_of(app, game)
        return (app, biz_id) if biz_id else None

    def _app_of_scope(self, scope: HoldScope) -> App | None:
        for app in self.routes.apps.values():
            if scope.name in (app.scope().name, app.key_scope().name):
                return app
        return None

    def hold_scopes(self, game: str) -> tuple[HoldScope, ...]:
        app = self.routes.app_for(game)
        return (app.scope(), app.key_scope(), game_scope(game))

    def hold_scope(self, game: str, refusal: Refusal) -> HoldScope:
        if refusal.scope == GAME:
            return game_scope(game)
        app = self.routes.app_for(game)
        return app.key_scope() if refusal.scope == KEY else app.scope()

    def scope_named(self, name: str) -> HoldScope | None:
        """An app's scope, the key scope of a key this reporter uses, or a game's (any game:
        games are everybody's); None for another key's."""
        kind, _, rest = name.partition(":")
        if kind == GAME:
            return next(
                (game_scope(g) for g in self.routes.games() if safe_name(g) == rest),
                HoldScope(name, GAME, f"game {rest}"),
            )
        for app in self.routes.apps.values():
            for scope in (app.scope(), app.key_scope()):
                if scope.name == name:
                    return scope
        return None

    def whole_scopes(self) -> list[tuple[HoldScope, ...]]:
        return [(app.scope(), app.key_scope()) for app in self.routes.apps.values()]

    def unroutable(self, game: str) -> Refusal | None:
        route = self.routes.route(game)
        return route if isinstance(route, Refusal) else None

    def freshness(self) -> Freshness:
        """An item whose ``ot`` is 180 s less the margin before the request is stale (and
        never later than max_age); with ``[nppa] late_behaviour = "resend"``, only one
        older than ``late_max_age_seconds`` is (the sender moves the others into the
        window)."""
        rule = super().freshness()
        nppa = self.nppa
        window_ms = int((WINDOW_SECONDS - nppa.freshness_margin_seconds) * 1000)
        late_ms = int(nppa.late_max_age_seconds * 1000) if nppa.late_behaviour == "resend" else 0
        return Freshness(
            min(rule.max_age_ms, window_ms - 1), "ot", 1000, late_ms, note_stale=self.stale_items
        )

    def in_order(self) -> bool:
        """A session's logout must never reach the system before its login (it would count
        the player online, or the session's time wrong): a game's batches go first in, first
        out."""
        return True

    def endpoint(self) -> str:
        return self.nppa.base_url

    def secret_files(self) -> list[SecretSpec]:
        """The key files: ``[nppa]``'s and those of ``[nppa.apps]``."""
        nppa = self.nppa
        paths = {"": nppa.secret_key_file} | {n: a.secret_key_file for n, a in nppa.apps.items()}
        return [
            SecretSpec(key_setting(name, path), path, read_key_file)
            for name, path in paths.items()
            if path
        ]

    def sender(
        self,
        transport: httpx.BaseTransport | None = None,
        secrets: Sequence[SecretFile] = (),
        pacer: Pacer | None = None,
    ) -> Sender:
        self.routes = routes_of(self.config, {f.setting: f for f in secrets})
        return NppaSender(self.config, transport, pacer=pacer, routes=lambda: self.routes)

    def reload(self, config: SinkConfig) -> Reloaded:
        """The games (their ``biz_id`` and ``app``) and the apps of ``[nppa.apps]``, read
        again: a game held for want of either is probed with it and goes once the probe
        passes; a new app's key file is read (and watched from then on).  ``[nppa]``'s own
        settings are the ones of the start (a restart takes them)."""
        old = self.routes
        keys, files, broken = self._reload_keys(config.section(NppaSettings), old)
        new = routes_of(config, keys, first=old.apps[""])
        for name in broken:  # no key to send with: its games are held until it has one
            new.apps.pop(name, None)
        games = sorted(set(old.games()) | set(new.games()))
        changed = [g for g in games if route_text(old, g) != route_text(new, g)]
        apps = [n for n in new.apps if n and n not in old.apps]
        self.routes = new
        return Reloaded(
            f"{len(new.games())} games"
            + (f" ({', '.join(changed)} changed)" if changed else ", none changed")
            + (f", {len(new.apps)} apps ({', '.join(apps)} new)" if apps else ""),
            tuple(files),
        )

    def _reload_keys(
        self, nppa: NppaSettings, old: Routes
    ) -> tuple[dict[str, Callable[[], str]], list[SecretFile], list[str]]:
        """The keys of the apps read again: a key file already read is kept (it is watched);
        a new one is opened (and proved before each change, like the others); one that
        cannot be read leaves its app out, with an ERROR (its games are held)."""
        keys: dict[str, Callable[[], str]] = {
            a.key_setting: a.key for a in old.apps.values() if isinstance(a.key, SecretFile)
        }
        files: list[SecretFile] = []
        broken: list[str] = []
        for name, app in nppa.apps.items():
            setting = key_setting(name, app.secret_key_file)
            current = keys.get(setting)
            if not app.secret_key_file or (
                isinstance(current, SecretFile) and current.path == app.secret_key_file
            ):
                continue
            try:
                file = SecretFile(setting, app.secret_key_file, read_key_file)
            except ValueError as exc:
                logger.error("SIGHUP: %s: %s; that app is left out", setting, exc)
                broken.append(name)
                continue
            if self._vet is not None:
                file.vet_with(functools.partial(self._prove, name, *self._vet))
            keys[setting] = file
            files.append(file)
        return keys, files, broken

    def vet_secrets(
        self,
        sender: Sender,
        secrets: Sequence[SecretFile],
        pacer: Pacer | None,
        alert: Callable[[str, str], None],
    ) -> None:
        """A new key is proved before it is used: a request that reports nothing, signed
        with it, on a slot of the shared rate.  3002 proves it; 1011 or 1012 refuses it (the
        key in use stays, with an ERROR and an alert); any other answer tells nothing yet
        (tried again later)."""
        if not isinstance(sender, NppaSender):
            return
        self._vet = (sender, pacer, alert)
        for file in secrets:
            app = next((a for a in self.routes.apps.values() if a.key is file), None)
            if app is not None:
                file.vet_with(functools.partial(self._prove, app.name, sender, pacer, alert))

    def _prove(
        self,
        name: str,
        sender: NppaSender,
        pacer: Pacer | None,
        alert: Callable[[str, str], None],
        key: str,
    ) -> Vetted:
        app = self.routes.apps.get(name)
        if app is None:
            return ACCEPTED
        game, biz_id = self.routes.probe_game(app)
        if not biz_id:
            return ACCEPTED  # no game to prove it with: used as it is
        if pacer is not None and not pacer.one(game):
            return Vetted(False, "no request slot within reach (a 1006 pause, stopping)", True)
        outcome = sender.probe(biz_id, dataclasses.replace(app, key=lambda: key), game)
        fp = fingerprint(key)
        if outcome.kind == DELIVERED:
            logger.info(
                "%s: the new key %s proved (a request with no items was answered %s)",
                app.key_setting,
                fp,
                outcome.reason,
                extra={"setting": app.key_setting},
            )
            return ACCEPTED
        if outcome.hold is not None and outcome.hold.scope == KEY:
            why = f"the system answered {outcome.reason} to a request signed with it"
            try:
                alert(
                    "nppa new key",
                    f"{app.key_setting}: the new key {fp} of app {app.app_id} was refused "
                    f"({outcome.reason}); the key in use is kept: {outcome.hold.check}",
                )
            except Exception as exc:  # status misses one line; the log has it
                logger.warning("could not record the alert for status (%s)", exc)
            return Vetted(False, f"key {fp}: {why}")
        return Vetted(False, f"a request signed with it was answered {outcome.reason}", True)

    def check_connection(
        self,
        method: str = "HEAD",
        transport: httpx.BaseTransport | None = None,
        pacer: Pacer | None = None,
    ) -> Connection:
        """For every bizId of the file, a signed request with an empty ``collections``: it
        reports nothing, and the system answers 3002 once the app id, that bizId, the key
        and the signature have passed (1011 when the key or signature is wrong, 1010 when
        the app may not report for that game).  Each takes a slot of ``pacer`` first (the
        rate the running reporters share); after a 1006 the rest are not sent."""
        nppa = self.nppa
        games = self._games_by_biz_id()
        several = len(self.routes.apps) > 1
        where = f"POST {masked_url(endpoint_url(nppa.base_url))} (app {nppa.app_id}" + (
            f" and {len(self.routes.apps) - 1} more" if several else ""
        )
        if not games:
            return Connection(
                False,
                f"{where}, bizId -, no items): not sent: no game has a biz_id to send it "
                'with (set [games."<name>"] biz_id)',
            )
        sender = self.sender(transport, self.open_secrets(), pacer)
        assert isinstance(sender, NppaSender)
        lines: list[tuple[bool, str]] = []
        throttled = False
        try:
            for (name, biz_id), named in games.items():
                app = self.routes.apps[name]
                which = f"game{'s' if len(named) > 1 else ''} {', '.join(named)}"
                which += f", app {app.app_id}" if several else ""
                head = (
                    f"bizId {biz_id}, no items)" if len(games) == 1 else f"bizId {biz_id} ({which})"
                )
                if throttled:
                    lines.append((False, f"{head}: not sent: the interface throttles the app id"))
                    continue
                ok, said, throttled = _probe_one(sender, pacer, biz_id, named[0], app)
                lines.append((ok, f"{head}{said}"))
        finally:
            sender.close()
        if len(lines) == 1:
            return Connection(lines[0][0], f"{where}, {lines[0][1]}")
        passed = sum(ok for ok, _ in lines)
        detail = f"{where}, no items): {passed} of {len(lines)} bizIds passed" + "".join(
            f"\n  {line}" for _, line in lines
        )
        return Connection(passed == len(lines), detail)

    def describe(self) -> str:
        nppa = self.nppa
        more = [app.app_id for name, app in self.routes.apps.items() if name]
        return f"nppa {masked_url(endpoint_url(nppa.base_url))} app {nppa.app_id}" + (
            f" (and apps {', '.join(more)})" if more else ""
        )

    def notices(self) -> list[str]:
        """A game that lacks its filing id (one the file names without one, or none at all
        when the file gives no game one), and no audit trail."""
        return [*self._biz_id_notices(), *self._audit_notices()]

    def _biz_id_notices(self) -> list[str]:
        config = self.config
        missing = config.games_without_biz_id()
        why = (
            '[sink] kind = "nppa" needs [games."<name>"] biz_id, the filing id, for every '
            "game; events of a game without one are held until it is set (then SIGHUP)"
        )
        apps = self.nppa.apps
        unknown = [g for g, s in config.games.items() if s.app and s.app not in apps]
        out = [
            f'game {g!r}: app = "{config.games[g].app}" names no [nppa.apps."'
            f'{config.games[g].app}"]; its events are held until it does (then SIGHUP)'
            for g in unknown
        ]
        if missing:
            out.append(
                "games named in the file without a biz_id: " + ", ".join(missing) + f" ({why})"
            )
        elif not any(config.biz_id(game) for game in config.games):
            out.append(f"no game has a biz_id ({why})")
        return out

    def _audit_notices(self) -> list[str]:
        if self.nppa.audit_directory:
            return []
        return [
            "[nppa] audit_directory is not set: no audit trail of what was reported and "
            "answered is kept (telemetry-reporter audit session needs one; docs/nppa.md, "
            '"The audit trail")'
        ]

    def next_steps(self) -> list[str]:
        return [
            "next: copy config/nppa.toml, set [redis] url, [nppa] app_id and secret_key "
            "and every game's biz_id,",
            "      then: telemetry-reporter check-config my.toml   (and read docs/nppa.md, "
            "docs/operations.md)",
        ]

    def stale_items(self, game: str, batch_id: str, events: Sequence[bytes]) -> LateDrop:
        """Events dropped as stale: the logins and logouts among them, each one's ``(si, bt,
        ot)`` (an event that is not an item is only counted stale), in the audit trail too."""
        items = [item for item in map(_session_of, events) if item is not None]
        logins = sum(bt == LOGIN for _, bt, _ in items)
        recorder = Recorder(audit_trail_of(self.nppa), self.nppa.app_id)
        lines = [{"si": si, "bt": bt, "ot": ot} for si, bt, ot in items]
        route = self.routes.route(game)
        biz_id, app_id = (route.biz_id, route.app.app_id) if isinstance(route, Route) else ("", "")
        lost = recorder.stale(biz_id, game, batch_id, lines, app_id)
        return LateDrop(logins, len(items) - logins, items, lost)

    keeps_audit = True

    def audit_session(self, subject: str, directory: str, as_json: bool) -> tuple[bool, str]:
        """Was session ``subject``'s login and logout reported, when, and what was the
        answer (``reporter._sinks.nppa.trail``)."""
        directory = directory or self.nppa.audit_directory
        if not directory:
            raise SinkConfigError(
                f"{self.config.source}: [nppa] audit_directory is not set, so no audit trail "
                "is kept (or give --dir with the directory of one)"
            )
        return session_report(directory, subject, as_json)

    def _first_biz_id(self) -> str:
        return next((g.biz_id for g in self.config.games.values() if g.biz_id), "")

    def _games_by_biz_id(self) -> dict[tuple[str, str], list[str]]:
        """Every (app, bizId) of the file, with the games that report under it, in file
        order (a game whose app is not one of the file's is left out)."""
        games: dict[tuple[str, str], list[str]] = {}
        for game in self.config.games:
            route = self.routes.route(game)
            if isinstance(route, Route):
                games.setdefault((route.app.name, route.biz_id), []).append(game)
        return games


def _probe_one(
    sender: NppaSender, pacer: Pacer | None, biz_id: str, game: str, app: App
) -> tuple[bool, str, bool]:
    """One bizId's probe: whether it passed, what was answered (after the bizId in the
    line), and whether the interface said to stop (1006)."""
    if pacer is not None and not pacer.one(game):
        return False, ": not sent: no request slot within reach (a 1006 pause)", False
    began = time.monotonic()
    outcome = sender.probe(biz_id, app, game)
    if outcome.kind == DELIVERED:
        ms = (time.monotonic() - began) * 1000
        return True, f" answered {outcome.reason} in {ms:.0f} ms (nothing was reported)", False
    refusal = outcome.hold or outcome.alert
    said = f" answered {outcome.reason}" + (f"; {refusal.check}" if refusal else "")
    return False, said, outcome.pause_all > 0


def _session_of(event: bytes) -> tuple[str, int, int] | None:
    try:
        item = orjson.loads(event)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(item, dict):
        return None
    si, bt, ot = item.get("si"), item.get("bt"), item.get("ot")
    if not isinstance(si, str) or type(bt) is not int or type(ot) is not int:
        return None
    if bt not in (LOGIN, LOGOUT):
        return None
    return si, bt, ot
