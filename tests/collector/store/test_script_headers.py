"""Each Lua script's KEYS/ARGV header says what its Python request class sends.

The header (the comment block at the top of ``lua/<script>.lua``) names every key in its
second column and every argument before a colon (``-- ARGV[4]  min_delay_ms: ...``).  The
request class (a ``ScriptCall`` in ``collector/store``) builds them in ``keys()`` and
``args()``; here the names are read from that code (the attribute each element reads), so a
key or argument added, dropped or moved on one side and not the other fails this test.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import textwrap
from importlib.resources import files
from pathlib import Path

import pytest

import collector.store
from collector.store import SCRIPT_NAMES, ShardKeys
from collector.store._script_call import ScriptCall

# A header line: "-- KEYS[1]  inflight   zset ..." or "-- ARGV[4]  min_delay_ms: ...".
# The index is a number, or a range/rest ("1..N", "8...", "N+1", or none: every argument).
_HEADER_LINE = re.compile(r"^-- (KEYS|ARGV)(?:\[([^\]]+)\])?\s+(\S+)")
# Keys of a shard named by a method of the game: the header shows the key's form.
_EXAMPLE_GAME = "<game>"
_EXAMPLE_TAG = "{tag}"
# What the store appends to the arguments of a script that keeps a receipt (Store._call).
_RECEIPT_ARG = "receipt_ms"


def _request_classes() -> dict[str, type[ScriptCall[object]]]:
    store_dir = Path(collector.store.__file__).parent
    found: dict[str, type[ScriptCall[object]]] = {}
    for path in sorted(store_dir.glob("_*call*.py")):
        module = importlib.import_module(f"collector.store.{path.stem}")
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if (
                cls is not ScriptCall
                and issubclass(cls, ScriptCall)
                and cls.__module__ == module.__name__
            ):
                assert cls.script not in found, f"two request classes for {cls.script}"
                found[cls.script] = cls
    return found


REQUESTS = _request_classes()


def header(script: str) -> tuple[list[str], list[str]]:
    """The key names and argument names of a script's header, in order; a name that stands
    for any number of them (a range, or the rest) ends in ``*``."""
    text = (files("collector._lua") / f"{script}.lua").read_text(encoding="utf-8")
    names: dict[str, list[str]] = {"KEYS": [], "ARGV": []}
    for line in text.splitlines():
        if not line.startswith("--") and not line.startswith("#!"):
            break  # the header is the comment block the script starts with
        match = _HEADER_LINE.match(line)
        if not match:
            continue
        kind, index, name = match.groups()
        name = name.rstrip(":") if kind == "ARGV" else name
        listed = names[kind]
        if index is not None and index.isdigit():
            assert int(index) == len(listed) + 1, f"{script}: {kind}[{index}] out of order"
        elif index is None or ".." in index:
            name += "*"
        listed.append(name)
    return names["KEYS"], names["ARGV"]


def _returned(cls: type, method: str) -> ast.expr:
    source = textwrap.dedent(inspect.getsource(getattr(cls, method)))
    function = ast.parse(source).body[0]
    assert isinstance(function, ast.FunctionDef)
    returns = [node for node in ast.walk(function) if isinstance(node, ast.Return)]
    assert len(returns) == 1, f"{cls.__name__}.{method}: one return expected"
    assert returns[0].value is not None
    return returns[0].value


def _elements(value: ast.expr) -> list[ast.expr]:
    if isinstance(value, ast.Tuple):
        return list(value.elts)
    # tuple(self.batch_ids): every argument is one of them
    if (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Name)
        and value.func.id == "tuple"
        and len(value.args) == 1
    ):
        return [ast.Starred(value.args[0], ast.Load())]
    raise AssertionError(f"cannot read {ast.unparse(value)!r}")


def _field_read(node: ast.AST) -> str:
    """The request field (or policy field, or constant) an expression sends: the first field
    of the request (``self.x``) or of its policy (``p.x``) it reads, else the module constant
    (``WRITES_REMEMBERED_MS``) or the local (``refused``, built from the field of that name)."""
    nodes = list(ast.walk(node))
    for inner in nodes:
        if isinstance(inner, ast.Attribute):  # the outermost of self.policy.max_attempts
            root = inner.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in ("self", "p"):
                return inner.attr
    for inner in nodes:
        if isinstance(inner, ast.Name) and inner.id.isupper():
            return inner.id.lower()
    for inner in nodes:
        if isinstance(inner, ast.Name) and isinstance(inner.ctx, ast.Load):
            return inner.id
    raise AssertionError(f"no field read in {ast.unparse(node)!r}")


def _arg_name(node: ast.expr) -> str:
    if isinstance(node, ast.Starred):
        return _field_read(node.value) + "*"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "len":
        return _field_read(node.args[0]) + "_count"
    return _field_read(node)


def _key_name(node: ast.expr) -> str:
    if isinstance(node, ast.Starred):  # *(s.queue(g) for g in self.games)
        assert isinstance(node.value, ast.GeneratorExp)
        return _key_name(node.value.elt) + "*"
    if isinstance(node, ast.Call):
        return _built_key_name(node)
    if isinstance(node, ast.Attribute):
        if isinstance(node.value, ast.Name) and node.value.id == "self":
            return "?"  # a key the caller gives (a limiter's, the hold's): named for its role
        return node.attr
    raise AssertionError(f"cannot read key {ast.unparse(node)!r}")


def _built_key_name(call: ast.Call) -> str:
    func = call.func
    if isinstance(func, ast.Name) and func.id == "sibling":
        name = call.args[1]
        assert isinstance(name, ast.Constant) and isinstance(name.value, str)
        return name.value
    if isinstance(func, ast.Name) and func.id == "receipt_key":
        return "receipt"
    assert isinstance(func, ast.Attribute), ast.unparse(call)
    if func.attr == "receipt":
        return "receipt"
    # a game's key: shown in its form, q:<game>
    key: str = getattr(ShardKeys(0, _EXAMPLE_TAG), func.attr)(_EXAMPLE_GAME)
    return key.removeprefix(_EXAMPLE_TAG + ":")


def request_names(cls: type[ScriptCall[object]]) -> tuple[list[str], list[str]]:
    """The key names and argument names a request class builds, in order."""
    keys = [_key_name(node) for node in _elements(_returned(cls, "keys"))]
    args_value = _returned(cls, "args")
    args = [] if isinstance(args_value, ast.Tuple) and not args_value.elts else None
    if args is None:
        args = [_arg_name(node) for node in _elements(args_value)]
    if cls.receipt:
        args.append(_RECEIPT_ARG)
    return keys, args


def test_every_script_has_one_request_class() -> None:
    assert sorted(REQUESTS) == sorted(SCRIPT_NAMES)


@pytest.mark.parametrize("script", SCRIPT_NAMES)
def test_the_header_lists_what_the_request_sends(script: str) -> None:
    header_keys, header_args = header(script)
    keys, args = request_names(REQUESTS[script])
    assert len(header_keys) == len(keys), (header_keys, keys)
    for position, (said, built) in enumerate(zip(header_keys, keys, strict=True), 1):
        if built.startswith("?"):
            continue
        assert said == built, f"{script}: KEYS[{position}] is {said!r}, the request sends {built!r}"
    assert header_args == args, f"{script}: ARGV in the header {header_args}, sent {args}"
