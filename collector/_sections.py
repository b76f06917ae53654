"""How a config section is declared: fields that carry their allowed range, and a repr
with secrets masked.

A section is a frozen dataclass whose fields are declared with ``setting``; the loader
(``collector._config_loader``) reads the metadata to check each value.  Both the SDK's
sections and the store's ``RedisSettings`` are built this way, so this module sits below
both.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import field
from types import MappingProxyType
from typing import Any

from collector.logs import HIDDEN, mask, mask_headers, mask_url

# where(section, key): the file or environment variable a setting came from, for errors.
Where = Callable[[str, str], str]


def setting(
    default: Any,
    *,
    lo: float | None = None,
    hi: float | None = None,
    choices: tuple[str, ...] = (),
    secret: bool = False,
    renamed: Mapping[str, str] | None = None,
) -> Any:
    """A dataclass field with its allowed range; the loader reads the metadata.  ``renamed``
    maps old values to the choices that replaced them (accepted, with a notice)."""
    meta = {"lo": lo, "hi": hi, "choices": choices, "secret": secret, "renamed": renamed}
    if isinstance(default, Mapping):
        return field(default_factory=lambda: MappingProxyType(dict(default)), metadata=meta)
    return field(default=default, metadata=meta)


class MaskedRepr:
    """Sections print with secrets masked, like the whole config."""

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in section_dict(self).items())
        return f"{type(self).__name__}({fields})"


def _mask(value: Any) -> Any:
    """A secret setting as it may be shown: a URL with its credentials hidden, a header
    table with the values of credential headers hidden, any other text as ``***``."""
    if isinstance(value, str):
        if not value:
            return value
        return mask_url(value) if "://" in value or "@" in value else HIDDEN
    if isinstance(value, Mapping):
        return mask_headers(value)
    return value


def _shown(value: Any) -> Any:
    """A setting that is not secret, as it may be shown: text still goes through ``mask``
    (a base URL can carry a token in its query)."""
    if isinstance(value, str):
        return mask(value)
    if isinstance(value, Mapping):
        return {k: _shown(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_shown(v) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return section_dict(value)  # a table of sections: each with its secrets masked
    return value


def section_dict(section: Any) -> dict[str, Any]:
    return {
        f.name: (_mask if f.metadata.get("secret") else _shown)(getattr(section, f.name))
        for f in dataclasses.fields(section)
    }
