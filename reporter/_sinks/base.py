"""What a sink kind says about itself: the ``Sink`` base class and the values it answers in.

The delivery core, pacing, the service, the commands and the demo ask the sink of the
config (``reporter._sinks.registry.make_sink``) what they need, never which kind it is:

- ``pacing()``: the request rate it keeps (``TokenRate`` at claim time, ``SlotRate`` at
  send time) or None;
- ``hold()``: whether sending can be held for every reporter (``HoldSpec``), in which
  scopes (``hold_scopes``, ``hold_scope``: an app, a game, a key), and ``prober``;
- ``freshness()``: which events are still young enough to send;
- ``in_order()``: whether each game's batches must reach it first in, first out;
- ``body_model`` and ``endpoint()``: how large a body of given events is, and where it goes;
- ``secret_files()``: the settings whose values are read from files;
- ``sender(...)``: the object that sends one batch and reads the answer into an ``Outcome``;
- ``check_connection(...)``: what ``check-config --connect`` does (a kind paced by slots
  asks ``pacer`` for one before each of its requests);
- ``describe()``, ``notices()``, ``problems()``, ``next_steps()``: its lines in the start-up
  log, ``check-config``, ``run`` and the demo.

A kind overrides what differs from the defaults here (no rate but ``[sink]
requests_per_second``, never held, the reporter's own freshness, JSON bodies).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, NamedTuple, Protocol, TypeVar

import httpx

from collector.config import Where
from reporter._exceptions import SinkConfigError
from reporter._senders.outcome import Outcome, Refusal
from reporter._senders.secrets import SecretFile
from reporter._settings import ReporterGameSettings, ReporterSettings, SinkSettings

S = TypeVar("S")


class SinkConfig(Protocol):
    """What a sink reads of the config (``reporter._config.ReporterConfig``)."""

    @property
    def source(self) -> str: ...

    @property
    def sink(self) -> SinkSettings: ...

    @property
    def reporter(self) -> ReporterSettings: ...

    @property
    def games(self) -> Mapping[str, ReporterGameSettings]: ...

    def section(self, cls: type[S]) -> S:
        """The kind's own section (``Sink.settings``)."""

    def biz_id(self, game: str) -> str: ...

    def games_without_biz_id(self) -> list[str]: ...

    def buffer_ttls(self) -> list[int]: ...

    def cap_for(self, game: str) -> int:
        """The game's ``max_events_per_game`` (its own, else ``[buffer]``'s)."""


class Sender(Protocol):
    """Builds requests and reads responses, nothing more: every answer or transport error
    becomes an ``Outcome``; the delivery core (``reporter._delivery``) does the rest (ack,
    settle, nack, counting)."""

    def send(
        self, game: str, batch_id: str, events: Sequence[bytes], attempt: int = 1
    ) -> Outcome: ...

    def describe(self) -> str: ...

    def close(self) -> None: ...


class Pacer(Protocol):
    """What a sender that paces its own requests asks (the workers' ``Permits``)."""

    def one(self, game: str) -> bool:
        """One more request for ``game`` (a re-send): False if none within reach."""

    def on_time(self, game: str) -> bool:
        """Right before a request goes: still at its slot?  False: do not send it."""


@dataclass(frozen=True, slots=True)
class TokenRate:
    """Requests granted at claim time by a token bucket: ``per_second`` with bursts of
    ``burst``, in one bucket in Redis for every reporter (``shared``) or per process."""

    per_second: float
    burst: int
    shared: bool
    name: str = "sink"


@dataclass(frozen=True, slots=True)
class SlotRate:
    """Requests spaced ``1 / per_second`` apart by slots in Redis, shared by every reporter:
    each request takes its slot right before it goes.  ``scope(game)``: the scope a game's
    requests count against (None: one for every game)."""

    name: str
    per_second: float
    scope: Callable[[str], str] | None = None


Pacing = TokenRate | SlotRate | None


@dataclass(frozen=True, slots=True)
class HoldSpec:
    """A sink whose endpoint may refuse our identity: sending is then held for every
    reporter of the store (``hold.lua``, keyed by ``name``) until a probe passes, one per
    ``probe_interval`` seconds.  ``label`` names it in the log, ``what`` in ``status``."""

    name: str
    probe_interval: float
    label: str
    what: str


class LateDrop(NamedTuple):
    """What a sink made of events dropped as stale: how many were logins and logouts (the
    anti-addiction interface's ``bt`` 1 and 0), and each one's ``(si, bt, ot)``, kept in the
    shard's late list."""

    logins: int
    logouts: int
    items: list[tuple[str, int, int]]
    audit_lost: int = 0  # lines of the sink's audit trail that could not be written


