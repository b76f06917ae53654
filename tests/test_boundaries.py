"""The packages' boundaries: the reporter goes through collector's public doors only, the SDK
knows nothing of the reporter, and the SDK proper uses only the store calls it makes."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The batch life cycle belongs to the reporter; the SDK only stores events.
REPORTER_ONLY_CALLS = {
    "Ack",
    "Claim",
    "Extend",
    "Nack",
    "Purge",
    "Reap",
    "Release",
    "Replay",
    "ShardLease",
    "TakeRetries",
}


def imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, names) of every import statement in ``path``."""
    out: list[tuple[str, list[str]]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.append((node.module, [alias.name for alias in node.names]))
    return out


def private(module: str) -> bool:
    return any(part.startswith("_") for part in module.split(".")[1:])


def test_the_reporter_imports_no_private_collector_module() -> None:
    found = [
        f"{path.relative_to(ROOT)}: {module}"
        for path in sorted((ROOT / "reporter").rglob("*.py"))
        for module, _ in imports(path)
        if module.startswith("collector") and private(module)
    ]
    assert found == []


def test_the_collector_never_imports_the_reporter() -> None:
    found = [
        f"{path.relative_to(ROOT)}: {module}"
        for path in sorted((ROOT / "collector").rglob("*.py"))
        for module, _ in imports(path)
        if module.split(".")[0] == "reporter"
    ]
    assert found == []


def test_the_sdk_uses_no_batch_life_cycle_call() -> None:
    sdk = [p for p in (ROOT / "collector").glob("*.py")]
    found = [
        f"{path.relative_to(ROOT)}: {name}"
        for path in sdk
        for module, names in imports(path)
        if module.startswith("collector.store")
        for name in names
        if name in REPORTER_ONLY_CALLS
    ]
    assert found == []


def test_importing_the_sdk_loads_nothing_of_the_reporter() -> None:
    code = (
        "import sys, collector, collector.store, collector.config; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'reporter'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.strip() == "[]"


def test_the_scan_sees_private_imports(tmp_path: Path) -> None:
    """The checks above would notice the imports they forbid."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from collector._config import X\nimport collector.store._keys\n"
        "from collector.store import Claim\nimport reporter._commands.cli\n"
    )
    found = imports(sample)
    assert [m for m, _ in found if private(m)] == [
        "collector._config",
        "collector.store._keys",
        "reporter._commands.cli",
    ]
    assert ("collector.store", ["Claim"]) in found
