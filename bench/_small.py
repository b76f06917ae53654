"""The ``--small`` option every bench script in this folder has, spelled and parsed one way.

``--small`` runs every phase of a script with sizes and durations cut down so that it ends in
seconds: it checks that the script still works (every phase runs, every table prints), which
``tests/test_benches.py`` does for each script.  Its figures are not benchmark figures, and
targets about speed or time are printed but do not set the exit status; checks that nothing
was lost still do.  Options given on the command line win over the small sizes.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence

FLAG = "--small"


def parse_with_small(
    parser: argparse.ArgumentParser,
    argv: Sequence[str] | None,
    small: Mapping[str, object],
    also: str = "",
) -> argparse.Namespace:
    """Add ``--small`` to ``parser`` (its help lists ``small``, the defaults it swaps in, and
    ``also``, what else it changes) and parse ``argv``; ``args.small`` says whether it was
    given."""
    sizes = ", ".join(
        [f"--{name.replace('_', '-')} {_show(value)}" for name, value in small.items()]
        + ([also] if also else [])
    )
    parser.add_argument(
        FLAG,
        action="store_true",
        help=f"a run of seconds that goes through every phase and prints every table, to "
        f"check the script works: {sizes or 'nothing else changes'}; options given "
        f"win. Its figures are not benchmark figures; speed and time targets are "
        f"printed but do not set the exit status",
    )
    args = parser.parse_args(argv)
    if args.small:
        parser.set_defaults(**small)
        args = parser.parse_args(argv)
    return args


def _show(value: object) -> str:
    if isinstance(value, list | tuple):
        return " ".join(_show(v) for v in value)
    return f"{value:g}" if isinstance(value, float) else str(value)
