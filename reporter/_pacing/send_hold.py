"""Held senders: the endpoint refused our identity or configuration (a wrong key, an IP not
registered, a bizId it does not know), which no retry heals, so nothing is sent in the scope
that explains it until it is fixed.

A sink that can be held (``Sink.hold``) names a group of holds in Redis (``hold.lua``, one
hash tag), one hold per scope: an app, a game, the reporters that use one key, one
reporter's clock (``HoldScope``).  ``Holds`` mirrors the group's held scopes in this
process, refreshed by the probe job (``reporter._service.probing``) every second, so a
worker asks ``blocked(game)`` for free.  A game held in any of its scopes is not claimed, and
a batch of it already claimed is handed back without charging an attempt; every other
scope keeps its full rate.  Once per ``[nppa] probe_interval_seconds`` one reporter that can
(one that uses the key, one with a route for the game) gets the turn to probe a scope; the
first probe that passes lifts it for everyone.

A batch whose request meets a hold's cause again after a probe lifted the hold it had drawn
(the scope's own probe passed in between) is the cause itself: ``begin`` says ``poison``,
nothing is held, and the caller dead-letters the batch.

Logs: one ERROR when a hold starts (by whichever reporter started it), a WARNING in the
others when they see it, a reminder at most once a minute while it lasts (the probe job),
and one INFO line when it ends.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

from collector.store import BackendError, Hold, HoldOp, HoldState, Store
from reporter._constants import (
    HOLD_FIRST_PROBE_SECONDS,
    HOLD_KEEP_SECONDS,
    HOLD_SUSPECT_SECONDS,
    HOLDS_READ_MOST,
    OWN_HOLD_KEEP_PROBES,
)
from reporter._senders.outcome import APP, GAME, HOST, KEY, Refusal
from reporter._sinks.base import HoldScope, HoldSpec, Sink

logger = logging.getLogger("reporter")

NOT_HELD = HoldState(False)


def because(cause: str, check: str) -> str:
    """Why a scope is held, for a log line: the answer met, or a local reason."""
    said = f"the interface answered {cause}" if cause[:5] in ("nppa ", "HTTP ") else cause
    return f"{said}: {check}" if check else said


class SendHold:
    """The hold of one scope of a group (``group``, ``KeySchema.hold``), in Redis and mirrored
    here."""

    def __init__(self, store: Store, group: str, scope: HoldScope, probe_interval: float) -> None:
        self._store = store
        self.scope = scope
        self._key = store.schema.hold(group, scope.name)
        self._interval_ms = int(probe_interval * 1000)
        # A hold nobody touches is forgotten: one of every reporter's soon after its last
        # holder stopped probing it (another key, a reporter gone), an app's or game's a day on.
        keep = OWN_HOLD_KEEP_PROBES * probe_interval if scope.own else HOLD_KEEP_SECONDS
        self._keep_ms = int(max(keep, 120.0) * 1000)
        self._lock = threading.Lock()
        self._state = NOT_HELD

    @property
    def held(self) -> bool:
        """Whether this process believes the scope is held (a plain read: no Redis)."""
        return self._state.held

    @property
    def state(self) -> HoldState:
        """The last state seen (its ``now_ms`` is when it was read)."""
        return self._state

    def begin(self, hold: Refusal, game: str, batch: str = "") -> HoldState:
        """A request met ``hold`` (an outcome's cause and what to check): hold here at once,
        and in Redis for every reporter; the reporter that started it logs the ERROR.  With
        ``batch``, the batch whose request it was: ``poison`` in the answer if it drew the
        same cause before a probe lifted the hold (nothing is held then)."""
        cause, check = hold.cause, hold.check
        was_held = self._state.held
        try:
            state = self._call(HoldOp.HOLD, cause=cause, check=check, game=game, batch=batch)
        except BackendError as exc:
            self._state = HoldState(True, cause=cause, check=check, game=game)
            logger.error(
                "sending held for %s after %s, but Redis could not record it (%s): other "
                "reporters find out when they meet it too",
                self.scope.label,
                because(cause, check),
                exc,
            )
            return self._state
        if state.poison:
            return state
        with self._lock:
            self._state = state
        if state.mine:
            logger.error(
                "sending held for %s: %s. Nothing is sent or dead-lettered there meanwhile "
                "(events stay in Redis, and go stale as they age); a probe request at once, "
                "then one every %g s, finds out when it is fixed",
                self.scope.label,
                because(cause, check),
                self._interval_ms / 1000,
                extra={"hold": cause, "game": game, "scope": self.scope.kind},
            )
        elif not was_held:
            self._seen(state)
        return state

    def read_call(self) -> Hold:
        """The call that reads the hold (and drops it from the index if it is not held)."""
        return self._request(HoldOp.READ)

    def refresh(self) -> HoldState:
        """Read the hold from Redis into the mirror; log when it started or ended
        elsewhere."""
        return self.seen(self._call(HoldOp.READ))

    def take_turn(self, now: bool = False) -> HoldState:
        """The turn to probe, if it has come (``mine``), or at once with ``now`` (this
        reporter's key or config just changed: the others may not have it); the next turn
        is a probe interval later, whoever takes it."""
        return self.seen(self._call(HoldOp.TURN if now else HoldOp.PROBE))

    def probe_now(self) -> None:
        """Make the next probe due now, whoever takes it (a probe could not go out)."""
        self.seen(self._call(HoldOp.KICK))

    def note(self, hold: Refusal) -> HoldState:
        """A probe met ``hold``: keep holding, with this as the cause."""
        return self.seen(
            self._call(HoldOp.HOLD, cause=hold.cause, check=hold.check, game=self._state.game)
        )

    def lift(self, why: str) -> None:
        """A probe passed: sending resumes in the scope, in every reporter."""
        before = self._state
        state = self._call(HoldOp.LIFT)
        with self._lock:
            self._state = NOT_HELD
        if state.mine:
            logger.info(
                "sending resumed for %s: %s (held %.0f s for %s)",
                self.scope.label,
                why,
                max(0.0, (state.now_ms - before.since_ms) / 1000) if before.since_ms else 0.0,
                before.cause,
                extra={"hold": "", "scope": self.scope.kind},
            )

    def seen(self, state: HoldState) -> HoldState:
        """Take ``state`` (read from Redis) as the hold's; log a start or an end seen."""
        with self._lock:
            before, self._state = self._state, state
        if state.held and not before.held:
            self._seen(state)
        elif before.held and not state.held:
            logger.info(
                "sending resumed for %s (the hold, %s, was lifted)",
                self.scope.label,
                before.cause,
                extra={"hold": "", "scope": self.scope.kind},
            )
        return state

    def _seen(self, state: HoldState) -> None:
        logger.warning(
            "sending held for %s, for %.0f s now: %s",
            self.scope.label,
            state.age_seconds,
            because(state.cause, state.check),
            extra={"hold": state.cause, "scope": self.scope.kind},
        )

    def _call(
        self, what: HoldOp, cause: str = "", check: str = "", game: str = "", batch: str = ""
    ) -> HoldState:
        return self._store.call(self._request(what, cause, check, game, batch))

    def _request(
        self, what: HoldOp, cause: str = "", check: str = "", game: str = "", batch: str = ""
    ) -> Hold:
        return Hold(
            self._key,
            what,
            self._interval_ms,
            cause,
            check,
            game,
            self._keep_ms,
            scope=self.scope.name,
            batch=batch,
            window_ms=int(HOLD_SUSPECT_SECONDS * 1000),
            first_ms=int(HOLD_FIRST_PROBE_SECONDS * 1000),
        )


class Holds:
    """Every scope of one sink's group of holds, as this reporter sees them.

    ``blocked(game)``: whether a request of the game must wait (a plain read of the mirror,
    plus the sink's own check that it can route the game at all: a game it cannot route is
    held in its own scope).  ``begin``: an answer holds the scope the sink says
    (``Sink.hold_scope``; ``HOST``: this reporter's own).  ``refresh``: the held scopes from
    Redis into the mirror."""

    def __init__(self, store: Store, spec: HoldSpec, sink: Sink, reporter: str) -> None:
        self._store = store
        self._sink = sink
        self.spec = spec
        self._index_key = store.schema.hold(spec.name)
        self.host = HoldScope(
            f"host:{_plain(reporter)}", HOST, f"this reporter ({reporter}: its clock)", own=True
        )
        self._lock = threading.Lock()
        self._holds: dict[str, SendHold] = {}
        self._mirror: dict[str, HoldState] = {}  # the held scopes that concern this reporter

    # -- what the workers ask ------------------------------------------------------------

    def blocked(self, game: str) -> HoldState | None:
        """The hold a request of ``game`` would meet now, if any."""
        refusal = self._sink.unroutable(game)
        if refusal is not None:
            scope = self._sink.hold_scope(game, refusal)
            state = self._mirror.get(scope.name)
            return state if state is not None else self.begin(game, refusal)
        mirror = self._mirror
        if not mirror:
            return None
        for scope in self._sink.hold_scopes(game):
            state = mirror.get(scope.name)
            if state is not None:
                return state
        return mirror.get(self.host.name)

    @property
    def any_held(self) -> bool:
        """Whether any scope that concerns this reporter is held."""
        return bool(self._mirror)

    held = any_held

    def stalled(self) -> bool:
        """Whether nothing at all may be sent: every app held in a scope that holds all of
        its games (the sink gate stays closed meanwhile)."""
        mirror = self._mirror
        if not mirror:
            return False
        if self.host.name in mirror:
            return True
        apps = self._sink.whole_scopes()
        return bool(apps) and all(any(s.name in mirror for s in scopes) for scopes in apps)

    def cannot_send(self) -> bool:
        """Whether this reporter, unlike others, can send nothing: every app held in a scope
        of its own (its key, its clock).  It then leaves its shards to those that can."""
        mirror = self._mirror
        if not mirror:
            return False
        if self.host.name in mirror:
            return True
        apps = self._sink.whole_scopes()
        return bool(apps) and all(
            any(s.own and s.name in mirror for s in scopes) for scopes in apps
        )

    def begin(self, game: str, refusal: Refusal, batch: str = "") -> HoldState:
        """A request of ``game`` (of ``batch``) met ``refusal``: hold the scope it names."""
        scope = self.host if refusal.scope == HOST else self._sink.hold_scope(game, refusal)
        state = self._hold(scope).begin(refusal, game, batch)
        if state.held:
            with self._lock:
                self._mirror = {**self._mirror, scope.name: state}
        return state

    # -- what the probe job does -----------------------------------------------------------

    def refresh(self) -> list[SendHold]:
        """Read the held scopes from Redis (the index, and those held here) into the mirror;
        the holds of the scopes held now that concern this reporter."""
        names = dict.fromkeys(
            ["", *self._store.held_scopes(self._index_key, HOLDS_READ_MOST), *self._mirror]
        )
        holds = [hold for name in names if (hold := self._hold_named(name)) is not None]
        for name in self._mirror.keys() - {hold.scope.name for hold in holds}:
            logger.info(
                "sending resumed for %s here: this reporter no longer uses that key (the "
                "hold stays for the reporters that still do)",
                self._holds[name].scope.label if name in self._holds else name,
                extra={"hold": "", "scope": KEY},
            )
        replies = self._store.call_many([hold.read_call() for hold in holds])
        mirror: dict[str, HoldState] = {}
        for hold, reply in zip(holds, replies, strict=True):
            if isinstance(reply, BackendError):
                raise reply
            if hold.seen(reply).held:
                mirror[hold.scope.name] = reply
        with self._lock:
            self._mirror = mirror
        return [self._holds[name] for name in mirror]

    def current(self) -> list[SendHold]:
        """The holds of the scopes held now (as last read)."""
        return [self._holds[name] for name in self._mirror if name in self._holds]

    def forget(self, name: str) -> None:
        """A scope lifted here: out of the mirror at once."""
        with self._lock:
            self._mirror = {k: v for k, v in self._mirror.items() if k != name}

    def states(self) -> list[tuple[HoldScope, HoldState]]:
        """The scopes held now and their states (metrics)."""
        return [(self._holds[n].scope, s) for n, s in self._mirror.items() if n in self._holds]

    def _hold_named(self, name: str) -> SendHold | None:
        scope = self.host if name == self.host.name else self._sink.scope_named(name)
        return None if scope is None else self._hold(scope)

    def _hold(self, scope: HoldScope) -> SendHold:
        with self._lock:
            hold = self._holds.get(scope.name)
            if hold is None or hold.scope != scope:
                hold = SendHold(self._store, self.spec.name, scope, self.spec.probe_interval)
                if scope.name in self._holds:
                    hold.seen(self._holds[scope.name].state)
                self._holds[scope.name] = hold
            return hold


def _plain(text: str) -> str:
    """A reporter's id as part of a hold's name (its characters are a name's already)."""
    return "".join(c if c.isalnum() or c in "_.:@-" else "_" for c in text)[:100]


def read_holds(store: Store, spec: HoldSpec, sink: Sink) -> list[tuple[HoldScope, HoldState]]:
    """Every scope of the group held now, as Redis has it (``status``), oldest first: the
    group's first scope ('') and those of its index, each named as ``sink`` knows it (or as
    its name says: another key's, another reporter's)."""
    key = store.schema.hold(spec.name)
    names: Sequence[str] = list(dict.fromkeys(["", *store.held_scopes(key, HOLDS_READ_MOST)]))
    replies = store.call_many(
        [Hold(store.schema.hold(spec.name, name), HoldOp.READ, scope=name) for name in names]
    )
    out = []
    for name, reply in zip(names, replies, strict=True):
        if isinstance(reply, BackendError):
            raise reply
        if reply.held:
            out.append((sink.scope_named(name) or _named(name), reply))
    return sorted(out, key=lambda held: held[1].since_ms)


def _named(name: str) -> HoldScope:
    """A scope this config does not know, as its name says."""
    kind, _, rest = name.partition(":")
    if kind == "key":
        app, _, fp = rest.rpartition(":")
        return HoldScope(name, KEY, f"key {fp} of app {app}", own=True)
    if kind == HOST:
        return HoldScope(name, HOST, f"reporter {rest} (its clock)", own=True)
    if kind == GAME:
        return HoldScope(name, GAME, f"game {rest}")
    return HoldScope(name, APP, f"app {rest}" if rest else "the app")


def read_hold(store: Store, name: str, scope: str = "") -> HoldState:
    """The hold of one scope of the group ``name`` as Redis has it."""
    return store.call(Hold(store.schema.hold(name, scope), HoldOp.READ, scope=scope))
