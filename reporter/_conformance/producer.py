"""The producer under test, as a child process spoken to over its standard input and output.

One request per line, one answer per line (docs/protocol.md, "The conformance suite"):

    collect <game> <event-json>   ->  ok | refused <reason>
    flush                         ->  ok   (everything collected so far is in Redis, or counted)
    stats                         ->  {"accepted": ..., ...}   (one line of JSON)
    close                         ->  ok   (then the process exits 0)

Its settings are ``TELEMETRY_<SECTION>_<KEY>`` environment variables, the only ones of that
form it sees (the suite's own environment's are left out).  What it writes on its standard
error is kept in a file, and the last lines are shown when a case fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import subprocess
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

# Variables of the suite's environment that a producer must not inherit: its settings come
# from the case only.
_OWN_PREFIX = "TELEMETRY_"


class ProducerFailed(Exception):
    """The producer did not answer as the line protocol says (or not in time)."""


class Producer:
    """A running producer; ``ask()`` sends a request and returns the answer line."""

    def __init__(
        self, command: Sequence[str], settings: Mapping[str, str], answer_seconds: float
    ) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(_OWN_PREFIX)}
        env.update(settings)
        self._answer_seconds = answer_seconds
        # Kept open as long as the producer runs (it writes there): closed by stop().
        self._stderr = tempfile.NamedTemporaryFile(  # noqa: SIM115
            prefix="conformance-producer-", delete=False
        )
        self._answers: queue.Queue[bytes | None] = queue.Queue()
        try:
            self.proc = subprocess.Popen(
                list(command),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._stderr,
                env=env,
            )
        except OSError as exc:
            self._stderr.close()
            raise ProducerFailed(f"cannot start {' '.join(command)!r}: {exc}") from None
        assert self.proc.stdout is not None
        self._reader = threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True)
        self._reader.start()

    def _read(self, stdout: IO[bytes]) -> None:
        for line in stdout:
            self._answers.put(line)
        self._answers.put(None)

    def ask(self, request: str, seconds: float | None = None) -> str:
        """Send one request line; its answer line (without the newline)."""
        stdin = self.proc.stdin
        assert stdin is not None
        try:
            stdin.write(request.encode() + b"\n")
            stdin.flush()
        except OSError:
            gone = f"{_short(request)!r}: the producer is gone ({self.ended()})"
            raise ProducerFailed(gone) from None
        wait = self._answer_seconds if seconds is None else seconds
        try:
            answer = self._answers.get(timeout=wait)
        except queue.Empty:
            raise ProducerFailed(f"{_short(request)!r}: no answer within {wait:g} s") from None
        if answer is None:
            self._answers.put(None)  # later requests see it too
            raise ProducerFailed(f"{_short(request)!r}: no answer, the producer closed its output")
        return answer.decode("utf-8", "replace").rstrip("\r\n")

    def collect(self, game: str, event: Any) -> str:
        text = event if isinstance(event, str) else event_json(event)
        return self.ask(f"collect {game} {text}")

    def ok(self, request: str, seconds: float | None = None) -> None:
        """Send a request whose only good answer is ``ok``."""
        answer = self.ask(request, seconds)
        if answer != "ok":
            raise ProducerFailed(f"{_short(request)!r} answered {_short(answer)!r}, expected 'ok'")

    def stats(self) -> dict[str, Any]:
        answer = self.ask("stats")
        try:
            stats = json.loads(answer)
        except ValueError:
            raise ProducerFailed(f"'stats' answered {_short(answer)!r}: not JSON") from None
        if not isinstance(stats, dict):
            raise ProducerFailed(f"'stats' answered {_short(answer)!r}: not a JSON object")
        return stats

    def close(self, seconds: float) -> None:
        """``close``: answered ``ok``, then the process exits 0 within ``seconds``."""
        self.ok("close", seconds)
        try:
            code = self.proc.wait(seconds)
        except subprocess.TimeoutExpired:
            raise ProducerFailed(f"still running {seconds:g} s after answering 'close'") from None
        if code != 0:
            raise ProducerFailed(f"exited {code} after 'close', expected 0")

    def ended(self) -> str:
        code = self.proc.poll()
        return "still running" if code is None else f"exited {code}"

    def stderr_tail(self, lines: int = 6) -> list[str]:
        self._stderr.flush()
        text = Path(self._stderr.name).read_text(encoding="utf-8", errors="replace")
        return text.splitlines()[-lines:]

    def stop(self) -> None:
        """End the process (if it still runs) and remove its files."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        self._stderr.close()
        Path(self._stderr.name).unlink(missing_ok=True)


def event_json(event: Any) -> str:
    """An event as a request carries it: compact JSON on one line, UTF-8 as it is."""
    return json.dumps(event, separators=(",", ":"), ensure_ascii=False)


def _short(text: str, most: int = 120) -> str:
    return text if len(text) <= most else text[:most] + "..."
