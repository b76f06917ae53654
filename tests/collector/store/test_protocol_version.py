"""The producer protocol's version (docs/protocol.md): the collect call's last argument.  A call
built for another version is refused before anything is read or written, with an error that
names both versions; one of this version is stored.  On real servers, the calls sent by hand
as a producer in another language would send them."""

from __future__ import annotations

import re
from importlib.resources import files
from pathlib import Path

import orjson
import pytest
import redis

from collector.store import PROTOCOL_VERSION, Collect, KeySchema, encode_entry, lua_script
from tests.support.stored import keyspace, queue_entries

SCHEMA = KeySchema("proto", 2)
GAME = "game-1"
ROOT = Path(__file__).resolve().parents[3]


def call(seq: int = 1) -> Collect:
    entries = [encode_entry(1_700_000_000_000 + seq, orjson.dumps({"i": seq}))]
    return Collect(SCHEMA.for_game(GAME), GAME, entries, 100, 3600, writer="w1", seq=seq, low=seq)


def send(r: redis.Redis, keys: list[str], args: list[object]) -> object:
    script = lua_script("collect")
    r.script_load(script.text)
    return r.evalsha(script.sha, len(keys), *keys, *args)


def test_the_sdk_sends_the_version_the_script_speaks() -> None:
    text = (files("collector._lua") / "collect.lua").read_text(encoding="utf-8")
    [spoken] = re.findall(r"^local PROTOCOL_VERSION = '(\d+)'$", text, re.MULTILINE)
    assert int(spoken) == PROTOCOL_VERSION
    assert call().args()[-1] == PROTOCOL_VERSION
    [documented] = re.findall(
        r"^This is version (\d+) of the protocol", (ROOT / "docs/protocol.md").read_text(), re.M
    )
    assert int(documented) == PROTOCOL_VERSION


def test_a_call_of_this_version_is_stored(r: redis.Redis) -> None:
    c = call()
    reply = send(r, list(c.keys()), list(c.args()))
    assert c.parse(reply).repeat is False
    assert queue_entries(r, SCHEMA, GAME) == list(c.entries)


@pytest.mark.parametrize("version", ["2", "0", "17"])
def test_a_call_of_another_version_is_refused_naming_both(r: redis.Redis, version: str) -> None:
    c = call()
    args = [*c.args()[:-1], version]
    before = keyspace(r)
    with pytest.raises(redis.ResponseError) as refused:
        send(r, list(c.keys()), args)
    assert str(refused.value) == (
        f"collect: producer protocol version {version}, this script speaks version "
        f"{PROTOCOL_VERSION}: use a producer of protocol version {PROTOCOL_VERSION} "
        "(docs/protocol.md)"
    )
    assert keyspace(r) == before  # nothing written, not even a counter


def test_a_call_from_before_the_versions_is_refused_as_one_without_a_version(
    r: redis.Redis,
) -> None:
    """The arguments of the collect call before the version was added: 17, the checksum
    last."""
    c = call()
    args = list(c.args()[:-1])
    before = keyspace(r)
    with pytest.raises(redis.ResponseError, match=r"^collect: producer protocol sent none") as e:
        send(r, list(c.keys()), args)
    assert f"'{args[-1]}'" in str(e.value)
    assert f"this script speaks version {PROTOCOL_VERSION}" in str(e.value)
    assert keyspace(r) == before


def test_this_version_with_other_arguments_is_refused(r: redis.Redis) -> None:
    c = call()
    args = [*c.args()[:-1], "extra", PROTOCOL_VERSION]
    with pytest.raises(redis.ResponseError, match=r"has 18 arguments, the call sent 19"):
        send(r, list(c.keys()), args)
    assert queue_entries(r, SCHEMA, GAME) == []
