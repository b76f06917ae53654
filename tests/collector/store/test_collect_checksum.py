"""The collect call's content checksum (``lua/collect.lua``, ARGV[17]) as the SDK computes it:
the CRC-32 of the game, the counts and the entries, taken in pieces that CPython's zlib does
not let go of the GIL for."""

from __future__ import annotations

import zlib

import pytest

from collector.store._collect_call import CRC_PIECE_BYTES, content_checksum

# CPython's zlib.crc32 lets go of the GIL for a buffer longer than this (zlibmodule.c).
ZLIB_GIL_BYTES = 5 * 1024


@pytest.mark.parametrize(
    "size", [0, 1, CRC_PIECE_BYTES - 1, CRC_PIECE_BYTES, CRC_PIECE_BYTES + 1, 300_001]
)
def test_the_checksum_is_the_crc32_of_the_head_and_the_entries(size: int) -> None:
    blob = bytes(i % 251 for i in range(size))
    head = b"game-1\n3 4 5\n"
    assert content_checksum("game-1", 3, 4, 5, blob) == f"{zlib.crc32(head + blob):08x}"


def test_no_piece_is_long_enough_for_zlib_to_let_go_of_the_gil(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A flusher that lets go of the GIL beside a busy collect() loop waits up to the switch
    interval to get it back, for every call of a round."""
    lengths: list[int] = []
    crc32 = zlib.crc32

    def recording(data: bytes, value: int = 0) -> int:
        lengths.append(len(data))
        return crc32(data, value)

    monkeypatch.setattr(zlib, "crc32", recording)
    content_checksum("game-1", 0, 0, 0, b"x" * 300_000)
    assert sum(lengths) > 300_000
    assert max(lengths) <= ZLIB_GIL_BYTES
