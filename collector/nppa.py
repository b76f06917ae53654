"""Events for the national anti-addiction system's behaviour reporting (``[sink] kind =
"nppa"`` in the reporter).

    from collector import collect, nppa
    collect("my-game", nppa.login(si=session_id, ot=int(time.time()), pi=player_pi))
    collect("my-game", nppa.logout(si=session_id, ot=int(time.time()), di=device_id))

Each function returns the event mapping the reporter turns into one item of a report, and
raises ``ValueError`` naming the field when the interface would refuse it.  The reporter
checks every item again before sending (``check_item``) and dead-letters a bad one alone.

Fields: ``si`` session id (1 to 32 bytes; a login and its logout share it), ``bt``
behaviour (1 login, 0 logout), ``ot`` when it happened (unix time in whole seconds), ``ct``
player type (0 verified, with ``pi``; 2 guest, with ``di``), ``pi`` the verified player's id
(38 characters), ``di`` the guest's device id (1 to 32 characters).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

LOGIN = 1
LOGOUT = 0
VERIFIED = 0
GUEST = 2
PI_LENGTH = 38
MAX_SI_BYTES = 32
MAX_DI_LENGTH = 32
# An ``ot`` this large is milliseconds (seconds would be past the year 5000).
_MS_THRESHOLD = 100_000_000_000

__all__ = ["GUEST", "LOGIN", "LOGOUT", "VERIFIED", "behavior", "check_item", "login", "logout"]


def behavior(
    *, si: str, bt: int, ot: int, ct: int, pi: str | None = None, di: str | None = None
) -> dict[str, Any]:
    """One behaviour event, checked: ``ValueError`` names the field the interface would
    refuse."""
    event: dict[str, Any] = {"si": si, "bt": bt, "ot": ot, "ct": ct}
    if pi is not None:
        event["pi"] = pi
    if di is not None:
        event["di"] = di
    return check_item(event)


def login(*, si: str, ot: int, pi: str | None = None, di: str | None = None) -> dict[str, Any]:
    """A login: a verified player with ``pi``, or a guest with ``di``."""
    return behavior(si=si, bt=LOGIN, ot=ot, ct=_player_type(pi, di), pi=pi, di=di)


def logout(*, si: str, ot: int, pi: str | None = None, di: str | None = None) -> dict[str, Any]:
    """A logout: a verified player with ``pi``, or a guest with ``di``."""
    return behavior(si=si, bt=LOGOUT, ot=ot, ct=_player_type(pi, di), pi=pi, di=di)


def check_item(event: Mapping[str, Any]) -> dict[str, Any]:
    """The item's fields (and no others) if the interface would take them, else
    ``ValueError`` naming the field and what is wrong."""
    si, bt, ot, ct = (event.get(k) for k in ("si", "bt", "ot", "ct"))
    if not isinstance(si, str) or not 1 <= len(si.encode()) <= MAX_SI_BYTES:
        raise ValueError(
            f"si: expected a session id of 1 to {MAX_SI_BYTES} bytes, found {_shown(si)}"
        )
    if _not_int(bt) or bt not in (LOGIN, LOGOUT):
        raise ValueError(f"bt: expected 1 (login) or 0 (logout), found {_shown(bt)}")
    _check_ot(ot)
    if _not_int(ct) or ct not in (VERIFIED, GUEST):
        raise ValueError(
            f"ct: expected 0 (verified player, with pi) or 2 (guest, with di), found {_shown(ct)}"
        )
    item: dict[str, Any] = {"si": si, "bt": bt, "ot": ot, "ct": ct}
    if ct == VERIFIED:
        pi = event.get("pi")
        if not isinstance(pi, str) or len(pi) != PI_LENGTH:
            raise ValueError(
                f"pi: a verified player (ct=0) needs pi, the {PI_LENGTH}-character "
                f"id from the identity check, found {_shown(pi)}"
            )
        item["pi"] = pi
    else:
        di = event.get("di")
        if not isinstance(di, str) or not 1 <= len(di) <= MAX_DI_LENGTH:
            raise ValueError(
                f"di: a guest (ct=2) needs di, a device id of 1 to "
                f"{MAX_DI_LENGTH} characters, found {_shown(di)}"
            )
        item["di"] = di
    return item


def _check_ot(ot: object) -> None:
    if not isinstance(ot, int) or isinstance(ot, bool):
        raise ValueError(
            f"ot: expected the behaviour time as whole seconds since the epoch "
            f"(an int), found {_shown(ot)}"
        )
    if ot >= _MS_THRESHOLD:
        raise ValueError(
            f"ot: {ot} looks like milliseconds; the interface wants whole "
            f"seconds since the epoch (for example int(time.time()))"
        )
    if ot <= 0:
        raise ValueError(f"ot: expected seconds since the epoch, found {ot}")


def _player_type(pi: str | None, di: str | None) -> int:
    if (pi is None) == (di is None):
        raise ValueError(
            "pi or di: give pi for a verified player or di for a guest, exactly one of them"
        )
    return VERIFIED if pi is not None else GUEST


def _not_int(value: object) -> bool:
    return not isinstance(value, int) or isinstance(value, bool)


def _shown(value: object) -> str:
    return "nothing" if value is None else f"{value!r:.60}"
