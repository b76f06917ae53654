"""Plain-text tables for the command line (``status``, ``dead list``, the demo summary)."""

from __future__ import annotations

from collections.abc import Sequence


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], align: str = "") -> str:
    """Columns padded to their widest cell under a dashed rule.

    ``align`` has one letter per column, ``l`` or ``r``; by default the first column is
    left-aligned and the others right-aligned (names, then numbers)."""
    align = align or "l" + "r" * (len(headers) - 1)
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) if a == "l" else c.rjust(w)
                       for c, w, a in zip(row, widths, align, strict=True)).rstrip()
             for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
