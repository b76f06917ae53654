"""The sink registry: one line per kind, and nobody else asks which kind the sink is.

A sink kind is a package of its own (``reporter/_sinks/<kind>/``) and one line in
``reporter._sinks.registry``; delivery, pacing, the service, the commands, the demo and the
config ask the sink what they need.  The static check below holds the code to that.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from reporter._config import ReporterConfig, sink_problems
from reporter._sinks.base import Sink
from reporter._sinks.registry import SINKS, make_sender, make_sink
from tests.support.entries import make_config

ROOT = Path(__file__).resolve().parents[3]
KIND_PACKAGES = ROOT / "reporter" / "_sinks"
KIND_TESTS = ROOT / "tests" / "reporter" / "sinks"  # a kind's tests, in the folder of its name
THIS_TEST = Path(__file__).resolve()
REGISTRY = KIND_PACKAGES / "registry.py"
# What a kind's config needs to load (its own section's required keys).
NEEDS = {"nppa": {"nppa": {"app_id": "app", "secret_key": "0" * 32}}}


def kind_names() -> set[str]:
    return {path.name for path in KIND_PACKAGES.iterdir() if (path / "sink.py").exists()}


def kind_classes() -> set[str]:
    """Every class a kind's package defines (JsonSink, NppaSender, ...)."""
    names = set()
    for kind in kind_names():
        for path in (KIND_PACKAGES / kind).glob("*.py"):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            names |= {node.name for node in tree.body if isinstance(node, ast.ClassDef)}
    return names


def asks_for_a_kind(path: Path, kinds: set[str], classes: set[str], product: bool) -> Iterator[str]:
    """The places in ``path`` that ask which kind a sink is: a comparison of something named
    ``kind`` with a kind's name, an ``isinstance``/``issubclass``/``type() is`` of a kind's
    class, a lookup of the registry by a kind's name, and (in the product code) an import
    from a kind's package."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    where = path.relative_to(ROOT) if ROOT in path.parents else path.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and compares_a_kind(node, kinds, classes):
            yield f"{where}:{node.lineno}: {ast.unparse(node)}"
        elif isinstance(node, ast.Call) and ast.unparse(node.func) in ("isinstance", "issubclass"):
            named = {ast.unparse(n).split(".")[-1] for n in ast.walk(node.args[1])}
            if named & classes:
                yield f"{where}:{node.lineno}: {ast.unparse(node)}"
        elif isinstance(node, ast.Subscript) and ast.unparse(node.value).endswith("SINKS"):
            if isinstance(node.slice, ast.Constant) and node.slice.value in kinds:
                yield f"{where}:{node.lineno}: {ast.unparse(node)}"
        elif product and isinstance(node, ast.ImportFrom) and node.module:
            parts = node.module.split(".")
            if parts[:2] == ["reporter", "_sinks"] and len(parts) > 2 and parts[2] in kinds:
                yield f"{where}:{node.lineno}: from {node.module} import ..."


def compares_a_kind(node: ast.Compare, kinds: set[str], classes: set[str]) -> bool:
    """``x.kind == "nppa"``, ``kind in ("json", "print")``, ``type(x) is JsonSink``."""
    sides = [node.left, *node.comparators]
    names = [ast.unparse(s) for s in sides]
    literals = {
        c.value
        for s in sides
        for c in ast.walk(s)
        if isinstance(c, ast.Constant) and isinstance(c.value, str)
    }
    if literals & kinds and any("kind" in n.lower() for n in names):
        return True
    return any(n.split(".")[-1] in classes for n in names) and any(
        isinstance(s, ast.Call) and ast.unparse(s.func) == "type" for s in sides
    )


def places_asking_for_a_kind() -> list[str]:
    kinds, classes = kind_names(), kind_classes()
    found = []
    for tree in ("reporter", "tests", "bench"):
        for path in sorted((ROOT / tree).rglob("*.py")):
            own = path.parent.parent in (KIND_PACKAGES, KIND_TESTS) and path.parent.name in kinds
            if not own:
                found += asks_for_a_kind(path, kinds, classes, product=tree == "reporter")
    return found


def test_every_kind_package_is_one_line_of_the_registry() -> None:
    assert set(SINKS) == kind_names()
    for kind, sink in SINKS.items():
        assert issubclass(sink, Sink) and sink.kind == kind
        assert sink.__module__ == f"reporter._sinks.{kind}.sink"


def test_only_the_registry_and_its_test_ask_which_kind_a_sink_is() -> None:
    """Outside a kind's own package (and its tests, ``tests/reporter/sinks/<kind>/``), at most
    two places know kinds by name: the registry and this test (which checks what the registry
    builds)."""
    found = places_asking_for_a_kind()
    files = {place.split(":")[0] for place in found}
    assert files <= {str(REGISTRY.relative_to(ROOT)), str(THIS_TEST.relative_to(ROOT))}, "\n".join(
        found
    )


def test_no_kind_imports_another_kind() -> None:
    """What kinds share is below them (reporter._senders, reporter._sinks.base): a kind's
    package is all there is of it."""
    kinds = kind_names()
    found = []
    for kind in sorted(kinds):
        for path in sorted((KIND_PACKAGES / kind).glob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ImportFrom) and node.module:
                    parts = [*node.module.split("."), ""]
                    if parts[:2] == ["reporter", "_sinks"] and parts[2] in kinds - {kind}:
                        found.append(f"{path.relative_to(ROOT)}: {node.module}")
    assert found == []


def test_the_check_sees_each_way_of_asking(tmp_path: Path) -> None:
    """The scan would notice each way of asking it forbids."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from reporter._sinks.nppa.sender import NppaSender\n"
        'if config.sink.kind == "nppa": pass\n'
        'if sink_kind in ("json", "print"): pass\n'
        "if isinstance(sender, NppaSender): pass\n"
        "if type(sink) is JsonSink: pass\n"
        'SINKS["print"]\n',
        encoding="utf-8",
    )
    found = list(asks_for_a_kind(sample, kind_names(), kind_classes(), product=True))
    assert [int(place.split(":")[1]) for place in found] == [1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize("kind", sorted(SINKS))
def test_a_config_of_each_kind_builds_its_sink(kind: str) -> None:
    config = make_config("redis://127.0.0.1:6379/0", sink={"kind": kind}, **NEEDS.get(kind, {}))
    assert isinstance(config, ReporterConfig)
    assert type(make_sink(config)) is SINKS[kind]


def test_the_print_config_needs_no_url_and_builds_the_print_sender() -> None:
    from reporter._sinks.print.sender import PrintSender

    config = make_config("redis://127.0.0.1:6379/0", sink={"kind": "print"})
    assert type(make_sink(config)) is SINKS["print"]
    assert sink_problems(config) == []
    sender = make_sender(config)
    assert isinstance(sender, PrintSender)
    assert "standard output" in sender.describe()
