"""Plain-text tables for the command line (``status``, ``dead list``, the demo summary), and
the JSON those commands print: nothing read from Redis or a peer reaches a terminal raw."""

from __future__ import annotations

import json
from collections.abc import Sequence

from collector.text import printable, printable_json


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], align: str = "") -> str:
    """Columns padded to their widest cell under a dashed rule.

    ``align`` has one letter per column, ``l`` or ``r``; by default the first column is
    left-aligned and the others right-aligned (names, then numbers)."""
    align = align or "l" + "r" * (len(headers) - 1)
    cells = [[printable(str(c)) for c in row] for row in (headers, *rows)]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = [
        "  ".join(
            c.ljust(w) if a == "l" else c.rjust(w)
            for c, w, a in zip(row, widths, align, strict=True)
        ).rstrip()
        for row in cells
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def json_text(value: object, indent: int | None = 2) -> str:
    """``value`` as JSON with every control character escaped (``json.dumps`` leaves DEL
    raw)."""
    return printable_json(json.dumps(value, indent=indent))
