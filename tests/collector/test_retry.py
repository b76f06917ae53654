"""The retry policy in one place: the scripts' backoff is ``collector.retry.backoff``, and the
formula is written once in Lua and once in Python."""

from __future__ import annotations

import io
import math
import random
import re
import tokenize
from importlib.resources import files
from pathlib import Path

import redis

from collector.retry import MAX_RETRY_AFTER_SECONDS, backoff
from collector.store import script_text

ROOT = Path(__file__).resolve().parents[2]
BACKOFF_PART = (files("collector._lua") / "_backoff.lua").read_text(encoding="utf-8")

# Runs the Lua part on each case of five arguments (attempt, first, longest, draw, least),
# and answers each delay as text (a reply integer would hide a fraction).
_RUN_PART = (
    BACKOFF_PART
    + """
local out = {}
for i = 1, #ARGV, 5 do
  out[#out + 1] = string.format('%.17g', backoff_ms(tonumber(ARGV[i]), tonumber(ARGV[i + 1]),
                                tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3]),
                                tonumber(ARGV[i + 4])))
end
return out
"""
)


def cases() -> list[tuple[int, int, int, float, int]]:
    """Attempts from the first to far past any cap, delays of the [retry] range (1 ms to an
    hour), draws at the ends of [0, 1) and drawn as Nack draws them, Retry-After or none."""
    draw = random.Random(26).random
    attempts = [*range(1, 41), 63, 64, 999, 1000, 1001, 1100, 5000]
    firsts = [1, 7, 100, 1000, 3_600_000]
    longests = [1, 999, 60_000, 3_600_000]
    draws = [0.0, 1e-9, 0.25, 0.5, 0.999, 1 - 2**-53, draw(), draw(), draw()]
    leasts = [0, 1, 5_000, int(MAX_RETRY_AFTER_SECONDS * 1000)]
    return [
        (a, f, max(f, longest), d, least)
        for a in attempts
        for f in firsts
        for longest in longests
        for d in draws
        for least in leasts
    ]


def test_the_scripts_backoff_is_the_python_backoff(r: redis.Redis) -> None:
    """lua/_backoff.lua run in a real server gives, for every case, the whole ms of
    collector.retry.backoff (the draw passed in as the store passes it: repr)."""
    all_cases = cases()
    for start in range(0, len(all_cases), 2000):
        chunk = all_cases[start : start + 2000]
        args = [v for (a, f, longest, d, least) in chunk for v in (a, f, longest, repr(d), least)]
        replies = r.eval(_RUN_PART, 0, *args)
        for case, reply in zip(chunk, replies, strict=True):
            expected = math.floor(backoff(*case))
            assert float(reply) == expected, f"backoff{case}: Lua {reply}, Python {expected}"


def test_the_backoff_doubles_from_the_first_delay_up_to_the_longest() -> None:
    assert [backoff(a, 1_000, 5_000) for a in range(1, 6)] == [1000, 2000, 4000, 5000, 5000]
    assert backoff(3, 1_000, 60_000, draw=0.5) == 2000
    assert backoff(1, 1_000, 60_000, draw=0.5, least=7_000) == 7_000
    assert backoff(100_000, 0.01, 60.0) == 60.0  # no overflow however long the run of failures


def test_nack_and_settle_take_the_backoff_from_its_part() -> None:
    for script in ("nack", "settle"):
        text = script_text(script)
        assert BACKOFF_PART.rstrip("\n") in text
        assert text.count("backoff_ms(") == 2  # the part's definition, the script's one call


# -- one copy of the formula ----------------------------------------------------------------

# A power of two whose exponent is computed (a doubling per attempt): 2 ^ (n - 1),
# 2 ** failures, 2.0 ** min(...).  A power with a literal exponent (2 ^ 53) is a bound.
_DOUBLING = re.compile(r"\b2(?:\.0)?\s*(?:\*\*|\^)\s*[^\d\s]")


def python_code(path: Path) -> str:
    """The code of a Python file without its comments and strings (docstrings say the formula
    in words)."""
    tokens = tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline)
    return " ".join(t.string for t in tokens if t.type not in (tokenize.COMMENT, tokenize.STRING))


def lua_code(path: Path) -> str:
    return re.sub(r"--.*", "", path.read_text(encoding="utf-8"))


def copies_of_the_formula() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {"python": [], "lua": []}
    for package in ("collector", "reporter"):
        for path in sorted((ROOT / package).rglob("*.py")):
            found["python"] += [str(path.relative_to(ROOT))] * len(
                _DOUBLING.findall(python_code(path))
            )
    for path in sorted((ROOT / "lua").glob("*.lua")):
        found["lua"] += [str(path.relative_to(ROOT))] * len(_DOUBLING.findall(lua_code(path)))
    return found


def test_the_backoff_formula_is_written_once_in_lua_and_once_in_python() -> None:
    assert copies_of_the_formula() == {
        "python": ["collector/retry.py"],
        "lua": ["lua/_backoff.lua"],
    }
