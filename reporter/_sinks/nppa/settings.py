"""The ``[nppa]`` section: the anti-addiction interface's settings and what they must be."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from collector import ConfigError
from collector.config import MaskedRepr, Where, setting
from collector.logs import mask_url
from reporter._settings import http_url_problem, read_small_file

NPPA_PRODUCTION_BASE = "http://api2.wlc.nppa.gov.cn"
_HEX_KEY = re.compile(r"[0-9a-fA-F]{32}")


@dataclass(frozen=True, repr=False)
class NppaAppSettings(MaskedRepr):
    """Another app id of the system the same reporter sends to (``[nppa.apps."<name>"]``),
    with its own key; ``base_url`` "" is ``[nppa]``'s."""

    app_id: str = setting("")
    secret_key: str = setting("", secret=True)
    secret_key_file: str = setting("")
    base_url: str = setting("")


@dataclass(frozen=True, repr=False)
class NppaSettings(MaskedRepr):
    """The anti-addiction behaviour-reporting interface (``[sink] kind = "nppa"``)."""

    base_url: str = setting(NPPA_PRODUCTION_BASE)
    app_id: str = setting("")
    secret_key: str = setting("", secret=True)
    secret_key_file: str = setting("")
    requests_per_second: float = setting(10.0, lo=0.1, hi=1000)
    rate_limit_scope: str = setting("app", choices=("app", "game"))
    freshness_margin_seconds: float = setting(10.0, lo=0, hi=170)
    throttle_seconds: float = setting(60.0, lo=1, hi=3600)
    probe_interval_seconds: float = setting(30.0, lo=1, hi=3600)
    late_behaviour: str = setting("drop", choices=("drop", "resend"))
    late_max_age_seconds: float = setting(86_400.0, lo=180, hi=30 * 86_400)
    max_future_seconds: float = setting(300.0, lo=0, hi=86_400)
    # The audit trail (reporter._sinks.nppa.audit): "" keeps none.
    audit_directory: str = setting("")
    audit_max_file_bytes: int = setting(256 * 1024 * 1024, lo=65_536, hi=1 << 40)
    audit_fsync_seconds: float = setting(1.0, lo=0, hi=60)
    # Other app ids, by name: a game with ``app = "<name>"`` is reported under that one.
    apps: Mapping[str, NppaAppSettings] = setting({})


def check_nppa(nppa: NppaSettings, where: Where) -> None:
    """What the anti-addiction sender needs; a secret is never echoed."""
    audit = nppa.audit_directory
    if audit and os.path.exists(audit) and not os.path.isdir(audit):
        raise ConfigError(
            f"{where('nppa', 'audit_directory')}: [nppa] audit_directory: {audit!r} is not a "
            "directory"
        )
    _check_app(nppa, "[nppa]", lambda key: where("nppa", key))
    for name, app in nppa.apps.items():
        if not name.strip():
            raise ConfigError(f'{where("nppa", "apps")}: [nppa.apps.""]: an app needs a name')
        _check_app(app, f'[nppa.apps."{name}"]', lambda key: where("nppa", "apps"))


def _check_app(
    app: NppaSettings | NppaAppSettings, table: str, where: Callable[[str], str]
) -> None:
    """One app's settings: a base URL (an app's own may be empty: ``[nppa]``'s), its app id,
    and one key, in the file or the setting; a secret is never echoed."""
    if (app.base_url or isinstance(app, NppaSettings)) and (
        problem := http_url_problem(app.base_url)
    ):
        raise ConfigError(
            f"{where('base_url')}: {table} base_url: {problem}, found {mask_url(app.base_url)!r}"
        )
    if not app.app_id:
        raise ConfigError(
            f"{where('app_id')}: {table} app_id: required with [sink] "
            f'kind = "nppa" (the app id the system issued)'
        )
    if app.secret_key_file:
        if app.secret_key:
            raise ConfigError(
                f"{where('secret_key_file')}: {table} secret_key_file: set it or "
                "secret_key, not both (the file is re-read on SIGHUP and when it changes; "
                "secret_key is read once)"
            )
        try:
            read_key_file(app.secret_key_file)
        except ValueError as exc:
            raise ConfigError(
                f"{where('secret_key_file')}: {table} secret_key_file: {exc}"
            ) from None
        return
    if not _HEX_KEY.fullmatch(app.secret_key):
        raise ConfigError(
            f"{where('secret_key')}: {table} secret_key: expected 32 hex characters "
            f'(the 16-byte key as issued; usually "${{NPPA_SECRET_KEY}}"), found '
            f"{len(app.secret_key)} characters"
            + ("" if len(app.secret_key) != 32 else " that are not all hex digits")
        )


def read_key_file(path: str) -> str:
    """The anti-addiction secret key a ``[nppa] secret_key_file`` holds: 32 hex characters,
    surrounding whitespace ignored.  ``ValueError`` says what is wrong, never showing the
    file's text."""
    text = read_small_file(path)
    key = text.strip()
    if not _HEX_KEY.fullmatch(key):
        raise ValueError(
            f"{path!r} does not hold a key: expected 32 hex characters (surrounding "
            f"whitespace is ignored), found {len(key)} characters"
            + ("" if len(key) != 32 else " that are not all hex digits")
        )
    return key


# docs/nppa.md, "Sizing: a game's buffer": a peak of 400 events/s per game through a 1006
# throttle (60 s) on top of the 180 s window, 96,000 events, rounded up.
SIZED_CAP = 100_000


def cap_advice(caps: Mapping[str, int], where: Where) -> list[str]:
    """A game's buffer capped below the documented sizing loses its oldest events (counted,
    ``evicted``) through an ordinary 1006 throttle at a modest peak; ``caps``: the cap of
    each game by the key that sets it (``[buffer]`` or ``[games."<name>"]``)."""
    return [
        f"{where('buffer', 'max_events_per_game') if key == '[buffer]' else where('games', '')}"
        f": {key} max_events_per_game ({cap:,}) is below the anti-addiction sizing of "
        f'{SIZED_CAP:,} events per game (docs/nppa.md, "Sizing: a game\'s buffer": 400 '
        f"events/s through a 60 s throttle on top of the 180 s window): a backlog beyond it "
        f"evicts the oldest logins and logouts; raise it (about 15 MB of Redis per game at "
        f"100,000)"
        for key, cap in caps.items()
        if cap < SIZED_CAP
    ]


def late_ttl_advice(nppa: NppaSettings, ttls: Iterable[int], where: Where) -> list[str]:
    """With ``late_behaviour = "resend"``, a buffer's TTL shorter than
    ``late_max_age_seconds`` loses events that could still have been resent."""
    if nppa.late_behaviour != "resend":
        return []
    short = min(ttls)
    if short >= nppa.late_max_age_seconds:
        return []
    return [
        f"{where('nppa', 'late_max_age_seconds')}: [nppa] late_max_age_seconds "
        f"({nppa.late_max_age_seconds:g}) is longer than a buffer's ttl_seconds "
        f"({short}): a game that gets no new event for that long loses its "
        "buffered events (unaccounted) before they could be resent; raise [buffer] "
        "ttl_seconds"
    ]