@dataclass(frozen=True, slots=True)
class HoldScope:
    """One scope sending can be held in, within the sink's ``HoldSpec`` group: ``name`` its
    hold's name there ('' for the group's first app), ``kind`` what it stands for (``APP``,
    ``GAME``, ``KEY`` or ``HOST`` of ``reporter._senders.outcome``), ``label`` for the log
    and ``status`` ("app X", "game farm").  ``own``: it belongs to the reporters that use one
    key, or to one reporter (its clock): another reporter neither lifts nor sets it, and a
    reporter held in an own scope of every app leaves its shards to those that can send."""

    name: str
    kind: str
    label: str
    own: bool = False


# The probe of one held scope: a request that reports nothing, ready to go (``Sink.prober``).
Prober = Callable[[HoldScope, str], Callable[[], Outcome] | None]


@dataclass(frozen=True, slots=True)
class Freshness:
    """An event is fresh while its age is at most ``max_age_ms``; its birth is the value of
    ``field`` (times ``scale`` to make milliseconds) when the event has a number there,
    else its collect time.  ``late_ms`` (0: none): an event older than ``max_age_ms`` is
    still sent, up to this age (the sender moves its time into the endpoint's window).
    ``note_stale(game, batch_id, events)``: the sink's word on events dropped as stale,
    before they go (None: they are only counted)."""

    max_age_ms: int
    field: str = ""
    scale: int = 1
    late_ms: int = 0
    note_stale: Callable[[str, str, Sequence[bytes]], LateDrop] | None = None

    @property
    def keep_ms(self) -> int:
        """The age beyond which an event is stale: dropped, never sent."""
        return max(self.max_age_ms, self.late_ms)

    @classmethod
    def of(cls, settings: ReporterSettings) -> Freshness:
        """``[reporter] max_age_seconds`` and ``event_time_field``/``event_time_unit``."""
        return cls(
            int(settings.max_age_seconds * 1000),
            settings.event_time_field,
            1000 if settings.event_time_unit == "s" else 1,
        )


@dataclass(frozen=True, slots=True)
class BodyModel:
    """A body's size: ``fixed`` + ``scale`` x the sum of (event JSON + ``per_event``)."""

    fixed: int
    per_event: int
    scale: float = 1.0

    def body_bytes(self, events: Sequence[bytes]) -> int:
        return self.fixed + math.ceil(
            self.scale * (sum(map(len, events)) + self.per_event * len(events))
        )

    def body_bytes_of(self, event_bytes: int) -> int:
        """The body of one event of ``event_bytes`` bytes of JSON."""
        return self.fixed + math.ceil(self.scale * (event_bytes + self.per_event))

    def event_budget(self, body_limit: int) -> int:
        """The bytes of events (each with its ``per_event``) a body of ``body_limit`` holds."""
        return max(1, math.floor((body_limit - self.fixed) / self.scale))


# {"game":...,"batch_id":...,"events":[e1,e2]}: the game name (at most 64 characters, quoted)
# and a batch id with the suffixes of retries and splits fit in the fixed part.
JSON_BODY = BodyModel(fixed=256, per_event=1)


def scope_name(kind: str, key: str) -> str:
    """A name for ``key`` (an app id, say) fit for a Redis key name (a hold, a rate)."""
    if re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", key):
        return f"{kind}:{key}"
    return f"{kind}:{hashlib.sha256(key.encode()).hexdigest()[:24]}"


@dataclass(frozen=True, slots=True)
class SecretSpec:
    """A setting whose value is a file's content: ``read`` checks it (a ``ValueError``
    saying what is wrong, never the value); ``header``: the HTTP header it is the value of."""

    setting: str
    path: str
    read: Callable[[str], str]
    header: str = ""


@dataclass(frozen=True, slots=True)
class Reloaded:
    """What a sink took of a config read again: ``taken`` for the SIGHUP line ("" for
    nothing), ``files``: secret files it reads now and did not before (a new app's key)."""

    taken: str
    files: tuple[SecretFile, ...] = ()


@dataclass(frozen=True, slots=True)
class Connection:
    """What ``check-config --connect`` found of the sink: ok or not, in one line."""

    ok: bool
    detail: str


