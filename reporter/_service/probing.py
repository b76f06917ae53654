"""Jobs of a held sender and of secrets read from files.

``HoldProbe`` (its own one-thread pool, every second): reads the hold from Redis, so this
reporter stops or resumes with the others; reminds the operator at most once a minute while
it lasts; and when this reporter gets the turn (one per ``[nppa] probe_interval_seconds``
among all of them, or at once after a key change), sends one probe request (a signed report
without items) under the shared rate limit.  A probe that passes lifts the hold everywhere.

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
from reporter._pacing.send_hold import SendHold
from reporter._senders.outcome import DELIVERED, Outcome
from reporter._senders.secrets import Reread, SecretFile

logger = logging.getLogger("reporter")
reminders = RateLimitedLog(logger, interval=HOLD_REMINDER_SECONDS)


class HoldProbe:
    """Follows the hold in Redis and probes when it is this reporter's turn.

    ``probe(game)``: one request that reports nothing (``Sink.prober``), for the game whose
    request met the hold ("" when unknown)."""

    def __init__(
        self,
        hold: SendHold,
        probe: Callable[[str], Outcome],
        permits: Permits,
        stop: threading.Event,
    ) -> None:
        self._hold = hold
        self._probe = probe
        self._permits = permits
        self._stop = stop
        self._soon = False  # probe at the next loop if held (a new key; start-up)
        self._last = ""  # what the last probe of this reporter was answered

    def probe_soon(self) -> None:
        """Probe at the next loop if sending is held (set from any thread: a plain flag)."""
        self._soon = True

    def loop(self) -> bool:
        if self._stop.is_set():
            return False
        state = self._hold.refresh()
        soon, self._soon = self._soon, False
        if not state.held:
            return False
        self._remind(state)
        turn = self._hold.take_turn(now=soon)
        if not turn.mine:
            return False
        if not self._permits.one(self._stop, turn.game):  # paused (1006), stopping: soon
            self._hold.probe_now()
            return False
        outcome = self._probe(turn.game)
        self._heard(outcome, turn)
        return False

    def _heard(self, outcome: Outcome, turn: HoldState) -> None:
        self._last = outcome.reason
        if outcome.kind == DELIVERED:
            self._hold.lift(f"a probe was answered {outcome.reason}")
            return
        if outcome.pause_all:
            self._permits.pause(outcome.pause_all)
        if outcome.hold:
            cause = outcome.hold.cause
            if cause != turn.cause:
                logger.warning(
                    "sending stays held: a probe was answered %s (before: %s): %s",
                    cause,
                    turn.cause,
                    outcome.hold,
                    extra={"hold": cause},
                )
            self._hold.note(outcome.hold)
        logger.debug("probe of the held sender answered %s", outcome.reason)

    def _remind(self, state: HoldState) -> None:
        if state.age_seconds < HOLD_REMINDER_SECONDS:
            return  # the ERROR that started it is recent
        reminders.log(
            logging.ERROR,
            "hold",
            "sending still held, for %.0f s: the interface answered %s: %s; %d "
            "probes so far%s, the next in %.0f s",
            state.age_seconds,
            state.cause,
            state.check,
            state.probes,
            f" (this reporter's last: {self._last})" if self._last else "",
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

    def reread_all(self, why: str) -> str:
        """Read every file again; the one line that says what was re-read (logged)."""
        if not self.files:
            line = (
                f"{why}: nothing to re-read (no [nppa] secret_key_file or [sink] "
                "header_files); the config file is read only at start"
            )
        else:
            found = [file.reread() for file in self.files]
            for item in found:
                self._after(item)
            line = (
                f"{why}: re-read "
                + "; ".join(item.describe() for item in found)
                + "; the config file is read only at start"
            )
        if self._held():
            line += "; sending is held: probing now"
        logger.info("%s", line)
        return line

    def _after(self, found: Reread) -> None:
        if found.changed:
            self._key_changed()
