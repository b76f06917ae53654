"""Logging helpers shared by the SDK and the reporter.

``mask`` is the one function every output goes through before it can show a setting, a URL
or an error text (log lines at every level, ``check-config``, ``status``, error messages,
reprs of settings): it hides the credentials a text can carry and leaves the rest readable.
``mask_headers`` does the same for a table of HTTP headers.

``RateLimitedLog`` stays quiet under repetition: one line per key per interval, with a count
of what it held back.  ``counted`` writes a count with its noun ("1 batch", "2 batches").
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Mapping
from urllib.parse import unquote

__all__ = [
    "CREDENTIAL_WORDS",
    "HIDDEN",
    "RateLimitedLog",
    "counted",
    "is_credential_name",
    "mask",
    "mask_headers",
    "mask_url",
]

HIDDEN = "***"

# A query parameter or header whose name contains one of these (in any case) carries a
# credential: "pass" covers password and passwd, "key" api_key and apikey, "auth"
# Authorization and Proxy-Authorization, "token" access_token.  So does a name with a word
# that starts with "sig" (sig, signature, X-Amz-Signature; not "design").
CREDENTIAL_WORDS = (
    "pass",
    "pwd",
    "token",
    "key",
    "secret",
    "auth",
    "credential",
    "session",
    "cookie",
)
_WORD = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z0-9]+(?![a-z])")

# "//userinfo@" in a URL: everything up to the last "@" before the host's end (a raw "@" in a
# password is common enough); the netloc ends where "/", "?", "#" or whitespace starts.
_USERINFO = re.compile(r"//([^/?#\s'\"<>]*)@")
# "name=value" after "?", "&", ";" or "#" (a query string or an OAuth-style fragment).
_PARAM = re.compile(r"([?&;#])([^=&;#\s'\"<>]+)=([^&;#\s'\"<>]*)")
# An authorization scheme and its credentials, wherever they appear ("Bearer abc").
_SCHEME_CREDENTIALS = re.compile(
    r"\b(Bearer|Basic|Digest|Token|Negotiate)\s+([^\s'\",;]+)", re.IGNORECASE
)
# A quoted name and value as a dict repr shows them: 'X-Api-Key': 'abc'.
_QUOTED_ITEM = re.compile(r"(['\"])([^'\"]{1,100})\1(\s*:\s*)(['\"])(.*?)\4")


def is_credential_name(name: str) -> bool:
    """True when a header or query parameter of this name carries a credential."""
    lowered = name.lower()
    if any(word in lowered for word in CREDENTIAL_WORDS):
        return True
    return any(word.lower().startswith("sig") for word in _WORD.findall(name))


def mask(text: str) -> str:
    """``text`` with the credentials it may carry replaced by ``***``.

    Hidden: a URL's userinfo (``user:***@``, or ``***@`` for a token alone), the values of
    query parameters whose names carry credentials (``?api_key=***``), the credentials after
    an authorization scheme (``Bearer ***``) and, in a dict repr, the value of a name that
    carries a credential.  The rest of the text is kept as it is.
    """
    if not text:
        return text
    text = _USERINFO.sub(_masked_userinfo, text)
    text = _PARAM.sub(_masked_param, text)
    text = _SCHEME_CREDENTIALS.sub(lambda m: f"{m.group(1)} {HIDDEN}", text)
    return _QUOTED_ITEM.sub(_masked_item, text)


def mask_url(url: str) -> str:
    """``mask`` for a value that is meant to be a URL, even one without a scheme
    (``user:pw@host/x`` shows as ``user:***@host/x``)."""
    if "//" not in url:
        netloc = re.match(r"[^/?#\s]*", url)
        if netloc and "@" in netloc.group():
            userinfo, _, rest = netloc.group().rpartition("@")
            url = f"{_hide_userinfo(userinfo)}@{rest}{url[netloc.end() :]}"
    return mask(url)


def mask_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """Headers as they may be shown: the value of every header whose name carries a
    credential (``Authorization``, ``Proxy-Authorization``, ``Cookie``, ``X-Api-Key``, ...) is
    ``***``; the other values go through ``mask``."""
    return {
        name: HIDDEN if is_credential_name(name) else mask(str(value))
        for name, value in headers.items()
    }


def _hide_userinfo(userinfo: str) -> str:
    user, colon, _ = userinfo.partition(":")
    return f"{user}:{HIDDEN}" if colon else HIDDEN


def _masked_userinfo(match: re.Match[str]) -> str:
    return f"//{_hide_userinfo(match.group(1))}@"


def _masked_param(match: re.Match[str]) -> str:
    sep, name, value = match.groups()
    if value and is_credential_name(unquote(name)):
        value = HIDDEN
    return f"{sep}{name}={value}"


def _masked_item(match: re.Match[str]) -> str:
    quote, name, colon, vquote, value = match.groups()
    if is_credential_name(name):
        value = HIDDEN
    return f"{quote}{name}{quote}{colon}{vquote}{value}{vquote}"


class RateLimitedLog:
    """One line per key per ``interval``, the rest counted and told with the next line.

    Keys name a kind of event (a status, a code, a route), never text a peer chose; as a
    second line of defence the state is bounded all the same: a key is cut to
    ``KEY_CHARS``, and past ``max_keys`` keys the idle ones are forgotten (their held-back
    count is told with the next line) and, if every key is still busy, a new key shares one
    ``OVERFLOW`` key, so a flood of distinct keys costs one line per interval.
    """

    KEY_CHARS = 100
    OVERFLOW = "(other kinds)"

    def __init__(
        self,
        logger: logging.Logger,
        interval: float = 60.0,
        max_keys: int = 256,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._logger = logger
        self._clock = clock
        self._interval = interval
        self._max_keys = max(1, max_keys)
        self._lock = threading.Lock()
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}
        self._forgotten = 0  # held back under keys forgotten since the last line

    def log(
        self,
        level: int,
        key: str,
        msg: str,
        *args: object,
        exc_info: bool = False,
        extra: Mapping[str, object] | None = None,
    ) -> None:
        now = self._clock()
        key = key[: self.KEY_CHARS]
        with self._lock:
            if key not in self._last and len(self._last) >= self._max_keys:
                self._forget_idle(now)
                if len(self._last) >= self._max_keys:
                    key = self.OVERFLOW
            last = self._last.get(key)
            if last is not None and now - last < self._interval:
                self._suppressed[key] = self._suppressed.get(key, 0) + 1
                return
            self._last[key] = now
            hidden = self._suppressed.pop(key, 0)
            forgotten, self._forgotten = self._forgotten, 0
        if hidden:
            msg += " (%d similar messages suppressed)"
            args = (*args, hidden)
        if forgotten:
            msg += " (%d earlier messages of other kinds suppressed)"
            args = (*args, forgotten)
        self._logger.log(level, msg, *args, exc_info=exc_info, extra=extra)

    def _forget_idle(self, now: float) -> None:
        """Drop the keys whose interval is over (under the lock)."""
        for key in [k for k, at in self._last.items() if now - at >= self._interval]:
            del self._last[key]
            self._forgotten += self._suppressed.pop(key, 0)

    @property
    def keys(self) -> int:
        """How many keys are remembered now."""
        with self._lock:
            return len(self._last)

    def reset(self, key: str) -> None:
        key = key[: self.KEY_CHARS]
        with self._lock:
            self._last.pop(key, None)
            self._suppressed.pop(key, None)


def counted(count: int, noun: str, nouns: str | None = None) -> str:
    """``count`` and its noun, singular for 1: ``counted(1, "batch", "batches")`` is
    "1 batch"; the plural defaults to ``noun + "s"``."""
    return f"{count} {noun if count == 1 else (nouns or noun + 's')}"