class Sink:
    """A sink kind as the rest of the reporter sees it, for one config.  The defaults are
    those of a sink without a rate of its own, never held, with the reporter's freshness
    and JSON bodies."""

    kind: ClassVar[str]
    # The kind's own section of the file, if it has one: its name ("nppa", "sink.ndjson")
    # and class (a frozen dataclass of ``setting`` fields), plugged into the config.
    section: ClassVar[str] = ""
    settings: ClassVar[type | None] = None

    def __init__(self, config: SinkConfig) -> None:
        self.config = config

    def check(self, where: Where) -> None:
        """What the kind needs of the file, on top of each key's range, when it is the
        configured sink: a ``ConfigError`` naming the key (a secret never echoed)."""

    def advise(self, where: Where) -> list[str]:
        """What is valid but risky for this kind, for a warning."""
        return []

    def pacing(self) -> Pacing:
        """``[sink] requests_per_second`` (0: none) with its burst and scope."""
        sink = self.config.sink
        if not sink.requests_per_second:
            return None
        return TokenRate(
            sink.requests_per_second, sink.request_burst, sink.rate_limit_scope == "shared"
        )

    def hold(self) -> HoldSpec | None:
        return None

    def prober(self, sender: Sender) -> Prober | None:
        """For a sink that can be held: ``prober(scope, game)``, the probe of ``scope`` (one
        request through ``sender`` that reports nothing, with the identity of the scope:
        its app, its key, its game; ``game``: the one whose request met the hold, or ""),
        to learn whether the hold may end; None from it when this reporter cannot send that
        request (a game it has no route for); None here when ``sender`` cannot probe."""
        return None

    def hold_scopes(self, game: str) -> tuple[HoldScope, ...]:
        """The scopes a request of ``game`` goes out in: held in any of them, it waits."""
        return ()

    def hold_scope(self, game: str, refusal: Refusal) -> HoldScope:
        """The scope an answer to a request of ``game`` holds (``refusal.scope`` says which
        kind)."""
        raise NotImplementedError

    def scope_named(self, name: str) -> HoldScope | None:
        """The scope of a hold read from the group's index, if it concerns this reporter
        (None: another key's, or a scope this config does not know)."""
        return None

    def whole_scopes(self) -> list[tuple[HoldScope, ...]]:
        """For each app the sink sends to, the scopes that hold every game of it."""
        return []

    def unroutable(self, game: str) -> Refusal | None:
        """Why this config cannot send ``game`` at all (a game without the id the endpoint
        needs), which holds the game until the config has it; None if it can."""
        return None

    def freshness(self) -> Freshness:
        return Freshness.of(self.config.reporter)

    def in_order(self) -> bool:
        """Whether each game's batches must reach the endpoint first in, first out: a batch
        that fails holds back its game's later batches until it is settled, and a game has
        one request on its way at a time (docs/delivery.md, "Sessions in order").  Off by
        default: it costs a game's requests their parallelism."""
        return False

    body_model: ClassVar[BodyModel] = JSON_BODY

    def endpoint(self) -> str:
        """Where bodies go, for the log (masked there)."""
        return self.config.sink.url

    def secret_files(self) -> list[SecretSpec]:
        return []

    def open_secrets(self) -> list[SecretFile]:
        """``secret_files()`` read now.  They were checked when the config was loaded; one
        that went bad since is a ``SinkConfigError``."""
        files = []
        for spec in self.secret_files():
            try:
                files.append(SecretFile(spec.setting, spec.path, spec.read, spec.header))
            except ValueError as exc:
                raise SinkConfigError(f"{self.config.source}: {spec.setting}: {exc}") from None
        return files

    def sender(
        self,
        transport: httpx.BaseTransport | None = None,
        secrets: Sequence[SecretFile] = (),
        pacer: Pacer | None = None,
    ) -> Sender:
        raise NotImplementedError

    # The keys ``reload`` takes, as (section, key); ("games", key) for a game's.
    reloaded_keys: ClassVar[frozenset[tuple[str, str]]] = frozenset()

    def reload(self, config: SinkConfig) -> Reloaded:
        """Take from ``config`` (the file read again, on SIGHUP) what this kind can take at
        run time (the anti-addiction sink: the games and the apps); by default nothing."""
        return Reloaded("")

    def vet_secrets(
        self,
        sender: Sender,
        secrets: Sequence[SecretFile],
        pacer: Pacer | None,
        alert: Callable[[str, str], None],
    ) -> None:
        """Make each of ``secrets`` (those ``sender`` reads) prove a new value before it is
        used (``SecretFile.vet_with``), through ``sender`` on slots of ``pacer``; a refused
        value is told to ``alert(name, message)`` (``status``).  By default none does."""

    def check_connection(
        self,
        method: str = "HEAD",
        transport: httpx.BaseTransport | None = None,
        pacer: Pacer | None = None,
    ) -> Connection:
        raise NotImplementedError

    def describe(self) -> str:
        """The sink in the start-up line: its kind and where it sends (masked)."""
        return self.kind

    def notices(self) -> list[str]:
        """What ``check-config`` points out that is not an error."""
        return []

    def problems(self) -> list[str]:
        """What ``run`` and ``check-config`` refuse that loading the file does not."""
        return []

    # Whether the kind keeps an audit trail of what it sent (``telemetry-reporter audit``).
    keeps_audit: ClassVar[bool] = False

    def audit_session(self, subject: str, directory: str, as_json: bool) -> tuple[bool, str]:
        """What the kind's audit trail (in ``directory``, else the configured one) says of
        ``subject`` (a session), as text or JSON, and whether it has any record of it."""
        raise SinkConfigError(f"[sink] kind = {self.kind!r} keeps no audit trail")

    def next_steps(self) -> list[str]:
        """The demo's two closing lines: from the demo to a reporter of one's own."""
        return [
            "next: copy config/telemetry.toml, set [redis] url and [sink] url to your Redis "
            "and endpoint,",
            "      then: telemetry-reporter check-config my.toml   (and read docs/operations.md)",
        ]
