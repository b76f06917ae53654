"""collector.nppa: the caller's helper refuses, naming the field, what the interface would."""

from __future__ import annotations

import re
from typing import Any

import pytest

from collector import nppa

PI = "1" * 38
OT = 1_732_241_234


def test_login_and_logout_build_the_items() -> None:
    assert nppa.login(si="s1", ot=OT, pi=PI) == {"si": "s1", "bt": 1, "ot": OT, "ct": 0, "pi": PI}
    assert nppa.logout(si="s1", ot=OT, di="device-1") == {
        "si": "s1",
        "bt": 0,
        "ot": OT,
        "ct": 2,
        "di": "device-1",
    }
    assert nppa.behavior(si="x" * 32, bt=1, ot=OT, ct=2, di="d" * 32)["di"] == "d" * 32


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"si": ""}, "si", "1 to 32 bytes"),
        ({"si": "é" * 17}, "si", "1 to 32 bytes"),  # 34 bytes in UTF-8
        ({"si": 5}, "si", "session id"),
        ({"bt": 2}, "bt", "1 (login) or 0"),
        ({"bt": True}, "bt", "1 (login) or 0"),
        ({"ct": 1}, "ct", "0 (verified"),
        ({"ot": OT * 1000}, "ot", "looks like milliseconds"),
        ({"ot": float(OT)}, "ot", "whole seconds"),
        ({"ot": "2024-01-01"}, "ot", "whole seconds"),
        ({"ot": -5}, "ot", "seconds since the epoch"),
        ({"pi": "short"}, "pi", "38-character"),
        ({"pi": None}, "pi", "needs pi"),
        ({"ct": 2, "pi": None}, "di", "needs di"),
        ({"ct": 2, "pi": None, "di": "x" * 33}, "di", "1 to 32"),
    ],
)
def test_a_bad_field_is_named(fields: dict[str, Any], field: str, words: str) -> None:
    event: dict[str, Any] = {"si": "s1", "bt": 1, "ot": OT, "ct": 0, "pi": PI, **fields}
    kwargs = {k: v for k, v in event.items() if v is not None}
    with pytest.raises(ValueError, match=rf"^{field}: .*{re.escape(words)}"):
        nppa.behavior(**kwargs)
    with pytest.raises(ValueError, match=rf"^{field}: "):
        nppa.check_item(event)


def test_the_shorthands_need_exactly_one_of_pi_and_di() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        nppa.login(si="s", ot=OT)
    with pytest.raises(ValueError, match="exactly one"):
        nppa.logout(si="s", ot=OT, pi=PI, di="d")


def test_check_item_keeps_only_the_interfaces_fields() -> None:
    event = {"si": "s", "bt": 0, "ot": OT, "ct": 0, "pi": PI, "di": "ignored", "extra": 1}
    assert nppa.check_item(event) == {"si": "s", "bt": 0, "ot": OT, "ct": 0, "pi": PI}
