"""``collector.logs.counted``: a count with its noun, singular only for one."""

from __future__ import annotations

from collector.logs import counted


def test_one_is_singular_every_other_count_plural() -> None:
    assert counted(1, "reporter") == "1 reporter"
    assert counted(0, "reporter") == "0 reporters"
    assert counted(2, "attempt") == "2 attempts"
    assert counted(1, "batch", "batches") == "1 batch"
    assert counted(16, "batch", "batches") == "16 batches"
