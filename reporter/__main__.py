"""``python -m reporter`` is the same as ``telemetry-reporter``."""

import sys

from reporter._commands.cli import main as _main


def main() -> None:
    sys.exit(_main())


if __name__ == "__main__":
    main()
