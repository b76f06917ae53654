"""A held sender: the endpoint refused our identity or configuration (a wrong key, an IP not
registered, an expired test code), which no retry heals, so nobody sends until it is fixed.

The hold lives in Redis (``hold.lua``, one key per app id), so every reporter that shares the
store holds together; each process keeps a mirror of it that its workers read for free
(``held``), refreshed by the probe job (``reporter._service.probing``) every second.  While
it is held, the sink gate stays closed: nothing is claimed, and a batch that meets the answer
is handed back without charging an attempt.  Once per ``[nppa] probe_interval_seconds`` one
reporter gets the turn to send one probe request; the first probe that passes lifts the hold
for everyone.

Logs: one ERROR when a hold starts (by whichever reporter started it), a WARNING in the
others when they see it, a reminder at most once a minute while it lasts (the probe job),
and one INFO line when it ends.
"""

from __future__ import annotations

import logging
import threading

from collector.store import BackendError, Hold, HoldOp, HoldState, Store
from reporter._constants import HOLD_KEEP_SECONDS
from reporter._senders.outcome import Refusal

logger = logging.getLogger("reporter")

NOT_HELD = HoldState(False)


class SendHold:
    """The hold of one app id (``name``), in Redis and mirrored here."""

    def __init__(self, store: Store, name: str, probe_interval: float, label: str) -> None:
        self._store = store
        self._key = store.schema.hold(name)
        self._interval_ms = int(probe_interval * 1000)
        self._label = label  # "app <app id>", for the log
        self._lock = threading.Lock()
        self._state = NOT_HELD

    @property
    def held(self) -> bool:
        """Whether this process believes sending is held (a plain read: no lock, no Redis)."""
        return self._state.held

    @property
    def state(self) -> HoldState:
        """The last state seen (its ``now_ms`` is when it was read)."""
        return self._state

    def begin(self, hold: Refusal, game: str) -> None:
        """A request met ``hold`` (an outcome's cause and what to check): hold here at once,
        and in Redis for every reporter; the reporter that started it logs the ERROR."""
        cause, check = hold.cause, hold.check
        was_held = self._state.held
        self._state = HoldState(True, cause=cause, check=check, game=game)
        try:
            state = self._call(HoldOp.HOLD, cause=cause, check=check, game=game)
        except BackendError as exc:
            logger.error(
                "sending held for %s after %s (%s), but Redis could not record it "
                "(%s): other reporters find out when they meet it too",
                self._label,
                cause,
                check,
                exc,
            )
            return
        with self._lock:
            self._state = state
        if state.mine:
            logger.error(
                "sending held for %s: the interface answered %s: %s. Nothing is sent "
                "or dead-lettered meanwhile (events stay in Redis, and go stale as "
                "they age); one probe request every %g s finds out when it is fixed",
                self._label,
                cause,
                check,
                self._interval_ms / 1000,
                extra={"hold": cause, "game": game},
            )
        elif not was_held:
            self._seen(state)

    def refresh(self) -> HoldState:
        """Read the hold from Redis into the mirror; log when it started or ended
        elsewhere."""
        return self._update(self._call(HoldOp.READ))

    def take_turn(self, now: bool = False) -> HoldState:
        """The turn to probe, if it has come (``mine``), or at once with ``now`` (this
        reporter's key just changed: the others may still have the old one); the next turn
        is a probe interval later, whoever takes it."""
        return self._update(self._call(HoldOp.TURN if now else HoldOp.PROBE))

    def probe_now(self) -> None:
        """Make the next probe due now, whoever takes it (a probe could not go out)."""
        self._update(self._call(HoldOp.KICK))

    def note(self, hold: Refusal) -> HoldState:
        """A probe met ``hold``: keep holding, with this as the cause."""
        return self._update(
            self._call(HoldOp.HOLD, cause=hold.cause, check=hold.check, game=self._state.game)
        )

    def lift(self, why: str) -> None:
        """A probe passed: sending resumes in every reporter."""
        before = self._state
        state = self._call(HoldOp.LIFT)
        with self._lock:
            self._state = NOT_HELD
        if state.mine:
            logger.info(
                "sending resumed for %s: %s (held %.0f s for %s)",
                self._label,
                why,
                max(0.0, (state.now_ms - before.since_ms) / 1000) if before.since_ms else 0.0,
                before.cause,
                extra={"hold": ""},
            )

    def _update(self, state: HoldState) -> HoldState:
        with self._lock:
            before, self._state = self._state, state
        if state.held and not before.held:
            self._seen(state)
        elif before.held and not state.held:
            logger.info(
                "sending resumed for %s (the hold, %s, was lifted)",
                self._label,
                before.cause,
                extra={"hold": ""},
            )
        return state

    def _seen(self, state: HoldState) -> None:
        logger.warning(
            "sending held for %s, for %.0f s now: the interface answered %s: %s",
            self._label,
            state.age_seconds,
            state.cause,
            state.check,
            extra={"hold": state.cause},
        )

    def _call(self, what: HoldOp, cause: str = "", check: str = "", game: str = "") -> HoldState:
        return self._store.call(
            Hold(
                self._key,
                what,
                self._interval_ms,
                cause,
                check,
                game,
                int(HOLD_KEEP_SECONDS * 1000),
            )
        )


def read_hold(store: Store, name: str) -> HoldState:
    """The hold of ``name`` as Redis has it (``status``)."""
    return store.call(Hold(store.schema.hold(name), HoldOp.READ))
