"""Jobs of held senders and of secrets read from files.

``HoldProbe`` (its own one-thread pool, every second): reads the held scopes from Redis, so
this reporter stops or resumes with the others; reminds the operator at most once a minute
while one lasts; and for each held scope it can probe (one that uses the key, one with a
route for the game), when it gets the turn (one per ``[nppa] probe_interval_seconds`` among
all of them, or at once after a key or config change), sends one probe request (a signed
report without items, with the scope's identity) under the shared rate limit.  A probe
that passes lifts its scope everywhere.

``SecretWatch`` (the control pool, every few seconds): reads the secret files again when
their content changed; a new value (the anti-addiction key) makes a held sender probe at
once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from collector.logs import RateLimitedLog
from collector.store import HoldState
from reporter._constants import HOLD_REMINDER_SECONDS
from reporter._pacing.permits import Permits
from reporter._pacing.send_hold import Holds, SendHold, because
from reporter._senders.outcome import DELIVERED, Outcome
from reporter._senders.secrets import Reread, SecretFile
from reporter._sinks.base import Prober

logger = logging.getLogger("reporter")
reminders = RateLimitedLog(logger, interval=HOLD_REMINDER_SECONDS)


class HoldProbe:
    """Follows the held scopes in Redis and probes each when it is this reporter's turn.

    ``probe(scope, game)``: the request that reports nothing (``Sink.prober``), for the game
    whose request met the hold ("" when unknown); None if this reporter cannot send it."""

    def __init__(
        self,
        holds: Holds,
        probe: Prober,
        permits: Permits,
        stop: threading.Event,
    ) -> None:
        self._holds = holds
        self._probe = probe
        self._permits = permits
        self._stop = stop
        self._soon = False  # probe at the next loop if held (a new key or config; start-up)
        self._last: dict[str, str] = {}  # scope -> what this reporter's last probe was told

    def probe_soon(self) -> None:
        """Probe at the next loop if held (set from any thread: a plain flag)."""
        self._soon = True

    def loop(self) -> bool:
        if self._stop.is_set():
            return False
        held = self._holds.refresh()
        soon, self._soon = self._soon, False
        for hold in held:
            if self._stop.is_set():
                break
            self._one(hold, soon)
        return False

    def _one(self, hold: SendHold, soon: bool) -> None:
        state = hold.state
        self._remind(hold, state)
        send = self._probe(hold.scope, state.game)
        if send is None:
            return  # this reporter cannot send the probe (no route for the game)
        turn = hold.take_turn(now=soon)
        if not turn.mine:
            return
        if not self._permits.one(self._stop, turn.game):  # paused (1006), stopping: soon
            hold.probe_now()
            return
        self._heard(send(), hold, turn)

    def _heard(self, outcome: Outcome, hold: SendHold, turn: HoldState) -> None:
        self._last[hold.scope.name] = outcome.reason
        if outcome.kind == DELIVERED:
            hold.lift(f"a probe was answered {outcome.reason}")
            self._holds.forget(hold.scope.name)
            return
        if outcome.pause_all:
            self._permits.pause(outcome.pause_all, turn.game)
        if outcome.hold:
            cause = outcome.hold.cause
            if cause != turn.cause:
                logger.warning(
                    "sending to %s stays held: a probe was answered %s (before: %s): %s",
                    hold.scope.label,
                    cause,
                    turn.cause,
                    outcome.hold,
                    extra={"hold": cause},
                )
            # the scope the answer names: this one, or another (a game's probe met 1011)
            self._holds.begin(turn.game, outcome.hold)
        logger.debug("probe of %s answered %s", hold.scope.label, outcome.reason)

    def _remind(self, hold: SendHold, state: HoldState) -> None:
        if state.age_seconds < HOLD_REMINDER_SECONDS:
            return  # the ERROR that started it is recent
        last = self._last.get(hold.scope.name, "")
        reminders.log(
            logging.ERROR,
            f"hold:{hold.scope.name}",
            "sending to %s still held, for %.0f s: %s; %d probes so far%s, the next in %.0f s",
            hold.scope.label,
            state.age_seconds,
            because(state.cause, state.check),
            state.probes,
            f" (this reporter's last: {last})" if last else "",
            max(0.0, (state.probe_at_ms - state.now_ms) / 1000),
            extra={"hold": state.cause, "held_seconds": round(state.age_seconds)},
        )


class SecretWatch:
    """Reads the secret files again when they change (and on ``reread_all``, SIGHUP)."""

    def __init__(
        self,
        files: Sequence[SecretFile],
        key_changed: Callable[[], None],
        held: Callable[[], bool] = lambda: False,
    ) -> None:
        self.files = tuple(files)
        self._key_changed = key_changed
        self._held = held

    def loop(self) -> bool:
        for file in self.files:
            found = file.poll()
            if found is not None and found.changed:
                logger.info(
                    "%s changed: the new value is in use",
                    file.setting,
                    extra={"setting": file.setting},
                )
                self._after(found)
        return False

    def reread_all(self) -> str:
        """Read every file again; what was re-read, for the SIGHUP line."""
        if not self.files:
            return "no secret file to re-read (no [nppa] secret_key_file or [sink] header_files)"
        found = [file.reread() for file in self.files]
        for item in found:
            self._after(item)
        return "re-read " + "; ".join(item.describe() for item in found)

    def watch(self, files: Sequence[SecretFile]) -> None:
        """Watch these files too (an app added by a reload)."""
        self.files = (*self.files, *(f for f in files if f not in self.files))

    @property
    def held(self) -> bool:
        return self._held()

    def _after(self, found: Reread) -> None:
        if found.changed:
            self._key_changed()
