"""The Node.js producer (``clients/node``): its own tests under ``node --test`` against a real
server, its shipped copy of the collect script, and the conformance suite through its line
adapter.  Node.js 20 or newer and npm must be on PATH (``npm ci`` fetches its one
dependency, ioredis, as package-lock.json pins it); without them these tests fail, saying so."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from collector.store import lua_script
from reporter._conformance.suite import CASES
from tests.support.servers import default_binary

ROOT = Path(__file__).resolve().parents[2]
NODE_DIR = ROOT / "clients" / "node"


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(
            f"{name} is not on PATH: the Node.js producer's tests need Node.js 20 or newer and "
            "npm (https://nodejs.org, or apt-get install nodejs npm)"
        )
    return path


@pytest.fixture(scope="module")
def node() -> str:
    """node, with the package's dependencies installed as package-lock.json pins them."""
    node = tool("node")
    version = subprocess.run(
        [node, "--version"], capture_output=True, text=True, check=True
    ).stdout.strip()
    if int(version.lstrip("v").split(".")[0]) < 20:
        pytest.fail(f"the Node.js producer needs Node.js 20 or newer, found {version}")
    done = subprocess.run(
        [tool("npm"), "ci", "--no-audit", "--no-fund", "--prefer-offline"],
        cwd=NODE_DIR,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(f"npm ci in clients/node failed:\n{done.stdout}{done.stderr}")
    return node


def test_the_shipped_script_is_the_one_the_python_sdk_loads() -> None:
    """The package ships the expansion of lua/collect.lua (npm run build makes it)."""
    shipped = (NODE_DIR / "lua" / "collect.lua").read_text(encoding="utf-8")
    assert shipped == lua_script("collect").text, (
        "clients/node/lua/collect.lua is stale: run `npm run build` in clients/node"
    )


def test_the_node_tests_pass(node: str) -> None:
    done = subprocess.run(
        [node, "--test", "--test-timeout=60000", "test/"],
        cwd=NODE_DIR,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "TELEMETRY_TEST_REDIS_SERVER": default_binary()},
        check=False,
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert "# fail 0" in done.stdout


def test_the_node_producer_conforms(node: str) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "reporter",
            "conformance",
            "--",
            node,
            str(NODE_DIR / "bin" / "conformance-producer.js"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    verdicts = [
        line.split()[:2] for line in done.stdout.splitlines() if line[:4] in ("PASS", "FAIL")
    ]
    assert verdicts == [["PASS", name] for name in CASES]
